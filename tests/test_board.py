"""What each user's server publishes in the shared capacity queue for the admin console (the Hub
service): its GPU sessions on the ``board`` and its user's GPU-seconds per hour in
``usage_hours``, read here straight from the queue's database, as the console reads them.

Real servers throughout: two ``jupyter server`` processes of two users on one folder queue
(the quota provider standing in for GPUs: every python3 kernel is a GPU session); in-process
servers with a fake GPU probe where GPU-seconds must accrue; a real PostgreSQL stopped and
started again for an outage.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from jupyter_gpu_pause.server.capacity.folder import DB_NAME
from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.config.settings import server_user
from tests.fakes import FakeProbe
from tests.postgres import Postgres
from tests.servers import STATE, Server, nodes
from tests.waiting import wait_for

# A heartbeat every 10 s and an idle monitor pass every minute: a row that shows up within
# SOON was published by the lifecycle event itself
LEASE = 30.0
SOON = 5.0


COLUMNS = ("session_id", "origin", "server_id", "user", "server", "host", "state", "doc", "updated")


class FolderBoard:
    """The folder queue's database, read with sqlite3 as another user's process would."""

    def __init__(self, folder: Path):
        self.path = folder / DB_NAME

    def _query(self, sql: str, params=()) -> list[tuple]:
        if not self.path.exists():
            return []
        with closing(sqlite3.connect(self.path)) as db:
            return db.execute(sql, params).fetchall()

    def rows(self) -> dict[str, dict]:
        """session id → its board row, ``doc`` parsed."""
        found = self._query(
            'SELECT session_id, origin, server_id, "user", server, host, state, doc, updated '
            "FROM board"
        )
        return {r[0]: dict(zip(COLUMNS, r, strict=True), doc=json.loads(r[7])) for r in found}

    def lease_until(self, port: int) -> float:
        """The end of the lease of the server on ``port`` (its label ends with it)."""
        ((until,),) = self._query(
            "SELECT lease_until FROM servers WHERE label LIKE ?", (f"%:{port}",)
        )
        return until

    def running(self) -> set[str]:
        """The ids of the servers that run (their lease held, not left)."""
        return {r[0] for r in self._query("SELECT id FROM servers")}


def until(what: str, condition, timeout: float = 60.0):
    """The first truthy value of ``condition()``, polled; fails naming ``what`` if none."""
    end = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > end:
            pytest.fail(f"{what} not seen within {timeout:g} s")
        time.sleep(0.1)
    return value


def user_server(tmp_path: Path, user: str, queue: Path) -> Server:
    """A server of ``user`` (as JupyterHub names it) on the shared folder queue: its own
    store, records and key."""
    server = Server(
        tmp_path / user,
        f"""
