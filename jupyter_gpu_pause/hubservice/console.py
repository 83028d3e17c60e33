"""What the Hub console shows and does, free of Tornado: the handlers parse, call one method of
``Console`` and send its answer.

Where each figure comes from:

- *sessions*: the capacity queue's ``board``, where every user's server publishes its GPU
  sessions at each change and heartbeat (``server/capacity/board.py``). A server that stopped
  leaves its rows (its paused sessions stay listed); whether it still runs is whether its
  queue lease is alive.
- *the line*: the queue's ``entries``, in order.
- *usage*: the queue's ``usage_hours`` (GPU-seconds held, idle, reclaimed by pausing, per user
  and UTC hour, added by each server's accounting) and, for budgets, the same figures each
  user's ``GET budget`` computes from the queue's metered intervals (``budgets/service.py``).
- *actions*: a pause or a cancel goes through the user's own server (the Hub's proxy, with the
  service's token, naming the admin as ``by``), so it is the same operation a user's click
  runs; a grant or a reset is written to the queue's budget tables, as a budget admin's server
  does. Each is recorded in ``admin_actions`` with who did it and how it ended.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..server.budgets.periods import PERIODS, bounds
from ..server.budgets.rules import BudgetRule
from ..server.budgets.service import Budgets
from ..server.capacity.queue import CapacityQueue, QueueUnavailable
from ..server.monitor.accounting import hour_key
from ..server.state.errors import BadRequest, GpuPauseError, NotFound, WrongState
from ..store.format import iso, parse_iso
from .hub import HubApi, HubUnreachable

# what an admin may do to a session in each state (through its server, which decides last)
ACTIONS = {
    "active": ["pause"],
    "idle": ["pause"],
    "waiting": ["cancel"],
    "pausing": ["cancel"],
}
MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
USAGE_KINDS = ("held", "idle", "reclaimed", "unpausable")
NO_GROUP = "(no group)"
MAX_MESSAGE = 500  # characters of an admin's message, as the user's server accepts it
ACTIONS_SHOWN = 50


class Unreachable(GpuPauseError):
    """A user's server, or the Hub, did not answer: nothing was done."""

    status = 502
    reason = "server-unreachable"


class QueueDown(GpuPauseError):
    status = 503
    reason = "queue-unavailable"


class Refused(GpuPauseError):
    """The user's server refused the action (its own status and reason, passed on)."""

    def __init__(self, message: str, status: int, reason: str):
        super().__init__(message, reason)
        self.status = status if status in (400, 403, 404, 409) else 502


@dataclass(frozen=True)
class Admin:
    """Who is acting: their Hub name, and why they may (``admin`` or ``scope``)."""

    name: str
    granted_by: str


def _ts(value: float | None) -> str | None:
    return iso(datetime.fromtimestamp(value, timezone.utc)) if value is not None else None


def _age(created: str | None, now: datetime) -> float | None:
    if not created:
        return None
    try:
        return round((now - parse_iso(created)).total_seconds(), 1)
    except ValueError:
        return None


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """``[start, end)`` of a usage period: a budget period holding ``now``, or a calendar
    month given as ``YYYY-MM`` (what finance asks for)."""
    if period in PERIODS:
        start, end = bounds(period, now)
        return start, min(end, now + timedelta(hours=1))
    m = MONTH.match(period)
    if not m:
        raise BadRequest(
            f"period must be one of {', '.join(PERIODS)} or a month such as 2026-11, "
            f"not {period!r}",
            "bad-period",
        )
    start = datetime(int(m[1]), int(m[2]), 1, tzinfo=timezone.utc)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


