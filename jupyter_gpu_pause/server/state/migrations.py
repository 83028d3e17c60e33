"""Numbered migrations, one runner for every database the server keeps: the records (SQLite,
``records.py``), the capacity queue in a folder (SQLite) and in PostgreSQL (``capacity/``).

Migration i brings a database from schema version i to i + 1. Each runs in its own
transaction, which reads the version again under the database's write lock, runs the
migration's statements and records i + 1: two servers opening one new database at the same
moment create its tables once, and a migration that fails leaves the database at the last one
that succeeded, with the reason in the error. Migrations only add (tables, columns, indexes),
so an older database is brought up to date when a server opens it.

A database that a newer jupyter_gpu_pause migrated is refused, and nothing in it is changed:
this version cannot know what the newer one's tables mean, nor whether its own writes would
break them. (JupyterHub refuses to start on a database whose revision is not its own:
``orm.check_db_revision`` and ``DatabaseSchemaMismatch``; we upgrade an older one ourselves,
since our steps only add.) The refusal names the database, its version and the highest this
version knows, and says to upgrade.

Where the version is kept never changes, so databases written before this runner existed open
as they are: ``PRAGMA user_version`` in SQLite, a one-row table ``<schema>.schema_version`` in
PostgreSQL.

Imports no other room: ``state`` and ``capacity`` both use it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ...version import __version__

T = TypeVar("T")
# ``transaction(fn)``: ``fn(db)`` in one transaction holding the database's write lock
Transaction = Callable[[Callable[[Any], T]], T]


class NewerSchema(Exception):
    """A newer jupyter_gpu_pause migrated this database: it is refused, unchanged."""

    def __init__(self, what: str, where: str, version: int, known: int):
        self.where, self.version, self.known = where, version, known
        super().__init__(
            f"the {what} at {where} has schema version {version}, but this jupyter_gpu_pause "
            f"({__version__}) knows versions up to {known}: a newer jupyter_gpu_pause migrated "
            "it. Upgrade jupyter_gpu_pause on this server to that version or later (every "
            "server sharing this database needs it); nothing in the database was changed"
        )


@dataclass(frozen=True)
class Migrations:
    """One database's migrations: ``steps[i]`` brings version i to i + 1 (SQL statements
    separated by ``;``, none holding a ``;`` of its own)."""

    what: str  # the database, as messages name it: "records database", "capacity queue"
    steps: tuple[str, ...]

    @property
    def latest(self) -> int:
        return len(self.steps)

    def refuse_newer(self, where: str, version: int) -> None:
        if version > self.latest:
            raise NewerSchema(self.what, where, version, self.latest)


class VersionKeeper(Protocol):
    """Where a database keeps its schema version (read and written inside a transaction)."""

    def read(self, db) -> int: ...

    def write(self, db, version: int) -> None: ...


class UserVersion:
    """SQLite: the version in the file's header, ``PRAGMA user_version`` (transactional)."""

    def read(self, db) -> int:
        return db.execute("PRAGMA user_version").fetchone()[0]

    def write(self, db, version: int) -> None:
        db.execute(f"PRAGMA user_version = {int(version)}")  # a pragma takes no parameters


@dataclass(frozen=True)
class VersionTable:
    """PostgreSQL: one row in ``<schema>.schema_version``, made with its schema the first time
    (a database with neither is version 0)."""

    schema: str

    def read(self, db) -> int:
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
        db.execute(f"CREATE TABLE IF NOT EXISTS {self.schema}.schema_version (version INTEGER)")
        row = db.execute(f"SELECT version FROM {self.schema}.schema_version").fetchone()
        return row[0] if row else 0

    def write(self, db, version: int) -> None:
        table = f"{self.schema}.schema_version"
        if not db.execute(f"UPDATE {table} SET version = {int(version)}").rowcount:
            db.execute(f"INSERT INTO {table} (version) VALUES ({int(version)})")


def migrate(
    migrations: Migrations,
    where: str,
    keeper: VersionKeeper,
    transaction: Transaction,
    to: int | None = None,
) -> None:
    """Bring the database at ``where`` to version ``to`` (the latest when None), one migration
    per transaction; NewerSchema, from the first transaction, if it is newer than the latest.

    ``to`` makes an older database, as a previous version left it (tests, an upgrade check).
    """
    target = migrations.latest if to is None else to

    def step(db) -> int:
        version = keeper.read(db)
        migrations.refuse_newer(where, version)
        if version >= target:
            return version
        for statement in statements(migrations.steps[version]):
            db.execute(statement)
        keeper.write(db, version + 1)
        return version + 1

    while transaction(step) < target:
        pass


def statements(script: str) -> list[str]:
    """A migration's statements, one by one (a driver's script runner may commit between
    them, dropping the lock)."""
    return [s for s in (part.strip() for part in script.split(";")) if s]


# -- SQLite ------------------------------------------------------------------------------------
USER_VERSION = UserVersion()


def sqlite_transaction(db: sqlite3.Connection) -> Transaction:
    """``fn(db)`` in one ``BEGIN IMMEDIATE`` transaction: the write lock is held from the
    first read, so the version read is the one the migration follows."""

    def run(fn):
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
            db.execute("COMMIT")
            return out
        except BaseException:
            if db.in_transaction:  # SQLite rolls some failures back by itself
                db.execute("ROLLBACK")
            raise

    return run


def migrate_sqlite(
    db: sqlite3.Connection, migrations: Migrations, path: str, to: int | None = None
) -> None:
    """``migrate`` for a SQLite connection (outside any transaction) to the file ``path``."""
    migrate(migrations, path, USER_VERSION, sqlite_transaction(db), to)


def check_sqlite(migrations: Migrations, path: str) -> None:
    """NewerSchema if the SQLite file at ``path`` holds a schema newer than ``migrations``
    know: so a server refuses it before it serves, not at its first use.

    Reads the version without creating the file or changing anything in it. A file that is
    missing, or cannot be read now, passes: opening it for use says what is wrong.
    """
    if not Path(path).is_file():
        return
    try:
        db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=rw", uri=True, timeout=30)
    except sqlite3.Error:
        return
    try:
        version = USER_VERSION.read(db)
    except sqlite3.Error:
        return
    finally:
        db.close()
    migrations.refuse_newer(path, version)
