"""The Python client of jupyter_gpu_pause's REST API.

    from jupyter_gpu_pause.client import GpuPauseClient, WrongState

    gp = GpuPauseClient()  # the running server, found as `jupyter gpu-pause` finds it
    s = gp.pause("3f2a…", wait=True)

Imports nothing from the server: a scheduler or a notebook can use it without Tornado.
"""

from .api import GpuPauseClient, event_key, session_path
from .discovery import TOKEN_ENV, URL_ENV, Target, find_server, running_servers
from .errors import (
    BadRequest,
    BudgetExceeded,
    CapacityUnavailable,
    Forbidden,
    GpuPauseError,
    IdempotencyKeyReused,
    NotFound,
    OperationFailed,
    ResumedElsewhere,
    ServerError,
    ServerUnreachable,
    Unavailable,
    WaitTimeout,
    WrongState,
)
from .states import going, succeeded
from .transport import IDEMPOTENCY_HEADER, NO_RETRY, Retry

__all__ = [
    "IDEMPOTENCY_HEADER",
    "NO_RETRY",
    "TOKEN_ENV",
    "URL_ENV",
    "BadRequest",
    "BudgetExceeded",
    "CapacityUnavailable",
    "Forbidden",
    "GpuPauseClient",
    "GpuPauseError",
    "IdempotencyKeyReused",
    "NotFound",
    "OperationFailed",
    "ResumedElsewhere",
    "Retry",
    "ServerError",
    "ServerUnreachable",
    "Target",
    "Unavailable",
    "WaitTimeout",
    "WrongState",
    "event_key",
    "find_server",
    "going",
    "running_servers",
    "session_path",
    "succeeded",
]
