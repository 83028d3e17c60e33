"""A state shown is a state that accepts its actions, and whose event is recorded: a script that
sees ``paused`` finds the ``paused`` event and resumes at once, one that sees ``active`` after a
resume pauses at once, and neither is ever refused — on a
machine whose cores are busy with other work, where an operation's tail (its record written, its
event sent) runs well after its outcome is shown.

The script looks as fast as it can (every 10 ms through the public client), so it meets each
state the moment it is published; every round checks that the notebook's value came back.
``benchmarks/bench_rounds.py`` runs the same rounds 300 times.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpu_pause.client import GpuPauseClient
from tests.servers import TOKEN, Server

ROUNDS = int(os.environ.get("GP_SETTLED_ROUNDS", "15"))
LOOK = 0.01  # seconds between two looks at the session
CONFIG = """
c.GpuPauseApp.policies = []
c.GpuPauseApp.gc_grace_seconds = 0
"""
SPIN = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end: pass\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("settled"), config=CONFIG)
    s.env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    s.start()
    yield s
    s.stop()


@pytest.fixture
def busy_cores():
    """Every core kept busy by other processes for the length of the test."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 2)]
    yield
    for p in spinners:
        p.kill()
        p.wait()


def _shown(gp: GpuPauseClient, sid: str, want: tuple[str, ...]) -> dict:
    s = gp.wait(sid, ("paused", "failed", "active", "idle"), timeout=120, poll=LOOK)
    assert s["state"] in want, s
    return s


def _recorded(gp: GpuPauseClient, sid: str, kind: str, n: int) -> None:
    """The session's events, read the moment its state showed the ``n``-th ``kind`` outcome,
    hold that outcome: a state shown has its event recorded."""
    types = [e["type"] for e in gp.events(session=sid)]
    assert types.count(kind) == n, (kind, n, types[-6:])


def _round(server: Server, gp: GpuPauseClient, sid: str, i: int) -> None:
    gp.pause(sid)
    _shown(gp, sid, ("paused",))
    _recorded(gp, sid, "paused", 2 * i + 1)
    # Then the session shown paused accepts its resume at once (no WrongState raised)
    gp.resume(sid)
    _shown(gp, sid, ("active", "idle"))
    _recorded(gp, sid, "resumed", 2 * i + 1)
    # And the session shown active after a resume accepts a pause at once
    gp.pause(sid)
    _shown(gp, sid, ("paused",))
    _recorded(gp, sid, "paused", 2 * i + 2)
    gp.resume(sid)
    back = _shown(gp, sid, ("active", "idle"))
    _recorded(gp, sid, "resumed", 2 * i + 2)
    # And the notebook's value is back, then moves on for the next round
    assert server.run(back["kernel_id"], f"print(x); x = {i + 1}").strip() == str(i)


def test_a_session_shown_paused_accepts_a_resume_and_shown_active_a_pause(server, busy_cores):
    # Given a notebook holding a value, and a script talking to its server
    gp = GpuPauseClient(f"http://127.0.0.1:{server.port}/", TOKEN)
    s = server.open_notebook("rounds.ipynb")
    server.run(s["kernel_id"], "x = 0")
    # When, with every core busy, it pauses and resumes it round after round, each action
    # sent the moment the session shows the state that offers it
    for i in range(ROUNDS):
        _round(server, gp, s["id"], i)
    # Then every round paused and resumed: one paused and one resumed event each
    types = [e["type"] for e in gp.events(session=s["id"])]
    assert types.count("paused") == 2 * ROUNDS and types.count("resumed") == 2 * ROUNDS, types


def _event(server: Server, sid: str, kind: str) -> bool:
    """Whether ``sid`` has a ``kind`` event (the events are read without touching sessions)."""
    code, body = server.api("GET", f"gpu-pause/api/events?session_id={sid}")
    assert code == 200, body
    return any(e["type"] == kind for e in body["events"])


def test_a_notebook_renamed_just_before_its_pause_is_paused_under_its_new_name(server):
    # Given a notebook with a value, open as JupyterLab opens it
    code, js = server.api(
        "POST",
        "api/sessions",
        {"path": "draft.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}},
    )
    assert code == 201, js
    server.run(js["kernel"]["id"], "x = 7")
    (s,) = [s for s in server.sessions().values() if s["kernel_id"] == js["kernel"]["id"]]
    # When the user renames it (Lab moves its Jupyter session) and pauses at once
    code, moved = server.api("PATCH", f"api/sessions/{js['id']}", {"path": "final.ipynb"})
    assert code == 200, moved
    code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
    assert code == 202, body
    # Then it is paused under its new path (looked at once the pause has ended, as a Lab that
    # had not asked meanwhile would), which its resume goes on with
    server.wait_until(lambda: _event(server, s["id"], "paused"), "the paused event")
    paused = server.wait_state(s["id"])
    assert (paused["state"], paused["path"]) == ("paused", "final.ipynb"), paused
    back = server.resume(s["id"])
    assert back["path"] == "final.ipynb"
    assert server.run(back["kernel_id"], "print(x)").strip() == "7"
