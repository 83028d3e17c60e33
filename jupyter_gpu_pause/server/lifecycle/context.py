"""What each operation may use, named: the contexts ``Lifecycle`` builds once, complete, when it
is built, and hands to every pause, resume, dry run and recovery it starts, and to the store's
upkeep.

An operation reads only its context: a change to the resume path can touch what
``ResumeContext`` lists and nothing else, and a reader sees at a glance that a pause never
waits for capacity and a dry run never writes a record. Nothing here is set after it is built
(the contexts are frozen); the services that live above this room (the store's upkeep, the
activity tracker) come in through the protocols below, so the lifecycle imports none of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from ...kernel.protocol import Progress as AgentProgress
from ..state.model import Progress, Session

if TYPE_CHECKING:
    from ..capacity import Capacity
    from ..capacity.slots import RestoreSlots
    from ..kernels.bridge import KernelBridge
    from ..kernels.spares import WarmKernels
    from ..state.checkpoints import Checkpoints
    from ..state.records import Records
    from ..suspend.kept import KeptKernels
    from ..suspend.suspender import Suspender
    from .operations import Operations, PauseSettings
    from .sessions import SessionTable


class StoreUpkeep(Protocol):
    """What a pause tells the store's upkeep (``integrations.maintenance.StoreMaintenance``)."""

    def drop_intents(self, checkpoint_id: str) -> None:
        """The checkpoint is written, or never will be: its blobs need no protection from GC."""

    def after_pause(self, s: Session) -> None:
        """A pause completed: apply retention once its operation has ended."""


class EventOutbox(Protocol):
    """Where an event is recorded together with its webhook deliveries, in one transaction
    (``telemetry.webhooks.WebhookSender``), so a restart loses none."""

    async def record(self, event: dict, s: Session) -> None:
        """Record ``event`` of ``s`` and the deliveries it owes."""


class ResumeAdmission(Protocol):
    """Whether a resume may start, and where (``budgets.Budgets.admit``): the ``device`` to
    use, or a refusal (``BudgetExceeded``)."""

    async def __call__(
        self, s: Session, device: str | None, gpu_session: Callable[[Session], bool], /
    ) -> str | None: ...


class KernelUse(Protocol):
    """What a person did in which kernel (``monitor.activity.ActivityTracker``)."""

    def is_busy(self, kernel_id: str) -> bool:
        """A person's cell runs now (our agent's requests excluded)."""

    def ran_code(self, kernel_id: str) -> bool:
        """The kernel ran a person's code since it was watched."""

    def saw_code(self, kernel_id: str) -> None:
        """It did, as learned another way (its execution count, a call from a cell)."""

    def watch(self, kernel_id: str) -> None:
        """Start watching it now."""


@dataclass(frozen=True)
class PauseContext:
    bridge: KernelBridge
    table: SessionTable
    checkpoints: Checkpoints
    capacity: Capacity  # only to release the GPU once the kernel stopped
    settings: PauseSettings
    log: logging.Logger
    warm: WarmKernels | None  # told a GPU session is pausing, and which packages it uses
    upkeep: StoreUpkeep | None
    gpu_session: Callable[[Session], bool]
    # the suspend tier (None: the checkpoint tier, server/suspend/tier.py), and the kernels
    # kept suspended after their checkpoint is written (None: keep_suspended_seconds = 0)
    suspender: Suspender | None = None
    kept: KeptKernels | None = None
    keep_seconds: float = 0.0


@dataclass(frozen=True)
class ResumeContext:
    bridge: KernelBridge
    table: SessionTable
    checkpoints: Checkpoints
    capacity: Capacity
    settings: PauseSettings
    log: logging.Logger
    warm: WarmKernels | None  # a kernel to restore into, started ahead
    restore_slots: RestoreSlots
    resume_timeout: float  # seconds in line before a resume gives up (0: never)
    gpu_session: Callable[[Session], bool]
    # a resume whose restore report offers a rebuild that rebuild = "auto" runs unasked
    # hands it over (``Lifecycle.auto_rebuild``): it starts once the resume has ended
    auto_rebuild: Callable[[Session], None] | None = None
    suspender: Suspender | None = None  # a resume in place restores through it


@dataclass(frozen=True)
class CheckContext:
    """The dry run writes nothing: no table, no records, no store."""

    bridge: KernelBridge
    settings: PauseSettings
    ops: Operations  # a session with an operation in flight is not checked
    user_cell_running: Callable[[str], bool]
    require_agent: Callable[[Session, str], str]  # the running kernel's id, or WrongState


@dataclass(frozen=True)
class RecoveryContext:
    table: SessionTable
    records: Records  # the sessions a user discarded, which the store must not bring back
    checkpoints: Checkpoints
    settings: PauseSettings
    ops: Operations
    log: logging.Logger


@dataclass(frozen=True)
class UpkeepContext:
    """What the store's upkeep (retention, garbage collection) reads of the sessions."""

    table: SessionTable
    checkpoints: Checkpoints
    busy_sessions: Callable[[], set[str]]  # a pause or resume in flight: left alone
    op_task: Callable[[str], asyncio.Future | None]


def progress_into(s: Session) -> Callable[[AgentProgress], None]:
    """The agent's progress updates onto the session (what the panel and ``GET`` show)."""

    def update(p: AgentProgress) -> None:
        # the agent's keys but ``packages`` (the pool's, not ours) are the session's own
        s.progress = cast(Progress, {k: v for k, v in p.items() if k != "packages"})

    return update
