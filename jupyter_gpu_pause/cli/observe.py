"""What the server saw and holds: ``events``, ``report`` (GPU-hours) and ``capacity``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from traitlets import Bool, Unicode

from ..client.types import Event
from ..store.format import iso
from ..units import size_text
from .base import COMMON_ALIASES, COMMON_FLAGS, Command, seconds
from .errors import CliError
from .names import resolve
from .output import Output

FOLLOW_POLL = 1.0  # seconds between two looks for new events


def since_iso(text: str | None) -> str | None:
    """``--since`` of ``events``: an ISO 8601 time as given, or a duration back from now."""
    if not text:
        return None
    try:
        back = seconds(text, "--since")
    except CliError:
        return text  # an ISO time: the server checks it, and says so when it is not one
    return iso(datetime.now(timezone.utc) - timedelta(seconds=back))


class EventsCommand(Command):
    name = "jupyter-gpu-pause-events"
    description = (
        "Lifecycle events (paused, resumed, warned, failures…), oldest first: the latest "
        "1000, or since --since (an ISO 8601 time or a duration: 2h, 7d). --follow prints "
        "new ones as they happen until Ctrl-C (with --json: one JSON object per line)."
    )
    since = Unicode(None, allow_none=True, config=True, help="ISO 8601 time or 2h, 7d…")
    session = Unicode(None, allow_none=True, config=True, help="Only this session (NAME).")
    follow = Bool(False, config=True, help="Keep printing new events until Ctrl-C.")
    aliases = {
        **COMMON_ALIASES,
        "since": "EventsCommand.since",
        "session": "EventsCommand.session",
    }
    flags = {
        **COMMON_FLAGS,
        "follow": ({"EventsCommand": {"follow": True}}, "Print new events until Ctrl-C."),
    }

    def run(self, out: Output):
        self.positional(0)
        client = self.client(out)
        sid = resolve(client, self.session)["id"] if self.session else None
        since = since_iso(self.since)
        if not self.follow:
            events = client.events(since, sid)
            if out.json:
                return out.document({"events": events})
            for e in events:
                self._print(out, e)
            if not events:
                out.note("no events")
            return None
        try:
            for e in client.iter_events(since, sid, follow=True, poll=FOLLOW_POLL):
                self._print(out, e)
        except KeyboardInterrupt:
            return None  # the only way to end --follow: not a failure

    def _print(self, out: Output, e: Event) -> None:
        if out.json:
            return out.record(e)
        detail = e.get("detail") or {}
        text = detail.get("message") or ""
        out.line(f"{e['time']}\t{e['session_id']}\t{e['type']}\t{e['reason']}\t{text}".rstrip())


class ReportCommand(Command):
    name = "jupyter-gpu-pause-report"
    description = (
        "GPU-hours held, of which idle, and reclaimed by pauses, in total, per session and "
        "per day, since --since (default 30d; an ISO 8601 time or 7d, 24h…)."
    )
    since = Unicode("30d", config=True, help="ISO 8601 time or a duration (7d, 24h). Default 30d.")
    aliases = {**COMMON_ALIASES, "since": "ReportCommand.since"}

    def run(self, out: Output):
        self.positional(0)
        doc = self.client(out).report(self.since)
        if out.json:
            return out.document(doc)
        t = doc["total"]
        out.line(
            f"GPU-hours since {doc['since']}: held {t['gpu_hours_held']:.2f}, of which idle "
            f"{t['gpu_hours_idle']:.2f}; reclaimed by pauses {t['gpu_hours_reclaimed']:.2f}"
            + (  # (an older server's report has no such figure)
                f"; held by kernels that cannot be paused {unpausable:.2f}"
                if (unpausable := t.get("gpu_hours_unpausable"))
                else ""
            )
        )
        rows = [
            [
                r["path"],
                r["session_id"],
                f"{r['gpu_hours_held']:.2f}",
                f"{r['gpu_hours_idle']:.2f}",
                f"{r['gpu_hours_reclaimed']:.2f}",
            ]
            for r in doc["sessions"]
        ]
        if rows:
            out.table(["NOTEBOOK", "SESSION", "HELD", "IDLE", "RECLAIMED"], rows)


class CapacityCommand(Command):
    name = "jupyter-gpu-pause-capacity"
    description = (
        "The capacity provider, the pause tier in force, its GPUs and limits, who holds them, "
        "the queue, and the warm kernels kept for resumes."
    )

    def run(self, out: Output):
        self.positional(0)
        doc = self.client(out).capacity()
        if out.json:
            return out.document(doc)
        usage = doc.get("usage") or {}
        out.line(
            f"provider: {doc['provider']} (configured: {doc.get('configured')}); "
            f"{usage.get('sessions', 0)} GPU session(s) holding "
            f"{size_text(usage.get('gpu_bytes', 0))}"
        )
        tier = doc.get("tier")
        if tier:  # which pause tier is in force, and why (docs/suspend.md)
            out.line(f"tier: {tier['name']} — {tier['reason']}")
        limits = {k: v for k, v in (doc.get("limits") or {}).items() if v}
        if limits:
            out.line("limits: " + ", ".join(f"{k} {v}" for k, v in limits.items()))
        if doc.get("devices"):
            out.table(
                ["GPU", "NAME", "FREE", "TOTAL", "SESSIONS"],
                [
                    [
                        d["index"],
                        d["name"],
                        size_text(d["free_bytes"]),
                        size_text(d["total_bytes"]),
                        len(d.get("sessions") or []),
                    ]
                    for d in doc["devices"]
                ],
            )
        queue = doc.get("queue") or []
        where = f" ({doc['queue_url']})" if doc.get("queue_url") else ""
        if doc.get("queue_available") is False:
            out.line(f"queue{where}: UNAVAILABLE: {doc.get('queue_error')}")
        else:
            out.line(f"queue{where}: {len(queue)} waiting")
        if queue:
            out.table(
                ["POS", "NOTEBOOK", "USER", "SINCE", "NEEDS", "REASON"],
                [
                    [
                        q["position"],
                        q["path"],
                        q.get("user"),
                        q["since"],
                        size_text(q.get("needs_bytes") or 0),
                        q.get("message") or q.get("reason"),
                    ]
                    for q in queue
                ],
            )
        warm = doc.get("warm_kernels") or []
        out.line(
            "warm kernels: "
            + (
                "; ".join(
                    f"{w['kernel_name']} {'ready' if w['ready'] else 'starting'}"
                    + (f" ({', '.join(w['modules'])})" if w.get("modules") else "")
                    for w in warm
                )
                or "none"
            )
        )
        for note in doc.get("notes") or []:
            out.note(note)
