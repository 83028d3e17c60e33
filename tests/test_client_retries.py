"""Answers lost on the way back: a real TCP proxy (tests/proxy.py) between the client and a
real server loses every third answer of each kind of request, whole or cut mid-way, each only
once the operation it started has ended (the worst moment: a blind retry would now act
again, or be refused). Through it, a script of pauses and resumes must still pause and resume
exactly once per call, every call ending in the state asked for; and the CLI, built on the
client, must still succeed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_gpu_pause.client import GpuPauseClient, Retry, ServerUnreachable
from tests.proxy import DroppingProxy, EveryThird
from tests.servers import TOKEN, WAIT, Server

RUNNING = ("active", "idle")
CYCLES = 5
CLI = str(Path(sys.executable).with_name("jupyter-gpu-pause"))
PATIENT = Retry(attempts=10, backoff=0.05, max_backoff=1.0, budget=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(
        tmp_path_factory.mktemp("lossy"),
        config='c.GpuPauseApp.policies = []\nc.GpuPauseApp.retention = {"keep_last": 0}\n',
    )
    s.env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    s.start()
    yield s
    s.stop()


def settled(server: Server, sid: str):
    """Before a POST's answer is lost: wait (polling the server directly) for the operation
    it started to end."""

    def wait(line: bytes) -> None:
        if line.startswith(b"POST"):
            server.wait_state(sid)

    return wait


def count(events: list[dict], type_: str) -> int:
    return sum(e["type"] == type_ for e in events)


def test_pauses_and_resumes_through_a_proxy_losing_answers_act_once_each(server):
    # Given a notebook holding x = 41, and a client whose answers a proxy loses
    s = server.open_notebook("lossy.ipynb")
    server.run(s["kernel_id"], "x = 41")
    drop = EveryThird()
    proxy = DroppingProxy(server.port, drop, before_losing=settled(server, s["id"]))
    gp = GpuPauseClient(proxy.url, TOKEN, retry=PATIENT)
    try:
        # When a script pauses and resumes it, again and again, waiting for each
        for _ in range(CYCLES):
            paused = gp.pause(s, wait=True)
            back = gp.resume(s, wait=True)
            # Then every call ends in the state it asked for
            assert paused["state"] == "paused" and paused["kernel_id"] is None, paused
            assert back["state"] in RUNNING and back["kernel_id"], back
    finally:
        proxy.close()

    # And answers were lost, pauses' and resumes' among them, whole and cut mid-way
    assert drop.lost[(b"POST", b"pause")] >= 1 and drop.lost[(b"POST", b"resume")] >= 1
    assert {(k, n) for k, n in drop.lost.items() if n >= 2}, drop.lost
    assert len(proxy.dropped) >= CYCLES, proxy.dropped
    # And nothing happened twice: one paused and one resumed event per call, one checkpoint
    # per pause, and the variable back in the last kernel
    direct = GpuPauseClient(f"http://127.0.0.1:{server.port}/", TOKEN)
    events = direct.events(session=s)
    assert (count(events, "paused"), count(events, "resumed")) == (CYCLES, CYCLES), [
        e["type"] for e in events
    ]
    assert len(direct.checkpoints(s)) == CYCLES
    assert server.run(back["kernel_id"], "print(x)").strip() == "41"


class FirstPost:
    """Loses the answer to the first POST only."""

    def __init__(self):
        self.posts = 0

    def __call__(self, line: bytes):
        if line.startswith(b"POST"):
            self.posts += 1
            return "whole" if self.posts == 1 else None
        return None


def test_a_cli_command_whose_answer_is_lost_still_succeeds_once(server, tmp_path):
    # Given a paused notebook, and a proxy that loses the answer to the first POST once the
    # resume it started has ended
    s = server.open_notebook("cli-lossy.ipynb")
    server.pause(s["id"])
    proxy = DroppingProxy(server.port, FirstPost(), before_losing=settled(server, s["id"]))
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    for var in ("JUPYTER_GPU_PAUSE_URL", "JUPYTER_GPU_PAUSE_CLI_TOKEN"):
        env.pop(var, None)
    try:
        # When a user resumes it with the CLI through that proxy
        result = subprocess.run(
            [CLI, "resume", s["id"], "--url", proxy.url, "--token", TOKEN, "--wait"],
            env=env,
            capture_output=True,
            text=True,
            timeout=3 * WAIT,
            check=False,
        )
    finally:
        proxy.close()
    # Then the command succeeds, its resume having been answered by the retry
    assert result.returncode == 0, result.stderr
    assert [line.split(b" ")[1].endswith(b"/resume") for line in proxy.dropped] == [True]
    # And the session was resumed once
    assert server.sessions()[s["id"]]["state"] in RUNNING
    events = GpuPauseClient(f"http://127.0.0.1:{server.port}/", TOKEN).events(session=s)
    assert count(events, "resumed") == 1


class Busy:
    """Answers the first ``times`` requests 503 with Retry-After itself."""

    def __init__(self, times: int):
        self.left = times

    def __call__(self, line: bytes):
        if self.left:
            self.left -= 1
            return "busy"
        return None


def test_retry_after_is_honoured_within_the_budget(server):
    # Given a proxy answering 503 "Retry-After: 1" once, and a client whose own backoff is 10 ms
    quick = Retry(attempts=4, backoff=0.01, budget=10)
    busy_once = DroppingProxy(server.port, Busy(1), retry_after="1")
    try:
        start = time.monotonic()
        # When it lists the sessions through it
        sessions = GpuPauseClient(busy_once.url, TOKEN, retry=quick).sessions()
        # Then it got them, having waited as long as the server asked, not its own 10 ms
        assert isinstance(sessions, list) and time.monotonic() - start >= 1.0
    finally:
        busy_once.close()

    # Given a proxy that asks for 2 minutes, beyond the client's 10 s budget
    busy_long = DroppingProxy(server.port, Busy(10), retry_after="120")
    try:
        start = time.monotonic()
        # Then the client gives up at once with the 503, rather than waiting past its budget
        with pytest.raises(ServerUnreachable) as gave_up:
            GpuPauseClient(busy_long.url, TOKEN, retry=quick).sessions()
        assert gave_up.value.status == 503 and time.monotonic() - start < 5
    finally:
        busy_long.close()
