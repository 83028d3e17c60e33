"""Phase timings of one pause or resume: the ``timings`` and ``duration_seconds`` of its event
(docs/metrics.md), which the metrics' histograms are later fed from."""

from __future__ import annotations

import math
import time


class PhaseClock:
    """Where the time of one pause or resume went, for its event's ``timings``.

    Phases are contiguous stretches of one monotonic clock started with the operation: each
    ``enter`` closes the phase before it, so the phases never add up to more than the
    operation's ``duration_seconds``, and a failure's event shows the phase it failed in.
    """

    def __init__(self):
        self.began = time.monotonic()
        self._phase: str | None = None
        self._since = self.began
        self._spent: dict[str, float] = {}

    def enter(self, phase: str) -> None:
        if phase == self._phase:
            return
        now = time.monotonic()
        self._close(now)
        self._phase, self._since = phase, now

    def stop(self) -> None:
        self._close(time.monotonic())
        self._phase = None

    def _close(self, now: float) -> None:
        if self._phase is not None:
            self._spent[self._phase] = self._spent.get(self._phase, 0.0) + now - self._since

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def follow(self, on_progress, phase: str, into: str, then: str | None = None):
        """Wrap the agent's progress callback: the agent's progress ``phase`` moves the clock
        into ``into``, and its last update (all bytes done) into ``then``; the agent itself
        keeps no clock the server could read."""

        def update(p: dict) -> None:
            if p.get("phase") == phase:
                total = p.get("total_bytes")
                if then and isinstance(total, int) and (p.get("done_bytes") or 0) >= total:
                    self.enter(then)
                else:
                    self.enter(into)
            on_progress(p)

        return update

    def report(self) -> dict:
        """``timings`` and ``duration_seconds`` of the event, in seconds to the microsecond
        (phases rounded down, the duration up, so their sum never exceeds it)."""
        self.stop()
        return {
            "timings": {k: math.floor(v * 1e6) / 1e6 for k, v in self._spent.items()},
            "duration_seconds": math.ceil(self.elapsed() * 1e6) / 1e6,
        }

    def since_start(self) -> float:
        """Seconds from the operation's start to now, rounded up like ``duration_seconds``."""
        return math.ceil(self.elapsed() * 1e6) / 1e6
