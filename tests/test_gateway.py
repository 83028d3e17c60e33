"""Remote kernels through Jupyter Enterprise Gateway, as an operator runs them: a real gateway
process (its own venv, local process proxy, an auth token), our server with
``--GatewayClient.url``, and the checkpoints in S3 (moto's server), written by the remote kernel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
import uuid
from datetime import datetime, timedelta, timezone

import psutil
import pytest
import websocket

from jupyter_gpu_pause.server.kernels.gateway import KernelKeys, issue_kernel_keys
from tests.gateway import KERNELSPEC, USER, Gateway, run_cell
from tests.moto import BUCKET, PREFIX
from tests.servers import TOKEN, Server
from tests.venvs import project_venv

pytestmark = pytest.mark.timeout(600)

MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(3, 4)).sum().backward(); opt.step()
expected = model.weight.detach().clone()
tag = "remote"
print("ok")
"""
READBACK = (
    "print(torch.equal(model.weight, expected), tag, opt.param_groups[0]['params'][0] is "
    "model.weight)"
)


@pytest.fixture
def gateway(tmp_path, s3):
    # s3 first: the gateway's kernels inherit its AWS_* variables, as a pod would have its role
    gw = Gateway(tmp_path)
    gw.start()
    yield gw
    gw.stop()


def _server(tmp_path, gateway, s3, flag="--GatewayClient.url", **gp) -> Server:
    config = {
        "store_url": f"s3://{BUCKET}/{PREFIX}",
        "store_options": {"endpoint_url": s3.endpoint, "skip_instance_cache": True},
        "capacity_provider_class": "unlimited",
        "shutdown_checkpoint": "none",
        "db_path": str(tmp_path / "records.sqlite"),
        "secret_file": str(tmp_path / "secret"),
        **gp,
    }
    text = "".join(f"c.GpuPauseApp.{k} = {v!r}\n" for k, v in config.items())
    server = Server(
        tmp_path / "server",
        config=text,
        args=(f"{flag}={gateway.url}",),
        own_paths=False,
    )
    # As an operator would: the gateway's token in the environment (jupyter_server reads it
    # from there) and a kernel user the gateway accepts.
    server.env.update(JUPYTER_GATEWAY_AUTH_TOKEN=gateway.token, KERNEL_USERNAME=USER)
    server.start()
    return server


def _open_notebook(server: Server, path: str, kernel: str = KERNELSPEC) -> dict:
    code, js = server.api(
        "POST",
        "api/sessions",
        {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel}},
        timeout=90,
    )
    assert code == 201, js
    kid = js["kernel"]["id"]
    return server.wait_until(
        lambda: next((s for s in server.sessions().values() if s["kernel_id"] == kid), None),
        "the notebook's session in gpu-pause",
    )


def _notebook_kernel(server: Server, path: str) -> str:
    code, sessions = server.api("GET", "api/sessions")
    assert code == 200
    (js,) = [js for js in sessions if js["path"] == path]
    return js["kernel"]["id"]


def _terminal_environment(server: Server, *names: str) -> list[str]:
    """The values of ``names`` in a new terminal of the server (a local process it starts, with
    its environment), '-' for a variable that is not set."""
    code, term = server.api("POST", "api/terminals")
    assert code == 200, term
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/terminals/websocket/{term['name']}",
        header=[f"Authorization: token {TOKEN}"],
        timeout=30,
    )
    try:
        values = " ".join(f'"${{{n}:--}}"' for n in names)
        # the echo of the typed line shows "%s", the answer the values: only the answer matches
        form = " ".join(["%s"] * len(names))
        ws.send(json.dumps(["stdin", f"printf 'env-says:{form}:end\\n' {values}\r"]))
        seen = ""
        while not (m := re.search(r"env-says:([^%\r\n]*):end", seen)):
            kind, *rest = json.loads(ws.recv())
            if kind == "stdout":
                seen += rest[0]
        return m.group(1).split()
    finally:
        ws.close()
        server.api("DELETE", f"api/terminals/{term['name']}")


