"""What the idle monitor may use of the lifecycle, named: the sessions it watches and the two
actions its policies take (pause, cull). ``Lifecycle`` is the one implementation; a reader sees
here that the monitor never starts a resume, never reads the store, and records its warnings
and failures only through the session table's own methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..state.model import Session, SessionState

if TYPE_CHECKING:
    from ..kernels.bridge import KernelBridge
    from ..lifecycle.operations import PauseSettings
    from ..state.records import Records


class WatchedSessions(Protocol):
    """The session table as the monitor reads and tells it."""

    @property
    def sessions(self) -> Mapping[str, Session]: ...

    @property
    def waiting_kernels(self) -> Mapping[str, Any]: ...

    def get(self, session_id: str) -> Session: ...

    def session_for_kernel(self, kernel_id: str) -> Session | None: ...

    async def refresh(self) -> None: ...

    async def persist(self, s: Session) -> None: ...

    async def fail(
        self,
        s: Session,
        event: str,
        by: str,
        *,
        reason: str,
        text: str,
        intact: bool,
        state: SessionState | None = SessionState.FAILED,
        message: str | None = None,
        error: dict[str, Any] | None = None,
        **detail: Any,
    ) -> None: ...

    async def record_event(self, s: Session, type_: str, reason: str, /, **detail: Any) -> None: ...

    async def unpausable(self, s: Session, reason: str, message: str) -> None: ...


class Governed(Protocol):
    """The lifecycle, as the monitor governs it."""

    @property
    def table(self) -> WatchedSessions: ...

    @property
    def bridge(self) -> KernelBridge: ...

    @property
    def records(self) -> Records: ...  # the GPU-seconds ledger's database

    @property
    def settings(self) -> PauseSettings: ...  # what a dry run before a warning checks

    def busy_sessions(self) -> set[str]: ...

    def kernels_in_flight(self) -> set[str]: ...

    def op_task(self, session_id: str) -> asyncio.Future[Any] | None: ...

    def gpu_session(self, s: Session) -> bool: ...

    def capacity_changed(self) -> None: ...

    async def pause(self, session_id: str, reason: str = "user") -> Session: ...

    async def cull(self, session_id: str, reason: str) -> None: ...
