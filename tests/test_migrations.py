"""Every database the server keeps goes through one migration runner (``state/migrations.py``):
the records (SQLite), the capacity queue in a folder (SQLite) and the capacity queue in
PostgreSQL. For each, on real databases: a new one gets the latest version; one an older
version left is brought up to it, its rows kept; one a newer version migrated is refused with a
message naming it, its version and the highest this version knows, and nothing in it changes.
Then what that refusal does to a starting server, with a real ``jupyter server`` process."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from jupyter_gpu_pause.server.capacity import FolderQueue, PostgresQueue, QueueError
from jupyter_gpu_pause.server.capacity import folder as folder_queue
from jupyter_gpu_pause.server.capacity import postgres as postgres_queue
from jupyter_gpu_pause.server.state import records
from jupyter_gpu_pause.server.state.migrations import (
    USER_VERSION,
    Migrations,
    NewerSchema,
    VersionTable,
    migrate,
    migrate_sqlite,
)
from jupyter_gpu_pause.server.state.records import Records
from tests.servers import Server


# -- the three databases, seen the same way ------------------------------------------------------
class SqliteFile:
    """A SQLite database file: its version, rows and schema read with sqlite3 itself."""

    path: str
    migrations: Migrations

    def _db(self) -> closing[sqlite3.Connection]:
        return closing(sqlite3.connect(self.path))

    def build(self, version: int | None = None) -> None:
        """The database as a version of jupyter_gpu_pause that knew ``version`` migrations
        left it (the latest when None)."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            migrate_sqlite(db, self.migrations, self.path, to=version)
            db.execute("PRAGMA journal_mode=WAL")  # as the server leaves it

    def version(self) -> int:
        with self._db() as db:
            return USER_VERSION.read(db)

    def set_version(self, version: int) -> None:
        with self._db() as db:
            db.execute(f"PRAGMA user_version = {version}")

    def query(self, sql: str) -> list[tuple]:
        with self._db() as db:
            return db.execute(sql).fetchall()

    def execute(self, sql: str) -> None:
        with self._db() as db, db:
            db.execute(sql)

    def tables(self) -> dict[str, list[str]]:
        names = [r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            t: [c[1] for c in self.query(f"PRAGMA table_info({t})")]
            for t in sorted(names)
            if t != "sqlite_sequence"
        }

    def dump(self) -> tuple:
        with self._db() as db:
            return USER_VERSION.read(db), list(db.iterdump())


class RecordsDb(SqliteFile):
    what, migrations, refused = "records database", records.MIGRATIONS, NewerSchema

    def __init__(self, tmp_path: Path, name: str):
        self.path = self.where = str(tmp_path / name / "records.sqlite")

    def add_rows(self) -> None:  # what version 1 already held: an event
        self.execute(
            "INSERT INTO events (time, session_id, type, reason, detail) "
            "VALUES ('2026-12-01T10:00:00Z', 's1', 'paused', 'user', '{}')"
        )

    def rows(self) -> list[tuple]:
        return self.query("SELECT seq, time, session_id, type, reason, detail FROM events")

    async def open(self) -> None:
        r = Records(self.path)
        try:
            await r.events()
        finally:
            r.close()


class QueueRows:
    """Rows every version of the queue has had: a server that is not the one opening it (a
    long lease: nobody expires it) and its place in line."""

    def add_rows(self) -> None:
        self.execute(
            'INSERT INTO servers (id, "user", label, pid, lease_until) '
            "VALUES ('old', 'ann', 'ann@node:8888', 4242, 9e12)"
        )
        self.execute(
            'INSERT INTO entries (rank, session_id, server_id, name, "user", since, needs_bytes) '
            "VALUES (1, 's1', 'old', 'nb.ipynb', 'ann', 1.5, 1000000000)"
        )

    def rows(self) -> list[tuple]:
        return self.query('SELECT id, "user", label, pid, lease_until FROM servers') + self.query(
            "SELECT id, rank, session_id, server_id, name, since, needs_bytes FROM entries"
        )

    async def open(self) -> None:
        q = self.queue()
        try:
            await q.open()
        finally:
            await q.close()


class FolderDb(QueueRows, SqliteFile):
    what, migrations, refused = "capacity queue", folder_queue.MIGRATIONS, QueueError

    def __init__(self, tmp_path: Path, name: str):
        self.folder = str(tmp_path / name / "queue")
        self.path = self.where = str(Path(self.folder) / folder_queue.DB_NAME)

    def queue(self) -> FolderQueue:
        return FolderQueue(self.folder, server_id="me", user="me", label="me")


PASSWORD = "s3cret-pw"


