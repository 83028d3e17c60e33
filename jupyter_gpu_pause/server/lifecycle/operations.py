"""Running pauses and resumes: at most one per session, each one the same shape, and each one
ending in a defined state.

Every operation (``Pause``, ``Resume``, ``ResumeInPlace``, ``Rebuild``) is an ``Operation``:
admission → work → commit → outcome. Admission (``admit``, under the lifecycle's lock) shows the
session's in-flight state; ``work`` runs up to and past the commit point and names the outcome;
the template then marks the operation *settling* and publishes the outcome. A state an outcome
publishes is visible before its tail has run (the record written, the event sent): an action
asked in that window waits for the tail (``Operations.settled``) instead of being refused, so a
session shown ``paused`` always accepts a resume.

``Operations`` is the net under them: whatever escapes an operation (a bug, an exception inside
a failure handler), the session is handed to ``rescue`` so it never stays ``pausing``,
``waiting`` or ``restoring`` with no operation behind it — a state nobody could leave.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...kernel.protocol import (
    DEFAULT_AMBIENT,
    DEFAULT_CAPTURE,
    DEFAULT_MAX_BYTES,
    DEFAULT_REBUILD,
    DEFAULT_STORE_TIMEOUT,
    DEFAULT_TEST_RESTORE,
    DEFAULT_VERIFY,
    CaptureMode,
    RebuildMode,
)
from ..state.asker import Asker
from ..state.model import IN_FLIGHT, Session

DEVICES = ("gpu", "cpu", "any")  # where a resume may put the kernel (REST ``device``)


@dataclass(frozen=True)
class PauseSettings:
    """What every capture and restore is asked to do, from the admin's configuration; the
    defaults are the agent's own (``kernel/protocol.py``)."""

    store_url: str
    store_options: dict[str, Any] = field(default_factory=dict)
    store_timeout: float = DEFAULT_STORE_TIMEOUT
    # whose server this is and the folder it serves: recorded in every manifest, so a server
    # that lost its records finds its own sessions in a store others share (recovery.py)
    owner: str = ""
    root_dir: str = ""
    capture: CaptureMode = DEFAULT_CAPTURE
    max_checkpoint_bytes: int = DEFAULT_MAX_BYTES
    verify: bool = DEFAULT_VERIFY
    # load the plan back in a forked copy before committing
    test_restore: bool = DEFAULT_TEST_RESTORE
    ambient: bool = DEFAULT_AMBIENT  # carry and restore the process state around the namespace
    # what a resume does with names it did not bring back (rebuild.py)
    rebuild: RebuildMode = DEFAULT_REBUILD
    rebuild_auto_seconds: float = 5.0


@dataclass
class Op:
    kind: str  # "pause" | "resume" | "rebuild"
    session: Session
    kernel_id: str | None = None  # pause: the kernel paused; resume: the kernel restored into
    reason: str = "user"  # who asked: "user", "admin" or "policy:<name>", for the events
    # pause: the admin it runs for (None: the user's own, or a policy's); one who joins a
    # pause that has none becomes it, so the user still learns an admin wanted it
    asker: Asker | None = None
    # whoever cancelled it on a user's behalf: the ``cancelled`` event names them
    cancelled_by: Asker | None = None
    task: asyncio.Task | None = None
    committed: bool = False  # pause: manifest verified, cancel no longer possible
    # pause: the kernel is suspended in place (the GPU released): its state lives only in
    # the kernel until the checkpoint is written, so a stopping server lets the write finish
    suspended: bool = False
    control: object | None = None  # the running Pause or Resume (a resume: ``cpu_now``)
    # the outcome is being published: the session's state is final, its record and event are
    # still being written; an action asked now waits for that (``Operations.settled``)
    settling: bool = False
    # set by whoever cancels a pause for its own reason (a stopping server, shutdown.py):
    # called with the session instead of recording a user's cancel
    abandon: Callable[[Session], Awaitable[None]] | None = None


Outcome = Callable[[], Awaitable[None]]


class Operation(ABC):
    """One operation on one session: admission → work → commit → outcome.

    ``admit`` runs under the admission lock, before the operation is registered, and shows the
    in-flight state. ``work`` does everything up to and past the commit point and returns the
    outcome to publish; when it ends early, ``cancelled`` or ``failed`` is the outcome. The
    template owns the step between the two: from ``settling`` on, the state the outcome writes
    is what every action sees, and actions wait for the outcome to finish recording it.
    """

    kind: ClassVar[str]

    def __init__(self, s: Session, op: Op):
        self.s, self.op = s, op
        op.control = self

    @abstractmethod
    def admit(self) -> None:
        """The session's in-flight state, shown as soon as admission registers the operation."""

    @abstractmethod
    async def work(self) -> Outcome:
        """Everything before the outcome; returns it (an awaitable callable)."""

    @abstractmethod
    async def cancelled(self) -> None:
        """The outcome when the work was cancelled (a user's cancel, a stopping server)."""

    @abstractmethod
    async def failed(self, e: Exception) -> None:
        """The outcome when the work raised ``e``."""

    def after_work(self) -> None:
        """Clears what only the work shows (progress), whatever its end."""
        self.s.progress = None

    async def run(self) -> None:
        outcome: Outcome
        try:
            outcome = await self.work()
        except asyncio.CancelledError:
            outcome = self.cancelled
        except Exception as e:
            outcome = functools.partial(self.failed, e)
        finally:
            self.after_work()
        self.op.settling = True
        await outcome()


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

    def start(self, op: Op, operation: Operation) -> None:
        """Admit ``operation`` (its in-flight state) and run it as the session's operation;
        the session is registered until it ends."""
        operation.admit()
        self._ops[op.session.id] = op
        op.task = asyncio.ensure_future(self._run(op, operation.run()))

    async def settled(self, session_id: str) -> Op | None:
        """The session's operation in flight, once its outcome is published: one that is
        settling is waited for (its state is already the outcome, only its record and event
        are still being written), so an action never refuses a state it offers."""
        op = self._ops.get(session_id)
        while op is not None and op.settling and op.task is not None:
            await asyncio.wait([op.task])
            op = self._ops.get(session_id)
        return op

    async def published(self) -> None:
        """Return once no operation is between publishing its outcome and recording it (a
        few milliseconds: the record and the event): a reader that sees an outcome's state
        (``paused``, ``active``…) then finds its event in the records too."""
        me = asyncio.current_task()
        tasks = [
            op.task
            for op in self._ops.values()
            if op.settling and op.task is not None and op.task is not me
        ]
        if tasks:
            await asyncio.wait(tasks)

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
            if op.task and not (op.committed or op.suspended or op.settling):
                op.task.cancel()
        tasks = [op.task for op in self._ops.values() if op.task]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
