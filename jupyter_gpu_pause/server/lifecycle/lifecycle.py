"""The one service the handlers call: the session table, admission of pauses and resumes, and
what happens to a session when its kernel goes away.

Each operation is its own class (``pause.Pause``, ``resume.Resume``, ``check.DryRun``) reading
as one straight line and writing its session's states; this module admits them (state checks
under one lock, so two requests never start two operations) and gives each its context
(``context.py``): what it may use, built here once and complete.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable

from ...kernel.protocol import USAGE, CheckReply, NoArgs
from ...store.format import check_checkpoint_id, iso
from ..capacity import Capacity, CapacityProvider, CapacityQueue
from ..capacity.gpu_sessions import holders, is_gpu_session
from ..capacity.slots import RestoreSlots
from ..kernels.bridge import KernelBridge
from ..kernels.spares import WarmKernels
from ..state.asker import Asker
from ..state.checkpoints import Checkpoints
from ..state.errors import BadRequest, GpuPauseError, NotFound, Unavailable, WrongState
from ..state.event_types import EventType
from ..state.model import RUNNING, Session, SessionState
from ..state.records import Records
from ..state.views import session_json
from ..suspend.kept import KeptKernels
from ..suspend.suspender import Suspender
from ..suspend.tier import Tier
from .check import DryRun
from .context import (
    CheckContext,
    EventOutbox,
    KernelUse,
    PauseContext,
    RecoveryContext,
    ResumeAdmission,
    ResumeContext,
    StoreUpkeep,
    UpkeepContext,
)
from .inplace import ResumeInPlace
from .operations import DEVICES, Op, Operations, PauseSettings
from .pausable import UNPAUSABLE_REASONS
from .pause import Pause
from .rebuild import Rebuild, read_result, tell
from .recovery import Recovery
from .resume import Resume, ResumeOptions
from .sessions import SessionTable

STOP_GRACE = 15.0  # seconds a stopping server waits for in-flight operations
STARTUP_WAIT = 30.0  # seconds a request waits for the records to load before a 503
# seconds a notebook's kernel has to say whether it ran code (a resume's admission waits for
# it; one that is busy with a cell the server did not see ran code anyway)
USAGE_WAIT = 20.0


class Lifecycle:
    def __init__(
        self,
        *,
        bridge: KernelBridge,
        records: Records,
        checkpoints: Checkpoints,
        provider: CapacityProvider,
        queue: CapacityQueue | None,
        settings: PauseSettings,
        log,
        gpu_kernelspecs: tuple[str, ...] = (),
        resume_timeout: float = 0,
        configured_provider: str | None = None,
        restore_slots: int = 0,
        rescan_interval: float = 0,
        kernel_use: KernelUse | None = None,
        outbox: EventOutbox | None = None,
        warm_kernels: bool = False,
        upkeep: Callable[[UpkeepContext], StoreUpkeep] | None = None,
        tier: Tier | None = None,
        suspender: Suspender | None = None,
        keep_suspended_seconds: float = 0.0,
    ):
        """``kernel_use``: what people did in which kernel (the monitor's activity tracker;
        None: every kernel counts as used and busy only by its own state); ``outbox``: records
        each event together with its webhook deliveries (None: the event alone); ``warm_kernels``:
        keep a warm kernel per kernelspec of a paused session (``spares.py``); ``upkeep``:
        builds the store's upkeep (retention after pauses, GC intents) from what it may read;
        ``tier``: the pause tier in force (server/suspend/tier.py) and ``suspender`` its driver
        when it is ``suspend``; ``keep_suspended_seconds``: how long a suspended kernel whose
        checkpoint is written is kept for a resume in place."""
        self.tier = tier or Tier("checkpoint", "suspend in place is not configured")
        self.suspender = suspender if self.tier.suspends else None
        self.kept = (
            KeptKernels(log) if self.suspender is not None and keep_suspended_seconds > 0 else None
        )
        self.rescan_interval = rescan_interval  # seconds between two reads of the store
        self.bridge, self.records, self.checkpoints = bridge, records, checkpoints
        self.settings, self.log = settings, log
        self.gpu_kernelspecs, self.resume_timeout = tuple(gpu_kernelspecs), resume_timeout
        self.capacity = Capacity(
            provider,
            queue,
            self._gpu_holders,
            log,
            configured_provider,
            live=self._live,
        )
        self.ops = Operations(self._rescue, log)
        # resumes restoring at once (0: twice the CPUs this server may use); see slots.py
        self.restore_slots = RestoreSlots(restore_slots)
        self.table = SessionTable(
            bridge=bridge,
            records=records,
            ops=self.ops,
            log=log,
            on_change=self.capacity.changed,
            kernel_use=kernel_use,
            outbox=outbox,
        )
        # Admission (state checks up to registering the operation) awaits I/O; one lock keeps
        # two requests from both passing the checks and starting two operations.
        self._admission = asyncio.Lock()
        # the budgets' say on a resume (``budgets.Budgets.admit``; None: no budgets), asked
        # under the lock, so no two resumes pass one budget's last minutes
        self.resume_admission: ResumeAdmission | None = None
        self._auto_rebuilds: set[asyncio.Future] = set()
        self.kernel_use = kernel_use
        self.warm = (
            WarmKernels(bridge, log, lambda: list(self.table.sessions.values()), self._elsewhere)
            if warm_kernels and bridge.supports_warm_kernels  # not for a gateway's kernels
            else None
        )
        self.maintenance = (
            upkeep(UpkeepContext(self.table, checkpoints, self.busy_sessions, self.op_task))
            if upkeep
            else None
        )
        self._pause_ctx = PauseContext(
            bridge=bridge,
            table=self.table,
            checkpoints=checkpoints,
            capacity=self.capacity,
            settings=settings,
            log=log,
            warm=self.warm,
            upkeep=self.maintenance,
            gpu_session=self.gpu_session,
            suspender=self.suspender,
            kept=self.kept,
            keep_seconds=keep_suspended_seconds,
        )
        self._resume_ctx = ResumeContext(
            bridge=bridge,
            table=self.table,
            checkpoints=checkpoints,
            capacity=self.capacity,
            settings=settings,
            log=log,
            warm=self.warm,
            restore_slots=self.restore_slots,
            resume_timeout=resume_timeout,
            gpu_session=self.gpu_session,
            auto_rebuild=self.auto_rebuild,
            suspender=self.suspender,
        )
        self._check_ctx = CheckContext(
            bridge=bridge,
            settings=settings,
            ops=self.ops,
            user_cell_running=self.user_cell_running,
            require_agent=self.require_agent,
        )
        self._recovery_ctx = RecoveryContext(
            table=self.table,
            records=records,
            checkpoints=checkpoints,
            settings=settings,
            ops=self.ops,
            log=log,
        )
        # Jupyter serves requests before extensions finish starting; until the records are
        # loaded, an empty session list would tell a user their paused work is gone.
        self._started = asyncio.Event()
        self.start_error: str | None = None
        self._recovery: asyncio.Future | None = None

    # -- startup, sync -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load records, repair what a stopped server left half-done, load the signing key."""
        what = "its records (GpuPauseApp.db_path)"
        try:
            await self.table.load()
            what = "the capacity queue (GpuPauseApp.capacity_queue_url)"
            await self.capacity.start()
        except Exception as e:
            self.start_error = f"could not load {what}: {type(e).__name__}: {e}"
            raise
        finally:
            self._started.set()
        problem = await self.checkpoints.prepare_key()
        if problem:
            self.log.critical("jupyter_gpu_pause: %s", problem)
        # The store is the source of truth: read it in the background (a slow store must not
        # hold the API), bringing back sessions the records lost.
        self._recovery = asyncio.ensure_future(self._recover())
        if self.warm is not None:
            self.warm.start()

    async def _recover(self) -> None:
        again = False
        while True:
            try:
                await Recovery(self._recovery_ctx, again).run()
            except Exception:
                self.log.exception(
                    "jupyter_gpu_pause: could not compare the records with the store"
                )
            if self.rescan_interval <= 0:
                return
            again = True
            await asyncio.sleep(self.rescan_interval)

    async def wait_started(self) -> None:
        """Hold a request until the records are loaded; refuse every one if loading failed."""
        try:
            await asyncio.wait_for(self._started.wait(), STARTUP_WAIT)
        except asyncio.TimeoutError:
            raise Unavailable(
                f"jupyter_gpu_pause is still loading its records after {STARTUP_WAIT:.0f} s "
                "(GpuPauseApp.db_path on a slow disk?); try again shortly",
            ) from None
        if self.start_error:
            raise Unavailable(
                f"jupyter_gpu_pause {self.start_error}; no session was changed. An "
                "administrator must fix it and restart the server",
            )

    async def stop_warm_kernels(self) -> None:
        """Shut the warm kernels down (first thing a stopping server does after its
        shutdown checkpoint: they hold no one's work)."""
        if self.warm is not None:
            await self.warm.stop()

    async def stop(self) -> None:
        """Cancel what can still be cancelled; give the rest a bounded time to finish."""
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
        await self.ops.drain(STOP_GRACE)
        if self.kept is not None:  # their checkpoints are written: stop them, paused
            await self.kept.let_all_go()
        await self.capacity.stop()
        if self.suspender is not None:
            self.suspender.close()

    async def cull(self, session_id: str, reason: str) -> None:
        """Shut the kernel down without a checkpoint (an admin's ``cull`` policy)."""
        s = self.table.get(session_id)
        kernel_id = s.kernel_id
        if s.state not in RUNNING or kernel_id is None or await self._settled(s):
            raise WrongState(f"cannot cull: the session is {s.state}")
        await self.bridge.shutdown(kernel_id)
        await self.table.record_event(
            s,
            EventType.CULLED,
            reason,
            kernel_id=kernel_id,
            message=f"{s.path}: kernel shut down by {reason} without a checkpoint; "
            "its variables are lost",
        )
        await self.table.kernel_gone(s)

    async def _rescue(self, op: Op, escaped: BaseException | None) -> None:
        """The last resort when an operation ended and left its session in flight.

        A pause that never reached its commit point, with its kernel still running, is
        ``active`` again; anything else is ``failed``, saying whether a checkpoint remains.
        """
        s = op.session
        why = f"{type(escaped).__name__}: {escaped}" if escaped else "it ended without a result"
        kernel_kept = (
            op.kind == "pause" and not op.committed and self.bridge.is_running(s.kernel_id)
        )
        text = f"the {op.kind} stopped unexpectedly ({why})"
        if kernel_kept:
            text += "; the kernel was not touched"
        await self.table.fail(
            s,
            EventType.failed(op.kind),
            op.reason,
            state=SessionState.ACTIVE if kernel_kept else SessionState.FAILED,
            reason="internal",
            text=text,
            intact=kernel_kept or bool(s.checkpoint),
            **(op.asker.detail() if op.asker else {}),
        )

    # -- shared by the operations ------------------------------------------------------------
    def require_agent(self, s: Session, verb: str) -> str:
        """The session's kernel runs and speaks Python, so our agent can run in it: its id."""
        language = self.bridge.language(s.kernel_name)
        if language != "python":
            raise WrongState(f"pause is not supported for {language} kernels", "unsupported-kernel")
        kernel_id = s.kernel_id
        if kernel_id is None or not self.bridge.is_running(kernel_id):
            raise WrongState(f"cannot {verb}: the session's kernel is not running", "no-kernel")
        return kernel_id

    def gpu_session(self, s: Session) -> bool:
        return is_gpu_session(s, self.gpu_kernelspecs)

    def _live(self) -> set[str]:
        """Sessions this server runs: a kernel, or an operation under way."""
        return {
            s.id
            for s in self.table.sessions.values()
            if s.state not in (SessionState.PAUSED, SessionState.FAILED)
        }

    def _elsewhere(self) -> dict[str, str]:
        return self.capacity.elsewhere

    def _gpu_holders(self):
        return holders(self.table.sessions.values(), self.gpu_kernelspecs, self.bridge.is_running)

    async def describe_capacity(self) -> dict:
        out = await self.capacity.describe({s.id: s.path for s in self.table.sessions.values()})
        out["warm_kernels"] = self.warm.describe() if self.warm else []
        out["tier"] = self.tier.to_json()
        out["warm_kernels_checked"] = iso(self.warm.checked_at) if self.warm else None
        return out

    def user_cell_running(self, kernel_id: str) -> bool:
        if not self.bridge.is_running(kernel_id):
            return False  # the caller's state checks say why
        if self.kernel_use and self.kernel_use.is_busy(kernel_id):
            return True
        busy = self.bridge.execution_state(kernel_id) == "busy"
        return busy and not self.bridge.agent_running(kernel_id)

    async def ran_nothing(self, kernel_id: str) -> bool:
        """The kernel has run no code of a person's: a resume may restore into it unasked.

        Asked of the kernel itself (its execution count), since code may have run before the
        server watched it; any doubt (no answer, an operation under way) is a no. The restore
        asks again as it begins (``ResumeOptions.adopt``): a cell sent meanwhile is never
        overwritten.
        """
        use = self.kernel_use
        if use is None or use.ran_code(kernel_id) or kernel_id in self.ops.kernel_ids():
            return False
        try:
            asked = self.bridge.run_agent(kernel_id, USAGE, NoArgs())
            cells = (await asyncio.wait_for(asked, USAGE_WAIT)).get("cells_run")
        except (GpuPauseError, asyncio.TimeoutError) as e:
            self.log.info("jupyter_gpu_pause: kernel %s did not say what it ran: %r", kernel_id, e)
            return False
        if cells != 0:
            use.saw_code(kernel_id)
        return cells == 0

    # -- queries -------------------------------------------------------------------------------
    async def list(self, path: str | None = None, kernel_id: str | None = None) -> list[dict]:
        await self.table.refresh()
        await self.ops.published()  # a state shown has its event recorded
        found = [
            s
            for s in self.table.sessions.values()
            if (path is None or s.path == path) and (kernel_id is None or s.kernel_id == kernel_id)
        ]
        return [self.view(s) for s in sorted(found, key=lambda s: (s.path, s.created))]

    async def session(self, session_id: str) -> dict:
        """One session as ``list`` shows it (NotFound when there is none)."""
        await self.table.refresh()
        await self.ops.published()
        return self.view(self.table.get(session_id))

    def view(self, s: Session) -> dict:
        kid = s.kernel_id if self.bridge.is_running(s.kernel_id) else None
        running = kid is not None
        kernel = self.bridge.kernel(kid) if kid is not None else None
        busy = self.kernel_use.is_busy(kid) if kid is not None and self.kernel_use else None
        notice = self.checkpoints.key_problem if s.checkpoint and not running else None
        elsewhere = None if running else self.capacity.elsewhere.get(s.id)
        return session_json(
            s, kernel, busy, notice, self.gpu_session(s), elsewhere, self.table.waiting_kernel(s)
        )

    async def kernel_session(self, kernel_id: str) -> Session:
        """The session of a running kernel (for the kernel's own requests)."""
        await self.table.refresh()
        s = self.table.session_for_kernel(kernel_id)
        if s is None and kernel_id in self.table.waiting_kernels and self.kernel_use is not None:
            # a paused notebook's new kernel asking from a cell: it runs code, it is a session
            self.kernel_use.saw_code(kernel_id)
            await self.table.refresh()
            s = self.table.session_for_kernel(kernel_id)
        if s is None:
            raise NotFound(
                "the server knows no notebook session for this kernel", "unknown-session"
            )
        return s

    async def list_checkpoints(self, session_id: str) -> builtins.list[dict]:
        self.table.get(session_id)
        return await self.checkpoints.summaries(session_id)

    async def events(self, since=None, session_id=None) -> builtins.list[dict]:
        await self.ops.published()  # an outcome already shown is in them
        return await self.records.events(since=since, session_id=session_id)

    def busy_sessions(self) -> set[str]:
        """Sessions with a pause or resume in flight."""
        return self.ops.session_ids()

    def kernels_in_flight(self) -> set[str]:
        """Kernels an operation is pausing or restoring into."""
        return self.ops.kernel_ids()

    def capacity_changed(self) -> None:
        """Something the node's GPU use is computed from changed (a new GPU reading)."""
        self.capacity.changed()

    def op_task(self, session_id: str):
        op = self.ops.get(session_id)
        return op.task if op else None

    # -- pause ---------------------------------------------------------------------------------
    async def pause(
        self, session_id: str, reason: str = "user", asker: Asker | None = None
    ) -> Session:
        """Start (or join) a pause; returns at once with the session in ``pausing``.

        ``asker``: the admin it is paused for (``reason`` "admin"); its events and the paused
        session's message name them. Joining a pause already running for no one, the asker
        becomes its asker; a session already paused is left as it is.

        The table is read anew first: a notebook renamed a moment ago is paused under its new
        path (the checkpoint records it, and its kernel is gone once the pause ends)."""
        await self.table.refresh()
        async with self._admission:
            s = self.table.get(session_id)
            op = await self._settled(s)
            if op and op.kind == "pause":  # join the running pause
                if asker is not None and op.asker is None:
                    op.asker = asker
                elif asker is not None and op.asker != asker:
                    self.log.info(
                        "jupyter_gpu_pause: %s joins the pause of %s asked by %s",
                        asker.by, s.path, op.asker.by if op.asker else "the user",
                    )  # fmt: skip
                return s
            if s.state == SessionState.PAUSED and not op:
                return s  # already paused
            if op and op.kind == "rebuild":
                raise WrongState(
                    "cannot pause while a rebuild re-runs cells; pause again once it has ended",
                    "rebuilding",
                )
            if op or s.state not in RUNNING:
                raise WrongState(f"cannot pause: the session is {s.state}")
            kernel_id = self.require_agent(s, "pause")
            await self.checkpoints.require_key()  # a checkpoint nobody could verify is no pause
            op = Op("pause", s, kernel_id=kernel_id, reason=reason, asker=asker)
            busy = self.bridge.execution_state(kernel_id) == "busy"
            self.ops.start(op, Pause(self._pause_ctx, s, op, kernel_id, reason, busy))
            await self.table.persist(s)
            return s

    async def check(self, session_id: str) -> CheckReply:
        """What a pause would save and skip, now, without writing or changing anything (a
        refusal that says no pause can succeed also marks the session unpausable)."""
        s = self.table.get(session_id)
        await self._settled(s)
        try:
            return await DryRun(self._check_ctx, s).run()
        except GpuPauseError as e:
            if e.reason in UNPAUSABLE_REASONS:
                await self.table.unpausable(s, e.reason, e.message)
            raise

    async def _settled(self, s: Session) -> Op | None:
        """The session's operation in flight, as an action asked now must see it: one that
        has published its outcome (``paused``, ``active``…) is over for whoever sees that
        state and only records it still; the action waits for that instead of refusing a
        state that offers it (``Operations.settled``)."""
        return await self.ops.settled(s.id)

    async def cancel(self, session_id: str, asker: Asker | None = None) -> Session:
        """Cancel a pause not yet committed (the kernel runs on) or a resume waiting for a GPU;
        ``asker``: the admin who cancelled it, named by the ``cancelled`` event."""
        s = self.table.get(session_id)
        op = await self._settled(s)
        if op is None or s.state not in (SessionState.PAUSING, SessionState.WAITING):
            raise WrongState(f"nothing to cancel: the session is {s.state}")
        if op.committed:
            raise WrongState(
                "too late to cancel: the checkpoint is complete and the kernel is stopping"
            )
        op.cancelled_by = asker
        await self.ops.cancel(op)
        return s

    async def delete(self, session_id: str, delete_checkpoints: bool = False) -> None:
        s = self.table.get(session_id)
        if s.state in RUNNING + (SessionState.SUSPENDED,) or await self._settled(s):
            raise WrongState(
                f"cannot delete a session that is {s.state}; pause it or shut its kernel down first"
            )
        elsewhere = self.capacity.elsewhere.get(s.id)
        if delete_checkpoints and elsewhere:
            raise WrongState(
                f"this session runs on {elsewhere}: its checkpoints are the state it pauses and "
                "resumes from there. Pause it there first",
                "resumed-elsewhere",
                where=elsewhere,
            )
        if delete_checkpoints:
            for cid in await self.checkpoints.ids(s.id):
                await self.checkpoints.delete(s.id, cid)
                await self.table.record_event(
                    s, EventType.CHECKPOINT_DELETED, "user", checkpoint_id=cid
                )
        del self.table.sessions[s.id]
        await self.records.delete(s.id)
        # Kept checkpoints would otherwise come back at the next start (recovery.py)
        await self.table.record_event(
            s, EventType.DISCARDED, "user", delete_checkpoints=delete_checkpoints
        )

    async def _from_suspended(self, s: Session, op: Op | None, in_place: bool) -> bool:
        """Resume a suspended session (under the admission lock): in place (True), or, when
        asked for elsewhere (the CPU, a checkpoint, a kernel), from its written checkpoint
        once the kept kernel is let go (False)."""
        written = (s.suspended or {}).get("checkpoint") == "written"
        if not in_place and not written:
            raise WrongState(
                "its state is only in the suspended kernel (the checkpoint was not written): "
                "resume it in place, on a GPU, without device, checkpoint_id or into_kernel",
                "suspended-not-written",
            )
        if op is not None:  # its checkpoint is being written: the kernel is wanted back now
            await self.ops.cancel(op)
        if not in_place:
            if not (self.kept and await self.kept.let_go_now(s.id, "a resume from its checkpoint")):
                if s.kernel_id is not None:  # a suspended session's kept kernel
                    await self.bridge.kill(s.kernel_id)
                await self.table.suspended_gone(s, "its kept kernel was stopped")
            return False
        if self.kept is not None:
            self.kept.drop(s.id)
        await self.capacity.claim(s.id)
        op = Op("resume", s, kernel_id=s.kernel_id)
        self.ops.start(op, ResumeInPlace(self._resume_ctx, s, op))
        self.capacity.claimed(s.id)
        await self.table.persist(s)
        return True

    # -- rebuild -------------------------------------------------------------------------------
    async def rebuild(
        self,
        session_id: str,
        names: builtins.list[str] | None = None,
        confirm: bool = False,
        reason: str = "user",
    ) -> Session:
        """Start (or join) a rebuild of what the last resume did not bring back; returns at
        once, the session ``active`` with per-cell ``progress`` (``rebuild.py``)."""
        if names is not None and (
            not isinstance(names, list)
            or not all(isinstance(n, str) and n.isidentifier() for n in names)
        ):
            raise BadRequest("names must be a list of variable names", "bad-names")
        if not isinstance(confirm, bool):
            raise BadRequest("confirm must be true or false", "bad-confirm")
        async with self._admission:
            s = self.table.get(session_id)
            if self.settings.rebuild == "never":
                raise WrongState(
                    "rebuilding is turned off on this server (c.GpuPauseApp.rebuild = 'never')",
                    "rebuild-off",
                )
            op = await self._settled(s)
            if op and op.kind == "rebuild":
                return s
            if op or s.state not in RUNNING:
                raise WrongState(f"cannot rebuild: the session is {s.state}")
            offer = (s.restore or {}).get("rebuild")
            if not offer or not offer["names"]:
                why = "; ".join(
                    f"{u['name']}: {u['reason']}" for u in (offer or {}).get("unbuildable", [])
                )
                raise WrongState(
                    "nothing to rebuild: " + (why or "the last resume brought every variable back"),
                    "nothing-to-rebuild",
                )
            unknown = [n for n in names or [] if n not in offer["names"]]
            if unknown:
                raise BadRequest(
                    f"not in the rebuild plan: {', '.join(unknown)} (it offers "
                    f"{', '.join(offer['names'])})",
                    "bad-names",
                )
            kernel_id = self.require_agent(s, "rebuild")
            op = Op("rebuild", s, kernel_id=kernel_id, reason=reason)
            self.ops.start(op, Rebuild(self._resume_ctx, s, op, kernel_id, names, confirm))
            await self.table.persist(s)
            return s

    async def rebuilt_in_kernel(self, s: Session, result: dict) -> None:
        """``gp.rebuild()`` ran in the session's kernel: record what it says came back (the
        kernel speaks for its own session only: its capability proved which one)."""
        try:
            offer, plan = read_result(result)
        except GpuPauseError as e:
            raise BadRequest(e.message, "bad-rebuild-result") from None
        await tell(self._resume_ctx, s, "kernel", result, offer, plan)

    def auto_rebuild(self, s: Session) -> None:
        """``rebuild = "auto"``: rebuild once the resume that offered it has ended."""
        resume = self.ops.get(s.id)

        async def later():
            if resume is not None and resume.task is not None:
                await asyncio.wait([resume.task])
            try:
                await self.rebuild(s.id, reason="auto")
            except GpuPauseError as e:  # the session moved on (paused, or a cell changed it)
                self.log.info("jupyter_gpu_pause: no automatic rebuild of %s: %s", s.path, e)

        task = asyncio.ensure_future(later())
        self._auto_rebuilds.add(task)  # the loop holds tasks weakly: keep it until it ends
        task.add_done_callback(self._auto_rebuilds.discard)

    # -- resume --------------------------------------------------------------------------------
    async def resume(
        self,
        session_id: str,
        checkpoint_id: str | None = None,
        device: str | None = None,
        into_kernel: str | None = None,
    ) -> Session:
        """Start (or join) a resume; returns at once with the session ``restoring``, "Resume
        asked": it shows ``waiting`` only once the capacity provider said there is no room.

        Joining a resume that waits in line with ``device="cpu"`` takes it onto the CPU now.
        """
        async with self._admission:
            s = self.table.get(session_id)
            if device is not None and device not in DEVICES:
                raise BadRequest(
                    f"device must be one of {', '.join(DEVICES)}, not {device!r}", "bad-device"
                )
            if checkpoint_id is not None:
                try:
                    check_checkpoint_id(checkpoint_id)
                except ValueError as e:
                    raise BadRequest(str(e), "bad-checkpoint-id") from None
            op = await self._settled(s)
            if op and op.kind == "resume":
                if (
                    device == "cpu"
                    and s.state == SessionState.WAITING
                    and isinstance(op.control, Resume)
                ):
                    op.control.cpu_now()
                return s
            if self.resume_admission is not None:  # over a GPU-hour budget: 409, "any" → CPU
                device = await self.resume_admission(s, device, self.gpu_session)
            if s.state == SessionState.SUSPENDED:
                in_place = device in (None, "gpu") and not (checkpoint_id or into_kernel)
                if await self._from_suspended(s, op, in_place):
                    return s
                op = None  # its kept kernel let go: resumed from its checkpoint below
            if op or not (
                s.state == SessionState.PAUSED or (s.state == SessionState.FAILED and s.checkpoint)
            ):
                raise WrongState(f"cannot resume: the session is {s.state}")
            await self.checkpoints.require_key()
            ids = await self.checkpoints.ids(s.id)
            if checkpoint_id is not None:
                if checkpoint_id not in ids:
                    raise NotFound(
                        f"session has no checkpoint {checkpoint_id}", "unknown-checkpoint"
                    )
                ids = [checkpoint_id]
            if not ids:
                raise WrongState(
                    "cannot resume: the session has no checkpoint in the store", "no-checkpoint"
                )
            live = await self.bridge.kernel_for_path(s.path)
            if into_kernel is not None and into_kernel != live:
                raise BadRequest(
                    f"into_kernel {into_kernel} is not the running kernel of {s.path}",
                    "bad-into-kernel",
                )
            # A kernel that ran nothing (JupyterLab's, on opening the notebook) is taken as is
            adopt = bool(live and into_kernel is None and await self.ran_nothing(live))
            if live and into_kernel is None and not adopt:
                raise WrongState(
                    f"{s.path} already has a running kernel ({live}) that has run code; "
                    "resuming would overwrite its variables. Pass into_kernel to restore into "
                    "it, or shut it down first.",
                    "kernel-exists",
                )
            into_kernel = live if adopt else into_kernel
            # one server at a time: 409 resumed-elsewhere, 503 when the queue cannot tell
            await self.capacity.claim(s.id)
            op = Op("resume", s, kernel_id=into_kernel)
            options = ResumeOptions(tuple(ids), device, into_kernel, adopt)
            self.ops.start(op, Resume(self._resume_ctx, s, op, options))
            self.capacity.claimed(s.id)
            await self.table.persist(s)
            return s
