"""How many resumes restore at once (``c.GpuPauseApp.max_concurrent_restores``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

from ...units import count_text
from ..state.model import Session


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity, which a container's cpuset narrows."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class RestoreSlots:
    """At most ``size`` resumes start a kernel and restore into it at the same time; the rest
    wait their turn, first come first served (default size: twice the CPUs this server may use).

    Starting a kernel (Python, ipykernel, torch) and restoring into it take seconds of CPU
    each, in the kernel, where the server can make nothing shorter. Twenty at once on two
    cores starve the server itself: jupyter_client starts each kernel in a session of its
    own and Linux shares the CPU between sessions (autogroups; in a container, between
    threads), so the server's event loop gets about 1/21 of it and every request, ours and
    Jupyter's, waits hundreds of ms behind the kernels (``benchmarks/bench_storm.py``: the
    loop thread waited for a CPU 80 % of the storm, its slow callbacks were on a CPU 4 % of
    their time; p99 300 ms). With twice as many restores at a time as CPUs the machine is as
    busy, the server keeps a third to a half of a CPU and answers in milliseconds (p99 20-30
    ms), and the first notebooks are usable long before the last; the whole storm took about
    a quarter longer (20 x 32 MiB on 2 CPUs: ~23 s instead of ~19 s).

    While a resume waits for a slot its session says so (``progress.phase`` ``queued``);
    cancelling the wait (a stopping server) takes it out of the line.
    """

    def __init__(self, size: int = 0):
        self.size = size if size > 0 else 2 * usable_cpus()
        self._free = asyncio.Semaphore(self.size)
        self.waiting = 0  # resumes waiting for a slot now

    @contextlib.asynccontextmanager
    async def hold(self, s: Session, announce: Callable[[], Awaitable[None]] | None = None):
        """Hold a slot for the block; meanwhile ``s`` shows its wait, and then its message
        and progress as they were. ``announce`` (saving the session) runs once ``s`` says
        whether it waits, so that no one, the API included, sees it restoring before it has
        a slot."""
        if self._free.locked():
            before = s.message, s.progress
            ahead = self.waiting
            s.message = f"Waiting to restore: this server restores {self.size} at a time"
            if ahead:
                s.message += f", {count_text(ahead, 'other resume')} first"
            s.progress = {**(s.progress or {}), "phase": "queued"}
            self.waiting += 1
            try:
                if announce is not None:
                    await announce()
                await self._free.acquire()
            finally:
                self.waiting -= 1
            s.message, s.progress = before
        else:
            await self._free.acquire()  # free: returns at once, the slot ours
            if announce is not None:
                await announce()
        try:
            yield
        finally:
            self._free.release()
