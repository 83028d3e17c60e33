"""A real Jupyter Enterprise Gateway for the gateway tests: ``jupyter-enterprisegateway`` 3.3.0
in its own virtual environment (it pins older jupyter packages than ours), run as its own
process on 127.0.0.1 with its local process proxy and an auth token (from its environment, as
docs/gateway.md tells operators: never on the command line).

The venv lives in ``.venv-gateway/`` at the repository root (``make gateway-venv`` makes it; so
does the first test that needs it, ~30 s with a warm pip cache). Its kernelspec runs this
project's Python (torch, ipykernel) with the checkout on PYTHONPATH, so a remote kernel has
our agent.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import websocket

from tests.cells import CellOutput
from tests.servers import TOKEN
from tests.venvs import project_kernelspec

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-gateway"
EG = VENV / "bin" / "jupyter-enterprisegateway"
EG_VERSION = "3.3.0"
KERNELSPEC = "gpu-remote"
USER = "alice"  # the gateway refuses kernels for root
WAIT = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_venv() -> Path:
    """The gateway's venv, made if missing (the same commands as ``make gateway-venv``).
    Skips when it cannot be made, unless under CI (``CI`` set), where that fails the test."""
    if EG.exists():
        return EG
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
        pip = str(VENV / "bin" / "pip")
        subprocess.run(
            [pip, "install", "-q", f"jupyter_enterprise_gateway=={EG_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as e:
        why = getattr(e, "stderr", b"") or b""
        message = (
            f"cannot make the Enterprise Gateway venv {VENV} ({e}): "
            f"{why.decode(errors='replace')[-1000:]}"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return EG


class Gateway:
    """``jupyter-enterprisegateway`` on 127.0.0.1 with one kernelspec, ``gpu-remote``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = f"gateway-{uuid.uuid4().hex}"
        self.log = tmp / "gateway.log"
        spec = tmp / "share" / "kernels" / KERNELSPEC
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Remote Python (torch)",
                    "language": "python",
                    # the kernel's own store credentials, as a kernel image or pod would hold
                    # them (the gateway does not pass its environment on)
                    "env": {
                        "PYTHONPATH": str(ROOT),
                        **{k: v for k, v in os.environ.items() if k.startswith("AWS_")},
                    },
                    "metadata": {
                        "process_proxy": {
                            "class_name": "enterprise_gateway.services.processproxies."
                            "processproxy.LocalProcessProxy"
                        }
                    },
                }
            )
        )
        self.proc: subprocess.Popen | None = None

    def add_kernelspec(self, name: str, venv: Path, hide: Path | None = None) -> None:
        """A kernelspec of the gateway's running ``venv``'s Python with nothing of the checkout
        on its path and no store credentials: a kernel image that has never heard of
        jupyter_gpu_pause (``venvs.project_kernelspec``; ``hide``: a folder of this machine it
        does not see, as on another machine)."""
        proxy = "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy"
        project_kernelspec(
            self.tmp / "share" / "kernels",
            name,
            venv,
            hide=hide,
            metadata={"process_proxy": {"class_name": proxy}},
        )

    def start(self) -> None:
        env = {
            **os.environ,
            "JUPYTER_PATH": str(self.tmp / "share"),
            "JUPYTER_RUNTIME_DIR": str(self.tmp / "gw-runtime"),
            "JUPYTER_DATA_DIR": str(self.tmp / "gw-data"),
            "JUPYTER_CONFIG_DIR": str(self.tmp / "gw-config"),
            # the gateway's token from its environment (its auth_token trait reads
            # EG_AUTH_TOKEN): on the command line, every local user would see it in ps
            "EG_AUTH_TOKEN": self.token,
        }
        cmd = [
            str(ensure_venv()),
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port_retries=0",
            "--EnterpriseGatewayApp.list_kernels=True",
        ]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"the gateway exited: {self.log.read_text()[-3000:]}")
            try:
                if self.api("GET", "api/kernelspecs")[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"the gateway did not answer in {WAIT}s: {self.log.read_text()[-3000:]}")

    def api(self, method: str, path: str):
        req = urllib.request.Request(
            f"{self.url}/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, None

    def kernel_list_requests(self) -> int:
        """How many times the gateway was asked for its kernel list or one kernel's model, as
        its access log shows (``200 GET /api/kernels``), its own test requests included."""
        lines = self.log.read_text(errors="replace").splitlines()
        return sum(1 for x in lines if re.search(r" GET /api/kernels(/[0-9a-f-]+)? \(", x))

    def kernel_ids(self) -> set[str]:
        code, kernels = self.api("GET", "api/kernels")
        assert code == 200
        return {k["id"] for k in kernels}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def run_cell(server, kernel_id: str, code: str, timeout: float = WAIT) -> str:
    """Run a cell as JupyterLab does: through the server's kernel websocket, which jupyter_server
    relays to the gateway. Returns the cell's stdout (AssertionError if it failed)."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels",
        header=[f"Authorization: token {TOKEN}"],
        timeout=timeout,
    )
    try:
        msg_id = uuid.uuid4().hex
        ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "session": uuid.uuid4().hex,
                        "username": "test",
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": code, "silent": False, "store_history": True,
                                "user_expressions": {}, "allow_stdin": False},
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )  # fmt: skip
        output, reply = CellOutput(), None
        idle = False
        while not (idle and reply):
            raw = ws.recv()
            if isinstance(raw, bytes):
                continue
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["channel"] == "shell":
                reply = msg
            elif msg["channel"] == "iopub":
                output(msg)
                idle = msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
        return output.result(reply)
    finally:
        ws.close()
