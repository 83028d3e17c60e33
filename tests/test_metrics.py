"""Prometheus metrics on jupyter_server's own ``/metrics``, scraped before and after what a user
does, and the phase timings the pause and resume events carry: a real server, real kernels, a
real store. Metrics belong to the process, which runs many servers: tests compare deltas."""

from __future__ import annotations

import importlib

import pytest

from jupyter_gpu_pause.server.app import GpuPauseApp
from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.telemetry import metrics
from jupyter_gpu_pause.store import GcBusy, StoreError
from tests.fakes import FakeProbe
from tests.scrape import Scrape, scrape
from tests.waiting import wait_for

MIB = 2**20
TENSOR = "import torch; w = torch.ones(2**18)"  # 1 MiB of float32, unchanged by a resume
PAUSE_PHASES = {"wait", "capture", "write", "verify", "commit", "shutdown"}
RESUME_PHASES = {"verify", "capacity", "start", "read", "unpickle", "attach"}
SLACK = 1e-9  # float addition of microsecond-rounded phases


def running(m: Scrape) -> float:
    return m.value("sessions", state="active") + m.value("sessions", state="idle")


def assert_timings(detail: dict, phases: set[str], required: set[str]) -> None:
    """Timings are known phases, non-negative, and add up to no more than the duration."""
    t = detail["timings"]
    assert required <= set(t) <= phases, t
    assert all(v >= 0 for v in t.values()), t
    assert sum(t.values()) <= detail["duration_seconds"] + SLACK, detail


async def pause(lab, sid: str) -> dict:
    code, body = await lab.api("POST", f"sessions/{sid}/pause")
    assert code == 202, body
    paused = await lab.wait_state(sid)
    assert paused["state"] == "paused", paused
    return paused


async def resume(lab, sid: str) -> dict:
    code, body = await lab.api("POST", f"sessions/{sid}/resume")
    assert code == 202, body
    resumed = await lab.wait_state(sid)
    assert resumed["state"] in ("active", "idle"), resumed
    return resumed


async def newest_checkpoint(lab, sid: str) -> dict:
    code, body = await lab.api("GET", f"sessions/{sid}/checkpoints")
    assert code == 200, body
    return body["checkpoints"][0]


async def test_a_pause_and_a_resume_move_the_metrics(lab):
    # Given a notebook holding a 1 MiB tensor, and the metrics before anything happened
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], TENSOR)
    m0 = await scrape(lab)
    assert set(m0.states()) == {
        "active",
        "idle",
        "pausing",
        "suspended",
        "paused",
        "waiting",
        "restoring",
        "failed",
    }
    assert running(m0) == 1 and m0.value("sessions", state="paused") == 0
    assert m0.value("waiting_sessions") == 0

    # When the user pauses it
    await pause(lab, s["id"])
    m1 = await scrape(lab)
    paused = await lab.event(s["id"], "paused")
    ck = await newest_checkpoint(lab, s["id"])

    # Then one successful user pause is counted, nothing else
    assert m1.moved(m0, "pauses_total", reason="user", result="ok") == 1
    assert m1.moved(m0, "pauses_total", reason="user", result="failed") == 0
    assert m1.moved(m0, "pauses_total", reason="policy", result="ok") == 0
    # And the pause and GPU-release histograms got this pause's own durations
    d = paused["detail"]
    assert m1.moved(m0, "pause_duration_seconds_count") == 1
    assert m1.moved(m0, "pause_duration_seconds_sum") == pytest.approx(d["duration_seconds"])
    assert m1.moved(m0, "gpu_release_seconds_count") == 1
    assert m1.moved(m0, "gpu_release_seconds_sum") == pytest.approx(d["gpu_released_seconds"])
    # And every byte of the first checkpoint was written, none deduplicated
    assert ck["bytes"] >= MIB and ck["new_bytes"] == ck["bytes"]
    assert m1.moved(m0, "checkpoint_written_bytes_total") == ck["bytes"]
    assert m1.moved(m0, "checkpoint_deduplicated_bytes_total") == 0
    # And the session counts as paused, no longer running
    assert m1.value("sessions", state="paused") == 1 and running(m1) == 0
    # And the event says where the time went, within the pause's duration
    assert_timings(d, PAUSE_PHASES, {"wait", "capture", "commit", "shutdown"})
    assert 0 < d["gpu_released_seconds"] <= d["duration_seconds"]
    assert d["new_bytes"] == ck["new_bytes"] and d["bytes"] == ck["bytes"]
    assert d["checkpoint_id"] == ck["id"] and "message" in d and "skipped" in d
    # And the session itself keeps that pause as its last operation, timings and all
    last = (await lab.session(s["id"]))["last_operation"]
    assert last == {
        "operation": "pause",
        "outcome": "paused",
        "time": paused["time"],
        "duration_seconds": d["duration_seconds"],
        "timings": d["timings"],
        "gpu_released_seconds": d["gpu_released_seconds"],
    }

    # When the user resumes it
    await resume(lab, s["id"])
    m2 = await scrape(lab)
    resumed = await lab.event(s["id"], "resumed")

    # Then one successful resume is counted, and its time to usable observed
    r = resumed["detail"]
    assert m2.moved(m1, "resumes_total", reason="user", result="ok") == 1
    assert m2.moved(m1, "time_to_usable_seconds_count") == 1
    assert m2.moved(m1, "time_to_usable_seconds_sum") == pytest.approx(r["duration_seconds"])
    assert m2.value("sessions", state="paused") == 0 and running(m2) == 1
    # And the resumed event says where its time went
    assert_timings(r, RESUME_PHASES, {"verify", "capacity", "start", "read", "attach"})
    assert r["checkpoint_id"] == ck["id"] and "waited_seconds" in r
    last = (await lab.session(s["id"]))["last_operation"]
    assert (last["operation"], last["outcome"]) == ("resume", "resumed")
    assert last["timings"] == r["timings"] and last["gpu_released_seconds"] is None

    # When it pauses again, the tensor unchanged
    await pause(lab, s["id"])
    m3 = await scrape(lab)
    second = await newest_checkpoint(lab, s["id"])

    # Then the tensor's bytes count as deduplicated, only the rest as written
    assert second["id"] != ck["id"]
    deduplicated = second["bytes"] - second["new_bytes"]
    assert deduplicated >= MIB
    assert m3.moved(m2, "checkpoint_deduplicated_bytes_total") == deduplicated
    assert m3.moved(m2, "checkpoint_written_bytes_total") == second["new_bytes"]
    assert m3.moved(m0, "pauses_total", reason="user", result="ok") == 2


