"""How a session looks from outside: the Session JSON of the REST API."""

from __future__ import annotations

from datetime import datetime, timezone

from ..store.format import iso, utcnow
from .model import RUNNING, Session

ACTIVE_WINDOW = 60.0  # seconds of recent kernel activity that count as "active"


def _as_utc(dt) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def session_json(s: Session, kernel) -> dict:
    last = _as_utc(getattr(kernel, "last_activity", None)) if kernel is not None else None
    idle = (utcnow() - last).total_seconds() if last else None
    state = s.state
    if state in RUNNING and kernel is not None:
        busy = getattr(kernel, "execution_state", None) == "busy"
        state = "active" if busy or (idle is not None and idle < ACTIVE_WINDOW) else "idle"
    return {
        "id": s.id,
        "path": s.path,
        "type": s.type,
        "kernel_id": s.kernel_id,
        "kernel_name": s.kernel_name,
        "state": state,
        "idle_seconds": round(idle, 1) if idle is not None and state in RUNNING else None,
        "last_activity": iso(last),
        "pause_at": None,
        "policy": None,
        "gpu": None,
        "checkpoint": s.checkpoint,
        "progress": s.progress,
        "queue_position": s.queue_position,
        "error": s.error,
        "message": s.message,
        "restore": s.restore,
    }
