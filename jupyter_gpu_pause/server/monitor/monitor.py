"""The idle monitor: every ``poll_interval`` it looks at each running session and applies the
first matching policy — warn, then pause (or cull), never a busy kernel, never twice.

Activity is what a person does: cells (``execute_request``) and widget messages. The UI's own
polling (kernel_info, comm_info), the debugger and our agent's silent requests do not count;
a GPU busy above the policy's ``gpu_idle_below`` does.

One session never holds up the others: the dry run behind a warning runs in a task of its own
(a kernel that does not answer only delays its own warning), and a failure while looking at one
session is logged and the pass goes on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from ...kernel.protocol import CHECK, CaptureMode, CheckArgs
from ...store.format import iso, utcnow
from ..capacity.probes import GpuProbe, process_tree
from ..kernels.replies import check_report
from ..lifecycle.pausable import UNPAUSABLE_REASONS, known_unpausable, what_is_lost
from ..state.errors import BadRequest, GpuPauseError, WrongState
from ..state.event_types import EventType
from ..state.model import RUNNING, Session, SessionState, gpu_device_count
from .accounting import Ledger
from .activity import ActivityTracker
from .governed import Governed
from .policy import Policy, first_match

DRY_RUN_TIMEOUT = 30.0
MAX_BACKOFF = 3600.0  # longest wait between two attempts of a failing auto-pause
ACCOUNTING_SAVE = 60.0  # seconds between two saves of a session's GPU-seconds
RECLAIMING = (
    SessionState.PAUSED,
    SessionState.WAITING,
    SessionState.SUSPENDED,
)  # states whose GPUs a pause gave back
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


@dataclass
class Watch:
    """What the monitor remembers about one session between ticks."""

    warned_for: datetime | None = None  # the action time we warned about
    warned_action: str | None = None  # and the action that warning named
    unpausable_since: datetime | None = None  # first seen known not to be pausable
    warning: asyncio.Task | None = None  # the dry run and event of that warning
    acted_for: datetime | None = None  # the action time we acted on (never act twice)
    keepalive_until: datetime | None = None
    retry_after: datetime | None = None
    failures: int = 0
    gpu_since: datetime | None = None
    last_alarm: datetime | None = None
    last_tick: datetime | None = None  # running-kernel clock (held, idle)
    paused_tick: datetime | None = None  # paused clock (reclaimed)
    last_saved: datetime | None = None
    budget_pause_at: datetime | None = None  # over its budget's grace: warned, pauses then
    budget_warning: asyncio.Task | None = None  # the dry run and event of that warning


class Monitor:
    def __init__(
        self,
        *,
        lifecycle: Governed,
        tracker: ActivityTracker,
        policies: list[Policy],
        probe: GpuProbe,
        poll_interval: float,
        gpu_hold_alarm_hours: float,
        capture: CaptureMode,
        user: str,
        log,
        event_logger=None,
        budgets=None,
        budget_warning_seconds: float = 300.0,
    ):
        self.lc = lifecycle
        self.event_logger = event_logger  # jupyter_server's: kernel starts (kernel_actions)
        self.user = user  # what policies' match.user is compared with
        self.bridge = lifecycle.bridge
        self.policies = policies
        self.probe = probe
        self.poll_interval = poll_interval
        self.alarm_hours = gpu_hold_alarm_hours
        self.capture = capture
        self.log = log
        # built by the app before the lifecycle, which reads it too (lifecycle.context.KernelUse)
        self.tracker = tracker
        tracker.on_activity = self._on_activity
        self.ledger = Ledger(lifecycle.records, log)
        self.budgets = budgets  # budgets.Budgets, None without budgets
        if budgets is not None:  # the budget's figure of what no pause could give back
            budgets.unpausable_seconds = self.ledger.unpausable_seconds
        self.budget_warn_ahead = timedelta(seconds=budget_warning_seconds)
        self.budget = None  # this user's budget figures as of the last pass
        self.watches: dict[str, Watch] = {}
        self._task: asyncio.Task | None = None
        self._outcomes: set[asyncio.Task] = set()
        self._culler_patched = None
        # What an admin (or a test) can watch to see that the monitor is alive and acting.
        self.passes = 0
        self.last_pass: datetime | None = None  # the time the last complete pass looked at
        self.culls_declined = 0  # jupyter_server culls refused for a governed kernel
        self.last_cull_declined: datetime | None = None

    def _on_activity(self, kernel_id: str) -> None:
        """A person used the kernel: any warning is void at once, not at the next pass."""
        s = self.lc.table.session_for_kernel(kernel_id)
        if s is not None:
            s.pause_at, s.last_activity = None, utcnow()

    # -- running -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())
        self._outrank_jupyter_culler()
        if self.event_logger is not None:
            self.event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._kernel_action)

    async def _kernel_action(self, logger, schema_id: str, data: dict) -> None:
        """A kernel started: watch it from its first message on, not from the next pass, so
        that a cell run at once in a paused notebook's new kernel makes it a session."""
        if data.get("action") == "start" and data.get("status") == "success":
            kid = data.get("kernel_id")
            if kid and self.bridge.is_running(kid):
                self.tracker.watch(kid)

    async def stop(self) -> None:
        if self.event_logger is not None:
            self.event_logger.remove_listener(
                schema_id=KERNEL_ACTIONS, listener=self._kernel_action
            )
        maybe = [self._task, *self._outcomes]
        maybe += [t for w in self.watches.values() for t in (w.warning, w.budget_warning)]
        tasks = [t for t in maybe if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._restore_jupyter_culler()
        await self.tracker.aclose()
        try:
            await self.ledger.close()
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

    def stats(self) -> dict:
        """The monitor's own state, for ``GET policies``: is it alive, when did it last look."""
        return {
            "poll_interval": self.poll_interval,
            "user": self.user,
            "passes": self.passes,
            "last_pass": iso(self.last_pass),
            "jupyter_culls_declined": self.culls_declined,
            "last_jupyter_cull_declined": iso(self.last_cull_declined),
        }

    def _outrank_jupyter_culler(self) -> None:
        """When jupyter_server's own culler is on, it skips kernels one of our policies governs.

        Why a patch, and the one place that says so. jupyter_server (2.21.1 here; its
        kernelmanager.py is the same as v2.20.0's and main's) has no supported way to exempt
        one kernel from its culler:
        https://github.com/jupyter-server/jupyter_server/blob/v2.20.0/jupyter_server/services/kernels/kernelmanager.py#L701-L763
        ``MappingKernelManager.cull_kernels`` (a PeriodicCallback) awaits
        ``self.cull_kernel_if_idle(kernel_id)`` for each kernel, which shuts the kernel down
        with no hook, event or veto before it. What there is does not fit:

        - ``cull_idle_timeout`` in kernelspec metadata (since 2.9) is per kernelspec; a policy
          governs sessions, and which it governs changes as they run.
        - the ``kernel_actions`` event is emitted after the shutdown, not before.
        - a ``MappingKernelManager`` subclass offered as ``c.ServerApp.kernel_manager_class``
          would need every admin to change their config, and that one slot is also what the
          gateway (``GatewayMappingKernelManager``) and other extensions set.

        So that method, on this kernel manager instance only, is the seam: wrapped here,
        restored at stop, and checked by ``tests/test_jupyter_seams.py`` against the installed
        jupyter_server (``cull_kernels`` still calls it, per kernel, async, with
        ``kernel_id`` alone), so a change there fails loudly instead of silently culling
        governed kernels. An upstream change that would retire it: a list of exemption
        predicates on ``MappingKernelManager`` (say ``cull_exemptions``, each called with the
        kernel id; any True skips the kernel) consulted by ``cull_kernel_if_idle`` before it
        shuts a kernel down, for extensions to append to.
        """
        km = self.bridge.km
        original = getattr(km, "cull_kernel_if_idle", None)
        if not asyncio.iscoroutinefunction(original):
            self.log.warning(
                "jupyter_gpu_pause: this jupyter_server has no async cull_kernel_if_idle; its "
                "own culler (MappingKernelManager.cull_idle_timeout), if on, may cull kernels "
                "that an idle policy would have paused"
            )
            return

        async def cull_unless_governed(kernel_id):
            s = self.lc.table.session_for_kernel(kernel_id)
            if s is not None and (s.policy is not None or s.id in self.lc.busy_sessions()):
                self.culls_declined += 1
                self.last_cull_declined = utcnow()
                return None
            return await original(kernel_id)

        km.cull_kernel_if_idle = cull_unless_governed
        self._culler_patched = km

    def _restore_jupyter_culler(self) -> None:
        if self._culler_patched is not None:
            del self._culler_patched.cull_kernel_if_idle  # the instance attribute we set
            self._culler_patched = None

    # -- one pass ------------------------------------------------------------------------------
    async def tick(self, now: datetime | None = None) -> None:
        await self.lc.table.refresh()
        now = now or utcnow()
        running = [
            s
            for s in self.lc.table.sessions.values()
            if s.state in RUNNING and self.bridge.is_running(s.kernel_id)
        ]
        # Track every live kernel, pausing ones included: dropping one mid-pause would forget
        # its idle clock and restart it from the pause attempt; and a paused notebook's new
        # kernel, which its first cell makes a session, also while a resume is taking it.
        kernels = [s.kernel_id for s in self.lc.table.sessions.values() if s.kernel_id]
        kernels += [*self.lc.table.waiting_kernels, *self.lc.kernels_in_flight()]
        self.tracker.sync({k for k in kernels if self.bridge.is_running(k)})
        for sid in set(self.watches) - {s.id for s in self.lc.table.sessions.values()}:
            gone = self.watches.pop(sid)
            for task in (gone.warning, gone.budget_warning):
                if task is not None:
                    task.cancel()
        usage = {}
        if self.probe.available:
            roots = {
                s.id: p
                for s in running
                if s.kernel_id and (p := self.bridge.pid(s.kernel_id)) is not None
            }
            loop = asyncio.get_running_loop()
            usage = await loop.run_in_executor(None, self._sample, roots)
        for s in running:  # kernels NVML cannot see here (a gateway's): their agent's report
            if s.id not in usage and s.kernel_id and (report := self.bridge.gpu_usage(s.kernel_id)):
                usage[s.id] = report
        self.budget = await self._look_at_budget()
        for s in running:
            try:
                await self._evaluate(s, usage.get(s.id), now)
            except GpuPauseError as e:  # e.g. the kernel went away between two awaits
                self.log.info("jupyter_gpu_pause: %s: %s", s.path, e.message)
            except Exception:  # one session's trouble must not stop the pass for the others
                self.log.exception("jupyter_gpu_pause: idle monitor could not look at %s", s.path)
        evaluated = {s.id for s in running}
        for s in [s for s in self.lc.table.sessions.values() if s.id not in evaluated]:
            await self._account_stopped(s, self.watches.setdefault(s.id, Watch()), now)
        await self.ledger.flush()  # one transaction per tick
        self.lc.capacity_changed()  # GPU memory measured anew: the node's usage follows
        self.passes += 1
        self.last_pass = now

    def _sample(self, roots: dict[str, int]) -> dict:
        """In a thread: psutil walks process trees and NVML answers, both blocking."""
        return self.probe.sample({sid: process_tree(pid) for sid, pid in roots.items()})

    async def _evaluate(self, s, usage, now: datetime) -> None:
        w = self.watches.setdefault(s.id, Watch())
        busy = self.tracker.is_busy(s.kernel_id)
        uses_gpu = bool(usage and usage.memory_bytes > 0)
        s.gpu = usage.to_json() if usage else None
        policy = first_match(self.policies, s.kernel_name, uses_gpu, self.user)
        s.policy = policy.name if policy and policy.action != "none" else None
        unpausable = known_unpausable(s)
        if unpausable and w.unpausable_since is None:  # a pause is no longer what it retries
            w.unpausable_since, w.retry_after, w.failures = now, None, 0
        s.idle_after = (
            min(60.0, policy.idle_timeout - policy.warn_before) if policy and s.policy else None
        )
        gpu_busy = bool(usage and policy and usage.utilization >= policy.gpu_idle_below)
        if busy or gpu_busy:
            self.tracker.touch(s.kernel_id, now)
        last = self.tracker.last.get(s.kernel_id, now)
        s.last_activity = last
        await self._account(s, w, busy or gpu_busy, now)
        if not unpausable and await self._over_budget(s, w, busy, now):
            return
        if policy is None or s.policy is None or s.id in self.lc.busy_sessions():
            s.pause_at = None
            return
        action = policy.action_for(unpausable)
        if action == "none":  # unpausable: "keep": left running, never warned or tried again
            s.pause_at = None
            if w.warning is not None and not w.warning.done():
                w.warning.cancel()
            return
        if not policy.count_connected and self.bridge.connections(s.kernel_id) > 0:
            s.pause_at = None
            return
        # Activity moves ``last``, hence ``act_at``: a warning or an action is always for one
        # idle period, and a new period needs a new warning. After a failed attempt the next
        # one waits for its backoff, and is warned about again.
        act_at = last + timedelta(seconds=policy.idle_timeout)
        for later in (w.keepalive_until, w.retry_after):
            if later and later > act_at:
                act_at = later
        if action != policy.action and w.unpausable_since is not None:
            # the cull of a kernel found unpausable (perhaps by a pause's warning, which said
            # "pauses", not what is lost) comes a whole ``warn_before`` after it is known
            act_at = max(act_at, w.unpausable_since + timedelta(seconds=policy.warn_before))
        warn_at = act_at - timedelta(seconds=policy.warn_before)
        if now >= warn_at and (w.warned_for, w.warned_action) != (act_at, action):
            w.warned_for, w.warned_action = act_at, action
            if w.warning is not None:
                w.warning.cancel()
            w.warning = asyncio.ensure_future(self._warn(s, policy, act_at, action))
        warned = (
            (w.warned_for, w.warned_action) == (act_at, action)
            and w.warning is not None
            and w.warning.done()
        )
        # pause_at shows once the warning's event exists, so the two never disagree
        acts = action in ("pause", "cull")
        s.pause_at = act_at if now >= warn_at and acts and warned else None
        if now < act_at or busy or w.acted_for == act_at or not warned:
            return
        if known_unpausable(s) and action == "pause":  # its warning's dry run just told
            return
        w.acted_for = act_at
        if action == "pause":
            try:
                await self.lc.pause(s.id, reason=f"policy:{policy.name}")
            except GpuPauseError as e:  # refused at once (an R kernel, a lost signing key…)
                await self._refused(s, w, policy, e.message, e.reason)
                return
            task = asyncio.ensure_future(self._watch_outcome(s, w, policy))
            self._outcomes.add(task)
            task.add_done_callback(self._outcomes.discard)
        elif action == "cull":
            try:
                await self.lc.cull(s.id, reason=f"policy:{policy.name}")
            except Exception as e:  # Jupyter could not shut the kernel down
                why = e.message if isinstance(e, GpuPauseError) else f"{type(e).__name__}: {e}"
                await self._refused(s, w, policy, why, "cull", "cull")

    # -- GPU-hour budgets ----------------------------------------------------------------------
    async def _look_at_budget(self):
        """This user's budget figures, and the warnings due (``Budgets.look``); None without
        budgets, or when the queue cannot say (nothing is enforced on figures not known)."""
        if self.budgets is None:
            return None

        def pick():
            gpu = [s for s in self.lc.table.sessions.values() if self.lc.gpu_session(s)]
            pool = [s for s in gpu if s.state in RUNNING] or gpu
            return max(pool, key=lambda s: s.updated) if pool else None

        try:
            return await self.budgets.look(self.lc.table, pick)
        except Exception as e:  # the queue's database down: the next pass looks again
            self.log.warning("jupyter_gpu_pause: could not read the GPU budget: %s", e)
            return None

    async def _over_budget(self, s, w: Watch, busy: bool, now: datetime) -> bool:
        """A running GPU session of a user past the budget's hold_at + grace: warned first,
        paused ``budget_pause_warning_seconds`` later at its next idle moment (never in the
        middle of a cell). True while the budget, not an idle policy, decides for it."""
        f = self.budget
        if f is None or not f.over_grace or not self.lc.gpu_session(s):
            w.budget_pause_at = None
            if w.budget_warning is not None:
                w.budget_warning.cancel()
                w.budget_warning = None
            return False
        reason = f"budget:{f.rule.name}"
        if w.budget_pause_at is None:
            w.budget_pause_at = now + self.budget_warn_ahead
            w.budget_warning = asyncio.ensure_future(
                self._warn_budget(s, f, reason, w.budget_pause_at, busy)
            )
            return True
        if not w.budget_warning.done():  # the pause comes after its warning's event
            return True
        s.pause_at = w.budget_pause_at
        if now < w.budget_pause_at or busy or s.id in self.lc.busy_sessions():
            return True
        w.budget_pause_at = now + self.budget_warn_ahead  # a failed pause: again after as long
        try:
            await self.lc.pause(s.id, reason=reason)
        except GpuPauseError as e:  # refused at once: said on the session and in an event
            await self.lc.table.fail(
                s,
                EventType.PAUSE_FAILED,
                reason,
                state=None,
                reason=e.reason,
                text=e.message,
                intact=True,
                message=f"Pause for the GPU budget failed: {e.message}. The kernel is still "
                "running with all its variables.",
                retry_at=iso(w.budget_pause_at),
            )
        return True

    async def _warn_budget(self, s, f, reason: str, pause_at: datetime, busy: bool) -> None:
        """The warning before a budget's pause, naming what will not survive, as an idle
        policy's does (its own task: a kernel slow to answer holds up no one else). A kernel
        running a cell would answer the dry run only once the cell ends: the warning says so
        instead of waiting."""
        skipped: list | None
        unknown: str | None
        if busy:
            skipped, unknown = None, "a cell is running"
        else:
            skipped, unknown = await self._dry_run(s)
        s.pause_at = pause_at
        await self.lc.table.record_event(
            s,
            EventType.WARNED,
            reason,
            action="pause",
            pause_at=iso(pause_at),
            skipped=skipped,
            message=f"{s.path} pauses at its next idle moment after {iso(pause_at)}: GPU "
            f"budget '{f.rule.name}' is past its grace ({f.text()})"
            + _survival_text(skipped, unknown),
        )

    def _back_off(self, s, w: Watch, policy: Policy) -> None:
        """The next attempt of a failing auto-pause waits longer each time: no retry storm.

        The failed attempt's time leaves the session at once; the next one shows once it is
        warned about, so ``pause_at`` is never a time already gone.
        """
        s.pause_at = None
        w.failures += 1
        base = max(policy.idle_timeout, self.poll_interval)
        delay = min(base * 2 ** (w.failures - 1), MAX_BACKOFF)
        w.retry_after = utcnow() + timedelta(seconds=delay)
        w.acted_for = None

    async def _refused(
        self, s, w: Watch, policy: Policy, why: str, reason: str, action: str = "pause"
    ) -> None:
        """A policy's pause or cull failed at once: say why on the session and in an event
        (``pause_failed`` or ``cull_failed``), and schedule the next attempt with backoff (a
        pause refused for a reason that says no pause can succeed is not tried again: the
        session table marks it unpausable, and the next pass does what the policy says)."""
        self._back_off(s, w, policy)
        await self.lc.table.fail(
            s,
            EventType.failed(action),
            f"policy:{policy.name}",
            state=None,  # the kernel runs on, untouched
            reason=reason,
            text=why,
            intact=True,
            message=f"{action.capitalize()} by policy {policy.name} failed: {why}. The "
            "kernel is still running with all its variables.",
            retry_at=iso(w.retry_after),
        )

    async def _watch_outcome(self, s, w: Watch, policy: Policy) -> None:
        """A failed auto-pause is retried later, with backoff: no retry storm."""
        op = self.lc.op_task(s.id)
        if op is not None:
            # asyncio.wait, not gather: when the monitor stops, cancelling this watcher must
            # not cancel the pause it watches (a committed pause is shutting a kernel down).
            await asyncio.wait({op})
        if s.state in RUNNING:
            self._back_off(s, w, policy)
        else:
            w.failures, w.retry_after = 0, None

    async def _dry_run(self, s) -> tuple[list | None, str | None]:
        """What a pause of ``s`` would not save (``skipped``), or why the kernel could not say
        (``unknown``): a dry run in the kernel, given up on after ``DRY_RUN_TIMEOUT``."""
        try:
            report = await asyncio.wait_for(
                self.bridge.run_agent(
                    s.kernel_id,
                    CHECK,
                    CheckArgs(
                        capture=self.capture,
                        test_restore=self.lc.settings.test_restore,
                        ambient=self.lc.settings.ambient,
                    ),
                ),
                DRY_RUN_TIMEOUT,
            )
            checked = check_report(report)
            ambient = checked["ambient"]
            loose = ambient["not_carried"] if ambient else []
            return [*checked["skipped"], *loose], None
        except asyncio.TimeoutError:
            return None, f"the kernel did not answer within {DRY_RUN_TIMEOUT:g} s"
        except GpuPauseError as e:
            if e.reason in UNPAUSABLE_REASONS:  # no pause can succeed: known before trying
                await self.lc.table.unpausable(s, e.reason, e.message)
            return None, e.message

    async def _warn(self, s, policy: Policy, act_at: datetime, action: str) -> None:
        """Record the warning event, naming what will not survive (a dry run in the kernel;
        for a kernel that cannot be paused, its whole state).

        Runs in its own task; a kernel that does not answer the dry run is given up on after
        ``DRY_RUN_TIMEOUT`` and the warning says so. Never raises.
        """
        skipped, unknown = None, None
        if action == "pause":
            skipped, unknown = await self._dry_run(s)
        verb = {"pause": "pauses", "cull": "shuts down", "warn": "has been idle until"}[action]
        message = f"{s.path} {verb} at {iso(act_at)} (policy {policy.name})"
        message += _survival_text(skipped, unknown)
        detail = {}
        if action == "cull" and known_unpausable(s):
            lost = what_is_lost(self.bridge.language(s.kernel_name))
            why = (s.pausable or {}).get("message", "")
            message += f"; it cannot be paused ({why}), so its state will be lost: {lost}"
            detail = {"lost": lost, "error_reason": (s.pausable or {}).get("reason")}
        elif action == "cull":
            message += "; no checkpoint is made: unsaved variables are lost"
        await self.lc.table.record_event(
            s,
            EventType.WARNED,
            f"policy:{policy.name}",
            action=action,
            pause_at=iso(act_at),
            skipped=skipped,
            message=message,
            **detail,
        )

    async def _account(self, s, w: Watch, active: bool, now: datetime) -> None:
        """A running kernel: the time since the last tick was held (and idle) on its GPUs."""
        start, w.last_tick, w.paused_tick = w.last_tick, now, None
        devices = gpu_device_count(s.gpu)
        if not devices:
            w.gpu_since = None
            return
        if start is not None:
            unpausable = devices if known_unpausable(s) else 0
            self.ledger.add(
                s, start, now, held=devices, idle=0 if active else devices, unpausable=unpausable
            )
        await self._save_now_and_then(s, w, now)
        w.gpu_since = w.gpu_since or now
        if self.alarm_hours > 0:
            period = timedelta(hours=self.alarm_hours)
            since = max(w.gpu_since, w.last_alarm or w.gpu_since)
            if now - since >= period:
                w.last_alarm = now
                await self.lc.table.record_event(
                    s,
                    EventType.GPU_HOLD_ALARM,
                    "policy:gpu_hold_alarm_hours",
                    held_hours=round((now - w.gpu_since).total_seconds() / 3600, 2),
                    message=f"{s.path} has held a GPU for more than {self.alarm_hours:g} h",
                )

    async def _account_stopped(self, s, w: Watch, now: datetime) -> None:
        """A session without a running kernel: paused ones reclaim the GPUs they held."""
        if s.state != SessionState.PAUSING:  # a kernel that comes back starts a fresh clock
            w.last_tick = None
        if s.state not in RECLAIMING or not s.gpu_devices_paused:
            w.paused_tick = None
            return
        start, w.paused_tick = w.paused_tick, now
        if start is not None:
            self.ledger.add(s, start, now, reclaimed=s.gpu_devices_paused)
        await self._save_now_and_then(s, w, now)

    async def _save_now_and_then(self, s: Session, w: Watch, now: datetime) -> None:
        """The session's GPU-seconds outlive a server restart, within a minute."""
        if w.last_saved is not None and (now - w.last_saved).total_seconds() < ACCOUNTING_SAVE:
            return
        w.last_saved = now
        if (
            self.lc.table.sessions.get(s.id) is s
        ):  # never bring back the record of a deleted session
            await self.lc.table.persist(s)

    async def report(self, since: str | None) -> dict:
        """GPU-hours since ``since`` (ISO 8601 or a duration such as 7d): total, sessions, days."""
        return await self.ledger.report(since, self.lc.table.sessions)

    # -- keep-alive ----------------------------------------------------------------------------
    async def keepalive(self, session_id: str, seconds) -> None:
        s = self.lc.table.get(session_id)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
            raise BadRequest(
                f"seconds must be a positive whole number, not {seconds!r}", "bad-seconds"
            )
        if s.state not in RUNNING:
            raise WrongState(f"cannot keep alive: the session is {s.state}")
        w = self.watches.get(s.id)
        if w is not None and w.budget_pause_at is not None and self.budget is not None:
            raise WrongState(
                f"the GPU budget '{self.budget.rule.name}', not an idle policy, pauses this "
                "session: a keep-alive cannot postpone it. Save what you need, or ask an "
                "admin for a grant",
                "budget-exceeded",
            )
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
        await self.lc.table.record_event(
            s,
            EventType.KEEPALIVE,
            "user",
            seconds=seconds,
            until=iso(w.keepalive_until),
            message=f"{s.path} kept alive for {seconds} s",
        )


def _survival_text(skipped: list | None, unknown: str | None) -> str:
    """What a warning adds about the state: what will not survive, or why nobody knows."""
    text = ""
    if skipped:
        text += "; will not survive: " + ", ".join(x["name"] for x in skipped)
    if unknown:
        text += f"; could not ask the kernel what would not survive ({unknown})"
    return text