class PostgresDb(QueueRows):
    """A database of the real PostgreSQL server the tests start (tests/postgres.py)."""

    what, migrations, refused = "capacity queue", postgres_queue.MIGRATIONS, QueueError

    def __init__(self, url: str):
        self.url = url
        self.where = postgres_queue.describe_url(postgres_queue.parse_postgres_url(url))

    def _db(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)

    def build(self, version: int | None = None) -> None:
        with self._db() as db:
            migrate(self.migrations, self.where, postgres_queue.VERSION, transaction(db), version)

    def version(self) -> int:
        return self.query("SELECT version FROM gpu_pause.schema_version")[0][0]

    def set_version(self, version: int) -> None:
        self.execute(f"UPDATE gpu_pause.schema_version SET version = {version}")

    def query(self, sql: str) -> list[tuple]:
        with self._db() as db:
            db.execute("SET search_path TO gpu_pause")
            return db.execute(sql).fetchall()

    def execute(self, sql: str) -> None:
        with self._db() as db:
            db.execute("SET search_path TO gpu_pause")
            db.execute(sql)

    def tables(self) -> dict[str, list[str]]:
        rows = self.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'gpu_pause' ORDER BY table_name, ordinal_position"
        )
        out: dict[str, list[str]] = {}
        for table, column in rows:
            out.setdefault(table, []).append(column)
        return out

    def dump(self) -> tuple:
        out = [self.tables()]
        for table in out[0]:
            out.append(sorted(self.query(f"SELECT * FROM gpu_pause.{table}"), key=repr))
        return tuple(out)

    def queue(self) -> PostgresQueue:
        """Reached with a password, which no message may show (the test server trusts any)."""
        url = self.url.replace("postgres@", f"postgres:{PASSWORD}@", 1)
        return PostgresQueue(url, server_id="me", user="me", label="me")


def transaction(db: psycopg.Connection):
    """The runner's ``transaction`` for a plain psycopg connection."""

    def run(fn):
        with db.transaction():
            return fn(db)

    return run


@pytest.fixture(params=["records", "folder", "postgresql"])
def kind(request):
    return request.param


@pytest.fixture
def make(kind, tmp_path, request):
    """``make(name)``: a new, empty database of this test's kind."""

    def new(name: str):
        if kind == "records":
            return RecordsDb(tmp_path, name)
        if kind == "folder":
            return FolderDb(tmp_path, name)
        return PostgresDb(request.getfixturevalue("postgres").new_database())

    return new


# -- each database -------------------------------------------------------------------------------
async def test_a_new_database_gets_the_latest_version(make):
    # Given a database nobody has opened
    db = make("new")
    # When this version opens it
    await db.open()
    # Then its schema is the latest this version knows, every table there
    assert db.version() == db.migrations.latest >= 3
    tables = db.tables()
    if isinstance(db, RecordsDb):
        assert set(tables) == {
            "sessions",
            "events",
            "accounting",
            "webhook_outbox",
            "idempotency",
        }
        assert tables["idempotency"] == ["user", "key", "request", "status", "body", "created"]
    else:
        assert set(tables) - {"schema_version"} == {
            "servers",
            "entries",
            "holders",
            "claims",
            "usage",
            "budget_adjustments",
            "budget_notices",
            "budget_users",
            "board",
            "usage_hours",
            "admin_actions",
        }
        assert tables["servers"][-3:] == ["host", "pid_space", "started"]
        assert tables["board"] == [
            "session_id", "origin", "server_id", "user", "server", "host", "state", "doc",
            "updated",
        ]  # fmt: skip
        assert tables["usage_hours"] == [
            "user", "hour", "held", "idle", "reclaimed", "unpausable",
        ]  # fmt: skip


async def test_an_older_database_is_brought_to_the_latest_version_with_its_rows(make):
    # Given a database as a version that knew only the first migration left it, with rows
    old = make("old")
    old.build(1)
    old.add_rows()
    rows = old.rows()
    assert rows and old.version() == 1
    # When this version opens it
    await old.open()
    # Then it is at the latest version, with the tables of a new one, and its rows are kept
    assert old.version() == old.migrations.latest
    new = make("new")
    await new.open()
    assert old.tables() == new.tables()
    assert old.rows() == rows


async def test_a_database_a_newer_version_migrated_is_refused_and_left_unchanged(make):
    # Given a database at the latest version, with rows, then migrated by a newer version
    db = make("newer")
    db.build()
    db.add_rows()
    newer, latest = db.migrations.latest + 1, db.migrations.latest
    db.set_version(newer)
    before = db.dump()
    # When this version opens it
    with pytest.raises(db.refused) as refused:
        await db.open()
    # Then it is refused, naming the database, its version and the highest this one knows,
    # and telling the operator to upgrade
    message = str(refused.value)
    assert message.startswith(f"the {db.what} at {db.where} has schema version {newer}, ")
    assert f"knows versions up to {latest}: a newer jupyter_gpu_pause migrated it" in message
    assert "Upgrade jupyter_gpu_pause" in message
    assert PASSWORD not in message  # a PostgreSQL queue: postgresql://user@host:port/db
    # and nothing in it changed: version, tables and rows
    assert db.dump() == before


