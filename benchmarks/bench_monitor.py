"""Cost of one idle-monitor pass with 10, 100 and 500 tracked kernels.

The kernels are stand-ins (no processes): what is measured is the monitor's own work per pass,
policy matching, idle arithmetic, accounting, on the event loop. Target: <= 10 ms at 500 and
linear growth. Run: ``python benchmarks/bench_monitor.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from datetime import timedelta

from jupyter_gpu_pause.server.capacity.probes import GpuProbe
from jupyter_gpu_pause.server.monitor.activity import ActivityTracker
from jupyter_gpu_pause.server.monitor.monitor import Monitor
from jupyter_gpu_pause.server.monitor.policy import parse_policies
from jupyter_gpu_pause.server.state.model import Session
from jupyter_gpu_pause.store.format import utcnow

POLICIES = parse_policies(
    [
        {"name": "gpu", "match": {"uses_gpu": True}, "idle_timeout": 3600, "warn_before": 300},
        {
            "name": "cpu",
            "match": {"kernel_name": "python3*"},
            "idle_timeout": 7200,
            "warn_before": 600,
            "action": "warn",
        },
    ]
)


class FakeKernel:
    execution_state = "idle"


class FakeKM(dict):
    def cull_kernel_if_idle(self, kernel_id):
        return None


class FakeBridge:
    def __init__(self, n):
        self.km = FakeKM({f"k{i}": FakeKernel() for i in range(n)})
        self.agent_sessions = set()

    def is_running(self, kid):
        return kid in self.km

    def kernel(self, kid):
        return self.km[kid]

    def connections(self, kid):
        return 1

    def pid(self, kid):
        return None

    def gpu_usage(self, kid):
        return None  # a local kernel: the probe measures it


class FakeTable:
    """The session table of a server with ``n`` idle kernels that nothing changes."""

    def __init__(self, n):
        self.sessions = {}
        self.waiting_kernels = {}  # no paused notebook has a kernel open
        for i in range(n):
            s = Session(path=f"nb{i}.ipynb", kernel_name="python3", kernel_id=f"k{i}")
            self.sessions[s.id] = s

    async def refresh(self):
        return None

    def session_for_kernel(self, kid):
        return None

    async def record_event(self, s, type_, reason, /, **detail):
        return None


class FakeOperations:
    def kernel_ids(self):
        return set()


class FakeCapacity:
    def changed(self):
        return None


class FakeLifecycle:
    def __init__(self, n):
        self.bridge = FakeBridge(n)
        self.table = FakeTable(n)
        self.capacity = FakeCapacity()
        self.ops = FakeOperations()
        self.records = None  # nothing is written: the stand-in kernels hold no GPU

    def busy_sessions(self):
        return set()


async def one_pass_ms(n: int, repeat: int) -> float:
    lc = FakeLifecycle(n)
    tracker = ActivityTracker(lc.bridge.km, set())
    tracker.sync = lambda kids: None  # no real IOPub sockets for stand-in kernels
    mon = Monitor(
        lifecycle=lc,
        tracker=tracker,
        policies=POLICIES,
        probe=GpuProbe(),
        poll_interval=10,
        gpu_hold_alarm_hours=0,
        capture="namespace",
        user="bench",
        log=logging.getLogger("bench"),
    )
    start = utcnow()
    for i, s in enumerate(lc.table.sessions.values()):
        mon.tracker.last[s.kernel_id] = start - timedelta(seconds=60 * i)
    await mon.tick(start)  # warm-up: creates the per-session state
    times = []
    for r in range(repeat):
        t0 = time.perf_counter()
        await mon.tick(start + timedelta(seconds=10 * (r + 1)))
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def main(repeat: int) -> None:
    results = {n: await one_pass_ms(n, repeat) for n in (10, 100, 500)}
    print(f"{'kernels':>8} {'ms/pass':>9} {'us/kernel':>10}")
    for n, ms in results.items():
        print(f"{n:>8} {ms:>9.3f} {ms * 1000 / n:>10.1f}")
    growth = (results[500] / 500) / (results[10] / 10)
    print(f"per-kernel cost at 500 vs at 10: {growth:.2f}x (1.0 = linear)")
    print(f"target <= 10 ms at 500: {'OK' if results[500] <= 10 else 'MISS'}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    asyncio.run(main(ap.parse_args().repeat))
