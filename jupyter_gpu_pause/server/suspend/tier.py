"""Which pause tier is in force on this server, and why: said once at start (the log) and in
``GET capacity`` (``tier``), so an admin never has to guess why a pause took the path it took.

- ``suspend``: GPU sessions are suspended in place; the checkpoint is written behind.
- ``checkpoint``: the checkpoint is written, then the kernel stops (the path everywhere else).

A session may still take the checkpoint path under the suspend tier (the host short of memory,
the kernel holding no CUDA state, the driver refusing the process); its pause says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .driver import CudaCheckpoint


@dataclass(frozen=True)
class Tier:
    name: str  # "suspend" | "checkpoint"
    reason: str
    driver_version: str | None = None

    @property
    def suspends(self) -> bool:
        return self.name == "suspend"

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason, "driver_version": self.driver_version}


def decide(setting: str, driver: CudaCheckpoint | None, remote_kernels: bool) -> Tier:
    """``setting``: ``GpuPauseApp.suspend``; ``driver``: the boundary, probed here (once);
    ``remote_kernels``: kernels run elsewhere (a gateway), out of this driver's reach."""
    if setting == "never":
        return Tier("checkpoint", "suspend in place is turned off (GpuPauseApp.suspend = 'never')")
    if remote_kernels:
        return Tier(
            "checkpoint",
            "kernels run on a gateway, out of reach of this machine's CUDA driver",
        )
    found = driver.probe() if driver is not None else None
    if found is None or not found.ok:
        why = found.reason if found else "no CUDA checkpoint driver is configured"
        return Tier("checkpoint", why, found.driver_version if found else None)
    return Tier("suspend", found.reason, found.driver_version)
