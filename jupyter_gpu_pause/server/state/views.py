"""How a session looks from outside: the Session JSON of the REST API."""

from __future__ import annotations

from datetime import datetime, timezone

from ...store.format import iso, utcnow
from .model import RUNNING, Session, SessionState, Suspension

ACTIVE_WINDOW = 60.0  # seconds of recent kernel activity that count as "active"


def _as_utc(dt) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _message(s: Session, state: str, idle: float | None) -> str | None:
    if state not in RUNNING or idle is None:
        return s.message
    text = f"Idle {_duration(idle)}" if state == SessionState.IDLE else "Active"
    if s.pause_at is not None:
        text += f" — pauses at {s.pause_at.strftime('%H:%M:%S')} UTC (policy {s.policy})"
    return f"{text}. {s.message}" if s.message else text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _suspended(d: Suspension | None) -> dict[str, object] | None:
    """What the API shows of a suspension (its process ids stay on the server)."""
    if not d:
        return None
    keys = ("since", "host_bytes", "checkpoint", "kept_until", "gpu_released_seconds")
    return {k: d.get(k) for k in keys}


def session_json(
    s: Session,
    kernel,
    busy: bool | None = None,
    notice: str | None = None,
    gpu_session: bool = False,
    elsewhere: str | None = None,
    open_kernel: str | None = None,
) -> dict:
    """``busy``: a person's cell runs (from the monitor); None falls back to Jupyter's view.

    ``notice``: a problem that affects this session now (a missing signing key), said in its
    message in place of the stored one. ``elsewhere``: the server that runs this session now
    (resumed there from the shared store), when it is not running here. ``open_kernel``: the
    kernel the paused notebook has open, which has run nothing and which Resume restores into.
    """
    if elsewhere and not notice:
        notice = f"Running on {elsewhere}: resumed there. Open it there, or pause it there first"
    if open_kernel and not notice and s.state == SessionState.PAUSED:
        before = f"{s.message.rstrip('. ')}. " if s.message else ""
        notice = (
            f"{before}The notebook is open with a new kernel that has run nothing yet: "
            "Resume restores the saved variables into it"
        )
    last = s.last_activity or (
        _as_utc(getattr(kernel, "last_activity", None)) if kernel is not None else None
    )
    idle = (utcnow() - last).total_seconds() if last else None
    state = s.state
    if state in RUNNING and kernel is not None:
        if busy is None:
            busy = getattr(kernel, "execution_state", None) == "busy"
        window = ACTIVE_WINDOW if s.idle_after is None else s.idle_after
        quiet = s.pause_at is not None or (idle is not None and idle >= window)
        state = SessionState.IDLE if quiet and not busy else SessionState.ACTIVE
    running = state in RUNNING
    return {
        "id": s.id,
        "path": s.path,
        "type": s.type,
        "kernel_id": s.kernel_id,
        "kernel_name": s.kernel_name,
        "state": state,
        "idle_seconds": round(idle, 1) if idle is not None and running else None,
        "last_activity": iso(last),
        "pause_at": iso(s.pause_at) if running else None,
        "policy": s.policy if running else None,
        "gpu": s.gpu if running else None,
        "checkpoint": s.checkpoint,
        "progress": s.progress,
        "queue_position": s.queue_position,
        "waiting": s.waiting if s.state == SessionState.WAITING else None,
        "suspended": _suspended(s.suspended) if s.state == SessionState.SUSPENDED else None,
        "device": s.device,
        "gpu_session": gpu_session,
        "running_elsewhere": elsewhere,
        "open_kernel": open_kernel,
        "error": s.error,
        "message": notice or _message(s, state, idle),
        "restore": s.restore,
        "last_operation": s.last_operation,
        "pausable": s.pausable,
        "accounting": {
            "gpu_seconds_held": round(s.gpu_seconds_held, 1),
            "gpu_seconds_idle": round(s.gpu_seconds_idle, 1),
            "gpu_seconds_reclaimed": round(s.gpu_seconds_reclaimed, 1),
            "gpu_seconds_unpausable": round(s.gpu_seconds_unpausable, 1),
        },
    }
