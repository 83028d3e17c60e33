"""The dry run of a pause: what would be saved and skipped, now, writing and changing nothing.

Refused while a person's cell runs: the dry run would wait behind it, and the dialog that asks
needs an answer at once.
"""

from __future__ import annotations

import asyncio

from ...kernel.protocol import CHECK, CheckArgs, CheckReply
from ..kernels.replies import check_report
from ..state.errors import AgentFailed, GpuPauseError, WrongState
from ..state.model import RUNNING, Session, SessionState
from .context import CheckContext

CHECK_TIMEOUT = 30.0  # seconds a dry run may take before the check gives up
BUSY_GRACE = 1.0  # seconds a check waits for a cell that is just ending (its idle in flight)

# Why a session that is not running cannot be checked, in words for the user.
_NOT_CHECKABLE = {
    SessionState.PAUSING: "a pause of it is already under way",
    SessionState.PAUSED: "its kernel is stopped, and its checkpoint lists what was saved",
    SessionState.WAITING: "it is waiting for a GPU to resume and has no kernel yet",
    SessionState.RESTORING: "it is being resumed, so check again once its kernel runs",
    SessionState.FAILED: "its last operation failed and there is no kernel to check",
}


class DryRun:
    def __init__(self, ctx: CheckContext, s: Session):
        self.ctx, self.s = ctx, s

    async def run(self) -> CheckReply:
        ctx = self.ctx
        kid = self._require_checkable()
        if await self._still_busy(kid, BUSY_GRACE):
            raise WrongState(
                "the kernel is running a cell; check again when it has finished "
                "(a pause asked now waits for the cell)",
                "kernel-busy",
            )
        self._require_checkable()  # a pause may have begun while the cell ended
        try:
            report = await asyncio.wait_for(
                ctx.bridge.run_agent(
                    kid,
                    CHECK,
                    CheckArgs(
                        capture=ctx.settings.capture,
                        test_restore=ctx.settings.test_restore,
                        ambient=ctx.settings.ambient,
                    ),
                ),
                CHECK_TIMEOUT,
            )
        except asyncio.TimeoutError:
            if ctx.user_cell_running(kid):
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
        return check_report(report)

    def _require_checkable(self) -> str:
        """The running kernel's id, or WrongState saying why the session cannot be checked."""
        s = self.s
        if s.id in self.ctx.ops or s.state not in RUNNING:
            why = _NOT_CHECKABLE.get(s.state, "it has no running kernel")
            raise WrongState(
                f"cannot check what a pause would save: the session is {s.state} — {why}"
            )
        return self.ctx.require_agent(s, "check")

    async def _still_busy(self, kernel_id: str, grace: float) -> bool:
        """A person's cell runs, and still does after ``grace`` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        while self.ctx.user_cell_running(kernel_id):
            if loop.time() >= end:
                return True
            await asyncio.sleep(0.05)
        return False
