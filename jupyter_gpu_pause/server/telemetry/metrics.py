"""Prometheus metrics on jupyter_server's own ``/metrics``, and the phase clock whose timings the
pause and resume events carry (docs/metrics.md lists both).

Metrics are module-level and live in prometheus_client's default registry, which
jupyter_server already serves: they are registered once per process, whatever number of
servers (a test run) or extension instances build their services. Label values are a few
fixed words, all created up front, so every series exists (at 0) from the first scrape and no
session id, path or user becomes a label (the one exception an admin turns on:
``budget_metric_users`` adds the user to ``budget_used_ratio``, whose ``scope`` is a budget's
name from the configuration).

The numbers come from the lifecycle events (``MetricsListener`` on ``SessionTable.listeners``):
an event already says what happened, to whom, how long it took and how many bytes it wrote.
Sessions by state are read from the live session table at each scrape; GPU-seconds come from
the accounting ledger as it accrues; the few things no event reports (store maintenance
failures, webhook deliveries) call ``store_failed`` and ``webhook_delivery``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from ...store import GcBusy, StoreError
from ..state.event_types import EventType
from ..state.model import STATES, Session, SessionState

if TYPE_CHECKING:
    from ..budgets.service import Figures

PREFIX = "jupyter_gpu_pause_"
REASONS = ("user", "policy", "shutdown", "preemption", "other")
RESULTS = ("ok", "failed", "cancelled")
STORE_OPERATIONS = ("pause", "resume", "retention", "gc", "intents")
WEBHOOK_RESULTS = ("ok", "failed", "gone", "dropped")
# Pauses and resumes take from under a second (a small notebook) to many minutes (tens of GiB
# to a remote store); a wait in line for a GPU, up to hours.
OPERATION_BUCKETS = (0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, math.inf)
QUEUE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, math.inf)


def _once(cls, name: str, doc: str, labels: tuple[str, ...] = (), **kwargs):
    """The metric ``name``, registered on first import. Importing this module again (a reload,
    a second import path) finds the one already registered instead of failing with
    prometheus_client's ValueError for a duplicate name."""
    try:
        return cls(PREFIX + name, doc, labels, **kwargs)
    except ValueError:
        existing = REGISTRY._names_to_collectors.get(PREFIX + name)  # its own name table
        if existing is None:
            raise
        return existing


CAPACITY_QUEUE_UP = _once(
    Gauge,
    "capacity_queue_up",
    "1 while the capacity queue (capacity_queue_url) can be used, 0 while it cannot (its "
    "PostgreSQL down or unreachable: resumes answer 503, waiting ones keep their place).",
)

PAUSES = _once(
    Counter,
    "pauses",
    "Pauses that ended, by who asked (user, policy, shutdown, preemption) and result "
    "(ok: paused; failed; cancelled).",
    ("reason", "result"),
)
RESUMES = _once(
    Counter,
    "resumes",
    "Resumes that ended, by who asked and result (ok: restored and attached; failed; cancelled).",
    ("reason", "result"),
)
PAUSE_SECONDS = _once(
    Histogram,
    "pause_duration_seconds",
    "Seconds from a pause request to the session being paused (successful pauses).",
    buckets=OPERATION_BUCKETS,
)
GPU_RELEASE_SECONDS = _once(
    Histogram,
    "gpu_release_seconds",
    "Seconds from a pause request to its kernel being shut down, its GPU memory free "
    "(successful pauses).",
    buckets=OPERATION_BUCKETS,
)
TIME_TO_USABLE_SECONDS = _once(
    Histogram,
    "time_to_usable_seconds",
    "Seconds from a resume request to the kernel restored and attached to its notebook, "
    "waiting for capacity included (successful resumes).",
    buckets=OPERATION_BUCKETS,
)
QUEUE_WAIT_SECONDS = _once(
    Histogram,
    "queue_wait_seconds",
    "Seconds a resume that had to wait for capacity spent waiting, whatever its end.",
    buckets=QUEUE_BUCKETS,
)
WRITTEN_BYTES = _once(
    Counter,
    "checkpoint_written_bytes",
    "Bytes of blobs checkpoints wrote to the store (new content).",
)
DEDUPLICATED_BYTES = _once(
    Counter,
    "checkpoint_deduplicated_bytes",
    "Bytes of blobs checkpoints referenced without writing them, the store having them already.",
)
GPU_HELD = _once(
    Counter,
    "gpu_held_seconds",
    "GPU-seconds held by running kernels, per device (as in GET report).",
)
GPU_IDLE = _once(
    Counter,
    "gpu_idle_seconds",
    "GPU-seconds held by running kernels without activity, per device (part of held).",
)
GPU_RECLAIMED = _once(
    Counter,
    "gpu_reclaimed_seconds",
    "GPU-seconds given back by paused sessions, per device they held when paused.",
)
GPU_UNPAUSABLE = _once(
    Counter,
    "gpu_unpausable_seconds",
    "GPU-seconds held by running kernels known not to be pausable (a bash kernel, a Python "
    "whose agent cannot run), per device (part of held: no pause could give them back).",
)
STORE_ERRORS = _once(
    Counter,
    "store_errors",
    "Store failures, by what was being done (pause, resume, retention, gc, intents).",
    ("operation",),
)
WEBHOOK_DELIVERIES = _once(
    Counter,
    "webhook_deliveries",
    "Webhook deliveries, by result (ok; failed: given up after the retries; gone: the "
    "receiver answered 410 and is not sent to again; dropped: removed unsent, its URL's "
    "outbox full, gone or no longer configured). One result per event and URL.",
    ("result",),
)

