"""``jupyter gpu-pause budget show|grant USER HOURS|reset USER``: GPU-hour budgets."""

from __future__ import annotations

import math

from ..client.types import Budget
from ..store.format import parse_iso
from .base import Command
from .errors import USAGE, CliError
from .output import Output

ACTIONS = ("show", "grant", "reset")


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        hours = float("nan")
    if not 0 < hours < math.inf:
        raise CliError(f"HOURS must be a positive number of GPU-hours, not {text!r}", USAGE)
    return hours


def _when(row: Budget) -> str:
    """When GPU resumes come back (a held budget) or the period renews (a calendar one)."""
    text = row.get("retry_at") or (
        None if row["period"].startswith("rolling") else row["period_end"]
    )
    if not text:
        return "rolling"
    return parse_iso(text).strftime("%Y-%m-%d %H:%M UTC")


class BudgetCommand(Command):
    name = "jupyter-gpu-pause-budget"
    args = "show | grant USER HOURS | reset USER"
    description = (
        "GPU-hour budgets: `show` your own (a budget admin: everyone's); `grant USER HOURS` "
        "more hours this period (a hold lifts at once); `reset USER` starts the user's period "
        "over. grant and reset are for the users in c.GpuPauseApp.budget_admins."
    )

    def run(self, out: Output):
        action, *rest = self.positional(1, 3)
        if action not in ACTIONS:
            raise CliError(f"unknown budget action {action!r}; one of: {', '.join(ACTIONS)}", USAGE)
        given = [a for a in rest if a is not None]
        wanted = {"show": 0, "grant": 2, "reset": 1}[action]
        if len(given) != wanted:
            raise CliError(f"usage: jupyter gpu-pause budget {self.args}", USAGE)
        client = self.client(out)
        if action == "show":
            doc = client.budget()
            if out.json:
                return out.document(doc)
            return self._show(out, doc.get("budgets") or [], doc.get("configured", True))
        if action == "grant":
            row = client.grant_budget(given[0], _hours(given[1]))
        else:
            row = client.reset_budget(given[0])
        if out.json:
            return out.document({"budget": row})
        self._show(out, [row])
        return None

    @staticmethod
    def _show(out: Output, rows: list[Budget], configured: bool = True) -> None:
        if not rows:
            out.note(
                "no GPU-hour budget applies"
                if configured
                else "no GPU-hour budget is configured on this server"
            )
            return
        out.table(
            ["USER", "BUDGET", "USED", "STATE", "RENEWS"],
            [
                [
                    r["user"],
                    r["name"],
                    r["text"],
                    r["state"],
                    _when(r),
                ]
                for r in rows
            ],
        )
