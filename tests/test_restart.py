"""Session records survive a server restart (SQLite at db_path): a paused session is listed and
resumes after a real ``jupyter server`` process was stopped and started again."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from tests.cells import CellOutput

TOKEN = "restart-test-token"
WAIT = 60.0
STATE = "import torch; w = torch.arange(10.); msg = 'hi'"
READBACK = "print(w.sum().item(), msg)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `jupyter server` subprocess with the extension, isolated in tmp dirs."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "root"
        self.runtime = tmp / "runtime"
        for d in (self.root, self.runtime, tmp / "data", tmp / "config", tmp / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "IPYTHONDIR": str(tmp / "ipython"),
        }
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.port = _free_port()
        self.starts += 1
        self.log = self.tmp / f"server-{self.starts}.log"
        cmd = [
            sys.executable, "-m", "jupyter_server",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.root}",
            "--allow-root", "--no-browser",
            "--ServerApp.jpserver_extensions=jupyter_gpu_pause=True",
            f"--GpuPauseApp.store_url={self.tmp / 'store'}",
            f"--GpuPauseApp.db_path={self.tmp / 'records.sqlite'}",
            f"--GpuPauseApp.secret_file={self.tmp / 'secret'}",
        ]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"jupyter server exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.api("GET", "api/status", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        pytest.fail(f"jupyter server did not answer within {WAIT}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> int:
        """SIGTERM, as a service manager would; returns the exit status (killed after WAIT)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else 0
        kids = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            for p in [*kids, proc]:
                try:
                    p.kill()
                except (psutil.NoSuchProcess, ProcessLookupError):
                    pass
            proc.wait(10)
            pytest.fail(f"jupyter server ignored SIGTERM for {WAIT}s:\n{self.log_tail()}")

    def api(self, method: str, path: str, body=None, timeout: float = 30):
        data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                code, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, raw = e.code, e.read()
        return code, (json.loads(raw) if raw else None)

    def sessions(self) -> dict[str, dict]:
        code, body = self.api("GET", "gpu-pause/api/sessions")
        assert code == 200, body
        return {s["id"]: s for s in body["sessions"]}

    def open_notebook(self, path: str) -> dict:
        code, js = self.api(
            "POST",
            "api/sessions",
            {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
        )
        assert code == 201, js
        (s,) = [s for s in self.sessions().values() if s["kernel_id"] == js["kernel"]["id"]]
        return s

    def wait_state(self, sid: str, states=("active", "idle", "paused", "failed")) -> dict:
        end = time.monotonic() + WAIT
        while True:
            code, s = self.api("GET", f"gpu-pause/api/sessions/{sid}")
            assert code == 200, s
            if s["state"] in states:
                return s
            if time.monotonic() > end:
                pytest.fail(f"session stuck in {s['state']}: {s}")
            time.sleep(0.2)

    def run(self, kernel_id: str, code: str) -> str:
        """Execute a cell in the kernel through its connection file; return its stdout."""
        c = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        c.load_connection_file()
        c.start_channels()
        output = CellOutput()
        try:
            c.wait_for_ready(timeout=WAIT)
            reply = c.execute_interactive(code, output_hook=output, timeout=WAIT)
        finally:
            c.stop_channels()
        return output.result(reply)

    def pause(self, sid: str) -> dict:
        code, body = self.api("POST", f"gpu-pause/api/sessions/{sid}/pause")
        assert code == 202, body
        paused = self.wait_state(sid)
        assert paused["state"] == "paused", paused
        return paused

    def resume(self, sid: str) -> dict:
        code, body = self.api("POST", f"gpu-pause/api/sessions/{sid}/resume")
        assert code == 202, body
        back = self.wait_state(sid)
        assert back["state"] in ("active", "idle"), back
        return back


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path)
    yield srv
    srv.stop()


