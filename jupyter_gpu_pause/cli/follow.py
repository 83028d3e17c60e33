"""``--wait``: follow a pause or resume to its end by polling the session, with a live
progress bar on a terminal (driven by the session's ``progress``) and one line per change of
phase otherwise.

Ctrl-C stops following, never the operation: the server goes on with it.
"""

from __future__ import annotations

import time

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from ..units import size_text
from .client import Client, session_path
from .errors import INTERRUPTED, CliError
from .output import Output

POLL = 0.5  # seconds between two looks at the session
RUNNING = ("active", "idle")
# state in which each operation is still going on
GOING = {"pause": ("pausing",), "resume": ("waiting", "restoring")}


def _checkpoint(s: dict) -> str | None:
    """A suspended session's checkpoint: ``writing``, ``written`` (kept) or ``failed``."""
    return (s.get("suspended") or {}).get("checkpoint") if s["state"] == "suspended" else None


def going(kind: str, s: dict) -> bool:
    """The operation goes on: a pause is not over while a suspended kernel's checkpoint is
    being written (docs/suspend.md)."""
    return s["state"] in GOING[kind] or (kind == "pause" and _checkpoint(s) == "writing")


def succeeded(kind: str, s: dict) -> bool:
    if kind == "pause":  # paused, or suspended and kept with its checkpoint written
        return s["state"] == "paused" or _checkpoint(s) == "written"
    return s["state"] in RUNNING


def stage(s: dict) -> str:
    """Where the operation is, in words: the state, its phase, the queue position."""
    p = s.get("progress") or {}
    text = s["state"]
    if p.get("phase"):
        text += f": {p['phase']}"
    if s["state"] == "waiting":
        pos = s.get("queue_position")
        why = (s.get("waiting") or {}).get("reason") or s.get("message")
        text += (f" (position {pos})" if pos else "") + (f" — {why}" if why else "")
    return text


def follow(client: Client, session: dict, kind: str, out: Output) -> dict:
    """Poll until ``kind`` ("pause" or "resume") has ended; the final Session."""
    try:
        if out.rich:
            return _with_bar(client, session, kind, out)
        return _with_lines(client, session, kind, out)
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the {kind} goes on in the server "
            f"('jupyter gpu-pause show {session['id']}' shows it, "
            f"'jupyter gpu-pause cancel {session['id']}' stops it)",
            INTERRUPTED,
        ) from None


def _sessions(client: Client, s: dict, kind: str):
    """The session as it changes, until the operation has ended (the last one yielded)."""
    yield s
    while going(kind, s):
        time.sleep(POLL)
        s = client.get(session_path(s["id"]))
        yield s


def _with_lines(client, session, kind, out) -> dict:
    last = None
    for s in _sessions(client, session, kind):
        now = stage(s)
        if now != last and not out.json and going(kind, s):
            total = (s.get("progress") or {}).get("total_bytes")
            out.line(f"{s['path']}: {now}" + (f" ({size_text(total)})" if total else ""))
        last = now
    return s


def _with_bar(client, session, kind, out) -> dict:
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
    )
    # transient: the bar goes once the operation ends; the command then prints the outcome
    with Progress(*columns, console=out.console, transient=True) as bar:
        task = bar.add_task(session["path"], total=None)
        for s in _sessions(client, session, kind):
            p = s.get("progress") or {}
            bar.update(
                task,
                description=f"{s['path']}: {stage(s)}",
                total=p.get("total_bytes") or None,
                completed=p.get("done_bytes") or 0,
            )
    return s
