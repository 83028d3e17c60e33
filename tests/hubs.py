"""A real JupyterHub for the tests: its own process, configurable-http-proxy from npm
(tests/hub_proxy, installed by ``make pytest``), SimpleLocalProcessSpawner starting
``jupyterhub-singleuser`` with the extension as the user running the tests, and an admin
service token that drives the Hub's REST API the way an admin's script (or the Hub's own UI)
would."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from tests.cells import CellOutput
from tests.http import request
from tests.servers import _free_port

WAIT = 90.0  # seconds: a single-user server starts in 5-20 s on these small VMs
CHECKOUT = Path(__file__).resolve().parents[1]
PROXY = CHECKOUT / "tests" / "hub_proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
BIN = Path(sys.executable).parent
# JupyterHub's default scopes of a server's own token, and those plus what
# stop_server_when_paused needs (docs/deploy/jupyterhub-kubespawner.md)
DEFAULT_SCOPES = ["users:activity!user", "access:servers!server"]
STOP_SCOPES = [*DEFAULT_SCOPES, "delete:servers!server"]


def _hub_config(hub: Hub) -> str:
    return f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {hub.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {_free_port()}
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_free_port()}"
c.JupyterHub.db_url = "sqlite:///{hub.tmp / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(hub.tmp / "cookie_secret")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {{{hub.user!r}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(hub.tmp / "home" / "{username}")!r}
c.Spawner.cmd = [{str(BIN / "jupyterhub-singleuser")!r}]
c.Spawner.args = ["--allow-root"]
c.Spawner.start_timeout = {int(WAIT)}
# SIGINT, then SIGTERM after this long: room for the shutdown checkpoint (docs/deploy/)
c.LocalProcessSpawner.interrupt_timeout = 40
c.Spawner.http_timeout = {int(WAIT)}
c.Spawner.environment = {{
    "JUPYTER_CONFIG_DIR": {str(hub.user_config)!r},
    "JUPYTER_DATA_DIR": {str(hub.tmp / "user-data")!r},
    "JUPYTER_RUNTIME_DIR": {str(hub.runtime)!r},
    "IPYTHONDIR": {str(hub.tmp / "ipython")!r},
}}
# The scopes of each start's JUPYTERHUB_API_TOKEN, read from a file so that a test can give
# a server the Hub's default (which may not stop it) or what the deploy guide tells an admin.
import json
c.Spawner.server_token_scopes = lambda spawner: json.loads(open({str(hub.scopes_file)!r}).read())
c.JupyterHub.services = [{{"name": "admin-script", "api_token": {hub.token!r}}}]
c.JupyterHub.load_roles = [{{
    "name": "admin-script",
    "scopes": ["admin:users", "admin:servers", "access:servers"],
    "services": ["admin-script"],
}}]
"""


