"""Retention rules: which checkpoints a store keeps, as the admin configured them.

``GpuPauseApp.retention`` is a dict; ``parse_retention`` turns it into ``Retention`` or raises
ValueError naming the key, so a typo (``keep_lats``) or a negative number stops the server at
start instead of silently keeping everything.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Retention:
    """0 turns a rule off. Per session: ``keep_last``, ``max_age_days``, ``max_total_bytes``;
    for the whole store: ``max_store_bytes``."""

    keep_last: int = 3
    max_age_days: float = 30
    max_total_bytes: int = 0
    max_store_bytes: int = 0

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_RETENTION = Retention().as_dict()
_WHOLE = {"keep_last", "max_total_bytes", "max_store_bytes"}


def parse_retention(raw) -> Retention:
    """The rules of ``raw`` (missing keys take their defaults); ValueError names a bad key."""
    if not isinstance(raw, dict):
        raise ValueError(f"must be a dict of rules, not {raw!r}")
    known = {f.name for f in fields(Retention)}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; the rules are "
            f"{', '.join(sorted(known))}"
        )
    values = {}
    for key, value in raw.items():
        whole = key in _WHOLE
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or value < 0:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{key} = {value!r}: must be {kind} >= 0 (0 turns the rule off)")
        values[key] = value
    return Retention(**values)
