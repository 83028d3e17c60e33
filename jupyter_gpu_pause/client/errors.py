"""Typed errors of the REST API, mapped once from the answer's ``reason`` code and status.

A script tells outcomes apart by class (``except WrongState``) instead of parsing messages; each
error keeps the server's sentence (``message``), the HTTP ``status``, the ``reason`` code and
the whole JSON ``body``, so nothing the server said is lost. The table is docs/client.md's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .types import Session


class GpuPauseError(Exception):
    """An answer of the server refusing or failing a request (or no answer at all)."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        reason: str | None = None,
        body: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.body = body or {}


class BadRequest(GpuPauseError):
    """400: the request itself is wrong (an unknown field, a bad value); sending it again fails."""


class Forbidden(GpuPauseError):
    """401/403: this token or user may not do that."""


class NotFound(GpuPauseError):
    """404: no such session, checkpoint or endpoint."""


class WrongState(GpuPauseError):
    """409: the session is not in a state that allows the operation (already paused…)."""


class ResumedElsewhere(WrongState):
    """409 ``resumed-elsewhere``: another server runs this session; ``where`` names it (from
    the body's ``where``, None from a server too old to say)."""

    @property
    def where(self) -> str | None:
        return self.body.get("where")


class BudgetExceeded(WrongState):
    """409 ``budget-exceeded``: a GPU resume over the user's GPU-hour budget; ``retry_at`` is
    when the budget allows it again (a UTC datetime, None when the server gives no time)."""

    @property
    def retry_at(self) -> datetime | None:
        return parse_time(self.body.get("retry_at"))


class IdempotencyKeyReused(GpuPauseError):
    """422 ``idempotency-key-reused``: this Idempotency-Key was first used for another request
    (another body or path); the server did nothing. Use a new key for a new request."""


class ServerError(GpuPauseError):
    """500 or another status the API does not document: a fault of the server; its log says
    more."""


class Unavailable(ServerError):
    """503: the extension cannot serve now (``not-started``: its records did not load;
    ``key-missing``: the signing key is gone)."""


class CapacityUnavailable(Unavailable):
    """503 ``capacity-unavailable``: the capacity queue cannot be reached; nothing was claimed
    nor queued and the checkpoint is safe. Resume again once it is back."""


class ServerUnreachable(GpuPauseError):
    """No server found, no answer within the retry budget, or an answer that is not
    jupyter_gpu_pause's JSON (the extension is not enabled there). ``status`` is None unless
    the server answered with something else."""


class WaitTimeout(GpuPauseError, TimeoutError):
    """``wait`` ran out of time; the operation goes on in the server. ``session`` is the last
    Session seen."""

    def __init__(self, message: str, session: Session):
        super().__init__(message)
        self.session = session


class OperationFailed(GpuPauseError):
    """``pause(wait=True)`` / ``resume(wait=True)`` ended, but not as asked (the pause failed and
    the kernel still runs; the resume failed and the session stays paused). ``session`` is the
    final Session; its ``error`` says why."""

    def __init__(self, message: str, session: Session):
        super().__init__(message, reason=(session.get("error") or {}).get("reason"))
        self.session = session


# reason code -> class, before the status decides (a reason names a more precise class)
BY_REASON: dict[str, type[GpuPauseError]] = {
    "resumed-elsewhere": ResumedElsewhere,
    "budget-exceeded": BudgetExceeded,
    "idempotency-key-reused": IdempotencyKeyReused,
    "capacity-unavailable": CapacityUnavailable,
}
BY_STATUS: dict[int, type[GpuPauseError]] = {
    400: BadRequest,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: WrongState,
    422: BadRequest,
    503: Unavailable,
}


def error_for(status: int, body: dict[str, Any]) -> GpuPauseError:
    """The typed error of a REST error answer ``{"message", "reason", …}``."""
    reason = body.get("reason")
    cls = BY_REASON.get(reason or "") or BY_STATUS.get(status) or ServerError
    return cls(str(body.get("message") or f"HTTP {status}"), status, reason, body)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time of the API as an aware UTC datetime (None if absent or unreadable)."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)
