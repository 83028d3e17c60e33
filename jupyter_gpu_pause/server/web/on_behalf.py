"""Who asks for a pause or a cancel: the server's own user, or an admin acting on their behalf.

An admin's console (a JupyterHub service holding ``access:servers``) or an admin calling the
user's server with their own token may pause a session for the user; the user must then learn
who did it and why (the session's message, the events' ``by``/``via``/``admin_message``). The
name in ``by`` is taken from the Hub's word on the caller, never from the body alone: only a
Hub *service* may say whom it acts for, since the Hub has already vouched that it may reach the
server and the service's own users are not Hub identities this server can check. A user (the
server's own, or an admin) who names someone else is refused, 403 ``not-on-behalf``.

Free of Tornado: the handler passes the Hub's model of the caller (``JupyterHubUser.hub_user``,
None without JupyterHub) and the body's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..state.asker import Asker
from ..state.errors import BadRequest, Forbidden

MAX_MESSAGE = 500  # characters of an admin's message to the user
MAX_BY = 200  # characters of the name a service acts for


def asker_of(
    caller: Mapping[str, Any] | None,
    own_user: str,
    by: str | None = None,
    message: str | None = None,
) -> Asker | None:
    """The admin a request acts for, or None when the server's own user asks (or no Hub).

    ``caller``: the Hub's model of the caller (``{"kind": "user"|"service", "name"}``);
    ``own_user``: whose server this is; ``by``/``message``: the request body's fields.
    Raises ``Forbidden`` ``not-on-behalf`` when ``by`` names someone the caller may not speak
    for, ``BadRequest`` for a message over ``MAX_MESSAGE`` characters or an empty ``by``.
    """
    if message is not None and len(message) > MAX_MESSAGE:
        raise BadRequest(
            f"the message is {len(message)} characters long; keep it to {MAX_MESSAGE} or fewer",
            "bad-message",
        )
    message = (message or "").strip() or None
    if by is not None and not (0 < len(by.strip()) <= MAX_BY):
        raise BadRequest(f"by must name someone, in 1 to {MAX_BY} characters", "bad-field")
    kind, name = (caller or {}).get("kind"), (caller or {}).get("name")
    if kind == "service" and name:
        return Asker(by=by.strip() if by else name, via=name, message=message)
    if kind == "user" and name and name != own_user:
        if by is not None and by != name:
            raise Forbidden(
                f"{name} may pause or cancel {own_user}'s sessions as {name} only, not on "
                f"behalf of {by!r}: leave out by (only a JupyterHub service says whom it acts "
                "for)",
                "not-on-behalf",
            )
        return Asker(by=name, message=message)
    if by is not None:
        raise Forbidden(
            f"{name or own_user} asks on {own_user}'s server as themselves: leave out by "
            "(it names the admin a JupyterHub service acts for)",
            "not-on-behalf",
        )
    return None
