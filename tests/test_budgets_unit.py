"""GPU-hour budgets, the pure parts: which entry applies to a user, where periods start and
end, what a user's intervals, grants and resets add up to, when a rolling budget renews, and
what one hour of each GPU counts."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.server.budgets import BudgetError, Budgets, parse_budgets
from jupyter_gpu_pause.server.budgets.ledger import Facts
from jupyter_gpu_pause.server.budgets.periods import bounds
from jupyter_gpu_pause.server.budgets.rules import applicable, exempt
from jupyter_gpu_pause.server.budgets.service import figures
from jupyter_gpu_pause.server.capacity import Holder

UTC = timezone.utc
H = 3600.0


def at(*args) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


RULES = parse_budgets(
    [
        {"name": "default", "gpu_hours": 10},
        {"name": "ml", "match": {"group": "ml"}, "gpu_hours": 40},
        {"name": "students", "match": {"user": "stu-*"}, "gpu_hours": 5},
        {"name": "alice", "match": {"user": "alice"}, "gpu_hours": 100, "period": "week"},
    ]
)


@pytest.mark.parametrize(
    ("user", "groups", "expected"),
    [
        ("alice", {"ml"}, "alice"),  # her own entry beats her group's
        ("stu-bob", {"ml"}, "students"),  # a user glob beats a group
        ("carol", {"ml"}, "ml"),  # a group beats the default
        ("dave", set(), "default"),
    ],
)
def test_the_most_specific_entry_wins(user, groups, expected):
    assert applicable(RULES, user, frozenset(groups)).name == expected


def test_without_a_default_a_user_nobody_names_has_no_budget():
    rules = parse_budgets([{"name": "ml", "match": {"group": "ml"}, "gpu_hours": 1}])
    assert applicable(rules, "eve", frozenset()) is None


def test_exempt_names_globs_and_groups():
    patterns = ["root", "svc-*", "@admins"]
    assert exempt(patterns, "root", frozenset())
    assert exempt(patterns, "svc-batch", frozenset())
    assert exempt(patterns, "zoe", frozenset({"admins"}))
    assert not exempt(patterns, "zoe", frozenset({"ml"}))


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"gpu_hours": 1}, "budget #1 has no 'name'"),
        ({"name": "x"}, "budget 'x' has no 'gpu_hours'"),
        ({"name": "x", "gpu_hours": -1}, "'gpu_hours' must be more than 0"),
        ({"name": "x", "gpu_hours": True}, "'gpu_hours' must be a number"),
        ({"name": "x", "gpu_hours": 1, "match": {"team": "a"}}, "unknown match key 'team'"),
        (
            {"name": "x", "gpu_hours": 1, "match": {"user": "a", "group": "b"}},
            "either a 'user' or a 'group'",
        ),
        ({"name": "x", "gpu_hours": 1, "grace": -0.1}, "'grace' must not be below 0"),
        ({"name": "x", "gpu_hours": 1, "hold_at": 0}, "'hold_at' must be more than 0"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(entry, words):
    with pytest.raises(BudgetError) as e:
        parse_budgets([entry])
    assert words in str(e.value)


def test_names_are_unique():
    with pytest.raises(BudgetError, match="defined twice"):
        parse_budgets([{"name": "a", "gpu_hours": 1}, {"name": "a", "gpu_hours": 2}])


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("day", datetime(2026, 12, 9, tzinfo=UTC), datetime(2026, 12, 10, tzinfo=UTC)),
        ("week", datetime(2026, 12, 7, tzinfo=UTC), datetime(2026, 12, 14, tzinfo=UTC)),
        ("month", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_calendar_periods_in_utc(period, start, end):
    now = datetime(2026, 12, 9, 15, 30, tzinfo=UTC)  # a Wednesday
    assert bounds(period, now) == (start, end)


def test_a_rolling_period_ends_now():
    now = datetime(2026, 12, 9, 15, 30, tzinfo=UTC)
    assert bounds("rolling_30d", now) == (now - timedelta(days=30), now)


def test_usage_counts_inside_the_period_weighted_and_after_the_last_reset():
    rule = parse_budgets([{"name": "m", "gpu_hours": 10}])[0]
    now = at(2026, 12, 9, 12)
    facts = Facts(
        now=now,
        intervals=[
            (at(2026, 11, 30, 23), at(2026, 12, 1, 1), 1.0),  # 1 h of it in December
            (at(2026, 12, 2), at(2026, 12, 2, 2), 0.5),  # 2 h of a half GPU: 1 GPU-hour
            (at(2026, 12, 5), at(2026, 12, 5, 3), 2.0),  # 3 h of two GPUs: 6 GPU-hours
        ],
    )
    f = figures(rule, "u", facts)
    assert f.used_hours == pytest.approx(8.0)
    assert (f.state, f.retry_at) == ("warned", None)  # 80 %: warned, not held

    # an admin's reset on the 4th: only what came after counts, and the grants before it go
    facts.adjustments = [("grant", 5.0, at(2026, 12, 3)), ("reset", 0.0, at(2026, 12, 4))]
    f = figures(rule, "u", facts)
    assert (f.used_hours, f.limit_hours) == (pytest.approx(6.0), 10.0)
    assert f.state == "ok"

    # a grant after it raises the limit
    facts.adjustments.append(("grant", 2.0, at(2026, 12, 6)))
    f = figures(rule, "u", facts)
    assert (f.limit_hours, f.granted_hours) == (12.0, 2.0)


def test_a_held_calendar_budget_renews_at_the_period_end_and_the_grace_is_above_the_hold():
    rule = parse_budgets([{"name": "m", "gpu_hours": 1, "grace": 0.5}])[0]
    start = at(2026, 12, 9, 10)
    held = figures(rule, "u", Facts(now=start + 1.2 * H, intervals=[(start, start + 1.2 * H, 1)]))
    assert held.state == "held" and not held.over_grace
    assert held.retry_at == datetime(2027, 1, 1, tzinfo=UTC)
    over = figures(rule, "u", Facts(now=start + 1.5 * H, intervals=[(start, start + 1.5 * H, 1)]))
    assert over.over_grace


def test_a_rolling_budget_renews_once_enough_old_usage_left_the_window():
    rule = parse_budgets([{"name": "r", "gpu_hours": 2, "period": "rolling_7d"}])[0]
    now = at(2026, 12, 9, 12)
    day = 24 * H
    facts = Facts(
        now=now,
        intervals=[
            (now - 6 * day, now - 6 * day + 1 * H, 1.0),  # 1 h six days ago
            (now - 1 * day, now - 1 * day + 1.5 * H, 1.0),  # 1.5 h yesterday
        ],
    )
    f = figures(rule, "u", facts)
    assert f.state == "held"  # 2.5 of 2
    # once half of the hour of six days ago has left the 7-day window, less than 2 h remain
    expected = datetime.fromtimestamp(now - 6 * day + 0.5 * H + 7 * day, UTC)
    assert abs((f.retry_at - expected).total_seconds()) < 1


def test_one_hour_of_a_gpu_counts_its_models_weight():
    budgets = Budgets(
        rules=RULES,
        exempt=[],
        admins=[],
        weights={"NVIDIA H200": 1.0, "NVIDIA A100 MIG 1g.10gb": 0.125},
        user="u",
        queue=None,
        gpu_names=lambda: {"GPU-a": "NVIDIA H200", "GPU-b": "NVIDIA A100 MIG 1g.10gb"},
        log=logging.getLogger("test"),
    )
    metered = budgets.meter(
        [
            Holder("two", "s", devices=("GPU-a", "GPU-b")),
            Holder("slice", "s", devices=("GPU-b",)),
            Holder("unknown", "s", devices=("GPU-z",)),  # a model nobody listed: 1.0
            Holder("unseen", "s"),  # a GPU session whose device nobody sees: one GPU
        ]
    )
    assert metered == {"two": 1.125, "slice": 0.125, "unknown": 1.0, "unseen": 1.0}
