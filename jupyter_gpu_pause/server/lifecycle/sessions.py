"""The session table: every session this server tracks, kept in step with Jupyter's own
sessions and saved in the records.

Operations (pause, resume, cull) change sessions through ``persist`` and ``record_event``,
which never raise: an outcome is not undone because the records database failed. Every saved
change also tells the capacity queue (``on_change``): a pause or a kernel's end gives its GPU
back to the machine's line at once.

One row per notebook: a kernel that JupyterLab starts on opening a paused notebook, and that
has run no code of a person's, is not a session of its own but waits for that notebook's
resume, which restores into it (``waiting_kernels``). Its first cell makes it a session.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...kernel.protocol import TRACK, NoArgs
from ..kernels.bridge import KernelBridge
from ..state.errors import GpuPauseError, NotFound, session_error
from ..state.event_types import EventType
from ..state.model import RUNNING, Session, SessionState
from ..state.records import Records, new_event
from .operations import Operations
from .pausable import PAUSABLE, UNPAUSABLE_REASONS, known_unpausable, language_says, unpausable

if TYPE_CHECKING:
    from .context import EventOutbox, KernelUse

# JupyterLab opens a notebook's session under a bare UUID in its folder, then renames it to the
# notebook's path (SessionContext: a race on the server otherwise); while both exist for one
# kernel, a tracked session keeps its real path.
_TEMPORARY = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def temporary_path(path: str) -> bool:
    return _TEMPORARY.fullmatch(posixpath.basename(path)) is not None


def resumable(s: Session) -> bool:
    """A session whose notebook comes back by a resume: paused, failed with a checkpoint, or
    with its resume under way."""
    return s.state in (SessionState.PAUSED, SessionState.WAITING, SessionState.RESTORING) or (
        s.state == SessionState.FAILED and s.checkpoint is not None
    )


# The events that end a pause or a resume, and which operation each ends
OUTCOMES = {
    EventType.PAUSED: "pause",
    EventType.PAUSE_FAILED: "pause",
    EventType.RESUMED: "resume",
    EventType.RESUME_FAILED: "resume",
}


def last_operation(event: dict, s: Session) -> bool:
    """Keep an operation's outcome and phase timings on its session (``last_operation``), so
    where a pause's or a resume's time went is in the session itself, not only in the log of
    events. True when ``s`` changed."""
    d = event["detail"]
    op = OUTCOMES.get(event["type"]) or (
        d.get("operation") if event["type"] == EventType.CANCELLED else None
    )
    if op is None or "timings" not in d:
        return False
    s.last_operation = {
        "operation": op,
        "outcome": event["type"],
        "time": event["time"],
        "duration_seconds": d.get("duration_seconds"),
        "timings": d["timings"],
        "gpu_released_seconds": d.get("gpu_released_seconds"),
    }
    return True


class SessionTable:
    def __init__(
        self,
        *,
        bridge: KernelBridge,
        records: Records,
        ops: Operations,
        log,
        on_change: Callable[[], None] = lambda: None,
        kernel_use: KernelUse | None = None,
        outbox: EventOutbox | None = None,
    ):
        self.bridge, self.records, self.ops, self.log = bridge, records, ops, log
        self.on_change = on_change
        # Called with (event, session) after each event is recorded; synchronous and quick
        # (they queue work of their own), so an operation never waits for them.
        self.listeners: list[Callable[[dict, Session], None]] = []
        # The webhook sender, when webhooks are set: it records each event together with its
        # deliveries (the records' outbox), in one transaction, so none is lost to a restart.
        self.outbox = outbox
        self.sessions: dict[str, Session] = {}
        # which kernels ran a person's code (the monitor's tracker); None: every kernel
        # counts as used, each one a session
        self.kernel_use = kernel_use
        # kernel id -> notebook path: kernels that ran nothing, on a paused notebook's path
        # (or still on JupyterLab's temporary one), waiting for its resume; no row of their own
        self.waiting_kernels: dict[str, str] = {}
        self._refreshing = asyncio.Lock()
        self._cell_logs: set[asyncio.Future] = set()  # "track" requests in flight

    def __iter__(self):
        return iter(list(self.sessions.values()))

    async def load(self) -> None:
        """Read the records; a resume a stopped server left waiting or restoring is paused."""
        for s in await self.records.load_sessions():
            self.sessions[s.id] = s
            if s.state in (SessionState.WAITING, SessionState.RESTORING):
                s.state, s.message = (
                    SessionState.PAUSED,
                    "Resume was interrupted by a server restart",
                )
                await self.records.save(s)
            # a suspended kernel ended with the server that suspended it
            if s.state == SessionState.SUSPENDED:
                await self.suspended_gone(s, "the server stopped")
        await self.refresh()

    async def refresh(self) -> None:
        """Track every Jupyter session's kernel; settle records whose kernel has gone."""
        # The monitor and every GET call this; two passes interleaving at their awaits would
        # each register the same new kernel (a duplicate row) or settle one session twice.
        async with self._refreshing:
            await self._refresh()

    async def _refresh(self) -> None:
        live = await self.bridge.jupyter_sessions()
        by_kernel = {s.kernel_id: s for s in self.sessions.values() if s.kernel_id}
        busy_kernels = self.ops.kernel_ids()
        comeback = {s.path for s in self.sessions.values() if resumable(s)}
        paths: dict[str, list[str]] = {}  # a kernel's Jupyter sessions, by path
        for js in live:
            paths.setdefault(js["kernel"]["id"], []).append(js["path"])
        waiting: dict[str, str] = {}
        for js in live:
            kid = js["kernel"]["id"]
            known = by_kernel.get(kid)
            if known:
                if known.path not in paths[kid] and not temporary_path(js["path"]):
                    known.path, known.cwd = js["path"], posixpath.dirname(js["path"])
                    await self.records.save(known)
                continue
            if kid in busy_kernels:
                continue
            if self._waits(kid, paths[kid], comeback):
                waiting[kid] = next((p for p in paths[kid] if p in comeback), js["path"])
                continue
            s = Session(
                path=js["path"],
                name=js.get("name") or "",
                type=js.get("type") or "notebook",
                kernel_id=kid,
                kernel_name=js["kernel"]["name"],
                cwd=posixpath.dirname(js["path"]),
            )
            self.sessions[s.id] = s
            by_kernel[kid] = s  # (a kernel in two Jupyter sessions: Lab's renaming) one row
            await self.records.save(s)
            said = language_says(self.bridge.language(s.kernel_name))
            if said is None:
                self._start_cell_log(s, kid)
            else:  # not Python: known at once, no agent asked
                await self.unpausable(s, said["reason"], said["message"])
        self.waiting_kernels = waiting
        if self.kernel_use is not None:  # (no waiting kernels without it)
            for kid in waiting:  # its first cell makes it a session: watch it from now on
                self.kernel_use.watch(kid)
        for s in list(self.sessions.values()):
            if (
                s.state in RUNNING + (SessionState.PAUSING,)
                and s.id not in self.ops
                and not self.bridge.is_running(s.kernel_id)
            ):
                await self.kernel_gone(s)
            elif (
                s.state == SessionState.SUSPENDED
                and s.id not in self.ops
                and not self._still_suspended(s)
            ):
                await self.suspended_gone(s, "the suspended kernel ended")

    def _still_suspended(self, s: Session) -> bool:
        """The session's kernel runs in the process that was suspended."""
        pid = self.bridge.pid(s.kernel_id) if s.kernel_id else None
        return pid is not None and pid in (s.suspended or {}).get("pids", [])

    def _start_cell_log(self, s: Session, kernel_id: str) -> None:
        """Have a new kernel record its cells from now on (``kernel/cells.py``): a resume can
        then rebuild what its checkpoint could not hold, knowing each cell's run time. Cells
        run before this are still recorded, without their run time. A kernel busy with a cell
        is not asked: the request would wait behind the cell, counted as ours (the agent's
        first request, a check or a pause, starts the log then).

        This first request also tells whether the kernel can be paused (``pausable.py``)."""
        if self.bridge.language(s.kernel_name) != "python":
            return
        if self.bridge.execution_state(kernel_id) == "busy":
            return

        async def ask(kernel_id: str) -> None:
            try:
                await self.bridge.run_agent(kernel_id, TRACK, NoArgs())
            except GpuPauseError as e:
                if e.reason in UNPAUSABLE_REASONS and s.kernel_id == kernel_id:
                    await self.unpausable(s, e.reason, e.message)
                    return
                self.log.debug("jupyter_gpu_pause: no cell log in kernel %s: %r", kernel_id, e)
            except Exception as e:  # gone already: its first pause says
                self.log.debug("jupyter_gpu_pause: no cell log in kernel %s: %r", kernel_id, e)
            else:
                if s.kernel_id == kernel_id:
                    await self.pausable(s)

        self._keep(asyncio.ensure_future(ask(kernel_id)))

    def _keep(self, task: asyncio.Future) -> None:
        """Hold a background request until it ends (the loop holds tasks weakly)."""
        self._cell_logs.add(task)
        task.add_done_callback(self._cell_logs.discard)

    async def pausable(self, s: Session) -> None:
        """The agent answered in the session's kernel: it can be paused (unless already known
        otherwise: a later answer does not undo what a refusal taught)."""
        if s.pausable is None:
            s.pausable = PAUSABLE
            await self.persist(s)

    async def unpausable(self, s: Session, reason: str, message: str) -> None:
        """The session's kernel is known not to be pausable (``reason`` one of
        ``UNPAUSABLE_REASONS``): said on the session, saved, and one ``unpausable`` event,
        the first time only."""
        if known_unpausable(s) or self.sessions.get(s.id) is not s:
            return
        s.pausable = unpausable(reason, message)
        s.message = f"Cannot be paused: {message}. Its GPU is not given back by pausing"
        await self.persist(s)
        await self.record_event(
            s,
            EventType.UNPAUSABLE,
            "kernel",
            error_reason=reason,
            pausable=s.pausable,
            message=f"{s.path} cannot be paused: {message}. Its GPU is not given back by "
            "pausing; an idle policy keeps it running or shuts it down, as its 'unpausable' "
            "key says",
        )

    def _waits(self, kid: str, paths: list[str], comeback: set[str]) -> bool:
        """A kernel that ran nothing, opened for a paused notebook (or not yet renamed from
        JupyterLab's temporary path, so that it never has a row of its own to lose): it waits
        for the resume instead of being a session."""
        if self.kernel_use is None or self.kernel_use.ran_code(kid):
            return False
        return any(p in comeback for p in paths) or all(temporary_path(p) for p in paths)

    def waiting_kernel(self, s: Session) -> str | None:
        """The kernel that the notebook of a paused session has open and a resume takes."""
        if not resumable(s):
            return None
        return next((k for k, p in self.waiting_kernels.items() if p == s.path), None)

    async def kernel_gone(self, s: Session) -> None:
        """The kernel ended outside a pause: keep a record only if a checkpoint exists."""
        if not s.checkpoint:
            if self.sessions.pop(s.id, None) is not None:  # a cull and a refresh may both see it
                await self.records.delete(s.id)
                self.on_change()
            return
        s.state, s.kernel_id, s.gpu_devices_paused = (
            SessionState.PAUSED,
            None,
            0,
        )  # no pause reclaimed it
        s.device = s.grant = None
        s.message = (
            f"The kernel ended outside jupyter_gpu_pause; checkpoint {s.checkpoint['id']} "
            "is the last saved state"
        )
        await self.persist(s)

    async def suspended_gone(self, s: Session, why: str) -> None:
        """A suspended kernel ended (killed, or with the server): paused if its checkpoint was
        written; else its memory is lost, and the session says so and what remains."""
        written = (s.suspended or {}).get("checkpoint") == "written"
        s.kernel_id, s.suspended, s.device, s.grant = None, None, None, None
        if written:
            assert s.checkpoint is not None  # a suspension's checkpoint is written with it
            s.state = SessionState.PAUSED
            s.message = f"Paused — {why}; checkpoint {s.checkpoint['id']} holds its state"
            await self.persist(s)
            return
        older = (
            f"; checkpoint {s.checkpoint['id']} from {s.checkpoint['created']} can be restored"
            if s.checkpoint
            else "; there is no earlier checkpoint of this session"
        )
        await self.fail(
            s,
            EventType.PAUSE_FAILED,
            "kernel",
            reason="kernel-died",
            text=f"{why} before its checkpoint was written: its memory is lost{older}",
            intact=bool(s.checkpoint),
        )

    async def persist(self, s: Session) -> None:
        """Save a session's record; a failing records database is logged, never raised, so
        the session's state in memory (what the API shows) is always the outcome."""
        try:
            await self.records.save(s)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not save the record of %s", s.path)
        self.on_change()

    async def fail(
        self,
        s: Session,
        event: str,
        by: str,
        *,
        reason: str,
        text: str,
        intact: bool,
        state: SessionState | None = SessionState.FAILED,
        message: str | None = None,
        error: dict | None = None,
        **detail,
    ) -> None:
        """The one way a failure is told: the session's ``state`` (None: unchanged, as when a
        policy's pause was refused and the kernel runs on), its ``error`` (``text``, ``reason``,
        whether the state is ``intact``; ``error`` adds fields), ``message`` (the sentence the
        panel shows; ``text`` if None), one persist, and one ``event`` by ``by`` carrying the
        same text and reason (``detail`` adds to it)."""
        if state is not None:
            s.state = state
        s.progress = s.queue_position = None
        # ``session_error`` builds exactly this record (it is typed a plain dict)
        s.error = session_error(text, reason, intact, **(error or {}))
        s.message = message or text
        await self.persist(s)
        await self.record_event(s, event, by, message=text, error_reason=reason, **detail)
        if reason in UNPAUSABLE_REASONS:  # no pause of this kernel can succeed: say so once
            await self.unpausable(s, reason, text)

    async def record_event(self, s: Session, type_: str, reason: str, /, **detail) -> None:
        """Add an event to the records (with its webhook deliveries), then hand it to every
        listener (the event bus, metrics). Never raises: an outcome is not undone because it
        could not be logged, and a failing listener neither stops the others nor the
        operation."""
        self.log.info("gpu-pause %s %s (%s): %s", type_, s.path, reason, detail.get("message", ""))
        event = new_event(s.id, type_, reason, detail)
        try:
            if last_operation(event, s):
                await self.persist(s)
            if self.outbox is not None:
                await self.outbox.record(event, s)
            else:
                await self.records.add_event(event)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not record the %s event", type_)
        for listener in self.listeners:
            try:
                listener(event, s)
            except Exception:
                self.log.exception("jupyter_gpu_pause: a listener failed on the %s event", type_)

    async def merge_into(self, s: Session, kernel_id: str) -> None:
        """A resume into a running kernel: that kernel's own record merges into ``s``."""
        for other in [o for o in self.sessions.values() if o.kernel_id == kernel_id and o is not s]:
            del self.sessions[other.id]
            await self.records.delete(other.id)

    def get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise NotFound(f"no session with id {session_id!r}", "unknown-session") from None

    def session_for_kernel(self, kernel_id: str) -> Session | None:
        return next((s for s in self.sessions.values() if s.kernel_id == kernel_id), None)
