"""The session record: one notebook (or console) and the kernel it has, under a stable id."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypedDict

from ...store.format import iso, utcnow


class SessionState(StrEnum):
    """A session's state (REST ``state``; docs/states.md). A member is its own string, so
    records, events and JSON hold the plain word."""

    ACTIVE = "active"
    IDLE = "idle"
    PAUSING = "pausing"
    SUSPENDED = "suspended"
    PAUSED = "paused"
    WAITING = "waiting"
    RESTORING = "restoring"
    FAILED = "failed"


STATES = tuple(SessionState)
RUNNING = (SessionState.ACTIVE, SessionState.IDLE)
# an operation is under way: only the operation itself (or the rescue under it) leaves these
IN_FLIGHT = (SessionState.PAUSING, SessionState.WAITING, SessionState.RESTORING)


# -- the records a Session holds (the REST API's shapes: server/web/api.yaml) --------------------
class SessionError(TypedDict, total=False):
    """What failed (``state.errors.session_error``): always message, reason, state_intact;
    a failure may add its own fields (``refused``, ``in_place``)."""

    message: str
    reason: str
    state_intact: bool
    refused: list[dict[str, Any]]
    in_place: bool


class Progress(TypedDict, total=False):
    """An operation's progress: ``phase`` and bytes (``unit`` "cells" for a rebuild)."""

    phase: str
    done_bytes: int
    total_bytes: int | None
    unit: str
    host_bytes: int


class CheckpointBrief(TypedDict):
    """The session's newest checkpoint (``state.checkpoints.checkpoint_brief``)."""

    id: str
    created: str
    bytes: int
    objects: int
    skipped: int
    skipped_objects: list[dict[str, Any]]
    gpu_bytes: int
    packages: list[str]


class Suspension(TypedDict, total=False):
    """A kernel suspended in place (``server/suspend/``); ``pids`` stay on the server."""

    since: str
    pids: list[int]
    host_bytes: int | None
    gpu_bytes: int
    devices: list[str]
    checkpoint: str  # "writing" | "written" | "failed"
    kept_until: str | None
    gpu_released_seconds: float


class Waiting(TypedDict, total=False):
    """A resume waiting for capacity: since when, why, and for how much."""

    since: str
    reason: str
    needs_bytes: int | None
    device: str


class GrantRecord(TypedDict):
    """The GPUs a resume was granted (their UUIDs) and the memory it asked for."""

    devices: list[str]
    bytes: int


class LastOperation(TypedDict):
    """The last pause or resume to end and where its time went (``sessions.last_operation``)."""

    operation: str
    outcome: str
    time: str
    duration_seconds: float | None
    timings: dict[str, float]
    gpu_released_seconds: float | None


class Pausable(TypedDict, total=False):
    """Whether the kernel can be paused (``lifecycle/pausable.py``): ``{"ok": true}`` once
    known pausable, ``{"ok": false, "reason", "message"}`` once known not; the session holds
    None while nobody knows yet."""

    ok: bool
    reason: str
    message: str


RestoreReport = dict[str, Any]  # the agent's restore report, checked (kernels/replies.py)
GpuReading = dict[str, Any]  # the probe's last reading of the kernel's GPU use


@dataclass
class Session:
    """Persistent fields of a session; ``progress`` and ``queue_position`` live in memory only."""

    path: str
    kernel_name: str
    kernel_id: str | None = None
    name: str = ""
    type: str = "notebook"
    cwd: str = ""
    state: SessionState = SessionState.ACTIVE
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    checkpoint: CheckpointBrief | None = None
    error: SessionError | None = None
    message: str | None = None
    restore: RestoreReport | None = None
    created: str = field(default_factory=lambda: iso(utcnow()))
    updated: str = field(default_factory=lambda: iso(utcnow()))
    # GPU-seconds, per device: held (of which idle) while running, reclaimed while paused
    gpu_seconds_held: float = 0.0
    gpu_seconds_idle: float = 0.0
    gpu_seconds_reclaimed: float = 0.0
    # of held: while the kernel was known not to be pausable (``pausable``)
    gpu_seconds_unpausable: float = 0.0
    gpu_devices_paused: int = 0  # GPUs the kernel held when it was paused
    # where the last resume put the running kernel: "gpu" (granted), "cpu" (no GPU visible),
    # None (not placed by a resume); and the grant: {"devices": [GPU UUIDs], "bytes": n}
    device: str | None = None
    grant: GrantRecord | None = None
    # suspended in place (server/suspend/): {"since", "pids", "host_bytes", "gpu_bytes",
    # "checkpoint": "writing" | "written" | "failed", "kept_until", "gpu_released_seconds"}
    suspended: Suspension | None = None
    # the last pause or resume to end, with where its time went (sessions.OUTCOMES)
    last_operation: LastOperation | None = None
    # whether its kernel can be paused; None while not known (lifecycle/pausable.py)
    pausable: Pausable | None = None
    progress: Progress | None = field(default=None, compare=False)
    queue_position: int | None = field(default=None, compare=False)
    # kept up to date by the idle monitor; meaningless after a restart, so not persisted
    last_activity: datetime | None = field(default=None, compare=False)
    pause_at: datetime | None = field(default=None, compare=False)
    policy: str | None = field(default=None, compare=False)
    gpu: GpuReading | None = field(default=None, compare=False)
    idle_after: float | None = field(default=None, compare=False)
    # while waiting for capacity: {"since", "reason", "needs_bytes", "device"}
    waiting: Waiting | None = field(default=None, compare=False)

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

    def __setattr__(self, name: str, value: Any) -> None:
        # one vocabulary: a record's plain word becomes its member (``__init__`` sets fields
        # through here too), and a word outside it fails where it is written
        if name == "state":
            value = SessionState(value)
        super().__setattr__(name, value)

    def to_record(self) -> dict[str, Any]:
        d = asdict(self)
        for k in self.TRANSIENT:
            d.pop(k)
        d["state"] = str(self.state)
        return d

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Session:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def touch(self) -> None:
        self.updated = iso(utcnow())


def gpu_device_count(gpu: dict | None) -> int:
    """GPUs a kernel holds, from a probe reading (``Session.gpu``); 0 when it holds no memory."""
    if not gpu or not gpu.get("memory_bytes"):
        return 0
    return max(1, len(gpu.get("devices") or []))
