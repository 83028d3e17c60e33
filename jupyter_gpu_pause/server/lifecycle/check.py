"""The dry run of a pause: what would be saved and skipped, now, writing and changing nothing.

Refused while a person's cell runs: the dry run would wait behind it, and the dialog that asks
needs an answer at once.
"""

from __future__ import annotations

import asyncio

from ..kernels.replies import pairs
from ..state.errors import AgentFailed, GpuPauseError, WrongState
from ..state.model import RUNNING, Session
from .context import CheckContext

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


def unverified_of(raw) -> dict | None:
    """The agent's ``unverified`` ({"reason", "names"}: saved, but its test-restore could not
    judge them, ``kernel/trial.py``) if well formed, with short texts; else None."""
    if not isinstance(raw, dict):
        return None
    reason, names = raw.get("reason"), raw.get("names")
    if not isinstance(reason, str) or not isinstance(names, list):
        return None
    if not all(isinstance(n, str) for n in names):
        return None
    return {"reason": reason[:500], "names": [n[:200] for n in names]}


def ambient_of(raw) -> dict | None:
    """The agent's ``ambient`` ({"carried": [names], "not_carried": [{"name", "reason"}]}: what
    of the process around the namespace a pause carries, and what cannot travel) if well
    formed, with short texts; else None."""
    if not isinstance(raw, dict):
        return None
    carried, loose = raw.get("carried"), raw.get("not_carried")
    if not (isinstance(carried, list) and all(isinstance(n, str) for n in carried)):
        return None
    if not pairs(loose, "reason"):
        return None
    return {
        "carried": [n[:200] for n in carried],
        "not_carried": [{"name": x["name"][:200], "reason": x["reason"][:500]} for x in loose],
    }


def check_report(report: dict) -> dict:
    """The agent's dry-run report as the REST answer, if it has the expected shape."""
    objects, skipped, size = report.get("objects"), report.get("skipped"), report.get("bytes")
    error, registered = report.get("error"), report.get("registered", [])
    unverified = report.get("unverified")
    well_formed = (
        isinstance(objects, list)
        and all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in objects)
        and isinstance(skipped, list)
        and all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in skipped)
        and isinstance(size, int)
        and (error is None or isinstance(error, str))
        and isinstance(registered, list)
        and (unverified is None or unverified_of(unverified) is not None)
        and (report.get("ambient") is None or ambient_of(report["ambient"]) is not None)
    )
    if not well_formed:
        raise AgentFailed(
            "the kernel's agent sent a check report the server cannot read", "bad-agent-reply"
        )
    return {
        "objects": objects,
        "skipped": skipped,
        "registered": registered,
        "bytes": size,
        "error": error,
        # saved but not test-restored (a timeout, no fork, a fenced effect), or None
        "unverified": unverified_of(unverified),
        # what of the process state a pause carries, and what cannot travel; None when the
        # setting is off
        "ambient": ambient_of(report.get("ambient")),
    }


class DryRun:
    def __init__(self, ctx: CheckContext, s: Session):
        self.ctx, self.s = ctx, s

    async def run(self) -> dict:
        ctx, s = self.ctx, self.s
        self._require_checkable()
        kid = s.kernel_id
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
                    "check",
                    {
                        "capture": ctx.settings.capture,
                        "test_restore": ctx.settings.test_restore,
                        "ambient": ctx.settings.ambient,
                    },
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

    def _require_checkable(self) -> None:
        s = self.s
        if s.id in self.ctx.ops or s.state not in RUNNING:
            why = _NOT_CHECKABLE.get(s.state, "it has no running kernel")
            raise WrongState(
                f"cannot check what a pause would save: the session is {s.state} — {why}"
            )
        self.ctx.require_agent(s, "check")

    async def _still_busy(self, kernel_id: str, grace: float) -> bool:
        """A person's cell runs, and still does after ``grace`` seconds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        while self.ctx.user_cell_running(kernel_id):
            if loop.time() >= end:
                return True
            await asyncio.sleep(0.05)
        return False
