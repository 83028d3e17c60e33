"""Running pauses and resumes: at most one per session, and each one ends in a defined state.

``Pause`` and ``Resume`` handle every failure they can name. ``Operations`` is the net under
them: whatever escapes an operation (a bug, an exception inside a failure handler), the session
is handed to ``rescue`` so it never stays ``pausing``, ``waiting`` or ``restoring`` with no
operation behind it — a state nobody could leave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..state.model import Session

DEVICES = ("gpu", "cpu", "any")  # where a resume may put the kernel (REST ``device``)
IN_FLIGHT = ("pausing", "waiting", "restoring")


@dataclass(frozen=True)
class PauseSettings:
    """What every capture is asked to do, from the admin's configuration."""

    store_url: str
    store_options: dict = field(default_factory=dict)
    store_timeout: float = 30.0
    # whose server this is and the folder it serves: recorded in every manifest, so a server
    # that lost its records finds its own sessions in a store others share (recovery.py)
    owner: str = ""
    root_dir: str = ""
    capture: str = "namespace"
    max_checkpoint_bytes: int = 0
    verify: bool = True
    test_restore: bool = True  # load the plan back in a forked copy before committing
    ambient: bool = True  # carry and restore the process state around the namespace
    rebuild: str = "ask"  # what a resume does with names it did not bring back (rebuild.py)
    rebuild_auto_seconds: float = 5.0


@dataclass
class Op:
    kind: str  # "pause" | "resume" | "rebuild"
    session: Session
    kernel_id: str | None = None  # pause: the kernel paused; resume: the kernel restored into
    reason: str = "user"  # who asked: "user" or "policy:<name>", for the events
    task: asyncio.Task | None = None
    committed: bool = False  # pause: manifest verified, cancel no longer possible
    # pause: the kernel is suspended in place (the GPU released): its state lives only in
    # the kernel until the checkpoint is written, so a stopping server lets the write finish
    suspended: bool = False
    control: object | None = None  # the running Pause or Resume (a resume: ``cpu_now``)
    # set by whoever cancels a pause for its own reason (a stopping server, shutdown.py):
    # called with the session instead of recording a user's cancel
    abandon: Callable[[Session], Awaitable[None]] | None = None


class Operations:
    """The operations in flight, by session id."""

    def __init__(self, rescue: Callable[[Op, BaseException | None], Awaitable[None]], log):
        self._ops: dict[str, Op] = {}
        self._rescue = rescue
        self.log = log

    def get(self, session_id: str) -> Op | None:
        return self._ops.get(session_id)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._ops

    def session_ids(self) -> set[str]:
        return set(self._ops)

    def kernel_ids(self) -> set[str]:
        return {op.kernel_id for op in self._ops.values() if op.kernel_id}

    def start(self, op: Op, body: Awaitable[None]) -> None:
        """Run ``body`` as the session's operation; the session is registered until it ends."""
        self._ops[op.session.id] = op
        op.task = asyncio.ensure_future(self._run(op, body))

    async def _run(self, op: Op, body: Awaitable[None]) -> None:
        escaped: BaseException | None = None
        try:
            await body
        except asyncio.CancelledError as e:
            escaped = e
            raise
        except Exception as e:
            escaped = e
            self.log.exception("jupyter_gpu_pause: %s of %s failed", op.kind, op.session.path)
        finally:
            if self._ops.get(op.session.id) is op:
                del self._ops[op.session.id]
            if op.session.state in IN_FLIGHT:
                await self._rescue(op, escaped)

    async def cancel(self, op: Op) -> None:
        """Cancel an operation and wait until it has settled its session."""
        if op.task is not None:
            op.task.cancel()
            await asyncio.gather(op.task, return_exceptions=True)

    async def drain(self, timeout: float) -> None:
        """Server stop: cancel what is not committed, give the rest ``timeout`` seconds."""
        for op in list(self._ops.values()):
            if op.task and not (op.committed or op.suspended):
                op.task.cancel()
        tasks = [op.task for op in self._ops.values() if op.task]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
