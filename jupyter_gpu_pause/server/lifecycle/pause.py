"""One pause, as one straight line: wait for the running cell → the agent writes the blobs → the
server signs, writes and reads back the manifest (the commit point) → only then the kernel is
shut down and its GPU released.

Before the commit point every failure, whatever its kind, leaves the kernel running with its
state and the session ``active`` with the error; after it the checkpoint is safe, and a kernel
that will not stop leaves the session ``failed`` with its state intact. Each outcome is an event.
"""

from __future__ import annotations

import asyncio

from ...store import IntegrityError, StoreError
from ...store.format import new_checkpoint_id
from ...store.schema import ManifestError, check_capture
from ...units import count_text, size_text
from ..state.errors import GpuPauseError, KernelDied
from ..state.model import Session, gpu_device_count
from .clock import PhaseClock
from .operations import Op, checkpoint_brief


def failure(e: BaseException) -> tuple[str, str]:
    """``(reason, message)`` of an exception, in words a user can act on."""
    if isinstance(e, GpuPauseError):
        return e.reason, e.message
    if isinstance(e, ManifestError):
        return "bad-agent-reply", f"the kernel reported a checkpoint the server cannot trust ({e})"
    if isinstance(e, IntegrityError):
        return "integrity", str(e)
    if isinstance(e, (StoreError, OSError)):
        return "store", str(e) or type(e).__name__
    return "internal", f"an unexpected error in jupyter_gpu_pause ({type(e).__name__}: {e})"


