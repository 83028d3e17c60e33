"""What the server accepts of the agent's replies beyond the checkpoint itself (checked by
``store.schema``): the dry run's report, the restore report (with its ambient state) and the
rebuild plans. The kernel runs user code, so a reply is read only through these checks, and only
the fields the session and the UI rely on pass, trimmed: what passes has the shape
``kernel/protocol.py`` declares.
"""

from __future__ import annotations

from typing import Any, TypeGuard, cast

from ...kernel.protocol import (
    AmbientPlan,
    AmbientRestored,
    CheckReply,
    RebuildOffer,
    RestoreReply,
    Unverified,
)
from ..state.errors import AgentFailed, GpuPauseError

MAX_CODE = 200  # characters of a cell's first line kept in the session and events


def _count(x) -> bool:
    return x is None or (isinstance(x, int) and not isinstance(x, bool))


def _number(x) -> bool:
    return x is None or (isinstance(x, int | float) and not isinstance(x, bool))


def _text(x) -> bool:
    return x is None or isinstance(x, str)


def _names(items: Any) -> TypeGuard[list[str]]:
    return isinstance(items, list) and all(isinstance(x, str) for x in items)


def pairs(items: Any, second: str) -> TypeGuard[list[dict[str, Any]]]:
    return isinstance(items, list) and all(
        isinstance(i, dict) and isinstance(i.get("name"), str) and isinstance(i.get(second), str)
        for i in items
    )


def unverified_of(raw: Any) -> Unverified | None:
    """The agent's ``unverified`` ({"reason", "names"}: saved, but its test-restore could not
    judge them, ``kernel/trial.py``) if well formed, with short texts; else None."""
    if not isinstance(raw, dict):
        return None
    reason, names = raw.get("reason"), raw.get("names")
    if not isinstance(reason, str) or not isinstance(names, list):
        return None
    if not all(isinstance(n, str) for n in names):
        return None
    return {"reason": reason[:500], "names": [n[:200] for n in names]}


def ambient_of(raw: Any) -> AmbientPlan | None:
    """The agent's ``ambient`` ({"carried": [names], "not_carried": [{"name", "reason"}]}: what
    of the process around the namespace a pause carries, and what cannot travel) if well
    formed, with short texts; else None."""
    if not isinstance(raw, dict):
        return None
    carried, loose = raw.get("carried"), raw.get("not_carried")
    if not (isinstance(carried, list) and all(isinstance(n, str) for n in carried)):
        return None
    if not pairs(loose, "reason"):
        return None
    return {
        "carried": [n[:200] for n in carried],
        "not_carried": [{"name": x["name"][:200], "reason": x["reason"][:500]} for x in loose],
    }


def check_report(report: Any) -> CheckReply:
    """The agent's dry-run report as the REST answer, if it has the expected shape."""
    objects, skipped, size = report.get("objects"), report.get("skipped"), report.get("bytes")
    error, registered = report.get("error"), report.get("registered", [])
    unverified = report.get("unverified")
    well_formed = (
        isinstance(objects, list)
        and all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in objects)
        and isinstance(skipped, list)
        and all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in skipped)
        and isinstance(size, int)
        and (error is None or isinstance(error, str))
        and isinstance(registered, list)
        and (unverified is None or unverified_of(unverified) is not None)
        and (report.get("ambient") is None or ambient_of(report["ambient"]) is not None)
    )
    if not well_formed:
        raise AgentFailed(
            "the kernel's agent sent a check report the server cannot read", "bad-agent-reply"
        )
    return {
        "objects": objects,
        "skipped": skipped,
        "registered": registered,
        "bytes": size,
        "error": error,
        # saved but not test-restored (a timeout, no fork, a fenced effect), or None
        "unverified": unverified_of(unverified),
        # what of the process state a pause carries, and what cannot travel; None when the
        # setting is off
        "ambient": ambient_of(report.get("ambient")),
    }


