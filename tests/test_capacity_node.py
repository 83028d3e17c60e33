"""Several Jupyter servers (one per user, as under JupyterHub), one fair queue.

Real ``jupyter server`` processes share a queue (``capacity_queue_url``: a folder on one
machine, or, for the tests marked so, a real PostgreSQL database as a cluster shares it) and a
quota of one GPU session (``QuotaCapacity.max_sessions``); notebooks count as GPU sessions
through ``gpu_kernelspecs`` (no GPU here). Servers are SIGKILLed to prove that a dead server's
place in line and its grant expire with its lease.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.servers import READBACK, STATE, WAIT, Server

LEASE = 3.0  # CapacityQueue.lease_seconds in these tests: what a dead server can cost the others
BOTH_QUEUES = pytest.mark.parametrize("node", ["folder", "postgresql"], indirect=True)


def config(queue) -> str:
    return f"""
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 1
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.capacity_queue_url = {str(queue)!r}
c.CapacityQueue.lease_seconds = {LEASE}
c.GpuPauseApp.poll_interval = 1.0
c.GpuPauseApp.policies = []
"""


@pytest.fixture
def node(tmp_path, request):
    """Three servers on one queue (a folder, unless the test asks for PostgreSQL), started
    side by side."""
    if getattr(request, "param", "folder") == "postgresql":
        queue = request.getfixturevalue("pg_url")
    else:
        queue = tmp_path / "queue"
        queue.mkdir()
    servers = [Server(tmp_path / f"server{i}", config(queue)) for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(Server.start, servers))
    yield servers
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda s: s.proc and s.stop(), servers))


def paused_notebook(server: Server, path: str) -> dict:
    s = server.open_notebook(path)
    server.run(s["kernel_id"], STATE)
    return server.pause(s["id"])


def ask_resume(server: Server, sid: str, body=None) -> dict:
    code, s = server.api("POST", f"gpu-pause/api/sessions/{sid}/resume", body or {})
    assert code == 202, s
    return s


def until(server: Server, sid: str, check, what: str, timeout: float = WAIT) -> dict:
    """The session once ``check(session)`` holds; fails saying what was expected."""
    end = time.monotonic() + timeout
    while True:
        code, s = server.api("GET", f"gpu-pause/api/sessions/{sid}")
        assert code == 200, s
        if check(s):
            return s
        if time.monotonic() > end:
            pytest.fail(f"{what} not reached within {timeout:g} s: {s}")
        time.sleep(0.1)


def waiting_at(server: Server, sid: str, position: int) -> dict:
    return until(
        server,
        sid,
        lambda s: s["state"] == "waiting" and s["queue_position"] == position,
        f"waiting #{position}",
    )


def running(server: Server, sid: str) -> dict:
    s = server.wait_state(sid)
    assert s["state"] in ("active", "idle"), s
    assert server.run(s["kernel_id"], READBACK).strip() == "45.0 hi"
    return s


@BOTH_QUEUES
def test_one_gpu_session_shared_fairly_by_three_servers(node):
    s0, s1, s2 = node
    a = paused_notebook(s0, "a.ipynb")
    b = paused_notebook(s1, "b.ipynb")
    c = paused_notebook(s2, "c.ipynb")

    # Given A resumed on server 0: it takes the one GPU session of the machine
    assert s0.resume(a["id"])["device"] == "gpu"
    # When B (server 1) and then C (server 2) ask to resume
    ask_resume(s1, b["id"])
    waiting_b = waiting_at(s1, b["id"], 1)
    ask_resume(s2, c["id"])
    waiting_c = waiting_at(s2, c["id"], 2)
    # Then each says why it waits, where it is in line and since when
    assert waiting_b["waiting"]["reason"] == "quota-sessions", waiting_b
    assert "the limit of 1 GPU session on this machine is in use" in waiting_b["message"]
    assert waiting_c["waiting"]["reason"] == "quota-sessions"
    assert "1 session ahead in line" in waiting_c["message"]
    assert waiting_c["waiting"]["since"] >= waiting_b["waiting"]["since"]
    # and every server shows the same line
    code, cap = s0.api("GET", "gpu-pause/api/capacity")
    assert code == 200, cap
    assert [(q["session_id"], q["position"]) for q in cap["queue"]] == [(b["id"], 1), (c["id"], 2)]
    assert cap["provider"] == "quota" and cap["limits"]["max_sessions"] == 1
    assert cap["usage"]["sessions"] == 1 and cap["queue"][0]["path"] == "b.ipynb"

    # When C cancels, it is paused again and out of line; asking again puts it back at the end
    code, cancelled = s2.api("POST", f"gpu-pause/api/sessions/{c['id']}/cancel")
    assert code == 200 and cancelled["state"] == "paused", cancelled
    code, cap = s1.api("GET", "gpu-pause/api/capacity")
    assert [q["session_id"] for q in cap["queue"]] == [b["id"]]
    ask_resume(s2, c["id"])
    waiting_at(s2, c["id"], 2)

    # When A pauses, B continues by itself and C moves up to #1
    s0.pause(a["id"])
    running(s1, b["id"])
    waiting_at(s2, c["id"], 1)
    # When B pauses, C (on the third server) continues by itself
    s1.pause(b["id"])
    back = running(s2, c["id"])
    code, events = s2.api("GET", f"gpu-pause/api/events?session_id={c['id']}")
    (resumed,) = [e for e in events["events"] if e["type"] == "resumed"][-1:]
    assert resumed["detail"]["waited_seconds"] > 0
    assert [e["detail"]["position"] for e in events["events"] if e["type"] == "waiting"] == [2, 2]
    assert back["device"] == "gpu" and back["gpu_session"] is True


def test_cpu_now_while_the_quota_is_full_and_the_timeout(node, tmp_path):
    s0, s1, _ = node
    a = paused_notebook(s0, "a.ipynb")
    b = paused_notebook(s1, "b.ipynb")
    s0.resume(a["id"])
    # Given B waiting for the one GPU session
    ask_resume(s1, b["id"])
    waiting_at(s1, b["id"], 1)
    # When its user takes the CPU now
    ask_resume(s1, b["id"], {"device": "cpu"})
    # Then it resumes at once on the CPU, with no GPU visible to its kernel
    on_cpu = running(s1, b["id"])
    assert on_cpu["device"] == "cpu" and on_cpu["gpu_session"] is False
    assert (
        s1.run(
            on_cpu["kernel_id"], "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"
        ).strip()
        == "''"
    )
    code, cap = s0.api("GET", "gpu-pause/api/capacity")
    assert cap["queue"] == [] and cap["usage"]["sessions"] == 1  # A only: B holds no GPU
    # and a paused session asked onto the CPU does not queue at all
    s1.pause(b["id"])
    ask_resume(s1, b["id"], {"device": "cpu"})
    assert running(s1, b["id"])["device"] == "cpu"


@BOTH_QUEUES
def test_a_dead_server_blocks_nobody_beyond_its_lease(node):
    s0, s1, s2 = node
    a = paused_notebook(s0, "a.ipynb")
    b = paused_notebook(s1, "b.ipynb")
    c = paused_notebook(s2, "c.ipynb")
    s0.resume(a["id"])
    ask_resume(s1, b["id"])
    waiting_at(s1, b["id"], 1)
    ask_resume(s2, c["id"])
    waiting_at(s2, c["id"], 2)

    # When server 1 (B waiting first in line) is SIGKILLed
    s1.proc.kill()
    s1.proc.wait()
    s1.proc = None
    # Then within its lease C is first in line
    begin = time.monotonic()
    waiting_at(s2, c["id"], 1)
    assert time.monotonic() - begin < LEASE + 2.0

    # When server 0, holding the GPU session, is SIGKILLed too
    s0.proc.kill()
    s0.proc.wait()
    s0.proc = None
    # Then C continues once that server's lease has run out
    begin = time.monotonic()
    running(s2, c["id"])
    assert time.monotonic() - begin < LEASE + 5.0


@BOTH_QUEUES
def test_two_resume_clicks_at_once_make_one_kernel_and_one_place_in_line(node):
    s0, s1, _ = node
    a = paused_notebook(s0, "a.ipynb")
    b = paused_notebook(s1, "b.ipynb")
    s0.resume(a["id"])
    # When B's resume is clicked twice at the same moment
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: ask_resume(s1, b["id"]), range(2)))
    assert {x["id"] for x in answers} == {b["id"]}
    waiting_at(s1, b["id"], 1)
    code, cap = s1.api("GET", "gpu-pause/api/capacity")
    assert [q["session_id"] for q in cap["queue"]] == [b["id"]]
    # Then, once A pauses, one kernel comes back for B
    s0.pause(a["id"])
    back = running(s1, b["id"])
    code, kernels = s1.api("GET", "api/kernels")
    assert [k["id"] for k in kernels] == [back["kernel_id"]]
