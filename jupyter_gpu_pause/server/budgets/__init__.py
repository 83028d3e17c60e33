"""GPU-hour budgets per user and group, enforced without losing work.

The meter is the capacity queue's (``capacity/queue.py``): every server sharing it writes the
GPU-seconds its GPU sessions hold, weighted per GPU model, at each heartbeat. Here:

- ``rules``: the admin's ``budgets`` entries, validated at start, and which one applies;
- ``periods``: where a month, a week or a rolling window starts and ends;
- ``ledger``: the budget tables of the queue (usage, grants and resets, warnings given);
- ``service``: a user's figures, the refusal of a GPU resume over budget, the warnings and the
  sessions to pause once past the grace.

The app hands the service to the capacity service (its ``meter``), the idle monitor (the
warnings, and the pauses past the grace) and the REST handlers (``admit`` of a resume, the
``budget`` routes); so this room needs none of theirs. Imports ``config`` and ``state``.
"""

from .rules import BudgetError, BudgetRule, parse_budgets
from .service import Budgets

__all__ = ["BudgetError", "BudgetRule", "Budgets", "parse_budgets"]
