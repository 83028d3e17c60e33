"""Budget periods, in UTC: calendar ones (``day``, ``week`` from Monday, ``month``) renew at
their end; rolling ones (``rolling_7d``, ``rolling_30d``) always cover the last N days, so
they renew as old usage leaves the window (``service.renewal``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

CALENDAR = ("day", "week", "month")
ROLLING = {"rolling_7d": timedelta(days=7), "rolling_30d": timedelta(days=30)}
PERIODS = (*CALENDAR, *ROLLING)
# how a period reads in a sentence ("12.4 of 40 GPU-hours this month")
WORDS = {
    "day": "today",
    "week": "this week",
    "month": "this month",
    "rolling_7d": "in the last 7 days",
    "rolling_30d": "in the last 30 days",
}
LONGEST = timedelta(days=32)  # no period reaches further back: older usage can go


def bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """``[start, end)`` of the period holding ``now``; a rolling one ends now."""
    now = now.astimezone(timezone.utc)
    if period in ROLLING:
        return now - ROLLING[period], now
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
        return start, end
    raise ValueError(f"unknown period {period!r}")
