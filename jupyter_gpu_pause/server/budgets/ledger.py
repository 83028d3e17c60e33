"""The budget tables of the capacity queue (created by its migrations, ``QUEUE_TABLES``), read
and written in the queue's own transactions, so every server sharing the queue — one machine's
folder or a cluster's PostgreSQL — sees one budget per user.

- ``usage``: GPU-seconds as intervals, written by each server's heartbeat (``queue._meter``);
- ``budget_adjustments``: an admin's ``grant`` (more hours this period) and ``reset`` (the
  period's usage and grants so far no longer count);
- ``budget_notices``: the warnings given, so each is given once whichever server sees it first;
- ``budget_users``: each user's groups as their own server saw them, so an admin's server can
  tell which entry applies to anyone.

Times are the queue's clock (epoch seconds), the same for every server on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .periods import LONGEST


@dataclass
class Facts:
    """What the queue holds about one user from ``since`` on."""

    now: float
    intervals: list[tuple[float, float, float]] = field(default_factory=list)  # start, last, w
    adjustments: list[tuple[str, float, float]] = field(default_factory=list)  # kind, hours, at
    notices: list[tuple[str, float]] = field(default_factory=list)  # kind, at


class BudgetLedger:
    def __init__(self, queue):
        self.queue = queue

    def _q(self, db, sql, params=()):
        return self.queue.q(db, sql, params)

    # -- in the queue's transaction ------------------------------------------------------------
    def _rows(self, db, sql: str, params) -> list[tuple]:
        return [tuple(r) for r in self._q(db, sql, params).fetchall()]

    def _facts(self, db, user: str, since: float) -> Facts:
        return Facts(
            now=self.queue.now,
            intervals=self._rows(
                db,
                'SELECT start, last, weight FROM usage WHERE "user" = ? AND last > ?',
                (user, since),
            ),
            adjustments=self._rows(
                db,
                'SELECT kind, hours, at FROM budget_adjustments WHERE "user" = ? AND at >= ? '
                "ORDER BY at, id",
                (user, since),
            ),
            notices=self._rows(
                db,
                'SELECT kind, at FROM budget_notices WHERE "user" = ? AND at >= ?',
                (user, since),
            ),
        )

    def _notice(self, db, user: str, kind: str, since: float) -> bool:
        """Record the notice ``kind`` unless one was given since ``since``: True if this call
        gave it (one server of all wins)."""
        given = self._q(
            db,
            'SELECT 1 FROM budget_notices WHERE "user" = ? AND kind = ? AND at >= ?',
            (user, kind, since),
        ).fetchone()
        if given is not None:
            return False
        self._q(
            db,
            'INSERT INTO budget_notices ("user", kind, at) VALUES (?, ?, ?)',
            (user, kind, self.queue.now),
        )
        return True

    def _adjust(self, db, user: str, kind: str, hours: float, by: str) -> float:
        self._q(
            db,
            'INSERT INTO budget_adjustments ("user", kind, hours, at, by) VALUES (?, ?, ?, ?, ?)',
            (user, kind, hours, self.queue.now, by),
        )
        return self.queue.now

    def _seen(self, db, user: str, groups: list[str]) -> None:
        """This server's user and groups; and what no period reaches any more goes."""
        self._q(
            db,
            'INSERT INTO budget_users ("user", groups, seen) VALUES (?, ?, ?) '
            'ON CONFLICT ("user") DO UPDATE SET groups = excluded.groups, seen = excluded.seen',
            (user, json.dumps(sorted(groups)), self.queue.now),
        )
        old = self.queue.now - LONGEST.total_seconds()
        self._q(db, "DELETE FROM usage WHERE open = 0 AND last < ?", (old,))
        self._q(db, "DELETE FROM budget_adjustments WHERE at < ?", (old,))
        self._q(db, "DELETE FROM budget_notices WHERE at < ?", (old,))

    def _users(self, db) -> dict[str, frozenset[str]]:
        rows = self._q(db, 'SELECT "user", groups FROM budget_users').fetchall()
        metered = self._q(db, 'SELECT DISTINCT "user" FROM usage').fetchall()
        users = {u: frozenset(json.loads(g)) for u, g in rows}
        for (u,) in metered:
            users.setdefault(u, frozenset())
        return users

    # -- the event loop's side -----------------------------------------------------------------
    async def facts(self, user: str, since: float) -> Facts:
        return await self.queue.transaction(self._facts, user, since)

    async def notice(self, user: str, kind: str, since: float) -> bool:
        return await self.queue.transaction(self._notice, user, kind, since)

    async def adjust(self, user: str, kind: str, hours: float, by: str) -> float:
        return await self.queue.transaction(self._adjust, user, kind, hours, by)

    async def seen(self, user: str, groups: list[str]) -> None:
        await self.queue.transaction(self._seen, user, groups)

    async def users(self) -> dict[str, frozenset[str]]:
        return await self.queue.transaction(self._users)
