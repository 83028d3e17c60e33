"""The admin's budget entries (``c.GpuPauseApp.budgets``): validated once at start, a bad
entry stopping the server with a message naming it and the key; and which entry applies to a
user — the most specific (a user's own name, then a user glob, then a group, then the
default), the first of equals."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from ..config.checks import twice
from .periods import PERIODS

KEYS = {
    "name": str,
    "match": dict,
    "gpu_hours": (int, float),
    "period": str,
    "warn_at": (int, float),
    "hold_at": (int, float),
    "grace": (int, float),
}
MATCH_KEYS = ("user", "group")


class BudgetError(ValueError):
    """A budget entry is invalid; the message names the entry and the key."""


@dataclass(frozen=True)
class BudgetRule:
    name: str
    gpu_hours: float
    match: dict = field(default_factory=dict)
    period: str = "month"
    warn_at: float = 0.8
    hold_at: float = 1.0
    grace: float = 0.1

    @property
    def scope(self) -> str:
        """``user``, ``group`` or ``default``: what the entry matches on."""
        return next((k for k in MATCH_KEYS if k in self.match), "default")

    def specificity(self, user: str, groups: frozenset[str]) -> int | None:
        """How closely the entry matches ``user``: 3 their name, 2 a user glob, 1 one of their
        groups, 0 the default; None when it does not match."""
        if "user" in self.match:
            pattern = self.match["user"]
            if pattern == user:
                return 3
            return 2 if fnmatch.fnmatchcase(user, pattern) else None
        if "group" in self.match:
            return 1 if self.match["group"] in groups else None
        return 0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "match": dict(self.match),
            "gpu_hours": self.gpu_hours,
            "period": self.period,
            "warn_at": self.warn_at,
            "hold_at": self.hold_at,
            "grace": self.grace,
        }


def _number(label: str, key: str, value, *, above: float | None = None, least=None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{label}: '{key}' must be a number, not {value!r}")
    if above is not None and not value > above:
        raise BudgetError(f"{label}: '{key}' must be more than {above:g}, not {value!r}")
    if least is not None and not value >= least:
        raise BudgetError(f"{label}: '{key}' must not be below {least:g}, not {value!r}")
    return float(value)


def parse_budget(raw, index: int) -> BudgetRule:
    label = f"budget #{index + 1}"
    if not isinstance(raw, dict):
        raise BudgetError(f"{label} must be a dict, not {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise BudgetError(f"{label} has no 'name' (every budget needs one)")
    label = f"budget '{name}'"
    for key in raw:
        if key not in KEYS:
            raise BudgetError(f"{label}: unknown key '{key}'; known keys: {', '.join(KEYS)}")
    if "gpu_hours" not in raw:
        raise BudgetError(f"{label} has no 'gpu_hours' (how many GPU-hours per period)")
    match = raw.get("match", {})
    if not isinstance(match, dict):
        raise BudgetError(f"{label}: 'match' must be a dict, not {match!r}")
    for key, value in match.items():
        if key not in MATCH_KEYS:
            raise BudgetError(
                f"{label}: unknown match key '{key}'; use 'user' (a name or glob) or 'group'"
            )
        if not isinstance(value, str) or not value:
            raise BudgetError(f"{label}: match '{key}' must be a non-empty string, not {value!r}")
    if len(match) > 1:
        raise BudgetError(f"{label}: match either a 'user' or a 'group', not both")
    period = raw.get("period", "month")
    if period not in PERIODS:
        raise BudgetError(f"{label}: unknown period {period!r}; use one of {', '.join(PERIODS)}")
    rule = BudgetRule(
        name=name,
        match=dict(match),
        gpu_hours=_number(label, "gpu_hours", raw["gpu_hours"], above=0),
        period=period,
        warn_at=_number(label, "warn_at", raw.get("warn_at", 0.8), above=0),
        hold_at=_number(label, "hold_at", raw.get("hold_at", 1.0), above=0),
        grace=_number(label, "grace", raw.get("grace", 0.1), least=0),
    )
    if rule.warn_at > rule.hold_at:
        raise BudgetError(
            f"{label}: 'warn_at' ({rule.warn_at:g}) is above 'hold_at' ({rule.hold_at:g})"
        )
    return rule


def parse_budgets(raw_list) -> list[BudgetRule]:
    """Validate the configured list; names must be unique (events and metrics name them)."""
    if not isinstance(raw_list, list):
        raise BudgetError("must be a list of dicts")
    rules = [parse_budget(raw, i) for i, raw in enumerate(raw_list)]
    if (name := twice(r.name for r in rules)) is not None:
        raise BudgetError(f"budget '{name}' is defined twice; names must be unique")
    return rules


def exempt(patterns: list[str], user: str, groups: frozenset[str]) -> bool:
    """``budget_exempt``: user names or globs, and ``@group`` for a group's members."""
    for p in patterns:
        if p.startswith("@"):
            if p[1:] in groups:
                return True
        elif fnmatch.fnmatchcase(user, p):
            return True
    return False


def applicable(rules: list[BudgetRule], user: str, groups: frozenset[str]) -> BudgetRule | None:
    """The most specific entry matching ``user``, the first of equals; None if none does."""
    best, best_rank = None, -1
    for r in rules:
        rank = r.specificity(user, groups)
        if rank is not None and rank > best_rank:
            best, best_rank = r, rank
    return best
