"""Suspend in place (issue #26) through a real server and real kernels, on a CPU machine: the
CUDA driver's process checkpoint API is a declared fake (``tests.fakes.FakeCudaCheckpoint``,
injected with ``cuda_checkpoint_class`` as an admin would inject a driver), which keeps each
process's state as the driver does and refuses what the driver refuses. The quota provider
stands in for the GPUs: one GPU session on this machine, so "the GPU is released" is seen as
the next notebook in line starting.
"""

from __future__ import annotations

import psutil
import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from tests import test_faults
from tests.fakes import FakeCudaCheckpoint, FakeProbe
from tests.test_faults import READBACK, READBACK_OK, STATE
from tests.waiting import wait_for

SUSPEND = dict(
    cuda_checkpoint_class="tests.fakes.FakeCudaCheckpoint",
    capacity_provider_class="quota",
    gpu_kernelspecs=["python3*"],
    gpu_probe_class="tests.fakes.FakeProbe",
    poll_interval=0.5,
    policies=[],
)


@pytest.fixture
def jp_server_config(jp_server_config):
    jp_server_config["QuotaCapacity"] = {"max_sessions": 1}
    FakeCudaCheckpoint.states, FakeCudaCheckpoint.fail, FakeCudaCheckpoint.calls = {}, {}, []
    FakeProbe.readings, FakeProbe.gpus, FakeProbe.hidden = {}, [], []
    return jp_server_config


tmpfs = test_faults.tmpfs  # a real filesystem at the store path, to make read-only


@pytest.fixture
def store_fs(tmpfs):
    return tmpfs


def kernel_pid(lab, kernel_id: str) -> int:
    return lab.app.kernel_manager.get_kernel(kernel_id).provisioner.process.pid


async def state_of(lab, s: dict, *states: str) -> dict:
    async def there():
        cur = await lab.session(s["id"])
        return cur if cur["state"] in states else None

    return await wait_for(there, timeout=120, what=f"{s['path']} {states}")


async def paused_other(lab) -> dict:
    """Another notebook, paused, that will wait in line for the one GPU session."""
    other = await lab.open_notebook("other.ipynb")
    await lab.run(other["kernel_id"], "y = 7")
    await lab.api("POST", f"sessions/{other['id']}/pause")
    assert (await lab.wait_state(other["id"]))["state"] == "paused"
    return other


