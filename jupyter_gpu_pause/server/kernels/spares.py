"""Warm kernels: one kernel kept started per kernelspec that has a paused session, so that a
resume restores into it instead of waiting for a kernel to start and import torch (or pandas,
or whatever package the checkpoint's objects come from).

A resume spends most of its time before the first byte is read: Jupyter launching a kernel
(~0.5 s) and the kernel importing torch (~1.2 s on a 2-core VM) take longer than reading a GiB
from the page cache. A warm kernel has done both already. It holds no GPU: importing torch does
not initialise CUDA, and the restore sets the resumed session's environment (the capacity
grant's ``CUDA_VISIBLE_DEVICES``, Jupyter's ``JPY_SESSION_NAME``) and working folder in the
kernel before anything touches a device (``agent.restore``).

The pool follows the paused sessions: a kernelspec gets its warm kernel once one of its
sessions is paused, and loses it when none is left; a warm kernel that a person or Jupyter's
culler shut down is started again at the next look. A GPU session's pause asks for one as it
begins (``pausing``), with the packages its capture found as soon as the writing starts
(``expect``): its kernel starts and imports torch while the pause writes gigabytes, and a resume
asked the moment the pause ends finds it ready. (Small pauses of CPU sessions are not slowed by
a kernel starting beside them.) A kernel already warm that a newer checkpoint needs more
packages in imports them too (``_extend``). It is a plain Jupyter kernel with no
session (``GET /api/kernels`` lists it, ``GET gpu-pause/api/capacity`` says whose it is); a
resume takes one that is still starting once it is ready, as it is ahead of a kernel started then.

A resume asked the moment a small pause ended waits for the warm kernel that pause's end started
(~0.5 s on a 2-core VM, against ~0.05 s into a ready one).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from datetime import datetime

from ...kernel.protocol import WARM, WarmArgs
from ...store.format import utcnow
from ..state.model import SessionState

LOOK_SECONDS = 2.0  # between two looks at what the paused sessions need
RETRY_SECONDS = 60.0  # before trying again a kernelspec whose warm kernel failed
# sessions that may take a warm kernel: paused, or resuming and not yet given a kernel
WANTING = (SessionState.PAUSED, SessionState.WAITING, SessionState.RESTORING)


@dataclass
class Warm:
    """One warm kernel: its id, what it was asked to import, and whether it is done."""

    kernel_id: str | None  # None until Jupyter has started it
    modules: tuple[str, ...]
    ready: bool = False
    task: asyncio.Future | None = field(default=None, repr=False)


class WarmKernels:
    def __init__(self, bridge, log, sessions, elsewhere=dict):
        """``sessions()``: the sessions the server tracks (``Session`` objects);
        ``elsewhere()``: those another server runs now, by id (``CapacityService.elsewhere``):
        listed here as paused, but no resume here can take them, so they want no warm kernel."""
        self.bridge, self.log, self._sessions = bridge, log, sessions
        self._elsewhere = elsewhere
        self.warm: dict[str, Warm] = {}  # kernelspec -> its warm kernel
        self._failed: dict[str, float] = {}  # kernelspec -> loop time before which not to retry
        self._nudged = asyncio.Event()
        self._loop_task: asyncio.Future | None = None
        # sessions being paused that asked for a warm kernel: session id -> packages so far
        self._pausing: dict[str, set[str]] = {}
        # when the pool last finished a look (wall clock), so that an operator, or a test,
        # can tell "it looked again and kept none" from "it has not looked yet"
        self.checked_at: datetime | None = None

    # -- what resumes use ------------------------------------------------------------------
    async def take(self, kernel_name: str) -> str | None:
        """A warm kernel of ``kernel_name``, now the caller's; None when there is none (the
        caller starts a kernel as before). One still starting is waited for: it is ahead of a
        kernel started now. The pool starts a new one at its next look."""
        w = self.warm.get(kernel_name)
        if w is None:
            return None
        if w.task is not None and not w.task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(w.task)
        if self.warm.get(kernel_name) is not w or not w.ready:
            return None  # another resume took it, or it could not be prepared
        if not self.bridge.is_running(w.kernel_id):
            return None
        if self.bridge.execution_state(w.kernel_id) == "busy":
            return None  # someone runs code in it
        del self.warm[kernel_name]  # the resume's end nudges the pool (not now: see reconcile)
        return w.kernel_id

    def describe(self) -> list[dict]:
        """The pool as ``GET capacity`` shows it: an operator sees why a kernel with no
        session runs, and a benchmark sees when a resume would find one ready."""
        return [
            {
                "kernel_name": name,
                "kernel_id": w.kernel_id,
                # started and done importing: a resume would not wait for it
                "ready": w.ready and (w.task is None or w.task.done()),
                "modules": list(w.modules),
            }
            for name, w in sorted(self.warm.items())
        ]

    def nudge(self) -> None:
        """Look again now (a session was paused, resumed or discarded)."""
        self._nudged.set()

    def pausing(self, s) -> None:
        """``s`` (a GPU session) begins to pause: its kernelspec wants a warm kernel now, with
        the packages of its last checkpoint, if any, until the capture says more."""
        self._pausing[s.id] = set((s.checkpoint or {}).get("packages") or ())
        self.nudge()

    def expect(self, s, packages: list[str]) -> None:
        """The capture of ``s``, being paused, found its objects' classes in ``packages``."""
        if s.id in self._pausing and not set(packages) <= self._pausing[s.id]:
            self._pausing[s.id].update(packages)
            self.nudge()

    # -- the pool's loop -------------------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop looking and shut the warm kernels down (no one else would)."""
        if self._loop_task:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for name in list(self.warm):
            await self._drop(name)

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
                self.checked_at = utcnow()
            except Exception:
                self.log.exception("jupyter_gpu_pause: could not keep warm kernels")
            self._nudged.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), LOOK_SECONDS)

    def wanted(self) -> dict[str, tuple[str, ...]]:
        """Kernelspec -> packages to import (those the paused checkpoints' objects come from),
        for every kernelspec with a paused session (or one being resumed) that no other server
        runs."""
        out: dict[str, set[str]] = {}
        pausing = set()
        elsewhere = self._elsewhere()
        for s in self._sessions():
            if s.state == SessionState.PAUSING and s.id in self._pausing:
                pausing.add(s.id)
                out.setdefault(s.kernel_name, set()).update(self._pausing[s.id])
            if s.id in elsewhere:
                continue
            if s.state in WANTING and s.checkpoint:
                mods = out.setdefault(s.kernel_name, set())
                mods.update((s.checkpoint or {}).get("packages") or ())
        for sid in set(self._pausing) - pausing:  # paused now, or the pause failed
            del self._pausing[sid]
        return {k: tuple(sorted(v)) for k, v in out.items()}

    async def reconcile(self) -> None:
        want = self.wanted()
        for name in [n for n in self.warm if n not in want]:
            await self._drop(name)
        if any(s.state == SessionState.RESTORING for s in self._sessions()):
            # a kernel starting and importing torch takes seconds of CPU, which a restore
            # running now needs more: the next look after it ends starts what is missing
            return
        for name, modules in want.items():
            w = self.warm.get(name)
            if w is not None and w.ready and not self.bridge.is_running(w.kernel_id):
                del self.warm[name]  # shut down by someone else, or culled
                w = None
            if w is not None and set(modules) - set(w.modules):
                self._extend(w, modules)  # a newer pause needs more imported
            if w is None:
                await self._add(name, modules)

    async def _add(self, name: str, modules: tuple[str, ...]) -> None:
        if asyncio.get_running_loop().time() < self._failed.get(name, 0):
            return  # it could not be started or prepared a moment ago
        w = self.warm[name] = Warm(None, modules)
        w.task = asyncio.ensure_future(self._boot(name, w))

    async def _boot(self, name: str, w: Warm) -> None:
        try:
            w.kernel_id = await self.bridge.start(name, "", "", "", {})
            await self.bridge.run_agent(w.kernel_id, WARM, WarmArgs(modules=list(w.modules)))
        except Exception as e:  # an uninstalled kernelspec, an old agent, a broken env
            self.log.info("jupyter_gpu_pause: no warm kernel of %s: %s", name, e)
            self._failed[name] = asyncio.get_running_loop().time() + RETRY_SECONDS
            if self.warm.get(name) is w:
                del self.warm[name]
            if w.kernel_id:
                with contextlib.suppress(Exception):
                    await self.bridge.shutdown(w.kernel_id)
            return
        w.ready = True

    def _extend(self, w: Warm, modules: tuple[str, ...]) -> None:
        """Import ``modules`` too in ``w``, once what it is doing now (its start, an earlier
        import) is done; a resume taking it waits for that, as it waits for a start."""
        more = tuple(sorted(set(modules) - set(w.modules)))
        w.modules = tuple(sorted(set(w.modules) | set(more)))
        w.task = asyncio.ensure_future(self._import(w, w.task, more))

    async def _import(self, w: Warm, before: asyncio.Future | None, more: tuple) -> None:
        if before is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(before)
        if not w.ready or w.kernel_id is None or all(x is not w for x in self.warm.values()):
            return  # its start failed, or it was taken or dropped meanwhile
        try:
            await self.bridge.run_agent(w.kernel_id, WARM, WarmArgs(modules=list(more)))
        except Exception as e:  # the kernel died: the next look sees it and starts another
            self.log.info("jupyter_gpu_pause: warm kernel %s could not import %s: %s",
                          w.kernel_id, more, e)  # fmt: skip

    async def _drop(self, name: str) -> None:
        w = self.warm.pop(name, None)
        if w is None:
            return
        if w.task and not w.task.done():
            # let it finish rather than cancel it: a kernel start cancelled half way stays
            # registered in jupyter_client and breaks the server's own shutdown (kernels/bridge.py)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(w.task)
        if w.kernel_id is None:
            return
        try:
            await self.bridge.shutdown(w.kernel_id)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not shut down warm kernel %s", w)