def test_paused_session_is_listed_and_resumes_after_a_restart(server):
    # Given a notebook whose kernel holds a tensor and a string, paused by the user
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    ck = server.pause(s["id"])["checkpoint"]["id"]

    # When the server is stopped (SIGTERM) and started again, on another port
    assert server.stop() == 0
    server.start()

    # Then the session is listed under the same id, still paused, with the same checkpoint
    again = server.sessions()[s["id"]]
    assert again["state"] == "paused" and again["kernel_id"] is None, again
    assert again["path"] == "nb.ipynb" and again["checkpoint"]["id"] == ck
    code, body = server.api("GET", f"gpu-pause/api/events?session_id={s['id']}")
    assert code == 200 and "paused" in [e["type"] for e in body["events"]]

    # When the user resumes it
    back = server.resume(s["id"])

    # Then a new kernel holds the notebook's values, and the notebook is attached to it
    kid = back["kernel_id"]
    assert kid and kid != s["kernel_id"] and back["checkpoint"]["id"] == ck
    assert server.run(kid, READBACK).strip() == "45.0 hi"
    code, js = server.api("GET", "api/sessions")
    assert code == 200
    assert [(x["path"], x["kernel"]["id"]) for x in js] == [("nb.ipynb", kid)]


def test_sessions_running_at_shutdown_after_a_restart(server):
    # Given one notebook that never paused and one that paused, resumed and runs again
    server.start()
    fresh = server.open_notebook("fresh.ipynb")
    server.run(fresh["kernel_id"], STATE)
    cycled = server.open_notebook("cycled.ipynb")
    server.run(cycled["kernel_id"], STATE)
    ck = server.pause(cycled["id"])["checkpoint"]["id"]
    kid = server.resume(cycled["id"])["kernel_id"]
    server.run(kid, "msg = 'changed after the checkpoint'")
    before = server.sessions()
    assert before[fresh["id"]]["state"] in ("active", "idle")
    assert before[cycled["id"]]["state"] in ("active", "idle")

    # When the server stops (its kernels end with it) and starts again
    assert server.stop() == 0
    server.start()

    # Then the never-paused session is gone: it had no checkpoint to come back from
    after = server.sessions()
    assert fresh["id"] not in after
    assert "fresh.ipynb" not in [s["path"] for s in after.values()]

    # And the other is paused at its last checkpoint, saying its kernel ended outside the tool
    s = after[cycled["id"]]
    assert s["state"] == "paused" and s["kernel_id"] is None, s
    assert s["checkpoint"]["id"] == ck
    assert "ended outside jupyter_gpu_pause" in s["message"] and ck in s["message"]

    # And it resumes from that checkpoint (the later change is, as the message says, lost)
    back = server.resume(cycled["id"])
    assert server.run(back["kernel_id"], READBACK).strip() == "45.0 hi"


def test_unreadable_records_make_the_api_say_so_and_change_nothing(server):
    # Given a records database that is not a database (a disk fault, a bad copy)
    db = server.tmp / "records.sqlite"
    garbage = b"not a sqlite file\n" * 64
    db.write_bytes(garbage)

    # When the server starts
    server.start()

    # Then every call of our API answers 503 naming the records, instead of an empty list
    # that would tell users their paused sessions are gone
    code, body = server.api("GET", "gpu-pause/api/sessions")
    assert code == 503, body
    assert body["reason"] == "not-started"
    assert "could not load its records" in body["message"] and "db_path" in body["message"]
    code, body = server.api("POST", "gpu-pause/api/sessions/0123abcd/pause")
    assert code == 503 and body["reason"] == "not-started"

    # And Jupyter itself keeps working: notebooks still open and run
    notebook = {"path": "nb.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    code, js = server.api("POST", "api/sessions", notebook)
    assert code == 201, js
    assert server.run(js["kernel"]["id"], "print(6 * 7)").strip() == "42"

    # And the records file is left exactly as it was, for an administrator to inspect
    assert db.read_bytes() == garbage
    assert "could not load the records" in server.log_tail()