@pytest.mark.gp_config(**SUSPEND)
async def test_the_gpu_goes_at_once_and_a_failed_write_loses_nothing(lab, store_dir, store_fs):
    # Given the suspend tier in force, said with its reason
    code, cap = await lab.api("GET", "capacity")
    assert cap["tier"] == {
        "name": "suspend",
        "reason": "the CUDA driver 570.86.15 has the checkpoint API",
        "driver_version": "570.86.15",
    }
    # and a store that cannot be written (read-only), a notebook waiting in line for the GPU
    mount, remount = store_fs
    mount("size=64m")
    other = await paused_other(lab)
    remount("ro")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    pid = kernel_pid(lab, s["kernel_id"])
    FakeProbe.readings[s["id"]] = GpuUsage(devices=["GPU-0"], memory_bytes=64 << 20)
    await wait_for(lambda: _measured(lab, s), timeout=60, what="the GPU reading")
    await lab.api("POST", f"sessions/{other['id']}/resume")
    await state_of(lab, other, "waiting")
    # When the user pauses
    await lab.api("POST", f"sessions/{s['id']}/pause")
    # Then the GPU is released (the next in line starts) though the checkpoint cannot be written
    started = await lab.wait_state(other["id"])
    assert started["state"] in ("active", "idle")
    after = await state_of(lab, s, "suspended")
    after = await wait_for(lambda: _failed_write(lab, s), timeout=120, what="the write to fail")
    assert after["kernel_id"] == s["kernel_id"] and lab.kernel_alive(s["kernel_id"])
    assert after["error"]["state_intact"] is True
    assert "Read-only file system" in after["error"]["message"]
    assert after["message"].startswith("Suspended — checkpoint not written: ")
    assert after["message"].endswith(
        "Every variable is still in the kernel; Resume brings it back in place"
    )
    assert after["suspended"]["checkpoint"] == "failed"
    assert after["suspended"]["gpu_released_seconds"] >= 0
    assert FakeCudaCheckpoint.states[pid] == "checkpointed"
    event = await lab.event(s["id"], "suspended")
    assert event["detail"]["gpu_released_seconds"] == after["suspended"]["gpu_released_seconds"]
    # and its GPU counts as reclaimed while it is suspended
    await wait_for(lambda: _reclaiming(lab, s), timeout=60, what="GPU-seconds reclaimed")
    # and a cell run in the suspended kernel fails at once, saying why, changing nothing
    with pytest.raises(AssertionError, match="This kernel is suspended in place"):
        await lab.run(s["kernel_id"], 'note = "changed after the checkpoint"')
    # When the user resumes while the other notebook holds the GPU, it waits in line
    code, _ = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202
    waiting = await state_of(lab, s, "waiting")
    assert waiting["queue_position"] == 1
    # and once the GPU is free, the same kernel comes back with every variable
    await lab.fetch("api", "kernels", started["kernel_id"], method="DELETE")
    back = await state_of(lab, s, "active", "idle")
    assert back["kernel_id"] == s["kernel_id"] and back["suspended"] is None
    assert kernel_pid(lab, s["kernel_id"]) == pid
    assert FakeCudaCheckpoint.states[pid] == "running"
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK  # note as it was
    resumed = await lab.event(s["id"], "resumed")
    assert resumed["detail"]["in_place"] is True
    # And with the store writable again, the next pause completes the usual way
    remount("rw")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    assert not lab.kernel_alive(s["kernel_id"])


async def _reclaiming(lab, s):
    cur = await lab.session(s["id"])
    return cur if cur["accounting"]["gpu_seconds_reclaimed"] > 0 else None


async def _failed_write(lab, s):
    cur = await lab.session(s["id"])
    return cur if cur["state"] == "suspended" and cur["error"] else None


@pytest.mark.gp_config(keep_suspended_seconds=300, **SUSPEND)
async def test_a_kept_kernel_resumes_in_place_and_a_completed_pause_resumes_as_before(lab):
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    pid = kernel_pid(lab, s["kernel_id"])
    # When paused with keep_suspended_seconds, the checkpoint is written and the kernel kept
    await lab.api("POST", f"sessions/{s['id']}/pause")
    kept = await wait_for(lambda: _kept(lab, s), timeout=120, what="the checkpoint written")
    assert kept["checkpoint"] is not None and kept["suspended"]["kept_until"]
    assert "the kernel is kept for a fast resume until" in kept["message"]
    # Then a resume restores it in place: the same kernel, every variable
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await state_of(lab, s, "active", "idle")
    assert back["kernel_id"] == s["kernel_id"] and kernel_pid(lab, s["kernel_id"]) == pid
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
    # And asked to resume on the CPU while kept, the kept kernel is let go and the checkpoint
    # restored into a new kernel
    await lab.api("POST", f"sessions/{s['id']}/pause")
    await wait_for(lambda: _kept(lab, s), timeout=120, what="kept again")
    await lab.api("POST", f"sessions/{s['id']}/resume", {"device": "cpu"})
    cpu = await state_of(lab, s, "active", "idle")
    assert cpu["kernel_id"] != s["kernel_id"] and not lab.kernel_alive(s["kernel_id"])
    assert (await lab.run(cpu["kernel_id"], READBACK)).strip() == READBACK_OK
    paused = await lab.events(s["id"], "paused")
    assert paused[-1]["detail"]["kept"] == "a resume from its checkpoint"


async def _kept(lab, s):
    cur = await lab.session(s["id"])
    sus = cur["suspended"] or {}
    return cur if cur["state"] == "suspended" and sus.get("checkpoint") == "written" else None


