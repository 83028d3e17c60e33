"""The board: this server's GPU sessions as the shared capacity queue lists them for people who
look after the whole cluster (the Hub service ``gpu-pause``).

Why in the queue: it is the one place every user's server writes to, and a row outlives the
server that wrote it. A reader sees every GPU session of every user, the paused sessions of
stopped servers included (they hold no GPU now, but wait to claim one back), without reaching
any server.

Each server publishes the whole set of its GPU sessions at every heartbeat and after each
lifecycle event (``Capacity._sync``), in the transaction that renews its lease: its rows are
replaced, not appended to. A row names the *origin*, an identity of the server that survives
its restarts (so a restarted server takes its rows back), and the id of the running process
(``server_id``: the server runs while its ``servers`` row exists). A server that stops leaves
its rows (``queue._close``): its paused sessions stay listed. Where servers of one user share a
store, each lists the other's paused sessions; a session stays one row: the server that runs it
publishes it, and a paused one stays the row of the server that published it first until that
server stops (``queue._publish``).

What a row holds about its user is what ``GET sessions`` says of the session, less the
notebook's folder: the file name, the state, GPU memory, the checkpoint's size and time, the
place in line and the messages (``doc``, built by ``row``).
"""

from __future__ import annotations

import os
import posixpath
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..state.model import Session, SessionState

# the states of a session this server runs (a kernel, or an operation under way): the same
# ``Lifecycle._live`` claims in the queue
_NOT_LIVE = (SessionState.PAUSED, SessionState.FAILED)


@dataclass(frozen=True)
class Origin:
    """This server as the board names it: stable across restarts, the same for every row."""

    origin: str  # under JupyterHub "alice/" or "alice/gpu1", else "host:/abs/records.sqlite"
    user: str
    server: str  # a label for people: "alice", "alice/gpu1", or the queue's user@host:port
    host: str  # the node
    hub_server_name: str | None  # "" for the Hub's default server; None without the Hub
    prefix: str  # the server's URL path: JUPYTERHUB_SERVICE_PREFIX or its base_url

    @classmethod
    def from_env(cls, user: str, label: str, db_path: str, base_url: str, env=os.environ) -> Origin:
        """The origin JupyterHub's variables say (``JUPYTERHUB_USER``, ``…_SERVER_NAME``,
        ``…_SERVICE_PREFIX``), else this machine and the records file: two servers with their
        own records on one machine are two origins, one restarted is the same one."""
        host = socket.gethostname()
        hub_user = env.get("JUPYTERHUB_USER")
        if not hub_user:
            where = f"{host}:{os.path.abspath(db_path)}"
            return cls(where, user, label, host, None, base_url)
        name = env.get("JUPYTERHUB_SERVER_NAME", "")
        return cls(
            origin=f"{hub_user}/{name}",
            user=user,
            server=f"{hub_user}/{name}" if name else hub_user,
            host=host,
            hub_server_name=name,
            prefix=env.get("JUPYTERHUB_SERVICE_PREFIX") or base_url,
        )


@dataclass(frozen=True)
class BoardSession:
    """One GPU session's row: ``doc`` is its JSON summary (``row``)."""

    session_id: str
    state: str
    doc: dict[str, Any]
    runs_here: bool  # a kernel of this server or an operation under way: this server's row


@dataclass(frozen=True)
class BoardRows:
    """What one publish writes: every GPU session of ``origin`` (its other rows go)."""

    origin: Origin
    sessions: list[BoardSession]


def _file_name_only(value: Any, path: str, name: str) -> Any:
    """``value`` with the notebook's path said as its file name, in every string in it."""
    if isinstance(value, str):
        return value.replace(path, name)
    if isinstance(value, dict):
        return {k: _file_name_only(v, path, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_file_name_only(v, path, name) for v in value]
    return value


def row(view: dict[str, Any], origin: Origin, runs_here: bool) -> BoardSession:
    """A session's row from its REST JSON (``Lifecycle.view``): what the board shows is what
    the session's own user sees, the notebook's folder left out (of the messages too)."""
    path = view["path"]
    name = posixpath.basename(path)
    checkpoint = view["checkpoint"]
    doc = {
        "name": name,
        "kernel_name": view["kernel_name"],
        "state": str(view["state"]),
        "idle_seconds": view["idle_seconds"],
        "last_activity": view["last_activity"],
        "gpu": view["gpu"],
        "checkpoint": (
            {k: checkpoint[k] for k in ("id", "created", "bytes")} if checkpoint else None
        ),
        "queue_position": view["queue_position"],
        "waiting": view["waiting"],
        "error": view["error"],
        "message": view["message"],
        "pausable": view["pausable"],
        "hub_server_name": origin.hub_server_name,
        "prefix": origin.prefix,
    }
    if path != name:
        doc = _file_name_only(doc, path, name)
    return BoardSession(view["id"], doc["state"], doc, runs_here)


class Board:
    """Builds this server's board rows when the queue is told (``Capacity.board``).

    ``sessions``: the sessions this server tracks; ``view``: a session's REST JSON, which
    says whether it is a GPU session (``gpu_session``) and where it runs
    (``running_elsewhere``). A session another server runs now is that server's to publish.
    """

    def __init__(
        self,
        origin: Origin,
        sessions: Callable[[], Iterable[Session]],
        view: Callable[[Session], dict[str, Any]],
    ):
        self.origin, self._sessions, self._view = origin, sessions, view

    def __call__(self) -> BoardRows:
        rows = []
        for s in list(self._sessions()):
            view = self._view(s)
            if view["gpu_session"] and not view["running_elsewhere"]:
                rows.append(row(view, self.origin, s.state not in _NOT_LIVE))
        return BoardRows(self.origin, rows)
