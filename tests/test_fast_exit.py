"""Once its checkpoint is committed, a paused kernel is killed instead of shut down gracefully
when the kill loses nothing its user relies on; the kernel writes out first what a graceful
exit would have (``kernel/finish.py``). Otherwise the graceful shutdown runs, and the ``paused``
event says why."""

from __future__ import annotations

import gzip
import sqlite3

import psutil
import pytest

from tests.waiting import wait_for


def _bridge(lab):
    return lab.app.web_app.settings["gpu_pause"].bridge


async def _open_tracked(lab, path: str = "nb.ipynb") -> dict:
    """A notebook whose kernel got the server's first request (``track``, as on discovery)
    before any cell runs: what is registered to run at exit from then on is the user's."""
    s = await lab.open_notebook(path)
    await _bridge(lab).run_agent(s["kernel_id"], "track", {})
    return s


async def _pause(lab, s: dict) -> tuple[dict, dict]:
    """Pause ``s``; the paused session and its ``paused`` event."""
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    event = await lab.event(s["id"], "paused")
    return paused, event


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _history(hist_file: str, session: int) -> tuple[list[str], str | None]:
    """The cells IPython's history holds for ``session``, and the session's recorded end."""
    db = sqlite3.connect(hist_file)
    try:
        cells = [
            r[0] for r in db.execute("SELECT source_raw FROM history WHERE session=?", (session,))
        ]
        (end,) = db.execute("SELECT end FROM sessions WHERE session=?", (session,)).fetchone()
    finally:
        db.close()
    return cells, end


async def test_a_plain_notebook_is_killed_and_loses_nothing(lab, jp_root_dir):
    # Given a notebook whose history is held back in IPython's cache (a db_cache_size, as on a
    # slow home folder) and a file it wrote to without closing it
    s = await _open_tracked(lab)
    kid = s["kernel_id"]
    pid = lab.app.kernel_manager.get_kernel(kid).provisioner.process.pid
    where = await lab.run(
        kid,
        "hm = get_ipython().history_manager; hm.db_cache_size = 1000\n"
        "print(hm.hist_file); print(hm.session_number)",
    )
    hist_file, session = where.split()
    await lab.run(kid, "x = 41")
    await lab.run(kid, "out = open('notes.txt', 'w'); out.write('written, never closed')")
    cells, end = _history(hist_file, int(session))
    assert "x = 41" not in cells and end is None  # still in the kernel's memory
    assert (jp_root_dir / "notes.txt").read_text() == ""  # still in the file object's buffer

    # When it is paused
    paused, event = await _pause(lab, s)

    # Then the kernel was killed, not restarted, and nothing a graceful exit writes was lost:
    # the history has the cells and the session's end, the file has its bytes
    assert event["detail"]["exit"] == "killed", event["detail"]
    assert not lab.kernel_alive(kid) and _gone(pid)
    cells, end = _history(hist_file, int(session))
    assert "x = 41" in cells and end is not None
    assert (jp_root_dir / "notes.txt").read_text() == "written, never closed"

    # And the checkpoint resumes as before
    await lab.api("POST", f"sessions/{s['id']}/resume")
    resumed = await lab.wait_state(s["id"])
    assert (await lab.run(resumed["kernel_id"], "print(x + 1)")).strip() == "42"


async def test_a_torch_notebook_is_killed(lab):
    # Given a notebook that imported torch after the kernel started (torch registers exit
    # handlers and weakref finalizers of its own, none of which a kill loses anything by)
    s = await _open_tracked(lab)
    await lab.run(s["kernel_id"], "import torch; t = torch.ones(3)")
    # When it is paused, then the kernel is killed
    _, event = await _pause(lab, s)
    assert event["detail"]["exit"] == "killed", event["detail"]


MARKER = "exit-marker.txt"


@pytest.mark.parametrize(
    "setup, why",
    [
        pytest.param(
            f"import atexit\natexit.register(lambda: open({MARKER!r}, 'w').write('ran'))",
            "the exit handler __main__.<lambda>",
            id="an atexit handler",
        ),
        pytest.param(
            # a thread that finishes its work once the main thread ends: a graceful exit
            # waits for it
            "import threading, time\n"
            "def finish_when_main_ends():\n"
            "    while threading.main_thread().is_alive():\n"
            "        time.sleep(0.02)\n"
            f"    open({MARKER!r}, 'w').write('ran')\n"
            "threading.Thread(target=finish_when_main_ends, name='writer').start()",
            "the thread 'writer'",
            id="a non-daemon thread",
        ),
        pytest.param(
            f"import gzip\nz = gzip.open({MARKER!r}, 'wb'); z.write(b'ran')",
            "an open gzip.GzipFile",
            id="a gzip file being written",
        ),
    ],
)
async def test_a_kill_that_would_lose_something_is_a_graceful_shutdown(
    lab, jp_root_dir, setup, why
):
    # Given a notebook that left something for its exit to do
    s = await _open_tracked(lab)
    await lab.run(s["kernel_id"], setup)
    # When it is paused
    _, event = await _pause(lab, s)
    # Then the kernel was shut down gracefully, the event says why, and the exit did its work
    exit_ = event["detail"]["exit"]
    assert exit_.startswith("graceful: ") and why in exit_, exit_
    marker = jp_root_dir / MARKER
    data = marker.read_bytes()
    assert (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data) == b"ran"


async def test_a_child_process_makes_it_graceful(lab):
    # Given a notebook that started a child process
    s = await _open_tracked(lab)
    out = await lab.run(
        s["kernel_id"],
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid)",
    )
    child = int(out)
    # When it is paused
    _, event = await _pause(lab, s)
    # Then the shutdown was graceful (ipykernel stops its children), and the event says why
    assert f"the child process {child}" in event["detail"]["exit"], event["detail"]
    assert _gone(child)


@pytest.mark.gp_config(poll_interval=3600)  # no monitor pass discovers the kernel meanwhile
async def test_cells_run_before_the_first_request_make_it_graceful(lab):
    # Given a kernel that ran a cell before the server ever asked it anything (JupyterLab
    # started it, a cell ran, and only then did the server see it): what that cell registered
    # to run at exit cannot be told from the kernel's own
    async def first_pass_made():
        return (await lab.monitor())["passes"] >= 1

    await wait_for(first_pass_made, what="the idle monitor's first pass")
    kid = await lab.open_kernel("nb.ipynb")
    await lab.run(kid, "y = 1")
    code, body = await lab.api("GET", "sessions", params={"path": "nb.ipynb"})
    (s,) = body["sessions"]
    assert s["kernel_id"] == kid
    # When it is paused
    _, event = await _pause(lab, s)
    # Then the shutdown was graceful, saying so
    assert "cells ran before the server's first request" in event["detail"]["exit"]