for _reason in REASONS:
    for _result in RESULTS:
        PAUSES.labels(_reason, _result)
        RESUMES.labels(_reason, _result)
for _op in STORE_OPERATIONS:
    STORE_ERRORS.labels(_op)
for _result in WEBHOOK_RESULTS:
    WEBHOOK_DELIVERIES.labels(_result)


class SessionsView(Protocol):
    """What the session-state gauges read of a session table."""

    @property
    def sessions(self) -> Mapping[str, Session]: ...


class SessionStates:
    """Sessions by state, and those waiting for capacity, counted in the live session table at
    each scrape (every state, 0 included). One server per process serves ``/metrics``: the
    table of the server that built its services last is the one counted."""

    def __init__(self):
        self.table: Callable[[], SessionsView | None] = lambda: None  # a weak reference

    def describe(self):
        return list(self._families())

    def collect(self):
        table = self.table()
        sessions = list(table.sessions.values()) if table is not None else []
        return self._families(sessions)

    def _families(self, sessions=()):
        counts = dict.fromkeys(STATES, 0)
        for s in sessions:
            counts[s.state] = counts.get(s.state, 0) + 1
        states = GaugeMetricFamily(
            PREFIX + "sessions", "Sessions this server tracks, by state.", labels=["state"]
        )
        for state, n in counts.items():
            states.add_metric([state], n)
        yield states
        yield GaugeMetricFamily(
            PREFIX + "waiting_sessions",
            "Sessions whose resume waits for capacity (a GPU).",
            value=counts[SessionState.WAITING],
        )


def _registered(collector, name: str):
    """``collector`` registered, or the one registered under ``name`` already (this module
    imported again)."""
    try:
        REGISTRY.register(collector)
    except ValueError:
        collector = REGISTRY._names_to_collectors[name]
    return collector


SESSION_STATES = _registered(SessionStates(), PREFIX + "sessions")


class BudgetRatios:
    """``jupyter_gpu_pause_budget_used_ratio{scope}``: the server's user's GPU-hours used over
    their budget's limit this period (the figures of the monitor's last pass), labelled with
    the budget's name, and with the user's only when ``budget_metric_users`` is on."""

    NAME = PREFIX + "budget_used_ratio"
    DOC = (
        "GPU-hours used over the budget's limit this period (1.0: at the limit), by budget "
        "(scope); the user too when GpuPauseApp.budget_metric_users is on."
    )

    def __init__(self):
        self.figures: Callable[[], Figures | None] = lambda: None
        self.with_user = False

    def describe(self):
        return [GaugeMetricFamily(self.NAME, self.DOC, labels=["scope"])]

    def collect(self):
        f = self.figures()
        labels = ["scope", "user"] if self.with_user else ["scope"]
        family = GaugeMetricFamily(self.NAME, self.DOC, labels=labels)
        if f is not None:
            values = [f.rule.name, f.user] if self.with_user else [f.rule.name]
            family.add_metric(values, f.ratio)
        yield family


BUDGET_RATIOS = _registered(BudgetRatios(), BudgetRatios.NAME)


# -- what no event reports -----------------------------------------------------------------------
def webhook_delivery(result: str) -> None:
    """Count one webhook delivery: ``ok``, ``failed`` (retries exhausted), ``gone`` (410) or
    ``dropped`` (removed unsent)."""
    if result not in WEBHOOK_RESULTS:
        raise ValueError(
            f"webhook delivery result must be one of {', '.join(WEBHOOK_RESULTS)}, not {result!r}"
        )
    WEBHOOK_DELIVERIES.labels(result).inc()