def check_offer(offer: Any) -> RebuildOffer | None:
    """A ``rebuild`` plan from the agent, trimmed, or None when it is not one: the server keeps
    and shows it, so only the fields of DESIGN §12 (plus ``unbuildable``, ``text``,
    ``problem``) pass."""
    if not isinstance(offer, dict):
        return None
    names, cells = offer.get("names"), offer.get("cells")
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        return None
    if not isinstance(cells, list) or not all(
        isinstance(c, dict)
        and _count(c.get("execution_count"))
        and _number(c.get("seconds"))
        and isinstance(c.get("code", ""), str)
        for c in cells
    ):
        return None
    unbuildable = offer.get("unbuildable", [])
    if not (_number(offer.get("seconds")) and pairs(unbuildable, "reason")):
        return None
    if not (_text(offer.get("text")) and _text(offer.get("problem"))):
        return None
    return {
        "names": names,
        "cells": [
            {
                "execution_count": c.get("execution_count"),
                "seconds": c.get("seconds"),
                "code": c.get("code", "")[:MAX_CODE],
            }
            for c in cells
        ],
        "seconds": offer.get("seconds"),
        "unbuildable": [{"name": u["name"], "reason": u["reason"]} for u in unbuildable],
        "text": offer.get("text"),
        "problem": offer.get("problem"),
    }


def read_result(result: Any) -> tuple[RebuildOffer | None, RebuildOffer]:
    """(what is still to rebuild, the plan that ran) of a rebuild result from the kernel."""
    if not isinstance(result, dict):
        result = {}
    offer = check_offer(result.get("offer")) if result.get("offer") else None
    plan = check_offer(result.get("plan"))
    if plan is None or (result.get("offer") and offer is None):
        raise GpuPauseError(
            "the kernel's agent sent a rebuild result the server cannot read", "bad-agent-reply"
        )
    return offer, plan


def _device_targets(devices) -> bool:
    """``{"cuda:3": "cuda:0" | "cpu"}``: where each saved device's tensors went."""
    return isinstance(devices, dict) and all(
        isinstance(k, str) and isinstance(v, str) and len(k) < 40 and len(v) < 40
        for k, v in devices.items()
    )


def check_ambient(raw: Any) -> AmbientRestored | None:
    """The restore report's ``ambient`` ({"restored", "rerun", "not_restored", "text"}),
    trimmed; None when it is not one."""
    if not isinstance(raw, dict):
        return None
    restored, rerun, text = raw.get("restored"), raw.get("rerun"), raw.get("text")
    if not (_names(restored) and _names(rerun)):
        return None
    if not (pairs(raw.get("not_restored"), "reason") and _text(text)):
        return None
    if not _number(raw.get("seconds")):
        return None
    return {
        "restored": [n[:200] for n in restored],
        "rerun": [n[:200] for n in rerun],
        "not_restored": [
            {"name": x["name"][:200], "reason": x["reason"][:500]} for x in raw["not_restored"]
        ],
        "text": text[:500] if text else None,
        "seconds": raw.get("seconds"),  # what restoring it cost in the kernel
    }


def check_restore_report(report: dict[str, Any]) -> RestoreReply:
    """The agent's restore report, if it has the shape the session and the UI rely on."""

    def names(items) -> bool:
        return isinstance(items, list) and all(isinstance(x, str) for x in items)

    def fallbacks(items) -> bool:
        return isinstance(items, list) and all(
            isinstance(x, dict)
            and isinstance(x.get("name"), str)
            and isinstance(x.get("checkpoint_id"), str)
            and isinstance(x.get("older_seconds"), (int, float, type(None)))
            for x in items
        )

    if "rebuild" in report and report["rebuild"] is not None:
        report["rebuild"] = check_offer(report["rebuild"])
        if report["rebuild"] is None:
            raise AgentFailed(
                "the kernel's agent sent a rebuild plan the server cannot read", "bad-agent-reply"
            )
    if report.get("ambient") is not None:
        report["ambient"] = check_ambient(report["ambient"])
        if report["ambient"] is None:
            raise AgentFailed(
                "the kernel's agent sent an ambient state report the server cannot read",
                "bad-agent-reply",
            )
    if not (
        fallbacks(report.get("fallback", []))
        and names(report.get("restored"))
        and names(report.get("registered"))
        and pairs(report.get("failed"), "reason")
        and pairs(report.get("skipped"), "reason")
        and _device_targets(report.get("devices", {}))
    ):
        raise AgentFailed(
            "the kernel's agent sent a restore report the server cannot read", "bad-agent-reply"
        )
    return cast(RestoreReply, report)
