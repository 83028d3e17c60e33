"""Fixtures: a real jupyter-server with our extension, real ipykernel kernels, helpers to drive
them the way a notebook would."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_server.serverapp import ServerApp
from pytest_jupyter.pytest_tornasync import AsyncHTTPServerClient
from tornado.httpclient import HTTPClientError

from jupyter_gpu_pause.client.transport import Transport
from jupyter_gpu_pause.store.format import parse_iso
from tests.cells import CellOutput
from tests.moto import Moto
from tests.openapi import check as check_answer
from tests.waiting import wait_for

pytest_plugins = ["pytest_jupyter.jupyter_server"]


def pytest_configure(config):
    """Give the run Python's own SIGINT handler where it was started with SIGINT ignored (in
    the background, by a shell without job control), so that the servers the tests start get
    SIGINT at its default, as a spawner or a terminal starts them: the server rightly leaves
    an ignored SIGINT alone (integrations/shutdown.py), and the SIGINT tests would then test
    the shell. An exec'd child inherits an ignored signal, never a handler."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


TERMINAL = ("active", "idle", "paused", "failed")


@pytest.fixture
def store_dir(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def gp_config(store_dir, tmp_path, request) -> dict:
    """Traits for GpuPauseApp, set through the server's config as an admin would; a test
    overrides keys with ``@pytest.mark.gp_config(trait=value)`` or by updating this dict."""
    config = {
        "store_url": str(store_dir),
        "db_path": str(tmp_path / "records.sqlite"),
        "secret_file": str(tmp_path / "secret"),
        # no emergency checkpoint when a test's server is torn down (test_shutdown.py)
        "shutdown_checkpoint": "none",
        # a warm kernel is one more kernel in Jupyter's list: on where a test asks for it
        "warm_kernels": False,
    }
    marker = request.node.get_closest_marker("gp_config")
    if marker:
        config.update(marker.kwargs)
    return config


@pytest.fixture
def s3(monkeypatch, tmp_path):
    """moto's S3 server in its own process, with a bucket; credentials in the environment
    (of the server and so of every kernel), as the README tells admins to set them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    moto = Moto(tmp_path / "moto.log")
    moto.start()
    yield moto
    moto.stop()


@pytest.fixture
def jp_server_config(gp_config):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu_pause": True}},
        "GpuPauseApp": gp_config,
    }


@pytest.fixture(autouse=True)
def jp_server_cleanup(jp_asyncio_loop):
    """pytest-jupyter's cleanup of the test's server, made safe for the rest of the run.

    The plugin's own version leaves the server's ZMQ context open when the cleanup raises
    anything but RuntimeError; garbage collection then destroys that context at some random
    later moment, and ``Context.term`` blocks forever on the sockets of kernels that were never
    shut down, taking the whole run with it. Here the context is always closed without
    lingering, and an unexpected cleanup error is this test's error, with its traceback.
    """
    yield
    app = ServerApp.instance()
    error = None
    try:
        if hasattr(app, "kernel_manager"):
            jp_asyncio_loop.run_until_complete(_settle_restarts(app.kernel_manager))
        jp_asyncio_loop.run_until_complete(app._cleanup())
    except (RuntimeError, SystemExit):
        pass  # as the plugin: a server that never fully started
    except Exception as e:
        error = e
    if hasattr(app, "kernel_manager"):
        app.kernel_manager.context.destroy(linger=0)
    ServerApp.clear_instance()
    if error is not None:
        raise error


async def _settle_restarts(kernels) -> None:
    """Let a kernel that a test killed finish coming back before the server shuts down.

    jupyter_client cannot shut a kernel down while its restarter is restarting it: the shutdown
    asks the restart's pending ``ready`` future for its exception and gets InvalidStateError.
    The restarters are stopped first, so no restart begins after this look; a restart is a
    shutdown then a start, each with its own ``ready``, the second made as the first resolves,
    so the look is repeated until none is pending.
    """
    managers = [kernels.get_kernel(kid) for kid in kernels.list_kernel_ids()]
    for km in managers:
        km.stop_restarter()
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while loop.time() < end:
        readies = [getattr(km, "_ready", None) for km in managers]  # ``ready`` would make one
        pending = [
            asyncio.wrap_future(r) if not asyncio.isfuture(r) else r
            for r in readies
            if r is not None and not r.done()
        ]
        if not pending:
            return
        await asyncio.wait(pending, timeout=end - loop.time())


@pytest.fixture(autouse=True)
def _kernel_sees_package(monkeypatch):
    """Kernels inherit the environment; make sure they import this checkout."""
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(autouse=True)
def _answers_match_the_spec(monkeypatch):
    """Every answer under ``gpu-pause/api/`` that a test gets must be what api.yaml says
    (tests/openapi.py): those of the in-process server's HTTP client (``jp_fetch``,
    ``Lab.api``, a test's own fetch) and those the Python client's transport receives
    (``tests/http.py`` checks the scripts' requests itself)."""
    fetch = AsyncHTTPServerClient.fetch

    async def checked(self, path, **kwargs):
        method = kwargs.get("method", "GET")
        try:
            r = await fetch(self, path, **kwargs)
        except HTTPClientError as e:
            if e.response is not None and e.code != 599:  # 599: no answer came
                answer = e.response
                check_answer(method, path, e.code, answer.body, answer.headers.get("Content-Type"))
            raise
        check_answer(method, path, r.code, r.body, r.headers.get("Content-Type"))
        return r

    def fetch_checked(self, path, **kwargs):
        return asyncio.ensure_future(checked(self, path, **kwargs))  # a Future, as fetch's

    exchange = Transport.exchange

    def exchange_checked(self, method, url, data, headers):
        status, answer_headers, raw = exchange(self, method, url, data, headers)
        if not (status in (502, 503, 504) and not raw):  # an empty 5xx is a proxy's, not ours
            check_answer(method, url, status, raw, answer_headers.get("Content-Type"))
        return status, answer_headers, raw

    monkeypatch.setattr(AsyncHTTPServerClient, "fetch", fetch_checked)
    monkeypatch.setattr(Transport, "exchange", exchange_checked)


class Lab:
    """What a user does through the REST API and a notebook's kernel."""

    def __init__(self, fetch, serverapp):
        self._fetch = fetch
        self.app = serverapp
        self._started = False

    async def fetch(self, *parts, **kwargs):
        """jp_fetch, after running the extensions' start hooks as a real server does once its
        event loop runs (pytest-jupyter does not): that starts our idle monitor."""
        if not self._started:
            self._started = True
            await self.app.extension_manager.start_all_extensions()
        return await self._fetch(*parts, **kwargs)

    async def api(self, method: str, path: str, body=None, params=None, raw: bool = False):
        kw = {"method": method, "raise_error": False}
        if body is not None:
            kw["body"] = body if isinstance(body, (str, bytes)) else json.dumps(body)
        elif method in ("POST", "PUT", "PATCH"):
            kw["body"] = "{}"
        if params:
            kw["params"] = params
        r = await self.fetch("gpu-pause", "api", *path.split("/"), **kw)
        if raw:
            return r
        return r.code, (json.loads(r.body) if r.body else None)

    async def open_notebook(self, path: str = "nb.ipynb", kernel_name: str = "python3") -> dict:
        r = await self.fetch(
            "api",
            "sessions",
            method="POST",
            body=json.dumps(
                {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel_name}}
            ),
        )
        js = json.loads(r.body)
        code, body = await self.api("GET", "sessions", params={"path": path})
        assert code == 200, body
        (session,) = [s for s in body["sessions"] if s["kernel_id"] == js["kernel"]["id"]]
        return session

    async def open_kernel(self, path: str, kernel_name: str = "python3") -> str:
        """Open a notebook as JupyterLab does (a Jupyter session, a kernel started for it) and
        return that kernel's id, whether or not it is a session of ours yet: on a paused
        notebook, a kernel that has run nothing waits for the resume instead."""
        r = await self.fetch(
            "api",
            "sessions",
            method="POST",
            body=json.dumps(
                {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel_name}}
            ),
        )
        return json.loads(r.body)["kernel"]["id"]

    def client(self, kernel_id: str) -> AsyncKernelClient:
        kernel = self.app.kernel_manager.get_kernel(kernel_id)
        c = AsyncKernelClient()
        c.load_connection_info(kernel.get_connection_info(session=False))
        # wait_for_ready calls a kernel dead after 1 s without a heartbeat, which a loaded
        # 2-core VM causes too (as tests/servers.py and the benchmarks do)
        c.hb_channel.time_to_dead = 5.0
        c.start_channels()
        return c

    async def run(self, kernel_id: str, code: str, timeout: float = 120) -> str:
        """Execute a cell as the notebook would; return its stdout; raise on error."""
        c = self.client(kernel_id)
        output = CellOutput()
        try:
            await asyncio.wait_for(c.wait_for_ready(timeout=timeout), timeout)
            reply = await c.execute_interactive(code, output_hook=output, timeout=timeout)
        finally:
            c.stop_channels()
        return output.result(reply)

    async def send_cell(self, kernel_id: str, code: str) -> None:
        """Start a cell without waiting for it to end (a long-running cell): returns once the
        kernel runs it and the server has seen it busy."""
        c = self.client(kernel_id)
        try:
            await c.wait_for_ready(timeout=60)
            msg_id = c.execute(code)
            while True:
                msg = await c.get_iopub_msg(timeout=60)
                if (
                    msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "busy"
                ):
                    break
        finally:
            c.stop_channels()
        kernel = self.app.kernel_manager.get_kernel(kernel_id)

        async def server_sees_busy():
            return kernel.execution_state == "busy"

        await wait_for(server_sees_busy, what="the server seeing the cell run")

    async def monitor(self) -> dict:
        """The idle monitor's own state (GET policies): passes made, time of the last one."""
        code, body = await self.api("GET", "policies")
        assert code == 200, body
        return body["monitor"]

    async def monitor_passes(self, after: datetime | None = None, passes: int = 1) -> dict:
        """Wait until the idle monitor has made ``passes`` more passes, the last of them
        looking at the sessions later than ``after`` (default: now). What a test checks
        afterwards is what the monitor decided once that time had come."""
        after = after or datetime.now(timezone.utc)
        first = (await self.monitor())["passes"]

        async def done():
            m = await self.monitor()
            last = m["last_pass"] and parse_iso(m["last_pass"])
            return m if m["passes"] >= first + passes and last and last > after else None

        return await wait_for(done, timeout=60, what="an idle-monitor pass")

    async def pause_and_resume(self, path: str = "nb.ipynb") -> tuple[dict, dict, dict]:
        """Open ``path`` with ``x = 41`` in its kernel, pause it, resume it: each step waited
        for and checked. The session as opened, as paused and as resumed."""
        s = await self.open_notebook(path)
        await self.run(s["kernel_id"], "x = 41")
        await self.api("POST", f"sessions/{s['id']}/pause")
        paused = await self.wait_state(s["id"])
        assert paused["state"] == "paused", paused
        await self.api("POST", f"sessions/{s['id']}/resume")
        resumed = await self.wait_state(s["id"])
        assert resumed["state"] in ("active", "idle"), resumed
        return s, paused, resumed

    async def session(self, session_id: str) -> dict:
        code, body = await self.api("GET", f"sessions/{session_id}")
        assert code == 200, body
        return body

    async def wait_state(self, session_id: str, states=TERMINAL, timeout: float = 120) -> dict:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            s = await self.session(session_id)
            if s["state"] in states:
                return s
            if loop.time() > end:
                raise AssertionError(f"session stuck in {s['state']}: {s}")
            await asyncio.sleep(0.2)

    async def events(self, session_id: str, type_: str | None = None) -> list[dict]:
        code, body = await self.api("GET", "events", params={"session_id": session_id})
        assert code == 200
        return [e for e in body["events"] if type_ is None or e["type"] == type_]

    async def event(self, session_id: str, type_: str, nth: int = 1, timeout: float = 30) -> dict:
        """The session's ``nth`` (and last) ``type_`` event, waited for: an outcome's state is
        visible a moment before its event is in the records (the state flips, then the event
        is written)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len(found := await self.events(session_id, type_)) < nth:
            if loop.time() > end:
                raise AssertionError(f"{len(found)} {type_} event(s) for {session_id}, not {nth}")
            await asyncio.sleep(0.1)
        assert len(found) == nth, found
        return found[-1]

    def kernel_alive(self, kernel_id: str) -> bool:
        return kernel_id in self.app.kernel_manager


@pytest.fixture
def lab(jp_fetch, jp_serverapp):
    return Lab(jp_fetch, jp_serverapp)


@pytest.fixture
def python_exe() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the run's queue tests (each test gets its own
    database from ``pg_url``); tests that stop it start their own ``Postgres``."""
    from tests.postgres import Postgres

    server = Postgres()
    server.start()
    yield server
    server.remove()


@pytest.fixture
def pg_url(postgres) -> str:
    return postgres.new_database()
