"""A real ``jupyter server`` process with the extension, for the benchmarks and device checks.

Each server lives in its own temporary folders (runtime, data, config, store, records, key), as
under JupyterHub one server per user does; servers meet only where the caller's configuration
points them at one folder (``capacity_queue_url``). Unlike ``tests/servers.py`` this knows
nothing of pytest: a failure raises ``ServerError`` with the end of the server's log.
"""

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
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from jupyter_client import BlockingKernelClient

TOKEN = "benchmark-token"
WAIT = 120.0  # generous: kernels start slowly on small shared VMs
RUNNING = ("active", "idle")
SETTLED = (*RUNNING, "paused", "failed")


class ServerError(RuntimeError):
    """A server or a session did not do what the benchmark waited for."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_time(text: str) -> datetime:
    """An ISO 8601 UTC time of the API (``2024-05-01T12:00:00.123456Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class JupyterServer:
    """One ``jupyter server`` subprocess; ``config``: its ``jupyter_server_config.py`` text;
    ``store_url``: its store (default: a folder of its own), on the command line as the rest."""

    def __init__(self, tmp: Path, config: str, label: str = "server", store_url: str = ""):
        self.tmp, self.label = tmp, label
        self.store_url = store_url or str(tmp / "store")
        self.runtime = tmp / "runtime"
        for d in (tmp / "root", self.runtime, tmp / "data", tmp / "config", tmp / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        (tmp / "config" / "jupyter_server_config.py").write_text(config)
        self.env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "IPYTHONDIR": str(tmp / "ipython"),
        }
        self.log = tmp / "server.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None

    # -- process -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process and wait until it answers."""
        self.port = _free_port()
        cmd = [
            sys.executable, "-m", "jupyter_server",
            f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.tmp / 'root'}", "--allow-root", "--no-browser",
            "--ServerApp.jpserver_extensions=jupyter_gpu_pause=True",
            f"--GpuPauseApp.store_url={self.store_url}",
            f"--GpuPauseApp.db_path={self.tmp / 'records.sqlite'}",
            f"--GpuPauseApp.secret_file={self.tmp / 'secret'}",
        ]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(  # cwd: not a checkout, so the installed package runs
                cmd, cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.until(lambda: self._answers(), "answering on api/status")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise ServerError(f"{self.label} exited {self.proc.returncode}:\n{self.log_tail()}")
        try:
            return self.api("GET", "api/status", timeout=2)[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), SIGKILL after WAIT."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    # -- REST ----------------------------------------------------------------------------------
    def api(self, method: str, path: str, body=None, timeout: float = 30):
        """``(status, JSON body)`` of one call to this server."""
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

    def ok(self, method: str, path: str, body=None, expect: int = 200):
        code, js = self.api(method, path, body)
        if code != expect:
            raise ServerError(f"{self.label}: {method} {path} answered {code}: {js}")
        return js

    def session(self, sid: str) -> dict:
        return self.ok("GET", f"gpu-pause/api/sessions/{sid}")

    def sessions(self) -> dict[str, dict]:
        return {s["id"]: s for s in self.ok("GET", "gpu-pause/api/sessions")["sessions"]}

    def events(self, sid: str) -> list[dict]:
        return self.ok("GET", f"gpu-pause/api/events?session_id={sid}")["events"]

    def capacity(self) -> dict:
        return self.ok("GET", "gpu-pause/api/capacity")

    # -- waiting on conditions -----------------------------------------------------------------
    def until(self, check: Callable[[], object], what: str, timeout: float = WAIT, every=0.1):
        """The first truthy ``check()``; ServerError naming ``what`` after ``timeout`` s."""
        end = time.monotonic() + timeout
        while True:
            out = check()
            if out:
                return out
            if time.monotonic() > end:
                raise ServerError(f"{self.label}: not {what} within {timeout:g} s")
            time.sleep(every)

    def session_until(self, sid: str, check: Callable[[dict], bool], what: str, timeout=WAIT):
        """The session once ``check(session)`` holds."""
        last: dict = {}

        def look():
            last.update(self.session(sid))
            return dict(last) if check(last) else None

        try:
            return self.until(look, what, timeout)
        except ServerError as e:
            raise ServerError(f"{e}; the session is {last.get('state')}: {last}") from None

    def settled(self, sid: str, timeout: float = WAIT) -> dict:
        """The session once no operation runs on it (running, paused or failed)."""
        return self.session_until(sid, lambda s: s["state"] in SETTLED, "settled", timeout)

    # -- notebooks -----------------------------------------------------------------------------
    def open_notebook(self, path: str, kernel: str = "python3") -> dict:
        """A notebook session with a new kernel of ``kernel``, as JupyterLab opens one."""
        body = {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel}}
        js = self.ok("POST", "api/sessions", body, expect=201)
        kid = js["kernel"]["id"]
        return self.until(
            lambda: next((s for s in self.sessions().values() if s["kernel_id"] == kid), None),
            f"tracking the kernel of {path}",
        )

    def connect(self, kernel_id: str, timeout: float = WAIT) -> BlockingKernelClient:
        """A client of the kernel through its connection file, its channels started and the
        kernel answering (``stop_channels()`` when done)."""
        c = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        c.load_connection_file()
        c.hb_channel.time_to_dead = 5.0  # 1 s misses beats of kernels on a loaded small VM
        c.start_channels()
        try:
            self._ready(c, kernel_id, timeout)
        except BaseException:
            c.stop_channels()
            raise
        return c

    def run(
        self,
        kernel_id: str,
        code: str,
        timeout: float = WAIT,
        client: BlockingKernelClient | None = None,
    ) -> str:
        """Execute a cell in the kernel; return its stdout. Through a client of its own, or
        ``client`` (``connect``), already connected: as a page that stays open on the kernel."""
        c = client or self.connect(kernel_id, timeout)
        out: list[str] = []
        err: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                err.append("\n".join(msg["content"]["traceback"]))

        try:
            reply = c.execute_interactive(code, output_hook=hook, timeout=timeout)
        finally:
            if client is None:
                c.stop_channels()
        if reply["content"]["status"] != "ok":
            raise ServerError(f"{self.label}: cell failed: {''.join(err)}")
        return "".join(out)

    def _ready(self, c: BlockingKernelClient, kernel_id: str, timeout: float) -> None:
        """``wait_for_ready``, tried again while the server says the kernel lives: the client
        calls a kernel dead after missed heartbeats, which a busy machine causes too."""
        end = time.monotonic() + timeout
        while True:
            try:
                c.wait_for_ready(timeout=max(end - time.monotonic(), 1.0))
                return
            except RuntimeError as e:
                code, k = self.api("GET", f"api/kernels/{kernel_id}")
                alive = code == 200 and k.get("execution_state") != "dead"
                if not alive or time.monotonic() > end:
                    raise ServerError(f"{self.label}: kernel {kernel_id}: {e}") from None

    def pause(self, sid: str, timeout: float = WAIT) -> dict:
        """Pause and wait for the outcome; ServerError unless it ends ``paused``."""
        self.ok("POST", f"gpu-pause/api/sessions/{sid}/pause", expect=202)
        s = self.settled(sid, timeout)
        if s["state"] != "paused":
            raise ServerError(f"{self.label}: pause of {s['path']} ended {s['state']}: {s}")
        return s

    def ask_resume(self, sid: str, body: dict | None = None) -> dict:
        """Ask to resume; returns at once (the session waits in line or restores)."""
        return self.ok("POST", f"gpu-pause/api/sessions/{sid}/resume", body or {}, expect=202)
