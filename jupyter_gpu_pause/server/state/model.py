"""The session record: one notebook (or console) and the kernel it has, under a stable id."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime

from ...store.format import iso, utcnow

STATES = ("active", "idle", "pausing", "suspended", "paused", "waiting", "restoring", "failed")
RUNNING = ("active", "idle")


@dataclass
class Session:
    """Persistent fields of a session; ``progress`` and ``queue_position`` live in memory only."""

    path: str
    kernel_name: str
    kernel_id: str | None = None
    name: str = ""
    type: str = "notebook"
    cwd: str = ""
    state: str = "active"
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    checkpoint: dict | None = None
    error: dict | None = None
    message: str | None = None
    restore: dict | None = None
    created: str = field(default_factory=lambda: iso(utcnow()))
    updated: str = field(default_factory=lambda: iso(utcnow()))
    # GPU-seconds, per device: held (of which idle) while running, reclaimed while paused
    gpu_seconds_held: float = 0.0
    gpu_seconds_idle: float = 0.0
    gpu_seconds_reclaimed: float = 0.0
    gpu_devices_paused: int = 0  # GPUs the kernel held when it was paused
    # where the last resume put the running kernel: "gpu" (granted), "cpu" (no GPU visible),
    # None (not placed by a resume); and the grant: {"devices": [GPU UUIDs], "bytes": n}
    device: str | None = None
    grant: dict | None = None
    # suspended in place (server/suspend/): {"since", "pids", "host_bytes", "gpu_bytes",
    # "checkpoint": "writing" | "written" | "failed", "kept_until", "gpu_released_seconds"}
    suspended: dict | None = None
    # the last pause or resume to end, with where its time went (sessions.OUTCOMES)
    last_operation: dict | None = None
    progress: dict | None = field(default=None, compare=False)
    queue_position: int | None = field(default=None, compare=False)
    # kept up to date by the idle monitor; meaningless after a restart, so not persisted
    last_activity: datetime | None = field(default=None, compare=False)
    pause_at: datetime | None = field(default=None, compare=False)
    policy: str | None = field(default=None, compare=False)
    gpu: dict | None = field(default=None, compare=False)
    idle_after: float | None = field(default=None, compare=False)
    # while waiting for capacity: {"since", "reason", "needs_bytes", "device"}
    waiting: dict | None = field(default=None, compare=False)

    TRANSIENT = (
        "progress",
        "queue_position",
        "waiting",
        "last_activity",
        "pause_at",
        "policy",
        "gpu",
        "idle_after",
    )

    def to_record(self) -> dict:
        d = asdict(self)
        for k in self.TRANSIENT:
            d.pop(k)
        return d

    @classmethod
    def from_record(cls, d: dict) -> Session:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def touch(self) -> None:
        self.updated = iso(utcnow())


def gpu_device_count(gpu: dict | None) -> int:
    """GPUs a kernel holds, from a probe reading (``Session.gpu``); 0 when it holds no memory."""
    if not gpu or not gpu.get("memory_bytes"):
        return 0
    return max(1, len(gpu.get("devices") or []))
