"""The queue in a folder on one machine: a SQLite database shared by every server there.

SQLite locking is unsafe on NFS, so the folder is on the machine's local disk; the servers of
one machine (one per user under JupyterHub) share it through a common group. Every decision is
one ``BEGIN IMMEDIATE`` transaction (a write lock held from the first read). Leases compare
this machine's clock, the same for every server on it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
import time

from .queue import CapacityQueue, QueueError

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
    """
    CREATE TABLE claims (session_id TEXT PRIMARY KEY, server_id TEXT NOT NULL,
                         since REAL NOT NULL);
    """,
    # which process a server is, so that one of this machine found gone is dropped at once
    """
    ALTER TABLE servers ADD COLUMN host TEXT;
    ALTER TABLE servers ADD COLUMN pid_space TEXT;
    ALTER TABLE servers ADD COLUMN started REAL;
    """,
]


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


class FolderQueue(CapacityQueue):
    """The queue in a folder on this machine's local disk (SQLite locking is unsafe on NFS)."""

    kind = "folder"

    def __init__(self, folder: str, server_id: str, user: str, label: str, **kwargs):
        super().__init__(server_id, user, label, **kwargs)
        self.folder = folder
        self.path = os.path.join(folder, DB_NAME)

    @property
    def where(self) -> str:
        return self.folder

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
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            self.now = time.time()
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
