"""The rebuild as a resume offers it and as the user runs it: glue between the cell log, the
restore report and ``rebuild.py``.

After a restore, ``offer`` names what the checkpoint did not bring back (skipped at the pause,
or failed now) and, from the cell log the checkpoint carried, the cells that would make each of
those names again: the ``rebuild`` of the restore report. ``run`` re-plans against the namespace
as it is when the user asks (a cell run since may have made a name again, or changed one a plan
cell reads) and runs the plan where it cannot touch what was restored (``rebuild.run_plan``).

A plan asks before it runs (``needs_confirm``) when a restored value it reads would have to be
shared rather than copied, or when copying what it reads would cost more than
``COPY_ASK_BYTES``: the user says yes with ``allow_shared`` / ``confirm``.
"""

from __future__ import annotations

import json

from ..store.schema import is_variable_name
from .cells import CellLog, install
from .rebuild import _data_bytes, make_plan, plan_text, run_plan

COPY_ASK_BYTES = 512 * 1024 * 1024  # copying more than this of the restored values asks first
_STATE = "_gpu_pause_rebuild"  # the shell attribute holding what is still to rebuild


def load_log(doc: dict, blobs: dict, bad: dict) -> tuple[CellLog | None, str | None]:
    """The cell log a checkpoint carries, or None and why not."""
    meta = doc.get("cells")
    if not meta:
        return None, "the checkpoint has no cell log (it was written before the log existed)"
    if meta["blob"] in bad:
        return None, f"the checkpoint's cell log failed its check: {bad[meta['blob']]}"
    try:
        return CellLog.from_json(json.loads(bytes(blobs[meta["blob"]]))), None
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        return None, f"the checkpoint's cell log cannot be read: {e}"


def log_bytes(shell) -> bytes:
    """The kernel's cell log as the checkpoint stores it."""
    return json.dumps(install(shell).to_json(), separators=(",", ":")).encode()


def lost_names(report: dict, user_ns: dict) -> list[str]:
    """Variables the checkpoint did not bring back: skipped at the pause or failed now."""
    out = [x["name"] for x in [*report["skipped"], *report["failed"]]]
    return [n for n in dict.fromkeys(out) if is_variable_name(n) and n not in user_ns]


def _public(plan: dict, problem: str | None = None) -> dict:
    """The plan as the report, the event and the UI show it (DESIGN §12)."""
    return {
        "names": list(plan["names"]),
        "cells": [
            {"execution_count": c["n"], "seconds": c["seconds"], "code": c["code"]}
            for c in plan["cells"]
        ],
        "seconds": plan["seconds"],
        "unbuildable": list(plan["unbuildable"]),
        "text": plan_text(plan) if plan["names"] else None,
        "problem": problem,
    }


def offer(shell, missing: list[str], older: CellLog | None, problem, no_rerun_ids):
    """Install this kernel's log (joined to the checkpoint's) and plan the ``missing`` names.

    Returns the report's ``rebuild`` (None when nothing is missing) and keeps what is still to
    rebuild on the shell for ``run``.
    """
    log = install(shell)
    if older is not None:
        log.adopt(older)
    ids = set(no_rerun_ids or ())
    setattr(shell, _STATE, {"missing": list(missing), "no_rerun_ids": ids, "problem": problem})
    return offer_now(shell)


def _plan(shell, state: dict, names: list[str]) -> dict:
    """The plan for ``names`` against the namespace as it is now; none when the checkpoint's
    log could not be read (``state["problem"]`` then says why, for each name)."""
    if state["problem"] is not None:
        unbuildable = [{"name": n, "reason": state["problem"]} for n in names]
        return {"names": [], "cells": [], "seconds": 0, "unbuildable": unbuildable}
    log = install(shell)
    return make_plan(log, names, set(shell.user_ns), state["no_rerun_ids"])


def pending(shell) -> dict:
    """What is still to rebuild in this kernel: ``{"missing", "no_rerun_ids", "problem"}``."""
    return getattr(shell, _STATE, None) or {"missing": [], "no_rerun_ids": set(), "problem": None}


