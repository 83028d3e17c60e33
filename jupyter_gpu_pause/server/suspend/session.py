"""What a suspension does to its session: the part of a pause from the agent's ``staged`` to
the GPU released (``suspended``), and the outcomes that keep the kernel alive: kept for a fast
resume once its checkpoint is written, or ``suspended`` saying why the checkpoint was not
written, or why a resume in place did not happen. The pause (``lifecycle/pause.py``) and the
resume in place (``lifecycle/inplace.py``) call these; the state machine is in ``docs/suspend.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from ...store.format import iso, utcnow
from ..state.errors import failure
from ..state.event_types import EventType
from ..state.model import CheckpointBrief, Session, SessionState, gpu_device_count
from ..state.model import Suspension as SuspensionRecord
from .kept import KeptKernels
from .suspender import Suspender, SuspendError


def gpu_bytes(s: Session) -> int:
    """The GPU memory the session's kernel holds, as the probe last saw it (0: unknown)."""
    return int((s.gpu or {}).get("memory_bytes") or 0)


class Suspension:
    """One pause's suspension. ``table``: the session table (persist, record_event, fail);
    ``release``: gives the session's capacity grant back."""

    def __init__(
        self,
        s: Session,
        suspender: Suspender,
        table,
        release: Callable[[str], Awaitable[None]],
        log,
        reason: str,
    ):
        self.s, self.suspender, self.table, self.release, self.log = (
            s,
            suspender,
            table,
            release,
            log,
        )
        self.reason = reason
        self.pid: int | None = None
        self.asked = False
        self.task: asyncio.Future | None = None
        self.done = False  # the kernel is suspended: its GPU released
        self.why_not: str | None = None  # why this pause did not suspend, under the tier

    def ask(self, pid: int | None) -> bool:
        """Whether to ask the agent for host copies: the kernel's process is on this machine
        and the host has memory for its copies and the driver's."""
        self.pid = pid
        if pid is None:
            self.why_not = "the kernel's process cannot be reached from this server"
            return False
        held = gpu_bytes(self.s)
        self.why_not = self.suspender.room(held, also=held)
        self.asked = self.why_not is None  # the agent then guards its cells at "staged"
        return self.asked

    def staged(self, host_bytes: int, released: Callable[[], float]) -> None:
        """The agent has its host copies (progress ``staged``): suspend while it writes."""
        if self.pid is not None and self.task is None and self.why_not is None:
            self.task = asyncio.ensure_future(self._suspend(self.pid, host_bytes, released))

    async def _suspend(self, pid: int, host_bytes: int, released: Callable[[], float]) -> None:
        s, held = self.s, gpu_bytes(self.s)
        self.why_not = self.suspender.room(held)
        if self.why_not is not None:
            return
        try:
            pids, _ = await self.suspender.suspend(pid)
        except SuspendError as e:
            self.why_not = str(e)
            self.log.warning("jupyter_gpu_pause: %s: not suspended: %s", s.path, e)
            return
        self.done = True
        seconds = round(released(), 3)
        s.state = SessionState.SUSPENDED
        s.gpu_devices_paused = gpu_device_count(s.gpu)  # reclaimed from now on, per device
        s.suspended = {
            "since": iso(utcnow()),
            "pids": pids,
            # the agent's copies and the driver's; None: neither measured
            "host_bytes": (host_bytes + held) or None,
            "gpu_bytes": held,
            "devices": list((s.gpu or {}).get("devices") or []),
            "checkpoint": "writing",
            "kept_until": None,
            "gpu_released_seconds": seconds,
        }
        s.message = f"Suspended — GPU released in {seconds:.1f} s; writing checkpoint"
        await self.release(s.id)  # the next in line may start now
        await self.table.persist(s)
        await self.table.record_event(
            s,
            EventType.SUSPENDED,
            self.reason,
            gpu_released_seconds=seconds,
            host_bytes=s.suspended["host_bytes"],
            message=s.message,
        )

    async def unguard(self, run_agent, kernel_id: str) -> None:
        """The kernel runs on unsuspended (a pause that did not suspend it and failed or was
        cancelled, a resume in place): lift the guard the agent put up at ``staged``
        (``kernel/guard.py``), so its cells run again. Never raises: the outcome stands."""
        if not self.asked:
            return
        try:
            await run_agent(kernel_id, "unguard", {})
        except Exception as e:
            self.log.error("jupyter_gpu_pause: %s: cells still refused: %s", self.s.path, e)

    async def settled(self) -> bool:
        """Whether the kernel is suspended, once a suspension under way has ended."""
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
        return self.done

    async def keep(
        self,
        kept: KeptKernels,
        seconds: float,
        brief: CheckpointBrief,
        let_go: Callable[[str], Awaitable],
    ) -> None:
        """The checkpoint is written: keep the kernel ``seconds`` for a resume in place."""
        s, suspended = self.s, self.s.suspended
        assert suspended is not None, "a kernel is kept once it is suspended"
        until = utcnow() + timedelta(seconds=seconds)
        s.checkpoint = brief
        suspended["checkpoint"] = "written"
        suspended["kept_until"] = iso(until)
        s.message = (
            f"Suspended — checkpoint {brief['id']} saved; the kernel is kept for a fast resume "
            f"until {until:%H:%M:%S} UTC"
        )
        kept.keep(s.id, seconds, suspended["host_bytes"] or 0, let_go)
        await self.table.persist(s)

    async def unwritten(self, e: BaseException | None, timings: dict) -> bool:
        """The pause's work ended early (``e``; None: cancelled). A suspended kernel keeps
        every variable: the session stays ``suspended`` saying why the checkpoint was not
        written (True). Not suspended (False): the pause's own outcome stands."""
        if not await self.settled():
            return False
        reason, text = failure(e) if e is not None else ("cancelled", "the pause was cancelled")
        if reason == "internal":
            self.log.error("jupyter_gpu_pause: pause of %s", self.s.path, exc_info=e)
        assert self.s.suspended is not None, "settled: the kernel is suspended"
        self.s.suspended["checkpoint"] = "failed"
        await self.table.fail(
            self.s,
            EventType.PAUSE_FAILED,
            self.reason,
            state=SessionState.SUSPENDED,
            reason=reason,
            text=f"checkpoint not written: {text}",
            intact=True,
            message=f"Suspended — checkpoint not written: {text}. Every variable is still in "
            "the kernel; Resume brings it back in place",
            **timings,
        )
        return True