async def test_a_cancelled_pause_counts_as_cancelled(lab):
    # Given a pause waiting for a long cell
    s = await lab.open_notebook()
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(60)")
    m0 = await scrape(lab)
    await lab.api("POST", f"sessions/{s['id']}/pause")

    # When the user cancels it
    code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")
    assert code == 200, body
    m1 = await scrape(lab)

    # Then it counts as a cancelled pause, not a failed or successful one
    assert m1.moved(m0, "pauses_total", reason="user", result="cancelled") == 1
    assert m1.moved(m0, "pauses_total", reason="user", result="ok") == 0
    assert m1.moved(m0, "pauses_total", reason="user", result="failed") == 0
    assert m1.moved(m0, "pause_duration_seconds_count") == 0
    # And the event says which operation was cancelled, and that it was waiting for the cell
    cancelled = await lab.event(s["id"], "cancelled")
    d = cancelled["detail"]
    assert d["operation"] == "pause" and "message" in d
    assert_timings(d, PAUSE_PHASES, {"wait"})
    assert set(d["timings"]) == {"wait"}
    last = (await lab.session(s["id"]))["last_operation"]
    assert (last["operation"], last["outcome"], last["timings"]) == (
        "pause",
        "cancelled",
        d["timings"],
    )


async def test_a_store_failure_counts_a_failed_pause_and_a_store_error(lab, store_dir):
    # Given a store whose blob folder was replaced by a plain file
    (store_dir / "v1").mkdir(parents=True)
    (store_dir / "v1" / "blobs").write_text("not a folder")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], TENSOR)
    m0 = await scrape(lab)

    # When the user pauses, and the pause fails
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await lab.wait_state(s["id"])
    assert after["state"] in ("active", "idle") and after["error"]["reason"] == "store", after
    m1 = await scrape(lab)

    # Then a failed pause and a store error of a pause are counted; no bytes, no duration
    assert m1.moved(m0, "pauses_total", reason="user", result="failed") == 1
    assert m1.moved(m0, "store_errors_total", operation="pause") == 1
    assert m1.moved(m0, "store_errors_total", operation="resume") == 0
    assert m1.moved(m0, "checkpoint_written_bytes_total") == 0
    assert m1.moved(m0, "pause_duration_seconds_count") == 0
    # And the event says where the time went: the kernel was never stopped, nothing committed
    failed = await lab.event(s["id"], "pause_failed")
    d = failed["detail"]
    assert_timings(d, PAUSE_PHASES, {"wait", "capture"})
    assert "commit" not in d["timings"] and "shutdown" not in d["timings"]
    assert d["gpu_released_seconds"] is None and d["new_bytes"] is None
    assert d["error_reason"] == "store"


