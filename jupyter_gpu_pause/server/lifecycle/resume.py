"""One resume, as one straight line: pick the newest checkpoint that verifies → wait for capacity
→ start a kernel (or use the one the caller named) → the agent checks every blob, then restores →
attach the notebook. A damaged checkpoint falls back to the next older one.

Whatever fails, the checkpoints are unchanged: the session ends ``failed`` (saying whether any
checkpoint can still bring the state back) or, when cancelled, ``paused``; a kernel started for
the resume is shut down again and the capacity grant released.
"""

from __future__ import annotations

import asyncio
import functools
import posixpath
from dataclasses import dataclass
from datetime import datetime

from ...kernel.protocol import RESTORE, Device, RestoreArgs
from ...store import IntegrityError, StoreError
from ...store.format import iso, utcnow
from ...units import age_text, count_text
from ..capacity import Grant
from ..kernels.replies import check_restore_report
from ..kernels.spool import stage
from ..state.checkpoints import Prefetch, checkpoint_brief, gpu_bytes, gpu_bytes_per_device
from ..state.clock import PhaseClock
from ..state.errors import AgentFailed, GpuPauseError, failure
from ..state.event_types import ADMIN_REASON, EventType
from ..state.model import Session, SessionState
from .context import ResumeContext, progress_into
from .operations import Op, Operation, Outcome
from .rebuild import auto_runs

NONE_VALID = "no checkpoint of this session passed verification"
MAX_FALLBACKS = 4  # older checkpoints an object that cannot be restored may come from


