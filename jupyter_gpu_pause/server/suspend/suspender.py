"""Suspending a kernel's processes in place, and bringing them back: the driver's calls in the
order the API needs them, on one worker thread per server, undone when any step fails.

A kernel's GPU work may run in a child process (a DataLoader worker, a subprocess): every
process of the kernel's tree that the driver knows as a CUDA process is suspended, or none is.

Host memory is the price of a suspended kernel (the agent's copies of its tensors plus the
driver's copy of its GPU memory): ``room`` refuses a suspension the host cannot hold with
``min_free`` times the kernel's GPU memory still available, so a node is never swapped to death;
the pause then takes the checkpoint path and says why.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from ...units import size_text
from ..capacity.probes import process_tree
from .driver import CudaCheckpoint, DriverError
from .tier import Tier

LOCK_TIMEOUT_MS = 10_000  # the lock waits for the GPU work already submitted, at most this


class SuspendError(Exception):
    """Suspending (or restoring) failed; every process is back as it was before the call,
    as far as the driver allows (``text`` says what failed)."""


class Suspender:
    def __init__(self, driver: CudaCheckpoint, tier: Tier, min_free: float, log):
        self.driver, self.tier, self.min_free, self.log = driver, tier, min_free, log
        # one thread: the driver's calls for one process must not interleave with another's
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="gp-cuda-checkpoint")

    def room(self, gpu_bytes: int, also: int = 0) -> str | None:
        """Why the host cannot hold a suspended kernel of ``gpu_bytes`` now (and ``also``
        bytes more: the agent's copies, before it makes them), or None."""
        available = psutil.virtual_memory().available
        need = self.min_free * gpu_bytes + also
        if available >= need:
            return None
        return (
            f"the host has {size_text(available)} of memory available, less than "
            f"{self.min_free:g} × the kernel's {size_text(gpu_bytes)} of GPU memory "
            "(GpuPauseApp.suspend_min_free_memory)"
        )

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def suspend(self, pid: int) -> tuple[list[int], float]:
        """Suspend the CUDA processes of ``pid``'s tree; returns them and the seconds it took.
        Once started it runs to its end even if the caller is cancelled (a half-suspended
        kernel is undone, never left locked)."""
        return await asyncio.shield(self._run(self._suspend, pid))

    async def restore(self, pids: list[int]) -> float:
        """Put suspended processes back on their GPU and let them run CUDA again."""
        return await asyncio.shield(self._run(self._restore, list(pids)))

    def _suspend(self, pid: int) -> tuple[list[int], float]:
        began = time.monotonic()
        d = self.driver
        pids = sorted(p for p in process_tree(pid) if d.state(p) == "running")
        if not pids:
            raise SuspendError("the kernel holds no CUDA state to suspend")
        locked: list[int] = []
        done: list[int] = []
        try:
            for p in pids:
                d.lock(p, LOCK_TIMEOUT_MS)
                locked.append(p)
            for p in pids:
                d.checkpoint(p)
                done.append(p)
        except DriverError as e:
            self._undo(done, locked)
            raise SuspendError(f"the CUDA driver could not suspend the kernel: {e}") from e
        return pids, time.monotonic() - began

    def _undo(self, done: list[int], locked: list[int]) -> None:
        for p in done:
            try:
                self.driver.restore(p)
            except DriverError:
                self.log.exception("jupyter_gpu_pause: could not restore process %s", p)
        for p in locked:
            try:
                self.driver.unlock(p)
            except DriverError:
                self.log.exception("jupyter_gpu_pause: could not unlock process %s", p)

    def _restore(self, pids: list[int]) -> float:
        began = time.monotonic()
        try:
            for p in pids:
                if self.driver.state(p) == "checkpointed":
                    self.driver.restore(p)
            for p in pids:
                if self.driver.state(p) == "locked":
                    self.driver.unlock(p)
        except DriverError as e:
            raise SuspendError(f"the CUDA driver could not restore the kernel: {e}") from e
        return time.monotonic() - began

    def close(self) -> None:
        self._pool.shutdown(wait=False)
