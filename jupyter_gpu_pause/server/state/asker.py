"""Who asked for an operation on someone else's session (an admin, through the Hub console or
their own access to the user's server): the lifecycle records it in the events, the REST
handlers decide it from the caller (``web/on_behalf.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Asker:
    """Someone other than the server's user who asked for a pause or a cancel: an admin
    (``by``), possibly through a JupyterHub service (``via``), with a word for the user
    (``message``). The user must learn who stopped their kernel, and why, from the session
    itself and its events, not from a colleague."""

    by: str
    via: str | None = None
    message: str | None = None

    def detail(self) -> dict[str, Any]:
        """The keys an on-behalf event carries (``by``, ``via``, ``admin_message``)."""
        return {"by": self.by, "via": self.via, "admin_message": self.message}

    def told(self, verb: str) -> str:
        """The sentence that opens the session's message: ``Paused by an admin (carol):
        maintenance at 9. `` (``verb`` "Paused", "Pause cancelled"…)."""
        said = (self.message or "").strip()
        if said and said[-1] not in ".!?":
            said += "."
        return f"{verb} by an admin ({self.by})" + (f": {said} " if said else ". ")


NOT_ON_BEHALF: dict[str, Any] = {"by": None, "via": None, "admin_message": None}