def store_failed(operation: str, error: BaseException) -> None:
    """Count ``error`` as a store error of ``operation`` if the store caused it (a bug in our
    code is not the store's failure, nor another server's collection holding the lock)."""
    if operation not in STORE_OPERATIONS:
        raise ValueError(f"unknown store operation {operation!r}")
    if isinstance(error, (StoreError, OSError)) and not isinstance(error, GcBusy):
        STORE_ERRORS.labels(operation).inc()


def gpu_seconds(held: float, idle: float, reclaimed: float, unpausable: float) -> None:
    """``Ledger`` listener: GPU-seconds as the idle monitor accrues them."""
    for counter, amount in (
        (GPU_HELD, held),
        (GPU_IDLE, idle),
        (GPU_RECLAIMED, reclaimed),
        (GPU_UNPAUSABLE, unpausable),
    ):
        if amount > 0:
            counter.inc(amount)


# -- the lifecycle events ------------------------------------------------------------------------
def reason_class(reason: str | None) -> str:
    """The label of an event's reason: ``policy:<name>`` is ``policy`` (no per-name series)."""
    word = (reason or "").split(":", 1)[0]
    return word if word in REASONS else "other"


class MetricsListener:
    """Turns each lifecycle event into the counters and histograms above."""

    def __init__(self):
        self._queued: set[str] = set()  # sessions whose resume had to wait in line

    def __call__(self, event: dict, session) -> None:
        kind, detail = event["type"], event.get("detail") or {}
        reason = reason_class(event.get("reason"))
        sid = event["session_id"]
        if kind == EventType.WAITING:
            self._queued.add(sid)
        elif kind == EventType.PAUSED:
            PAUSES.labels(reason, "ok").inc()
            _observe(PAUSE_SECONDS, detail.get("duration_seconds"))
            _observe(GPU_RELEASE_SECONDS, detail.get("gpu_released_seconds"))
            _bytes(detail)
        elif kind == EventType.PAUSE_FAILED:
            PAUSES.labels(reason, "failed").inc()
            _bytes(detail)  # committed, only the kernel would not stop: the bytes are written
            if detail.get("error_reason") == "store":
                STORE_ERRORS.labels("pause").inc()
        elif kind == EventType.RESUMED:
            RESUMES.labels(reason, "ok").inc()
            _observe(TIME_TO_USABLE_SECONDS, detail.get("duration_seconds"))
            self._resume_ended(sid, detail)
        elif kind == EventType.RESUME_FAILED:
            RESUMES.labels(reason, "failed").inc()
            if detail.get("error_reason") == "store":
                STORE_ERRORS.labels("resume").inc()
            self._resume_ended(sid, detail)
        elif kind == EventType.CANCELLED:
            if detail.get("operation") == "resume":
                RESUMES.labels(reason, "cancelled").inc()
                self._resume_ended(sid, detail)
            elif detail.get("operation") == "pause":
                PAUSES.labels(reason, "cancelled").inc()

    def _resume_ended(self, sid: str, detail: dict) -> None:
        if sid in self._queued:
            self._queued.discard(sid)
            _observe(QUEUE_WAIT_SECONDS, (detail.get("timings") or {}).get("capacity"))


def _observe(histogram, value) -> None:
    if isinstance(value, (int, float)) and value >= 0:
        histogram.observe(value)


def _bytes(detail: dict) -> None:
    total, new = detail.get("bytes"), detail.get("new_bytes")
    if isinstance(total, int) and isinstance(new, int):
        WRITTEN_BYTES.inc(max(new, 0))
        DEDUPLICATED_BYTES.inc(max(total - new, 0))


def attach(table, ledger, capacity, budgets=None, budget_users: bool = False) -> MetricsListener:
    """Feed the metrics from one server's session table, accounting ledger, capacity service
    and budgets (read when scraped: the capacity room knows nothing of metrics)."""
    budget_ref = weakref.ref(budgets) if budgets is not None else (lambda: None)
    BUDGET_RATIOS.figures = lambda: getattr(budget_ref(), "current", None)
    BUDGET_RATIOS.with_user = budget_users
    SESSION_STATES.table = weakref.ref(table)
    ref = weakref.ref(capacity)
    CAPACITY_QUEUE_UP.set_function(lambda: 0 if (c := ref()) and c.unavailable else 1)
    listener = MetricsListener()
    table.listeners.append(listener)
    ledger.listeners.append(gpu_seconds)
    return listener