class NotSuspending:
    """The checkpoint tier's answers at the same seams: the kernel is never suspended, the
    pause's own outcomes stand (a pause calls its tier without asking which one it is)."""

    why_not: str | None = None

    def ask(self, pid: int | None) -> bool:
        return False

    def staged(self, host_bytes: int, released: Callable[[], float]) -> None:
        pass

    async def settled(self) -> bool:
        return False

    async def unguard(self, run_agent, kernel_id: str) -> None:
        pass

    async def unwritten(self, e: BaseException | None, timings: dict) -> bool:
        return False


async def guard_lifted(run_agent, s: Session) -> None:
    """A resume in place: the kernel's CUDA state is back, its cells may run again (the agent
    lifts the guard it put up at ``staged``, ``kernel/guard.py``)."""
    try:
        await run_agent(s.kernel_id, "unguard", {})
    except Exception as e:  # said in the message; restoring the CUDA state again is no use
        raise SuspendError(f"the kernel's cells could not be let run again ({e})") from e


async def not_back(
    table, kill, s: Session, suspended: SuspensionRecord, reason, text, timings
) -> None:
    """A resume in place did not happen: a kernel whose checkpoint is not written stays
    suspended with everything; one whose checkpoint is written is stopped (``kill``) and the
    session ``paused``, its next resume from that checkpoint."""
    s.device, s.grant = None, None
    common = dict(reason=reason, text=f"not resumed in place: {text}", intact=True, in_place=True)
    if suspended.get("checkpoint") != "written":
        s.suspended = suspended
        await table.fail(
            s,
            EventType.RESUME_FAILED,
            "user",
            state=SessionState.SUSPENDED,
            message=f"Suspended — not resumed in place: {text}. Every variable is still in "
            "the kernel; Resume tries again",
            **common,
            **timings,
        )
        return
    assert s.checkpoint is not None, "a written checkpoint is the session's (Suspension.keep)"
    await kill(s.kernel_id)
    s.kernel_id, s.suspended = None, None
    await table.fail(
        s,
        EventType.RESUME_FAILED,
        "user",
        state=SessionState.PAUSED,
        message=f"Paused — not resumed in place ({text}); checkpoint {s.checkpoint['id']} is "
        "intact: Resume starts a new kernel from it",
        **common,
        **timings,
    )