c.GpuPauseApp.capacity_queue_url = {str(queue)!r}
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 4
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.CapacityQueue.lease_seconds = {LEASE}
c.GpuPauseApp.policies = []
c.GpuPauseApp.poll_interval = 60
""",
    )
    server.env["JUPYTERHUB_USER"] = user  # whose server it is, and its board origin
    return server


@pytest.fixture
def two_users(tmp_path):
    queue = tmp_path / "queue"
    alice, bob = user_server(tmp_path, "alice", queue), user_server(tmp_path, "bob", queue)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(Server.start, (alice, bob)))
    try:
        yield alice, bob, FolderBoard(queue)
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.proc and s.stop(), (alice, bob)))


def test_the_board_lists_every_users_gpu_sessions_and_keeps_a_stopped_servers(two_users):
    alice, bob, board = two_users
    # Given a GPU notebook on each user's server, bob's in a folder
    (bob.root / "work").mkdir()
    a = alice.open_notebook("a.ipynb")
    b = bob.open_notebook("work/b.ipynb")

    # Then both are on the board at once (not at the next heartbeat), running
    rows = until(
        "both sessions on the board",
        lambda: (r := board.rows()).keys() >= {a["id"], b["id"]} and r,
        timeout=SOON,
    )
    ra, rb = rows[a["id"]], rows[b["id"]]
    assert ra["state"] in ("active", "idle") and rb["state"] in ("active", "idle"), rows
    assert (ra["user"], ra["server"], ra["origin"]) == ("alice", "alice", "alice/")
    assert (rb["user"], rb["server"], rb["origin"]) == ("bob", "bob", "bob/")
    assert ra["host"] == socket.gethostname()
    assert {ra["server_id"], rb["server_id"]} <= board.running()
    assert ra["server_id"] != rb["server_id"]
    doc = ra["doc"]
    assert doc["name"] == "a.ipynb" and doc["kernel_name"] == "python3"
    assert doc["state"] == ra["state"] and doc["checkpoint"] is None
    assert (doc["hub_server_name"], doc["prefix"]) == ("", "/")
    assert set(doc) == {
        "name", "kernel_name", "state", "idle_seconds", "last_activity", "gpu", "checkpoint",
        "queue_position", "waiting", "error", "message", "pausable", "hub_server_name", "prefix",
    }  # fmt: skip
    # and the folder of bob's notebook is nowhere: the file name only
    assert rb["doc"]["name"] == "b.ipynb" and "work" not in json.dumps(rb["doc"])

    # When alice pauses hers
    alice.run(a["kernel_id"], "import torch; w = torch.arange(10.)")
    paused = alice.pause(a["id"])
    # Then its row says paused, with the checkpoint's id, time and size
    ra = until(
        "alice's row paused",
        lambda: (r := board.rows()[a["id"]])["state"] == "paused" and r,
        timeout=SOON,
    )
    checkpoint = paused["checkpoint"]
    assert ra["doc"]["checkpoint"] == {k: checkpoint[k] for k in ("id", "created", "bytes")}
    assert ra["doc"]["checkpoint"]["bytes"] > 0 and ra["doc"]["gpu"] is None

    # When alice's server stops
    gone = ra["server_id"]
    alice.stop()
    # Then her paused session stays on the board, its server no longer running
    assert gone not in board.running()
    ra = board.rows()[a["id"]]
    assert (ra["state"], ra["server_id"], ra["origin"]) == ("paused", gone, "alice/")
    assert board.rows()[b["id"]]["server_id"] in board.running()  # bob's goes on

    # When bob's kernel is shut down (no checkpoint: the session ends), and his server has
    # looked at its sessions since (as JupyterLab's poll of them makes it)
    code, _ = bob.api("DELETE", f"api/kernels/{b['kernel_id']}")
    assert code == 204
    assert b["id"] not in bob.sessions()
    # Then its row goes, soon
    until("bob's row gone", lambda: b["id"] not in board.rows(), timeout=SOON)

    # When alice's server starts again
    alice.start()
    # Then it takes her row back: same origin, its new process
    ra = until(
        "alice's row taken back",
        lambda: (r := board.rows()[a["id"]])["server_id"] != gone and r,
    )
    assert ra["server_id"] in board.running() and ra["origin"] == "alice/"
    assert ra["state"] == "paused"
    # When she deletes the session, its row goes
    code, _ = alice.api("DELETE", f"gpu-pause/api/sessions/{a['id']}")
    assert code == 204
    until("alice's row gone", lambda: a["id"] not in board.rows(), timeout=SOON)


def heartbeats(board: FolderBoard, server: Server, count: int = 2) -> None:
    """Wait until ``server`` has renewed its lease ``count`` times more (each renewal
    publishes its board in the same transaction)."""
    first = board.lease_until(server.port)
    until(
        f"{count} heartbeats of the server on port {server.port}",
        lambda: board.lease_until(server.port) >= first + count * LEASE_SHORT / 3 - 0.05,
    )


LEASE_SHORT = 6.0  # a heartbeat every 2 s (a longer lease: a loaded VM never lapses one)


def test_a_session_two_servers_see_is_listed_once_by_the_server_that_runs_it(tmp_path):
    # Given two servers of one user sharing a store (each sees the other's paused sessions)
    # and a folder queue
    config = f"""
