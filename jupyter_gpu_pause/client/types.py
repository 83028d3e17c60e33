"""The shapes of the REST API's answers as the client returns them, for type checkers.

They mirror the schemas of the API's OpenAPI document (``server/web/api.yaml``, served at
``gpu-pause/api/spec.yaml``), and tests/test_openapi.py fails when a TypedDict's keys and its
schema's properties differ. At run time the answers are plain dicts: a field a newer server
adds is still there, it only has no type here yet.

``total=False`` marks a record whose fields the server does not always send (older records,
optional detail); the others always carry every key, ``None`` where it does not apply.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

SessionState = Literal[
    "active", "idle", "pausing", "suspended", "paused", "waiting", "restoring", "failed"
]


class NameReason(TypedDict):
    """Something not saved, restored or rebuilt, and why."""

    name: str
    reason: str


class GpuUsage(TypedDict):
    """What the kernel holds on its GPUs now (NVML)."""

    devices: list[str]
    indices: list[int]
    memory_bytes: int
    utilization: float | None


class CheckpointBrief(TypedDict, total=False):
    """A Session's ``checkpoint``: the one a resume would restore."""

    id: str
    created: str
    bytes: int
    objects: int
    skipped: int
    skipped_objects: list[NameReason]
    gpu_bytes: int
    packages: list[str]


class Progress(TypedDict, total=False):
    """A Session's ``progress`` while an operation runs."""

    phase: str
    done_bytes: int
    total_bytes: int | None
    unit: Literal["cells"]
    host_bytes: int


class Waiting(TypedDict, total=False):
    """A Session's ``waiting``: a resume waiting for capacity."""

    since: str
    reason: str | None
    needs_bytes: int | None
    device: str | None


class Suspension(TypedDict):
    """A Session's ``suspended``: GPU released, the kernel process alive."""

    since: str | None
    host_bytes: int | None
    checkpoint: Literal["writing", "written", "failed"] | None
    kept_until: str | None
    gpu_released_seconds: float | None


class RefusedCheckpoint(TypedDict):
    """A checkpoint a resume refused: it did not verify."""

    checkpoint_id: str
    message: str
    check: str | None


class SessionError(TypedDict, total=False):
    """A Session's ``error``: the last operation's failure."""

    message: str
    reason: str
    state_intact: bool
    refused: list[RefusedCheckpoint]


class RebuildCell(TypedDict):
    execution_count: int | None
    seconds: float | None
    code: str


class RebuildPlan(TypedDict):
    """``restore.rebuild``: the cells a rebuild would re-run, and what it cannot rebuild."""

    names: list[str]
    cells: list[RebuildCell]
    seconds: float | None
    unbuildable: list[NameReason]
    text: str | None
    problem: str | None


class AmbientRestore(TypedDict, total=False):
    """``restore.ambient``: the process state around the namespace the restore brought back."""

    restored: list[str]
    rerun: list[str]
    not_restored: list[NameReason]
    text: str | None
    seconds: float | None


class Fallback(TypedDict, total=False):
    """An object restored from an older checkpoint."""

    name: str
    checkpoint_id: str
    created: str | None
    older_seconds: float | None


class RestoreReport(TypedDict, total=False):
    """A Session's ``restore``: what the last resume brought back and what it did not."""

    checkpoint_id: str
    restored: list[str]
    failed: list[NameReason]
    fallback: list[Fallback]
    skipped: list[NameReason]
    registered: list[str]
    device: str | None
    devices: dict[str, str]
    refused: list[RefusedCheckpoint]
    rebuild: RebuildPlan | None
    ambient: AmbientRestore | None


class LastOperation(TypedDict, total=False):
    """A Session's ``last_operation``: the last pause or resume to end, and its phase times."""

    operation: Literal["pause", "resume"]
    outcome: str
    time: str
    duration_seconds: float | None
    timings: dict[str, float]
    gpu_released_seconds: float | None


class SessionAccounting(TypedDict):
    gpu_seconds_held: float
    gpu_seconds_idle: float
    gpu_seconds_reclaimed: float
    gpu_seconds_unpausable: float


class Pausable(TypedDict, total=False):
    """A Session's ``pausable``: ``ok`` always; ``reason`` and ``message`` when it is false."""

    ok: bool
    reason: Literal[
        "unsupported-kernel",
        "python-too-old",
        "no-ipython",
        "agent-refused",
        "agent-missing",
        "agent-version",
    ]
    message: str


class Session(TypedDict):
    """One notebook (or console) and its kernel, under an id that survives pause and resume."""

    id: str
    path: str
    type: str
    kernel_id: str | None
    kernel_name: str
    state: SessionState
    idle_seconds: float | None
    last_activity: str | None
    pause_at: str | None
    policy: str | None
    gpu: GpuUsage | None
    checkpoint: CheckpointBrief | None
    progress: Progress | None
    queue_position: int | None
    waiting: Waiting | None
    suspended: Suspension | None
    device: Literal["gpu", "cpu"] | None
    gpu_session: bool
    running_elsewhere: str | None
    open_kernel: str | None
    error: SessionError | None
    message: str | None
    restore: RestoreReport | None
    last_operation: LastOperation | None
    pausable: Pausable | None
    accounting: SessionAccounting


class CheckpointObject(TypedDict):
    name: str
    bytes: int


class Checkpoint(TypedDict, total=False):
    """A checkpoint in the store; one that does not verify has ``valid`` False and a
    ``problem``."""

    id: str
    created: str | None
    bytes: int | None
    new_bytes: int | None
    objects: list[CheckpointObject]
    skipped: list[NameReason]
    valid: bool
    problem: str


class Event(TypedDict):
    """Something that happened to a session; ``detail`` depends on the ``type``."""

    time: str
    session_id: str
    type: str
    reason: str
    detail: dict[str, Any]


class OnBehalf(TypedDict):
    """The ``detail`` keys of an event asked on a user's behalf (``reason`` ``admin``): every
    ``paused`` event (``None`` when the user or a policy paused), and a ``pause_failed`` or
    ``cancelled`` one only when an admin asked."""

    by: str | None
    via: str | None
    admin_message: str | None


class Error(TypedDict, total=False):
    """The body of every refusal: ``message`` and ``reason``, and detail some reasons add."""

    message: str
    reason: str
    where: str
    retry_at: str | None
    budget: str


class Budget(TypedDict):
    """One user's GPU-hour budget this period."""

    name: str
    user: str
    scope: str
    used_hours: float
    limit_hours: float
    granted_hours: float
    period: str
    period_start: str
    period_end: str
    warn_at: float
    hold_at: float
    grace: float
    ratio: float
    state: Literal["ok", "warned", "held"]
    retry_at: str | None
    text: str
    unpausable_hours: float | None


class Budgets(TypedDict):
    """``GET budget``."""

    admin: bool
    configured: bool
    user: str | None
    budgets: list[Budget]
