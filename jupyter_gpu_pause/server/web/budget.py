"""``GET budget``, ``POST budget/grant`` and ``POST budget/reset`` (docs/budgets.md).

A server's user sees their own budget; a user named in ``budget_admins`` sees everyone's and
may grant hours or reset a budget, for any user on the same capacity queue. No kernel
capability reaches these routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..state.errors import NotFound
from .handlers import BaseHandler, api
from .idempotency import idempotent

if TYPE_CHECKING:
    from ..budgets.service import Budgets


class _Budget(BaseHandler):
    @property
    def budgets(self) -> Budgets:
        budgets = self.budget_service
        if budgets is None:
            raise NotFound(
                "no GPU-hour budget is configured on this server (c.GpuPauseApp.budgets)",
                "no-budget",
            )
        return budgets


class BudgetHandler(_Budget):
    @property
    def budget_user(self) -> str:
        return self.monitor.user

    @api
    async def get(self):
        if self.budget_service is None:
            self.send(
                {"admin": False, "configured": False, "user": self.budget_user, "budgets": []}
            )
            return
        self.send({"configured": True, **await self.budgets.rows()})


class BudgetGrantHandler(_Budget):
    @api
    @idempotent
    async def post(self):
        b = self.body({"user": str, "hours": (int, float)})
        self.send({"budget": await self.budgets.grant(b.get("user"), b.get("hours"))})


class BudgetResetHandler(_Budget):
    @api
    @idempotent
    async def post(self):
        b = self.body({"user": str})
        self.send({"budget": await self.budgets.reset(b.get("user"))})


def budget_handlers(base: str) -> list[tuple[str, type]]:
    return [
        (rf"{base}/budget", BudgetHandler),
        (rf"{base}/budget/grant", BudgetGrantHandler),
        (rf"{base}/budget/reset", BudgetResetHandler),
    ]
