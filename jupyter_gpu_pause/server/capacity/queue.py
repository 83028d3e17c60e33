"""The resume queue: one FIFO line and one GPU usage count for every server that shares it.

Two places hold it, with the same tables and the same rules (this module, ``QUEUE_TABLES``
written once for both databases):

- a folder on one machine (``folder.py``: SQLite, every decision in one ``BEGIN IMMEDIATE``);
- a PostgreSQL database for a whole cluster (``postgres.py``: every decision in one
  transaction holding a cluster-wide advisory lock).

Either way two servers never grant the same capacity. The tables:

- ``servers``: each running server and the end of its lease, renewed while it lives;
- ``entries``: resumes waiting, in line order (``rank``);
- ``holders``: GPU sessions running (granted resumes and kernels started by hand);
- ``claims``: which server runs each live session. Servers that share a store see each other's
  paused sessions; a resume first claims its session, so one session never runs on two servers
  at once (two simultaneous resumes on two nodes: one kernel).

A server that dies (SIGKILL, a lost node) stops renewing; once its lease ends, any server's next
transaction deletes its entries, holders and claims, so nobody waits behind a dead process for
longer than the lease. On one machine nobody waits at all: a row whose process is gone (its pid
and start time, ``liveness.py``) is dropped by the next transaction of any server there, so a
crashed server's sessions resume at once after a restart.

The head of the line is granted by its own server when the provider says it fits; everyone
behind it waits (strict FIFO: a small resume never overtakes a large one).

The queue is the one place shared between users: it holds session ids, notebook *file names*
(not their folders), user names and sizes; for GPU-hour budgets (``budgets/``), each user's
GPU-seconds, groups and grants; for the admin console (the Hub service), each GPU session's
state summary (``board``: notebook file name, state, GPU memory, checkpoint size, place in
line and messages, ``board.py``), each user's GPU-seconds per hour (``usage_hours``) and what
admins did (``admin_actions``); nothing else.

*The board.* Every heartbeat (``set_holders``) also replaces this server's board rows with its
GPU sessions as they are now. A server that leaves keeps its rows there (its paused sessions
stay listed) and its ``servers`` row goes: ``server_id IN (SELECT id FROM servers)`` tells a
reader whether the server of a row still runs.

*Metering.* Every heartbeat (``set_holders``) also writes the GPU-seconds of this server's GPU
sessions: one open interval per session, its ``last`` moved to the transaction's clock; a
session that stopped holding is closed there. A server that dies leaves its intervals ending at
its last heartbeat; whoever drops it closes them, so nothing is counted twice and at most one
heartbeat is lost.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from traitlets import Float, TraitError, validate
from traitlets.config import LoggingConfigurable

from ..state.migrations import Migrations
from .base import Grant, Holder, Need, Verdict
from .liveness import ProcessId, process_gone

if TYPE_CHECKING:
    from .board import BoardRows

# one hour of one user's GPU-seconds: (hour key "2026-12-02T10", held, idle, reclaimed,
# unpausable), as the accounting ledger adds them up (``monitor/accounting.py``)
HourRow = tuple[str, float, float, float, float]

# The queue's migrations (``state/migrations.py``), for SQLite and PostgreSQL alike: a column is
# added here, once. Each database fills in its own words (``folder.py``, ``postgres.py``):
# ``{schema}`` the tables' schema with its dot ("" in SQLite), ``{serial}`` an id column in
# order of arrival, ``{float}`` and ``{bigint}``. ``"user"`` is quoted: PostgreSQL reserves it.
QUEUE_TABLES = (
    """
    CREATE TABLE {schema}servers (id TEXT PRIMARY KEY, "user" TEXT, label TEXT, pid INTEGER,
                                  lease_until {float} NOT NULL);
    CREATE TABLE {schema}entries (id {serial}, rank {float} NOT NULL, session_id TEXT NOT NULL,
                                  server_id TEXT NOT NULL, name TEXT, "user" TEXT,
                                  since {float} NOT NULL, needs_bytes {bigint} NOT NULL,
                                  reason TEXT, message TEXT);
    CREATE INDEX entries_rank ON {schema}entries (rank);
    CREATE TABLE {schema}holders (server_id TEXT NOT NULL, session_id TEXT NOT NULL,
                                  bytes {bigint} NOT NULL, devices TEXT NOT NULL,
                                  reserved INTEGER NOT NULL, since {float} NOT NULL,
                                  PRIMARY KEY (server_id, session_id))
    """,
    """
    CREATE TABLE {schema}claims (session_id TEXT PRIMARY KEY, server_id TEXT NOT NULL,
                                 since {float} NOT NULL)
    """,
    # which process a server is, so that one of the same machine found gone is dropped at once
    """
    ALTER TABLE {schema}servers ADD COLUMN host TEXT;
    ALTER TABLE {schema}servers ADD COLUMN pid_space TEXT;
    ALTER TABLE {schema}servers ADD COLUMN started {float}
    """,
    # GPU-hour budgets (``budgets/``): the GPU-seconds each server's GPU sessions hold, as
    # intervals renewed at every heartbeat (``last``); an admin's grants and resets; the
    # warnings already given (once per period, whichever server gives it); each user's groups
    """
    CREATE TABLE {schema}usage (id {serial}, "user" TEXT NOT NULL, server_id TEXT NOT NULL,
                                session_id TEXT NOT NULL, weight {float} NOT NULL,
                                start {float} NOT NULL, last {float} NOT NULL,
                                open INTEGER NOT NULL);
    CREATE INDEX usage_user ON {schema}usage ("user", last);
    CREATE TABLE {schema}budget_adjustments (id {serial}, "user" TEXT NOT NULL,
                                             kind TEXT NOT NULL, hours {float} NOT NULL,
                                             at {float} NOT NULL, by TEXT);
    CREATE TABLE {schema}budget_notices (id {serial}, "user" TEXT NOT NULL, kind TEXT NOT NULL,
                                         at {float} NOT NULL);
    CREATE TABLE {schema}budget_users ("user" TEXT PRIMARY KEY, groups TEXT NOT NULL,
                                       seen {float} NOT NULL)
    """,
    # the admin console (the Hub service): every server's GPU sessions, kept after the server
    # stops (``board.py``); each user's GPU-seconds per UTC hour ("2026-12-02T10"), added by
    # each server's accounting; what admins did through the console
    """
    CREATE TABLE {schema}board (session_id TEXT PRIMARY KEY, origin TEXT NOT NULL,
                                server_id TEXT NOT NULL, "user" TEXT NOT NULL, server TEXT,
                                host TEXT, state TEXT NOT NULL, doc TEXT NOT NULL,
                                updated {float} NOT NULL);
    CREATE INDEX board_user ON {schema}board ("user");
    CREATE TABLE {schema}usage_hours ("user" TEXT NOT NULL, hour TEXT NOT NULL,
                                      held {float} NOT NULL, idle {float} NOT NULL,
                                      reclaimed {float} NOT NULL, unpausable {float} NOT NULL,
                                      PRIMARY KEY ("user", hour));
    CREATE TABLE {schema}admin_actions (id {serial}, at {float} NOT NULL, by TEXT NOT NULL,
                                        action TEXT NOT NULL, "user" TEXT, session_id TEXT,
                                        detail TEXT NOT NULL, outcome TEXT NOT NULL)
    """,
)

USAGE_HOURS_KEPT = 400 * 86400.0  # seconds: a user's older ``usage_hours`` are deleted


def queue_migrations(**words: str) -> Migrations:
    """``QUEUE_TABLES`` in one database's words (``schema``, ``serial``, ``float``,
    ``bigint``)."""
    return Migrations("capacity queue", tuple(step.format(**words) for step in QUEUE_TABLES))


class Connection(Protocol):
    """A backend's database connection, as the base class handles it."""

    def close(self) -> None: ...


