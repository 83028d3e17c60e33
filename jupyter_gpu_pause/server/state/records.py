"""SQLite records: sessions, events, GPU-hour accounting, the webhook outbox and the answers
kept for idempotency keys, so they outlive a server restart.

All access goes through one worker thread (SQLite connections are single-threaded and disk
writes must not block the event loop). Migrations are additive and numbered by user_version
(``migrations.py``); a database a newer version migrated is refused as soon as ``Records`` is
made, so the server stops before it serves rather than answering 503 on records it cannot read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...store.format import iso, utcnow
from ...store.private import private_file
from .migrations import Migrations, check_sqlite, migrate_sqlite
from .model import Session

LOCK_TIMEOUT = 30  # seconds to wait for another connection's lock on the database

MIGRATIONS = Migrations(
    "records database",
    (
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, path TEXT NOT NULL, state TEXT NOT NULL,
                               data TEXT NOT NULL);
        CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
                             session_id TEXT, type TEXT NOT NULL, reason TEXT, detail TEXT);
        CREATE INDEX events_time ON events(time);
        CREATE INDEX events_session ON events(session_id);
        """,
        # GPU-seconds (per device) by UTC hour and session, for the report; path as last seen
        """
        CREATE TABLE accounting (hour TEXT NOT NULL, session_id TEXT NOT NULL, path TEXT,
                                 held REAL NOT NULL DEFAULT 0, idle REAL NOT NULL DEFAULT 0,
                                 reclaimed REAL NOT NULL DEFAULT 0,
                                 PRIMARY KEY (hour, session_id));
        """,
        # The webhook outbox (webhooks.py): one row per event and URL until a 2xx, a give-up
        # or a drop. target: sha256 of the URL (the URL may hold a token), label: the URL as
        # logs show it, body: the exact bytes every attempt sends. Times are Unix seconds.
        """
        CREATE TABLE webhook_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                                     target TEXT NOT NULL, label TEXT NOT NULL,
                                     webhook_id TEXT NOT NULL, session_id TEXT, type TEXT NOT NULL,
                                     body BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                                     next_attempt REAL NOT NULL, created REAL NOT NULL,
                                     UNIQUE (target, webhook_id));
        CREATE INDEX webhook_outbox_target ON webhook_outbox(target, seq);
        """,
        # The first answer to each Idempotency-Key (web/idempotency.py), per user: request is
        # "METHOD uri sha256-of-body", body the exact bytes answered; created in Unix seconds.
        """
        CREATE TABLE idempotency (user TEXT NOT NULL, key TEXT NOT NULL, request TEXT NOT NULL,
                                  status INTEGER NOT NULL, body BLOB NOT NULL,
                                  created REAL NOT NULL, PRIMARY KEY (user, key));
        CREATE INDEX idempotency_created ON idempotency(created);
        """,
        # GPU-seconds held by kernels known not to be pausable (part of held)
        """
        ALTER TABLE accounting ADD COLUMN unpausable REAL NOT NULL DEFAULT 0;
        """,
    ),
)


def _wal(db: sqlite3.Connection) -> None:
    """Put the database in WAL mode, waiting for others that hold it.

    Switching a new database to WAL needs it to itself, and SQLite answers "database is locked"
    at once, without its busy timeout, while another server (one data dir, several servers
    starting together) does the same: so this waits, as the busy timeout would.
    """
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def new_event(session_id: str, type_: str, reason: str, detail: dict | None = None) -> dict:
    """An event as §8 of the design has it: ``{time, session_id, type, reason, detail}``."""
    return {
        "time": iso(utcnow()),
        "session_id": session_id,
        "type": type_,
        "reason": reason,
        "detail": detail or {},
    }


@dataclass(frozen=True)
class Delivery:
    """One row of the webhook outbox: an event's bytes, due at one URL."""

    target: str  # sha256 hex of the URL
    label: str  # the URL without user info, query or fragment
    webhook_id: str
    session_id: str | None
    type: str
    body: bytes
    created: float  # Unix seconds
    next_attempt: float  # Unix seconds; not sent before
    attempts: int = 0  # made so far
    seq: int = 0  # the outbox's order (0 until written)


