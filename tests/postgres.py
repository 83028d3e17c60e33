"""A real PostgreSQL server for the cluster queue's tests: ``initdb`` and ``pg_ctl`` from the
machine (PostgreSQL refuses to run as root: as root, they run as the ``postgres`` user).

``stop("immediate")`` is what a crash looks like to the clients (connections cut, no clean
shutdown); ``start()`` again recovers the same data, as a restarted database server does.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid

import psycopg
import pytest


def _bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """One PostgreSQL server in a fresh folder under /tmp, on 127.0.0.1:``port``."""

    def __init__(self):
        self.initdb, self.pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            if os.environ.get("CI"):
                pytest.fail("initdb/pg_ctl not found: apt-get install postgresql")
            pytest.skip("PostgreSQL (initdb/pg_ctl) is not installed here")
        # /tmp, not pytest's tmp_path: the postgres user must be able to reach the folder
        self.dir = tempfile.mkdtemp(prefix="gp-postgres-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "postgres.log")
        self.port = _free_port()
        self._as = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run(self.initdb, "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, *cmd: str) -> None:
        out = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode:
            log = open(self.log).read()[-3000:] if os.path.exists(self.log) else ""
            pytest.fail(f"{' '.join(cmd)} failed: {out.stdout}{out.stderr}\n{log}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(self.pg_ctl, "-D", self.data, "-l", self.log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """``mode="immediate"``: as a crash (clients' connections are cut)."""
        self._run(self.pg_ctl, "-D", self.data, "-m", mode, "-w", "stop")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """The URL of a new, empty database (one per test)."""
        name = "gp_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def remove(self) -> None:
        try:
            self.stop("immediate")
        except BaseException:  # already stopped
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