# -- the runner ----------------------------------------------------------------------------------
STEPS = Migrations(
    "test database",
    (
        "CREATE TABLE a (x INTEGER)",
        "CREATE TABLE b (y INTEGER); INSERT INTO a VALUES (1); CREATE TABLE broken (",
        "CREATE TABLE c (z INTEGER)",
    ),
)


class SqliteSteps:
    error = sqlite3.Error

    def __init__(self, path: str):
        self.path, self.conn = path, sqlite3.connect(path)

    def run(self, to: int | None = None) -> None:
        migrate_sqlite(self.conn, STEPS, self.path, to)

    def version(self) -> int:
        return USER_VERSION.read(self.conn)

    def tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master")}


class PostgresSteps:
    error = psycopg.Error
    keeper = VersionTable("gp_test")

    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True)

    def run(self, to: int | None = None) -> None:
        migrate(STEPS, "the test database", self.keeper, transaction(self.conn), to)

    def version(self) -> int:
        return self.keeper.read(self.conn)

    def tables(self) -> set[str]:
        rows = self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        return {r[0] for r in rows}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_each_migration_is_its_own_transaction(kind, tmp_path, request):
    # Given a new database, and migrations whose second one fails half-way
    if kind == "sqlite":
        db = SqliteSteps(str(tmp_path / "test.sqlite"))
    else:
        db = PostgresSteps(request.getfixturevalue("pg_url"))
    with closing(db.conn):
        # When it is brought to the latest version
        with pytest.raises(db.error):
            db.run()
        # Then the first migration stays applied and recorded, nothing of the second is left
        # (neither its table nor its row), and the third never ran
        assert db.version() == 1
        assert db.tables() == {"a"}
        assert db.conn.execute("SELECT COUNT(*) FROM a").fetchone()[0] == 0
        # and ``to`` stops where it is asked: at version 1 there is nothing more to run
        db.run(to=1)
        assert db.version() == 1


# -- what a refusal does to a server -------------------------------------------------------------
def test_newer_records_stop_the_server_at_start_naming_them(tmp_path):
    # Given records (the server's db_path) that a newer version migrated
    db = RecordsDb(tmp_path, "")
    assert db.path == str(tmp_path / "records.sqlite")  # where Server puts them
    db.build()
    db.set_version(db.migrations.latest + 1)
    before = db.dump()
    # When a server starts on them
    server = Server(tmp_path)
    server.launch()
    # Then it exits before serving anything, saying which database, which versions, what to do
    assert server.exit_status() != 0
    log = server.log_tail()
    assert "jupyter_gpu_pause: bad configuration: the records database at" in log, log
    assert f"the records database at {db.path} has schema version {db.migrations.latest + 1}" in log
    assert "Upgrade jupyter_gpu_pause" in log
    assert db.dump() == before


def test_a_newer_folder_queue_stops_the_server_as_an_unusable_folder_does(tmp_path):
    # Given a queue folder whose database a newer version migrated
    db = FolderDb(tmp_path, "shared")
    db.build()
    db.set_version(db.migrations.latest + 1)
    before = db.dump()
    # When a server starts on it
    server = Server(tmp_path, args=(f"--GpuPauseApp.capacity_queue_url={db.folder}",))
    server.launch()
    # Then it stops as for a folder it cannot use: a bad setting, named, with the reason
    assert server.exit_status() != 0
    log = server.log_tail()
    assert (
        f"jupyter_gpu_pause: bad configuration: GpuPauseApp.capacity_queue_url = {db.folder!r}: "
        f"the capacity queue at {db.path} has schema version {db.migrations.latest + 1}"
    ) in log, log
    assert db.dump() == before


def test_a_newer_postgresql_queue_leaves_notebooks_served_and_the_api_saying_why(tmp_path, pg_url):
    # Given a queue in PostgreSQL that a newer version migrated
    db = PostgresDb(pg_url)
    db.build()
    db.set_version(db.migrations.latest + 1)
    before = db.dump()
    # When a server starts on it
    server = Server(tmp_path, args=(f"--GpuPauseApp.capacity_queue_url={pg_url}",))
    server.start()
    try:
        # Then Jupyter serves (as before this runner), and our API answers 503 naming the
        # queue and its version: nothing is paused or resumed on a queue it cannot read
        assert server.api("GET", "api/contents")[0] == 200
        code, body = server.api("GET", "gpu-pause/api/sessions")
        assert code == 503, body
        latest = db.migrations.latest
        assert (
            f"the capacity queue at {db.where} has schema version {latest + 1}, "
            in (body["message"])
        )
        assert f"knows versions up to {latest}" in body["message"]
    finally:
        server.stop()
    assert db.dump() == before
