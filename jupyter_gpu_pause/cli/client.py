"""The CLI talks to the server through the public client (``jupyter_gpu_pause.client``); this
module only turns the client's typed errors into the CLI's exit codes, in one place."""

from __future__ import annotations

from ..client import (
    GpuPauseClient,
    GpuPauseError,
    ServerUnreachable,
    Target,
    find_server,
)
from .errors import FAILED, UNREACHABLE, CliError, for_status

__all__ = ["GpuPauseClient", "GpuPauseError", "Target", "cli_error", "find_server"]


def cli_error(e: GpuPauseError) -> CliError:
    """The CliError of a client error: its message, and the exit code of docs/cli.md."""
    if isinstance(e, ServerUnreachable):
        return CliError(e.message, UNREACHABLE)
    if e.status is None:  # an operation followed to a failure, a wait that timed out
        return CliError(e.message, FAILED)
    return CliError(e.message, for_status(e.status, e.reason))
