"""Domain errors: what went wrong in words a user can act on, plus a status for the REST API.

Services raise these; the handlers turn them into ``{"message", "reason"}`` with the status.
An operation that fails tells it on the session: ``failure`` turns any exception into words, and
``session_error`` is the session's ``error`` field (``SessionTable.fail`` writes both).
"""

from __future__ import annotations

from typing import Any, cast

from ...store import IntegrityError, StoreError
from ...store.schema import ManifestError
from .model import SessionError


class GpuPauseError(Exception):
    """``detail``: more fields of the REST error body, beside ``message`` and ``reason``, that
    a client acts on (``where`` of ``resumed-elsewhere``)."""

    status = 500
    reason = "error"

    def __init__(self, message: str, reason: str | None = None, **detail):
        super().__init__(message)
        self.message = message
        self.detail = detail
        if reason:
            self.reason = reason


class BadRequest(GpuPauseError):
    status = 400
    reason = "bad-request"


class NotFound(GpuPauseError):
    status = 404
    reason = "not-found"


class Forbidden(GpuPauseError):
    status = 403
    reason = "forbidden"


class WrongState(GpuPauseError):
    status = 409
    reason = "wrong-state"


class IdempotencyKeyReused(GpuPauseError):
    """An Idempotency-Key already answered another request (another body, path or method)."""

    status = 422
    reason = "idempotency-key-reused"


class BudgetExceeded(GpuPauseError):
    """A GPU resume refused: the user's GPU-hour budget is held. ``retry_at`` (ISO 8601) is
    when it renews; a CPU resume is still allowed, and an admin's grant lifts it at once."""

    status = 409
    reason = "budget-exceeded"

    def __init__(self, message: str, retry_at: str | None, budget: str):
        super().__init__(message, retry_at=retry_at, budget=budget)


class Unavailable(GpuPauseError):
    """The extension could not load its records at startup; nothing it would answer is true."""

    status = 503
    reason = "not-started"


class KeyMissing(Unavailable):
    """The signing key is missing while signed checkpoints exist: nothing can be signed or
    verified until it is back (a new key would leave every old checkpoint unverifiable)."""

    reason = "key-missing"


class AgentFailed(GpuPauseError):
    """The agent inside the kernel reported an error; the kernel itself is fine."""

    reason = "agent"

    def __init__(self, message: str, reason: str | None = None, check: str | None = None):
        super().__init__(message, reason)
        self.check = check


class KernelDied(GpuPauseError):
    """The kernel process died (or was restarted) while an operation was talking to it."""

    reason = "kernel-died"

    def __init__(self, message: str, reason: str | None = None, pid: int | None = None):
        super().__init__(message, reason)
        self.pid = pid


def failure(e: BaseException) -> tuple[str, str]:
    """``(reason, message)`` of an exception, in words a user can act on."""
    if isinstance(e, GpuPauseError):
        return e.reason, e.message
    if isinstance(e, ManifestError):
        return "bad-agent-reply", f"the kernel reported a checkpoint the server cannot trust ({e})"
    if isinstance(e, IntegrityError):
        return "integrity", str(e)
    if isinstance(e, (StoreError, OSError)):
        return "store", str(e) or type(e).__name__
    return "internal", f"an unexpected error in jupyter_gpu_pause ({type(e).__name__}: {e})"


def session_error(message: str, reason: str, state_intact: bool, **more: Any) -> SessionError:
    """A session's ``error`` (the REST contract): what failed, its reason code, and whether the
    user's variables are still somewhere (the running kernel, or a checkpoint); ``more``: the
    fields a failure adds (``SessionError`` lists them)."""
    error = {"message": message, "reason": reason, "state_intact": state_intact, **more}
    return cast(SessionError, error)
