"""Idle policies acting on real kernels with short timeouts: warn, then pause, cull or nothing."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.monitor.policy import PolicyError, parse_policies
from jupyter_gpu_pause.store.format import parse_iso
from tests.fakes import FakeProbe
from tests.test_faults import READBACK, READBACK_OK, STATE, manifests
from tests.waiting import wait_for


def policy(name="short", action="pause", idle=3, warn=2, **extra) -> dict:
    return {
        "name": name,
        "match": {"kernel_name": "python3"},
        "idle_timeout": idle,
        "warn_before": warn,
        "action": action,
        **extra,
    }


@pytest.fixture
def policies():
    return [policy()]


@pytest.fixture
def gp_config(gp_config, policies):
    FakeProbe.readings = {}
    gp_config.update(policies=policies, poll_interval=0.3, gpu_probe_class="tests.fakes.FakeProbe")
    return gp_config


def now() -> datetime:
    return datetime.now(timezone.utc)


async def test_idle_kernel_is_warned_then_paused(lab, store_dir):
    # Given an idle notebook with a generator that cannot survive a pause
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + "\nlines = (x for x in 'ab')")

    # Then it is first warned: idle, with pause_at and the policy, and an event naming the loss
    (event,) = await wait_for(lambda: lab.events(s["id"], "warned"))
    cur = await wait_for(lambda: _warned_session(lab, s))
    assert cur["state"] == "idle" and cur["policy"] == "short"
    assert "pauses at" in cur["message"] and "short" in cur["message"]
    assert event["reason"] == "policy:short"
    assert [x["name"] for x in event["detail"]["skipped"]] == ["lines"]
    assert "lines" in event["detail"]["message"]
    # And then paused, with a checkpoint, by the policy
    paused = await lab.wait_state(s["id"], states=("paused",))
    assert manifests(store_dir, s["id"]) == [paused["checkpoint"]["id"]]
    event = await lab.event(s["id"], "paused")
    assert event["reason"] == "policy:short"
    assert not lab.kernel_alive(s["kernel_id"])
    # And the dry run behind the warning did not count as activity nor reach the user's history
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"], states=("active", "idle"))
    out = await lab.run(back["kernel_id"], READBACK)
    assert out.strip() == READBACK_OK


async def test_busy_kernel_is_never_paused(lab):
    # Given a kernel running a cell far longer than the idle timeout (3 s)
    s = await lab.open_notebook()
    started = now()
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(120)")
    # When the monitor looks at it well after the idle timeout, the cell still running
    await lab.monitor_passes(after=started + timedelta(seconds=5), passes=2)
    # Then it was neither warned nor paused
    cur = await lab.session(s["id"])
    assert cur["state"] == "active" and cur["pause_at"] is None, cur
    assert await lab.events(s["id"]) == []
    assert lab.app.kernel_manager.get_kernel(s["kernel_id"]).execution_state == "busy"
    await lab.app.kernel_manager.interrupt_kernel(s["kernel_id"])


# A 5 s warning, so a loaded machine still runs the second cell inside it
@pytest.mark.parametrize("policies", [[policy(idle=6, warn=5)]])
async def test_activity_clears_a_warning(lab):
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    await wait_for(lambda: _pause_at(lab, s))
    # When the user runs a cell during the warning
    await lab.run(s["kernel_id"], "x = 2")
    # Then the warning is gone and the idle clock restarted
    cur = await lab.session(s["id"])
    assert cur["pause_at"] is None and cur["state"] == "active"
    assert cur["idle_seconds"] < 1.5
    assert lab.kernel_alive(s["kernel_id"])


async def _warned_session(lab, s):
    cur = await lab.session(s["id"])
    return cur if cur["pause_at"] else None


async def _pause_at(lab, s):
    return (await lab.session(s["id"]))["pause_at"]


@pytest.mark.parametrize("policies", [[policy(idle=6, warn=5, max_keepalive=30)]])
async def test_keepalive_postpones_and_is_bounded(lab):
    s = await lab.open_notebook()
    await wait_for(lambda: _pause_at(lab, s))
    # When the user asks for more than the policy allows, it is refused naming the limit
    code, err = await lab.api("POST", f"sessions/{s['id']}/keepalive", {"seconds": 31})
    assert code == 400 and err["reason"] == "keepalive-too-long"
    assert "30 s" in err["message"] and "max_keepalive" in err["message"]
    code, err = await lab.api("POST", f"sessions/{s['id']}/keepalive", {"seconds": -1})
    assert code == 400
    # When the user keeps it alive for 10 s (the warned pause was due within 5 s)
    asked = now()
    code, body = await lab.api("POST", f"sessions/{s['id']}/keepalive", {"seconds": 10})
    assert code == 200 and body["pause_at"] is None
    event = await lab.event(s["id"], "keepalive")
    assert event["detail"]["seconds"] == 10
    until = parse_iso(event["detail"]["until"])
    # Then once the warned time has passed, it is still running
    await lab.monitor_passes(after=asked + timedelta(seconds=6.5), passes=2)
    assert (await lab.session(s["id"]))["state"] in ("active", "idle")
    # And it is warned again for the end of the keep-alive, and paused then
    paused = await lab.wait_state(s["id"], states=("paused",), timeout=40)
    assert paused["state"] == "paused"
    later = (await lab.events(s["id"], "warned"))[-1]
    assert parse_iso(later["detail"]["pause_at"]) == until


@pytest.mark.parametrize("policies", [[policy(action="cull")]])
async def test_cull_loses_the_kernel_without_a_checkpoint_and_says_so(lab, store_dir):
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")

    async def culled():
        return await lab.events(s["id"], "culled")

    (event,) = await wait_for(culled)
    assert event["reason"] == "policy:short"
    assert "without a checkpoint" in event["detail"]["message"]
    warning = await lab.event(s["id"], "warned")
    assert "no checkpoint" in warning["detail"]["message"]
    assert not lab.kernel_alive(s["kernel_id"])
    assert manifests(store_dir, s["id"]) == []
    code, _ = await lab.api("GET", f"sessions/{s['id']}")
    assert code == 404


@pytest.mark.parametrize("policies", [[policy(action="warn", idle=1, warn=0)]])
async def test_warn_only_warns(lab):
    s = await lab.open_notebook()
    (warned,) = await wait_for(lambda: lab.events(s["id"], "warned"))
    # When the monitor has looked at it again, well past the idle timeout
    await lab.monitor_passes(after=parse_iso(warned["time"]) + timedelta(seconds=2), passes=3)
    assert lab.kernel_alive(s["kernel_id"])
    cur = await lab.session(s["id"])
    assert cur["state"] == "idle" and cur["pause_at"] is None
    assert [e["type"] for e in await lab.events(s["id"])] == ["warned"]


@pytest.mark.parametrize(
    "policies",
    [
        [
            policy(name="leave-alone", action="none", idle=1, warn=0),
            policy(name="pauser", idle=1, warn=0),
        ],
    ],
)
async def test_first_matching_policy_wins(lab):
    # Given two policies that both match, the first saying "none"
    code, body = await lab.api("GET", "policies")
    assert [p["name"] for p in body["policies"]] == ["leave-alone", "pauser"]
    assert body["policies"][1]["max_keepalive"] == 14400
    s = await lab.open_notebook()
    await lab.monitor_passes(after=now() + timedelta(seconds=2), passes=2)
    # Then the session is left alone
    cur = await lab.session(s["id"])
    assert cur["policy"] is None and cur["pause_at"] is None
    assert lab.kernel_alive(s["kernel_id"]) and await lab.events(s["id"]) == []


@pytest.mark.parametrize("policies", [[policy(idle=2, warn=1, count_connected=False)]])
async def test_connected_browser_keeps_the_kernel_when_count_connected_is_false(lab, jp_ws_fetch):
    s = await lab.open_notebook()
    ws = await jp_ws_fetch("api", "kernels", s["kernel_id"], "channels")
    # When the monitor looks at it long after the idle timeout (2 s)
    await lab.monitor_passes(after=now() + timedelta(seconds=3), passes=2)
    assert lab.kernel_alive(s["kernel_id"])
    assert (await lab.session(s["id"]))["pause_at"] is None
    # Once the browser disconnects, the policy applies
    ws.close()
    await lab.wait_state(s["id"], states=("paused",), timeout=20)


async def test_monitor_survives_a_kernel_dying_under_it(lab):
    # Given a notebook whose kernel is killed at once (before its idle timeout can pause it,
    # however slow the machine), while the monitor watches it
    doomed = await lab.open_notebook("doomed.ipynb")
    os.kill(
        lab.app.kernel_manager.get_kernel(doomed["kernel_id"]).provisioner.process.pid,
        signal.SIGKILL,
    )
    await lab.app.kernel_manager.shutdown_kernel(doomed["kernel_id"], now=True)
    # And another notebook with state
    s = await lab.open_notebook("kept.ipynb")
    await lab.run(s["kernel_id"], STATE)
    # Then the monitor goes on and pauses the other
    await lab.wait_state(s["id"], states=("paused",))
    # And the killed one, which had no checkpoint, is no longer listed
    code, body = await lab.api("GET", "sessions")
    assert code == 200 and doomed["id"] not in [x["id"] for x in body["sessions"]]


@pytest.mark.parametrize(
    "policies",
    [
        [
            {
                "name": "gpu",
                "match": {"uses_gpu": True},
                "idle_timeout": 2,
                "warn_before": 1,
                "gpu_idle_below": 5,
            }
        ]
    ],
)
async def test_gpu_busy_from_a_background_thread_is_not_idle(lab):
    # Given a kernel whose cell finished but whose GPU runs at 90 % (fake probe)
    s = await lab.open_notebook()
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 15_000_000_000, 90.0, [0])
    # When the monitor has looked at it for longer than the idle timeout (2 s)
    await lab.monitor_passes(after=now() + timedelta(seconds=3), passes=2)
    cur = await lab.session(s["id"])
    # Then it counts as a GPU session that is not idle
    assert cur["gpu"] == {
        "devices": ["GPU-0"],
        "indices": [0],
        "memory_bytes": 15_000_000_000,
        "utilization": 90.0,
    }
    assert cur["policy"] == "gpu" and cur["pause_at"] is None and cur["state"] == "active"
    # And its GPU time is accounted as held, not idle
    assert cur["accounting"]["gpu_seconds_held"] >= 2.0
    assert cur["accounting"]["gpu_seconds_idle"] == 0
    # When the GPU goes quiet, the policy pauses it, and the quiet time counts as idle
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 15_000_000_000, 0.0)
    paused = await lab.wait_state(s["id"], states=("paused",), timeout=20)
    assert paused["accounting"]["gpu_seconds_idle"] >= 1.0


@pytest.mark.parametrize("policies", [[]])
@pytest.mark.gp_config(gpu_hold_alarm_hours=1.5 / 3600)
async def test_gpu_hold_alarm(lab):
    # Given a kernel holding a GPU, busy, under an alarm period of 1.5 s
    s = await lab.open_notebook()
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 1_000_000, 50.0)

    async def two_alarms():
        alarms = await lab.events(s["id"], "gpu_hold_alarm")
        return alarms if len(alarms) >= 2 else None

    # Then an alarm is raised once per period, whatever its activity
    first, second, *_ = await wait_for(two_alarms)
    assert "held a GPU" in first["detail"]["message"]
    gap = (parse_iso(second["time"]) - parse_iso(first["time"])).total_seconds()
    assert gap >= 1.5 - 0.3, gap  # at most one pass (0.3 s) early, never every pass


async def test_polling_our_api_does_not_keep_the_server_awake(lab, jp_serverapp):
    settings = jp_serverapp.web_app.settings
    s = await lab.open_notebook()
    before = settings["api_last_activity"]
    await lab.api("GET", "sessions")
    await lab.api("GET", f"sessions/{s['id']}")
    assert settings["api_last_activity"] == before
    await lab.api("POST", f"sessions/{s['id']}/keepalive", {"seconds": 5})
    assert settings["api_last_activity"] > before


BAD_POLICIES = [
    ({"match": {}}, "policy #1 has no 'name'"),
    ({"name": "p", "idle_timeot": 5}, "policy 'p': unknown key 'idle_timeot'"),
    ({"name": "p", "action": "delete"}, "policy 'p': unknown action 'delete'"),
    ({"name": "p", "idle_timeout": -5}, "policy 'p': 'idle_timeout' must not be negative"),
    ({"name": "p", "warn_before": -1}, "policy 'p': 'warn_before' must not be negative"),
    ({"name": "p", "idle_timeout": "1h"}, "policy 'p': 'idle_timeout' must be int or float"),
    ({"name": "p", "match": {"gpu": True}}, "policy 'p': unknown match key 'gpu'"),
    ({"name": "p", "match": {"uses_gpu": "yes"}}, "policy 'p': match 'uses_gpu' must be bool"),
    ({"name": "p", "idle_timeout": 60, "warn_before": 120}, "'warn_before' (120 s) is longer"),
    ("pause everything", "policy #1 must be a dict"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_POLICIES)
def test_bad_policy_is_refused_naming_policy_and_key(raw, message):
    with pytest.raises(PolicyError) as e:
        parse_policies([raw])
    assert message in str(e.value)


def test_two_policies_of_one_name_are_refused():
    with pytest.raises(PolicyError, match="policy 'p' is defined twice"):
        parse_policies([{"name": "p"}, {"name": "q"}, {"name": "p"}])


@pytest.mark.parametrize("policies", [[policy(idle=2, warn=1)]])
async def test_ui_polling_is_not_activity(lab):
    # Given a notebook whose frontend keeps asking for kernel_info and comm_info
    s = await lab.open_notebook()
    client = lab.client(s["kernel_id"])
    await client.wait_for_ready(timeout=60)
    try:
        for _ in range(30):
            client.kernel_info()
            client.comm_info()
            if (await lab.session(s["id"]))["state"] == "paused":
                break
            await asyncio.sleep(0.3)
    finally:
        client.stop_channels()
    # Then the polling did not keep it awake: the policy paused it
    assert (await lab.session(s["id"]))["state"] == "paused"


@pytest.mark.parametrize("policies", [[policy(idle=2, warn=1)]])
async def test_failed_auto_pause_backs_off(lab):
    # Given an idle notebook whose registered variable cannot be saved
    s = await lab.open_notebook()
    await lab.run(
        s["kernel_id"],
        "import jupyter_gpu_pause as gp\nstream = (i for i in 'ab')\ngp.register('stream')",
    )

    async def failures(n):
        found = await lab.events(s["id"], "pause_failed")
        return found if len(found) >= n else None

    # When the auto-pause fails
    (first,) = (await wait_for(lambda: failures(1)))[:1]
    # Then the session says why, keeps its kernel, and is warned of the next attempt, which
    # lies after the failure and ahead of the moment it is shown
    cur = await wait_for(lambda: _warned_session(lab, s))
    shown = now()
    assert cur["state"] in ("active", "idle") and lab.kernel_alive(s["kernel_id"])
    assert cur["error"]["reason"] == "registered-unsaveable" and "'stream'" in cur["message"]
    assert parse_iso(cur["pause_at"]) > max(
        parse_iso(first["time"]), shown - timedelta(seconds=0.5)
    )
    # And the attempts are retried with growing waits (2 s, then 4 s), not at every pass
    f1, f2, f3 = (await wait_for(lambda: failures(3), timeout=60))[:3]
    times = [parse_iso(e["time"]) for e in (f1, f2, f3)]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    assert gaps[0] >= 2.0 and gaps[1] >= 4.0, gaps
    assert all(e["reason"] == "policy:short" for e in (f1, f2, f3))


@pytest.fixture
def jupyter_culling():
    return False


@pytest.fixture
def jp_server_config(jp_server_config, jupyter_culling):
    if jupyter_culling:  # jupyter_server's own culler on, at 2 s
        jp_server_config["MappingKernelManager"] = {"cull_idle_timeout": 2, "cull_interval": 1}
    return jp_server_config


@pytest.mark.parametrize("jupyter_culling", [True])
@pytest.mark.parametrize(
    ("policies", "culled_by_jupyter"),
    [
        ([policy(action="warn", idle=60, warn=10)], False),
        ([policy(action="none", idle=60, warn=10)], True),
    ],
)
async def test_our_policy_outranks_jupyter_culling(lab, policies, culled_by_jupyter):
    # Given jupyter_server's own culler at 2 s, and a notebook
    s = await lab.open_notebook()
    opened = now()
    if culled_by_jupyter:
        # Then a kernel no policy governs is culled by jupyter_server, as before
        async def culled():
            return not lab.kernel_alive(s["kernel_id"])

        await wait_for(culled)
        return

    # Then a governed kernel is declined by our wrapper once it has been idle past 2 s
    async def declined_when_idle():
        m = await lab.monitor()
        when = m["last_jupyter_cull_declined"]
        return when and parse_iso(when) > opened + timedelta(seconds=3)

    await wait_for(declined_when_idle)
    assert lab.kernel_alive(s["kernel_id"])
    assert (await lab.session(s["id"]))["state"] in ("active", "idle")