class Console:
    def __init__(
        self,
        *,
        queue: CapacityQueue,
        hub: HubApi,
        rules: list[BudgetRule],
        exempt: list[str],
        refresh_seconds: float,
        log,
    ):
        self.queue, self.hub = queue, hub
        # the rules and figures every user's server uses for its GET budget (the console is
        # no user's server: no user of its own, no admins, nothing to meter)
        self.budgets = Budgets(
            rules=rules, exempt=exempt, admins=[], weights={}, user="", queue=queue,
            gpu_names=dict, log=log,
        )  # fmt: skip
        self.ledger = self.budgets.ledger
        self.refresh_seconds = refresh_seconds
        self.log = log

    # -- reading the queue --------------------------------------------------------------------
    async def _tx(self, fn, *args):
        try:
            return await self.queue.transaction(fn, *args)
        except QueueUnavailable as e:
            raise QueueDown(f"{e}; the console shows again once it is back") from None

    def _board(self, db) -> tuple[list[tuple], set[str], float]:
        q = self.queue.q
        rows = q(
            db,
            'SELECT session_id, server_id, "user", server, host, state, doc, updated FROM board',
        ).fetchall()
        live = {r[0] for r in q(db, "SELECT id FROM servers WHERE lease_until >= ?", (
            self.queue.now,
        )).fetchall()}  # fmt: skip
        return [tuple(r) for r in rows], live, self.queue.now

    async def sessions(self) -> dict:
        """Every GPU session of every user, running first, then waiting, then paused."""
        rows, live, clock = await self._tx(self._board)
        now = datetime.fromtimestamp(clock, timezone.utc)
        out = [self._session_row(r, live, now) for r in rows]
        order = {"active": 0, "idle": 0, "pausing": 1, "resuming": 1, "suspended": 1}
        out.sort(key=lambda s: (order.get(s["state"], 2 if s["state"] == "waiting" else 3),
                                s["user"], s["notebook"] or ""))  # fmt: skip
        return {
            "generated": iso(now),
            "refresh_seconds": self.refresh_seconds,
            "queue": {"where": self.queue.where, "available": True, "error": None},
            "sessions": out,
        }

    def _session_row(self, row: tuple, live: set[str], now: datetime) -> dict:
        sid, server_id, user, server, host, state, doc_text, updated = row
        try:
            doc = json.loads(doc_text)
        except ValueError:
            doc = {}
        running = server_id in live
        checkpoint = doc.get("checkpoint") or None
        if checkpoint:
            checkpoint = {
                "id": checkpoint.get("id"),
                "created": checkpoint.get("created"),
                "bytes": checkpoint.get("bytes"),
                "age_seconds": _age(checkpoint.get("created"), now),
            }
        waiting = doc.get("waiting") or None
        since = {
            "idle": doc.get("last_activity"),
            "waiting": (waiting or {}).get("since"),
            "paused": (checkpoint or {}).get("created"),
        }.get(state)
        # a session of a server that stopped holds nothing any more, whatever it last said
        stale = not running and state not in ("paused", "failed")
        return {
            "user": user,
            "server": server,
            "hub_server_name": doc.get("hub_server_name"),
            "node": host,
            "server_running": running,
            "session_id": sid,
            "notebook": doc.get("name"),
            "kernel_name": doc.get("kernel_name"),
            "state": state,
            "since": since,
            "idle_seconds": doc.get("idle_seconds") if running else None,
            "gpu": doc.get("gpu") if running else None,
            "checkpoint": checkpoint,
            "queue_position": doc.get("queue_position"),
            "waiting": waiting,
            "error": doc.get("error"),
            "message": doc.get("message"),
            "pausable": doc.get("pausable"),
            "updated": _ts(updated),
            "stale": stale,
            "actions": ACTIONS.get(state, []) if running else [],
            "prefix": doc.get("prefix"),
        }

    async def line(self) -> dict:
        try:
            snap = await self.queue.snapshot()
        except QueueUnavailable as e:
            raise QueueDown(f"{e}; the console shows again once it is back") from None
        now = self.queue.now
        # the server as the sessions name it ("alice"), not its process's queue label
        rows, _, _ = await self._tx(self._board)
        servers = {r[0]: r[3] for r in rows}
        return {
            "line": [
                {
                    "position": w["position"],
                    "user": w["user"],
                    "notebook": w["name"],
                    "server": servers.get(w["session_id"]) or w["server"],
                    "session_id": w["session_id"],
                    "since": _ts(w["since"]),
                    "waited_seconds": round(max(0.0, now - w["since"]), 1),
                    "needs_bytes": w["needs_bytes"],
                    "reason": w["reason"],
                    "message": w["message"],
                }
                for w in snap["queue"]
            ]
        }

    # -- usage --------------------------------------------------------------------------------
    def _hours(self, db, start: str, end: str) -> list[tuple]:
        return [
            tuple(r)
            for r in self.queue.q(
                db,
                'SELECT "user", held, idle, reclaimed, unpausable FROM usage_hours '
                "WHERE hour >= ? AND hour < ?",
                (start, end),
            ).fetchall()
        ]

    async def _groups(self) -> dict[str, frozenset[str]]:
        """Each known user's groups: as their own server saw them (Unix and Hub groups), and
        the Hub's, when it answers."""
        users = dict(await self.ledger.users())
        try:
            for user, groups in (await self.hub.groups()).items():
                users[user] = users.get(user, frozenset()) | groups
        except HubUnreachable as e:
            self.log.warning("jupyter_gpu_pause hub service: the Hub's groups: %s", e)
        return users

    async def _budget(self, user: str, groups: frozenset[str]) -> dict | None:
        """The figures ``GET budget`` shows ``user`` (the same rule, the same queue rows)."""
        f = await self.budgets.figures_of(user, groups)
        return f.to_json() if f is not None else None

    async def usage(self, period: str, by: str) -> dict:
        if by not in ("user", "group"):
            raise BadRequest(f"by must be user or group, not {by!r}", "bad-by")
        now = datetime.now(timezone.utc)
        start, end = period_bounds(period, now)
        try:
            hours = await self.queue.transaction(self._hours, hour_key(start), hour_key(end))
            groups = await self._groups()
        except QueueUnavailable as e:
            raise QueueDown(str(e)) from None
        per_user: dict[str, list[float]] = {}
        for user, *seconds in hours:
            acc = per_user.setdefault(user, [0.0] * len(USAGE_KINDS))
            for i, value in enumerate(seconds):
                acc[i] += value
        for user in groups:
            per_user.setdefault(user, [0.0] * len(USAGE_KINDS))
        rows = []
        if by == "user":
            for user in sorted(per_user):
                row = self._figures(user, [user], per_user[user])
                try:
                    row["budget"] = await self._budget(user, groups.get(user, frozenset()))
                except QueueUnavailable as e:
                    raise QueueDown(str(e)) from None
                rows.append(row)
        else:
            members: dict[str, list[str]] = {}
            for user in per_user:
                for group in sorted(groups.get(user) or {NO_GROUP}):
                    members.setdefault(group, []).append(user)
            for group in sorted(members):
                names = sorted(members[group])
                sums = [sum(per_user[u][i] for u in names) for i in range(len(USAGE_KINDS))]
                rows.append({**self._figures(group, names, sums), "budget": None})
        total = [sum(v[i] for v in per_user.values()) for i in range(len(USAGE_KINDS))]
        return {
            "period": period,
            "start": iso(start),
            "end": iso(end),
            "by": by,
            "rows": rows,
            "total": self._figures(None, sorted(per_user), total),
        }

    @staticmethod
    def _figures(key: str | None, users: list[str], seconds: list[float]) -> dict:
        row: dict = {"key": key, "users": users} if key is not None else {}
        for kind, value in zip(USAGE_KINDS, seconds, strict=True):
            row[f"gpu_hours_{kind}"] = round(value / 3600, 4)
        return row

    async def usage_csv(self, period: str, by: str) -> str:
        """The usage table as CSV (one row per user or group, then the total)."""
        usage = await self.usage(period, by)
        out = io.StringIO()
        w = csv.writer(out)
        head = [by, "users", "period_start", "period_end"]
        head += [f"gpu_hours_{k}" for k in USAGE_KINDS]
        if by == "user":
            head += ["budget", "budget_used_hours", "budget_limit_hours", "budget_state"]
        w.writerow(head)
        for row in [*usage["rows"], {"key": "TOTAL", "users": [], **usage["total"]}]:
            line = [row["key"], " ".join(row["users"]), usage["start"], usage["end"]]
            line += [row[f"gpu_hours_{k}"] for k in USAGE_KINDS]
            if by == "user":
                b = row.get("budget") or {}
                line += [
                    b.get("name", ""),
                    b.get("used_hours", ""),
                    b.get("limit_hours", ""),
                    b.get("state", ""),
                ]
            w.writerow(line)
        return out.getvalue()

    # -- actions ------------------------------------------------------------------------------
    def _record(self, db, admin: str, action: str, user, sid, detail: dict, outcome: str):
        self.queue.q(
            db,
            'INSERT INTO admin_actions (at, by, action, "user", session_id, detail, outcome) '
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.queue.now, admin, action, user, sid, json.dumps(detail), outcome),
        )

    async def record(self, admin: Admin, action: str, user, sid, detail: dict, outcome: str):
        """One line of the audit: who did what to whom, and how it ended."""
        try:
            await self.queue.transaction(
                self._record, admin.name, action, user, sid, detail, outcome
            )
        except QueueUnavailable as e:  # the action happened: say so in the log at least
            self.log.error(
                "jupyter_gpu_pause hub service: could not record that %s did %s on %s/%s "
                "(%s): %s",
                admin.name, action, user, sid, outcome, e,
            )  # fmt: skip
        self.log.info(
            "jupyter_gpu_pause hub service: %s: %s %s %s: %s", admin.name, action, user, sid,
            outcome,
        )  # fmt: skip

    def _actions(self, db) -> list[tuple]:
        return [
            tuple(r)
            for r in self.queue.q(
                db,
                'SELECT at, by, action, "user", session_id, detail, outcome FROM admin_actions '
                "ORDER BY at DESC, id DESC LIMIT ?",
                (ACTIONS_SHOWN,),
            ).fetchall()
        ]

    async def actions(self) -> dict:
        rows = await self._tx(self._actions)
        return {
            "actions": [
                {
                    "at": _ts(at),
                    "by": by,
                    "action": action,
                    "user": user,
                    "session_id": sid,
                    "detail": json.loads(detail),
                    "outcome": outcome,
                }
                for at, by, action, user, sid, detail, outcome in rows
            ]
        }

    async def _find(self, user: str, session_id: str) -> dict:
        """The session's row, if ``user`` has it on the board."""
        for s in (await self.sessions())["sessions"]:
            if s["session_id"] == session_id and s["user"] == user:
                return s
        raise NotFound(f"{user} has no GPU session {session_id}", "no-such-session")

    async def act(self, admin: Admin, action: str, user: str, session_id: str, message) -> dict:
        """Pause or cancel a user's session through their server, saying who asked and why."""
        if message is not None and not isinstance(message, str):
            raise BadRequest("message must be a string", "bad-field")
        message = (message or "").strip()
        if action == "pause" and not message:
            raise BadRequest(
                "say why in a message: the user reads it in their Lab ('Paused by an admin: …')",
                "no-message",
            )
        if len(message) > MAX_MESSAGE:
            raise BadRequest(f"the message is longer than {MAX_MESSAGE} characters", "bad-field")
        s = await self._find(user, session_id)
        detail = {"notebook": s["notebook"], "server": s["server"], "message": message}
        if not s["server_running"] or not s["prefix"]:
            raise WrongState(
                f"{user}'s server is not running: a {s['state']} session there cannot be "
                f"{'paused' if action == 'pause' else 'cancelled'}",
                "server-stopped",
            )
        body = {"by": admin.name, **({"message": message} if message else {})}
        try:
            answer = await self.hub.server_api(
                s["prefix"], "POST", f"sessions/{session_id}/{action}", body
            )
        except HubUnreachable as e:
            await self.record(admin, action, user, session_id, detail, f"unreachable: {e}")
            raise Unreachable(
                f"{user}'s server could not be reached ({e}); nothing was done"
            ) from None
        if answer.code >= 400:
            await self.record(admin, action, user, session_id, detail, answer.message())
            reason = answer.body.get("reason") if isinstance(answer.body, dict) else None
            raise Refused(
                f"{user}'s server refused: {answer.message()}", answer.code, reason or "refused"
            )
        await self.record(admin, action, user, session_id, detail, "ok")
        state = answer.body.get("state") if isinstance(answer.body, dict) else None
        return {"session": {**s, "state": state or s["state"], "actions": []}}

    async def _known(self, user) -> frozenset[str]:
        """``user``'s groups, or NotFound when neither the Hub nor the queue knows them (a
        typo must not grant hours to nobody)."""
        if not isinstance(user, str) or not user.strip():
            raise BadRequest('name the user: {"user": "alice", …}', "bad-user")
        groups = await self._groups()  # every Hub user, and every user the queue knows
        if user not in groups:
            raise NotFound(f"no Hub user or queue user is named {user!r}", "unknown-user")
        mine = groups[user]
        if self.budgets.rule_for(user, mine) is None:
            raise NotFound(
                f"no budget applies to {user} (exempt, or no entry matches)", "no-budget"
            )
        return mine

    async def adjust(self, admin: Admin, kind: str, user, hours=None) -> dict:
        """Grant ``hours`` more this period, or reset the period (``kind``)."""
        if kind == "grant":
            number = isinstance(hours, (int, float)) and not isinstance(hours, bool)
            if not number or not 0 < hours < math.inf:
                raise BadRequest(f"hours must be a positive number, not {hours!r}", "bad-hours")
        groups = await self._known(user)
        amount = float(hours) if kind == "grant" else 0.0
        try:
            await self.ledger.adjust(user, kind, amount, admin.name)
        except QueueUnavailable as e:
            raise QueueDown(f"{e}; nothing was changed") from None
        detail = {"hours": amount} if kind == "grant" else {}
        await self.record(admin, kind, user, None, detail, "ok")
        budget = await self._budget(user, groups)
        return {"budget": budget}