@pytest.mark.gp_config(policies=[], poll_interval=0.2, gpu_probe_class="tests.fakes.FakeProbe")
async def test_gpu_seconds_held_idle_then_reclaimed(lab):
    # Given a notebook whose kernel holds one GPU, idle at 0 % (fake probe)
    FakeProbe.readings = {}
    s = await lab.open_notebook()
    m0 = await scrape(lab)
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 2**31, 0.0)

    # When the idle monitor has ticked for a while
    async def held_a_second():
        m = await scrape(lab)
        return m if m.moved(m0, "gpu_held_seconds_total") >= 1.0 else None

    m1 = await wait_for(held_a_second, what="GPU-seconds held")
    # Then the GPU-seconds held grow, all of them idle, and nothing is reclaimed
    held = m1.moved(m0, "gpu_held_seconds_total")
    assert m1.moved(m0, "gpu_idle_seconds_total") == pytest.approx(held)
    assert m1.moved(m0, "gpu_reclaimed_seconds_total") == 0

    # When the user pauses it, and the idle monitor has looked at it paused
    await pause(lab, s["id"])
    await lab.monitor_passes()
    m2 = await scrape(lab)

    # Then the GPU it gave back counts as reclaimed while it stays paused
    async def reclaimed_a_second():
        m = await scrape(lab)
        return m if m.moved(m2, "gpu_reclaimed_seconds_total") >= 1.0 else None

    m3 = await wait_for(reclaimed_a_second, what="GPU-seconds reclaimed")
    assert m3.moved(m2, "gpu_held_seconds_total") == 0
    FakeProbe.readings = {}


async def test_a_second_app_in_the_same_process_registers_nothing_twice(lab, jp_serverapp):
    # Given a running server with the extension, serving its metrics
    s = await lab.open_notebook()
    assert (await scrape(lab)).states()["active"] + (await scrape(lab)).states()["idle"] == 1

    # When a second GpuPauseApp builds its services in this process, and the metrics module
    # is imported again
    second = GpuPauseApp()
    second._link_jupyter_server_extension(jp_serverapp)
    try:
        second.initialize_settings()
        importlib.reload(metrics)
        m = await scrape(lab)
    finally:
        second.records.close()

    # Then nothing raised, and /metrics has each of our metrics once, every label value
    # still there; the sessions counted are those of the server that built its services last
    names = [
        line.split()[2]
        for line in m.text.splitlines()
        if line.startswith("# TYPE jupyter_gpu_pause_")
    ]
    assert len(names) == len(set(names)) and "jupyter_gpu_pause_pauses_total" in names
    assert m.value("pauses_total", reason="preemption", result="cancelled") >= 0
    assert m.value("webhook_deliveries_total", result="gone") >= 0
    assert sum(m.states().values()) == 0  # the second app's table: its records are not loaded
    assert s["id"] not in {x.id for x in second.lifecycle.table}


def test_webhook_deliveries_are_counted_by_result():
    # Given the counter of webhook deliveries
    before = Scrape(_exposition())

    # When the webhook sender reports deliveries
    metrics.webhook_delivery("ok")
    metrics.webhook_delivery("ok")
    metrics.webhook_delivery("gone")

    # Then each result counts its own, and an unknown result is refused, not a new label
    after = Scrape(_exposition())
    assert after.moved(before, "webhook_deliveries_total", result="ok") == 2
    assert after.moved(before, "webhook_deliveries_total", result="gone") == 1
    assert after.moved(before, "webhook_deliveries_total", result="failed") == 0
    with pytest.raises(ValueError, match="ok, failed, gone"):
        metrics.webhook_delivery("https://receiver.example/hook")


def _exposition() -> str:
    from prometheus_client import REGISTRY, generate_latest

    return generate_latest(REGISTRY).decode()


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        ("user", "user"),
        ("policy:gpu-default", "policy"),
        ("shutdown", "shutdown"),
        ("preemption", "preemption"),
        ("retention", "other"),
        (None, "other"),
    ],
)
def test_reasons_become_a_few_label_values(reason, label):
    # Given an event's reason, Then its label is one of a few fixed words, never a policy name
    assert metrics.reason_class(reason) == label


def test_store_errors_count_the_stores_failures_only():
    # Given the store-error counter
    before = Scrape(_exposition())

    # When maintenance meets a store that fails, a busy collection lock, and a bug of ours
    metrics.store_failed("gc", StoreError("the bucket answered 503"))
    metrics.store_failed("retention", OSError(28, "No space left on device"))
    metrics.store_failed("gc", GcBusy("another server is collecting"))
    metrics.store_failed("retention", KeyError("checkpoint_id"))

    # Then only the store's own failures count, under the operation that met them
    after = Scrape(_exposition())
    assert after.moved(before, "store_errors_total", operation="gc") == 1
    assert after.moved(before, "store_errors_total", operation="retention") == 1
    with pytest.raises(ValueError, match="unknown store operation"):
        metrics.store_failed("s3://bucket/session-42", StoreError("x"))
