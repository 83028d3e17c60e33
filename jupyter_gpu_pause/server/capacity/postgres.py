"""The queue in PostgreSQL: one line and one usage count for every server of a cluster.

``capacity_queue_url = "postgresql://…"`` (JupyterHub deployments already run one). Same tables
and rules as the folder queue (``queue.py``), in the schema ``gpu_pause`` so that they never meet
the Hub's own tables in a shared database. Every decision is one transaction that first takes a
cluster-wide advisory lock (``pg_advisory_xact_lock``): two servers never grant the same room,
and a server that dies between two statements leaves nothing behind, since PostgreSQL rolls the
transaction back with the connection. Leases compare the database's clock, never the nodes'.

The database being unreachable is an expected state, not a crash: every call raises
``QueueUnavailable`` (the connection is dropped and made again by the next call), and the
service above says so to the user and tries again.

psycopg is the ``postgres`` extra (``pip install 'jupyter_gpu_pause[postgres]'``): only a server
with a PostgreSQL queue needs it, so it is imported when a URL is first read. Without it that
first read, the configuration check at start, stops the server naming the setting and the extra.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..state.migrations import NewerSchema, VersionTable, migrate
from .queue import CapacityQueue, QueueError, QueueUnavailable, queue_migrations

if TYPE_CHECKING:  # the postgres extra: imported at run time by _psycopg()
    import psycopg

SCHEMA = "gpu_pause"
LOCK_KEY = 0x6770_7061_7573_65  # "gppause": every transaction of the queue holds it

SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+psycopg2://")

# What a connection does when the database or the network stalls: give up instead of holding
# the queue's thread forever (a frozen server, a dropped route).
CONNECT_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
    "application_name": "jupyter_gpu_pause",
}

# The queue's tables (``queue.py``) in the schema gpu_pause; its version in gpu_pause.schema_version
MIGRATIONS = queue_migrations(
    schema=f"{SCHEMA}.", serial="BIGSERIAL PRIMARY KEY", float="DOUBLE PRECISION", bigint="BIGINT"
)
VERSION = VersionTable(SCHEMA)

EXTRA = "pip install 'jupyter_gpu_pause[postgres]'"


def _psycopg() -> ModuleType:
    """psycopg, imported on first use (QueueError saying which extra brings it)."""
    try:
        importlib.import_module("psycopg.conninfo")  # psycopg too, with conninfo in it
    except ImportError as e:  # not installed, or its libpq cannot be loaded
        raise QueueError(
            f"a PostgreSQL URL needs the postgres extra, which is not installed here ({e}): {EXTRA}"
        ) from None
    return sys.modules["psycopg"]


def is_postgres_url(url: str) -> bool:
    return url.startswith(SCHEMES)


def parse_postgres_url(url: str) -> dict:
    """The connection parameters of ``url`` (QueueError naming what is wrong), with the
    timeouts above unless the URL sets its own."""
    pg = _psycopg()
    scheme, rest = url.split("://", 1)
    try:
        params = pg.conninfo.conninfo_to_dict("postgresql://" + rest)
    except pg.ProgrammingError as e:  # libpq may quote the URL, password and all
        why = re.sub(r'"?postgres[^"\s]*"?', "the URL", str(e).strip())
        raise QueueError(f"not a valid PostgreSQL URL: {why}") from None
    ports = str(params.get("port") or "5432").split(",")
    if not all(p.strip().isdigit() for p in ports):
        raise QueueError(f"not a valid PostgreSQL URL: the port {params['port']!r} is not a number")
    for key, value in CONNECT_DEFAULTS.items():
        params.setdefault(key, value)
    return params


def describe_url(params: dict) -> str:
    """``postgresql://user@host:port/db``: where the queue is, without its password."""
    user = f"{params['user']}@" if params.get("user") else ""
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname') or ''}"


class PostgresQueue(CapacityQueue):
    """The queue in a PostgreSQL database shared by the servers of a cluster."""

    kind = "postgresql"
    _db: psycopg.Connection[Any] | None

    def __init__(self, url: str, server_id: str, user: str, label: str, **kwargs):
        super().__init__(server_id, user, label, **kwargs)
        self.params = parse_postgres_url(url)

    @property
    def where(self) -> str:
        return describe_url(self.params)

    def _q(self, db, sql: str, params=()):
        return db.execute(sql.replace("?", "%s"), params)

    def _connect(self) -> psycopg.Connection:
        if self._db is None:
            self._db = _psycopg().connect(**self.params, autocommit=True)
            try:
                migrate(MIGRATIONS, self.where, VERSION, self._locked)
            except NewerSchema as e:  # not an outage: no retry will help
                self._disconnect()
                raise QueueError(str(e)) from None
            except BaseException:
                self._disconnect()
                raise
        return self._db

    def _locked(self, fn, *args):
        """``fn(db, *args)`` in one transaction holding the queue's lock, its clock in
        ``self.now``."""
        db = self._db
        assert db is not None, "called by _connect and _tx, on an open connection"
        with db.transaction():
            row = db.execute(
                "SELECT pg_advisory_xact_lock(%s), extract(epoch FROM clock_timestamp())",
                (LOCK_KEY,),
            ).fetchone()
            assert row is not None, "a SELECT without FROM returns one row"
            db.execute(f"SET LOCAL search_path TO {SCHEMA}")
            self.now = float(row[1])
            return fn(db, *args)

    def _tx(self, fn, *args):
        pg = _psycopg()
        try:
            self._connect()
            return self._locked(fn, *args)
        except pg.Error as e:
            # Unreachable, or refused (a role without rights, a full disk): either way an
            # admin fixes it while the server runs, and the next call tries again.
            self._disconnect()
            what = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            how = "be reached" if isinstance(e, pg.OperationalError) else "be used"
            message = f"the capacity queue at {self.where} cannot {how} ({what})"
            raise QueueUnavailable(message) from None
