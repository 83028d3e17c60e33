"""Idle policies at their edges: whose server it is (``match.user``), a kernel that never
answers, and a policy pause that is refused before it starts."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import sys
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.store.format import parse_iso
from tests.fakes import FakeProbe, StubbornKernelManager
from tests.test_faults import STATE
from tests.waiting import wait_for


def short(name="short", idle=2, warn=1, **match) -> dict:
    return {
        "name": name,
        "match": match,
        "idle_timeout": idle,
        "warn_before": warn,
        "action": "pause",
    }


@pytest.fixture
def policies():
    return [short()]


@pytest.fixture
def gp_config(gp_config, policies):
    FakeProbe.readings = {}
    gp_config.update(policies=policies, poll_interval=0.3, gpu_probe_class="tests.fakes.FakeProbe")
    return gp_config


@pytest.mark.parametrize(
    "policies", [[short(name="mine", user=getpass.getuser()), short(name="anyone-else")]]
)
async def test_a_policy_for_this_servers_user_pauses(lab):
    # Given a policy matching the user this server runs as (no JUPYTERHUB_USER here)
    code, body = await lab.api("GET", "policies")
    assert body["monitor"]["user"] == getpass.getuser()
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # Then it is the policy that applies, and it pauses the idle notebook
    paused = await lab.wait_state(s["id"], states=("paused",))
    event = await lab.event(s["id"], "paused")
    assert event["reason"] == "policy:mine" and paused["checkpoint"]


@pytest.mark.parametrize("policies", [[short(name="theirs", user="someone-else")]])
async def test_a_policy_for_another_user_never_acts(lab):
    # Given a policy for another user only, and an idle notebook
    s = await lab.open_notebook()
    opened = datetime.now(timezone.utc)
    # When the monitor has looked at it long past the idle timeout
    await lab.monitor_passes(after=opened + timedelta(seconds=4), passes=2)
    # Then no policy governs it and nothing happened to it
    cur = await lab.session(s["id"])
    assert cur["policy"] is None and cur["pause_at"] is None, cur
    assert cur["state"] in ("active", "idle")
    assert await lab.events(s["id"]) == [] and lab.kernel_alive(s["kernel_id"])


@pytest.fixture
def hub_user(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")


@pytest.mark.parametrize("policies", [[short(name="ada-only", user="ada")]])
async def test_under_jupyterhub_the_hub_user_is_the_servers_user(hub_user, lab):
    # Given a server started by JupyterHub for user ada (JUPYTERHUB_USER), and her policy
    code, body = await lab.api("GET", "policies")
    assert body["monitor"]["user"] == "ada"
    s = await lab.open_notebook()
    # Then her policy pauses her idle notebook
    assert (await lab.wait_state(s["id"], states=("paused",)))["state"] == "paused"


@pytest.mark.parametrize("policies", [[short(idle=2, warn=1)]])
@pytest.mark.gp_config(kernel_answer_timeout=120)
async def test_a_kernel_that_never_answers_does_not_hold_up_the_others(lab):
    # Given two idle notebooks, the first with its kernel process stopped (it never answers)
    stuck = await lab.open_notebook("stuck.ipynb")
    pid = lab.app.kernel_manager.get_kernel(stuck["kernel_id"]).provisioner.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        other = await lab.open_notebook("other.ipynb")
        await lab.run(other["kernel_id"], STATE)
        # Then the second is warned and paused while the first one's dry run still waits
        # (a dry run waits up to 30 s for a kernel: it no longer holds the monitor's pass)
        await lab.wait_state(other["id"], states=("paused",), timeout=25)
        assert await lab.events(stuck["id"], "warned") == []
        assert lab.kernel_alive(stuck["kernel_id"])
    finally:
        os.kill(pid, signal.SIGCONT)
    # And once the first kernel runs again, it is warned and handled like any other
    await wait_for(lambda: lab.events(stuck["id"], "warned"), timeout=60)


@pytest.mark.parametrize("policies", [[short(name="everything", idle=2, warn=1)]])
async def test_a_kernel_the_agent_cannot_pause_is_never_tried(lab, jp_data_dir):
    # Given a policy that matches a kernel whose language the agent cannot pause (R)
    spec = jp_data_dir / "kernels" / "fake-r"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Fake R", "language": "R"})
    )
    opened = datetime.now(timezone.utc)
    s = await lab.open_notebook("analysis.ipynb", kernel_name="fake-r")
    # When the monitor has looked at it past its idle timeout and warning
    await lab.monitor_passes(after=opened + timedelta(seconds=4), passes=2)
    # Then its session says why it cannot be paused, and no pause was tried or announced
    # (docs/policies.md: "unpausable" is "keep" by default)
    cur = await lab.session(s["id"])
    assert cur["pausable"]["reason"] == "unsupported-kernel", cur
    assert "not supported for r kernels" in cur["message"]
    assert cur["pause_at"] is None and cur["error"] is None, cur
    assert await lab.events(s["id"], "pause_failed") == []
    assert [e["type"] for e in await lab.events(s["id"])] == ["unpausable"]
    assert (await lab.run(s["kernel_id"], "print(6 * 7)")).strip() == "42"


@pytest.fixture
def jp_server_config(jp_server_config, request):
    if request.node.get_closest_marker("stubborn_kernels"):
        jp_server_config["ServerApp"]["kernel_manager_class"] = "tests.fakes.StubbornKernelManager"
        StubbornKernelManager.refuse = set()
    return jp_server_config


@pytest.mark.stubborn_kernels
@pytest.mark.parametrize("policies", [[{**short(name="reaper", idle=2, warn=1), "action": "cull"}]])
async def test_a_cull_that_fails_says_why_and_is_retried(lab):
    # Given a cull policy and a kernel that refuses to shut down
    s = await lab.open_notebook()
    StubbornKernelManager.refuse.add(s["kernel_id"])

    async def failures(n):
        found = await lab.events(s["id"], "cull_failed")
        return found if len(found) >= n else None

    # When the policy tries to cull it
    first, *_ = await wait_for(lambda: failures(1))
    # Then the session and an event say why, and the kernel still runs
    assert first["reason"] == "policy:reaper" and first["detail"]["error_reason"] == "cull"
    assert "did not confirm the shutdown" in first["detail"]["message"]
    cur = await lab.session(s["id"])
    assert cur["error"]["reason"] == "cull" and "Cull by policy reaper failed" in cur["message"]
    assert lab.kernel_alive(s["kernel_id"])
    # And it is tried again later, and succeeds once the kernel can stop
    StubbornKernelManager.refuse.clear()
    (culled,) = await wait_for(lambda: lab.events(s["id"], "culled"), timeout=60)
    assert parse_iso(culled["time"]) > parse_iso(first["time"])
    assert not lab.kernel_alive(s["kernel_id"])


SLOW_EXIT = """
import atexit
def _wait_for_the_gate(gate={gate!r}):
    with open(gate) as f:  # a FIFO: blocks until the test opens it for writing
        f.read()
