"""The idle monitor: every ``poll_interval`` it looks at each running session and applies the
first matching policy — warn, then pause (or cull), never a busy kernel, never twice.

Activity is what a person does: cells (``execute_request``) and widget messages. The UI's own
polling (kernel_info, comm_info), the debugger and our agent's silent requests do not count;
a GPU busy above the policy's ``gpu_idle_below`` does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from jupyter_client.session import Session as ZmqSession

from ..store.format import iso, utcnow
from .accounting import Ledger
from .errors import BadRequest, GpuPauseError, WrongState
from .model import RUNNING, gpu_device_count
from .policy import Policy, first_match
from .probes import GpuProbe, process_tree

USER_MESSAGES = ("execute_request", "comm_msg")
DRY_RUN_TIMEOUT = 30.0
MAX_BACKOFF = 3600.0  # longest wait between two attempts of a failing auto-pause
ACCOUNTING_SAVE = 60.0  # seconds between two saves of a session's GPU-seconds
RECLAIMING = ("paused", "waiting")  # states whose GPUs a pause gave back


class ActivityTracker:
    """One IOPub subscription per kernel, recording when a person last made it do something."""

    def __init__(self, kernel_manager, agent_sessions: set[str], on_activity=None):
        self.km = kernel_manager
        self.agent_sessions = agent_sessions
        self.on_activity = on_activity
        self.last: dict[str, datetime] = {}
        self.busy: dict[str, bool] = {}
        self._streams: dict[str, object] = {}

    def sync(self, kernel_ids: set[str]) -> None:
        for kid in set(self._streams) - kernel_ids:
            self._streams.pop(kid).close()
            self.last.pop(kid, None)
            self.busy.pop(kid, None)
        for kid in kernel_ids - set(self._streams):
            self._watch(kid)

    def _watch(self, kid: str) -> None:
        kernel = self.km.get_kernel(kid)
        session = ZmqSession(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()
        self.last[kid] = getattr(kernel, "last_activity", None) or utcnow()

        def on_message(msg_list):
            _idents, fed = session.feed_identities(msg_list)
            msg = session.deserialize(fed, content=False)
            parent = msg.get("parent_header") or {}
            if parent.get("session") in self.agent_sessions:
                return
            msg_type = msg["header"]["msg_type"]
            if parent.get("msg_type") in USER_MESSAGES or msg_type == "comm_msg":
                self.last[kid] = utcnow()
                if msg_type == "status":
                    content = session.deserialize(fed)["content"]
                    self.busy[kid] = content.get("execution_state") == "busy"
                if self.on_activity:
                    self.on_activity(kid)

        stream.on_recv(on_message)
        self._streams[kid] = stream

    def is_busy(self, kid: str) -> bool:
        """A person's cell is running (our own agent's requests do not count)."""
        return self.busy.get(kid, False)

    def touch(self, kid: str, when: datetime) -> None:
        self.last[kid] = when

    def close(self) -> None:
        self.sync(set())


@dataclass
class Watch:
    """What the monitor remembers about one session between ticks."""

    warned_for: datetime | None = None  # the action time we warned about
    acted_for: datetime | None = None  # the action time we acted on (never act twice)
    keepalive_until: datetime | None = None
    retry_after: datetime | None = None
    failures: int = 0
    gpu_since: datetime | None = None
    last_alarm: datetime | None = None
    last_tick: datetime | None = None  # running-kernel clock (held, idle)
    paused_tick: datetime | None = None  # paused clock (reclaimed)
    last_saved: datetime | None = None


class Monitor:
    def __init__(
        self,
        *,
        lifecycle,
        policies: list[Policy],
        probe: GpuProbe,
        poll_interval: float,
        gpu_hold_alarm_hours: float,
        capture: str,
        log,
    ):
        self.lc = lifecycle
        self.bridge = lifecycle.bridge
        self.policies = policies
        self.probe = probe
        self.poll_interval = poll_interval
        self.alarm_hours = gpu_hold_alarm_hours
        self.capture = capture
        self.log = log
        self.tracker = ActivityTracker(
            self.bridge.km, self.bridge.agent_sessions, on_activity=self._on_activity
        )
        lifecycle.user_busy = self.tracker.is_busy
        self.ledger = Ledger(lifecycle.records)
        self.watches: dict[str, Watch] = {}
        self._task: asyncio.Task | None = None

    def _on_activity(self, kernel_id: str) -> None:
        """A person used the kernel: any warning is void at once, not at the next pass."""
        s = self.lc.session_for_kernel(kernel_id)
        if s is not None:
            s.pause_at, s.last_activity = None, utcnow()

    # -- running -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())
        self._outrank_jupyter_culler()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.tracker.close()
        try:
            await self.ledger.flush()
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not save the last GPU accounting")

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # a kernel vanishing mid-tick must not stop the monitor
                self.log.exception("jupyter_gpu_pause: idle monitor pass failed")
            await asyncio.sleep(self.poll_interval)

    def _outrank_jupyter_culler(self) -> None:
        """When jupyter_server's own culler is on, it skips kernels one of our policies governs."""
        km = self.bridge.km
        original = km.cull_kernel_if_idle

        async def cull_unless_governed(kernel_id):
            s = self.lc.session_for_kernel(kernel_id)
            if s is not None and s.policy is not None:
                return None
            return await original(kernel_id)

        km.cull_kernel_if_idle = cull_unless_governed

    # -- one pass ------------------------------------------------------------------------------
    async def tick(self, now: datetime | None = None) -> None:
        await self.lc.refresh()
        now = now or utcnow()
        running = [
            s
            for s in self.lc.sessions.values()
            if s.state in RUNNING and self.bridge.is_running(s.kernel_id)
        ]
        # Track every live kernel, pausing ones included: dropping one mid-pause would forget
        # its idle clock and restart it from the pause attempt.
        self.tracker.sync(
            {s.kernel_id for s in self.lc.sessions.values() if self.bridge.is_running(s.kernel_id)}
        )
        for sid in set(self.watches) - {s.id for s in self.lc.sessions.values()}:
            del self.watches[sid]
        usage = {}
        if self.probe.available:
            roots = {s.id: p for s in running if (p := self.bridge.pid(s.kernel_id)) is not None}
            loop = asyncio.get_running_loop()
            usage = await loop.run_in_executor(None, self._sample, roots)
        for s in running:
            try:
                await self._evaluate(s, usage.get(s.id), now)
            except GpuPauseError as e:  # e.g. the kernel went away between two awaits
                self.log.info("jupyter_gpu_pause: %s: %s", s.path, e.message)
        evaluated = {s.id for s in running}
        for s in [s for s in self.lc.sessions.values() if s.id not in evaluated]:
            await self._account_stopped(s, self.watches.setdefault(s.id, Watch()), now)
        await self.ledger.flush()  # one transaction per tick

    def _sample(self, roots: dict[str, int]) -> dict:
        """In a thread: psutil walks process trees and NVML answers, both blocking."""
        return self.probe.sample({sid: process_tree(pid) for sid, pid in roots.items()})

    async def _evaluate(self, s, usage, now: datetime) -> None:
        w = self.watches.setdefault(s.id, Watch())
        busy = self.tracker.is_busy(s.kernel_id)
        uses_gpu = bool(usage and usage.memory_bytes > 0)
        s.gpu = usage.to_json() if usage else None
        policy = first_match(self.policies, s.kernel_name, uses_gpu, None)
        s.policy = policy.name if policy and policy.action != "none" else None
        s.idle_after = min(60.0, policy.idle_timeout - policy.warn_before) if s.policy else None
        gpu_busy = bool(usage and policy and usage.utilization >= policy.gpu_idle_below)
        if busy or gpu_busy:
            self.tracker.touch(s.kernel_id, now)
        last = self.tracker.last.get(s.kernel_id, now)
        s.last_activity = last
        await self._account(s, w, busy or gpu_busy, now)
        if s.policy is None or s.id in self.lc.busy_sessions():
            s.pause_at = None
            return
        if not policy.count_connected and self.bridge.connections(s.kernel_id) > 0:
            s.pause_at = None
            return
        # Activity moves ``last``, hence ``act_at``: a warning or an action is always for one
        # idle period, and a new period needs a new warning.
        act_at = last + timedelta(seconds=policy.idle_timeout)
        if w.keepalive_until and w.keepalive_until > act_at:
            act_at = w.keepalive_until
        warn_at = act_at - timedelta(seconds=policy.warn_before)
        if now >= warn_at and w.warned_for != act_at:
            w.warned_for = act_at
            await self._warn(s, policy, act_at)  # the event exists before pause_at shows
        s.pause_at = act_at if now >= warn_at and policy.action in ("pause", "cull") else None
        if now < act_at or busy or w.acted_for == act_at:
            return
        if w.retry_after and now < w.retry_after:
            return
        w.acted_for = act_at
        if policy.action == "pause":
            await self.lc.pause(s.id, reason=f"policy:{policy.name}")
            asyncio.ensure_future(self._watch_outcome(s, w, policy))
        elif policy.action == "cull":
            await self.lc.cull(s.id, reason=f"policy:{policy.name}")

    async def _watch_outcome(self, s, w: Watch, policy: Policy) -> None:
        """A failed auto-pause is retried later, with backoff: no retry storm."""
        op = self.lc.op_task(s.id)
        if op is not None:
            await asyncio.gather(op, return_exceptions=True)
        if s.state in RUNNING:
            w.failures += 1
            base = max(policy.idle_timeout, self.poll_interval)
            delay = min(base * 2 ** (w.failures - 1), MAX_BACKOFF)
            w.retry_after = utcnow() + timedelta(seconds=delay)
            w.acted_for = None
        else:
            w.failures, w.retry_after = 0, None

    async def _warn(self, s, policy: Policy, act_at: datetime) -> None:
        skipped = None
        if policy.action == "pause":
            try:
                report = await asyncio.wait_for(
                    self.bridge.run_agent(s.kernel_id, "check", {"capture": self.capture}),
                    DRY_RUN_TIMEOUT,
                )
                skipped = report["skipped"]
            except (GpuPauseError, asyncio.TimeoutError) as e:
                self.log.info("jupyter_gpu_pause: dry run for %s failed: %s", s.path, e)
        verb = {"pause": "pauses", "cull": "shuts down", "warn": "has been idle until"}[
            policy.action
        ]
        message = f"{s.path} {verb} at {iso(act_at)} (policy {policy.name})"
        if skipped:
            message += "; will not survive: " + ", ".join(x["name"] for x in skipped)
        if policy.action == "cull":
            message += "; no checkpoint is made: unsaved variables are lost"
        await self.lc.record_event(
            s,
            "warned",
            f"policy:{policy.name}",
            action=policy.action,
            pause_at=iso(act_at),
            skipped=skipped,
            message=message,
        )

    async def _account(self, s, w: Watch, active: bool, now: datetime) -> None:
        """A running kernel: the time since the last tick was held (and idle) on its GPUs."""
        start, w.last_tick, w.paused_tick = w.last_tick, now, None
        devices = gpu_device_count(s.gpu)
        if not devices:
            w.gpu_since = None
            return
        if start is not None:
            self.ledger.add(s, start, now, held=devices, idle=0 if active else devices)
        await self._save_now_and_then(s, w, now)
        w.gpu_since = w.gpu_since or now
        if self.alarm_hours > 0:
            period = timedelta(hours=self.alarm_hours)
            since = max(w.gpu_since, w.last_alarm or w.gpu_since)
            if now - since >= period:
                w.last_alarm = now
                await self.lc.record_event(
                    s,
                    "gpu_hold_alarm",
                    "policy:gpu_hold_alarm_hours",
                    held_hours=round((now - w.gpu_since).total_seconds() / 3600, 2),
                    message=f"{s.path} has held a GPU for more than {self.alarm_hours:g} h",
                )

    async def _account_stopped(self, s, w: Watch, now: datetime) -> None:
        """A session without a running kernel: paused ones reclaim the GPUs they held."""
        if s.state != "pausing":  # a kernel that comes back starts a fresh clock
            w.last_tick = None
        if s.state not in RECLAIMING or not s.gpu_devices_paused:
            w.paused_tick = None
            return
        start, w.paused_tick = w.paused_tick, now
        if start is not None:
            self.ledger.add(s, start, now, reclaimed=s.gpu_devices_paused)
        await self._save_now_and_then(s, w, now)

    async def _save_now_and_then(self, s, w: Watch, now: datetime) -> None:
        """The session's GPU-seconds outlive a server restart, within a minute."""
        if w.last_saved is not None and (now - w.last_saved).total_seconds() < ACCOUNTING_SAVE:
            return
        w.last_saved = now
        if self.lc.sessions.get(s.id) is s:  # never bring back the record of a deleted session
            await self.lc.records.save(s)

    async def report(self, since: str | None) -> dict:
        """GPU-hours since ``since`` (ISO 8601 or a duration such as 7d): total, sessions, days."""
        return await self.ledger.report(since, self.lc.sessions)

    # -- keep-alive ----------------------------------------------------------------------------
    async def keepalive(self, session_id: str, seconds) -> None:
        s = self.lc.get(session_id)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
            raise BadRequest(
                f"seconds must be a positive whole number, not {seconds!r}", "bad-seconds"
            )
        if s.state not in RUNNING:
            raise WrongState(f"cannot keep alive: the session is {s.state}")
        policy = next((p for p in self.policies if p.name == s.policy), None)
        if policy is None:
            raise WrongState(
                "no idle policy acts on this session; there is nothing to postpone", "no-policy"
            )
        if seconds > policy.max_keepalive:
            raise BadRequest(
                f"keep-alive of {seconds} s is longer than the {policy.max_keepalive:g} s that "
                f"policy {policy.name} allows (max_keepalive)",
                "keepalive-too-long",
            )
        w = self.watches.setdefault(s.id, Watch())
        w.keepalive_until = utcnow() + timedelta(seconds=seconds)
        w.warned_for = w.acted_for = None
        s.pause_at = None
        await self.lc.record_event(
            s,
            "keepalive",
            "user",
            seconds=seconds,
            until=iso(w.keepalive_until),
            message=f"{s.path} kept alive for {seconds} s",
        )
