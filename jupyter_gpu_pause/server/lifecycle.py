"""Pause and resume, one straight line each.

Pause: wait for the running cell → agent writes blobs → server signs, writes and verifies the
manifest → only then the kernel is shut down and the GPU released. Any error before the last
step leaves the kernel running with its state and the session active.

Resume lives in ``resume.py`` (a mixin of this class).
"""

from __future__ import annotations

import asyncio
import posixpath

from ..store import IntegrityError, StoreError
from ..store.format import new_checkpoint_id
from ..units import count_text, size_text
from .capacity import CapacityProvider
from .checkpoints import Checkpoints
from .errors import AgentFailed, GpuPauseError, KernelDied, NotFound, Unavailable, WrongState
from .kernels import KernelBridge
from .model import RUNNING, Session, gpu_device_count
from .operations import Op, checkpoint_brief
from .records import Records
from .resume import ResumeMixin
from .views import session_json

STOP_GRACE = 15.0  # seconds a stopping server waits for in-flight operations
STARTUP_WAIT = 30.0  # seconds a request waits for the records to load before a 503
CHECK_TIMEOUT = 30.0  # seconds a dry run may take before the check gives up
BUSY_GRACE = 1.0  # seconds a check waits for a cell that is just ending (its idle in flight)

# Why a session that is not running cannot be checked, in words for the user.
_NOT_CHECKABLE = {
    "pausing": "a pause of it is already under way",
    "paused": "its kernel is stopped, and its checkpoint lists what was saved",
    "waiting": "it is waiting for a GPU to resume and has no kernel yet",
    "restoring": "it is being resumed, so check again once its kernel runs",
    "failed": "its last operation failed and there is no kernel to check",
}


