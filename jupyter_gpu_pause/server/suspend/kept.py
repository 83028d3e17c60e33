"""Suspended kernels kept after their checkpoint is written (``keep_suspended_seconds``): a
resume in those seconds restores the kernel in place (about the time of copying its memory back
to the GPU) instead of starting a new one and reading the checkpoint.

A kept kernel holds host memory nobody uses until then: it is let go when its time is up, when
the host's available memory falls under what the kernel holds, or when the server stops (its
checkpoint is written: nothing is lost, its resume only takes longer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psutil

MEMORY_CHECK_SECONDS = 2.0  # how often a kept kernel's host memory is weighed against the host's


class KeptKernels:
    def __init__(self, log):
        self.log = log
        self._kept: dict[str, asyncio.Task] = {}
        self._let_go: dict[str, Callable[[str], Awaitable[None]]] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._kept

    def keep(
        self,
        session_id: str,
        seconds: float,
        host_bytes: int,
        let_go: Callable[[str], Awaitable[None]],
    ) -> None:
        """Keep the session's kernel ``seconds``; then (or earlier, for memory) ``let_go(why)``."""
        self.drop(session_id)
        task = asyncio.ensure_future(self._watch(session_id, seconds, host_bytes, let_go))
        self._kept[session_id] = task
        self._let_go[session_id] = let_go

    async def _watch(self, session_id, seconds, host_bytes, let_go) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        why = f"kept {seconds:g} s (GpuPauseApp.keep_suspended_seconds)"
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(left, MEMORY_CHECK_SECONDS))
            if psutil.virtual_memory().available < host_bytes:
                why = "the host needed the memory the suspended kernel held"
                break
        self._kept.pop(session_id, None)  # from here a drop() no longer cancels this
        self._let_go.pop(session_id, None)
        try:
            await let_go(why)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not let a kept kernel go")

    def drop(self, session_id: str) -> bool:
        """Stop keeping (a resume in place takes the kernel, or it ended); True if it was."""
        self._let_go.pop(session_id, None)
        task = self._kept.pop(session_id, None)
        if task is None:
            return False
        task.cancel()
        return True

    async def let_go_now(self, session_id: str, why: str) -> bool:
        """Let a kept kernel go at once (a resume from its checkpoint, the server stopping)."""
        let_go = self._let_go.get(session_id)
        if not self.drop(session_id) or let_go is None:
            return False
        try:
            await let_go(why)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not let a kept kernel go")
        return True

    async def let_all_go(self) -> None:
        """The server stops: let every kept kernel go now (their checkpoints are written)."""
        for session_id in list(self._kept):
            await self.let_go_now(session_id, "the server is stopping")
