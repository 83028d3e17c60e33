"""The capacity rules on their own: what quota and NVML providers decide for a need (through
a fake NVML probe, declared in tests/fakes.py), and the node's queue with two servers on one
real SQLite folder (and a real PostgreSQL): FIFO across servers, strict order, leases of dead
servers, servers of this machine whose process is gone, file modes."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time

import psutil
import pytest

from jupyter_gpu_pause.server.capacity import (
    FolderQueue,
    Grant,
    Holder,
    Need,
    NvmlCapacity,
    PostgresQueue,
    QuotaCapacity,
    Verdict,
)
from jupyter_gpu_pause.server.capacity.folder import DB_NAME
from jupyter_gpu_pause.server.capacity.liveness import ProcessId
from jupyter_gpu_pause.server.capacity.service import held_elsewhere
from tests.fakes import FakeProbe

GB = 10**9


def gpu(uuid, total_gb, used_gb):
    return {
        "uuid": uuid,
        "name": "GPU",
        "memory_total": int(total_gb * GB),
        "memory_used": int(used_gb * GB),
        "utilization": 0,
    }


def nvml(*gpus) -> NvmlCapacity:
    probe = FakeProbe()
    probe.gpus = list(gpus)
    provider = NvmlCapacity(headroom_bytes=0, headroom_fraction=0)
    provider.probe = probe
    return provider


def test_need_adds_headroom_per_device_largest_first():
    p = QuotaCapacity(headroom_bytes=100, headroom_fraction=0.5)
    need = p.need("s", [10, 1000])
    assert need.per_device == (1600, 115) and need.total == 1715
    assert need.text() == "needs 1.6 kB + 115 B on 2 GPUs"
    assert p.need("s", []).per_device == (100,)  # a GPU session without CUDA tensors


def test_quota_limits_sessions_and_bytes_with_reasons_in_words():
    q = QuotaCapacity(max_sessions=2, max_gpu_bytes=40 * GB)
    held = [Holder("a", "srv", 10 * GB), Holder("b", "srv", 10 * GB)]
    v = q.decide(Need("c", (GB,)), held)
    assert v.grant is None and v.reason == "quota-sessions"
    assert v.message == "the limit of 2 GPU sessions on this machine is in use"
    v = q.decide(Need("c", (35 * GB,)), held[:1])
    assert v.reason == "quota-bytes" and not v.never
    assert "30.0 GB of this machine's 40.0 GB GPU-memory limit is free" in v.message
    v = q.decide(Need("c", (41 * GB,)), [])
    assert v.never and "more than this machine's limit of 40.0 GB" in v.message
    assert q.decide(Need("c", (GB,)), held[:1]).grant is not None


def test_nvml_best_fit_is_the_smallest_gpu_that_fits_not_gpu_0():
    p = nvml(gpu("G0", 80, 0), gpu("G1", 80, 50), gpu("G2", 80, 75))
    v = p.decide(Need("s", (20 * GB,)), [])
    assert v.grant.devices == ["G1"] and v.grant.env == {"CUDA_VISIBLE_DEVICES": "G1"}


def test_nvml_puts_a_kernel_suspended_in_place_back_on_its_own_gpu():
    p = nvml(gpu("G0", 80, 0), gpu("G1", 80, 50), gpu("G2", 80, 75))
    # best fit would be G1; the kernel's CUDA contexts are G2's
    assert p.decide(Need("s", (4 * GB,), on=("G2",)), []).grant.devices == ["G2"]
    full = p.decide(Need("s", (20 * GB,), on=("G2",)), [])
    assert full.grant is None and not full.never and "the largest free is 5.0 GB" in full.message
    gone = p.decide(Need("s", (GB,), on=("G9",)), [])
    assert gone.never
    assert "the GPU G9 it was suspended on is no longer on this machine" in gone.message


def test_nvml_counts_reservations_of_grants_not_yet_allocated():
    p = nvml(gpu("G0", 80, 0), gpu("G1", 80, 50))
    # another resume was just granted 25 GB on G1 and has not allocated it yet
    reserved = [Holder("other", "srv2", 25 * GB, ("G1",), reserved=True)]
    assert p.decide(Need("s", (20 * GB,)), reserved).grant.devices == ["G0"]
    # once its restore is done the reservation ends (NVML's own figure counts it)
    done = [Holder("other", "srv2", 25 * GB, ("G1",), reserved=False)]
    assert p.decide(Need("s", (20 * GB,)), done).grant.devices == ["G1"]


def test_nvml_multi_device_needs_and_messages():
    p = nvml(gpu("G0", 80, 60), gpu("G1", 80, 10), gpu("G2", 40, 0))
    v = p.decide(Need("s", (50 * GB, 30 * GB)), [])
    assert v.grant.devices == ["G1", "G2"]
    v = p.decide(Need("s", (75 * GB,)), [])
    assert v.grant is None and v.reason == "gpu-memory" and not v.never
    assert v.message == "needs 75.0 GB on one GPU; the largest free is 70.0 GB"
    v = p.decide(Need("s", (90 * GB,)), [])
    assert v.never and "the largest with 80.0 GB" in v.message
    assert p.decide(Need("s", (GB,) * 4), []).never  # four GPUs asked, three here
    assert nvml().decide(Need("s", (GB,)), []).never


def granting(max_sessions: int):
    q = QuotaCapacity(max_sessions=max_sessions)
    return q.decide


def refusing(need, holders) -> Verdict:
    return Verdict(reason="quota-sessions", message="full")


@pytest.fixture
def folder(tmp_path):
    return str(tmp_path / "queue")


@pytest.fixture(params=["folder", "postgresql"])
def where(request, tmp_path):
    """The same rules on both queues: a SQLite folder, and a real PostgreSQL database."""
    if request.param == "folder":
        return str(tmp_path / "queue")
    return request.getfixturevalue("pg_url")


def server(where, name, lease=30.0) -> FolderQueue | PostgresQueue:
    cls = PostgresQueue if where.startswith("postgresql://") else FolderQueue
    return cls(where, server_id=name, user=name, label=name, lease_seconds=lease)


async def test_the_line_is_fifo_across_servers_and_strict(where):
    a, b = server(where, "a"), server(where, "b")
    await a.open()
    await b.open()
    try:
        since = time.time()
        big = Need("big", (50 * GB,))
        small = Need("small", (GB,))
        e1, r1 = await a.join(big, "big.ipynb", since)
        e2, r2 = await b.join(small, "small.ipynb", since)
        # the head does not fit; the small one behind it would, but waits its turn
        turn = await b.turn(e2, r2, small, "small.ipynb", since, granting(1))
        assert turn.grant is None and turn.position == 2
        turn = await a.turn(e1, r1, big, "big.ipynb", since, refusing)
        assert turn.grant is None and turn.position == 1 and turn.verdict.reason == "quota-sessions"
        snap = await b.snapshot()
        assert [(q["session_id"], q["server"], q["reason"]) for q in snap["queue"]] == [
            ("big", "a", "quota-sessions"),
            ("small", "b", "queue"),  # it would fit: only its place in line holds it
        ]
        turn = await a.turn(e1, r1, big, "big.ipynb", since, granting(1))
        assert isinstance(turn.grant, Grant)
        # the grant is a holder now: the quota of one is in use for the next in line
        turn = await b.turn(e2, r2, small, "small.ipynb", since, granting(1))
        assert turn.grant is None and turn.position == 1
        await a.set_holders([])  # the big one paused
        assert (await b.turn(e2, r2, small, "small.ipynb", since, granting(1))).grant
    finally:
        await a.close()
        await b.close()


async def test_a_dead_servers_place_and_grant_expire_with_its_lease(where):
    dead, alive = server(where, "dead", lease=1.0), server(where, "alive", lease=1.0)
    await dead.open()
    await alive.open()
    try:
        since = time.time()
        await dead.set_holders([Holder("held", "dead", GB)])
        await dead.join(Need("first", (GB,)), "first.ipynb", since)
        entry, rank = await alive.join(Need("second", (GB,)), "second.ipynb", since)
        need = Need("second", (GB,))
        turn = await alive.turn(entry, rank, need, "second.ipynb", since, granting(1))
        assert turn.position == 2
        # "dead" stops renewing (as a SIGKILLed server does); "alive" keeps looking
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while (turn := await alive.turn(entry, rank, need, "s", since, granting(1))).grant is None:
            assert loop.time() < end, f"still waiting behind a dead server: {turn}"
            await asyncio.sleep(0.1)
        snap = await alive.snapshot()
        assert "dead" not in snap["servers"]
        assert [h.session_id for h in snap["holders"]] == ["second"]
    finally:
        await alive.close()


async def test_queue_files_are_shared_with_the_group_only_in_a_group_folder(tmp_path):
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir(mode=0o770)
    shared.chmod(0o2770)
    private.mkdir(mode=0o700)
    for folder, mode in ((shared, 0o660), (private, 0o600)):
        q = server(str(folder), "a")
        await q.open()
        await q.close()
        assert stat.S_IMODE(os.stat(folder / DB_NAME).st_mode) == mode


def on_this_machine(pid: int, started: float) -> ProcessId:
    """How a server of this machine running as process ``pid`` is recorded."""
    me = ProcessId.current()
    return ProcessId(me.host, me.pid_space, pid, started)


@pytest.fixture
def doomed():
    """A real process of this machine, for a server row to name; killed by the test."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