atexit.register(_wait_for_the_gate)
"""


@pytest.mark.parametrize("policies", [[short(idle=2, warn=1)]])
async def test_a_server_stopping_mid_shutdown_lets_the_policy_pause_finish(lab, tmp_path):
    # Given a notebook whose kernel takes its time to exit (an atexit handler of the user's)
    gate = tmp_path / "exit-gate"
    os.mkfifo(gate)
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + SLOW_EXIT.format(gate=str(gate)))

    # When the policy's pause has saved its checkpoint and is shutting the kernel down
    async def shutting_down():
        cur = await lab.session(s["id"])
        return cur if "shutting the kernel down" in (cur["message"] or "") else None

    cur = await wait_for(shutting_down, timeout=60)
    assert cur["state"] == "pausing"
    # and the server stops meanwhile (SIGTERM: the extensions stop, then every kernel)
    (ext,) = lab.app.extension_manager.extension_apps["jupyter_gpu_pause"]
    stopping = asyncio.ensure_future(ext.stop_extension())
    await asyncio.to_thread(gate.write_text, "exit now")
    await stopping
    await lab.app.cleanup_kernels()

    # Then the pause ran to its end: the session is paused on its checkpoint
    record = ext.lifecycle.table.sessions[s["id"]]
    assert record.state == "paused", record.message
    assert record.checkpoint and record.checkpoint["id"] in cur["message"]
    assert not lab.kernel_alive(s["kernel_id"])
