"""``rebuild``: re-run, in a resumed session's kernel, the recorded cells that make what its
checkpoint could not hold (a generator, a hash object), leaving what was restored untouched.

It shows the plan the resume offered (``restore.rebuild`` of the Session), starts the rebuild,
follows it cell by cell and ends on its outcome event, ``rebuilt`` or ``rebuild_failed``. Only
an event that was not there before the request counts, so the outcome of an earlier rebuild is
never taken for this one's. A rebuild that finds nothing left to do records no event: then the
session, no longer rebuilding, says so in its message.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from traitlets import Bool, List, Unicode

from ..client import event_key
from ..client.types import Event, RebuildCell, RebuildPlan, Session
from .base import COMMON_ALIASES, COMMON_FLAGS, Command
from .client import GpuPauseClient
from .errors import FAILED, INTERRUPTED, USAGE, CliError
from .follow import POLL
from .names import resolve
from .output import Output

OUTCOMES = ("rebuilt", "rebuild_failed")
# looks at the events once the session stopped rebuilding, before concluding that no outcome
# event comes: the server updates the session a moment before it records the event
GRACE_POLLS = 10


def cell_label(c: RebuildCell) -> str:
    n = c.get("execution_count")
    return f"[{n}]" if n is not None else "[?]"


def _first_line(code: str) -> str:
    return next((line for line in (code or "").splitlines() if line.strip()), "").strip()


def plan_lines(path: str, plan: RebuildPlan, names: list[str] | None) -> list[str]:
    """The plan as a person checks it before it runs: what it makes, each cell with its first
    line and recorded run time, and what it cannot make, with why."""
    lines = [f"{path}: rebuild {plan.get('text') or ', '.join(plan['names'])}"]
    for c in plan.get("cells") or []:
        took = "run time unknown" if c.get("seconds") is None else f"{c['seconds']:.2f} s"
        lines.append(f"  {cell_label(c)} {_first_line(c.get('code'))}  ({took})")
    for u in plan.get("unbuildable") or []:
        lines.append(f"  cannot rebuild {u['name']}: {u['reason']}")
    if names:
        lines.append(f"  asked for {', '.join(names)} only: just the cells they need re-run")
    return lines


def rebuilding(s: Session) -> bool:
    return (s.get("progress") or {}).get("phase") == "rebuilding"


def cell_stage(s: Session, cells: list[RebuildCell] | None, subset: bool) -> tuple[str, int, int]:
    """(where the rebuild is in words, cells done, cells in all; 0 when not known yet).

    ``cells``: the offered plan's cells, to name the running one by its number. ``subset``:
    only some names were asked for; the server counts the whole plan until the kernel reports
    its first cell done, so until then neither the count nor the cell is known.
    """
    p = s.get("progress") or {}
    done, total = p.get("done_bytes") or 0, p.get("total_bytes") or 0
    if subset and not done:
        return "rebuilding: cell 1", 0, 0
    if not total:
        return "rebuilding", done, total
    text = f"rebuilding: cell {min(done + 1, total)} of {total}"
    if cells and not subset and len(cells) == total:
        text += f" {cell_label(cells[min(done, total - 1)])}"
    return text, done, total


class Mark:
    """The session's events before the request: what the outcome must not be."""

    def __init__(self, client: GpuPauseClient, session_id: str):
        self.client, self.session_id = client, session_id
        events = client.events(session=session_id)
        self.since = events[-1]["time"] if events else None
        self.seen = {event_key(e) for e in events}

    def outcome(self) -> Event | None:
        """The first ``rebuilt`` / ``rebuild_failed`` event that is new since the mark."""
        events = self.client.events(self.since, self.session_id)
        return next(
            (e for e in events if e["type"] in OUTCOMES and event_key(e) not in self.seen),
            None,
        )


def wait_outcome(
    client: GpuPauseClient, s: Session, mark: Mark, show
) -> tuple[Session, Event | None]:
    """Poll until this rebuild has ended: (the final Session, its outcome event or None).
    ``show(session)`` hears each look at the session while it rebuilds, the first being the
    server's answer to the request."""
    quiet = 0
    while True:
        if rebuilding(s):
            show(s)
        event = mark.outcome()
        if event is not None:  # the session was saved before its event: it is final
            return client.session(s), event
        if not rebuilding(s):
            quiet += 1
            if quiet > GRACE_POLLS:
                return s, None
        time.sleep(POLL)
        s = client.session(s)


def follow(
    client: GpuPauseClient, s: Session, mark: Mark, stage, out: Output
) -> tuple[Session, Event | None]:
    """``wait_outcome`` with a bar of cells on a terminal, else a line per cell; ``stage``:
    a session's (words, cells done, cells in all)."""
    try:
        if out.json:
            return wait_outcome(client, s, mark, lambda _: None)
        if out.rich:
            return _with_bar(client, s, mark, stage, out)
        return _with_lines(client, s, mark, stage, out)
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the rebuild goes on in the server ('jupyter gpu-pause events "
            f"--session {s['id']}' shows its outcome)",
            INTERRUPTED,
        ) from None