class QueueError(Exception):
    """The queue cannot be used (permissions, not a folder, a broken database)."""


class QueueUnavailable(QueueError):
    """The queue's database cannot be reached now (PostgreSQL down, the network); the next
    call tries again."""


@dataclass(frozen=True)
class ClaimHolder:
    """The live server that runs a session another server wants to resume."""

    label: str
    lease_until: float  # the end of its lease, in the queue's clock (epoch seconds)
    here: bool  # on this machine, its process seen alive: not a lease to wait out


@dataclass(frozen=True)
class Turn:
    """One look at the line: granted, or the position and why not yet."""

    grant: Grant | None
    position: int = 0
    verdict: Verdict | None = None


class CapacityQueue(LoggingConfigurable):
    """What every queue does; subclasses connect, run a transaction and say the time.

    SQL here is written for both SQLite and PostgreSQL, with ``?`` placeholders; ``_q``
    runs one statement. ``self.now`` is the transaction's clock (the database's own where
    servers on several machines compare leases).
    """

    kind = ""  # "folder" | "postgresql"

    lease_seconds = Float(
        30.0,
        help="How long a server's queue entries and GPU holdings outlive it if it dies "
        "without leaving the queue (SIGKILL, power loss, a lost node); renewed every third "
        "of it while the server runs. Default: 30. Must be >= 1.",
    ).tag(config=True)

    poll_interval = Float(
        0.25,
        help="Seconds between two looks at the queue by a server with a resume waiting "
        "(a release on the same server wakes its waiters at once). Default: 0.25.",
    ).tag(config=True)

    @validate("lease_seconds")
    def _lease(self, proposal):
        if not proposal["value"] >= 1:
            raise TraitError(f"CapacityQueue.lease_seconds = {proposal['value']!r}: must be >= 1")
        return proposal["value"]

    @validate("poll_interval")
    def _poll(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(f"CapacityQueue.poll_interval = {proposal['value']!r}: must be > 0")
        return proposal["value"]

    def __init__(self, server_id: str, user: str, label: str, **kwargs):
        super().__init__(**kwargs)
        self.server_id, self.user, self.label = server_id, user, label
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-pause-queue")
        # the worker thread's connection, made by the first transaction
        self._db: Connection | None = None
        self._joined = False  # this server's row was written once (so a missing one lapsed)
        self.now = 0.0
        self.me = ProcessId.current()

    @property
    def where(self) -> str:
        """Where the queue is, for messages and ``GET capacity`` (no password)."""
        raise NotImplementedError

    # -- subclasses ----------------------------------------------------------------------------
    def _tx(self, fn, *args):
        """Run ``fn(db, *args)`` in one write transaction, serialised with every other
        server's, ``self.now`` set to its clock."""
        raise NotImplementedError

    def _q(self, db, sql: str, params=()):
        return db.execute(sql, params)

    def _disconnect(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:  # a connection already broken
                pass

    # -- the worker thread's side --------------------------------------------------------------
    def _renew(self, db) -> None:
        """Extend this server's lease (join the servers, the first time). A lease that had
        lapsed (a stalled event loop, an outage) is said in the log: others dropped this
        server's rows, which the transaction renewing it puts back (``_set_holders``,
        ``_turn``)."""
        until = self.now + self.lease_seconds
        cur = self._q(
            db, "UPDATE servers SET lease_until = ? WHERE id = ?", (until, self.server_id)
        )
        if cur.rowcount:
            return
        me = self.me
        self._q(
            db,
            'INSERT INTO servers (id, "user", label, pid, lease_until, host, pid_space, started) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (self.server_id, self.user, self.label, me.pid, until, me.host, me.pid_space,
             me.started),
        )  # fmt: skip
        if self._joined:
            self.log.warning("jupyter_gpu_pause: the capacity queue lease had lapsed")
        self._joined = True

    def _expire(self, db) -> None:
        """Drop the servers whose lease ended, and those of this machine whose process is
        gone (without waiting for their lease), with everything they held."""
        self._q(db, "DELETE FROM servers WHERE lease_until < ?", (self.now,))
        here = self._q(
            db,
            "SELECT id, label, pid, started FROM servers WHERE pid_space = ? AND id <> ?",
            (self.me.pid_space, self.server_id),
        ).fetchall()
        for sid, label, pid, started in here:
            if process_gone(pid, started):
                self._q(db, "DELETE FROM servers WHERE id = ?", (sid,))
                self.log.warning(
                    "jupyter_gpu_pause: the server %s (pid %s) on this machine is gone: its "
                    "claims, place in line and GPU holdings are released now",
                    label or sid,
                    pid,
                )
        for table in ("entries", "holders", "claims"):
            self._q(db, f"DELETE FROM {table} WHERE server_id NOT IN (SELECT id FROM servers)")
        # a gone server's GPU-seconds end at its last heartbeat: closed, never extended again
        self._q(
            db,
            "UPDATE usage SET open = 0 "
            "WHERE open = 1 AND server_id NOT IN (SELECT id FROM servers)",
        )

    def _holders(self, db) -> list[Holder]:
        rows = self._q(
            db, "SELECT session_id, server_id, bytes, devices, reserved FROM holders"
        ).fetchall()
        return [Holder(r[0], r[1], r[2], tuple(json.loads(r[3])), bool(r[4])) for r in rows]

    def _upsert_holder(self, db, session_id, nbytes, devices, reserved: bool) -> None:
        devices = json.dumps(list(devices))
        self._q(
            db,
            "INSERT INTO holders (server_id, session_id, bytes, devices, reserved, since) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server_id, session_id) DO UPDATE SET "
            "bytes = excluded.bytes, devices = excluded.devices, reserved = excluded.reserved",
            (self.server_id, session_id, nbytes, devices, int(reserved), self.now),
        )

    def _hold(self, db, session_id: str, grant: Grant) -> None:
        self._upsert_holder(db, session_id, grant.bytes, grant.devices, True)

    def _insert_entry(self, db, need: Need, name: str, since: float, rank, entry=None) -> int:
        columns = 'rank, session_id, server_id, name, "user", since, needs_bytes'
        values = [rank or 0, need.session_id, self.server_id, name, self.user, since, need.total]
        if entry is not None:
            columns, values = "id, " + columns, [entry, *values]
        marks = ", ".join("?" * len(values))
        sql = f"INSERT INTO entries ({columns}) VALUES ({marks}) RETURNING id"
        return self._q(db, sql, values).fetchone()[0]

    def _join(self, db, need: Need, name: str, since: float, rank: float | None) -> tuple:
        self._renew(db)
        entry = self._insert_entry(db, need, name, since, rank)
        if rank is None:
            rank = float(entry)
            self._q(db, "UPDATE entries SET rank = ? WHERE id = ?", (rank, entry))
        return entry, rank

    def _turn(self, db, entry: int, rank: float, need: Need, name: str, since: float, decide):
        self._renew(db)
        self._expire(db)
        if self._q(db, "SELECT 1 FROM entries WHERE id = ?", (entry,)).fetchone() is None:
            # our lease lapsed (a stalled event loop, an outage): back in line at our place
            self._insert_entry(db, need, name, since, rank, entry)
        ahead = self._q(
            db,
            "SELECT COUNT(*) FROM entries WHERE rank < ? OR (rank = ? AND id < ?)",
            (rank, rank, entry),
        ).fetchone()[0]
        verdict: Verdict = decide(need, self._holders(db))
        if ahead == 0 and verdict.grant is not None:
            self._q(db, "DELETE FROM entries WHERE id = ?", (entry,))
            self._hold(db, need.session_id, verdict.grant)
            return Turn(verdict.grant)
        self._q(
            db,
            "UPDATE entries SET reason = ?, message = ? WHERE id = ?",
            (verdict.reason or "queue", verdict.message, entry),
        )
        return Turn(None, ahead + 1, verdict)

    def _try_now(self, db, need: Need, decide) -> Grant | None:
        self._renew(db)
        self._expire(db)
        if self._q(db, "SELECT COUNT(*) FROM entries").fetchone()[0]:
            return None  # others are in line first
        verdict = decide(need, self._holders(db))
        if verdict.grant is not None:
            self._hold(db, need.session_id, verdict.grant)
        return verdict.grant

    def _leave(self, db, entry: int | None, session_id: str) -> None:
        if entry is not None:
            self._q(db, "DELETE FROM entries WHERE id = ?", (entry,))
        self._q(
            db,
            "DELETE FROM holders WHERE server_id = ? AND session_id = ?",
            (self.server_id, session_id),
        )

    def _claim(self, db, session_id: str) -> ClaimHolder | None:
        """Claim ``session_id`` for this server; the server that runs it if another live one
        does (then nothing changes)."""
        self._renew(db)
        self._expire(db)
        row = self._q(
            db,
            "SELECT c.server_id, s.label, s.lease_until, s.pid_space FROM claims c "
            "LEFT JOIN servers s ON s.id = c.server_id WHERE c.session_id = ?",
            (session_id,),
        ).fetchone()
        if row is not None and row[0] != self.server_id:
            here = row[3] is not None and row[3] == self.me.pid_space
            return ClaimHolder(row[1] or row[0], row[2] or self.now, here)
        self._insert_claim(db, session_id)
        return None

    def _insert_claim(self, db, session_id: str) -> None:
        self._q(
            db,
            "INSERT INTO claims (session_id, server_id, since) VALUES (?, ?, ?) "
            "ON CONFLICT (session_id) DO NOTHING",
            (session_id, self.server_id, self.now),
        )

    def _set_claims(self, db, live: set[str]) -> dict[str, str]:
        """Keep this server's claims to ``live``; {session id: label} of the others'."""
        mine = self._q(
            db, "SELECT session_id FROM claims WHERE server_id = ?", (self.server_id,)
        ).fetchall()
        for (sid,) in mine:
            if sid not in live:
                self._q(
                    db,
                    "DELETE FROM claims WHERE server_id = ? AND session_id = ?",
                    (self.server_id, sid),
                )
        for sid in live - {sid for (sid,) in mine}:  # claimed again after a lapsed lease
            self._insert_claim(db, sid)
        others = self._q(
            db,
            "SELECT c.session_id, COALESCE(s.label, c.server_id) FROM claims c "
            "LEFT JOIN servers s ON s.id = c.server_id WHERE c.server_id <> ?",
            (self.server_id,),
        ).fetchall()
        return dict(others)

    def _meter(self, db, metered: dict[str, float]) -> None:
        """Extend this server's open usage intervals to now; ``metered``: {session id: weight}
        of the GPU sessions holding GPUs now (weight: weighted GPUs). A session that stopped,
        or whose weight changed, is closed now (and opened again with its new weight)."""
        rows = self._q(
            db,
            "SELECT id, session_id, weight FROM usage WHERE server_id = ? AND open = 1",
            (self.server_id,),
        ).fetchall()
        still = {}
        for row_id, sid, weight in rows:
            keep = sid in metered and abs(metered[sid] - weight) < 1e-9
            self._q(
                db,
                "UPDATE usage SET last = ?, open = ? WHERE id = ?",
                (self.now, int(keep), row_id),
            )
            if keep:
                still[sid] = weight
        for sid, weight in metered.items():
            if sid not in still and weight > 0:
                self._q(
                    db,
                    'INSERT INTO usage ("user", server_id, session_id, weight, start, last, open) '
                    "VALUES (?, ?, ?, ?, ?, ?, 1)",
                    (self.user, self.server_id, sid, weight, self.now, self.now),
                )

    def _publish(self, db, rows: BoardRows) -> None:
        """Replace this server's board rows with ``rows`` (``board.py``). A session it runs is
        its row, whoever wrote it before (a resume here of a session paused elsewhere); a
        paused one that another live server lists too (servers sharing a store see each
        other's paused sessions) stays that server's row until that server stops."""
        o = rows.origin
        upsert = (
            'INSERT INTO board (session_id, origin, server_id, "user", server, host, state, doc, '
            "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
            'origin = excluded.origin, server_id = excluded.server_id, "user" = excluded."user", '
            "server = excluded.server, host = excluded.host, state = excluded.state, "
            "doc = excluded.doc, updated = excluded.updated"
        )
        unless_listed = (
            " WHERE board.origin = excluded.origin"
            " OR board.server_id NOT IN (SELECT id FROM servers)"
        )
        for b in rows.sessions:
            self._q(
                db,
                upsert if b.runs_here else upsert + unless_listed,
                (b.session_id, o.origin, self.server_id, o.user, o.server, o.host, b.state,
                 json.dumps(b.doc), self.now),
            )  # fmt: skip
        keep = {b.session_id for b in rows.sessions}
        mine = self._q(db, "SELECT session_id FROM board WHERE origin = ?", (o.origin,))
        for (sid,) in mine.fetchall():
            if sid not in keep:
                self._q(
                    db, "DELETE FROM board WHERE origin = ? AND session_id = ?", (o.origin, sid)
                )

    def _add_hours(self, db, user: str, rows: Sequence[HourRow]) -> None:
        """Add ``rows`` to ``user``'s hours; drop the user's hours older than
        ``USAGE_HOURS_KEPT`` (the user's only: a look-up by the primary key, where a sweep of
        every user's would scan the table under the queue's lock at every monitor pass)."""
        for hour, held, idle, reclaimed, unpausable in rows:
            self._q(
                db,
                'INSERT INTO usage_hours ("user", hour, held, idle, reclaimed, unpausable) '
                'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ("user", hour) DO UPDATE SET '
                "held = usage_hours.held + excluded.held, "
                "idle = usage_hours.idle + excluded.idle, "
                "reclaimed = usage_hours.reclaimed + excluded.reclaimed, "
                "unpausable = usage_hours.unpausable + excluded.unpausable",
                (user, hour, held, idle, reclaimed, unpausable),
            )
        oldest = time.strftime("%Y-%m-%dT%H", time.gmtime(self.now - USAGE_HOURS_KEPT))
        self._q(db, 'DELETE FROM usage_hours WHERE "user" = ? AND hour < ?', (user, oldest))

    def _set_holders(
        self,
        db,
        holders: list[Holder],
        live: set[str] | None = None,
        metered: dict[str, float] | None = None,
        board: BoardRows | None = None,
    ) -> dict:
        self._renew(db)
        self._expire(db)  # what others run (``elsewhere``) never names a server that is gone
        if metered is not None:
            self._meter(db, metered)
        keep = {h.session_id for h in holders}
        mine = self._q(
            db, "SELECT session_id FROM holders WHERE server_id = ?", (self.server_id,)
        ).fetchall()
        for (sid,) in mine:
            if sid not in keep:
                self._q(
                    db,
                    "DELETE FROM holders WHERE server_id = ? AND session_id = ?",
                    (self.server_id, sid),
                )
        for h in holders:
            self._upsert_holder(db, h.session_id, h.bytes, h.devices, h.reserved)
        if board is not None:
            self._publish(db, board)
        return {} if live is None else self._set_claims(db, live)

    def _snapshot(self, db) -> dict:
        self._expire(db)
        servers = {
            r[0]: {"user": r[1], "label": r[2]}
            for r in self._q(db, 'SELECT id, "user", label FROM servers').fetchall()
        }
        entries = self._q(
            db,
            'SELECT session_id, server_id, name, "user", since, needs_bytes, reason, message '
            "FROM entries ORDER BY rank, id",
        ).fetchall()
        queue = [
            {
                "session_id": r[0],
                "server_id": r[1],
                "server": servers.get(r[1], {}).get("label"),
                "name": r[2],
                "user": r[3],
                "position": i + 1,
                "since": r[4],
                "needs_bytes": r[5],
                "reason": r[6],
                "message": r[7],
            }
            for i, r in enumerate(entries)
        ]
        return {"queue": queue, "holders": self._holders(db), "servers": servers}

    def _close(self, db, board: BoardRows | None) -> None:
        self._meter(db, {})  # this server's GPU-seconds counted until now, and closed
        if board is not None:  # as the sessions are left (its board rows stay)
            self._publish(db, board)
        self._q(db, "DELETE FROM entries WHERE server_id = ?", (self.server_id,))
        self._q(db, "DELETE FROM holders WHERE server_id = ?", (self.server_id,))
        self._q(db, "DELETE FROM claims WHERE server_id = ?", (self.server_id,))
        self._q(db, "DELETE FROM servers WHERE id = ?", (self.server_id,))

    # -- the event loop's side -----------------------------------------------------------------
    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _in_tx(self, fn, *args):
        return await self._run(self._tx, fn, *args)

    async def open(self) -> None:
        await self._in_tx(self._renew)

    async def join(
        self, need: Need, name: str, since: float, rank: float | None = None
    ) -> tuple[int, float]:
        """Enter the line (at ``rank``: back at a place held before); returns (entry, rank)."""
        return await self._in_tx(self._join, need, name, since, rank)

    async def turn(
        self,
        entry: int,
        rank: float,
        need: Need,
        name: str,
        since: float,
        decide: Callable[[Need, list[Holder]], Verdict],
    ) -> Turn:
        return await self._in_tx(self._turn, entry, rank, need, name, since, decide)

    async def try_now(self, need: Need, decide) -> Grant | None:
        return await self._in_tx(self._try_now, need, decide)

    async def leave(self, entry: int | None, session_id: str) -> None:
        await self._in_tx(self._leave, entry, session_id)

    async def set_holders(
        self,
        holders: list[Holder],
        live: set[str] | None = None,
        metered: dict[str, float] | None = None,
        board: BoardRows | None = None,
    ) -> dict:
        """This server's GPU sessions and, when given, the sessions it runs (its claims),
        their weighted GPUs to meter and its board rows; returns the sessions other servers
        run, {session id: server label}."""
        return await self._in_tx(self._set_holders, holders, live, metered, board)

    async def add_hours(self, user: str, rows: Sequence[HourRow]) -> None:
        """Add GPU-seconds per hour to ``user``'s (``usage_hours``), in one transaction."""
        await self._in_tx(self._add_hours, user, rows)

    async def transaction(self, fn, *args):
        """``fn(db, *args)`` in one transaction of the queue, ``self.now`` its clock: for the
        rooms that keep tables of their own in it (``budgets/ledger.py``), which run their
        SQL through ``q``."""
        return await self._in_tx(fn, *args)

    def q(self, db, sql: str, params=()):
        return self._q(db, sql, params)

    async def claim(self, session_id: str) -> ClaimHolder | None:
        return await self._in_tx(self._claim, session_id)

    async def snapshot(self) -> dict:
        return await self._in_tx(self._snapshot)

    def close_now(self) -> None:
        """Drop the worker thread of a queue that was never opened (a configuration check)."""
        self._pool.shutdown(wait=False)

    async def close(self, board: BoardRows | None = None) -> None:
        """Leave the queue: this server's place in line, GPU holdings, claims and lease go;
        its board rows stay, as ``board`` says its sessions are left."""
        try:
            if self._db is not None:
                await self._in_tx(self._close, board)
        except QueueUnavailable as e:  # our rows expire with our lease
            self.log.warning("jupyter_gpu_pause: could not leave the capacity queue: %s", e)
        finally:
            await self._run(self._disconnect)
            self._pool.shutdown(wait=False)
