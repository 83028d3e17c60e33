"""Exit codes, one per kind of outcome a script must tell apart (docs/cli.md lists them)."""

from __future__ import annotations

OK = 0  # the operation did what was asked (a pause ended paused, a list was printed)
FAILED = 1  # the operation ran and failed (a pause that ended active, a damaged checkpoint)
USAGE = 2  # bad arguments, bad input the server refused (400), an ambiguous name
NOT_FOUND = 3  # no such session, checkpoint or store
WRONG_STATE = 4  # the session is not in a state that allows it (409)
UNREACHABLE = 5  # no server found, or it does not answer (or does not run jupyter_gpu_pause)
INTERRUPTED = 130  # Ctrl-C while following an operation: the operation itself goes on

# REST status -> exit code; anything else is FAILED.
_BY_STATUS = {400: USAGE, 404: NOT_FOUND, 409: WRONG_STATE}


class CliError(Exception):
    """An outcome that ends the command: ``message`` goes to stderr, ``code`` is the exit code.

    ``details`` are extra lines printed after the message (the candidates of an ambiguous name).
    """

    def __init__(self, message: str, code: int = FAILED, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or []


def for_status(status: int, reason: str | None) -> int:
    """The exit code of a REST error answer."""
    if status == 503 and reason == "not-started":
        return UNREACHABLE  # the extension could not load its records: nothing it says holds
    return _BY_STATUS.get(status, FAILED)
