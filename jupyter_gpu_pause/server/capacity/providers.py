"""The capacity providers an admin picks by name: ``quota``, ``nvml``, ``unlimited``, ``auto``.

``QuotaCapacity`` enforces admin limits and needs no GPU (small labs, CPU machines, tests);
``NvmlCapacity`` places a resume on a real GPU with enough free memory, best fit. ``auto``
becomes ``nvml`` where NVML sees a GPU, else ``unlimited``.
"""

from __future__ import annotations

from traitlets import Int, validate

from ...units import size_text
from ..config.traits import not_negative
from .base import CapacityProvider, Grant, Holder, Need, UnlimitedCapacity, Verdict, sessions_text
from .probes import GpuProbe


class QuotaCapacity(CapacityProvider):
    """Admin limits on the node: GPU sessions at once, and GPU bytes at once."""

    name = "quota"

    max_sessions = Int(
        0,
        help="GPU sessions at once on this machine, across every server sharing "
        "GpuPauseApp.capacity_queue_url; a resume beyond it waits in line. Kernels started by "
        "hand count but are never blocked. Default: 0 (no limit). Example: 2.",
    ).tag(config=True)

    max_gpu_bytes = Int(
        0,
        help="GPU bytes at once on this machine: the checkpoints' GPU tensors plus headroom "
        "of resumed sessions, and the measured GPU memory of other GPU sessions. "
        "Default: 0 (no limit). Example: 80_000_000_000.",
    ).tag(config=True)

    @validate("max_sessions", "max_gpu_bytes")
    def _limit(self, proposal):
        return not_negative(self, proposal, " (0 = no limit)")

    def decide(self, need: Need, holders: list[Holder]) -> Verdict:
        if self.max_gpu_bytes and need.total > self.max_gpu_bytes:
            return Verdict(
                reason="quota-bytes",
                message=f"{need.text()}, more than this machine's limit of "
                f"{size_text(self.max_gpu_bytes)} of GPU memory for all sessions",
                never=True,
            )
        if self.max_sessions and len(holders) >= self.max_sessions:
            return Verdict(
                reason="quota-sessions",
                message=f"the limit of {sessions_text(self.max_sessions)} on this machine is "
                "in use",
            )
        used = sum(h.bytes for h in holders)
        if self.max_gpu_bytes and used + need.total > self.max_gpu_bytes:
            return Verdict(
                reason="quota-bytes",
                message=f"{need.text()}; {size_text(self.max_gpu_bytes - used)} of this "
                f"machine's {size_text(self.max_gpu_bytes)} GPU-memory limit is free",
            )
        return Verdict(Grant(bytes=need.total))

    def limits(self) -> dict:
        return {"max_sessions": self.max_sessions, "max_gpu_bytes": self.max_gpu_bytes}


class NvmlCapacity(CapacityProvider):
    """Real devices and their free memory (NVML); each resume gets the best-fitting GPU(s).

    NVML's free memory is advisory (any process may allocate), so a grant is also a
    reservation: until that resume's restore ends, its bytes count as used on its devices,
    and two resumes never count on the same free memory.
    """

    name = "nvml"
    probe: GpuProbe | None = None  # the server's GPU probe, attached when the services are built

    def _devices(self) -> list[dict]:
        return self.probe.devices() if self.probe is not None else []

    def _free(self, devices: list[dict], holders: list[Holder]) -> dict[str, int]:
        free = {d["uuid"]: d["memory_total"] - d["memory_used"] for d in devices}
        for h in holders:
            if h.reserved and h.devices:
                for uuid in h.devices:
                    if uuid in free:
                        free[uuid] -= h.bytes // len(h.devices)
        return free

    def decide(self, need: Need, holders: list[Holder]) -> Verdict:
        devices = self._devices()
        if not devices:
            return Verdict(
                reason="gpu-memory", message="NVML sees no GPU on this machine", never=True
            )
        largest = max(d["memory_total"] for d in devices)
        if need.per_device[0] > largest or len(need.per_device) > len(devices):
            return Verdict(
                reason="gpu-memory",
                message=f"{need.text()}; this machine has {len(devices)} GPU(s), the largest "
                f"with {size_text(largest)}",
                never=True,
            )
        free = self._free(devices, holders)
        if need.on:  # a kernel suspended in place: only the GPUs it holds its contexts for
            gone = [u for u in need.on if u not in free]
            if gone:
                return Verdict(
                    reason="gpu-memory",
                    message=f"the GPU {gone[0]} it was suspended on is no longer on this machine",
                    never=True,
                )
            free = {u: f for u, f in free.items() if u in need.on}
        order = {d["uuid"]: i for i, d in enumerate(devices)}
        chosen: list[str] = []
        for size in need.per_device:  # largest first, each on the smallest GPU it fits
            fits = [u for u, f in free.items() if u not in chosen and f >= size]
            if not fits:
                best = max((f for u, f in free.items() if u not in chosen), default=0)
                return Verdict(
                    reason="gpu-memory",
                    message=f"{need.text()}; the largest free is {size_text(max(best, 0))}",
                )
            chosen.append(min(fits, key=lambda u: (free[u], order[u])))
        return Verdict(
            Grant(devices=chosen, env={"CUDA_VISIBLE_DEVICES": ",".join(chosen)}, bytes=need.total)
        )

    def devices(self, holders: list[Holder]) -> list[dict]:
        devices = self._devices()
        free = self._free(devices, holders)
        return [
            {
                "index": i,
                "uuid": d["uuid"],
                "name": d["name"],
                "total_bytes": d["memory_total"],
                "free_bytes": max(free[d["uuid"]], 0),
                "sessions": [h.session_id for h in holders if d["uuid"] in h.devices],
            }
            for i, d in enumerate(devices)
        ]

    def notes(self) -> list[str]:
        return list(getattr(self.probe, "notes", lambda: [])()) if self.probe else []


class AutoCapacity(CapacityProvider):
    """Placeholder for ``"auto"``: replaced at start by ``nvml`` or ``unlimited``."""

    name = "auto"


PROVIDERS = {
    "auto": AutoCapacity,
    "nvml": NvmlCapacity,
    "quota": QuotaCapacity,
    "unlimited": UnlimitedCapacity,
}


def build_provider(cls: type, parent, probe: GpuProbe) -> CapacityProvider:
    """The configured provider; ``auto`` resolved against what NVML sees now."""
    if cls is AutoCapacity:
        cls = NvmlCapacity if probe.devices() else UnlimitedCapacity
    provider = cls(parent=parent)
    if isinstance(provider, NvmlCapacity):
        provider.probe = probe
    return provider
