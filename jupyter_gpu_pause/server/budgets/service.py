"""One user's budget in figures, and what the server does with them.

``Budgets`` answers ``GET budget`` (a user's own; an admin's server: everyone's); refuses a
GPU resume over budget before the lifecycle starts it (``admit``, called by the REST handler,
the one place a resume is asked: 409 ``budget-exceeded`` with ``retry_at``; a CPU resume still
goes); records an admin's grant or reset; and, at each pass of the idle monitor, looks at its
own user's figures (``look``): past ``warn_at`` a ``budget_warned`` event, past ``hold_at`` a
``budget_held`` one (each once per period, whichever server of the user sees it first, and
again after a grant or a reset), after a grant that lifted a hold a ``budget_granted`` one.
Past ``hold_at + grace`` (``Figures.over_grace``) the monitor pauses the user's running GPU
sessions at their next idle moment.
"""

from __future__ import annotations

import asyncio
import fnmatch
import grp
import math
import os
import pwd
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from ...store.format import iso
from ..state.errors import BadRequest, BudgetExceeded, Forbidden, NotFound
from ..state.event_types import EventType
from ..state.model import SessionState
from .ledger import BudgetLedger, Facts
from .periods import ROLLING, WORDS, bounds
from .rules import BudgetRule, applicable, exempt

HOUR = 3600.0
# a resume of these starts anew: admitted here
RESUMABLE = (SessionState.PAUSED, SessionState.FAILED, SessionState.SUSPENDED)


def _used(intervals, start: float, end: float) -> float:
    """Weighted GPU-seconds of ``intervals`` inside ``[start, end)``."""
    return sum(max(0.0, min(last, end) - max(s, start)) * w for s, last, w in intervals)


@dataclass
class Figures:
    """A user's budget now: what ``GET budget`` says of them, and what enforcement reads."""

    rule: BudgetRule
    user: str
    used_hours: float
    limit_hours: float
    granted_hours: float
    period_start: datetime
    period_end: datetime
    retry_at: datetime | None
    since: float  # where the period's count starts (its start, or a reset), queue clock
    last_grant: float | None
    notices: list[tuple[str, float]]
    # of used: GPU-hours held by kernels known not to be pausable, as this server counted them
    # since the period's start (None: not known here, another user's row)
    unpausable_hours: float | None = None

    @property
    def ratio(self) -> float:
        return self.used_hours / self.limit_hours if self.limit_hours > 0 else 0.0

    @property
    def state(self) -> str:
        if self.ratio >= self.rule.hold_at:
            return "held"
        return "warned" if self.ratio >= self.rule.warn_at else "ok"

    @property
    def over_grace(self) -> bool:
        return self.ratio >= self.rule.hold_at + self.rule.grace

    def text(self) -> str:
        """'12.4 of 40 GPU-hours this month'."""
        return (
            f"{self.used_hours:.4g} of {self.limit_hours:.4g} GPU-hours {WORDS[self.rule.period]}"
        )

    def to_json(self) -> dict:
        return {
            "name": self.rule.name,
            "user": self.user,
            "scope": self.rule.scope,
            "used_hours": round(self.used_hours, 6),
            "limit_hours": round(self.limit_hours, 6),
            "granted_hours": round(self.granted_hours, 6),
            "period": self.rule.period,
            "period_start": iso(self.period_start),
            "period_end": iso(self.period_end),
            "warn_at": self.rule.warn_at,
            "hold_at": self.rule.hold_at,
            "grace": self.rule.grace,
            "ratio": round(self.ratio, 6),
            "state": self.state,
            "retry_at": iso(self.retry_at) if self.retry_at else None,
            "text": self.text(),
            "unpausable_hours": (
                None if self.unpausable_hours is None else round(self.unpausable_hours, 6)
            ),
        }

    def detail(self) -> dict:
        """What a budget event carries: the row's figures, under the name ``budget``."""
        row = self.to_json()
        keys = ("period", "used_hours", "limit_hours", "period_end", "retry_at")
        return {"budget": row["name"], **{k: row[k] for k in keys}}


def figures(rule: BudgetRule, user: str, facts: Facts) -> Figures:
    now = datetime.fromtimestamp(facts.now, timezone.utc)
    start, end = bounds(rule.period, now)
    since = max([start.timestamp()] + [at for k, _, at in facts.adjustments if k == "reset"])
    grants = [(h, at) for k, h, at in facts.adjustments if k == "grant" and at >= since]
    granted = sum(h for h, _ in grants)
    used = _used(facts.intervals, since, facts.now) / HOUR
    f = Figures(
        rule=rule,
        user=user,
        used_hours=used,
        limit_hours=rule.gpu_hours + granted,
        granted_hours=granted,
        period_start=start,
        period_end=end,
        retry_at=None,
        since=since,
        last_grant=max((at for _, at in grants), default=None),
        notices=[n for n in facts.notices if n[1] >= since],
    )
    if f.state == "held":
        f.retry_at = renewal(f, facts)
    return f