def run(shell, names=None, confirm: bool = False, progress=None, no_rerun_ids=None) -> dict:
    """Rebuild ``names`` (default: all still missing) now; the result, with the new offer.

    A name the user has made again since the resume is left alone (``already``). Nothing is
    written back unless every plan cell ran.
    """
    state = pending(shell)
    if no_rerun_ids is not None:
        state["no_rerun_ids"] = set(no_rerun_ids)
    missing = [n for n in state["missing"] if n not in shell.user_ns]
    wanted = missing if not names else [n for n in names if n in state["missing"]]
    result = {
        "ok": False,
        "rebuilt": [],
        "already": [n for n in (names or state["missing"]) if n in shell.user_ns],
        "unknown": [n for n in (names or []) if n not in state["missing"]],
        "failed": None,
        "needs_confirm": False,
        "shared": [],
        "copy_bytes": 0,
        "seconds": 0.0,
    }
    log = install(shell)
    wanted = [n for n in wanted if n not in shell.user_ns]
    plan = _plan(shell, state, wanted)
    result["plan"] = _public(plan, state["problem"])
    if plan["names"]:
        reads = {n for c in plan["cells"] for n in c["restored"] if n in shell.user_ns}
        estimate = sum(_data_bytes(shell.user_ns[n], set()) for n in sorted(reads))
        if estimate > COPY_ASK_BYTES and not confirm:
            result.update(needs_confirm=True, copy_bytes=estimate)
            result["shared"] = [
                {"name": n, "reason": f"copying what the cells read takes about {estimate} bytes"}
                for n in sorted(reads)
            ]
        else:
            ran = run_plan(plan, log, shell.user_ns, shell, progress, allow_shared=confirm)
            result.update({k: ran[k] for k in ("ok", "rebuilt", "shared", "seconds")})
            result["copy_bytes"] = ran.get("copy_bytes", 0)
            result["needs_confirm"] = bool(ran.get("needs_confirm"))
            if ran.get("failed"):
                f = ran["failed"]
                cell = log.cells[f["index"]] if f["index"] < len(log.cells) else {}
                result["failed"] = {
                    "execution_count": f["n"],
                    "code": _first_line(cell.get("code", "")),
                    "error": f["error"],
                }
    elif not wanted:
        result["ok"] = True  # nothing (left) to rebuild
    state["missing"] = [n for n in state["missing"] if n not in shell.user_ns]
    setattr(shell, _STATE, state)
    result["offer"] = offer_now(shell)
    return result


def offer_now(shell) -> dict | None:
    """The plan for what is still missing, as the report shows it (None: nothing missing)."""
    state = pending(shell)
    missing = [n for n in state["missing"] if n not in shell.user_ns]
    if not missing:
        return None
    return _public(_plan(shell, state, missing), state["problem"])


def _first_line(code: str) -> str:
    first = next((line for line in code.splitlines() if line.strip()), "")
    return first if len(first) <= 80 else first[:79] + "…"


def result_text(result: dict) -> str:
    """One paragraph a person reads after ``gp.rebuild()``."""
    if result["needs_confirm"]:
        why = "; ".join(f"`{s['name']}`: {s['reason']}" for s in result["shared"])
        return (
            f"Nothing was re-run: {why}. Re-running could change restored objects; "
            "call gp.rebuild(confirm=True) to re-run anyway"
        )
    if result["failed"]:
        f = result["failed"]
        where = f"[{f['execution_count']}]" if f["execution_count"] is not None else "a cell"
        return f"Rebuild stopped at cell {where} ({f['code']}): {f['error']}. Nothing was changed"
    parts = []
    if result["rebuilt"]:
        parts.append(f"Rebuilt {', '.join(result['rebuilt'])} in {result['seconds']:.2f} s")
    if result["already"]:
        parts.append(f"already defined, left alone: {', '.join(result['already'])}")
    for u in result["plan"]["unbuildable"]:
        parts.append(f"cannot rebuild {u['name']}: {u['reason']}")
    return "; ".join(parts) if parts else "Nothing to rebuild"