class Pause:
    def __init__(self, lc, s: Session, op: Op, reason: str):
        self.lc, self.s, self.op, self.reason = lc, s, op, reason
        self.kernel_id = op.kernel_id
        self.cid: str | None = None  # the checkpoint being written (its GC intents)
        self.clock = PhaseClock()  # the events' phase timings (docs/metrics.md)
        self.gpu_released: float | None = None  # seconds from the request to the shutdown

    async def run(self) -> None:
        s = self.s
        try:
            manifest = await self._checkpoint()
        except asyncio.CancelledError:
            await self._cancelled()
            return
        except KernelDied as e:
            await self._lost(e)
            return
        except Exception as e:
            await self._refused(e)
            return
        finally:
            s.progress = None
            if self.cid and self.lc.maintenance:  # written, or never will be
                self.lc.maintenance.drop_intents(self.cid)
        try:
            self.clock.enter("shutdown")
            await self.lc.bridge.shutdown(self.kernel_id)
            self.gpu_released = self.clock.since_start()
            await self.lc.capacity.release(s.id)
        except (Exception, asyncio.CancelledError) as e:
            await self._kernel_kept(manifest, e)
            return
        await self._paused(manifest)

    async def _checkpoint(self):
        """Everything before the commit point; returns the verified manifest."""
        s, lc, settings = self.s, self.lc, self.lc.settings
        if lc.warm and lc.gpu_session(s):  # its resume will want a kernel: start one meanwhile
            lc.warm.pausing(s)
        self.clock.enter("wait")
        await lc.bridge.wait_idle(self.kernel_id)
        self.clock.enter("capture")
        s.message = "Writing checkpoint"
        s.progress = {"phase": "capturing", "done_bytes": 0, "total_bytes": None}
        cid = self.cid = new_checkpoint_id()
        result = await lc.bridge.run_agent(
            self.kernel_id,
            "capture",
            {
                "store_url": settings.store_url,
                "store_options": settings.store_options,
                "store_timeout": settings.store_timeout,
                "checkpoint_id": cid,
                "capture": settings.capture,
                "max_bytes": settings.max_checkpoint_bytes,
                "verify": settings.verify,
            },
            # the agent's first "writing" progress ends the capture; its last, the writing
            self.clock.follow(
                self._progress, "writing", "write", "verify" if settings.verify else None
            ),
        )
        self.clock.enter("commit")
        check_capture(result)  # the kernel runs user code: nothing it says is signed unchecked
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
        manifest = await lc.checkpoints.commit(
            s.id, cid, parent, kernel_meta, result["origin"], result
        )
        self.op.committed = True
        s.message = f"Checkpoint {manifest.id} saved; shutting the kernel down"
        return manifest

    def _progress(self, p: dict) -> None:
        """The agent's progress into the session; the packages its capture found (sent once,
        as the writing begins) to the warm kernel pool, not to the session."""
        packages = p.get("packages")
        if packages and self.lc.warm:
            self.lc.warm.expect(self.s, packages)
        self.lc.on_progress(self.s)(p)

    # -- outcomes -------------------------------------------------------------------------------
    async def _paused(self, manifest) -> None:
        s = self.s
        s.state, s.kernel_id, s.error, s.device, s.grant = "paused", None, None, None, None
        s.gpu_devices_paused = gpu_device_count(s.gpu)  # reclaimed from now on, per device
        s.checkpoint = checkpoint_brief(manifest)
        skipped = manifest.doc["skipped"]
        s.message = (
            f"Paused — {size_text(manifest.total_bytes)}, "
            f"{count_text(len(manifest.doc['objects']), 'object')} saved"
            + (f"; not saved: {', '.join(x['name'] for x in skipped)}" if skipped else "")
        )
        await self.lc.table.persist(s)
        await self.lc.table.record_event(
            s,
            "paused",
            self.reason,
            checkpoint_id=manifest.id,
            bytes=manifest.total_bytes,
            skipped=skipped,
            message=s.message,
            **self._timings(manifest),
        )
        if self.lc.maintenance:  # retention, once this pause has ended
            self.lc.maintenance.after_pause(s)
        if self.lc.warm:  # a resume of this kernelspec may come: keep a kernel ready
            self.lc.warm.nudge()

    async def _cancelled(self) -> None:
        if self.op.abandon is not None:  # a stopping server gave up on it (shutdown.py)
            await self.op.abandon(self.s)
            return
        s = self.s
        s.state, s.message = "active", "Pause cancelled; the kernel was not touched"
        await self.lc.table.persist(s)
        await self.lc.table.record_event(
            s, "cancelled", self.reason, message=s.message, operation="pause", **self.clock.report()
        )

    async def _refused(self, e: BaseException) -> None:
        """Before the commit point: the kernel and its state are intact."""
        reason, text = failure(e)
        if reason == "internal":
            self.lc.log.error("jupyter_gpu_pause: pause of %s", self.s.path, exc_info=e)
        s = self.s
        s.state = "active"
        s.error = {"message": text, "reason": reason, "state_intact": True}
        s.message = f"Pause failed: {text}. The kernel is still running with all its variables."
        await self.lc.table.persist(s)
        await self.lc.table.record_event(
            s, "pause_failed", self.reason, message=text, error_reason=reason, **self._timings()
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
        if await self.lc.bridge.settle(self.kernel_id, e.pid):
            text += f" Jupyter restarted it empty (kernel {self.kernel_id})."
        else:
            s.kernel_id = None
        s.state = "failed"
        s.error = {"message": text + older, "reason": "kernel-died", "state_intact": False}
        s.message = s.error["message"]
        await self.lc.table.persist(s)
        await self.lc.table.record_event(
            s,
            "pause_failed",
            self.reason,
            message=s.message,
            error_reason="kernel-died",
            **self._timings(),
        )

    async def _kernel_kept(self, manifest, e: BaseException) -> None:
        """After the commit point: the checkpoint is safe; only stopping the kernel failed."""
        s = self.s
        _, why = failure(e) if isinstance(e, Exception) else ("cancelled", "it was interrupted")
        s.state, s.checkpoint = "failed", checkpoint_brief(manifest)
        s.error = {
            "message": f"the checkpoint {manifest.id} is complete but the kernel could not be "
            f"stopped ({why}); its GPU may still be held. Shut the kernel down, or resume "
            "into it",
            "reason": "shutdown",
            "state_intact": True,
        }
        s.message = s.error["message"]
        await self.lc.table.persist(s)
        await self.lc.table.record_event(
            s,
            "pause_failed",
            self.reason,
            message=s.message,
            error_reason="shutdown",
            checkpoint_id=manifest.id,
            bytes=manifest.total_bytes,
            **self._timings(manifest),
        )

    def _timings(self, manifest=None) -> dict:
        """The detail keys every pause outcome carries (docs/metrics.md); ``new_bytes`` is
        null until a manifest is committed, ``gpu_released_seconds`` until the kernel stopped."""
        new = int(manifest.doc["totals"].get("new_bytes", 0)) if manifest else None
        return {
            **self.clock.report(),
            "gpu_released_seconds": self.gpu_released,
            "new_bytes": new,
        }