def renewal(f: Figures, facts: Facts) -> datetime:
    """When a held budget allows a GPU resume again, if nothing more is used: the period's end,
    or for a rolling window the moment enough old usage has left it."""
    if f.rule.period not in ROLLING:
        return f.period_end
    window = ROLLING[f.rule.period].total_seconds()
    hold = f.rule.hold_at * f.limit_hours * HOUR
    lo, hi = f.since, facts.now  # the window's start c: used in [c, now) < hold from hi on
    for _ in range(60):
        mid = (lo + hi) / 2
        if _used(facts.intervals, mid, facts.now) < hold:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi + window, timezone.utc)


def when_text(t: datetime | None) -> str:
    """A time in a sentence: '2027-01-01 00:00 UTC'."""
    return t.strftime("%Y-%m-%d %H:%M UTC") if t else "the budget renews"


def unix_user(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def unix_groups(user: str) -> list[str]:
    """The user's Unix groups (none when the system does not know the name)."""
    try:
        gid = pwd.getpwnam(user).pw_gid
        ids = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        return []
    names = []
    for g in ids:
        try:
            names.append(grp.getgrgid(g).gr_name)
        except KeyError:
            continue
    return names


class Budgets:
    def __init__(
        self,
        *,
        rules: list[BudgetRule],
        exempt: list[str],
        admins: list[str],
        weights: dict[str, float],
        user: str,
        queue,
        gpu_names: Callable[[], dict[str, str]],
        log,
    ):
        self.rules, self.exempt, self.admins, self.weights = rules, exempt, admins, weights
        self.user = user
        self.groups: frozenset[str] = frozenset(unix_groups(user))
        self.ledger = BudgetLedger(queue)
        self.gpu_names = gpu_names  # GPU UUID -> model name, as the probe sees them
        self.log = log
        self.current: Figures | None = None  # this server's user, as of the last look
        self.seen_at = 0.0
        # GPU-seconds this server's kernels that cannot be paused held since a time (the idle
        # monitor's ledger sets it; None: not counted)
        self.unpausable_seconds: Callable[[datetime], Awaitable[float]] | None = None

    @property
    def is_admin(self) -> bool:
        """The server's user is one of ``budget_admins``: sees and grants everyone's."""
        return any(fnmatch.fnmatchcase(self.user, a) for a in self.admins)

    def rule_for(self, user: str, groups: frozenset[str]) -> BudgetRule | None:
        if exempt(self.exempt, user, groups):
            return None
        return applicable(self.rules, user, groups)

    def add_groups(self, groups: list[str]) -> None:
        """JupyterHub groups, once the Hub said them."""
        self.groups = self.groups | frozenset(groups)

    # -- the meter -----------------------------------------------------------------------------
    def meter(self, holders) -> dict[str, float]:
        """{session id: weighted GPUs} of this server's GPU holders: each GPU counts its
        model's ``gpu_weights`` entry (1.0 when unlisted or unknown)."""
        names = self.gpu_names() if self.weights else {}
        out = {}
        for h in holders:
            if not h.devices:
                out[h.session_id] = 1.0
                continue
            out[h.session_id] = sum(self.weights.get(names.get(d, ""), 1.0) for d in h.devices)
        return out

    # -- figures -------------------------------------------------------------------------------
    async def figures_of(self, user: str, groups: frozenset[str]) -> Figures | None:
        rule = self.rule_for(user, groups)
        if rule is None:
            return None
        now = datetime.now(timezone.utc)
        start, _ = bounds(rule.period, now)
        facts = await self.ledger.facts(user, start.timestamp() - 60)
        return figures(rule, user, facts)

    async def own(self) -> Figures | None:
        f = await self.figures_of(self.user, self.groups)
        if f is not None and self.unpausable_seconds is not None:
            since = datetime.fromtimestamp(f.since, timezone.utc)
            f.unpausable_hours = await self.unpausable_seconds(since) / HOUR
        self.current = f
        return f

    async def rows(self) -> dict:
        """``GET budget``: the user's own; every known user's on an admin's server."""
        if not self.is_admin:
            mine = await self.own()
            return {"admin": False, "user": self.user, "budgets": [mine.to_json()] if mine else []}
        users = await self.ledger.users()
        users[self.user] = self.groups
        rows = []
        for user in sorted(users):
            f = await (self.own() if user == self.user else self.figures_of(user, users[user]))
            if f is not None:
                rows.append(f.to_json())
        return {"admin": True, "user": self.user, "budgets": rows}

    async def admit(self, s, device: str | None, gpu_session: Callable) -> str | None:
        """The ``device`` a resume of ``s`` may ask: as asked, except over a held budget, where
        a GPU resume (``gpu``, or unasked for a GPU session) is refused with BudgetExceeded
        and ``any`` takes the CPU. A resume already under way, or one onto the CPU, passes."""
        if s.state not in RESUMABLE or device == "cpu" or not gpu_session(s):
            return device
        try:
            await self.check_gpu_resume()
        except BudgetExceeded:
            if device != "any":
                raise
            return "cpu"
        return device

    async def check_gpu_resume(self) -> None:
        """BudgetExceeded when the user's budget is held: a GPU resume must wait."""
        f = await self.own()
        if f is None or f.state != "held":
            return
        when = iso(f.retry_at) if f.retry_at else None
        raise BudgetExceeded(
            f"GPU budget '{f.rule.name}' used up: {f.text()}. A GPU resume is held until "
            f"{when_text(f.retry_at)}; resume on the CPU now, or ask an admin for a grant",
            when,
            f.rule.name,
        )

    # -- an admin's changes --------------------------------------------------------------------
    async def _target(self, user) -> tuple[str, frozenset[str]]:
        if not self.is_admin:
            raise Forbidden(
                f"only budget admins may change budgets; {self.user} is not one "
                "(c.GpuPauseApp.budget_admins)",
                "not-budget-admin",
            )
        if not isinstance(user, str) or not user.strip():
            raise BadRequest('name the user: {"user": "alice", …}', "bad-user")
        users = await self.ledger.users()
        users[self.user] = self.groups
        known_here = user in users or await asyncio.to_thread(unix_user, user)  # NSS may be slow
        if not known_here:  # a typo must not grant hours to nobody
            known = ", ".join(sorted(users)[:10])
            raise NotFound(
                f"no server of {user!r} has used this capacity queue and this machine has no "
                f"such user; check the name (known: {known})",
                "unknown-user",
            )
        if user in users:
            groups = users[user]
        else:
            groups = frozenset(await asyncio.to_thread(unix_groups, user))
        if self.rule_for(user, groups) is None:
            raise NotFound(
                f"no budget applies to {user} (exempt, or no entry matches)", "no-budget"
            )
        return user, groups

    async def grant(self, user, hours) -> dict:
        """More GPU-hours for ``user`` this period: a hold lifts at once."""
        number = isinstance(hours, (int, float)) and not isinstance(hours, bool)
        if not number or not 0 < hours < math.inf:
            raise BadRequest(f"hours must be a positive number, not {hours!r}", "bad-hours")
        user, groups = await self._target(user)
        await self.ledger.adjust(user, "grant", float(hours), self.user)
        self.log.info("jupyter_gpu_pause: %s granted %s %g GPU-hours", self.user, user, hours)
        now = await self.figures_of(user, groups)
        assert now is not None, "_target found a budget for the user"
        return now.to_json()

    async def reset(self, user) -> dict:
        """``user``'s period starts over now: usage and grants so far no longer count."""
        user, groups = await self._target(user)
        await self.ledger.adjust(user, "reset", 0.0, self.user)
        self.log.info("jupyter_gpu_pause: %s reset the GPU budget of %s", self.user, user)
        now = await self.figures_of(user, groups)
        assert now is not None, "_target found a budget for the user"
        return now.to_json()

    # -- each pass of the monitor --------------------------------------------------------------
    async def look(self, table, pick) -> Figures | None:
        """Refresh this user's figures and give the warnings due; ``pick()``: the session an
        event is recorded on (a running GPU session, else the latest GPU session), None when
        there is none yet (the notice waits for one). Returns the figures."""
        now = datetime.now(timezone.utc).timestamp()
        if now - self.seen_at > 60:
            await self.ledger.seen(self.user, sorted(self.groups))
            self.seen_at = now
        f = await self.own()
        if f is None:
            return None
        s = pick()
        if s is None:
            return f
        since = max(f.since, f.last_grant or 0.0)
        given = {k for k, at in f.notices if at >= since}
        due = []
        if f.ratio >= f.rule.warn_at:
            due.append(EventType.BUDGET_WARNED)
        if f.state == "held":
            due.append(EventType.BUDGET_HELD)
        # a grant that found the budget held (its notice before the grant) and lifted it
        if f.last_grant is not None and f.state != "held":
            if any(k == EventType.BUDGET_HELD and at < f.last_grant for k, at in f.notices):
                due.append(EventType.BUDGET_GRANTED)
        for event in due:
            if event not in given:
                await self._tell(table, s, event, f, since)
        return f

    async def _tell(self, table, s, event: EventType, f: Figures, since: float) -> None:
        """Record ``event`` on ``s`` unless another server of the user did since ``since``."""
        if await self.ledger.notice(self.user, str(event), since):
            await table.record_event(
                s, event, f"budget:{f.rule.name}", message=self._message(event, f), **f.detail()
            )

    @staticmethod
    def _message(event: EventType, f: Figures) -> str:
        if event == EventType.BUDGET_WARNED:
            return (
                f"GPU budget '{f.rule.name}': {f.text()} ({f.ratio:.0%}); GPU resumes are held "
                f"at {f.rule.hold_at:.0%}"
            )
        if event == EventType.BUDGET_HELD:
            return (
                f"GPU budget '{f.rule.name}' used up: {f.text()}. GPU resumes are held until "
                f"{when_text(f.retry_at)}; CPU resumes still work"
            )
        return f"GPU budget '{f.rule.name}': an admin granted more; {f.text()}"
