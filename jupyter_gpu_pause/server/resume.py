"""One resume, as one straight line: pick the newest checkpoint that verifies → wait for capacity
→ start a kernel (or use the one the caller named) → the agent checks every blob, then restores →
attach the notebook. A damaged checkpoint falls back to the next older one.

Whatever fails, the checkpoints are unchanged: the session ends ``failed`` (saying whether any
checkpoint can still bring the state back) or, when cancelled, ``paused``; a kernel started for
the resume is shut down again and the capacity grant released.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..store import IntegrityError, StoreError
from ..units import count_text
from .errors import AgentFailed, GpuPauseError
from .model import Session
from .operations import Op, checkpoint_brief, gpu_bytes
from .pause import failure

NONE_VALID = "no checkpoint of this session passed verification"


@dataclass(frozen=True)
class ResumeOptions:
    """What the caller asked for (REST body, checked by ``Lifecycle.resume``)."""

    checkpoint_ids: tuple[str, ...]  # newest first: tried in this order
    device: str = "any"
    into_kernel: str | None = None


def check_restore_report(report: dict) -> dict:
    """The agent's restore report, if it has the shape the session and the UI rely on."""

    def names(items) -> bool:
        return isinstance(items, list) and all(isinstance(x, str) for x in items)

    def pairs(items, second: str) -> bool:
        return isinstance(items, list) and all(
            isinstance(x, dict)
            and isinstance(x.get("name"), str)
            and isinstance(x.get(second), str)
            for x in items
        )

    if not (
        names(report.get("restored"))
        and names(report.get("registered"))
        and pairs(report.get("failed"), "reason")
        and pairs(report.get("skipped"), "reason")
    ):
        raise AgentFailed(
            "the kernel's agent sent a restore report the server cannot read", "bad-agent-reply"
        )
    return report


class Resume:
    def __init__(self, lc, s: Session, op: Op, options: ResumeOptions):
        self.lc, self.s, self.op, self.options = lc, s, op, options
        self.ids = list(options.checkpoint_ids)
        self.refused: list[dict] = []
        self.started: str | None = None  # a kernel this resume started (shut down on failure)

    async def run(self) -> None:
        try:
            manifest, kid, report = await self._restore()
        except asyncio.CancelledError:
            await self._undo()
            await self._cancelled()
            return
        except Exception as e:
            await self._undo()
            await self._failed(e)
            return
        finally:
            self.s.progress, self.s.queue_position = None, None
        await self._resumed(manifest, kid, report)

    async def _restore(self):
        s, lc, into = self.s, self.lc, self.options.into_kernel
        manifest = await self._next_valid()
        if manifest is None:
            raise AgentFailed(NONE_VALID, "integrity")

        def queued(pos: int) -> None:
            s.queue_position = pos

        try:
            grant = await lc.capacity.acquire(
                s.id, gpu_bytes(manifest), self.options.device, queued
            )
        except GpuPauseError:
            raise
        except Exception as e:  # the provider's backend (a scheduler, a database) failed
            raise GpuPauseError(
                f"the capacity provider '{lc.capacity.name}' failed ({type(e).__name__}: {e})",
                "capacity",
            ) from e
        s.state, s.queue_position, s.message = "restoring", None, "Restoring"
        s.progress = {"phase": "starting", "done_bytes": 0, "total_bytes": manifest.total_bytes}
        await lc.persist(s)
        if into:
            kid = into
        else:
            kid = self.started = await lc.bridge.start(
                s.kernel_name, s.cwd, s.path, s.name, grant.env
            )
        self.op.kernel_id = kid
        while True:
            try:
                report = await lc.bridge.run_agent(
                    kid,
                    "restore",
                    {
                        "manifest": manifest.doc,
                        "store_url": lc.settings.store_url,
                        "store_options": lc.settings.store_options,
                        "device": self.options.device,
                    },
                    lc.on_progress(s),
                )
                break
            except AgentFailed as e:
                if e.reason != "integrity":
                    raise
                self.refused.append(
                    {"checkpoint_id": manifest.id, "message": e.message, "check": e.check}
                )
                manifest = await self._next_valid()
                if manifest is None:
                    raise AgentFailed(NONE_VALID, "integrity") from e
        check_restore_report(report)
        await lc.bridge.attach(s.path, s.name, s.type, s.kernel_name, kid)
        return manifest, kid, report

    async def _next_valid(self):
        """The newest checkpoint not tried yet that verifies, or None; refusals are recorded."""
        while self.ids:
            cid = self.ids.pop(0)
            try:
                return await self.lc.checkpoints.verify(self.s.id, cid)
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
        try:
            self.lc.capacity.release(self.s.id)
        except Exception:
            self.lc.log.exception("jupyter_gpu_pause: could not release capacity")
        if self.started:
            try:
                await self.lc.bridge.shutdown(self.started)
            except Exception:
                self.lc.log.exception(
                    "jupyter_gpu_pause: could not shut down kernel %s after a failed resume",
                    self.started,
                )

    # -- outcomes -------------------------------------------------------------------------------
    async def _resumed(self, manifest, kid: str, report: dict) -> None:
        s, lc = self.s, self.lc
        await lc.merge_into(s, kid)  # the record of into_kernel merges into this one
        s.state, s.kernel_id, s.error = "active", kid, None
        s.checkpoint = checkpoint_brief(manifest)
        s.restore = {**report, "refused": self.refused}
        failed, restored = report["failed"], count_text(len(report["restored"]), "object")
        s.message = (
            f"Restored {restored} from checkpoint {manifest.id}"
            + (f"; not restored: {', '.join(f['name'] for f in failed)}" if failed else "")
            + (f"; {len(self.refused)} newer checkpoint(s) refused" if self.refused else "")
        )
        await lc.persist(s)
        await lc.record_event(
            s,
            "resumed",
            "user",
            checkpoint_id=manifest.id,
            kernel_id=kid,
            restored=report["restored"],
            failed=failed,
            refused=self.refused,
            message=s.message,
        )

    async def _cancelled(self) -> None:
        s = self.s
        s.state, s.message = "paused", "Resume cancelled"
        await self.lc.persist(s)
        await self.lc.record_event(s, "cancelled", "user", message=s.message)

    async def _failed(self, e: BaseException) -> None:
        s = self.s
        reason, text = failure(e)
        if reason == "internal":
            self.lc.log.error("jupyter_gpu_pause: resume of %s", s.path, exc_info=e)
        # Every checkpoint refused: the saved state cannot come back, so say so plainly.
        lost = bool(self.refused) and reason == "integrity"
        if self.refused:
            text += " — refused: " + "; ".join(r["message"] for r in self.refused)
        s.state = "failed"
        if self.started or not self.options.into_kernel:
            s.kernel_id = None  # the kernel started for the resume is gone again
        s.error = {
            "message": text,
            "reason": reason,
            "state_intact": not lost,
            "refused": self.refused,
        }
        s.message = f"Resume failed: {text}. The checkpoints are unchanged."
        await self.lc.persist(s)
        await self.lc.record_event(
            s, "resume_failed", "user", message=text, error_reason=reason, refused=self.refused
        )