@dataclass(frozen=True)
class ResumeOptions:
    """What the caller asked for (REST body, checked by ``Lifecycle.resume``)."""

    checkpoint_ids: tuple[str, ...]  # newest first: tried in this order
    device: str | None = None  # gpu | cpu | any; None: gpu for a GPU session, else as is
    into_kernel: str | None = None
    # into_kernel is the notebook's kernel that has run nothing (lifecycle.ran_nothing): taken
    # as a warm kernel is, through the capacity queue and taking on the grant's environment,
    # and only if it has still run nothing when the restore begins
    adopt: bool = False


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return count_text(int(seconds // 3600), "hour")
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def older_text(x: dict) -> str:
    """One object taken from an older checkpoint: "optimizer from checkpoint X, 2 h older"."""
    age = x.get("older_seconds")
    if age is None:
        return f"{x['name']} from checkpoint {x['checkpoint_id']}"
    return f"{x['name']} from checkpoint {x['checkpoint_id']}, {age_text(age)} older"


class Resume(Operation):
    kind = "resume"

    def __init__(self, ctx: ResumeContext, s: Session, op: Op, options: ResumeOptions):
        super().__init__(s, op)
        self.ctx, self.options = ctx, options
        self.ids = list(options.checkpoint_ids)
        self.refused: list[dict] = []
        self.started: str | None = None  # a kernel this resume started (shut down on failure)
        self.take_cpu = asyncio.Event()  # "Resume on CPU now" while waiting in line
        self.asked = utcnow()
        self.waited = 0.0  # seconds spent in line
        self.place: float | None = None  # the place held in line, kept if it goes back once
        self.requeued = False
        # when the line granted a GPU (benchmarks: release → next start)
        self.granted_at: datetime | None = None
        self.clock = PhaseClock()  # the events' phase timings (docs/metrics.md)
        self.prefetch: Prefetch | None = None  # page-cache warming of the chosen checkpoint's blobs
        self.warm = False  # restoring into a warm kernel, which takes on the session's env

    def admit(self) -> None:
        """The session enters ``restoring``, "Resume asked": ``waiting`` is shown only once
        the capacity provider said there is no room."""
        s = self.s
        s.state, s.error, s.message = SessionState.RESTORING, None, "Resume asked"
        s.progress = {"phase": "asked", "done_bytes": 0, "total_bytes": None}

    async def work(self) -> Outcome:
        manifest, kid, report, grant = await self._restore()
        return functools.partial(self._resumed, manifest, kid, report, grant)

    def after_work(self) -> None:
        super().after_work()
        self.s.queue_position, self.s.waiting = None, None
        if self.prefetch:
            self.prefetch.stop()
        if self.ctx.warm:  # the session is no longer paused, or is again: look at the pool
            self.ctx.warm.nudge()

    async def cancelled(self) -> None:
        await self._undo()
        await self._cancelled()

    async def failed(self, e: Exception) -> None:
        await self._undo()
        await self._failed(e)

    async def _restore(self):
        s, ctx, into = self.s, self.ctx, self.options.into_kernel
        self.clock.enter("verify")
        manifest = await self._next_valid()
        if manifest is None:
            raise AgentFailed(NONE_VALID, "integrity")
        while True:
            self.clock.enter("capacity")
            adopt = self.options.adopt
            grant = Grant(device="none") if into and not adopt else await self._capacity(manifest)
            s.state, s.queue_position, s.waiting = SessionState.RESTORING, None, None
            s.device = None if grant.device == "none" else grant.device
            s.grant = None
            if grant.device == "gpu":
                s.grant = {"devices": grant.devices, "bytes": grant.bytes}
            s.message = "Restoring" + (" on the CPU" if grant.device == "cpu" else "")
            s.progress = {"phase": "starting", "done_bytes": 0, "total_bytes": manifest.total_bytes}
            self.clock.enter("start")
            if self.prefetch is None:  # while the kernel starts (checkpoints.Prefetch)
                self.prefetch = ctx.checkpoints.prefetch(manifest)
            try:
                # a few at a time (RestoreSlots); saved once it says whether it waits its turn
                async with ctx.restore_slots.hold(s, lambda: ctx.table.persist(s)):
                    if into:
                        kid = into
                    else:
                        # a warm kernel (spares.py) has started and imported already
                        warm = await ctx.warm.take(s.kernel_name) if ctx.warm else None
                        self.warm = warm is not None
                        kid = self.started = warm or await ctx.bridge.start(
                            s.kernel_name, s.cwd, s.path, s.name, grant.env
                        )
                    self.op.kernel_id = kid
                    manifest, report = await self._restore_into(kid, manifest, grant)
            except AgentFailed as e:
                # (a kernel that is not ours stays as the restore left it: no second try)
                if e.reason != "gpu-oom" or self.requeued or grant.device != "gpu" or into:
                    raise
                await self._back_in_line(e)
                continue
            check_restore_report(report)
            self.clock.enter("attach")
            # its slot is given back: another resume may restore now, and this one says so
            s.progress = {**(s.progress or {}), "phase": "attaching"}
            await ctx.bridge.attach(s.path, s.name, s.type, s.kernel_name, kid)
            return manifest, kid, report, grant

    async def _restore_into(self, kid: str, manifest, grant: Grant):
        """Restore into ``kid``, falling back to older checkpoints that verify."""
        ctx = self.ctx
        # where the agent puts tensors: the grant's device; "any" (a visible GPU, else the CPU)
        # for a grant of "any" and for a kernel placed by no grant (into_kernel)
        places: dict[str, Device] = {"gpu": "gpu", "cpu": "cpu"}
        device = "any" if grant.any else places.get(grant.device, "any")
        while True:
            self.clock.enter("verify")
            fallbacks = await self._fallbacks()
            self.clock.enter("start")  # until the new kernel answers (on_sent)
            args = RestoreArgs(
                manifest=manifest.doc,
                store_url=ctx.settings.store_url,
                store_options=ctx.settings.store_options,
                store_timeout=ctx.settings.store_timeout,
                device=device,
                fallbacks=fallbacks,
                only_if_unused=self.options.adopt,
                rebuild=ctx.settings.rebuild,
                ambient=ctx.settings.ambient,
                no_rerun_ids=await ctx.bridge.no_rerun_cells(self.s.path),
            )
            if self.warm or self.options.adopt:  # what bridge.start would give a new kernel
                s = self.s
                args["environ"] = ctx.bridge.session_environ(s.path, s.name, grant.env)
                args["cwd"] = ctx.bridge.os_folder(s.cwd)
            # a kernel that cannot read the store itself reads blobs the server checked
            spool = await ctx.bridge.spool_for(kid, manifest.id)
            try:
                if spool is not None:
                    docs = [manifest.doc, *fallbacks]
                    await asyncio.to_thread(stage, ctx.checkpoints.store, spool, docs)
                    args["spool"] = spool.args()
                report = await ctx.bridge.run_agent(
                    kid,
                    RESTORE,
                    args,
                    # the agent reads every blob first: its last "reading" progress ends that
                    self.clock.follow(progress_into(self.s), "reading", "read", "unpickle"),
                    on_sent=lambda: self.clock.enter("read"),
                    on_input=spool.serve if spool is not None and spool.channel else None,
                )
                return manifest, report
            except AgentFailed as e:
                if e.reason != "integrity":
                    raise
                self.refused.append(
                    {"checkpoint_id": manifest.id, "message": e.message, "check": e.check}
                )
                self.clock.enter("verify")
                manifest = await self._next_valid()
                if manifest is None:
                    raise AgentFailed(NONE_VALID, "integrity") from e
            finally:
                if spool is not None:
                    await asyncio.to_thread(spool.discard)  # a GiB of leftovers: not on the loop

    async def _fallbacks(self) -> list[dict]:
        """The older checkpoints that verify, newest first: where an object the chosen one
        cannot restore is taken from (``kernel/restore.py``)."""
        docs = []
        for cid in self.ids[:MAX_FALLBACKS]:
            try:
                docs.append((await self.ctx.checkpoints.verify(self.s.id, cid)).doc)
            except (IntegrityError, StoreError):
                continue  # a resume falling back to it whole will say why
        return docs

    # -- capacity ------------------------------------------------------------------------------
    def _mode(self, manifest) -> str:
        """``gpu`` | ``cpu`` | ``any`` as asked; unasked, ``gpu`` for a GPU session, else
        ``none`` (no capacity asked, the kernel's environment untouched)."""
        if self.options.device:
            return self.options.device
        return "gpu" if self.ctx.gpu_session(self.s) or gpu_bytes(manifest) else "none"

    async def _capacity(self, manifest) -> Grant:
        ctx, mode = self.ctx, self._mode(manifest)
        if mode == "cpu":
            return Grant.cpu()
        if mode == "none":
            return Grant(device="none")
        need = ctx.capacity.need(self.s.id, gpu_bytes_per_device(manifest))
        try:
            if mode == "any":
                grant = await ctx.capacity.try_now(need)
                if grant is None:
                    return Grant.cpu()
                grant.any = True  # the agent uses a visible GPU, else the CPU
                return grant
            return await self._wait_in_line(need, mode, "gpu-oom" if self.requeued else None)
        except GpuPauseError:
            raise
        except Exception as e:  # the provider's backend (a scheduler, a database) failed
            raise GpuPauseError(
                f"the capacity provider '{ctx.capacity.name}' failed ({type(e).__name__}: {e})",
                "capacity",
            ) from e

    async def _wait_in_line(self, need, mode: str, reason: str | None = None) -> Grant:
        """Wait in the node's line until granted, the user takes the CPU, or time runs out.

        The session says ``waiting`` only once the line has said "not yet" (``on_wait``): a
        resume granted at its first look goes from "Resume asked" straight to restoring."""
        s, ctx = self.s, self.ctx
        announced = [True] if reason else []  # back in line: _back_in_line announced it

        async def on_wait(turn) -> None:
            if s.waiting is None:  # the first "not yet": waiting from now on
                s.state, s.progress = SessionState.WAITING, None
                s.waiting = {
                    "since": iso(self.asked),
                    "reason": reason or "queue",
                    "needs_bytes": need.total,
                    "device": mode,
                }
            if not turn.position:  # the queue cannot be reached: the place is kept meanwhile
                s.waiting = {**s.waiting, "reason": turn.verdict.reason}
                s.message = (
                    f"Waiting for a GPU: {turn.verdict.message}; trying again, the place in "
                    "line and the checkpoint are kept"
                )
                return
            why = turn.verdict.message if turn.verdict.grant is None else ""
            ahead = turn.position - 1
            if ahead and not why:
                why = f"{count_text(ahead, 'session')} ahead in line"
            elif ahead:
                why += f"; {count_text(ahead, 'session')} ahead in line"
            code = turn.verdict.reason if turn.verdict.grant is None else "queue"
            if reason and not announced:
                code = reason  # back in line after running out of GPU memory: say so first
            s.queue_position = turn.position
            s.waiting = {**s.waiting, "reason": code}
            s.message = f"Waiting for a GPU (#{turn.position} in line): {why}"
            if not announced:
                announced.append(True)
                await ctx.table.persist(s)
                await ctx.table.record_event(
                    s,
                    EventType.WAITING,
                    "user",
                    position=turn.position,
                    reason=code,
                    message=s.message,
                )

        began = asyncio.get_running_loop().time()
        line = asyncio.ensure_future(
            ctx.capacity.wait(need, posixpath.basename(s.path), self.asked, on_wait, self.place)
        )
        cpu = asyncio.ensure_future(self.take_cpu.wait())
        timeout = ctx.resume_timeout or None
        try:
            done, _ = await asyncio.wait(
                {line, cpu}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for t in (line, cpu):
                if not t.done():
                    t.cancel()
            await asyncio.gather(line, cpu, return_exceptions=True)
            self.waited += asyncio.get_running_loop().time() - began
        if line in done:
            grant, self.place = line.result()
            self.granted_at = utcnow()
            return grant
        if cpu in done:
            return Grant.cpu()
        # neither done: the wait timed out, so ``resume_timeout`` is set (not 0)
        raise GpuPauseError(
            f"no GPU became free within {_duration(ctx.resume_timeout)}; your checkpoint is "
            "intact — Resume to try again",
            "capacity-timeout",
        )

    async def _back_in_line(self, e: AgentFailed) -> None:
        """The GPU filled up under the restore (NVML's free memory is advisory): give the
        kernel and the grant back and wait again, once, at the same place in line."""
        self.requeued = True
        await self._undo()
        self.started = None
        s = self.s
        s.state, s.device, s.grant, s.progress = SessionState.WAITING, None, None, None
        s.message = (
            "The GPU ran out of memory while restoring (another process took it); "
            "back in line to try once more"
        )
        await self.ctx.table.persist(s)
        await self.ctx.table.record_event(
            s, EventType.WAITING, "user", position=None, reason="gpu-oom", message=s.message
        )
        self.ctx.log.warning("jupyter_gpu_pause: %s: %s", s.path, e.message)

    def cpu_now(self) -> None:
        """The user chose the CPU while waiting: leave the line and resume there."""
        self.take_cpu.set()

    async def _next_valid(self):
        """The newest checkpoint not tried yet that verifies, or None; refusals are recorded."""
        while self.ids:
            cid = self.ids.pop(0)
            try:
                return await self.ctx.checkpoints.verify(self.s.id, cid)
            except (IntegrityError, StoreError) as e:
                self.refused.append(
                    {
                        "checkpoint_id": cid,
                        "message": f"checkpoint {cid}: {e}",
                        "check": getattr(e, "check", "store"),
                    }
                )
        return None

    async def _undo(self) -> None:
        """Give back what the resume took: the capacity grant and a kernel it started."""
        await self.ctx.capacity.release(self.s.id)
        if self.started:
            try:
                await self.ctx.bridge.shutdown(self.started)
            except Exception:
                self.ctx.log.exception(
                    "jupyter_gpu_pause: could not shut down kernel %s after a failed resume",
                    self.started,
                )

    # -- outcomes -------------------------------------------------------------------------------
    async def _resumed(self, manifest, kid: str, report: dict, grant: Grant) -> None:
        s, ctx = self.s, self.ctx
        timings = self.clock.report()  # usable from here: restored and attached
        await ctx.table.merge_into(s, kid)  # the record of into_kernel merges into this one
        placed = set(report.get("devices", {}).values())
        if grant.any and placed == {"cpu"}:  # "any" with no GPU visible after all
            s.device, s.grant = "cpu", None
        s.state, s.kernel_id, s.error = SessionState.ACTIVE, kid, None
        s.checkpoint = checkpoint_brief(manifest)
        s.restore = {**report, "refused": self.refused}
        failed, restored = report["failed"], count_text(len(report["restored"]), "object")
        older = report.get("fallback", [])
        s.message = (
            f"Restored {restored} from checkpoint {manifest.id}"
            + "".join(f"; {older_text(x)}" for x in older)
            + (f"; not restored: {', '.join(f['name'] for f in failed)}" if failed else "")
            + (f"; {len(self.refused)} newer checkpoint(s) refused" if self.refused else "")
        )
        around = report.get("ambient")
        if around and around["text"]:
            s.message += f". {around['text']}"
        if around and around["not_restored"]:
            s.message += ": " + ", ".join(x["name"] for x in around["not_restored"])
        offer = report.get("rebuild")
        if offer and offer["text"]:
            s.message += f". Rebuild {offer['text']}"
        await ctx.table.persist(s)
        await ctx.table.record_event(
            s,
            EventType.RESUMED,
            "user",
            checkpoint_id=manifest.id,
            kernel_id=kid,
            restored=report["restored"],
            failed=failed,
            fallback=older,
            refused=self.refused,
            device=s.device,
            devices=grant.devices,
            rebuild=offer,
            ambient=around,
            waited_seconds=round(self.waited, 3),
            granted_at=iso(self.granted_at) if self.granted_at else None,
            message=s.message,
            **timings,
        )
        settings = ctx.settings
        if settings.rebuild == "auto" and auto_runs(offer, settings.rebuild_auto_seconds):
            if ctx.auto_rebuild is not None:
                ctx.auto_rebuild(s)

    async def _cancelled(self) -> None:
        s, by = self.s, self.op.cancelled_by
        s.state, s.device, s.grant = SessionState.PAUSED, None, None
        s.message = by.told("Resume cancelled").strip() if by else "Resume cancelled"
        await self.ctx.table.persist(s)
        await self.ctx.table.record_event(
            s,
            EventType.CANCELLED,
            ADMIN_REASON if by else "user",
            message=s.message,
            operation="resume",
            **(by.detail() if by else {}),
            **self.clock.report(),
        )

    async def _failed(self, e: BaseException) -> None:
        s = self.s
        reason, text = failure(e)
        if reason == "internal":
            self.ctx.log.error("jupyter_gpu_pause: resume of %s", s.path, exc_info=e)
        # Every checkpoint refused: the saved state cannot come back, so say so plainly.
        lost = bool(self.refused) and reason == "integrity"
        if self.refused:
            text += " — refused: " + "; ".join(r["message"] for r in self.refused)
        s.device, s.grant = None, None
        if self.started or not self.options.into_kernel:
            s.kernel_id = None  # the kernel started for the resume is gone again
        await self.ctx.table.fail(
            s,
            EventType.RESUME_FAILED,
            "user",
            reason=reason,
            text=text,
            intact=not lost,
            error={"refused": self.refused},
            message=f"Resume failed: {text}. The checkpoints are unchanged.",
            refused=self.refused,
            **self.clock.report(),
        )
