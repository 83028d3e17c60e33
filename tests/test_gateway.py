"""Remote kernels through Jupyter Enterprise Gateway, as an operator runs them: a real gateway
process (its own venv, local process proxy, an auth token), our server with
``--GatewayClient.url``, and the checkpoints in S3 (moto's server), written by the remote kernel.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta, timezone

import pytest

from tests.gateway import KERNELSPEC, USER, Gateway, run_cell
from tests.moto import BUCKET, PREFIX
from tests.servers import TOKEN, Server

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


def _open_notebook(server: Server, path: str) -> dict:
    code, js = server.api(
        "POST",
        "api/sessions",
        {"path": path, "type": "notebook", "name": path, "kernel": {"name": KERNELSPEC}},
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