# Run in remote kernel A: its own session, and B's with a capability A derives from its own key
FORGE = """
import json, os, urllib.error, urllib.request
from jupyter_gpu_pause.kernel import capability
key = bytes.fromhex(os.environ["KERNEL_GPU_PAUSE_KEY"])
def call(kernel_id):
    req = urllib.request.Request(
        os.environ["KERNEL_GPU_PAUSE_URL"].rstrip("/") + "/gpu-pause/api/kernel/session",
        headers={"Authorization": capability.authorization(key, kernel_id)},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())["kernel_id"]
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["reason"]
print(json.dumps({"own": call(os.environ["KERNEL_ID"]), "other": call(%r)}))
"""
KEY_AND_ID = "import os; print(os.environ['KERNEL_ID'], os.environ['KERNEL_GPU_PAUSE_KEY'])"


def _time(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def test_pause_resume_remote_torch_kernel(tmp_path, gateway, s3):
    # Given our server on the gateway, and a notebook whose remote kernel trained a model
    server = _server(tmp_path, gateway, s3, poll_interval=1)
    try:
        s = _open_notebook(server, "train.ipynb")
        old = s["kernel_id"]
        assert old in gateway.kernel_ids()  # the kernel runs behind the gateway
        assert run_cell(server, old, MODEL).strip() == "ok"
        key = run_cell(server, old, "import os; print(os.environ['KERNEL_GPU_PAUSE_KEY'])")
        # the session's GPU use is the remote agent's own report (NVML here cannot see that
        # process): on this CPU-only machine, torch holds nothing on a GPU
        gpu = server.wait_until(lambda: server.sessions()[s["id"]]["gpu"], "a GPU report")
        assert (gpu["devices"], gpu["memory_bytes"]) == ([], 0)

        # When the user pauses it over REST
        code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
        assert code == 202, body
        paused = server.wait_state(s["id"], ("paused", "failed", "active"))

        # Then the remote kernel wrote the checkpoint to S3, and the gateway stopped it
        assert paused["state"] == "paused", (paused["error"], server.log_tail())
        assert paused["checkpoint"]["bytes"] > 0
        blobs = s3.keys(f"{PREFIX}/v1/blobs/")
        assert blobs and s3.keys(f"{PREFIX}/v1/sessions/{s['id']}/")
        assert old not in gateway.kernel_ids()

        # When it is resumed
        code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume", {})
        assert code == 202, body
        back = server.wait_state(s["id"], ("active", "idle", "failed", "paused"))

        # Then a new remote kernel of the same kernelspec holds the model, the optimizer still
        # drives the model's own weights, and the notebook's Jupyter session points at it
        assert back["state"] in ("active", "idle"), back
        new = back["kernel_id"]
        assert new != old and new in gateway.kernel_ids()
        assert back["kernel_name"] == KERNELSPEC
        assert _notebook_kernel(server, "train.ipynb") == new
        assert run_cell(server, new, READBACK).split() == ["True", "remote", "True"]

        # And gp.pause() in the remote kernel reaches the server and pauses its own session
        out = run_cell(server, new, "import jupyter_gpu_pause as gp; print(gp.pause()['state'])")
        assert out.strip() == "pausing"
        assert server.wait_state(s["id"], ("paused", "failed", "active"))["state"] == "paused"
    finally:
        server.stop()

    # And the server's log shows the gateway's kernel starts without the secrets they carry
    log = server.log.read_text(errors="replace")
    assert "GatewayKernelManager started kernel" in log
    for secret in (gateway.token, TOKEN, key.strip()):
        assert secret not in log


@pytest.fixture
def project_gateway(tmp_path, s3):
    """The gateway with a second kernelspec, ``project-remote``: the project venv (ipykernel
    and numpy; no jupyter_gpu_pause, no s3fs, no store credentials), in a mount namespace
    where the server's spool folder (``spool`` next to its records: ``_server``'s db_path) is
    an empty folder, as on another machine."""
    gw = Gateway(tmp_path)
    gw.add_kernelspec("project-remote", project_venv(), tmp_path / "spool")
    gw.start()
    yield gw
    gw.stop()


def test_a_remote_kernel_without_the_package_pauses_and_resumes(tmp_path, project_gateway, s3):
    # Given our server on the gateway, and a notebook on a remote kernel whose environment
    # lacks jupyter_gpu_pause (and s3fs, and the store's credentials) and which cannot see the
    # server's files: its blobs go over its channel, through the gateway
    server = _server(tmp_path, project_gateway, s3)
    spool = str(tmp_path / "spool")
    try:
        s = _open_notebook(server, "project.ipynb", "project-remote")
        old = s["kernel_id"]
        assert old in project_gateway.kernel_ids()
        cell = "import numpy as np\nw = np.arange(3 * 2**18) * 2\nnote = 'remote'\n"
        cell += "import importlib.util as u, os\n"
        cell += f"print(u.find_spec('s3fs'), u.find_spec('fsspec'), os.listdir({spool!r}))"
        assert run_cell(server, old, cell).split() == ["None", "None", "[]"]

        # When it is paused and resumed through the gateway
        code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
        assert code == 202, body
        paused = server.wait_state(s["id"], ("paused", "failed", "active"))
        assert paused["state"] == "paused", (paused["error"], server.log_tail())
        assert s3.keys(f"{PREFIX}/v1/sessions/{s['id']}/")
        code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume", {})
        assert code == 202, body
        back = server.wait_state(s["id"], ("active", "idle", "failed", "paused"))

        # Then a new remote kernel of that kernelspec holds the variables, and the kernel API
        # works there
        assert back["state"] in ("active", "idle"), back
        new = back["kernel_id"]
        assert new != old and new in project_gateway.kernel_ids()
        assert back["pausable"] == {"ok": True}
        out = run_cell(
            server, new, "import jupyter_gpu_pause as gp\nprint(int(w.sum()), note, gp.__version__)"
        )
        assert out.split()[:2] == [str(3 * 2**18 * (3 * 2**18 - 1)), "remote"], out
    finally:
        server.stop()


def test_remote_kernel_key_reaches_only_its_own_session(tmp_path, gateway, s3):
    # Given two notebooks opened as in Lab, each on a remote kernel of the same server
    server = _server(tmp_path, gateway, s3)
    try:
        a = _open_notebook(server, "a.ipynb")["kernel_id"]
        b = _open_notebook(server, "b.ipynb")["kernel_id"]
        id_a, key_a = run_cell(server, a, KEY_AND_ID).split()
        id_b, key_b = run_cell(server, b, KEY_AND_ID).split()

        # Then each kernel runs under the id the server chose for it and holds a key of its own
        assert (id_a, id_b) == (a, b)
        assert key_a != key_b

        # When code in kernel A calls B's session with a capability derived from A's key
        calls = json.loads(run_cell(server, a, FORGE % b))

        # Then the server refuses it, while A's call for itself works
        assert calls == {"own": [200, a], "other": [403, "bad-capability"]}
        # and B still reaches its own session with its own key
        own = "import jupyter_gpu_pause as gp; print(gp.session()['kernel_id'])"
        assert run_cell(server, b, own).strip() == b

        # And a terminal, a local process of the server, gets the server's environment
        # (KERNEL_USERNAME) but no kernel key and no server URL for kernels
        names = ("KERNEL_USERNAME", "KERNEL_GPU_PAUSE_KEY", "KERNEL_GPU_PAUSE_URL")
        assert _terminal_environment(server, *names) == [USER, "-", "-"]
        # And the gateway's token is in neither process list nor remote kernel: the gateway
        # reads it from its environment (EG_AUTH_TOKEN) and passes a kernel only what it lists
        assert not any(gateway.token in arg for arg in psutil.Process(gateway.proc.pid).cmdline())
        seen = run_cell(server, a, "import os; print(os.environ.get('EG_AUTH_TOKEN', '-'))")
        assert seen.strip() == "-"
    finally:
        server.stop()

    # And the server's log holds neither kernel's key (nor a word of the gateway ignoring ids)
    log = server.log.read_text(errors="replace")
    assert log.count("GatewayKernelManager started kernel") == 2
    assert key_a not in log and key_b not in log
    assert "ignored the kernel id" not in log


def test_idle_policy_pauses_remote_kernel(tmp_path, gateway, s3):
    # Given a policy that pauses remote kernels idle for 4 s
    policy = {"name": "remote", "match": {"kernel_name": KERNELSPEC}, "idle_timeout": 4,
              "warn_before": 1, "action": "pause"}  # fmt: skip
    # (started with the short form of --GatewayClient.url)
    server = _server(
        tmp_path, gateway, s3, flag="--gateway-url", policies=[policy], poll_interval=0.5
    )
    try:
        s = _open_notebook(server, "idle.ipynb")
        run_cell(server, s["kernel_id"], "x = 41 + 1")

        # When a cell runs longer than the idle timeout
        started = datetime.now(timezone.utc)
        run_cell(server, s["kernel_id"], "import time; time.sleep(6); x += 0")
        cell_end = started + timedelta(seconds=6)  # the earliest the cell can have ended

        # Then the monitor saw it run, from the gateway's messages: the session's last activity
        # becomes the end of that cell (the monitor reads the kernel's messages on a websocket
        # of its own, which may deliver them a moment after ours), and it was not paused
        after = server.wait_until(
            lambda: (
                (x := server.sessions()[s["id"]])["last_activity"]
                and _time(x["last_activity"]) >= cell_end
                and x
            ),
            "the end of the cell in the session's last activity",
        )
        assert after["state"] in ("active", "idle"), after

        # And once idle for the timeout after the cell, the policy warns, then pauses it
        paused = server.wait_state(s["id"], ("paused", "failed"))
        assert paused["state"] == "paused", (paused["error"], server.log_tail())
        code, events = server.api("GET", f"gpu-pause/api/events?session_id={s['id']}")
        assert code == 200
        by_type = {e["type"]: e for e in events["events"] if e["reason"] == "policy:remote"}
        assert _time(by_type["warned"]["time"]) >= cell_end + timedelta(seconds=3)
        assert _time(by_type["paused"]["time"]) >= cell_end + timedelta(seconds=4)
        assert s["kernel_id"] not in gateway.kernel_ids()
    finally:
        server.stop()


def test_polling_the_api_does_not_poll_the_gateway(tmp_path, gateway, s3):
    # Given our server on the gateway with one remote notebook, settled
    server = _server(tmp_path, gateway, s3, poll_interval=1)
    try:
        s = _open_notebook(server, "polled.ipynb")
        run_cell(server, s["kernel_id"], "x = 1")
        asked = gateway.kernel_list_requests()

        # When the sessions API is polled twice a second for 10 s, as a busy panel or a script
        # would (and the idle monitor looks every second meanwhile)
        polls = 20
        for _ in range(polls):
            code, body = server.api("GET", "gpu-pause/api/sessions")
            assert code == 200 and s["id"] in {x["id"] for x in body["sessions"]}, body
            time.sleep(0.5)

        # Then the gateway was asked for its kernels a few times, not once per look
        assert gateway.kernel_list_requests() - asked <= 3
        # and a kernel the gateway loses (as when it culls one) leaves the list at a later look
        code, _ = gateway.api("DELETE", f"api/kernels/{s['kernel_id']}")
        assert code == 204

        def gone():
            return (x := server.sessions().get(s["id"])) is None or not x["kernel_id"]

        server.wait_until(gone, "the server seeing the kernel gone")
    finally:
        server.stop()


@pytest.mark.parametrize("value", ["ftp://jupyter.example/", "jupyter:8888", "http://"])
def test_bad_server_url_stops_the_server(tmp_path, value):
    # Given a server URL for remote kernels that is not an http(s) URL
    server = Server(tmp_path, args=(f"--GatewayKernels.server_url={value}",))
    # When the server starts, then it stops, naming the setting and its value
    server.launch()
    assert server.exit_status() != 0
    log = server.log.read_text()
    assert f"GatewayKernels.server_url = {value!r}: is not an http:// or https:// URL" in log


def test_remote_kernel_killed_during_pause(tmp_path, gateway, s3):
    # Given a remote kernel whose pause is under way: an on_pause hook says so in a file and
    # keeps the capture running
    server = _server(tmp_path, gateway, s3)
    marker = tmp_path / "capturing"
    try:
        s = _open_notebook(server, "doomed.ipynb")
        run_cell(
            server,
            s["kernel_id"],
            "import os, pathlib, time, jupyter_gpu_pause as gp\n"
            "x = 42\n"
            "@gp.on_pause\n"
            "def long_capture():\n"
            f"    pathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\n"
            "    while True:\n"
            "        time.sleep(0.1)\n",
        )
        code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
        assert code == 202, body
        pid = int(server.wait_until(lambda: marker.exists() and marker.read_text(), "capture"))

        # When the kernel's process is killed (the gateway is not asked)
        os.kill(pid, signal.SIGKILL)

        # Then the pause ends as failed, saying the kernel's memory is lost, instead of hanging
        failed = server.wait_state(s["id"], ("failed", "paused", "active"))
        assert failed["state"] == "failed", failed
        assert failed["error"]["reason"] == "kernel-died"
        assert failed["error"]["state_intact"] is False
        assert "memory is lost" in failed["error"]["message"]
        # and the gateway's restart of it, under the same id, is empty
        assert failed["kernel_id"] == s["kernel_id"]
        assert run_cell(server, s["kernel_id"], "print('x' in globals())").strip() == "False"
    finally:
        server.stop()


class GatewayOwnIds:
    """Stands in for jupyter_server's gateway kernel manager in front of a gateway that ignores
    the KERNEL_ID it is sent (Enterprise Gateway 3.3 honours it: see the tests above)."""

    def __init__(self):
        self.requests: list[tuple[str | None, dict]] = []

    async def start_kernel(self, *, kernel_id=None, **kwargs):
        self.requests.append((kernel_id, kwargs))
        return kernel_id or str(uuid.uuid4())


def test_a_gateway_ignoring_the_chosen_id_gives_no_key_for_the_kernel(caplog):
    # Given the server's key issuing on a gateway that picks kernel ids itself
    km, log = GatewayOwnIds(), logging.getLogger("test_gateway.keys")
    keys = KernelKeys("http://jupyter.example/", log)
    issue_kernel_keys(km, keys)

    # When two notebooks' kernels start, and a kernel the gateway already runs is attached
    with caplog.at_level(logging.WARNING, logger="test_gateway.keys"):
        started = [
            asyncio.run(km.start_kernel(kernel_name="py", path="a.ipynb", env={"JPY_X": "a"}))
            for _ in range(2)
        ]
        asyncio.run(km.start_kernel(kernel_id="existing", kernel_name="py"))

    # Then each start asked for an id of its own, with the key of that id and the caller's env
    (_, first), (_, second), attached = km.requests
    for request in (first, second):
        env = request["env"]
        assert env["JPY_X"] == "a" and env["KERNEL_GPU_PAUSE_URL"] == "http://jupyter.example/"
        assert env["KERNEL_GPU_PAUSE_KEY"] == keys.key(env["KERNEL_ID"]).hex()
    assert first["env"]["KERNEL_ID"] != second["env"]["KERNEL_ID"]
    # and the attached kernel got nothing: no id, no key
    assert attached == ("existing", {"kernel_name": "py"})
    # And the kernels hold keys of ids that are not theirs, never the key of their own id
    for request, kernel_id in zip((first, second), started, strict=True):
        assert request["env"]["KERNEL_ID"] != kernel_id
        assert request["env"]["KERNEL_GPU_PAUSE_KEY"] != keys.key(kernel_id).hex()
    # and the server said so once
    warnings = [r for r in caplog.records if "ignored the kernel id" in r.getMessage()]
    assert len(warnings) == 1
