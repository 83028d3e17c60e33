"""The suspend tier's parts without a server: which tier a machine gets and why, the real
driver boundary on a machine without CUDA, and the suspender undoing a half-done suspension
(against the declared fake driver, ``tests.fakes.FakeCudaCheckpoint``)."""

from __future__ import annotations

import logging
import subprocess
import sys

import psutil
import pytest

from jupyter_gpu_pause.server.suspend.driver import LibcudaCheckpoint
from jupyter_gpu_pause.server.suspend.suspender import Suspender, SuspendError
from jupyter_gpu_pause.server.suspend.tier import decide
from tests.fakes import FakeCudaCheckpoint

LOG = logging.getLogger("test")


@pytest.fixture
def fake():
    FakeCudaCheckpoint.states, FakeCudaCheckpoint.fail, FakeCudaCheckpoint.calls = {}, {}, []
    return FakeCudaCheckpoint()


CHILD = "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(60)"
PARENT = (
    "import subprocess, sys, time\n"
    f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE)\n"
    "c.stdout.readline(); print(c.pid, flush=True); time.sleep(60)"
)


@pytest.fixture
def family():
    """A process with a child: a kernel and its DataLoader worker, say."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())  # the child runs once the parent says its pid
    yield parent.pid, child
    for pid in (child, parent.pid):
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    parent.wait()


def test_the_tier_says_why():
    assert decide("never", FakeCudaCheckpoint(), False).reason == (
        "suspend in place is turned off (GpuPauseApp.suspend = 'never')"
    )
    remote = decide("auto", FakeCudaCheckpoint(), True)
    assert remote.name == "checkpoint" and "gateway" in remote.reason
    ok = decide("auto", FakeCudaCheckpoint(), False)
    assert (ok.name, ok.driver_version) == ("suspend", "570.86.15")


def test_without_a_cuda_driver_the_checkpoint_tier_is_in_force():
    try:
        import ctypes

        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has a CUDA driver")
    except OSError:
        pass
    tier = decide("auto", LibcudaCheckpoint(), False)
    assert tier.to_json() == {
        "name": "checkpoint",
        "reason": "no CUDA driver on this machine (libcuda.so.1 not found)",
        "driver_version": None,
    }


async def test_a_kernel_and_its_child_are_suspended_together_and_restored(fake, family):
    parent, child = family
    sus = Suspender(fake, decide("auto", fake, False), 1.5, LOG)
    pids, _ = await sus.suspend(parent)
    assert pids == sorted([parent, child])
    assert fake.states == {parent: "checkpointed", child: "checkpointed"}
    await sus.restore(pids)
    assert fake.states == {parent: "running", child: "running"}


async def test_a_driver_refusal_half_way_undoes_what_was_done(fake, family):
    parent, child = family
    FakeCudaCheckpoint.fail = {"checkpoint": "CUDA_ERROR_OUT_OF_MEMORY"}
    sus = Suspender(fake, decide("auto", fake, False), 1.5, LOG)
    with pytest.raises(SuspendError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        await sus.suspend(parent)
    # every process locked before the refusal is unlocked again: none left blocked
    assert fake.state(parent) == fake.state(child) == "running"
    assert ("unlock", parent) in fake.calls and ("unlock", child) in fake.calls


def test_room_names_the_setting_when_the_host_is_short(fake):
    sus = Suspender(fake, decide("auto", fake, False), 1.5, LOG)
    assert sus.room(1 << 20) is None
    why = sus.room(1 << 50)
    assert "less than 1.5 × the kernel's" in why and "suspend_min_free_memory" in why
