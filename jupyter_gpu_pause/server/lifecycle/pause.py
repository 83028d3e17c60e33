"""One pause, as one straight line: wait for the running cell → the agent writes the blobs → the
server signs, writes and reads back the manifest (the commit point) → only then the kernel is
shut down and its GPU released.

Before the commit point every failure, whatever its kind, leaves the kernel running with its
state and the session ``active`` with the error; after it the checkpoint is safe, and a kernel
that will not stop leaves the session ``failed`` with its state intact. Each outcome is an event.

Under the suspend tier (``server/suspend/``) a GPU session's GPU is released before the commit
point: once the agent has copied its tensors to host memory (its progress ``staged``), the
driver suspends the kernel's CUDA state in place and the session is ``suspended`` while the
blobs are written from those copies. A failure from there on loses nothing either: the kernel
still holds every object, the session stays ``suspended`` saying why the checkpoint was not
written, and a resume restores it in place (``inplace.py``).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

from ...kernel.protocol import CAPTURE, CaptureArgs, CaptureReply, Unverified
from ...kernel.protocol import Progress as AgentProgress
from ...store.format import new_checkpoint_id
from ...store.schema import check_capture
from ...units import count_text, size_text
from ..kernels.replies import unverified_of
from ..kernels.spool import take
from ..state.asker import NOT_ON_BEHALF
from ..state.checkpoints import checkpoint_brief
from ..state.clock import PhaseClock
from ..state.errors import KernelDied, failure
from ..state.event_types import ADMIN_REASON, EventType
from ..state.model import Session, SessionState, gpu_device_count
from ..suspend.session import NotSuspending, Suspension
from .context import PauseContext, progress_into
from .operations import Op, Operation, Outcome


async def _nothing() -> None:
    """An outcome already told (a kept suspended kernel's state and message)."""


class Pause(Operation):
    kind = "pause"

    def __init__(
        self, ctx: PauseContext, s: Session, op: Op, kernel_id: str, reason: str, busy: bool
    ):
        """``kernel_id``: the session's running kernel, as admission found it (``op``'s)."""
        super().__init__(s, op)
        self.ctx, self.reason, self.busy = ctx, reason, busy
        self.kernel_id = kernel_id
        self.cid: str | None = None  # the checkpoint being written (its GC intents)
        self.clock = PhaseClock()  # the events' phase timings (docs/metrics.md)
        self.gpu_released: float | None = None  # seconds from the request to the shutdown
        self.unverified: Unverified | None = None  # saved but not test-restored (kernel/trial.py)
        self.ambient_seconds: float | None = None  # what capturing the process state cost
        # the pause tier's part, called at its seams: a GPU session's Suspension under the
        # suspend tier (server/suspend/session.py), else NotSuspending
        self.tier: Suspension | NotSuspending = NotSuspending()
        self.kept: str | None = None  # kept suspended after the commit, until: why let go
        self.exit: str | None = None  # how the kernel stopped: "killed" | "graceful: <why>"

    def admit(self) -> None:
        """The session enters ``pausing``; a running cell (``busy``) is waited for first."""
        s = self.s
        s.state, s.error = SessionState.PAUSING, None
        s.message = (
            "Waiting for the running cell to finish before pausing"
            if self.busy
            else "Writing checkpoint"
        )
        s.progress = {
            "phase": "waiting" if self.busy else "capturing",
            "done_bytes": 0,
            "total_bytes": None,
        }

    async def work(self) -> Outcome:
        """The checkpoint (up to the commit point), then the kernel stopped."""
        manifest = await self._checkpoint()
        suspended = await self.tier.settled()
        if suspended and await self._keep(manifest):
            return _nothing  # kept suspended: its state and message are the outcome
        return await self._stop(manifest, suspended)

    def after_work(self) -> None:
        super().after_work()
        if self.cid and self.ctx.upkeep:  # written, or never will be
            self.ctx.upkeep.drop_intents(self.cid)

    async def cancelled(self) -> None:
        if await self.tier.unwritten(None, self._timings()):
            return
        await self.tier.unguard(self.ctx.bridge.run_agent, self.kernel_id)
        await self._cancelled()

    async def failed(self, e: Exception) -> None:
        if isinstance(e, KernelDied):
            await self.tier.settled()
            return await self._lost(e)
        if await self.tier.unwritten(e, self._timings()):
            return
        await self.tier.unguard(self.ctx.bridge.run_agent, self.kernel_id)
        await self._refused(e)

    async def _stop(self, manifest, suspended: bool) -> Outcome:
        """Stop the kernel once its checkpoint is safe; a suspended one is killed (its exit
        would run CUDA teardown, which blocks while it is suspended)."""
        try:
            self.clock.enter("shutdown")
            bridge = self.ctx.bridge
            self.exit = await (bridge.kill if suspended else bridge.finish)(self.kernel_id)
            if self.gpu_released is None:
                self.gpu_released = self.clock.since_start()
            await self.ctx.capacity.release(self.s.id)
        except (Exception, asyncio.CancelledError) as e:
            return functools.partial(self._kernel_kept, manifest, e)
        return functools.partial(self._paused, manifest)

    # -- the suspend tier (server/suspend/session.py) ------------------------------------------
    async def _keep(self, manifest) -> bool:
        """``keep_suspended_seconds``: keep the suspended kernel for a resume in place."""
        ctx = self.ctx
        if ctx.kept is None or ctx.keep_seconds <= 0 or not isinstance(self.tier, Suspension):
            return False
        let_go = lambda why: self._let_go(manifest, why)  # noqa: E731
        await self.tier.keep(ctx.kept, ctx.keep_seconds, checkpoint_brief(manifest), let_go)
        return True

    async def _let_go(self, manifest, why: str) -> None:
        """A kept kernel's time is up (or the host needs its memory): stop it, paused."""
        s = self.s
        if s.state != SessionState.SUSPENDED or s.kernel_id != self.kernel_id:
            return  # a resume took it meanwhile
        s.state, s.message, self.kept = (
            SessionState.PAUSING,
            f"Stopping the suspended kernel: {why}",
            why,
        )
        outcome = await self._stop(manifest, True)
        await outcome()

    async def _checkpoint(self):
        """Everything before the commit point; returns the verified manifest."""
        s, ctx, settings = self.s, self.ctx, self.ctx.settings
        if ctx.warm and ctx.gpu_session(s):  # its resume will want a kernel: start one meanwhile
            ctx.warm.pausing(s)
        self.clock.enter("wait")
        await ctx.bridge.wait_idle(self.kernel_id)
        self.clock.enter("capture")
        s.message = "Writing checkpoint"
        s.progress = {"phase": "capturing", "done_bytes": 0, "total_bytes": None}
        cid = self.cid = new_checkpoint_id()
        if ctx.suspender is not None and ctx.gpu_session(s):
            self.tier = Suspension(
                s, ctx.suspender, ctx.table, ctx.capacity.release, ctx.log, self.reason
            )
        suspend = self.tier.ask(ctx.bridge.pid(self.kernel_id))
        args = CaptureArgs(
            store_url=settings.store_url,
            store_options=settings.store_options,
            store_timeout=settings.store_timeout,
            checkpoint_id=cid,
            capture=settings.capture,
            max_bytes=settings.max_checkpoint_bytes,
            verify=settings.verify,
            test_restore=settings.test_restore,
            ambient=settings.ambient,
            suspend=suspend,
        )
        # a kernel that cannot write the store itself writes its blobs through the server
        spool = await ctx.bridge.spool_for(self.kernel_id, cid)
        try:
            if spool is not None:
                args["spool"] = spool.args()
            result = await ctx.bridge.run_agent(
                self.kernel_id,
                CAPTURE,
                args,
                # the agent's first "writing" progress ends the capture; its last, the writing
                self.clock.follow(
                    self._progress, "writing", "write", "verify" if settings.verify else None
                ),
                on_input=spool.serve if spool is not None and spool.channel else None,
            )
            self.clock.enter("commit")
            # the kernel runs user code: nothing it says is signed unchecked (its type is its
            # claim)
            check_capture(cast(dict[str, Any], result))
            if spool is not None:  # named, checked and stored by the server
                taken = await asyncio.to_thread(
                    take, ctx.checkpoints.store, spool, dict(result), cid, settings.verify
                )
                result = cast(CaptureReply, taken)
        finally:
            if spool is not None:
                await asyncio.to_thread(spool.discard)  # a GiB of leftovers: not on the loop
        self.unverified = unverified_of(result.get("unverified"))
        seconds = result.get("ambient_seconds")
        self.ambient_seconds = seconds if isinstance(seconds, int | float) else None
        s.progress = {"phase": "verifying", "done_bytes": 0, "total_bytes": None}
        kernel_meta = {
            **result["kernel"],
            "kernelspec": s.kernel_name,
            "path": s.path,
            "name": s.name,
            "session_type": s.type,
            "owner": settings.owner,
            "root_dir": settings.root_dir,
        }
        parent = s.checkpoint["id"] if s.checkpoint else None
        manifest = await ctx.checkpoints.commit(
            s.id, cid, parent, kernel_meta, result["origin"], result
        )
        self.op.committed = True
        s.message = f"Checkpoint {manifest.id} saved; shutting the kernel down"
        return manifest

    def _released(self) -> float:
        """The kernel was suspended: its GPU is released now."""
        self.op.suspended = True
        self.gpu_released = self.clock.since_start()
        return self.gpu_released

    def _progress(self, p: AgentProgress) -> None:
        """The agent's progress into the session; the packages its capture found (sent once,
        as the writing begins) to the warm kernel pool, not to the session."""
        packages = p.get("packages")
        if packages and self.ctx.warm:
            self.ctx.warm.expect(self.s, packages)
        if p["phase"] == "staged":
            self.tier.staged(p.get("host_bytes") or 0, self._released)
        progress_into(self.s)(p)

    # -- outcomes -------------------------------------------------------------------------------
    async def _paused(self, manifest) -> None:
        s = self.s
        s.state, s.kernel_id, s.error, s.device, s.grant = (
            SessionState.PAUSED,
            None,
            None,
            None,
            None,
        )
        s.suspended = None
        s.gpu_devices_paused = gpu_device_count(s.gpu)  # reclaimed from now on, per device
        s.checkpoint = checkpoint_brief(manifest)
        skipped = manifest.doc["skipped"]
        loose = (manifest.doc.get("ambient") or {}).get("not_carried", [])
        asker = self.op.asker
        s.message = (
            (asker.told("Paused") if asker else "")
            + f"Paused — {size_text(manifest.total_bytes)}, "
            f"{count_text(len(manifest.doc['objects']), 'object')} saved"
            + (f"; not saved: {', '.join(x['name'] for x in skipped)}" if skipped else "")
            + (
                f"; not test-restored ({self.unverified['reason']}): "
                + ", ".join(self.unverified["names"])
                if self.unverified
                else ""
            )
            + (
                f"; will not continue after the resume: {', '.join(x['name'] for x in loose)}"
                if loose
                else ""
            )
        )
        await self.ctx.table.persist(s)
        await self.ctx.table.record_event(
            s,
            EventType.PAUSED,
            self.reason,
            checkpoint_id=manifest.id,
            bytes=manifest.total_bytes,
            skipped=skipped,
            not_carried=loose,
            ambient_seconds=self.ambient_seconds,
            message=s.message,
            suspended=self.op.suspended,
            not_suspended=self.tier.why_not,
            kept=self.kept,
            exit=self.exit,
            **(asker.detail() if asker else NOT_ON_BEHALF),
            **self._timings(manifest),
        )
        if self.ctx.upkeep:  # retention, once this pause has ended
            self.ctx.upkeep.after_pause(s)
        if self.ctx.warm:  # a resume of this kernelspec may come: keep a kernel ready
            self.ctx.warm.nudge()

    async def _cancelled(self) -> None:
        if self.op.abandon is not None:  # a stopping server gave up on it (shutdown.py)
            await self.op.abandon(self.s)
            return
        s, by = self.s, self.op.cancelled_by
        s.state = SessionState.ACTIVE
        s.message = (
            by.told("Pause cancelled") + "The kernel was not touched"
            if by
            else "Pause cancelled; the kernel was not touched"
        )
        await self.ctx.table.persist(s)
        await self.ctx.table.record_event(
            s,
            EventType.CANCELLED,
            ADMIN_REASON if by else self.reason,
            message=s.message,
            operation="pause",
            **(by.detail() if by else {}),
            **self.clock.report(),
        )

    async def _refused(self, e: BaseException) -> None:
        """Before the commit point: the kernel and its state are intact."""
        reason, text = failure(e)
        if reason == "internal":
            self.ctx.log.error("jupyter_gpu_pause: pause of %s", self.s.path, exc_info=e)
        await self.ctx.table.fail(
            self.s,
            EventType.PAUSE_FAILED,
            self.reason,
            state=SessionState.ACTIVE,
            reason=reason,
            text=text,
            intact=True,
            message=f"Pause failed: {text}. The kernel is still running with all its variables.",
            **self._on_behalf(),
            **self._timings(),
        )

    async def _lost(self, e: KernelDied) -> None:
        """The kernel died while its checkpoint was being written: its memory is gone."""
        s = self.s
        older = (
            f" Checkpoint {s.checkpoint['id']} from {s.checkpoint['created']} can still be "
            "restored."
            if s.checkpoint
            else " There is no earlier checkpoint of this session."
        )
        text = f"The kernel died while its checkpoint was being written ({e}); its memory is lost."
        if await self.ctx.bridge.settle(self.kernel_id, e.pid):
            text += f" Jupyter restarted it empty (kernel {self.kernel_id})."
        else:
            s.kernel_id = None
        await self.ctx.table.fail(
            s,
            EventType.PAUSE_FAILED,
            self.reason,
            reason="kernel-died",
            text=text + older,
            intact=False,
            **self._on_behalf(),
            **self._timings(),
        )

    async def _kernel_kept(self, manifest, e: BaseException) -> None:
        """After the commit point: the checkpoint is safe; only stopping the kernel failed."""
        s = self.s
        _, why = failure(e) if isinstance(e, Exception) else ("cancelled", "it was interrupted")
        s.checkpoint = checkpoint_brief(manifest)
        await self.ctx.table.fail(
            s,
            EventType.PAUSE_FAILED,
            self.reason,
            reason="shutdown",
            text=f"the checkpoint {manifest.id} is complete but the kernel could not be "
            f"stopped ({why}); its GPU may still be held. Shut the kernel down, or resume "
            "into it",
            intact=True,
            checkpoint_id=manifest.id,
            bytes=manifest.total_bytes,
            **self._on_behalf(),
            **self._timings(manifest),
        )

    def _on_behalf(self) -> dict:
        """``by``, ``via``, ``admin_message`` of a pause asked for by an admin (none else)."""
        return self.op.asker.detail() if self.op.asker else {}

    def _timings(self, manifest=None) -> dict:
        """The detail keys every pause outcome carries (docs/metrics.md); ``new_bytes`` is
        null until a manifest is committed, ``gpu_released_seconds`` until the kernel stopped."""
        new = int(manifest.doc["totals"].get("new_bytes", 0)) if manifest else None
        return {
            **self.clock.report(),
            "gpu_released_seconds": self.gpu_released,
            "new_bytes": new,
        }
