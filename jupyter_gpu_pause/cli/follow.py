"""``--wait``: follow a pause or resume to its end by polling the session, with a live
progress bar on a terminal (driven by the session's ``progress``) and one line per change of
phase otherwise.

Ctrl-C stops following, never the operation: the server goes on with it.
"""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from ..client import GpuPauseClient, OperationFailed
from ..client.states import going
from ..client.types import Session
from ..units import size_text
from .errors import INTERRUPTED, CliError
from .output import Output

POLL = 0.5  # seconds between two looks at the session


def stage(s: Session) -> str:
    """Where the operation is, in words: the state, its phase, the queue position."""
    p = s.get("progress") or {}
    text: str = s["state"]
    if p.get("phase"):
        text += f": {p['phase']}"
    if s["state"] == "waiting":
        pos = s.get("queue_position")
        why = (s.get("waiting") or {}).get("reason") or s.get("message")
        text += (f" (position {pos})" if pos else "") + (f" — {why}" if why else "")
    return text


def follow(client: GpuPauseClient, session: Session, kind: str, out: Output) -> Session:
    """Follow ``kind`` ("pause" or "resume") to its end through ``client.follow``: the final
    Session. One that ended otherwise than asked is printed first with ``--json``, then
    ends the command (OperationFailed, exit 1)."""
    try:
        try:
            if out.rich:
                return _with_bar(client, session, kind, out)
            return _with_lines(client, session, kind, out)
        except OperationFailed as e:
            if out.json:
                out.document(e.session)
            raise
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the {kind} goes on in the server "
            f"('jupyter gpu-pause show {session['id']}' shows it, "
            f"'jupyter gpu-pause cancel {session['id']}' stops it)",
            INTERRUPTED,
        ) from None


def _with_lines(client, session, kind, out) -> Session:
    last = None

    def show(s: Session) -> None:
        nonlocal last
        now = stage(s)
        if now != last and not out.json and going(kind, s):
            total = (s.get("progress") or {}).get("total_bytes")
            out.line(f"{s['path']}: {now}" + (f" ({size_text(total)})" if total else ""))
        last = now

    return client.follow(session, kind, progress=show)


def _with_bar(client, session, kind, out) -> Session:
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

        def show(s: Session) -> None:
            p = s.get("progress") or {}
            bar.update(
                task,
                description=f"{s['path']}: {stage(s)}",
                total=p.get("total_bytes") or None,
                completed=p.get("done_bytes") or 0,
            )

        return client.follow(session, kind, progress=show)
