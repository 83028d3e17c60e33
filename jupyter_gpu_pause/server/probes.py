"""Moved to ``server.capacity.probes``; this name is kept for one release (``gpu_probe_class``
settings and probes written against it)."""

from .capacity.probes import *  # noqa: F403
from .capacity.probes import GpuProbe, GpuUsage, NvmlProbe  # noqa: F401