def _with_lines(client, s, mark, stage, out):
    last = None

    def show(now):
        nonlocal last
        text = stage(now)[0]
        if text != last:
            out.line(f"{now['path']}: {text}")
        last = text

    return wait_outcome(client, s, mark, show)


def _with_bar(client, s, mark, stage, out):
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("cells"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=out.console, transient=True) as bar:
        task = bar.add_task(s["path"], total=None)

        def show(now):
            text, done, total = stage(now)
            bar.update(
                task, description=f"{now['path']}: {text}", total=total or None, completed=done
            )

        return wait_outcome(client, s, mark, show)


class RebuildCommand(Command):
    name = "jupyter-gpu-pause-rebuild"
    description = (
        "Rebuild what the last resume could not bring back (a generator, a hash object…) by "
        "re-running, in the session's kernel, the cells that made it; restored variables are "
        "not touched. Shows the plan, follows it cell by cell, and exits 1 if a cell failed "
        "(nothing is then changed) or if it needs --yes."
    )
    args = "NAME"
    names = List(
        Unicode(),
        config=True,
        help="Rebuild only these variables: --names a,b or --names a --names b. "
        "Default: everything the plan offers.",
    )
    yes = Bool(
        False,
        config=True,
        help="Re-run even where the server asks first: a restored object the cells read would "
        "be shared rather than copied, or copying it is large.",
    )
    wait = Bool(
        True, config=True, help="Follow the rebuild to its outcome (default; --no-wait: don't)."
    )
    aliases = {**COMMON_ALIASES, "names": "RebuildCommand.names"}
    flags = {
        **COMMON_FLAGS,
        "yes": ({"RebuildCommand": {"yes": True}}, "Confirm: re-run even where asked first."),
        "y": ({"RebuildCommand": {"yes": True}}, "Same as --yes."),
        "no-wait": ({"RebuildCommand": {"wait": False}}, "Return once the rebuild has started."),
        "wait": ({"RebuildCommand": {"wait": True}}, "Follow it to its outcome (the default)."),
    }

    def asked(self) -> list[str]:
        names = [n.strip() for item in self.names for n in item.split(",") if n.strip()]
        if self.names and not names:
            raise CliError("--names needs variable names, e.g. --names batches,h", USAGE)
        bad = [n for n in names if not n.isidentifier()]
        if bad:
            raise CliError(f"--names: not a variable name: {', '.join(bad)}", USAGE)
        return list(dict.fromkeys(names))

    def run(self, out: Output):
        (name,) = self.positional(1)
        names = self.asked()
        client = self.client(out)
        s = resolve(client, name)
        plan = (s.get("restore") or {}).get("rebuild")
        mark = Mark(client, s["id"])
        s = client.rebuild(s, names or None, confirm=self.yes)
        # the plan it accepted (a refusal, which changes nothing, prints only the server's why)
        if not out.json and plan and plan["names"]:
            for line in plan_lines(s["path"], plan, names):
                out.line(line)
        if not self.wait:
            if out.json:
                return out.document({"plan": plan, "session": s, "event": None})
            out.line(f"{s['path']}: {s.get('message') or s['state']}")
            return None
        cells = plan.get("cells") if plan else None
        s, event = follow(client, s, mark, lambda now: cell_stage(now, cells, bool(names)), out)
        if out.json:
            out.document({"plan": plan, "session": s, "event": event})
        return self.outcome(out, name, names, plan, s, event)

    def outcome(self, out: Output, name, names, plan, s: Session, event: Event | None):
        """Say how it ended; exit 0 only when what was asked for is back."""
        path = s["path"]
        asked = names or (plan or {}).get("names") or []
        if event is None:  # nothing was left to do, or the server went quiet: ask the session
            left: Mapping[str, Any] = (s.get("restore") or {}).get("rebuild") or {}
            missing = set(left.get("names") or []) | {
                u["name"] for u in left.get("unbuildable") or []
            }
            if missing & set(asked):
                raise CliError(f"{path}: {s.get('message') or 'the rebuild did not run'}", FAILED)
            if not out.json:
                out.line(f"{path}: {s.get('message') or 'nothing left to rebuild'}")
            return None
        detail = event.get("detail") or {}
        if event["type"] == "rebuilt":
            if not out.json:
                out.line(f"{path}: {detail.get('message') or 'rebuilt'}")
            return None
        why = detail.get("error_reason")
        if why == "needs-confirm":
            again = ["jupyter", "gpu-pause", "rebuild", name]
            again += ["--names", ",".join(names)] if names else []
            raise CliError(
                f"{path}: rebuild not run: re-running its cells could change restored objects "
                f"(below); to re-run anyway: {shlex.join([*again, '--yes'])}",
                FAILED,
                [f"{x['name']}: {x['reason']}" for x in detail.get("shared") or []],
            )
        text = detail.get("message") or why or "no reason given"
        if why == "cell-failed":  # "Rebuild stopped at cell [2] (…): …. Nothing was changed"
            raise CliError(f"{path}: {text}", FAILED)
        raise CliError(f"{path}: the rebuild failed: {text}", FAILED)
