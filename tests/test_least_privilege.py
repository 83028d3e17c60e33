"""Least privilege: a kernel runs arbitrary user code, so it holds no credential of the server's,
only a capability that reads and pauses its own session; and what we write to disk is private.

The probes run *inside* real kernels, as a hostile pip package would: they read the environment
and use whatever credential the kernel has against the server's other APIs."""

from __future__ import annotations

import json
import os
import stat

import pytest

PROBE = r"""
import json, os, urllib.error, urllib.request
from jupyter_gpu_pause.kernel import api, capability
base = os.environ["JUPYTER_GPU_PAUSE_URL"].rstrip("/")
mine = capability.authorization(api._kernel_key(), api._kernel_id())
def status(method, path, header=mine, body=None):
    req = urllib.request.Request(
        base + path, method=method, headers={"Authorization": header},
        data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
"""

# What the kernel's credential may not do: (name, method, path, header: "mine" or "other's id")
FORBIDDEN = [
    ("contents", "GET", "/api/contents", "mine"),
    ("kernels", "GET", "/api/kernels", "mine"),
    ("sessions", "GET", "/api/sessions", "mine"),
    ("terminals", "POST", "/api/terminals", "mine"),
    ("all GPU sessions", "GET", "/gpu-pause/api/sessions", "mine"),
    ("another session's pause", "POST", "/gpu-pause/api/sessions/{other}/pause", "mine"),
    ("another kernel's session", "GET", "/gpu-pause/api/kernel/session", "other"),
    ("another kernel's pause", "POST", "/gpu-pause/api/kernel/pause", "other"),
    ("as a token", "GET", "/gpu-pause/api/sessions", "token"),
]


def probe_cell(other: dict) -> str:
    lines = [PROBE, "codes = {}"]
    for name, method, path, header in FORBIDDEN:
        if header == "other":
            h = f"capability.authorization(api._kernel_key(), {other['kernel_id']!r})"
        elif header == "token":  # the capability passed off as a Jupyter token
            h = "'token ' + mine.split(' ', 1)[1]"
        else:
            h = "mine"
        lines.append(
            f"codes[{name!r}] = status({method!r}, {path.format(other=other['id'])!r}, {h}"
            + (", {})" if method == "POST" else ")")
        )
    lines.append("print(json.dumps(codes))")
    return "\n".join(lines)


async def kernel_environment_leaks(lab, kernel_id: str) -> list[str]:
    """Names of the kernel's environment variables whose value holds the server's token."""
    token = lab.app.identity_provider.token
    assert token  # the test server runs with a token, as a real one does
    out = await lab.run(
        kernel_id,
        f"import os, json; print(json.dumps(sorted(k for k, v in os.environ.items() "
        f"if {token!r} in v)))",
    )
    return json.loads(out)


async def test_a_kernel_holds_no_server_token_and_reaches_only_its_own_session(lab):
    # Given two notebooks, each with a running kernel
    mine = await lab.open_notebook("mine.ipynb")
    other = await lab.open_notebook("other.ipynb")
    # Then no environment variable of the kernel holds the server's token
    assert await kernel_environment_leaks(lab, mine["kernel_id"]) == []
    # When code in the first notebook uses the kernel's own credential against the server
    codes = json.loads(await lab.run(mine["kernel_id"], probe_cell(other)))
    # Then every API but its own session refuses it
    assert codes == {name: 403 for name, *_ in FORBIDDEN}, codes
    # And the other notebook was not paused, and no terminal was opened
    assert (await lab.session(other["id"]))["state"] in ("active", "idle")
    assert lab.kernel_alive(other["kernel_id"])
    assert list(lab.app.web_app.settings["terminal_manager"].terminals) == []
    # And the first notebook still reads its own session through the kernel API and magic
    out = await lab.run(
        mine["kernel_id"], "import jupyter_gpu_pause as gp\nprint(gp.session()['id'])"
    )
    assert out.strip() == mine["id"]
    out = await lab.run(mine["kernel_id"], "%load_ext jupyter_gpu_pause\n%gpu_pause status")
    assert out.startswith("mine.ipynb: active")


async def test_the_capability_works_after_a_resume_and_dies_with_the_old_kernel(lab):
    # Given a notebook that pauses itself from a cell
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "import jupyter_gpu_pause as gp\nx = 41")
    old = await lab.run(
        s["kernel_id"],
        "from jupyter_gpu_pause.kernel import api, capability\n"
        "print(capability.authorization(api._kernel_key(), api._kernel_id()))",
    )
    out = await lab.run(s["kernel_id"], "print(gp.pause()['state'])")
    assert out.strip() == "pausing"
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    # When it is resumed into a new kernel
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    kid = back["kernel_id"]
    assert back["state"] in ("active", "idle") and kid != s["kernel_id"]
    # Then the new kernel holds no server token either, and its kernel API works
    assert await kernel_environment_leaks(lab, kid) == []
    out = await lab.run(kid, "print(gp.session()['id'], gp.session()['kernel_id'], x + 1)")
    assert out.split() == [s["id"], kid, "42"]
    out = await lab.run(kid, "%load_ext jupyter_gpu_pause\n%gpu_pause status")
    assert out.startswith("nb.ipynb: active")
    # And the old kernel's capability, presented now, opens nothing
    cell = PROBE + f"\nprint(status('GET', '/gpu-pause/api/kernel/session', {old.strip()!r}))"
    assert (await lab.run(kid, cell)).strip() == "403"
    # And the new kernel pauses itself again
    assert (await lab.run(kid, "print(gp.pause()['state'])")).strip() == "pausing"
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


async def test_kernel_endpoints_refuse_requests_without_a_capability(lab):
    # Given a running notebook
    s = await lab.open_notebook()
    # When the kernel endpoints are called with the user's token (not a kernel's capability),
    # with a forged capability, or with nothing
    for headers in (
        None,  # jp_fetch's own token
        {"Authorization": "jupyter-gpu-pause-kernel " + s["kernel_id"] + ":" + "0" * 64},
        {"Authorization": "jupyter-gpu-pause-kernel garbage"},
    ):
        kw = {"headers": headers} if headers else {}
        r = await lab.fetch(
            "gpu-pause", "api", "kernel", "pause", method="POST", body="{}", raise_error=False, **kw
        )
        # Then they answer 403 in JSON and pause nothing
        assert r.code == 403, r.body
        assert json.loads(r.body)["reason"] in ("no-capability", "bad-capability")
    assert (await lab.session(s["id"]))["state"] in ("active", "idle")


@pytest.fixture
def gp_config():
    return {}  # every path at its default, under the data dir, as a new user gets them


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_what_we_write_is_private_to_its_owner(lab, jp_data_dir):
    # Given a notebook paused with the default store, records and key
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "import numpy as np\nw = np.ones(100_000)")
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    # Then every folder we made is 0700 and every file 0600: checkpoints hold user data,
    # records hold paths and variable names, the key signs what a resume unpickles
    root = jp_data_dir / "gpu_pause"
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"secret", "gpu_pause.sqlite"}
    assert any(p.suffix == ".json" for p in files) and len(files) >= 5
    assert {str(p): oct(_mode(p)) for p in folders if _mode(p) != 0o700} == {}
    assert {str(p): oct(_mode(p)) for p in files if _mode(p) != 0o600} == {}
