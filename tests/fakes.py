"""A GPU probe the tests control (the decision logic is what is under test, not NVML)."""

from __future__ import annotations

from jupyter_gpu_pause.server.probes import GpuProbe, GpuUsage


class FakeProbe(GpuProbe):
    """Reports ``readings[session_id]`` for sessions the test set; nothing for the others."""

    available = True
    readings: dict[str, GpuUsage] = {}

    def sample(self, pids_by_key):
        return {k: v for k, v in self.readings.items() if k in pids_by_key and pids_by_key[k]}