async def test_a_claim_of_a_server_gone_from_this_machine_is_void_at_once(where, doomed):
    # Given a server of this machine (its process: `doomed`) that claimed a session
    gone, other = server(where, "gone"), server(where, "other")
    gone.me = on_this_machine(doomed.pid, psutil.Process(doomed.pid).create_time())
    await gone.open()
    await other.open()
    try:
        assert await gone.claim("s1") is None
        held = await other.claim("s1")
        assert held.label == "gone" and held.here, held  # alive: its process runs

        # When its process dies, its lease (30 s) still running
        doomed.kill()
        doomed.wait()

        # Then the next server claims the session at once, and the dead one's rows are gone
        assert await other.claim("s1") is None
        snap = await other.snapshot()
        assert "gone" not in snap["servers"]
    finally:
        await other.close()


async def test_a_reused_pid_does_not_keep_a_dead_servers_claim(where):
    # Given a server row naming a live pid (ours), but a process that started earlier: the pid
    # was given to this process after the server that held it died
    ghost, other = server(where, "ghost"), server(where, "other")
    ghost.me = on_this_machine(os.getpid(), psutil.Process().create_time() - 100)
    await ghost.open()
    await other.open()
    try:
        assert await ghost.claim("s1") is None
        # When another server claims the session, Then it gets it
        assert await other.claim("s1") is None
    finally:
        await other.close()


async def test_a_claim_held_on_another_machine_says_when_its_lease_ends(where):
    # Given a server of another machine (another host, another pid space) that claimed a
    # session: this machine cannot see its process, so its lease is the rule
    remote, other = server(where, "node-b:8888"), server(where, "other")
    remote.me = ProcessId("node-b", "node-b|1|4026531836", 4242, 1.0)
    await remote.open()
    await other.open()
    try:
        assert await remote.claim("s1") is None
        before = time.time()
        held = await other.claim("s1")

        # Then the claim stands until the remote lease ends, and the refusal says when
        assert held.label == "node-b:8888" and not held.here
        assert before + 25 < held.lease_until < before + 35
        message = held_elsewhere(held)
        until = time.strftime("%H:%M:%S UTC", time.gmtime(held.lease_until))
        assert f"held by server node-b:8888 until {until} unless it answers" in message
        assert f"resume again after {until}" in message
    finally:
        await remote.close()
        await other.close()
