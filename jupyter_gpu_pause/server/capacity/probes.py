"""GPU probes: how much GPU memory and utilisation a set of processes holds.

``NvmlProbe`` reads NVIDIA's management library; where there is no GPU or no driver it reports
nothing (``available`` False) instead of failing. Probes block, so the monitor calls them in a
thread. An admin (or a test) swaps the probe with ``c.GpuPauseApp.gpu_probe_class``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psutil
from traitlets.config import LoggingConfigurable


@dataclass
class GpuUsage:
    """What one session's processes hold: devices (UUIDs, and NVML indices as ``nvidia-smi``
    numbers them, so the UI can say "GPU 0"), bytes, and utilisation in %."""

    devices: list[str] = field(default_factory=list)
    memory_bytes: int = 0
    utilization: float = 0.0
    indices: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "devices": self.devices,
            "indices": self.indices,
            "memory_bytes": self.memory_bytes,
            "utilization": self.utilization,
        }


def process_tree(pid: int) -> set[int]:
    """A kernel's pid and its children's (GPU work often runs in a child process)."""
    try:
        p = psutil.Process(pid)
        return {pid, *(c.pid for c in p.children(recursive=True))}
    except psutil.Error:
        return {pid}


class GpuProbe(LoggingConfigurable):
    """Base class: ``sample`` maps each key to the GPU usage of its set of pids."""

    available = False

    def sample(self, pids_by_key: dict[str, set[int]]) -> dict[str, GpuUsage]:
        return {}

    def devices(self) -> list[dict]:
        """Every GPU: ``uuid``, ``name``, ``memory_total``, ``memory_used``, ``utilization``."""
        return []

    def notes(self) -> list[str]:
        """What this probe cannot see here, in words an admin can act on."""
        return []


class NvmlProbe(GpuProbe):
    """Per-process GPU memory and utilisation from NVML (nvidia-ml-py)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._nvml: Any = None  # the pynvml module once NVML is up (pynvml has no types)
        self._last_seen: dict[str, int] = {}  # per device: newest utilisation sample seen
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.available = pynvml.nvmlDeviceGetCount() > 0
        except Exception as e:  # NVMLError_LibraryNotFound and friends: no GPU here
            self.log.info("jupyter_gpu_pause: no NVML (%s); GPU use is not measured", e)

    def _handles(self):
        n = self._nvml
        return [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]

    def devices(self) -> list[dict]:
        if not self.available:
            return []
        n, out = self._nvml, []
        for h in self._handles():
            mem = n.nvmlDeviceGetMemoryInfo(h)
            out.append(
                {
                    "uuid": n.nvmlDeviceGetUUID(h),
                    "name": n.nvmlDeviceGetName(h),
                    "memory_total": int(mem.total),
                    "memory_used": int(mem.used),
                    "utilization": n.nvmlDeviceGetUtilizationRates(h).gpu,
                }
            )
        return out

    def notes(self) -> list[str]:
        """MIG slices and PID namespaces hide processes from NVML: say so, and what follows."""
        if not self.available:
            return []
        n, notes = self._nvml, []
        for index, h in enumerate(self._handles()):
            try:
                mig = n.nvmlDeviceGetMigMode(h)[0] == n.NVML_DEVICE_MIG_ENABLE
            except n.NVMLError:
                mig = False
            try:
                procs = n.nvmlDeviceGetComputeRunningProcesses(h)
                used = n.nvmlDeviceGetMemoryInfo(h).used
            except n.NVMLError:
                procs, used = [], 0
            if mig:
                notes.append(
                    f"GPU {index} is in MIG mode: NVML cannot tell which kernel uses it; GPU "
                    "sessions are known by their checkpoints and GpuPauseApp.gpu_kernelspecs"
                )
            elif used > 1 << 30 and not procs:
                notes.append(
                    f"GPU {index} has {used >> 20} MiB in use but NVML shows no process (a "
                    "container's PID namespace?): kernels' GPU use cannot be measured; GPU "
                    "sessions are known by their checkpoints and GpuPauseApp.gpu_kernelspecs"
                )
        return notes

    def _utilization(self, h, uuid: str, procs) -> dict[int, float]:
        """Each process's highest SM utilisation since this device's last look.

        NVML buffers samples for several seconds; asking from the last sample seen gives this
        pass's window only, and its highest value means "busy at some point since the last
        pass" (a kernel that just finished a cell is not idle). No sample in the window
        (NOT_FOUND) means no process used the GPU: 0, not the device's figure, which other
        processes may make. Only a GPU that cannot tell per process falls back to the device's.
        """
        n = self._nvml
        try:
            samples = n.nvmlDeviceGetProcessUtilization(h, self._last_seen.get(uuid, 0))
        except n.NVMLError_NotFound:
            return {}
        except n.NVMLError:
            device_util = n.nvmlDeviceGetUtilizationRates(h).gpu
            return {p.pid: device_util for p in procs}
        util: dict[int, float] = {}
        for smp in samples:
            util[smp.pid] = max(util.get(smp.pid, 0), smp.smUtil)
            self._last_seen[uuid] = max(self._last_seen.get(uuid, 0), smp.timeStamp)
        return util

    def sample(self, pids_by_key):
        if not self.available:
            return {}
        n = self._nvml
        owner = {pid: key for key, pids in pids_by_key.items() for pid in pids}
        usage: dict[str, GpuUsage] = {}
        for index, h in enumerate(self._handles()):
            uuid = n.nvmlDeviceGetUUID(h)
            try:
                procs = n.nvmlDeviceGetComputeRunningProcesses(h)
            except n.NVMLError:
                continue
            util_by_pid = self._utilization(h, uuid, procs)
            for p in procs:
                key = owner.get(p.pid)
                if key is None:
                    continue
                u = usage.setdefault(key, GpuUsage())
                if uuid not in u.devices:
                    u.devices.append(uuid)
                    u.indices.append(index)
                u.memory_bytes += int(p.usedGpuMemory or 0)
                u.utilization = max(u.utilization, float(util_by_pid.get(p.pid, 0)))
        return usage
