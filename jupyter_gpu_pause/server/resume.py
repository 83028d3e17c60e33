"""Resume, one straight line: pick the newest checkpoint that verifies → wait for capacity →
start a kernel (or use the one the caller named) → the agent checks every blob, then restores →
attach the notebook. A damaged checkpoint falls back to the next older one.

A mixin of ``Lifecycle``: it shares the session table, the operations and the admission lock.
"""

from __future__ import annotations

import asyncio

from ..store import IntegrityError, StoreError
from ..store.format import check_checkpoint_id
from ..units import count_text
from .errors import AgentFailed, BadRequest, NotFound, WrongState
from .model import Session
from .operations import DEVICES, Op, checkpoint_brief, gpu_bytes

NONE_VALID = "no checkpoint of this session passed verification"


class ResumeMixin:
    async def resume(self, session_id: str, **options) -> Session:
        """Start (or join) a resume; returns at once with the session ``waiting``."""
        async with self._admission:
            return await self._admit_resume(session_id, **options)

    async def _admit_resume(
        self,
        session_id: str,
        checkpoint_id: str | None = None,
        device: str = "any",
        into_kernel: str | None = None,
    ) -> Session:
        s = self.get(session_id)
        if device not in DEVICES:
            raise BadRequest(
                f"device must be one of {', '.join(DEVICES)}, not {device!r}", "bad-device"
            )
        if checkpoint_id is not None:
            try:
                check_checkpoint_id(checkpoint_id)
            except ValueError as e:
                raise BadRequest(str(e), "bad-checkpoint-id") from None
        op = self._ops.get(s.id)
        if op and op.kind == "resume":
            return s
        if op or not (s.state == "paused" or (s.state == "failed" and s.checkpoint)):
            raise WrongState(f"cannot resume: the session is {s.state}")
        ids = await self.checkpoints.ids(s.id)
        if checkpoint_id is not None:
            if checkpoint_id not in ids:
                raise NotFound(f"session has no checkpoint {checkpoint_id}", "unknown-checkpoint")
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
        if live and into_kernel is None:
            raise WrongState(
                f"{s.path} already has a running kernel ({live}); resuming would overwrite its "
                "variables. Pass into_kernel to restore into it, or shut it down first.",
                "kernel-exists",
            )
        s.state, s.error, s.message = "waiting", None, "Waiting for capacity"
        await self.records.save(s)
        op = Op("resume", kernel_id=into_kernel)
        self._start(s, op, self._resume(s, op, ids, device, into_kernel))
        return s

    async def _first_valid(self, s: Session, ids: list[str], refused: list[dict]):
        while ids:
            cid = ids.pop(0)
            try:
                return await self.checkpoints.verify(s.id, cid)
            except (IntegrityError, StoreError) as e:
                refused.append(
                    {
                        "checkpoint_id": cid,
                        "message": f"checkpoint {cid}: {e}",
                        "check": getattr(e, "check", "store"),
                    }
                )
        return None

    async def _resume(self, s: Session, op: Op, ids: list[str], device: str, into: str | None):
        refused: list[dict] = []
        started = None
        try:
            manifest = await self._first_valid(s, ids, refused)
            if manifest is None:
                raise AgentFailed(NONE_VALID, "integrity")

            def queued(pos: int) -> None:
                s.queue_position = pos

            grant = await self.capacity.acquire(s.id, gpu_bytes(manifest), device, queued)
            s.state, s.queue_position, s.message = "restoring", None, "Restoring"
            s.progress = {"phase": "starting", "done_bytes": 0, "total_bytes": manifest.total_bytes}
            await self.records.save(s)
            kid = into or await self.bridge.start(s.kernel_name, s.cwd, s.path, grant.env)
            started, op.kernel_id = (None if into else kid), kid
            while True:
                try:
                    report = await self.bridge.run_agent(
                        kid,
                        "restore",
                        {
                            "manifest": manifest.doc,
                            "store_url": self.checkpoints.store.url,
                            "store_options": self.settings["store_options"],
                            "device": device,
                        },
                        self._on_progress(s),
                    )
                    break
                except AgentFailed as e:
                    if e.reason != "integrity":
                        raise
                    refused.append(
                        {"checkpoint_id": manifest.id, "message": e.message, "check": e.check}
                    )
                    manifest = await self._first_valid(s, ids, refused)
                    if manifest is None:
                        raise AgentFailed(NONE_VALID, "integrity") from e
            await self.bridge.attach(s.path, s.name, s.type, s.kernel_name, kid)
        except asyncio.CancelledError:
            await self._resume_undo(s, started)
            s.state, s.message = "paused", "Resume cancelled"
            await self.record_event(s, "cancelled", "user", message=s.message)
            return
        except Exception as e:
            await self._resume_undo(s, started)
            text = getattr(e, "message", None) or str(e)
            # Every checkpoint refused: the saved state cannot come back, so say so plainly.
            lost = bool(refused) and getattr(e, "reason", None) == "integrity"
            if refused:
                text += " — refused: " + "; ".join(r["message"] for r in refused)
            s.state = "failed"
            s.error = {
                "message": text,
                "reason": getattr(e, "reason", "error"),
                "state_intact": not lost,
                "refused": refused,
            }
            s.message = f"Resume failed: {text}. The checkpoints are unchanged."
            await self.record_event(s, "resume_failed", "user", message=text, refused=refused)
            return
        finally:
            s.progress, s.queue_position = None, None
            await self.records.save(s)
        for other in [o for o in self.sessions.values() if o.kernel_id == kid and o is not s]:
            del self.sessions[other.id]  # the record of into_kernel merges into this one
            await self.records.delete(other.id)
        s.state, s.kernel_id = "active", kid
        s.checkpoint = checkpoint_brief(manifest)
        s.restore = {**report, "refused": refused}
        failed, restored = report["failed"], count_text(len(report["restored"]), "object")
        s.message = (
            f"Restored {restored} from checkpoint {manifest.id}"
            + (f"; not restored: {', '.join(f['name'] for f in failed)}" if failed else "")
            + (f"; {len(refused)} newer checkpoint(s) refused" if refused else "")
        )
        await self.records.save(s)
        await self.record_event(
            s,
            "resumed",
            "user",
            checkpoint_id=manifest.id,
            kernel_id=kid,
            restored=report["restored"],
            failed=failed,
            refused=refused,
            message=s.message,
        )

    async def _resume_undo(self, s: Session, started: str | None) -> None:
        self.capacity.release(s.id)
        if started:
            try:
                await self.bridge.shutdown(started)
            except Exception:
                self.log.exception("could not shut down kernel %s after a failed resume", started)

    # -- cancel, delete ------------------------------------------------------------------------
