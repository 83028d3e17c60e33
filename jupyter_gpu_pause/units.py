"""Sizes and counts as people read them, the same in the kernel, the server and the CLI."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def size_text(n: float) -> str:
    """Decimal units, as disks and cloud bills count them: ``6.1 GB``."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def count_text(n: int, noun: str) -> str:
    """``1 object``, ``3 objects``: messages end up in notifications people read."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def age_text(seconds: float) -> str:
    """A coarse duration for messages: "40 s", "12 min", "2 h", "3 d"."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"{round(s)} s"
    if s < 90 * 60:
        return f"{round(s / 60)} min"
    if s < 48 * 3600:
        return f"{round(s / 3600)} h"
    return f"{round(s / 86400)} d"


def duration_seconds(text: str, bare: bool = True) -> float | None:
    """``90m``, ``2h``, ``7d``, ``1w`` (and, with ``bare``, a plain number of seconds) as
    seconds; None when ``text`` is not one. One reading for the REST API and the CLI."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None or (not bare and not m[2]):
        return None
    return float(m[1]) * _UNIT_SECONDS[m[2]]