class Hub:
    """``jupyterhub`` in its own process with one user, ``user``; the single-user server's
    ``jupyter_server_config.py`` is ``singleuser_config``."""

    user = "alice"

    def __init__(self, tmp: Path, singleuser_config: str):
        if not PROXY.exists():
            pytest.fail(
                f"configurable-http-proxy is missing ({PROXY}): `make pytest` installs it, or "
                "`cd tests/hub_proxy && npm ci`"
            )
        self.tmp, self.port, self.token = tmp, _free_port(), secrets.token_hex(16)
        self.user_config, self.runtime = tmp / "user-config", tmp / "user-runtime"
        self.root = tmp / "home" / self.user
        for d in (self.user_config, self.runtime, self.root):
            d.mkdir(parents=True, exist_ok=True)
        self.scopes_file = tmp / "server_token_scopes.json"
        self.set_token_scopes(STOP_SCOPES)
        (tmp / "jupyterhub_config.py").write_text(_hub_config(self))
        (self.user_config / "jupyter_server_config.py").write_text(singleuser_config)
        self.log = tmp / "hub.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # Kernels and the single-user server import this checkout (the spawner keeps
        # PYTHONPATH: LocalProcessSpawner.env_keep).
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(CHECKOUT), os.environ.get("PYTHONPATH", "")]),
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        }
        for key in [k for k in env if k.startswith("JUPYTERHUB_")]:
            del env[key]
        cmd = [sys.executable, "-m", "jupyterhub", "-f", str(self.tmp / "jupyterhub_config.py")]
        # no terminal, as a Hub run as a service: its servers (which inherit it) neither
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.answering(lambda: self._answers(), "the Hub's API through the proxy")

    def answering(self, condition, what: str) -> None:
        """Wait until the Hub (or what it runs) answers; a start that fails leaves no process
        behind (the Hub stops its proxy and servers)."""
        try:
            self.wait_until(condition, what)
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"jupyterhub exited {self.proc.returncode}:\n{self.log_tail()}")
        try:
            return self.api("GET", "hub/api/", timeout=2)[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM: the Hub stops the user's server and the proxy, then exits."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    # -- HTTP through the proxy, with the admin service's token ---------------------------------
    def api(self, method: str, path: str, body=None, timeout: float = 30):
        code, raw = request(f"{self.url}/{path}", self.token, method, body, timeout)
        try:
            return code, (json.loads(raw) if raw else None)
        except ValueError:
            return code, raw.decode(errors="replace")

    def user_api(self, method: str, path: str, body=None):
        """The user's server, through the proxy: ``/user/<name>/<path>``."""
        return self.api(method, f"user/{self.user}/{path}", body)

    def servers(self) -> dict:
        code, model = self.api("GET", f"hub/api/users/{self.user}")
        assert code == 200, model
        return model["servers"]

    def set_token_scopes(self, scopes: list[str]) -> None:
        """The scopes of the next server start's own token."""
        self.scopes_file.write_text(json.dumps(scopes))

    def stop_server(self) -> None:
        """Stop the user's server through the Hub (if it runs) and wait until it has."""
        code, body = self.api("DELETE", f"hub/api/users/{self.user}/server")
        assert code in (202, 204, 400), body  # 400: not running
        self.wait_until(lambda: self.servers() == {}, "the user's server stopped")

    def server_process(self) -> psutil.Process:
        """The user's single-user server process (a child of the Hub: a local spawner)."""
        (proc,) = [
            p
            for p in psutil.Process(self.proc.pid).children(recursive=True)
            if any("jupyterhub-singleuser" in part for part in p.cmdline())
        ]
        return proc

    def start_server(self) -> None:
        """Start the user's server through the Hub and wait until the Hub says it is ready."""
        code, body = self.api("POST", f"hub/api/users/{self.user}/server")
        assert code in (201, 202), body
        self.wait_until(lambda: self.servers().get("", {}).get("ready"), "the user's server ready")

    # -- waiting, logs --------------------------------------------------------------------------
    def wait_until(self, condition, what: str, timeout: float = WAIT):
        """The first truthy value of ``condition()``, polled; fails saying ``what`` if none."""
        end = time.monotonic() + timeout
        while not (value := condition()):
            if time.monotonic() > end:
                pytest.fail(f"{what} not seen within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.25)
        return value

    def log_tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def log_mark(self) -> int:
        """Where the log ends now: ``log_since`` reads what the Hub and its servers logged
        after this point (one log for the whole module)."""
        return self.log.stat().st_size

    def log_since(self, mark: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def wait_log(self, text: str, mark: int) -> str:
        """The first line logged after ``mark`` that contains ``text``."""

        def line():
            return next((x for x in self.log_since(mark).splitlines() if text in x), None)

        return self.wait_until(line, repr(text))

    # -- the user's kernels -----------------------------------------------------------------------
    def client(self, kernel_id: str) -> BlockingKernelClient:
        """A client of one of the user's kernels, through its connection file (the
        single-user server runs on this machine); the caller stops its channels."""
        c = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        c.load_connection_file()
        c.start_channels()
        c.wait_for_ready(timeout=WAIT)
        return c

    def run(self, kernel_id: str, code: str) -> str:
        """Execute a cell in one of the user's kernels; its stdout."""
        c = self.client(kernel_id)
        output = CellOutput()
        try:
            reply = c.execute_interactive(code, output_hook=output, timeout=WAIT)
        finally:
            c.stop_channels()
        return output.result(reply)
