"""GPU-hour accounting: what the idle monitor's ticks add up to, and the report built from it.

Every figure counts per device: a kernel holding two GPUs for an hour held two GPU-hours.
*Held* accrues while a running kernel holds GPU memory, *idle* is the part of it without
activity, *reclaimed* accrues while a session that held GPUs when it was paused stays paused
(or waits to resume). *Unpausable* is the part of held while the kernel was known not to be
pausable (``lifecycle/pausable.py``): GPU time no pause could have given back. The monitor
hands over intervals; the ledger adds them to the session's
totals at once and keeps them by UTC hour in memory until the tick's end, when one transaction
writes them all. Hour rows let a report start at any hour ("24h") and still draw whole days.

With a capacity queue, the same seconds summed per hour also go to the queue's ``usage_hours``
(``shared``): the user's hours as the admin console reports them, whichever server counted
them. That write runs beside the tick, never holding it up (a PostgreSQL queue may be down);
seconds it could not write wait for the next flush, added to what came meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import date, datetime, timedelta, timezone

from ...store.format import iso, parse_iso, utcnow
from ...units import duration_seconds
from ..state.errors import BadRequest
from ..state.model import Session

DEFAULT_WINDOW = timedelta(days=30)
MAX_DAYS = 90  # longest per-day series a report carries (the latest days of its window)
_KINDS = ("held", "idle", "reclaimed", "unpausable")

# writes hours of this server's user to the capacity queue (``CapacityQueue.add_hours``):
# rows of (hour key, held, idle, reclaimed, unpausable) GPU-seconds
SharedHours = Callable[[list[tuple[str, float, float, float, float]]], Awaitable[None]]


def parse_since(text: str | None, now: datetime) -> datetime:
    """``since`` of a report: an ISO 8601 time or a duration back from now (``7d``, ``24h``)."""
    if text is None or not text.strip():
        return now - DEFAULT_WINDOW
    raw = text.strip()
    try:
        back = duration_seconds(raw, bare=False)
        if back is not None:
            return now - timedelta(seconds=back)
        return parse_iso(raw)
    except (ValueError, OverflowError):
        raise BadRequest(
            f"since must be an ISO 8601 time such as 2026-12-02T10:15:00Z or a duration such "
            f"as 7d, 24h or 90m, not {text!r}",
            "bad-query",
        ) from None


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def hour_key(t: datetime) -> str:
    """``2026-12-02T10``: sorts as text (years below 1000 zero-padded, unlike strftime)."""
    t = t.astimezone(timezone.utc)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}"


def hour_slices(start: datetime, end: datetime) -> list[tuple[str, float]]:
    """``[start, end)`` cut at hour boundaries: (hour key, seconds in that hour)."""
    out = []
    t = start
    while t < end:
        nxt = min(end, floor_hour(t) + timedelta(hours=1))
        out.append((hour_key(t), (nxt - t).total_seconds()))
        t = nxt
    return out


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 4)


def _figures(held: float, idle: float, reclaimed: float, unpausable: float) -> dict:
    return {
        "gpu_hours_held": _hours(held),
        "gpu_hours_idle": _hours(idle),
        "gpu_hours_reclaimed": _hours(reclaimed),
        "gpu_hours_unpausable": _hours(unpausable),
    }


class Ledger:
    """GPU-seconds of every session: totals on the session, hourly rows in the records."""

    def __init__(self, records, log: logging.Logger | logging.LoggerAdapter | None = None):
        self.records = records
        self.log = log or logging.getLogger(__name__)
        # (hour, session id) -> [path, held, idle, reclaimed, unpausable]
        self._pending: dict[tuple[str, str], list] = {}
        # told (held, idle, reclaimed, unpausable) GPU-seconds as they accrue: the metrics'
        self.listeners: list[Callable[[float, float, float, float], None]] = []
        # where each hour's sums go too: the capacity queue's ``usage_hours`` (rows of (hour,
        # held, idle, reclaimed, unpausable)); None: nowhere (no queue)
        self.shared: SharedHours | None = None
        self._hours: dict[str, list[float]] = {}  # hour -> seconds not yet in the queue
        self._sharing: asyncio.Future | None = None
        self.shared_error: str | None = None  # why the last write to the queue failed

    def add(self, s, start: datetime, end: datetime, **devices: int) -> None:
        """Count ``[start, end)`` for session ``s``; ``held=2, idle=2`` means two GPUs, idle
        (``unpausable``, like ``idle``, is a part of ``held``)."""
        seconds = (end - start).total_seconds()
        if seconds <= 0:
            return
        factors = [devices.get(k, 0) for k in _KINDS]
        s.gpu_seconds_held += seconds * factors[0]
        s.gpu_seconds_idle += seconds * factors[1]
        s.gpu_seconds_reclaimed += seconds * factors[2]
        s.gpu_seconds_unpausable += seconds * factors[3]
        for hour, part in hour_slices(start, end):
            self._merge(hour, s.id, s.path, *(part * f for f in factors))
            if self.shared is not None:
                self._merge_hour(hour, [part * f for f in factors])
        for listener in self.listeners:
            listener(*(seconds * f for f in factors))

    def _merge(self, hour: str, sid: str, path: str, *seconds: float) -> None:
        row = self._pending.setdefault((hour, sid), [path, *(0.0 for _ in _KINDS)])
        row[0] = path
        for i, value in enumerate(seconds, 1):
            row[i] += value

    def _merge_hour(self, hour: str, seconds: list[float]) -> None:
        row = self._hours.setdefault(hour, [0.0 for _ in _KINDS])
        for i, value in enumerate(seconds):
            row[i] += value

    async def flush(self) -> None:
        """Write what was counted since the last flush, in one transaction (and start the
        queue's write of the hours, ``share``)."""
        self.share()
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        rows = [(hour, sid, *values) for (hour, sid), values in pending.items()]
        try:
            await self.records.add_accounting(rows)
        except Exception:  # rolled back: keep the seconds for the next flush
            for row in rows:
                self._merge(*row)
            raise
        # (cancelled while waiting: the write is queued on the records thread and still runs)

    def share(self) -> None:
        """Send the hours counted since the last write to the queue, in the background; one
        write at a time (the next flush sends what came meanwhile)."""
        if self.shared is None or not self._hours:
            return
        if self._sharing is None or self._sharing.done():
            self._sharing = asyncio.ensure_future(self._share(self.shared))

    async def _share(self, shared: SharedHours) -> None:
        hours, self._hours = self._hours, {}
        rows = [(hour, s[0], s[1], s[2], s[3]) for hour, s in sorted(hours.items())]
        try:
            await shared(rows)
        except Exception as e:  # rolled back: kept for the next flush
            # (cancelled while waiting: the write still runs on the queue's thread, and the
            # seconds are not kept: never counted twice)
            for hour, *seconds in rows:
                self._merge_hour(hour, seconds)
            if self.shared_error is None:
                self.log.warning(
                    "jupyter_gpu_pause: could not add GPU-hours to the capacity queue (%s); "
                    "they are kept and sent again at the next monitor pass",
                    e,
                )
            self.shared_error = str(e)
            return
        if self.shared_error is not None:
            self.log.info("jupyter_gpu_pause: GPU-hours reach the capacity queue again")
        self.shared_error = None

    async def close(self) -> None:
        """The last flush, and the last writes to the queue, before the queue closes (hours it
        cannot take now are lost to it; the records keep them for this server's report)."""
        try:
            await self.flush()
        finally:
            if self._sharing is not None:
                await asyncio.gather(self._sharing, return_exceptions=True)
            self.share()  # what came while it ran, or what it could not write: once more
            if self._sharing is not None:
                await asyncio.gather(self._sharing, return_exceptions=True)

    async def unpausable_seconds(self, since: datetime) -> float:
        """GPU-seconds held by kernels known not to be pausable from ``since`` (floored to the
        hour) until now, as this server counted them: the budget's ``unpausable_hours``."""
        await self.flush()
        data = await self.records.accounting(hour_key(floor_hour(since)))
        return sum(row[-1] for row in data["sessions"])

    async def report(
        self, since: str | None, sessions: Mapping[str, Session], now: datetime | None = None
    ):
        """GPU-hours from ``since`` (floored to the hour) until now: total, per session, per day.

        The day series runs over every UTC day of the window (zeros where nothing was counted,
        so a chart has a continuous axis), the latest ``MAX_DAYS`` of it at most.
        """
        now = now or utcnow()
        start = floor_hour(parse_since(since, now))
        await self.flush()
        data = await self.records.accounting(hour_key(start))
        rows = []
        totals = [0.0 for _ in _KINDS]
        for sid, path, *seconds in data["sessions"]:
            if not any(seconds):
                continue
            live = sessions.get(sid)
            rows.append(
                {
                    "session_id": sid,
                    "path": live.path if live is not None else path,
                    **_figures(*seconds),
                }
            )
            totals = [a + b for a, b in zip(totals, seconds, strict=True)]
        rows.sort(key=lambda r: (-r["gpu_hours_held"], -r["gpu_hours_reclaimed"], r["path"]))
        by_day = {day: values for day, *values in data["days"]}
        return {
            "since": iso(start),
            "until": iso(now),
            "total": _figures(*totals),
            "sessions": rows,
            "days": [
                {"day": day, **_figures(*by_day.get(day, (0.0, 0.0, 0.0, 0.0)))}
                for day in _days(start.date(), now.date())
            ],
        }


def _days(first: date, last: date) -> list[str]:
    if first > last:
        return []
    first = max(first, last - timedelta(days=MAX_DAYS - 1))
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