class Lifecycle(ResumeMixin):
    """The one service the handlers call; owns the session table and running operations."""

    def __init__(
        self,
        *,
        bridge: KernelBridge,
        records: Records,
        checkpoints: Checkpoints,
        capacity: CapacityProvider,
        settings: dict,
        log,
    ):
        self.bridge, self.records, self.checkpoints = bridge, records, checkpoints
        self.capacity, self.settings, self.log = capacity, settings, log
        self.sessions: dict[str, Session] = {}
        self._ops: dict[str, Op] = {}
        # Admission (state checks up to registering the operation) awaits I/O; one lock keeps
        # two requests from both passing the checks and starting two operations.
        self._admission = asyncio.Lock()
        # set by the monitor: is a person's cell running? (our agent's requests excluded)
        self.user_busy = None
        # Jupyter serves requests before extensions finish starting; until the records are
        # loaded, an empty session list would tell a user their paused work is gone.
        self._started = asyncio.Event()
        self._refreshing = asyncio.Lock()
        self.start_error: str | None = None

    # -- startup, sync -----------------------------------------------------------------------
    async def start(self) -> None:
        """Load records and repair what a stopped server left half-done."""
        try:
            for s in await self.records.load_sessions():
                self.sessions[s.id] = s
                if s.state in ("waiting", "restoring"):
                    s.state, s.message = "paused", "Resume was interrupted by a server restart"
                    await self.records.save(s)
            await self.refresh()
        except Exception as e:
            self.start_error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._started.set()

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
                f"jupyter_gpu_pause could not load its records ({self.start_error}); "
                "no session was changed. An administrator must fix the records database "
                "(GpuPauseApp.db_path) and restart the server",
            )

    async def stop(self) -> None:
        """Cancel what can still be cancelled; give the rest a bounded time to finish."""
        for op in list(self._ops.values()):
            if op.task and not op.committed:
                op.task.cancel()
        tasks = [op.task for op in self._ops.values() if op.task]
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE)

    async def refresh(self) -> None:
        """Track every Jupyter session's kernel; settle records whose kernel has gone."""
        # The monitor and every GET call this; two passes interleaving at their awaits would
        # each register the same new kernel (a duplicate row) or settle one session twice.
        async with self._refreshing:
            await self._refresh()

    async def _refresh(self) -> None:
        live = await self.bridge.jupyter_sessions()
        by_kernel = {s.kernel_id: s for s in self.sessions.values() if s.kernel_id}
        busy_kernels = {op.kernel_id for op in self._ops.values() if op.kernel_id}
        for js in live:
            kid = js["kernel"]["id"]
            known = by_kernel.get(kid)
            if known:
                if known.path != js["path"]:
                    known.path, known.cwd = js["path"], posixpath.dirname(js["path"])
                    await self.records.save(known)
                continue
            if kid in busy_kernels:
                continue
            s = Session(
                path=js["path"],
                name=js.get("name") or "",
                type=js.get("type") or "notebook",
                kernel_id=kid,
                kernel_name=js["kernel"]["name"],
                cwd=posixpath.dirname(js["path"]),
            )
            self.sessions[s.id] = s
            await self.records.save(s)
        for s in list(self.sessions.values()):
            if (
                s.state in RUNNING + ("pausing",)
                and s.id not in self._ops
                and not self.bridge.is_running(s.kernel_id)
            ):
                await self._kernel_gone(s)

    async def cull(self, session_id: str, reason: str) -> None:
        """Shut the kernel down without a checkpoint (an admin's ``cull`` policy)."""
        s = self.get(session_id)
        if s.state not in RUNNING or s.id in self._ops:
            raise WrongState(f"cannot cull: the session is {s.state}")
        kernel_id = s.kernel_id
        await self.bridge.shutdown(kernel_id)
        await self.record_event(
            s,
            "culled",
            reason,
            kernel_id=kernel_id,
            message=f"{s.path}: kernel shut down by {reason} without a checkpoint; "
            "its variables are lost",
        )
        await self._kernel_gone(s)

    async def _kernel_gone(self, s: Session) -> None:
        """The kernel ended outside a pause: keep a record only if a checkpoint exists."""
        if not s.checkpoint:
            if self.sessions.pop(s.id, None) is not None:  # a cull and a refresh may both see it
                await self.records.delete(s.id)
            return
        s.state, s.kernel_id, s.gpu_devices_paused = "paused", None, 0  # no pause reclaimed it
        s.message = (
            f"The kernel ended outside jupyter_gpu_pause; checkpoint {s.checkpoint['id']} "
            "is the last saved state"
        )
        await self.records.save(s)

    # -- queries -------------------------------------------------------------------------------
    def get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise NotFound(f"no session with id {session_id!r}", "unknown-session") from None

    async def list(self, path: str | None = None, kernel_id: str | None = None) -> list[dict]:
        await self.refresh()
        found = [
            s
            for s in self.sessions.values()
            if (path is None or s.path == path) and (kernel_id is None or s.kernel_id == kernel_id)
        ]
        return [self.view(s) for s in sorted(found, key=lambda s: (s.path, s.created))]

    def view(self, s: Session) -> dict:
        running = self.bridge.is_running(s.kernel_id)
        kernel = self.bridge.kernel(s.kernel_id) if running else None
        busy = self.user_busy(s.kernel_id) if running and self.user_busy else None
        return session_json(s, kernel, busy)

    async def list_checkpoints(self, session_id: str) -> list[dict]:
        self.get(session_id)
        return await self.checkpoints.summaries(session_id)

    async def events(self, since=None, session_id=None) -> list[dict]:
        return await self.records.events(since=since, session_id=session_id)

    def session_for_kernel(self, kernel_id: str) -> Session | None:
        return next((s for s in self.sessions.values() if s.kernel_id == kernel_id), None)

    def busy_sessions(self) -> set[str]:
        """Sessions with a pause or resume in flight."""
        return set(self._ops)

    def op_task(self, session_id: str):
        op = self._ops.get(session_id)
        return op.task if op else None

    async def record_event(self, s: Session, type_: str, reason: str, **detail) -> None:
        await self.records.add_event(s.id, type_, reason, detail)
        self.log.info("gpu-pause %s %s (%s): %s", type_, s.path, reason, detail.get("message", ""))

    def _start(self, s: Session, op: Op, coro) -> None:
        self._ops[s.id] = op
        op.task = asyncio.ensure_future(coro)
        op.task.add_done_callback(lambda _t: self._ops.pop(s.id, None))

    # -- pause ---------------------------------------------------------------------------------
    async def pause(self, session_id: str, reason: str = "user") -> Session:
        """Start (or join) a pause; returns at once with the session in ``pausing``."""
        async with self._admission:
            return await self._admit_pause(session_id, reason)

    async def _admit_pause(self, session_id: str, reason: str) -> Session:
        s = self.get(session_id)
        op = self._ops.get(s.id)
        if (op and op.kind == "pause") or (s.state == "paused" and not op):
            return s  # join the running pause / already paused
        if op or s.state not in RUNNING:
            raise WrongState(f"cannot pause: the session is {s.state}")
        self._require_agent(s, "pause")
        busy = self.bridge.execution_state(s.kernel_id) == "busy"
        s.state, s.error = "pausing", None
        s.message = (
            "Waiting for the running cell to finish before pausing"
            if busy
            else "Writing checkpoint"
        )
        s.progress = {
            "phase": "waiting" if busy else "capturing",
            "done_bytes": 0,
            "total_bytes": None,
        }
        await self.records.save(s)
        op = Op("pause")
        self._start(s, op, self._pause(s, op, reason))
        return s

    def _require_agent(self, s: Session, verb: str) -> None:
        """The session's kernel runs and speaks Python, so our agent can run in it."""
        language = self.bridge.language(s.kernel_name)
        if language != "python":
            raise WrongState(f"pause is not supported for {language} kernels", "unsupported-kernel")
        if not self.bridge.is_running(s.kernel_id):
            raise WrongState(f"cannot {verb}: the session's kernel is not running", "no-kernel")

    # -- check (dry run) -------------------------------------------------------------------------
    async def check(self, session_id: str) -> dict:
        """What a pause would save and skip, now, without writing or changing anything.

        Refused while a person's cell runs: the dry run would wait behind it, and the dialog
        that asks needs an answer at once.
        """
        s = self.get(session_id)
        self._require_checkable(s)
        kid = s.kernel_id
        if await self._still_busy(kid, BUSY_GRACE):
            raise WrongState(
                "the kernel is running a cell; check again when it has finished "
                "(a pause asked now waits for the cell)",
                "kernel-busy",
            )
        self._require_checkable(s)  # a pause may have begun while the cell ended
        try:
            report = await asyncio.wait_for(
                self.bridge.run_agent(kid, "check", {"capture": self.settings["capture"]}),
                CHECK_TIMEOUT,
            )
        except asyncio.TimeoutError:
            if self._user_cell_running(kid):
                raise WrongState(
                    "the kernel started running a cell during the check; check again when it "
                    "has finished",
                    "kernel-busy",
                ) from None
            raise GpuPauseError(
                f"the kernel did not answer the check within {CHECK_TIMEOUT:g} s; nothing was "
                "changed",
                "check-timeout",
            ) from None
        except AgentFailed as e:
            if e.reason == "agent-missing":
                raise WrongState(e.message, e.reason) from None
            raise
        return {
            "objects": report["objects"],
            "skipped": report["skipped"],
            "registered": report.get("registered", []),
            "bytes": report["bytes"],
            "error": report.get("error"),
        }

    def _require_checkable(self, s: Session) -> None:
        if s.id in self._ops or s.state not in RUNNING:
            why = _NOT_CHECKABLE.get(s.state, "it has no running kernel")
            raise WrongState(
                f"cannot check what a pause would save: the session is {s.state} — {why}"
            )
        self._require_agent(s, "check")

    async def _still_busy(self, kernel_id: str, grace: float) -> bool:
        """A person's cell runs, and still does after ``grace`` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        while self._user_cell_running(kernel_id):
            if loop.time() >= end:
                return True
            await asyncio.sleep(0.05)
        return False

    def _user_cell_running(self, kernel_id: str) -> bool:
        if not self.bridge.is_running(kernel_id):
            return False  # the caller's state checks say why
        if self.user_busy and self.user_busy(kernel_id):
            return True
        busy = self.bridge.execution_state(kernel_id) == "busy"
        return busy and not self.bridge.agent_running(kernel_id)

    def _on_progress(self, s: Session):
        def update(p: dict) -> None:
            s.progress = p

        return update

    async def _pause(self, s: Session, op: Op, reason: str) -> None:
        kid = s.kernel_id
        try:
            await self.bridge.wait_idle(kid)
            s.message, s.progress = (
                "Writing checkpoint",
                {"phase": "capturing", "done_bytes": 0, "total_bytes": None},
            )
            cid = new_checkpoint_id()
            result = await self.bridge.run_agent(
                kid,
                "capture",
                {
                    "store_url": self.checkpoints.store.url,
                    "store_options": self.settings["store_options"],
                    "capture": self.settings["capture"],
                    "max_bytes": self.settings["max_checkpoint_bytes"],
                    "verify": self.settings["verify"],
                },
                self._on_progress(s),
            )
            s.progress = {"phase": "verifying", "done_bytes": 0, "total_bytes": None}
            kernel_meta = {**result["kernel"], "kernelspec": s.kernel_name, "path": s.path}
            parent = s.checkpoint["id"] if s.checkpoint else None
            manifest = await self.checkpoints.commit(
                s.id, cid, parent, kernel_meta, result["origin"], result
            )
            op.committed = True
            await self.bridge.shutdown(kid)
            self.capacity.release(s.id)
        except asyncio.CancelledError:
            s.state, s.message = "active", "Pause cancelled; the kernel was not touched"
            await self.record_event(s, "cancelled", reason, message=s.message)
            return
        except KernelDied as e:
            await self._pause_lost(s, reason, e)
            return
        except (GpuPauseError, StoreError, IntegrityError, OSError) as e:
            if op.committed:  # the checkpoint is safe; only stopping the kernel failed
                s.state, s.checkpoint = "failed", checkpoint_brief(manifest)
                s.error = {
                    "message": f"the checkpoint is complete but the kernel could not be "
                    f"stopped: {e}",
                    "reason": "shutdown",
                    "state_intact": True,
                }
                s.message = s.error["message"]
                await self.record_event(
                    s, "pause_failed", reason, message=s.message, error_reason="shutdown"
                )
                return
            await self._pause_refused(s, reason, e)
            return
        finally:
            s.progress = None
            await self.records.save(s)
        s.state, s.kernel_id = "paused", None
        s.gpu_devices_paused = gpu_device_count(s.gpu)  # reclaimed from now on, per device
        s.checkpoint = checkpoint_brief(manifest)
        skipped = manifest.doc["skipped"]
        s.message = (
            f"Paused — {size_text(manifest.total_bytes)}, "
            f"{count_text(len(manifest.doc['objects']), 'object')} saved"
            + (f"; not saved: {', '.join(x['name'] for x in skipped)}" if skipped else "")
        )
        await self.records.save(s)
        await self.record_event(
            s,
            "paused",
            reason,
            checkpoint_id=manifest.id,
            bytes=manifest.total_bytes,
            skipped=skipped,
            message=s.message,
        )

    async def _pause_refused(self, s: Session, reason: str, e: Exception) -> None:
        """The checkpoint failed before the commit point: the kernel and its state are intact."""
        text = getattr(e, "message", None) or str(e)
        s.state = "active"
        s.error = {"message": text, "reason": getattr(e, "reason", "store"), "state_intact": True}
        s.message = f"Pause failed: {text}. The kernel is still running with all its variables."
        await self.record_event(
            s, "pause_failed", reason, message=text, error_reason=s.error["reason"]
        )

    async def _pause_lost(self, s: Session, reason: str, e: Exception) -> None:
        older = (
            f" Checkpoint {s.checkpoint['id']} from {s.checkpoint['created']} can still be "
            "restored."
            if s.checkpoint
            else " There is no earlier checkpoint of this session."
        )
        text = f"The kernel died while its checkpoint was being written ({e}); its memory is lost."
        if await self.bridge.settle(s.kernel_id, getattr(e, "pid", None)):
            text += f" Jupyter restarted it empty (kernel {s.kernel_id})."
        else:
            s.kernel_id = None
        s.state = "failed"
        s.error = {"message": text + older, "reason": "kernel-died", "state_intact": False}
        s.message = s.error["message"]
        await self.record_event(
            s, "pause_failed", reason, message=s.message, error_reason="kernel-died"
        )

    # -- resume --------------------------------------------------------------------------------
    async def cancel(self, session_id: str) -> Session:
        s = self.get(session_id)
        op = self._ops.get(s.id)
        if op is None or s.state not in ("pausing", "waiting"):
            raise WrongState(f"nothing to cancel: the session is {s.state}")
        if op.committed:
            raise WrongState(
                "too late to cancel: the checkpoint is complete and the kernel is stopping"
            )
        op.task.cancel()
        await asyncio.gather(op.task, return_exceptions=True)
        return s

    async def delete(self, session_id: str, delete_checkpoints: bool = False) -> None:
        s = self.get(session_id)
        if s.state in RUNNING or s.id in self._ops:
            raise WrongState(
                f"cannot delete a session that is {s.state}; pause it or shut its kernel down first"
            )
        if delete_checkpoints:
            for cid in await self.checkpoints.ids(s.id):
                await self.checkpoints.delete(s.id, cid)
                await self.record_event(s, "checkpoint_deleted", "user", checkpoint_id=cid)
        del self.sessions[s.id]
        await self.records.delete(s.id)