c.GpuPauseApp.store_url = {str(tmp_path / "store")!r}
c.GpuPauseApp.secret_file = {str(tmp_path / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {str(tmp_path / "queue")!r}
c.GpuPauseApp.capacity_provider_class = "quota"
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.store_rescan_interval = 1
c.CapacityQueue.lease_seconds = {LEASE_SHORT}
c.GpuPauseApp.policies = []
"""
    board = FolderBoard(tmp_path / "queue")
    host = socket.gethostname()
    with nodes(tmp_path, config) as (n1, n2):
        # and a session paused on node 1, which node 2 lists too
        s = n1.open_notebook("shared.ipynb")
        n1.run(s["kernel_id"], STATE)
        n1.pause(s["id"])
        n2.wait_until(lambda: n2.sessions().get(s["id"]), "the session on node 2")
        # When node 2 has published its board since
        heartbeats(board, n2)
        # Then the row is node 1's still: outside JupyterHub, its machine and records name it
        row = board.rows()[s["id"]]
        assert row["state"] == "paused", row
        assert row["origin"] == f"{host}:{tmp_path / 'records1.sqlite'}", row
        assert row["server"].endswith(f"@{host}:{n1.port}"), row
        assert row["doc"]["hub_server_name"] is None

        # When node 2 resumes it
        n2.resume(s["id"])
        # Then the row is node 2's, running
        row = until(
            "the row taken by node 2",
            lambda: (r := board.rows()[s["id"]])["state"] in ("active", "idle") and r,
        )
        assert row["origin"] == f"{host}:{tmp_path / 'records2.sqlite'}", row
        # and stays so while node 1 lists it as running elsewhere
        heartbeats(board, n1)
        assert board.rows()[s["id"]]["origin"] == row["origin"]
        assert list(board.rows()) == [s["id"]]


# -- GPU-seconds per hour ------------------------------------------------------------------------
TICK = 0.2  # the idle monitor's pass, when the ledger adds GPU-seconds up and writes them
ROUNDING = 0.2  # seconds: the report gives GPU-hours to 0.0001 h (0.36 s), half either way


class Queue:
    """The queue a test's in-process server shares: a folder, or a PostgreSQL server of the
    test's own (which it may stop and start); ``held`` reads its ``usage_hours``."""

    def __init__(self, kind: str, tmp_path: Path):
        self.kind, self.pg = kind, None
        if kind == "folder":
            self.url = str(tmp_path / "queue")
        else:
            self.pg = Postgres()
            self.pg.start()
            self.url = self.pg.new_database()

    def hours(self, user: str) -> dict[str, tuple[float, ...]]:
        """hour → (held, idle, reclaimed, unpausable) GPU-seconds of ``user``."""
        sql = 'SELECT hour, held, idle, reclaimed, unpausable FROM usage_hours WHERE "user" = '
        if self.pg is None:
            path = Path(self.url) / DB_NAME
            if not path.exists():
                return {}
            with closing(sqlite3.connect(path)) as db:
                found = db.execute(sql + "?", (user,)).fetchall()
        else:
            with psycopg.connect(self.url, autocommit=True) as pg:
                sql = sql.replace("FROM ", "FROM gpu_pause.") + "%s"
                found = pg.execute(sql, (user,)).fetchall()
        return {r[0]: tuple(r[1:]) for r in found}

    def held(self, user: str) -> float:
        return sum(h[0] for h in self.hours(user).values())


@pytest.fixture
def queue(request, tmp_path):
    q = Queue(request.param, tmp_path)
    yield q
    if q.pg is not None:
        q.pg.remove()


@pytest.fixture
def gp_config(gp_config, queue):
    FakeProbe.readings = {}
    gp_config.update(
        policies=[],
        poll_interval=TICK,
        gpu_probe_class="tests.fakes.FakeProbe",
        capacity_queue_url=queue.url,
    )
    return gp_config


async def report_held(lab) -> float:
    """The GPU-seconds held that this server's own report counts (its records)."""
    code, body = await lab.api("GET", "report")
    assert code == 200, body
    return body["total"]["gpu_hours_held"] * 3600


async def held_two_gpus_for_a_while(lab, queue: Queue, user: str) -> dict:
    """A notebook whose kernel holds two GPUs (the fake probe), until the queue has some of
    its GPU-seconds."""
    s = await lab.open_notebook("train.ipynb")
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0", "GPU-1"], 2**31, 0.0)

    async def some():
        return queue.held(user) >= 2 * 1.0

    await wait_for(some, what="GPU-seconds in usage_hours")
    return s


async def the_same_seconds(lab, queue: Queue, user: str) -> float:
    """Once nothing holds GPUs any more: waits until the queue has counted the same
    GPU-seconds as the server's own records, none lost and none twice."""
    FakeProbe.readings = {}
    await lab.monitor_passes(passes=2)  # the last held interval counted, both ways

    async def same():
        held, shared = await report_held(lab), queue.held(user)
        return held > 0 and abs(held - shared) <= ROUNDING and (held, shared)

    return (await wait_for(same, what="usage_hours matching the records"))[1]


@pytest.mark.parametrize("queue", ["folder", "postgresql"], indirect=True)
async def test_the_users_gpu_seconds_reach_the_queue_per_hour(lab, queue):
    user = server_user()
    # Given a kernel that holds two GPUs for a while
    await held_two_gpus_for_a_while(lab, queue, user)
    # Then the queue holds the user's GPU-seconds by UTC hour, as the server's report counts
    # them: the same seconds, per device
    shared = await the_same_seconds(lab, queue, user)
    hours = queue.hours(user)
    assert all(len(h) == len("2026-12-02T10") and h[10] == "T" for h in hours), hours
    assert shared >= 2.0
    held, idle, reclaimed, unpausable = (sum(h[i] for h in hours.values()) for i in range(4))
    assert 0 <= idle <= held and reclaimed == 0 and unpausable == 0


@pytest.mark.parametrize("queue", ["postgresql"], indirect=True)
async def test_gpu_seconds_counted_while_postgres_is_down_reach_it_once_it_is_back(lab, queue):
    user = server_user()
    # Given a kernel holding two GPUs, its GPU-seconds reaching the queue
    await held_two_gpus_for_a_while(lab, queue, user)
    # When PostgreSQL goes down (a crash) while the kernel goes on holding them
    assert queue.pg is not None
    queue.pg.stop("immediate")
    down_at = await report_held(lab)
    await lab.monitor_passes(passes=5)
    assert await report_held(lab) > down_at + 1.0  # counted meanwhile, by the records
    # and comes back
    await asyncio.to_thread(queue.pg.start)
    # Then the queue has every GPU-second the records have, none lost, none twice
    await the_same_seconds(lab, queue, user)
