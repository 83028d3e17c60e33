"""Kernels that cannot be paused get a defined outcome: the session says so as soon as it is
known (``pausable``), one ``unpausable`` event, and a policy's ``unpausable`` key decides what
happens to them (``keep``: left running, never warned or tried again, their GPU time counted as
held unpausable; ``cull``: warned, naming what is lost, then shut down).

A real jupyter_server and real kernels: ``bash_kernel`` in a kernelspec of the test server's
own data dir, named in ``gpu_kernelspecs`` (what marks a GPU kernelspec here), and the fake
GPU probe saying the kernel holds a GPU (no GPU on these machines)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.lifecycle.pausable import UNPAUSABLE_REASONS
from jupyter_gpu_pause.server.monitor.policy import PolicyError, parse_policies
from jupyter_gpu_pause.store.format import parse_iso
from tests.fakes import FakeProbe
from tests.openapi import document
from tests.scrape import scrape
from tests.waiting import wait_for

pytest.importorskip("bash_kernel", reason="the test extra installs bash_kernel")

IDLE, WARN = 4, 2  # seconds: the policies' idle_timeout and warn_before
BASH = "bash-gpu"
GPU = GpuUsage(devices=["GPU-aaaa"], indices=[0], memory_bytes=2**30, utilization=0.0)


def policy(unpausable: str | None = None, **extra) -> dict:
    p = {
        "name": "gpu",
        "match": {"kernel_name": "*"},
        "idle_timeout": IDLE,
        "warn_before": WARN,
        "action": "pause",
        **extra,
    }
    if unpausable is not None:
        p["unpausable"] = unpausable
    return p


@pytest.fixture
def policies():
    return [policy()]  # "unpausable" left out: "keep" is the default


@pytest.fixture
def gp_config(gp_config, policies):
    FakeProbe.readings = {}
    gp_config.update(
        policies=policies,
        poll_interval=0.3,
        gpu_probe_class="tests.fakes.FakeProbe",
        gpu_kernelspecs=[BASH],
    )
    return gp_config


@pytest.fixture
def bash_spec(jp_data_dir):
    """A real bash kernel, a GPU kernelspec by ``gpu_kernelspecs``."""
    spec = jp_data_dir / "kernels" / BASH
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "bash_kernel", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Bash (GPU)", "language": "bash"})
    )
    return BASH


def now() -> datetime:
    return datetime.now(timezone.utc)


async def open_bash(lab, bash_spec) -> tuple[dict, datetime]:
    """A bash notebook that holds a GPU (the fake probe says so), and when it was opened."""
    opened = now()
    s = await lab.open_notebook("shell.ipynb", kernel_name=bash_spec)
    FakeProbe.readings = {s["id"]: GPU}
    return s, opened


async def test_a_bash_kernel_under_keep_is_said_unpausable_once_and_keeps_running(lab, bash_spec):
    # Given a bash notebook holding a GPU, under a pause policy whose unpausable is "keep"
    s, opened = await open_bash(lab, bash_spec)
    # Then its session says it cannot be paused, with a reason, before the idle timeout ends
    cur = await lab.session(s["id"])
    assert now() < opened + timedelta(seconds=IDLE), "known too late for this test to say"
    assert cur["pausable"] == {
        "ok": False,
        "reason": "unsupported-kernel",
        "message": "pause is not supported for bash kernels",
    }
    assert "Cannot be paused" in cur["message"]
    # When the monitor has looked at it well after its idle timeout and warning period
    await lab.monitor_passes(after=opened + timedelta(seconds=IDLE + WARN + 1), passes=2)
    # Then there was one unpausable event, no warning and no failed pause
    (event,) = await lab.events(s["id"], "unpausable")
    assert event["detail"]["error_reason"] == "unsupported-kernel"
    assert "cannot be paused" in event["detail"]["message"]
    assert await lab.events(s["id"], "pause_failed") == []
    assert await lab.events(s["id"], "warned") == []
    # And the kernel is alive, its session running, no pause announced
    assert lab.kernel_alive(s["kernel_id"])
    cur = await lab.session(s["id"])
    assert cur["state"] in ("active", "idle") and cur["pause_at"] is None, cur
    assert (await lab.run(s["kernel_id"], "echo $((6 * 7))")).strip() == "42"


async def test_held_unpausable_gpu_time_is_counted(lab, bash_spec):
    # Given a bash notebook holding a GPU under "keep", and the metrics before it
    m0 = await scrape(lab)
    s, _ = await open_bash(lab, bash_spec)

    # When it has held its GPU for a while
    async def counted():
        cur = await lab.session(s["id"])
        return cur if cur["accounting"]["gpu_seconds_unpausable"] >= 2.0 else None

    cur = await wait_for(counted)
    # Then all its held GPU time is held unpausable: on the session, in the report, in /metrics
    acc = cur["accounting"]
    assert acc["gpu_seconds_unpausable"] == acc["gpu_seconds_held"], acc
    code, report = await lab.api("GET", "report", params={"since": "1h"})
    assert code == 200, report
    (row,) = [r for r in report["sessions"] if r["session_id"] == s["id"]]
    assert row["gpu_hours_unpausable"] == row["gpu_hours_held"] > 0, row
    assert report["total"]["gpu_hours_unpausable"] >= row["gpu_hours_unpausable"]
    m1 = await scrape(lab)
    assert m1.moved(m0, "gpu_unpausable_seconds_total") >= 2.0
    # (part of held: the two counters move by the same seconds, summed onto other totals, so
    # they may differ in their last bits)
    held = m1.moved(m0, "gpu_held_seconds_total")
    assert m1.moved(m0, "gpu_unpausable_seconds_total") <= held + 1e-9


@pytest.mark.parametrize("policies", [[policy(unpausable="cull")]])
async def test_a_bash_kernel_under_cull_is_warned_naming_the_loss_then_culled(lab, bash_spec):
    # Given a bash notebook holding a GPU, under a pause policy whose unpausable is "cull"
    s, _ = await open_bash(lab, bash_spec)
    kid = s["kernel_id"]
    # Then it is first warned that it will be shut down, and that its whole state is lost
    warned = await lab.event(s["id"], "warned")
    assert warned["detail"]["action"] == "cull"
    message = warned["detail"]["message"]
    assert "shuts down" in message and "cannot be paused" in message
    assert "whole in-memory state of this bash kernel" in message, message
    assert "whole in-memory state" in warned["detail"]["lost"]
    # And then culled: the event recorded, the kernel gone, its session with it
    culled = await lab.event(s["id"], "culled")
    assert culled["reason"] == "policy:gpu" and culled["detail"]["kernel_id"] == kid
    assert parse_iso(culled["time"]) > parse_iso(warned["time"])
    assert not lab.kernel_alive(kid)
    code, _ = await lab.api("GET", f"sessions/{s['id']}")
    assert code == 404
    # And it was never tried as a pause, and said unpausable once
    assert await lab.events(s["id"], "pause_failed") == []
    assert len(await lab.events(s["id"], "unpausable")) == 1


async def test_a_python_kernel_is_pausable_once_its_agent_answered(lab):
    # Given a Python notebook (its kernel tracked: the agent's first request)
    s = await lab.open_notebook()

    # Then its session says it can be paused, and nothing says otherwise
    async def known():
        return (await lab.session(s["id"]))["pausable"]

    assert await wait_for(known) == {"ok": True}
    assert await lab.events(s["id"], "unpausable") == []


async def test_pausable_is_kept_with_the_session_record(lab, bash_spec):
    # Given a bash notebook known unpausable
    s, _ = await open_bash(lab, bash_spec)
    # When the records are read back, as a restarted server reads them
    records = lab.app.web_app.settings["gpu_pause"].records
    (loaded,) = [x for x in await records.load_sessions() if x.id == s["id"]]
    # Then the record holds what the session said
    assert loaded.pausable == {
        "ok": False,
        "reason": "unsupported-kernel",
        "message": "pause is not supported for bash kernels",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"name": "p", "unpausable": "pause"},
            "policy 'p': 'unpausable' must be one of keep, cull",
        ),
        ({"name": "p", "unpausable": True}, "policy 'p': 'unpausable' must be str"),
    ],
)
def test_a_bad_unpausable_value_is_refused_naming_it(raw, message):
    with pytest.raises(PolicyError) as e:
        parse_policies([raw])
    assert message in str(e.value)


def test_the_policies_default_is_keep():
    (p,) = parse_policies([{"name": "p"}])
    assert p.unpausable == "keep" and p.to_json()["unpausable"] == "keep"


def test_the_schemas_reasons_are_the_unpausable_reasons():
    reasons = document()["components"]["schemas"]["Pausable"]["properties"]["reason"]["enum"]
    assert sorted(reasons) == sorted(UNPAUSABLE_REASONS)
