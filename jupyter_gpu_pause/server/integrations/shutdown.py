"""The emergency checkpoint: what a stopping server (SIGTERM, ``jupyter server stop``, a pod
eviction) or a cloud preemption notice does with the sessions still running, before their
kernels and their state go.

jupyter_server stops its extensions *before* it shuts the kernels down (``ServerApp._cleanup``
awaits ``cleanup_extensions`` and only then ``cleanup_kernels``), so ``stop_extension`` runs this
while every kernel still holds its variables. Each chosen session goes through the ordinary
pause (``Lifecycle.pause``): its kernel is shut down only once the checkpoint is signed and read
back, exactly as for a user's pause. All pauses run at once, and the grace period bounds them
together: a pause not done by then (most often one still waiting for a running cell: a pause
never interrupts a person's cell) is cancelled, its session recorded ``failed`` with reason
``shutdown-timeout`` and its last checkpoint, if any, as what remains; the server goes on
stopping. A preemption notice starts the same pauses while the server keeps running, without a
deadline of its own: the shutdown that follows joins them and bounds them.

SIGINT without a terminal (JupyterHub's local spawners stop a server with it) is made to stop
the server as SIGTERM does (``SigintStop``): jupyter_server leaves it to Python's default there,
which ends the process at once, without this checkpoint.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from dataclasses import dataclass, field

from ..lifecycle.lifecycle import Lifecycle
from ..state.errors import failure
from ..state.event_types import EventType
from ..state.model import RUNNING, Session, SessionState

MODES = ("gpu", "all", "none")
SETTLE = 3.0  # seconds a pause cancelled at the deadline may take to record its outcome
TIMEOUT_REASON = "shutdown-timeout"


@dataclass
class Outcome:
    """What one emergency checkpoint did, by session path (for the log and the tests)."""

    paused: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def text(self) -> str:
        parts = [f"{len(self.paused)} paused"]
        if self.timed_out:
            parts.append(f"{len(self.timed_out)} not done in time ({', '.join(self.timed_out)})")
        if self.failed:
            parts.append(f"{len(self.failed)} failed ({', '.join(self.failed)})")
        return ", ".join(parts)


class EmergencyCheckpoint:
    """Checkpoint the running sessions ``mode`` names, in parallel, within ``grace`` seconds.

    ``mode``: ``"gpu"`` (sessions holding a GPU, or whose kernelspec matches
    ``gpu_kernelspecs``), ``"all"`` or ``"none"``; only Python kernels can be paused.
    """

    def __init__(self, lifecycle: Lifecycle, mode: str, grace: float, log):
        if mode not in MODES:
            raise ValueError(f"shutdown_checkpoint must be one of {', '.join(MODES)}, not {mode!r}")
        self.lc, self.mode, self.grace, self.log = lifecycle, mode, grace, log
        self._runs: dict[str, asyncio.Future] = {}
        self._abandoned: set[str] = set()

    def chosen(self) -> list[Session]:
        """The sessions to checkpoint now: running ones the mode names, and any whose pause is
        already in flight (a user's, a policy's, a preemption notice's), which are joined."""
        if self.mode == "none":
            return []
        lc, out = self.lc, []
        for s in lc.table:
            op = lc.ops.get(s.id)
            if op is not None:
                if op.kind == "pause":
                    out.append(s)
                continue
            if s.state not in RUNNING or not lc.bridge.is_running(s.kernel_id):
                continue
            if self.mode == "gpu" and not lc.gpu_session(s):
                continue
            if lc.bridge.language(s.kernel_name) != "python":
                self.log.info(
                    "jupyter_gpu_pause: %s runs a %s kernel, which cannot be checkpointed",
                    s.path,
                    s.kernel_name,
                )
                continue
            out.append(s)
        return out

    async def run(self, reason: str, bounded: bool = True) -> Outcome:
        """Checkpoint once per ``reason`` (``"shutdown"``, ``"preemption"``).

        A second call waits for the first: jupyter_server may run its cleanup twice (a
        ``jupyter server stop`` whose request timed out, followed by SIGTERM). ``bounded``:
        cancel what is not done after ``grace`` seconds (a stopping server); unbounded runs
        (a preemption notice, the server keeps running) let every pause end by itself.
        """
        run = self._runs.get(reason)
        if run is None:
            run = self._runs[reason] = asyncio.ensure_future(self._run(reason, bounded))
        return await asyncio.shield(run)

    async def _run(self, reason: str, bounded: bool) -> Outcome:
        lc, outcome = self.lc, Outcome()
        if self.mode == "none":
            return outcome
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        try:  # a notebook opened since the monitor's last pass is tracked from here on
            await asyncio.wait_for(lc.table.refresh(), self.grace)
        except Exception as e:
            self.log.warning("jupyter_gpu_pause: %s: could not list the sessions: %s", reason, e)
        chosen = self.chosen()
        if not chosen:
            self.log.info(
                "jupyter_gpu_pause: %s: no session to checkpoint (shutdown_checkpoint = %r)",
                reason,
                self.mode,
            )
            return outcome
        self.log.warning(
            "jupyter_gpu_pause: %s: checkpointing %d session(s)%s: %s",
            reason,
            len(chosen),
            f" within {self.grace:g} s" if bounded else "",
            ", ".join(s.path for s in chosen),
        )
        ops = await self._start(chosen, reason, outcome)
        if ops:
            timeout = max(0.0, deadline - loop.time()) if bounded else None
            await asyncio.wait([op.task for op in ops], timeout=timeout)
        late = [op for op in ops if not op.task.done()]
        if late and bounded:
            await self._abandon(late, reason)
        for op in ops:
            s = op.session
            if s.state == SessionState.PAUSED or (op.committed and s.id not in self._abandoned):
                outcome.paused.append(s.path)  # (committed: checkpoint done, kernel stopping)
            elif s.id in self._abandoned:
                outcome.timed_out.append(s.path)
            else:
                outcome.failed.append(s.path)
        self.log.warning("jupyter_gpu_pause: %s checkpoint: %s", reason, outcome.text())
        return outcome

    async def _start(self, chosen: list[Session], reason: str, outcome: Outcome) -> list:
        """Start (or join) each session's pause; a refused one is recorded and skipped."""
        lc, ops = self.lc, []
        for s in chosen:
            try:
                await lc.pause(s.id, reason)
            except Exception as e:  # refused (no key, a kernel just gone…): the others go on
                why, text = failure(e)
                outcome.failed.append(s.path)
                await lc.table.record_event(
                    s,
                    EventType.PAUSE_FAILED,
                    reason,
                    message=f"not checkpointed at {reason}: {text}",
                    error_reason=why,
                )
                continue
            op = lc.ops.get(s.id)
            if op is not None and op.task is not None:
                ops.append(op)
            elif s.state == SessionState.PAUSED:
                outcome.paused.append(s.path)
        return ops

    async def _abandon(self, late: list, reason: str) -> None:
        """Cancel the pauses still before their commit point; each records its own outcome
        through ``op.abandon`` (pause.py), or is recorded here if it takes longer than
        ``SETTLE``. A committed one (checkpoint verified, kernel stopping) is left to end."""
        cancelled = []
        for op in late:
            if op.committed:
                continue
            op.abandon = self._recorder(reason)
            if op.task.cancel():  # False: it ended meanwhile, and recorded how
                cancelled.append(op)
        if cancelled:
            await asyncio.wait([op.task for op in cancelled], timeout=SETTLE)
        for op in cancelled:
            if not op.task.done():  # still unwinding (an interrupted capture): say it now
                await self._record_timeout(op.session, reason)

    def _recorder(self, reason: str):
        async def record(s: Session) -> None:
            await self._record_timeout(s, reason)

        return record

    async def _record_timeout(self, s: Session, reason: str) -> None:
        """The session's pause did not finish in time: say what remains (once)."""
        if s.id in self._abandoned:
            return
        self._abandoned.add(s.id)
        last = s.checkpoint
        remains = (
            f"checkpoint {last['id']} from {last['created']} is what remains: Resume restores "
            "it, and changes made since are lost"
            if last
            else "there is no earlier checkpoint, so its variables are lost with the kernel"
        )
        text = (
            f"The server stopped before this session's checkpoint was complete "
            f"(shutdown_grace_seconds = {self.grace:g}); {remains}"
        )
        await self.lc.table.fail(
            s,
            EventType.PAUSE_FAILED,
            reason,
            reason=TIMEOUT_REASON,
            text=text,
            intact=bool(last),
            checkpoint_id=last["id"] if last else None,
        )


class SigintStop:
    """SIGINT stops the server as SIGTERM does, where jupyter_server leaves SIGINT to Python.

    jupyter_server handles SIGINT only when its standard input is a terminal (a confirmation
    prompt); otherwise Python's default raises ``KeyboardInterrupt`` out of the event loop and
    the process ends at once, skipping ``ServerApp._cleanup`` and with it ``stop_extension``
    and this module's checkpoint. That is how JupyterHub's ``LocalProcessSpawner`` stops a
    server (SIGINT, then SIGTERM after ``interrupt_timeout``, then SIGKILL).

    Installed only over Python's default handler: a terminal's prompt, a handler of the user's
    or an ignored SIGINT is left as it is; and only where SIGTERM does stop the server, which
    an application embedding jupyter_server may turn off (pytest-jupyter's in-process
    servers skip ``init_signal``). The first SIGINT goes where SIGTERM goes
    (``ServerApp._signal_stop``); one arriving while the server is already stopping is logged
    and ignored, so that it cannot cut the checkpoint short (``shutdown_grace_seconds`` bounds
    it anyway; SIGKILL still ends the process at once, and a checkpoint cut off that way was
    never committed: its manifest is written last, atomically). It stays installed until the
    process exits, so that a late SIGINT cannot cut Jupyter's own shutdown of the kernels
    short either.
    """

    def __init__(self, serverapp, grace: float, log):
        self.serverapp, self.grace, self.log = serverapp, grace, log
        self.stopping = False

    @classmethod
    def install(cls, serverapp, grace: float, log) -> SigintStop | None:
        """The handler, installed; None where SIGINT is not left to Python's default, where
        SIGTERM is not jupyter_server's stop, or off the main thread (no handler can be set)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        if signal.getsignal(signal.SIGTERM) != getattr(serverapp, "_signal_stop", None):
            return None
        stop = cls(serverapp, grace, log)
        signal.signal(signal.SIGINT, stop.handle)
        log.info(
            "jupyter_gpu_pause: no terminal: SIGINT stops this server as SIGTERM does, "
            "shutdown checkpoint first"
        )
        return stop

    def handle(self, sig, frame) -> None:
        if self.stopping or getattr(self.serverapp, "_stopping", False):
            self.log.warning(
                "jupyter_gpu_pause: SIGINT while stopping: ignored; the server exits once its "
                "shutdown checkpoint (at most shutdown_grace_seconds = %g s) and Jupyter's "
                "shutdown of the kernels are done. SIGKILL would end it at once, losing what "
                "is not checkpointed yet",
                self.grace,
            )
            return
        self.stopping = True
        self.serverapp._signal_stop(sig, frame)  # what jupyter_server does on SIGTERM
