"""What resumes and the session table talk to: the provider, the queue, and this server's
part of the usage the queue counts.

``wait`` keeps a resume in line until the provider grants it (FIFO across every server on the
queue); ``try_now`` is the "a GPU if one is free now" of ``device: "any"``; ``changed`` tells
the queue, soon and coalesced, which GPU sessions this server holds (a pause, a kernel's end,
a new GPU kernel), and wakes this server's own waiters at once.

Each sync also publishes this server's GPU sessions on the queue's board (``board.py``), read by
the admin console: at every heartbeat and soon after each lifecycle event.

``claim`` makes sure a session runs on one server only, where servers share a store (and so
see each other's paused sessions): a resume claims its session first, and ``elsewhere`` says
which sessions other servers run now.

A queue in PostgreSQL can be down. Then ``unavailable`` says why: a new resume is refused with
503 ``capacity-unavailable`` (its claim cannot be made), a waiting resume stays in line saying
so and goes on when the database is back, and the heartbeat tells the queue this server's
usage again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from ...store.format import iso
from ..state.errors import GpuPauseError, Unavailable, WrongState
from .base import CapacityProvider, Grant, Holder, Need, Verdict
from .board import BoardRows
from .queue import CapacityQueue, ClaimHolder, QueueUnavailable, Turn


class NeverFits(GpuPauseError):
    """The need exceeds what this node could ever give: waiting would be forever."""

    def __init__(self, message: str):
        super().__init__(message, "too-large")


def held_elsewhere(other: ClaimHolder) -> str:
    """Why a resume is refused: where the session runs, and, for a server of another machine
    (which may be gone without anyone here knowing), when its hold ends unless it answers."""
    if other.here:  # its process runs on this machine: it is not a lease to wait out
        return (
            f"this session runs on {other.label}: it was resumed there. Open it there, or "
            "pause it there first"
        )
    until = time.strftime("%H:%M:%S UTC", time.gmtime(other.lease_until))
    return (
        f"this session is held by server {other.label} until {until} unless it answers: it "
        "was resumed there. Open it there, or pause it there first; if that server is gone, "
        f"resume again after {until}"
    )


class CapacityUnavailable(Unavailable):
    """The queue cannot be reached: a resume can be neither claimed (another server may be
    resuming the same session) nor queued."""

    reason = "capacity-unavailable"


class Capacity:
    def __init__(
        self,
        provider: CapacityProvider,
        queue: CapacityQueue | None,
        holders: Callable[[], list[Holder]],
        log,
        configured: str | None = None,
        live: Callable[[], set[str]] = set,
    ):
        self.provider, self.queue, self._holders, self.log = provider, queue, holders, log
        self._live = live  # the sessions this server runs (a kernel, or a resume under way)
        self._claiming: set[str] = set()  # claimed, their state not yet saying so
        self.elsewhere: dict[str, str] = {}  # session id → label of the server running it
        self.configured = configured or provider.name
        self._wake = asyncio.Event()
        self._sync_task: asyncio.Task | None = None
        self._dirty = False
        self._heartbeat: asyncio.Task | None = None
        self.unavailable: str | None = None  # why the queue cannot be used now
        # {session id: weighted GPUs} of the holders, for the GPU-hour budgets' meter
        # (``budgets.meter``); None: nothing metered (no budget configured)
        self.meter: Callable[[list[Holder]], dict[str, float]] | None = None
        # this server's GPU sessions as the queue's board lists them (``board.Board``), sent
        # with every sync; None: nothing published
        self.board: Callable[[], BoardRows] | None = None

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def _queue(self) -> CapacityQueue:
        """The queue, for the code that runs only with one (``queued``, the heartbeat, a sync)."""
        if self.queue is None:
            raise RuntimeError("jupyter_gpu_pause: no capacity queue is configured")
        return self.queue

    @property
    def queued(self) -> bool:
        """Whether GPU resumes wait in line (the provider decides with the queue's usage)."""
        return self.queue is not None and self.provider.queued

    # -- running -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.queue is not None:
            try:
                await self.queue.open()
            except QueueUnavailable as e:
                self._down(e)
            self._heartbeat = asyncio.ensure_future(self._renew_forever())
            self.changed()

    def _down(self, e: QueueUnavailable) -> None:
        if self.unavailable is None:
            self.log.error(
                "jupyter_gpu_pause: %s. Pauses go on; new resumes answer 503 "
                "(capacity-unavailable) and waiting ones keep their place until it is back "
                "(tried again every %g s)",
                e,
                self._queue.lease_seconds / 3,
            )
        self.unavailable = str(e)

    def _up(self) -> None:
        if self.unavailable is not None:
            self.unavailable = None
            self.log.warning(
                "jupyter_gpu_pause: the capacity queue at %s is back", self._queue.where
            )
            self.changed()  # what changed meanwhile: tell it this server's GPU sessions

    async def stop(self) -> None:
        for task in (self._heartbeat, self._sync_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.queue is not None:
            await self.queue.close(self._board())

    def _board(self) -> BoardRows | None:
        """The board rows to publish now; None (the board left as it is) if they cannot be
        built, which is logged."""
        if self.board is None:
            return None
        try:
            return self.board()
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not list the sessions for the board")
            return None

    async def _renew_forever(self) -> None:
        """Every third of the lease, one sync: it renews the lease, tells the queue this
        server's GPU sessions and claims again (after a lapse or an outage), and learns what
        other servers run now (``elsewhere``)."""
        while True:
            await asyncio.sleep(self._queue.lease_seconds / 3)
            self.changed()

    # -- asking --------------------------------------------------------------------------------
    def need(self, session_id: str, gpu_bytes_per_device: list[int], on=()) -> Need:
        return self.provider.need(session_id, gpu_bytes_per_device, on)

    def _decide(self, need: Need, holders: list[Holder]) -> Verdict:
        verdict = self.provider.decide(need, holders)
        if verdict.never:
            raise NeverFits(verdict.message)
        return verdict

    async def wait(
        self,
        need: Need,
        name: str,
        since: datetime,
        on_wait: Callable[[Turn], Awaitable[None]],
        rank: float | None = None,
    ) -> tuple[Grant, float | None]:
        """Wait in line until granted; returns the grant and the place held in line.

        Cancelling leaves the line (and gives back a grant made at that very moment).
        """
        if not self.queued:
            verdict = self._decide(need, [])
            return verdict.grant or Grant(), None
        queue, stamp = self._queue, since.timestamp()
        entry: int | None = None
        await self._told()
        try:
            while True:
                wake = self._wake
                try:
                    if entry is None or rank is None:
                        entry, rank = await queue.join(need, name, stamp, rank)
                    turn = await queue.turn(entry, rank, need, name, stamp, self._decide)
                    self._up()
                except QueueUnavailable as e:  # keep the place (it outlives an outage
                    self._down(e)  # shorter than the lease) and look again
                    turn = Turn(None, 0, Verdict(reason="queue-unavailable", message=str(e)))
                if turn.grant is not None:
                    return turn.grant, rank
                await on_wait(turn)
                try:
                    await asyncio.wait_for(wake.wait(), queue.poll_interval)
                except asyncio.TimeoutError:
                    pass
        except BaseException:
            if entry is not None:
                await asyncio.shield(self._leave(entry, need.session_id))
            raise

    async def try_now(self, need: Need) -> Grant | None:
        """A grant if nobody is in line and it fits now, else None (never waits)."""
        if not self.queued:
            return self.provider.decide(need, []).grant
        await self._told()
        try:
            return await self._queue.try_now(need, self.provider.decide)
        except QueueUnavailable as e:  # nobody can say a GPU is free: the CPU, as asked
            self._down(e)
            return None

    async def _leave(self, entry: int | None, session_id: str) -> None:
        try:
            await self._queue.leave(entry, session_id)
        except QueueUnavailable as e:  # told again by the heartbeat once it is back
            self._down(e)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not leave the capacity queue")
        self._notify()

    async def release(self, session_id: str) -> None:
        """Give back a grant at once (a failed or cancelled resume, a pause)."""
        if self.queue is not None:
            await self._leave(None, session_id)

    # -- one server per session ---------------------------------------------------------------
    async def claim(self, session_id: str) -> None:
        """Claim a session about to be resumed here: WrongState ``resumed-elsewhere`` when
        another server runs it, CapacityUnavailable when nobody can tell (the queue is down).
        The caller calls ``claimed`` once the session's state says it is live."""
        if self.queue is None:
            return
        self._claiming.add(session_id)
        try:
            other = await self.queue.claim(session_id)
        except QueueUnavailable as e:
            self._claiming.discard(session_id)
            self._down(e)
            raise CapacityUnavailable(
                f"{e}: nothing can make sure this session is not being resumed on another "
                "server at the same moment. Your checkpoint is safe; resume again once it is back"
            ) from None
        except BaseException:
            self._claiming.discard(session_id)
            raise
        self._up()
        if other is not None:
            self._claiming.discard(session_id)
            self.elsewhere[session_id] = other.label
            raise WrongState(held_elsewhere(other), "resumed-elsewhere", where=other.label)
        self.elsewhere.pop(session_id, None)

    def claimed(self, session_id: str) -> None:
        self._claiming.discard(session_id)

    # -- this server's usage -------------------------------------------------------------------
    def changed(self) -> None:
        """The GPU sessions of this server may have changed: tell the queue, soon."""
        if self.queue is None:
            return
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = asyncio.ensure_future(self._sync())
        else:
            self._dirty = True

    async def _told(self) -> None:
        """Before the queue decides on a GPU for this server: it knows every GPU session this
        server holds now (a kernel opened a moment ago included), not as of the last update."""
        self.changed()
        if self._sync_task is not None:
            await asyncio.wait([self._sync_task])  # a cancelled resume leaves the sync running

    async def _sync(self) -> None:
        while True:
            self._dirty = False
            try:
                live = self._live() | self._claiming
                holders = self._holders()
                metered = self.meter(holders) if self.meter is not None else None
                board = self._board()
                self.elsewhere = await self._queue.set_holders(holders, live, metered, board)
                self._up()
            except QueueUnavailable as e:  # told again by the heartbeat once it is back
                self._down(e)
            except Exception:
                self.log.exception("jupyter_gpu_pause: could not update the capacity queue")
            self._notify()
            if not self._dirty:
                return

    def _notify(self) -> None:
        """Wake this server's waiters now (others find out at their next look)."""
        self._wake.set()
        self._wake = asyncio.Event()

    # -- GET capacity --------------------------------------------------------------------------
    async def describe(self, paths: dict[str, str]) -> dict:
        """``paths``: this server's session ids → notebook paths (others show file names)."""
        snap: dict[str, Any] = {"queue": [], "holders": []}
        if self.queue is not None:
            try:
                snap = await self.queue.snapshot()
                self._up()
            except QueueUnavailable as e:
                self._down(e)
        holders = snap["holders"]
        queue = []
        for w in snap["queue"]:
            queue.append(
                {
                    "session_id": w["session_id"],
                    "path": paths.get(w["session_id"], w["name"]),
                    "server": w["server"],
                    "user": w["user"],
                    "position": w["position"],
                    "since": iso(datetime.fromtimestamp(w["since"], timezone.utc)),
                    "needs_bytes": w["needs_bytes"],
                    "reason": w["reason"],
                    "message": w["message"],
                }
            )
        return {
            "provider": self.provider.name,
            "configured": self.configured,
            "queue_folder": getattr(self.queue, "folder", None),
            "queue_url": self.queue.where if self.queue else None,
            "queue_available": self.queue is not None and self.unavailable is None,
            "queue_error": self.unavailable,
            "devices": self.provider.devices(holders),
            "limits": self.provider.limits(),
            "usage": {"sessions": len(holders), "gpu_bytes": sum(h.bytes for h in holders)},
            "holders": [
                {"session_id": h.session_id, "path": paths.get(h.session_id), "bytes": h.bytes}
                for h in holders
            ],
            "queue": queue,
            "notes": self.provider.notes(),
        }
