"""The queue in a folder on one machine: a SQLite database shared by every server there.

SQLite locking is unsafe on NFS, so the folder is on the machine's local disk; the servers of
one machine (one per user under JupyterHub) share it through a common group. Every decision is
one ``BEGIN IMMEDIATE`` transaction (a write lock held from the first read). Leases compare
this machine's clock, the same for every server on it.

A queue that a newer version migrated is refused as a folder this server cannot use is
(``check_queue_folder``): at start, the server stops, naming it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
import time

from ..state.migrations import NewerSchema, check_sqlite, migrate_sqlite
from .queue import CapacityQueue, QueueError, queue_migrations

DB_NAME = "capacity-queue.sqlite"

MIGRATIONS = queue_migrations(
    schema="", serial="INTEGER PRIMARY KEY AUTOINCREMENT", float="REAL", bigint="INTEGER"
)


def check_queue_folder(folder: str) -> None:
    """Raise QueueError saying what is wrong when this server cannot share ``folder``."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise QueueError(f"{folder} is not a folder")
    if not os.path.isdir(folder):
        try:  # exist_ok: another server sharing it may make it at the same moment
            os.makedirs(folder, mode=0o700, exist_ok=True)
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
    try:  # a newer version's queue: refused before this server joins it
        check_sqlite(MIGRATIONS, os.path.join(folder, DB_NAME))
    except NewerSchema as e:
        raise QueueError(str(e)) from None


def _shared_mode(folder: str) -> int:
    """0660 in a folder the group may write (shared between users' servers), else 0600."""
    return 0o660 if stat.S_IMODE(os.stat(folder).st_mode) & 0o020 else 0o600


class FolderQueue(CapacityQueue):
    """The queue in a folder on this machine's local disk (SQLite locking is unsafe on NFS)."""

    kind = "folder"
    _db: sqlite3.Connection | None

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
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                migrate_sqlite(db, MIGRATIONS, self.path)
            except NewerSchema as e:  # migrated by a newer server since the check above
                db.close()
                raise QueueError(str(e)) from None
            except BaseException:
                db.close()  # the next call tries again, from the start
                raise
            self._db = db
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
