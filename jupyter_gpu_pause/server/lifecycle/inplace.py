"""A resume in place: the session's kernel is suspended (``pause.py``, the suspend tier), so its
CUDA state goes back onto the GPU instead of a new kernel reading the checkpoint. Wait for
capacity as any resume (``waiting``, its place in line) → the driver restores and unlocks the
kernel's processes → ``active``: the same kernel, every variable as it was.

If it cannot (no GPU in time, the driver refuses, cancelled): a kernel whose checkpoint was
never written stays ``suspended`` with every variable, saying why, and Resume tries again; one
whose checkpoint is written is stopped, the session ``paused``, and the next resume starts a new
kernel from that checkpoint.
"""

from __future__ import annotations

import functools

from ...store.format import iso
from ..state.errors import failure
from ..state.event_types import EventType
from ..state.model import Session, SessionState
from ..state.model import Suspension as SuspensionRecord
from ..suspend.session import guard_lifted, not_back
from .context import ResumeContext
from .operations import Op, Outcome
from .resume import Resume, ResumeOptions


def per_device(suspended: SuspensionRecord) -> list[int]:
    """The GPU memory the suspended kernel held, per device (one device if unknown)."""
    devices = max(1, len(suspended.get("devices") or []))
    total = int(suspended.get("gpu_bytes") or 0)
    return [total // devices] * devices


class ResumeInPlace(Resume):
    def __init__(self, ctx: ResumeContext, s: Session, op: Op):
        super().__init__(ctx, s, op, ResumeOptions(()))
        op.kernel_id = s.kernel_id
        # the suspension, as admission found it
        self.was: SuspensionRecord = s.suspended.copy() if s.suspended else {}

    def cpu_now(self) -> None:
        """A suspended kernel's CUDA state can only go back onto a GPU: it keeps its place."""

    def after_work(self) -> None:
        self.s.progress, self.s.queue_position, self.s.waiting = None, None, None

    async def work(self) -> Outcome:
        s, ctx = self.s, self.ctx
        self.was = s.suspended.copy() if s.suspended else {}
        self.clock.enter("capacity")
        on = tuple(self.was.get("devices") or ())  # its own GPUs: the driver's restore
        need = ctx.capacity.need(s.id, per_device(self.was), on)
        grant = await self._wait_in_line(need, "gpu")
        s.state, s.device = SessionState.RESTORING, "gpu"
        s.grant = {"devices": grant.devices, "bytes": grant.bytes}
        s.message = "Restoring in place: copying the kernel's memory back to the GPU"
        s.progress = {"phase": "restoring", "done_bytes": 0, "total_bytes": None}
        self.clock.enter("read")
        assert ctx.suspender is not None  # a session is only suspended by the suspend tier
        await ctx.suspender.restore(self.was.get("pids") or [])
        await guard_lifted(ctx.bridge.run_agent, s)
        return functools.partial(self._back, grant)

    async def cancelled(self) -> None:
        await self.ctx.capacity.release(self.s.id)
        await self._not_back(None)

    async def failed(self, e: Exception) -> None:
        await self.ctx.capacity.release(self.s.id)
        await self._not_back(e)

    async def _back(self, grant) -> None:
        s, ctx = self.s, self.ctx
        timings = self.clock.report()
        s.state, s.error, s.suspended = SessionState.ACTIVE, None, None
        s.message = "Resumed in place: the same kernel, every variable as it was"
        await ctx.table.persist(s)
        await ctx.table.record_event(
            s,
            EventType.RESUMED,
            "user",
            in_place=True,
            kernel_id=s.kernel_id,
            checkpoint_id=s.checkpoint["id"] if s.checkpoint else None,
            device="gpu",
            devices=grant.devices,
            waited_seconds=round(self.waited, 3),
            granted_at=iso(self.granted_at) if self.granted_at else None,
            message=s.message,
            **timings,
        )

    async def _not_back(self, e: Exception | None) -> None:
        reason, text = failure(e) if e is not None else ("cancelled", "the resume was cancelled")
        ctx = self.ctx
        await not_back(
            ctx.table, ctx.bridge.kill, self.s, self.was, reason, text, self.clock.report()
        )
