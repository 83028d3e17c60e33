"""A real ``jupyter server`` process with the extension, isolated in temporary folders: for the
tests that start, stop and restart servers as an administrator or a service manager does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from tests.cells import CellOutput
from tests.http import request

TOKEN = "restart-test-token"
WAIT = 60.0
STATE = "import torch; w = torch.arange(10.); msg = 'hi'"
READBACK = "print(w.sum().item(), msg)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `jupyter server` subprocess with the extension, isolated in tmp dirs.

    ``config``: the text of a ``jupyter_server_config.py``; ``args``: more command-line
    options; ``own_paths=False`` leaves store, records and key at their defaults under
    ``data`` (which two servers may share).
    """

    def __init__(
        self,
        tmp: Path,
        config: str = "",
        args: tuple[str, ...] = (),
        own_paths: bool = True,
        data: Path | None = None,
    ):
        self.tmp = tmp
        self.root = tmp / "root"
        self.runtime = tmp / "runtime"
        self.data = data or tmp / "data"
        for d in (self.root, self.runtime, self.data, tmp / "config", tmp / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        # A warm kernel importing torch costs CPU these small VMs do not have to spare: off,
        # first in the file, so that a test's own config (test_startup.py) overrides it
        (tmp / "config" / "jupyter_server_config.py").write_text(
            "c.GpuPauseApp.warm_kernels = False\n" + config
        )
        self.env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTER_DATA_DIR": str(self.data),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "IPYTHONDIR": str(tmp / "ipython"),
        }
        self.args = list(args)
        if own_paths:
            self.args += [
                f"--GpuPauseApp.store_url={tmp / 'store'}",
                f"--GpuPauseApp.db_path={tmp / 'records.sqlite'}",
                f"--GpuPauseApp.secret_file={tmp / 'secret'}",
            ]
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # no terminal, as under a service manager or JupyterHub: jupyter_server then leaves
        # SIGINT to Python (test_shutdown.py gives a test a terminal where it needs one)
        self.stdin = subprocess.DEVNULL

    def launch(self) -> None:
        """Start the process; return at once."""
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
            *self.args,
        ]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, env=self.env, stdin=self.stdin, stdout=log, stderr=subprocess.STDOUT
            )

    def exit_status(self, timeout: float = WAIT) -> int:
        """The exit status of a server that is expected to stop by itself."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"jupyter server did not exit within {timeout}s:\n{self.log_tail()}")

    def kernel_pids(self) -> list[int]:
        """Processes the server started (its kernels), still alive."""
        return [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]

    def start(self) -> None:
        """Start the process and wait until it answers."""
        self.launch()
        self.wait_ready()

    def wait_ready(self) -> None:
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

    def wait_until(self, condition, what: str):
        """The first truthy value of ``condition()``, polled; fails saying ``what`` if none."""
        end = time.monotonic() + WAIT
        while not (value := condition()):
            if time.monotonic() > end:
                pytest.fail(f"{what} not seen within {WAIT}s:\n{self.log_tail()}")
            time.sleep(0.2)
        return value

    def wait_log(self, text: str) -> str:
        """The first line of this start's log that contains ``text``."""

        def line():
            lines = self.log.read_text(errors="replace").splitlines()
            return next((x for x in lines if text in x), None)

        return self.wait_until(line, repr(text))

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

    def kill(self) -> None:
        """SIGKILL the server and its kernels, as a crash of its container would: nothing of
        it runs its cleanup."""
        proc, self.proc = self.proc, None
        procs = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(WAIT)
        psutil.wait_procs(procs, timeout=WAIT)

    def api(self, method: str, path: str, body=None, timeout: float = 30):
        url = f"http://127.0.0.1:{self.port}/{path}"
        code, raw = request(url, TOKEN, method, body, timeout)
        return code, (json.loads(raw) if raw else None)

    def sessions(self) -> dict[str, dict]:
        code, body = self.api("GET", "gpu-pause/api/sessions")
        assert code == 200, body
        return {s["id"]: s for s in body["sessions"]}

    def open_kernel(self, path: str) -> str:
        """Open a notebook as JupyterLab does; its kernel's id, whether or not that kernel is a
        session of ours yet (on a paused notebook, one that has run nothing is not)."""
        code, js = self.api(
            "POST",
            "api/sessions",
            {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
        )
        assert code == 201, js
        return js["kernel"]["id"]

    def open_notebook(self, path: str) -> dict:
        kid = self.open_kernel(path)
        (s,) = [s for s in self.sessions().values() if s["kernel_id"] == kid]
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
        output = CellOutput()
        return output.result(self.execute(kernel_id, code, output))

    def execute(self, kernel_id: str, code: str, output_hook) -> dict:
        """Execute a cell as a notebook does (stored in the history, counted), each IOPub
        message of it to ``output_hook``; the execute_reply."""
        c = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        c.load_connection_file()
        c.start_channels()
        try:
            c.wait_for_ready(timeout=WAIT)
            return c.execute_interactive(code, output_hook=output_hook, timeout=WAIT)
        finally:
            c.stop_channels()

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


@contextlib.contextmanager
def nodes(tmp_path: Path, config: str, per_node: tuple[str, ...] = ("", "")):
    """Servers of one user as a cluster runs them, started side by side: one home folder
    (``tmp_path/home``), each its own records (``db_path``), and what ``config`` shares (a
    store, a key, a queue); ``per_node``: each one's own extra config. Stopped at the end."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    servers = []
    for i, extra in enumerate(per_node, start=1):
        own = f"c.GpuPauseApp.db_path = {str(tmp_path / f'records{i}.sqlite')!r}\n"
        server = Server(tmp_path / f"node{i}", config + own + extra, own_paths=False)
        server.root = home
        servers.append(server)
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(Server.start, servers))
        yield servers
    finally:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda s: s.proc and s.stop(), servers))
