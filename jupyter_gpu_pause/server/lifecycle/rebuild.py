"""One rebuild: re-run, in the session's kernel, the recorded cells that make the variables the
resume did not bring back (``kernel/rerun.py`` runs them; docs/rebuild.md).

The session stays ``active`` throughout: its kernel runs, only busy with the re-run. Progress
is per cell (``progress.unit == "cells"``). The outcome is one event: ``rebuilt`` with what
came back, or ``rebuild_failed`` with the failing cell (nothing was written back) or with what
needs confirming before anything runs. The restore report's ``rebuild`` is replaced by what is
still missing afterwards, so the UI never offers what is already back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ...kernel.protocol import REBUILD, OfferCell, RebuildArgs, RebuildOffer
from ..kernels.replies import MAX_CODE, pairs, read_result
from ..state.errors import failure
from ..state.event_types import EventType
from ..state.model import Session
from .context import ResumeContext, progress_into
from .operations import Op, Operation, Outcome


def auto_runs(offer: RebuildOffer | None, limit: float) -> bool:
    """``rebuild = "auto"`` re-runs this plan unasked: it makes something, every cell's run
    time is known and the total is under ``limit`` seconds."""
    if not offer or not offer["names"] or offer["seconds"] is None:
        return False
    return offer["seconds"] < limit


def _cells_text(cells: list[OfferCell]) -> str:
    labels = [f"[{c['execution_count']}]" if c["execution_count"] else "?" for c in cells]
    return ", ".join(labels)


class Rebuild(Operation):
    kind = "rebuild"

    def __init__(
        self,
        ctx: ResumeContext,
        s: Session,
        op: Op,
        kernel_id: str,
        names: list[str] | None,
        confirm: bool,
    ):
        super().__init__(s, op)
        self.ctx, self.kernel_id, self.names, self.confirm = ctx, kernel_id, names, confirm

    def admit(self) -> None:
        s = self.s
        offer = (s.restore or {}).get("rebuild") or {}
        cells = offer.get("cells") or []
        s.message = f"Rebuilding: re-running cells {_cells_text(cells)}" if cells else "Rebuilding"
        # a plan for some names only is made in the kernel: its length is known from there
        total = None if self.names else len(cells)
        s.progress = {"phase": "rebuilding", "done_bytes": 0, "total_bytes": total}
        s.progress["unit"] = "cells"

    async def work(self) -> Outcome:
        s, ctx = self.s, self.ctx
        no_rerun = await ctx.bridge.no_rerun_cells(s.path)
        args = RebuildArgs(confirm=self.confirm, no_rerun_ids=no_rerun)
        if self.names is not None:  # left out: every name still missing
            args["names"] = self.names
        result = await ctx.bridge.run_agent(self.kernel_id, REBUILD, args, progress_into(s))
        offer, plan = read_result(result)
        return functools.partial(tell, ctx, s, self.op.reason, result, offer, plan)

    async def cancelled(self) -> None:
        """A stopping server: the cells already re-run stay; nothing to record."""

    async def failed(self, e: Exception) -> None:
        s, ctx = self.s, self.ctx
        reason, text = failure(e)
        s.message = f"Rebuild failed: {text}"
        await ctx.table.persist(s)
        await ctx.table.record_event(
            s, EventType.REBUILD_FAILED, self.op.reason, message=text, error_reason=reason
        )


async def tell(
    ctx: ResumeContext,
    s: Session,
    by: str,
    result: Mapping[str, Any],
    offer: RebuildOffer | None,
    plan: RebuildOffer,
) -> None:
    """The outcome of a rebuild on the session (its message, what is still to rebuild) and
    as one event: ``by`` the user, ``auto``, or ``kernel`` (``gp.rebuild()`` in a cell)."""
    if s.restore is not None:
        s.restore = {**s.restore, "rebuild": offer}
    failed = result.get("failed") if isinstance(result.get("failed"), dict) else None
    raw_shared = result.get("shared")
    shared = raw_shared if pairs(raw_shared, "reason") else []
    rebuilt = [n for n in result.get("rebuilt") or () if isinstance(n, str)]
    left = "; ".join(f"{u['name']}: {u['reason']}" for u in plan["unbuildable"])
    if result.get("needs_confirm"):
        why = "; ".join(f"{x['name']}: {x['reason']}" for x in shared)
        s.message = (
            f"Rebuild not run: re-running cells {_cells_text(plan['cells'])} could change "
            f"restored objects ({why}). Confirm to re-run anyway"
        )
        detail: dict[str, object] = {
            "error_reason": "needs-confirm",
            "shared": shared,
            "plan": plan,
        }
    elif failed is not None:
        where = failed.get("execution_count")
        code = str(failed.get("code") or "")[:MAX_CODE]
        error = str(failed.get("error") or "")[:2000]
        s.message = f"Rebuild stopped at cell [{where}] ({code}): {error}. Nothing was changed"
        detail = {
            "error_reason": "cell-failed",
            "failed": {"execution_count": where, "code": code, "error": error},
            "plan": plan,
        }
    elif rebuilt:
        seconds = result.get("seconds")
        took = f" in {seconds:.2f} s" if isinstance(seconds, int | float) else ""
        s.message = (
            f"Rebuilt {', '.join(rebuilt)} by re-running cells {_cells_text(plan['cells'])}"
            + took
            + (f"; cannot rebuild {left}" if left else "")
        )
        detail = {
            "names": rebuilt,
            "cells": [
                {"execution_count": c["execution_count"], "seconds": c["seconds"]}
                for c in plan["cells"]
            ],
            "seconds": seconds,
            "copy_bytes": result.get("copy_bytes") or 0,
        }
    else:
        s.message = "Nothing to rebuild" + (f": cannot rebuild {left}" if left else "")
        await ctx.table.persist(s)
        return
    await ctx.table.persist(s)
    if rebuilt and not failed and not result.get("needs_confirm"):
        await ctx.table.record_event(s, EventType.REBUILT, by, message=s.message, **detail)
    else:
        await ctx.table.record_event(s, EventType.REBUILD_FAILED, by, message=s.message, **detail)