@dataclass(frozen=True)
class KeptAnswer:
    """The first answer to an idempotency key, and the request it answered."""

    request: str  # "METHOD uri sha256-of-body"
    status: int
    body: bytes


_OUTBOX_FIELDS = (
    "target, label, webhook_id, session_id, type, body, created, next_attempt, attempts"
)
_OUTBOX_COLUMNS = _OUTBOX_FIELDS + ", seq"


def refuse_newer_records(path: str) -> None:
    """``NewerSchema`` if the records at ``path`` were migrated by a newer jupyter_gpu_pause:
    the app refuses them before it builds anything (nothing in the file is changed)."""
    check_sqlite(MIGRATIONS, path)


class Records:
    def __init__(self, db_path: str):
        """NewerSchema if ``db_path`` holds records a newer version migrated (a quick read of
        its version, before the event loop serves: the server refuses to start)."""
        check_sqlite(MIGRATIONS, db_path)
        self.db_path = db_path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-pause-db")
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            # Paths, events and variable names: private to the owner, like the checkpoints.
            # SQLite gives its -wal and -shm files the database file's mode.
            private_file(self.db_path)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(self.db_path + suffix):
                    private_file(self.db_path + suffix)
            db = sqlite3.connect(self.db_path, check_same_thread=False, timeout=LOCK_TIMEOUT)
            try:
                _wal(db)
                db.execute("PRAGMA synchronous=NORMAL")
                migrate_sqlite(db, MIGRATIONS, self.db_path)
            except BaseException:
                db.close()  # the next call tries again, from the start
                raise
            self._db = db
        return self._db

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- sessions ------------------------------------------------------------------------
    def _load_sessions(self) -> list[Session]:
        rows = self._connect().execute("SELECT data FROM sessions").fetchall()
        return [Session.from_record(json.loads(r[0])) for r in rows]

    async def load_sessions(self) -> list[Session]:
        return await self._run(self._load_sessions)

    def _save(self, record: dict) -> None:
        db = self._connect()
        db.execute(
            "INSERT OR REPLACE INTO sessions (id, path, state, data) VALUES (?, ?, ?, ?)",
            (record["id"], record["path"], record["state"], json.dumps(record)),
        )
        db.commit()

    async def save(self, session: Session) -> None:
        session.touch()
        await self._run(self._save, session.to_record())

    def _delete(self, session_id: str) -> None:
        db = self._connect()
        db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        db.commit()

    async def delete(self, session_id: str) -> None:
        await self._run(self._delete, session_id)

    # -- events --------------------------------------------------------------------------
    def _add_event(self, event: dict, outbox: Sequence[Delivery], bound: int) -> list[Delivery]:
        db = self._connect()
        with db:  # one transaction: the event and its deliveries, or neither
            db.execute(
                "INSERT INTO events (time, session_id, type, reason, detail) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    event["time"],
                    event["session_id"],
                    event["type"],
                    event["reason"],
                    json.dumps(event["detail"]),
                ),
            )
            db.executemany(
                f"INSERT INTO webhook_outbox ({_OUTBOX_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (d.target, d.label, d.webhook_id, d.session_id, d.type, d.body, d.created)
                    + (d.next_attempt, d.attempts)
                    for d in outbox
                ],
            )
            return self._trim(db, {d.target for d in outbox}, bound) if bound else []

    async def add_event(
        self, event: dict, outbox: Sequence[Delivery] = (), bound: int = 0
    ) -> list[Delivery]:
        """Store an event made by ``new_event``, and in the same transaction its webhook
        deliveries; with ``bound``, each of their URLs keeps its newest ``bound`` rows and the
        older ones are dropped: returned, oldest first."""
        return await self._run(self._add_event, event, outbox, bound)

    def _events(self, since, session_id, limit) -> list[dict]:
        q, args = "SELECT time, session_id, type, reason, detail FROM events WHERE 1=1", []
        if since:
            q += " AND time >= ?"
            args.append(since)
        if session_id:
            q += " AND session_id = ?"
            args.append(session_id)
        q += " ORDER BY seq DESC LIMIT ?"
        args.append(limit)
        rows = self._connect().execute(q, args).fetchall()
        return [
            {
                "time": r[0],
                "session_id": r[1],
                "type": r[2],
                "reason": r[3],
                "detail": json.loads(r[4] or "{}"),
            }
            for r in reversed(rows)
        ]

    async def events(
        self, since: str | None = None, session_id: str | None = None, limit: int = 1000
    ) -> list[dict]:
        return await self._run(self._events, since, session_id, limit)

    def _discarded(self) -> set[str]:
        rows = (
            self._connect()
            .execute("SELECT DISTINCT session_id FROM events WHERE type = 'discarded'")
            .fetchall()
        )
        return {r[0] for r in rows}

    async def discarded(self) -> set[str]:
        """Ids of sessions a user discarded: their kept checkpoints are not brought back."""
        return await self._run(self._discarded)

    # -- accounting ----------------------------------------------------------------------
    def _add_accounting(self, rows: list[tuple]) -> None:
        db = self._connect()
        with db:  # one transaction for the whole batch
            db.executemany(
                "INSERT INTO accounting (hour, session_id, path, held, idle, reclaimed, "
                "unpausable) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hour, session_id) DO "
                "UPDATE SET path = excluded.path, held = held + excluded.held, "
                "idle = idle + excluded.idle, reclaimed = reclaimed + excluded.reclaimed, "
                "unpausable = unpausable + excluded.unpausable",
                rows,
            )

    async def add_accounting(self, rows: list[tuple]) -> None:
        """Add ``(hour, session_id, path, held, idle, reclaimed, unpausable)`` seconds, in one
        transaction."""
        await self._run(self._add_accounting, rows)

    def _accounting(self, since_hour: str) -> dict:
        db = self._connect()
        # SQLite: with MAX(), the bare column ``path`` comes from the row of the latest hour
        sessions = db.execute(
            "SELECT session_id, path, MAX(hour), SUM(held), SUM(idle), SUM(reclaimed), "
            "SUM(unpausable) FROM accounting WHERE hour >= ? GROUP BY session_id",
            (since_hour,),
        ).fetchall()
        days = db.execute(
            "SELECT substr(hour, 1, 10) AS day, SUM(held), SUM(idle), SUM(reclaimed), "
            "SUM(unpausable) FROM accounting WHERE hour >= ? GROUP BY day",
            (since_hour,),
        ).fetchall()
        return {
            "sessions": [(r[0], r[1], *r[3:]) for r in sessions],
            "days": [tuple(r) for r in days],
        }

    async def accounting(self, since_hour: str) -> dict:
        """Seconds per session ``(id, path, held, idle, reclaimed, unpausable)`` and per UTC
        day."""
        return await self._run(self._accounting, since_hour)

    # -- webhook outbox ------------------------------------------------------------------
    # One server per db_path delivers: two servers sharing a database (one data dir) would each
    # send the other's rows too (receivers drop the duplicates by webhook-id); nothing here
    # locks rows across processes.
    def _trim(self, db: sqlite3.Connection, targets: Iterable[str], bound: int) -> list[Delivery]:
        dropped: list[Delivery] = []
        for target in targets:
            rows = db.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM webhook_outbox WHERE target = ? "
                "ORDER BY seq DESC LIMIT -1 OFFSET ?",
                (target, bound),
            ).fetchall()
            db.executemany("DELETE FROM webhook_outbox WHERE seq = ?", [(r[-1],) for r in rows])
            dropped += [Delivery(*r) for r in reversed(rows)]
        return dropped

    def _outbox_head(self, target: str) -> Delivery | None:
        row = (
            self._connect()
            .execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM webhook_outbox WHERE target = ? "
                "ORDER BY seq LIMIT 1",
                (target,),
            )
            .fetchone()
        )
        return Delivery(*row) if row else None

    async def outbox_head(self, target: str) -> Delivery | None:
        """The oldest delivery due at the URL ``target`` names, sent or not."""
        return await self._run(self._outbox_head, target)

    def _outbox_update(self, seq: int, attempts: int | None, next_attempt: float) -> None:
        db = self._connect()
        with db:
            if attempts is None:
                db.execute("DELETE FROM webhook_outbox WHERE seq = ?", (seq,))
            else:
                db.execute(
                    "UPDATE webhook_outbox SET attempts = ?, next_attempt = ? WHERE seq = ?",
                    (attempts, next_attempt, seq),
                )

    async def outbox_done(self, seq: int) -> None:
        """Remove a delivery: delivered, or given up."""
        await self._run(self._outbox_update, seq, None, 0.0)

    async def outbox_retry(self, seq: int, attempts: int, next_attempt: float) -> None:
        """Keep a failed delivery's attempts and when to try again, across restarts."""
        await self._run(self._outbox_update, seq, attempts, next_attempt)

    def _outbox_clear(self, target: str) -> int:
        db = self._connect()
        with db:
            return db.execute("DELETE FROM webhook_outbox WHERE target = ?", (target,)).rowcount

    async def outbox_clear(self, target: str) -> int:
        """Drop every delivery due at one URL; how many there were."""
        return await self._run(self._outbox_clear, target)

    def _outbox_prune(self, targets: Sequence[str], bound: int) -> tuple[dict, list[Delivery]]:
        db = self._connect()
        with db:
            marks = ", ".join("?" * len(targets))
            stale: dict[str, int] = {}
            for label, n in db.execute(
                "SELECT label, COUNT(*) FROM webhook_outbox "
                f"WHERE target NOT IN ({marks}) GROUP BY target",
                tuple(targets),
            ):
                stale[label] = stale.get(label, 0) + n
            db.execute(f"DELETE FROM webhook_outbox WHERE target NOT IN ({marks})", tuple(targets))
            return stale, self._trim(db, targets, bound)

    async def outbox_prune(self, targets: Sequence[str], bound: int) -> tuple[dict, list[Delivery]]:
        """At start: drop the deliveries due at URLs not in ``targets`` (returned as counts by
        URL label), and those beyond the newest ``bound`` of each URL (returned)."""
        return await self._run(self._outbox_prune, targets, bound)

    def _outbox_counts(self) -> dict[str, int]:
        rows = (
            self._connect()
            .execute("SELECT target, COUNT(*) FROM webhook_outbox GROUP BY target")
            .fetchall()
        )
        return dict(rows)

    async def outbox_counts(self) -> dict[str, int]:
        """Deliveries waiting, by URL (``target``)."""
        return await self._run(self._outbox_counts)

    # -- idempotency keys ----------------------------------------------------------------------
    def _kept_answer(self, user: str, key: str, since: float) -> KeptAnswer | None:
        row = (
            self._connect()
            .execute(
                "SELECT request, status, body FROM idempotency "
                "WHERE user = ? AND key = ? AND created >= ?",
                (user, key, since),
            )
            .fetchone()
        )
        return KeptAnswer(row[0], row[1], bytes(row[2])) if row else None

    async def kept_answer(self, user: str, key: str, since: float) -> KeptAnswer | None:
        """The answer kept for ``user``'s ``key`` if it was given after ``since`` (Unix s)."""
        return await self._run(self._kept_answer, user, key, since)

    def _keep_answer(self, user: str, key: str, answer: KeptAnswer, expired: float) -> None:
        db = self._connect()
        with db:
            db.execute("DELETE FROM idempotency WHERE created < ?", (expired,))
            db.execute(
                "INSERT OR REPLACE INTO idempotency (user, key, request, status, body, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (user, key, answer.request, answer.status, answer.body, time.time()),
            )

    async def keep_answer(self, user: str, key: str, answer: KeptAnswer, expired: float) -> None:
        """Keep the first answer to ``user``'s ``key``, and purge the keys given before
        ``expired`` (Unix s): each write pays for the purge, so no task is needed for it."""
        await self._run(self._keep_answer, user, key, answer, expired)

    def close(self) -> None:
        if self._db is not None:
            self._pool.submit(self._db.close).result()
            self._db = None
        self._pool.shutdown(wait=True)
