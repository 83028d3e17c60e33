"""Preemption-safe shutdown (docs/shutdown.md): a stopping server checkpoints the running
sessions worth keeping before Jupyter shuts their kernels down, and a cloud's preemption notice
does the same while the server keeps running.

Real ``jupyter server`` processes stopped with SIGTERM (or SIGINT, with and without a terminal),
real kernels (one holding 256 MiB of torch tensors), and a local HTTP server in a thread of the
test playing the metadata endpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from jupyter_client import BlockingKernelClient

from jupyter_gpu_pause.server.integrations.preemption import PreemptionPoller
from jupyter_gpu_pause.server.integrations.shutdown import SigintStop
from tests.servers import READBACK, STATE, WAIT, Server
from tests.waiting import wait_for

BIG = "big = torch.full((64 * 2**20,), 3.0)"  # 256 MiB of float32
BIG_READBACK = "print(big.numel() * big.element_size() >> 20, bool((big == 3).all()))"
SETTLE = 12  # seconds a stopping server may take beyond its grace period (kernels' shutdown)


@pytest.fixture
def servers():
    """Every Server a test starts, stopped (SIGTERM) at the end."""
    started: list[Server] = []
    yield started
    for srv in started:
        srv.stop()


def add_kernelspec(server: Server, name: str) -> None:
    """A second Python kernelspec, as an admin installs one for GPU notebooks."""
    spec = server.data / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    doc = {"argv": argv, "display_name": name, "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(doc))


def open_notebook(server: Server, path: str, kernel: str = "python3") -> dict:
    body = {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel}}
    code, js = server.api("POST", "api/sessions", body)
    assert code == 201, js
    (s,) = [s for s in server.sessions().values() if s["kernel_id"] == js["kernel"]["id"]]
    return s


def start_cell(server: Server, kernel_id: str, code: str) -> None:
    """Start a long cell and return once Jupyter sees the kernel busy running it."""
    c = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{kernel_id}.json"))
    c.load_connection_file()
    c.start_channels()
    try:
        c.wait_for_ready(timeout=WAIT)
        c.execute(code)
    finally:
        c.stop_channels()

    def busy():
        code_, k = server.api("GET", f"api/kernels/{kernel_id}")
        return code_ == 200 and k["execution_state"] == "busy"

    server.wait_until(busy, "the kernel running the cell")


def sigterm(server: Server) -> tuple[int, float]:
    """SIGTERM, as Kubernetes or systemd sends it: (exit status, seconds until exit)."""
    t0 = time.monotonic()
    status = server.stop()
    return status, time.monotonic() - t0


def events(server: Server, sid: str) -> list[dict]:
    code, body = server.api("GET", f"gpu-pause/api/events?session_id={sid}")
    assert code == 200, body
    return body["events"]


# -- SIGTERM -----------------------------------------------------------------------------------
def test_sigterm_checkpoints_gpu_sessions_and_they_resume_on_the_next_server(tmp_path, servers):
    # Given a server checkpointing GPU sessions at shutdown, GPU notebooks told apart by their
    # kernelspec (no GPU here: NVML cannot tell)
    server = Server(
        tmp_path,
        config="c.GpuPauseApp.shutdown_checkpoint = 'gpu'\n"
        "c.GpuPauseApp.gpu_kernelspecs = ['python3-gpu*']\n",
    )
    servers.append(server)
    add_kernelspec(server, "python3-gpu")
    server.start()
    # And two GPU notebooks holding state, one of them 256 MiB of tensors, and a CPU notebook
    big = open_notebook(server, "train.ipynb", "python3-gpu")
    server.run(big["kernel_id"], f"{STATE}; {BIG}")
    small = open_notebook(server, "eval.ipynb", "python3-gpu")
    server.run(small["kernel_id"], f"{STATE}; n = 2")
    cpu = open_notebook(server, "notes.ipynb", "python3")
    server.run(cpu["kernel_id"], STATE)
    listed = server.sessions()
    assert [listed[s["id"]]["gpu_session"] for s in (big, small, cpu)] == [True, True, False]

    # When the server gets SIGTERM (a pod eviction, a spot VM going away)
    status, took = sigterm(server)

    # Then it exits normally, within its grace period (default 25 s) and a few seconds
    assert status == 0, server.log_tail()
    assert took < 25 + SETTLE, server.log_tail()
    log = server.log.read_text(errors="replace")
    assert "shutdown: checkpointing 2 session(s) within 25 s" in log, log[-4000:]
    assert "shutdown checkpoint: 2 paused" in log, log[-4000:]

    # When a new server starts on the same records and store
    server.start()

    # Then both GPU notebooks are listed paused, by the shutdown, and the CPU one is gone
    after = server.sessions()
    assert cpu["id"] not in after
    for s in (big, small):
        again = after[s["id"]]
        assert again["state"] == "paused" and again["kernel_id"] is None, again
        assert again["checkpoint"]["id"], again
        paused = [e for e in events(server, s["id"]) if e["type"] == "paused"]
        assert [e["reason"] for e in paused] == ["shutdown"]
        assert paused[0]["detail"]["checkpoint_id"] == again["checkpoint"]["id"]

    # And both resume with their values, the tensors included
    kid = server.resume(big["id"])["kernel_id"]
    assert server.run(kid, READBACK).strip() == "45.0 hi"
    assert server.run(kid, BIG_READBACK).strip() == "256 True"
    kid = server.resume(small["id"])["kernel_id"]
    assert server.run(kid, "print(n, msg)").strip() == "2 hi"


def test_a_pause_not_done_in_time_is_recorded_and_the_server_still_stops(tmp_path, servers):
    # Given a server checkpointing every session at shutdown, with 8 s to do it
    grace = 8
    server = Server(
        tmp_path,
        config="c.GpuPauseApp.shutdown_checkpoint = 'all'\n"
        f"c.GpuPauseApp.shutdown_grace_seconds = {grace}\n",
    )
    servers.append(server)
    server.start()
    # And a plain Python notebook with state (not a GPU session: "all" takes it too)
    quiet = open_notebook(server, "quiet.ipynb")
    server.run(quiet["kernel_id"], f"{STATE}; n = 1")
    # And a notebook paused once and resumed, changed since, now running a ten-minute cell
    busy = open_notebook(server, "busy.ipynb")
    server.run(busy["kernel_id"], STATE)
    ck = server.pause(busy["id"])["checkpoint"]
    kid = server.resume(busy["id"])["kernel_id"]
    server.run(kid, "msg = 'changed since the checkpoint'")
    start_cell(server, kid, "import time; time.sleep(600)")

    # When the server gets SIGTERM
    status, took = sigterm(server)

    # Then it still exits normally, within the grace period and a few seconds
    assert status == 0, server.log_tail()
    assert grace <= took < grace + SETTLE, (took, server.log_tail())
    log = server.log.read_text(errors="replace")
    assert "shutdown checkpoint: 1 paused, 1 not done in time (busy.ipynb)" in log, log[-4000:]

    # When a new server starts on the same records and store
    server.start()

    # Then the quiet notebook is paused, by the shutdown
    after = server.sessions()
    assert after[quiet["id"]]["state"] == "paused", after[quiet["id"]]
    assert [e["reason"] for e in events(server, quiet["id"]) if e["type"] == "paused"] == [
        "shutdown"
    ]
    # And the busy one says its checkpoint was not done in time, and what remains
    s = after[busy["id"]]
    assert s["state"] == "failed", s
    assert s["error"]["reason"] == "shutdown-timeout" and s["error"]["state_intact"], s
    assert ck["id"] in s["message"] and "changes made since are lost" in s["message"], s
    assert s["checkpoint"]["id"] == ck["id"]
    last = events(server, busy["id"])[-1]
    assert (last["type"], last["reason"]) == ("pause_failed", "shutdown"), last
    assert last["detail"]["error_reason"] == "shutdown-timeout"
    assert last["detail"]["checkpoint_id"] == ck["id"] and ck["id"] in last["detail"]["message"]

    # And that earlier checkpoint resumes with its values
    kid = server.resume(busy["id"])["kernel_id"]
    assert server.run(kid, READBACK).strip() == "45.0 hi"


def test_shutdown_checkpoint_none_checkpoints_nothing(tmp_path, servers):
    # Given a server told not to checkpoint at shutdown, and a notebook holding state
    server = Server(tmp_path, config="c.GpuPauseApp.shutdown_checkpoint = 'none'\n")
    servers.append(server)
    server.start()
    s = open_notebook(server, "nb.ipynb")
    server.run(s["kernel_id"], STATE)

    # When the server gets SIGTERM and a new one starts on the same records
    status, _ = sigterm(server)
    assert status == 0, server.log_tail()
    server.start()

    # Then nothing was checkpointed: no session, no event, no manifest in the store
    assert server.sessions() == {}
    code, body = server.api("GET", "gpu-pause/api/events")
    assert code == 200 and body["events"] == [], body
    assert not list((tmp_path / "store").glob("v1/sessions/*/*.json"))


# -- SIGINT -----------------------------------------------------------------------------------
# JupyterHub's local spawners stop a server with SIGINT, and start it without a terminal, where
# jupyter_server leaves SIGINT to Python: the extension makes it stop the server as SIGTERM does.
GPU_BY_NAME = "c.GpuPauseApp.gpu_kernelspecs = ['python3*']\n"


def wait_log_alive(server: Server, text: str) -> str:
    """The first line of the log holding ``text``; fails at once if the server exits first."""

    def line():
        if server.proc.poll() is not None:
            pytest.fail(
                f"the server exited ({server.proc.returncode}) before logging {text!r}:\n"
                f"{server.log_tail()}"
            )
        lines = server.log.read_text(errors="replace").splitlines()
        return next((x for x in lines if text in x), None)

    return server.wait_until(line, repr(text))


def test_sigint_without_a_terminal_checkpoints_as_sigterm_does(tmp_path, servers):
    # Given a server started without a terminal (stdin from /dev/null, as a spawner starts
    # one), and a GPU notebook holding state
    server = Server(tmp_path, config=GPU_BY_NAME)
    servers.append(server)
    server.start()
    s = open_notebook(server, "train.ipynb")
    server.run(s["kernel_id"], STATE)

    # When the server gets SIGINT
    server.proc.send_signal(signal.SIGINT)

    # Then it stops as on SIGTERM: the shutdown checkpoint pauses the notebook, exit status 0
    assert server.exit_status() == 0, server.log_tail()
    log = server.log.read_text(errors="replace")
    assert "received signal 2, stopping" in log, log[-4000:]
    assert "shutdown checkpoint: 1 paused" in log, log[-4000:]
    assert "Interrupted..." not in log, log[-4000:]  # Python's default: exit, no cleanup

    # When a new server starts on the same records and store
    server.start()

    # Then the notebook is paused, by the shutdown, at a checkpoint that verifies
    again = server.sessions()[s["id"]]
    assert again["state"] == "paused", again
    paused = [e for e in events(server, s["id"]) if e["type"] == "paused"]
    assert [e["reason"] for e in paused] == ["shutdown"], paused
    code, body = server.api("GET", f"gpu-pause/api/sessions/{s['id']}/checkpoints")
    assert code == 200, body
    (ck,) = body["checkpoints"]
    assert (ck["id"], ck["valid"]) == (again["checkpoint"]["id"], True), ck
    # And it resumes with its values
    kid = server.resume(s["id"])["kernel_id"]
    assert server.run(kid, READBACK).strip() == "45.0 hi"


@pytest.mark.parametrize(
    ("second", "logged"),
    [
        (signal.SIGINT, "SIGINT while stopping: ignored"),
        # LocalProcessSpawner's SIGTERM, interrupt_timeout after its SIGINT: joins the checkpoint
        (signal.SIGTERM, "received signal 15, stopping"),
    ],
    ids=["sigint", "sigterm"],
)
def test_a_second_signal_while_stopping_does_not_cut_the_checkpoint_short(
    tmp_path, servers, second, logged
):
    # Given a server without a terminal, and a GPU notebook holding state and running a cell
    # that ends when the test says so (a shutdown checkpoint waits for a running cell)
    server = Server(tmp_path, config=GPU_BY_NAME + "c.GpuPauseApp.shutdown_grace_seconds = 60\n")
    servers.append(server)
    server.start()
    s = open_notebook(server, "train.ipynb")
    server.run(s["kernel_id"], STATE)
    flag = tmp_path / "cell-may-end"
    start_cell(
        server,
        s["kernel_id"],
        f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)\n"
        "msg = 'set by the cell'",
    )

    # When the server gets SIGINT, and another signal while its checkpoint waits for the cell
    server.proc.send_signal(signal.SIGINT)
    wait_log_alive(server, "shutdown: checkpointing 1 session(s) within 60 s: train.ipynb")
    server.proc.send_signal(second)

    # Then the second one is logged, and the server is still stopping, not gone
    line = wait_log_alive(server, logged)
    if second == signal.SIGINT:
        assert "shutdown_grace_seconds = 60 s" in line, line
    assert server.proc.poll() is None

    # When the cell ends
    flag.touch()

    # Then the checkpoint is completed with the cell's result, and the server exits normally
    assert server.exit_status() == 0, server.log_tail()
    assert "shutdown checkpoint: 1 paused" in server.log.read_text(errors="replace")
    server.start()
    assert server.sessions()[s["id"]]["state"] == "paused"
    kid = server.resume(s["id"])["kernel_id"]
    assert server.run(kid, READBACK).strip() == "45.0 set by the cell"


def test_on_a_terminal_sigint_still_asks_before_stopping(tmp_path, servers):
    # Given a server started by hand on a terminal: jupyter_server's own SIGINT handler
    # (a confirmation prompt) is in force
    server = Server(tmp_path, config=GPU_BY_NAME)
    servers.append(server)
    terminal, server.stdin = pty.openpty()
    try:
        server.start()
        # When the person presses Ctrl-C
        server.proc.send_signal(signal.SIGINT)
        # Then jupyter_server asks, as without the extension
        server.wait_log("Shut down this Jupyter server (y/[n])?")
        # When they answer no
        os.write(terminal, b"n\n")
        # Then the server goes on serving; the extension never took SIGINT over
        server.wait_log("resuming operation...")
        assert server.api("GET", "api/status")[0] == 200
        log = server.log.read_text(errors="replace")
        assert "SIGINT stops this server as SIGTERM does" not in log, log[-4000:]
        assert "received signal" not in log, log[-4000:]
        assert sigterm(server)[0] == 0, server.log_tail()
    finally:
        os.close(terminal)
        os.close(server.stdin)


class FakeServerApp:
    """What SigintStop uses of jupyter_server's ServerApp: ``_signal_stop`` (its SIGTERM
    handler), which sets ``_stopping``."""

    def __init__(self):
        self.stops: list[int] = []
        self._stopping = False

    def _signal_stop(self, sig, frame):
        self.stops.append(sig)
        self._stopping = True


def _prompt(sig, frame):  # stands for jupyter_server's confirmation prompt on a terminal
    pass


@pytest.mark.parametrize(
    ("sigint_before", "sigterm_stops", "installed"),
    [
        (signal.default_int_handler, True, True),  # no terminal: Python's default
        (_prompt, True, False),  # a terminal: jupyter_server's prompt, or the user's handler
        (signal.SIG_IGN, True, False),  # ignored by whoever started the server
        (signal.default_int_handler, False, False),  # no signal handling (in-process servers)
    ],
    ids=["default", "own-handler", "ignored", "sigterm-not-handled"],
)
def test_sigint_is_taken_over_only_where_python_s_default_is_left(
    sigint_before, sigterm_stops, installed, caplog
):
    app, log = FakeServerApp(), logging.getLogger("test_shutdown.sigint")
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        # Given SIGINT's handler as jupyter_server (or the user) left it
        signal.signal(signal.SIGINT, sigint_before)
        signal.signal(signal.SIGTERM, app._signal_stop if sigterm_stops else signal.SIG_DFL)

        # When the extension starts
        handler = SigintStop.install(app, 25, log)

        # Then it takes SIGINT over only from Python's default, and only where SIGTERM stops
        assert (handler is not None) is installed
        if not installed:
            assert signal.getsignal(signal.SIGINT) is sigint_before
            return
        # And a SIGINT stops the server as SIGTERM does; a second one is logged and ignored
        with caplog.at_level(logging.WARNING, logger=log.name):
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert app.stops == [signal.SIGINT]
        assert "SIGINT while stopping: ignored" in caplog.text
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


# -- preemption notice -------------------------------------------------------------------------
class Metadata:
    """A cloud metadata endpoint on 127.0.0.1, in a thread of the test.

    ``aws``: IMDSv2 required (401 without a session token from ``PUT /latest/api/token``),
    then 404 until ``notice`` is set, then 200 with an instance-action document.
    ``gcp``: 403 without ``Metadata-Flavor: Google``; ``answer`` is the status and body.
    """

    TOKEN = "imds-session-token"

    def __init__(self, flavour: str):
        self.flavour = flavour
        self.notice = False
        self.answer = (200, "FALSE")
        self.gets: list[int] = []  # status of every GET answered
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    self._send(200, owner.TOKEN)
                else:
                    self._send(400, "")

            def do_GET(self):
                code, body = owner.respond(self.headers)
                with owner.lock:
                    owner.gets.append(code)
                self._send(code, body)

            def _send(self, code, body):
                raw = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def respond(self, headers) -> tuple[int, str]:
        if self.flavour == "gcp":
            if headers.get("Metadata-Flavor") != "Google":
                return 403, "Missing Metadata-Flavor:Google header."
            return self.answer
        if headers.get("X-aws-ec2-metadata-token") != self.TOKEN:
            return 401, ""
        if not self.notice:
            return 404, "Not Found"
        return 200, json.dumps({"action": "terminate", "time": "2026-12-04T12:00:00Z"})

    @property
    def url(self) -> str:
        path = {
            "aws": "/latest/meta-data/spot/instance-action",
            "gcp": "/computeMetadata/v1/instance/preempted",
        }[self.flavour]
        return f"http://127.0.0.1:{self.httpd.server_port}{path}"

    def count(self, code: int | None = None) -> int:
        with self.lock:
            return len([c for c in self.gets if code is None or c == code])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_preemption_notice_then_jupyter_server_stop(tmp_path, servers):
    with Metadata("aws") as metadata:
        # Given a server polling an (IMDSv2) spot instance-action endpoint, checkpointing
        # every session on a notice
        server = Server(
            tmp_path,
            config="c.GpuPauseApp.shutdown_checkpoint = 'all'\n"
            f"c.GpuPauseApp.preemption_notice_url = {metadata.url!r}\n"
            "c.GpuPauseApp.preemption_poll_seconds = 0.2\n",
        )
        servers.append(server)
        server.start()
        a = open_notebook(server, "a.ipynb")
        server.run(a["kernel_id"], f"{STATE}; n = 1")
        b = open_notebook(server, "b.ipynb")
        server.run(b["kernel_id"], f"{STATE}; n = 2")

        # When the endpoint has said "no notice" (404) a few times
        server.wait_until(lambda: metadata.count(404) >= 3, "polls answered 404")

        # Then nothing was paused
        assert {s["state"] for s in server.sessions().values()} <= {"active", "idle"}

        # When the cloud posts a preemption notice
        metadata.notice = True

        # Then both sessions get paused, by the preemption
        for s in (a, b):
            assert server.wait_state(s["id"], ("paused", "failed"))["state"] == "paused"
            kinds = [(e["type"], e["reason"]) for e in events(server, s["id"])]
            assert kinds == [("paused", "preemption")], kinds
        server.wait_log("preemption checkpoint: 2 paused")
        polls = metadata.count()

        # And the server keeps running: a notebook opened now works and is left alone
        c = open_notebook(server, "c.ipynb")
        assert server.run(c["kernel_id"], "print(6 * 7)").strip() == "42"
        assert server.sessions()[c["id"]]["state"] in ("active", "idle")
        assert server.proc.poll() is None
        # (the notice was acted on once: the poller stopped asking)
        assert metadata.count() == polls

        # And a paused session resumes with its values
        kid = server.resume(a["id"])["kernel_id"]
        assert server.run(kid, "print(n, msg)").strip() == "1 hi"
        assert server.sessions()[b["id"]]["state"] == "paused"

    # When an administrator stops the server with `jupyter server stop PORT`
    stop = subprocess.run(
        [sys.executable, "-m", "jupyter_server", "stop", str(server.port)],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )

    # Then both running notebooks (a resumed, c new) are checkpointed before the server exits
    assert stop.returncode == 0, stop.stderr
    assert server.exit_status() == 0, server.log_tail()
    assert "shutdown checkpoint: 2 paused" in server.log_tail()
    sessions = tmp_path / "store" / "v1" / "sessions"
    assert [len(list((sessions / s["id"]).glob("*.json"))) for s in (a, b, c)] == [2, 1, 1]


def test_gcp_notice_is_read_with_its_header_and_errors_are_logged_once(caplog):
    # Given a GCP metadata endpoint that fails at first (HTTP 500)
    with Metadata("gcp") as metadata:
        metadata.answer = (500, "backend error")
        notices: list[str] = []
        log = logging.getLogger("test_shutdown.poller")

        async def on_notice(text):
            notices.append(text)

        async def scenario():
            poller = PreemptionPoller(metadata.url, 0.05, on_notice, log)
            poller.start()
            try:
                await wait_for(holds(lambda: metadata.count(500) >= 5), what="five failed polls")
                # Then the error was logged once, not at every poll
                failures = [r for r in caplog.records if "cannot read" in r.getMessage()]
                assert len(failures) == 1 and "HTTP 500" in failures[0].getMessage()

                # When the endpoint recovers and says "not preempted"
                metadata.answer = (200, "FALSE")
                await wait_for(holds(lambda: metadata.count(200) >= 3), what="FALSE answers")
                # Then that is no notice (and the recovery is logged)
                assert notices == []
                assert any("answers again" in r.getMessage() for r in caplog.records)

                # When the VM is preempted
                metadata.answer = (200, "TRUE")
                await wait_for(holds(lambda: notices), what="the notice")
                await asyncio.wait_for(poller._task, 5)
            finally:
                await poller.stop()

        with caplog.at_level(logging.DEBUG, logger=log.name):
            asyncio.run(scenario())

    # Then the notice was acted on once, and no request lacked the Metadata-Flavor header
    assert notices == ["TRUE"]
    assert metadata.count(403) == 0


def holds(condition):
    """``condition`` as the coroutine function tests.waiting.wait_for polls."""

    async def check():
        return condition()

    return check
