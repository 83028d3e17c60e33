"""Test doubles, declared as fakes: a GPU probe the tests control (the decision logic is what
is under test, not NVML), and parts of Jupyter and backends that fail on demand."""

from __future__ import annotations

import sqlite3

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from jupyter_server.services.sessions.sessionmanager import SessionManager

from jupyter_gpu_pause.server.capacity import CapacityProvider, Grant, Verdict
from jupyter_gpu_pause.server.capacity.probes import GpuProbe, GpuUsage
from jupyter_gpu_pause.server.suspend.driver import Availability, CudaCheckpoint, DriverError


class FakeProbe(GpuProbe):
    """A fake NVML: reports ``readings[session_id]`` for sessions the test set (nothing for the
    others), and the GPUs in ``gpus`` (``uuid``, ``name``, ``memory_total``, ``memory_used``)."""

    available = True
    readings: dict[str, GpuUsage] = {}
    gpus: list[dict] = []
    hidden: list[str] = []  # notes: what NVML cannot see

    def sample(self, pids_by_key):
        return {k: v for k, v in self.readings.items() if k in pids_by_key and pids_by_key[k]}

    def devices(self) -> list[dict]:
        return [dict(g) for g in self.gpus]

    def notes(self) -> list[str]:
        return list(self.hidden)


# -- test doubles for Jupyter's parts and for pluggable backends: faults on demand -------------
# Each is configured the way an admin configures the real one (a ``*_class`` setting); the test
# says when it misbehaves through a class attribute. Our own code is never replaced.


class StubbornKernelManager(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, except that kernels in ``refuse`` will not shut down."""

    refuse: set[str] = set()

    async def shutdown_kernel(self, kernel_id, now=False, restart=False):
        if kernel_id in self.refuse:
            raise RuntimeError("the kernel provisioner did not confirm the shutdown")
        return await super().shutdown_kernel(kernel_id, now=now, restart=restart)


class FlakySessionManager(SessionManager):
    """jupyter_server's session manager, except that it cannot record sessions while
    ``broken`` is set (a full disk under its database, say)."""

    broken = False

    async def create_session(self, *args, **kwargs):
        if self.broken:
            raise sqlite3.OperationalError("database or disk is full")
        return await super().create_session(*args, **kwargs)

    async def update_session(self, session_id, **kwargs):
        if self.broken:
            raise sqlite3.OperationalError("database or disk is full")
        return await super().update_session(session_id, **kwargs)


class FailingCapacity(CapacityProvider):
    """A capacity provider whose backend is down while ``down`` is set."""

    name = "failing"
    down = True

    def decide(self, need, holders) -> Verdict:
        if self.down:
            raise ConnectionError("the GPU scheduler at http://127.0.0.1:9/ refused the connection")
        return Verdict(Grant(bytes=need.total))


class FakeCudaCheckpoint(CudaCheckpoint):
    """A fake of the CUDA driver's process checkpoint API (``suspend/driver.py``), the one
    boundary the suspend tier has: it keeps each process's state as the driver does and refuses
    the calls the driver refuses in that state (``CUDA_ERROR_ILLEGAL_STATE``), so the tier's state
    machine runs for real with real kernels on a CPU machine. Every live process counts as a
    CUDA process. ``fail`` maps a call (``lock``, ``checkpoint``, ``restore``) to the error it
    returns; ``calls`` records (call, pid)."""

    states: dict[int, str] = {}
    fail: dict[str, str] = {}
    calls: list[tuple[str, int]] = []
    version = "570.86.15"

    def probe(self) -> Availability:
        return Availability(
            True, f"the CUDA driver {self.version} has the checkpoint API", self.version
        )

    def state(self, pid: int) -> str | None:
        import psutil

        if not psutil.pid_exists(pid):
            return None
        return self.states.get(pid, "running")

    def _step(self, call: str, pid: int, before: str, after: str) -> None:
        self.calls.append((call, pid))
        if call in self.fail:
            raise DriverError(f"cuCheckpointProcess{call.title()}", self.fail[call], pid)
        if self.state(pid) != before:
            raise DriverError(f"cuCheckpointProcess{call.title()}", "CUDA_ERROR_ILLEGAL_STATE", pid)
        self.states[pid] = after

    def lock(self, pid: int, timeout_ms: int) -> None:
        self._step("lock", pid, "running", "locked")

    def checkpoint(self, pid: int) -> None:
        self._step("checkpoint", pid, "locked", "checkpointed")

    def restore(self, pid: int) -> None:
        self._step("restore", pid, "checkpointed", "locked")

    def unlock(self, pid: int) -> None:
        self._step("unlock", pid, "locked", "running")
