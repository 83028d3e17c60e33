"""Which sessions are GPU sessions, and what this server holds on the node's GPUs.

A *GPU session* is one whose kernel uses a GPU (NVML saw its memory), or whose checkpoint holds
GPU tensors, or whose kernelspec matches ``GpuPauseApp.gpu_kernelspecs``, or that a resume
placed on a GPU. A session resumed on the CPU is not one until it is resumed on a GPU again.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from ..state.model import RUNNING, Session, SessionState
from . import Holder

# states in which a kernel may hold a GPU
HOLDING = (*RUNNING, SessionState.PAUSING, SessionState.RESTORING)


def is_gpu_session(s: Session, kernelspec_globs: list[str] | tuple[str, ...]) -> bool:
    if s.device == "cpu":
        return False
    return bool(
        s.device == "gpu"
        or (s.gpu and s.gpu.get("memory_bytes"))
        or (s.checkpoint and s.checkpoint.get("gpu_bytes"))
        or s.gpu_devices_paused
        or any(fnmatchcase(s.kernel_name or "", g) for g in kernelspec_globs)
    )


def holders(sessions, kernelspec_globs, is_running, server_id: str = "") -> list[Holder]:
    """This server's GPU sessions whose kernel runs (or is being started for a resume)."""
    out = []
    for s in sessions:
        if s.state not in HOLDING or not is_gpu_session(s, kernelspec_globs):
            continue
        restoring = s.state == SessionState.RESTORING
        if restoring and s.device != "gpu":
            continue  # a CPU or ungoverned resume holds no GPU
        if not restoring and not is_running(s.kernel_id):
            continue
        grant = s.grant or {}
        measured = int((s.gpu or {}).get("memory_bytes") or 0)
        devices = tuple((s.gpu or {}).get("devices") or grant.get("devices") or ())
        out.append(
            Holder(
                session_id=s.id,
                server_id=server_id,
                bytes=max(measured, int(grant.get("bytes") or 0)),
                devices=devices,
                reserved=restoring,
            )
        )
    return out
