"""A session named the way a person remembers it: its id, the start of its id, or its notebook.

Matching, first rule that finds anything wins: the exact id; the exact notebook path (as the
server shows it, relative to its root; ``./`` and, for a file that exists here, a path relative
to the current folder are understood too); a prefix of the id. More than one match is an error
(exit 2) that lists them, so a script never acts on the wrong session.
"""

from __future__ import annotations

import os

from ..client.types import Session
from .client import GpuPauseClient
from .errors import NOT_FOUND, USAGE, CliError


def _paths(name: str, root_dir: str | None) -> set[str]:
    """What ``name`` may be as a server path."""
    out = {name, name.removeprefix("./")}
    if root_dir and os.path.exists(name):
        rel = os.path.relpath(os.path.abspath(name), os.path.abspath(root_dir))
        if not rel.startswith(".."):
            out.add(rel.replace(os.sep, "/"))
    return out


def describe(s: Session) -> str:
    return f"{s['id']}  {s['state']:<9}  {s['path']}"


def match(sessions: list[Session], name: str, root_dir: str | None = None) -> list[Session]:
    """The sessions ``name`` designates by the first rule that finds any (module docstring)."""
    exact = [s for s in sessions if s["id"] == name]
    if exact:
        return exact
    paths = _paths(name, root_dir)
    by_path = [s for s in sessions if s["path"] in paths]
    if by_path:
        return by_path
    return [s for s in sessions if name and s["id"].startswith(name.lower())]


def resolve(client: GpuPauseClient, name: str) -> Session:
    """The one Session ``name`` designates; CliError 3 when none, 2 when several."""
    if not name:
        raise CliError("give a session: its id, the start of its id, or its notebook path", USAGE)
    sessions = client.sessions()
    found = match(sessions, name, client.target.root_dir)
    if not found:
        raise CliError(
            f"no session matches {name!r} (by id, id prefix or notebook path); "
            "'jupyter gpu-pause list' shows them",
            NOT_FOUND,
        )
    if len(found) > 1:
        raise CliError(
            f"{name!r} matches {len(found)} sessions; give more of the id:",
            USAGE,
            [describe(s) for s in found],
        )
    return found[0]
