"""The node's resume queue: one FIFO line and one usage count for every server on a machine.

Several Jupyter servers (one per user under JupyterHub) point ``capacity_queue_url`` at one
folder and share a SQLite database in it (WAL mode; every decision in one ``BEGIN IMMEDIATE``
transaction, so two servers never grant the same capacity). It holds three tables:

- ``servers``: each running server and the end of its lease, renewed while it lives;
- ``entries``: resumes waiting, in line order (``rank``);
- ``holders``: GPU sessions running on the node (granted resumes and kernels started by hand).

A server that dies (SIGKILL, a lost node) stops renewing; once its lease ends, any server's next
transaction deletes its entries and holders, so nobody waits behind a dead process for longer
than the lease. The head of the line is granted by its own server when the provider says it
fits; everyone behind it waits (strict FIFO: a small resume never overtakes a large one).

The folder is the one place shared between users: it holds session ids, notebook *file names*
(not their folders), user names and sizes, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from traitlets import Float, TraitError, validate
from traitlets.config import LoggingConfigurable

from .base import Grant, Holder, Need, Verdict

DB_NAME = "capacity-queue.sqlite"

MIGRATIONS = [
    """
    CREATE TABLE servers (id TEXT PRIMARY KEY, user TEXT, label TEXT, pid INTEGER,
                          lease_until REAL NOT NULL);
    CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, rank REAL NOT NULL,
                          session_id TEXT NOT NULL, server_id TEXT NOT NULL, name TEXT,
                          user TEXT, since REAL NOT NULL, needs_bytes INTEGER NOT NULL,
                          reason TEXT, message TEXT);
    CREATE INDEX entries_rank ON entries(rank);
    CREATE TABLE holders (server_id TEXT NOT NULL, session_id TEXT NOT NULL,
                          bytes INTEGER NOT NULL, devices TEXT NOT NULL,
                          reserved INTEGER NOT NULL, since REAL NOT NULL,
                          PRIMARY KEY (server_id, session_id));
    """,
]


class QueueError(Exception):
    """The queue folder cannot be used (permissions, not a folder, a broken database)."""


@dataclass(frozen=True)
class Turn:
    """One look at the line: granted, or the position and why not yet."""

    grant: Grant | None
    position: int = 0
    verdict: Verdict | None = None


def check_queue_folder(folder: str) -> None:
    """Raise QueueError saying what is wrong when this server cannot share ``folder``."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise QueueError(f"{folder} is not a folder")
    if not os.path.isdir(folder):
        try:
            os.makedirs(folder, mode=0o700)
        except OSError as e:
            raise QueueError(f"cannot create {folder}: {e.strerror}") from None
    try:  # the real test (os.access says yes to root on a read-only filesystem)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise QueueError(
            f"this server cannot write to {folder} ({e.strerror}); every server sharing the "
            "queue needs write access to the folder (a common group: chgrp <group> the folder "
            "and chmod 2770 it)"
        ) from None
    for name in (DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm"):
        path = os.path.join(folder, name)
        if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            raise QueueError(
                f"this server's user cannot read and write {path}; it needs the group of the "
                "other servers and mode 0660 (chmod 0660, chgrp the common group)"
            )


def _shared_mode(folder: str) -> int:
    """0660 in a folder the group may write (shared between users' servers), else 0600."""
    return 0o660 if stat.S_IMODE(os.stat(folder).st_mode) & 0o020 else 0o600


class FolderQueue(LoggingConfigurable):
    """The queue in a folder on this machine's local disk (SQLite locking is unsafe on NFS)."""

    lease_seconds = Float(
        30.0,
        help="How long a server's queue entries and GPU holdings outlive it if it dies "
        "without leaving the queue (SIGKILL, power loss); renewed every third of it while "
        "the server runs. Default: 30. Must be >= 1.",
    ).tag(config=True)

    poll_interval = Float(
        0.25,
        help="Seconds between two looks at the queue by a server with a resume waiting "
        "(a release on the same server wakes its waiters at once). Default: 0.25.",
    ).tag(config=True)

    @validate("lease_seconds")
    def _lease(self, proposal):
        if not proposal["value"] >= 1:
            raise TraitError(f"FolderQueue.lease_seconds = {proposal['value']!r}: must be >= 1")
        return proposal["value"]

    @validate("poll_interval")
    def _poll(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(f"FolderQueue.poll_interval = {proposal['value']!r}: must be > 0")
        return proposal["value"]

    def __init__(self, folder: str, server_id: str, user: str, label: str, **kwargs):
        super().__init__(**kwargs)
        self.folder, self.server_id, self.user, self.label = folder, server_id, user, label
        self.path = os.path.join(folder, DB_NAME)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu-pause-queue")
        self._db: sqlite3.Connection | None = None

    # -- the worker thread's side ----------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            check_queue_folder(self.folder)
            mode = _shared_mode(self.folder)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, mode)
            try:
                if os.fstat(fd).st_uid == os.geteuid():  # ours: set the mode past the umask
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._db = db
            self._tx(self._migrate)
        return self._db

    def _tx(self, fn, *args):
        """Run ``fn(db, *args)`` in one write transaction (a lock held from the first read)."""
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db, *args)
            db.execute("COMMIT")
            return out
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _migrate(self, db) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
            for statement in filter(None, (part.strip() for part in script.split(";"))):
                db.execute(statement)
            db.execute(f"PRAGMA user_version={i}")

    def _renew(self, db) -> bool:
        """Extend this server's lease; False when it had lapsed (its rows are gone)."""
        until = time.time() + self.lease_seconds
        cur = db.execute("UPDATE servers SET lease_until = ? WHERE id = ?", (until, self.server_id))
        if cur.rowcount:
            return True
        db.execute(
            "INSERT INTO servers (id, user, label, pid, lease_until) VALUES (?, ?, ?, ?, ?)",
            (self.server_id, self.user, self.label, os.getpid(), until),
        )
        return False

    @staticmethod
    def _expire(db) -> None:
        db.execute("DELETE FROM servers WHERE lease_until < ?", (time.time(),))
        for table in ("entries", "holders"):
            db.execute(f"DELETE FROM {table} WHERE server_id NOT IN (SELECT id FROM servers)")

    @staticmethod
    def _holders(db) -> list[Holder]:
        rows = db.execute(
            "SELECT session_id, server_id, bytes, devices, reserved FROM holders"
        ).fetchall()
        return [Holder(r[0], r[1], r[2], tuple(json.loads(r[3])), bool(r[4])) for r in rows]

    def _hold(self, db, session_id: str, grant: Grant) -> None:
        db.execute(
            "INSERT OR REPLACE INTO holders (server_id, session_id, bytes, devices, reserved, "
            "since) VALUES (?, ?, ?, ?, 1, ?)",
            (self.server_id, session_id, grant.bytes, json.dumps(grant.devices), time.time()),
        )

    def _join(self, db, need: Need, name: str, since: float, rank: float | None) -> tuple:
        self._renew(db)
        cur = db.execute(
            "INSERT INTO entries (rank, session_id, server_id, name, user, since, needs_bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rank or 0, need.session_id, self.server_id, name, self.user, since, need.total),
        )
        entry = cur.lastrowid
        if rank is None:
            rank = float(entry)
            db.execute("UPDATE entries SET rank = ? WHERE id = ?", (rank, entry))
        return entry, rank

    def _turn(self, db, entry: int, rank: float, need: Need, name: str, since: float, decide):
        self._renew(db)
        self._expire(db)
        if db.execute("SELECT 1 FROM entries WHERE id = ?", (entry,)).fetchone() is None:
            # our lease lapsed (a stalled event loop): back in line at the same place
            db.execute(
                "INSERT INTO entries (id, rank, session_id, server_id, name, user, since, "
                "needs_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (entry, rank, need.session_id, self.server_id, name, self.user, since, need.total),
            )
        ahead = db.execute(
            "SELECT COUNT(*) FROM entries WHERE rank < ? OR (rank = ? AND id < ?)",
            (rank, rank, entry),
        ).fetchone()[0]
        verdict: Verdict = decide(need, self._holders(db))
        if ahead == 0 and verdict.grant is not None:
            db.execute("DELETE FROM entries WHERE id = ?", (entry,))
            self._hold(db, need.session_id, verdict.grant)
            return Turn(verdict.grant)
        db.execute(
            "UPDATE entries SET reason = ?, message = ? WHERE id = ?",
            (verdict.reason or "queue", verdict.message, entry),
        )
        return Turn(None, ahead + 1, verdict)

    def _try_now(self, db, need: Need, decide) -> Grant | None:
        self._renew(db)
        self._expire(db)
        if db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]:
            return None  # others are in line first
        verdict = decide(need, self._holders(db))
        if verdict.grant is not None:
            self._hold(db, need.session_id, verdict.grant)
        return verdict.grant

    def _leave(self, db, entry: int | None, session_id: str) -> None:
        if entry is not None:
            db.execute("DELETE FROM entries WHERE id = ?", (entry,))
        db.execute(
            "DELETE FROM holders WHERE server_id = ? AND session_id = ?",
            (self.server_id, session_id),
        )

    def _set_holders(self, db, holders: list[Holder]) -> None:
        self._renew(db)
        keep = {h.session_id for h in holders}
        for (sid,) in db.execute(
            "SELECT session_id FROM holders WHERE server_id = ?", (self.server_id,)
        ).fetchall():
            if sid not in keep:
                db.execute(
                    "DELETE FROM holders WHERE server_id = ? AND session_id = ?",
                    (self.server_id, sid),
                )
        for h in holders:
            db.execute(
                "INSERT INTO holders (server_id, session_id, bytes, devices, reserved, since) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server_id, session_id) DO UPDATE SET "
                "bytes = excluded.bytes, devices = excluded.devices, reserved = excluded.reserved",
                (
                    self.server_id,
                    h.session_id,
                    h.bytes,
                    json.dumps(list(h.devices)),
                    int(h.reserved),
                    time.time(),
                ),
            )

    def _snapshot(self, db) -> dict:
        self._expire(db)
        servers = {
            r[0]: {"user": r[1], "label": r[2]}
            for r in db.execute("SELECT id, user, label FROM servers").fetchall()
        }
        entries = db.execute(
            "SELECT session_id, server_id, name, user, since, needs_bytes, reason, message "
            "FROM entries ORDER BY rank, id"
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

    def _close(self, db) -> None:
        db.execute("DELETE FROM entries WHERE server_id = ?", (self.server_id,))
        db.execute("DELETE FROM holders WHERE server_id = ?", (self.server_id,))
        db.execute("DELETE FROM servers WHERE id = ?", (self.server_id,))

    # -- the event loop's side ----------------------------------------------------------------
    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _in_tx(self, fn, *args):
        return await self._run(self._tx, fn, *args)

    async def open(self) -> None:
        await self._in_tx(self._renew)

    async def renew(self) -> bool:
        return await self._in_tx(self._renew)

    async def join(self, need: Need, name: str, since: float, rank: float | None = None):
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

    async def set_holders(self, holders: list[Holder]) -> None:
        await self._in_tx(self._set_holders, holders)

    async def snapshot(self) -> dict:
        return await self._in_tx(self._snapshot)

    def close_now(self) -> None:
        """Drop the worker thread of a queue that was never opened (a configuration check)."""
        self._pool.shutdown(wait=False)

    async def close(self) -> None:
        try:
            if self._db is not None:
                await self._in_tx(self._close)
                await self._run(self._db.close)
                self._db = None
        finally:
            self._pool.shutdown(wait=False)
