"""Capacity providers: may a resumed kernel run now, and on which GPU?

The resume path always goes through ``acquire``; the provider answers with a grant (devices and
environment for the new kernel) or keeps the caller waiting with a queue position. An admin
swaps the provider with ``c.GpuPauseApp.capacity_provider_class``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from traitlets.config import LoggingConfigurable


@dataclass
class Grant:
    """What the new kernel may use: device ids and the environment that pins it to them."""

    devices: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class CapacityProvider(LoggingConfigurable):
    """Base class: subclasses implement ``acquire``, ``release`` and ``describe``."""

    name = "base"

    async def acquire(
        self,
        session_id: str,
        gpu_bytes: int,
        device: str,
        on_queue: Callable[[int], None] | None = None,
    ) -> Grant:
        """Wait until the session may run; cancelling the awaiting task leaves the queue."""
        raise NotImplementedError

    def release(self, session_id: str) -> None:
        """Give back what ``acquire`` granted (on pause, on failure)."""

    def describe(self) -> dict:
        return {"provider": self.name, "devices": [], "queue": []}


class UnlimitedCapacity(CapacityProvider):
    """No GPU accounting: every resume may start at once (CPU machines, single-user boxes)."""

    name = "unlimited"

    async def acquire(self, session_id, gpu_bytes, device, on_queue=None) -> Grant:
        return Grant()