@pytest.mark.gp_config(**SUSPEND)
async def test_without_room_or_with_a_refusing_driver_the_pause_writes_first(lab):
    # Given a kernel whose GPU memory the host could not hold
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    FakeProbe.readings[s["id"]] = GpuUsage(
        devices=["GPU-0"], memory_bytes=10 * psutil.virtual_memory().total
    )
    await wait_for(lambda: _measured(lab, s), timeout=60, what="the GPU reading")
    # When paused, it is not suspended: the checkpoint is written first, and the event says why
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    paused = await lab.event(s["id"], "paused")
    assert paused["detail"]["suspended"] is False
    assert "GpuPauseApp.suspend_min_free_memory" in paused["detail"]["not_suspended"]
    assert FakeCudaCheckpoint.calls == [] and await lab.events(s["id"], "suspended") == []
    # Given a driver that refuses to checkpoint the process
    FakeProbe.readings.clear()
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await state_of(lab, s, "active", "idle")
    await lab.monitor_passes()  # the new kernel measured: no GPU memory the host lacks
    FakeCudaCheckpoint.fail = {"checkpoint": "CUDA_ERROR_NOT_SUPPORTED"}
    pid = kernel_pid(lab, back["kernel_id"])
    # When paused, the lock is undone and the pause goes on the checkpoint path
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    paused = await lab.event(s["id"], "paused", nth=2)
    assert "CUDA_ERROR_NOT_SUPPORTED" in paused["detail"]["not_suspended"]
    assert ("unlock", pid) in FakeCudaCheckpoint.calls
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    again = await state_of(lab, s, "active", "idle")
    assert (await lab.run(again["kernel_id"], READBACK)).strip() == READBACK_OK


async def _measured(lab, s):
    cur = await lab.session(s["id"])
    return cur if (cur["gpu"] or {}).get("memory_bytes") else None


@pytest.mark.gp_config(**SUSPEND)
async def test_a_suspended_kernel_that_dies_unwritten_says_its_memory_is_lost(
    lab, store_dir, store_fs
):
    mount, remount = store_fs
    mount("size=64m")
    remount("ro")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    await wait_for(lambda: _failed_write(lab, s), timeout=120, what="the write to fail")
    # A pause or a CPU resume of what exists only in the kernel is refused, saying what to do
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume", {"device": "cpu"})
    assert code == 409 and body["reason"] == "suspended-not-written"
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 409
    # When the kernel process is killed, the session says the memory is lost
    psutil.Process(kernel_pid(lab, s["kernel_id"])).kill()
    gone = await lab.wait_state(s["id"], states=("failed",))
    assert gone["error"]["state_intact"] is False
    assert "before its checkpoint was written: its memory is lost" in gone["message"]


@pytest.mark.gp_config(suspend="never", **SUSPEND)
async def test_suspend_never_keeps_the_checkpoint_tier(lab):
    code, cap = await lab.api("GET", "capacity")
    assert cap["tier"]["name"] == "checkpoint"
    assert cap["tier"]["reason"] == "suspend in place is turned off (GpuPauseApp.suspend = 'never')"
    await lab.pause_and_resume()
    assert FakeCudaCheckpoint.calls == []


@pytest.mark.gp_config(**SUSPEND)
async def test_a_pause_that_neither_suspends_nor_writes_leaves_the_kernel_usable(lab, store_fs):
    # Given a driver that refuses the process and a store that cannot be written
    mount, remount = store_fs
    mount("size=64m")
    remount("ro")
    FakeCudaCheckpoint.fail = {"lock": "CUDA_ERROR_NOT_SUPPORTED"}
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # When paused, the pause fails: the kernel runs on, untouched
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await lab.wait_state(s["id"])
    assert after["state"] in ("active", "idle") and "Read-only file system" in after["message"]
    # Then its cells run again (the guard put up for the suspension is lifted)
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
