"""Rebuild the variables a resume could not bring back by re-running the cells that made them.

``make_plan`` reads the cell log (``cells.py``) and, per lost name, finds the cells to re-run;
``run_plan`` runs them where they cannot touch what was restored: in a scratch namespace, on
deep copies of the restored values they read, writing back only the names being rebuilt. A cell
that makes the lost generator ``batches`` may also train the restored ``model``; re-running it
must give ``batches`` back without training ``model`` a second time.

The dependency rule. A cell needs each name it reads *as it was when the cell ran*. When the
name is restored and no cell from that point on may have written it, the restored value is that
value. Otherwise only the last cell before that point that wrote the name made it, so that cell
must be re-run, and it needs its own reads in turn. A lost name needs the last cell that wrote
it. The plan is the union of these cells, in log order.

Why no smaller plan exists (taking the syntax the log recorded as the truth): every cell in the
plan is the only source of a value some plan cell, or a lost name, needs. The restored value is
used wherever the rule allows it, so each plan cell was reached through a value the restored
namespace does not hold (the name is gone, or some later cell may have changed it), and by
construction no other recorded cell made that value. Leaving the cell out leaves that value
unmade.

Limits, on top of what the syntax cannot see (listed in ``cells.py``): a cell that raised,
cannot be analysed, is marked ``# gp: no-rerun`` (or tagged ``gp-no-rerun``), uses a magic that
works on the live namespace, or is too long to keep is never re-run, and neither is anything
that needs it. Functions and classes that were restored are shared, not copied (``deepcopy``
gives them back as they are), so they read the restored globals when a re-run cell calls them.
"""

from __future__ import annotations

import builtins
import copy
import dis
import heapq
import time
import types

from .cells import CellLog

# names IPython provides to every cell without a cell making them
ENVIRONMENT = frozenset(dir(builtins)) | {"get_ipython", "exit", "quit", "__name__", "__doc__"}
_ATOMIC = (int, float, complex, str, bytes, bool, type(None), range, frozenset, type(Ellipsis))


def make_plan(
    log: CellLog,
    missing: list[str],
    present: set[str],
    no_rerun_ids: set[str] | frozenset[str] = frozenset(),
) -> dict:
    """The cells to re-run, in log order, to rebuild ``missing`` from the ``present`` names.

    Returns ``{"names", "cells", "seconds", "unbuildable"}``: ``names`` are the missing names
    the plan makes; each of ``cells`` is ``{"n", "seconds", "code" (its first line), "index",
    "seq", "session", "restored"}`` where ``restored`` lists the names the cell reads from the
    restored namespace; ``seconds`` is their total recorded run time (None when a cell's is
    unknown); ``unbuildable`` is ``[{"name", "reason"}]``.
    """
    graph = _Graph(log, set(present), set(no_rerun_ids))
    roots: dict[str, int] = {}
    unbuildable = []
    for name in dict.fromkeys(missing):
        root, reason = graph.root(name)
        if root is not None:
            roots[name] = root
        else:
            unbuildable.append({"name": name, "reason": reason})
    graph.explore(roots.values())
    chosen: set[int] = set()
    names = []
    for name, root in roots.items():
        if (failure := graph.failure(root)) is not None:
            unbuildable.append({"name": name, "reason": failure})
            continue
        names.append(name)
        chosen |= graph.closure(root)
    asked = list(dict.fromkeys(missing))
    unbuildable.sort(key=lambda u: asked.index(u["name"]))
    order = sorted(chosen)
    cells = [_plan_cell(log.cells[i], i, graph.restored[i]) for i in order]
    times = [c["seconds"] for c in cells]
    return {
        "names": names,
        "cells": cells,
        "seconds": None if None in times else round(sum(times), 6),
        "unbuildable": unbuildable,
    }


def _label(cell: dict) -> str:
    return f"[{cell['n']}]" if cell.get("n") is not None else f"#{cell['seq']}"


def _plan_cell(cell: dict, index: int, restored: set[str]) -> dict:
    first = next((line for line in cell["code"].splitlines() if line.strip()), "")
    return {
        "n": cell["n"],
        "seconds": cell["seconds"],
        "code": first if len(first) <= 80 else first[:79] + "…",
        "index": index,
        "seq": cell["seq"],
        "session": cell.get("session", 0),
        "restored": sorted(restored),
    }


class _Graph:
    """Which cell each (name, position) needs, explored from the lost names backwards."""

    def __init__(self, log: CellLog, present: set[str], no_rerun_ids: set[str]):
        self.log = log
        self.cells = log.cells
        self.present = present
        self.no_rerun_ids = no_rerun_ids
        self.writers: dict[str, list[int]] = {}
        self.wild: list[int] = []  # cells that ran and whose writes are unknown
        for i, cell in enumerate(self.cells):
            if not cell.get("ran", True):
                continue
            if not cell["analysed"]:
                self.wild.append(i)
            for name in cell["writes"]:
                self.writers.setdefault(name, []).append(i)
        self.deps: dict[int, set[int]] = {}
        self.restored: dict[int, set[str]] = {}
        self.problem: dict[int, str] = {}
        self._failures: dict[int, str | None] = {}

    def last_writer(self, name: str, before: int) -> int | None:
        found = [i for i in self.writers.get(name, ()) if i < before]
        if name not in ENVIRONMENT:
            found += [i for i in self.wild if i < before]
        return max(found, default=None)

    def written_since(self, name: str, start: int) -> int | None:
        later = [i for i in self.writers.get(name, ()) if i >= start]
        if name not in ENVIRONMENT:
            later += [i for i in self.wild if i >= start]
        return min(later, default=None)

    def root(self, name: str) -> tuple[int | None, str]:
        """The cell that last made a lost name, or why there is none."""
        i = self.last_writer(name, len(self.cells))
        if i is None:
            return None, f"no recorded cell makes `{name}`" + self._forgotten()
        if name in self.cells[i].get("deletes", ()):
            return None, f"cell {_label(self.cells[i])} deletes `{name}`"
        return i, ""

    def _forgotten(self) -> str:
        n = self.log.forgotten
        return f" ({n} older cells are no longer in the log)" if n else ""

    def explore(self, roots) -> None:
        """Resolve the reads of every cell reachable from ``roots``, latest first."""
        heap = [-i for i in set(roots)]
        heapq.heapify(heap)
        seen = set(roots)
        while heap:
            i = -heapq.heappop(heap)
            self.deps[i], self.restored[i] = set(), set()
            if (reason := self._unusable(self.cells[i])) is not None:
                self.problem[i] = reason
                continue
            for name in self.cells[i]["reads"]:
                j = self._resolve(i, name)
                if j is not None and j not in seen:
                    seen.add(j)
                    heapq.heappush(heap, -j)

    def _resolve(self, i: int, name: str) -> int | None:
        """The cell ``i`` needs for ``name``; None when it needs none (or cannot be run)."""
        cell = self.cells[i]
        later = self.written_since(name, i)
        if name in self.present and later is None:
            self.restored[i].add(name)
            return None
        j = self.last_writer(name, i)
        if j is not None:
            self.deps[i].add(j)
            return j
        if name in cell["writes"]:  # bound by the cell before its load, or the re-run says so
            return None
        if name in self.present and later is not None:  # present and unchanged returned above
            self.problem.setdefault(
                i,
                f"`{name}` is read by cell {_label(cell)} and changed later by cell "
                f"{_label(self.cells[later])}; no recorded cell makes the value it read",
            )
        elif name not in ENVIRONMENT:
            self.problem.setdefault(
                i,
                f"`{name}` is read by cell {_label(cell)} and no recorded cell makes it"
                + self._forgotten(),
            )
        return None

    def _unusable(self, cell: dict) -> str | None:
        label = _label(cell)
        if cell["no_rerun"] or (cell.get("cell_id") and cell["cell_id"] in self.no_rerun_ids):
            return f"cell {label} is marked gp: no-rerun"
        if not cell["analysed"]:
            return f"cell {label} could not be analysed, so it may have changed any name"
        if not cell["ok"]:
            return f"cell {label} raised an error when it ran, so what it made is unknown"
        if cell.get("blocked"):
            return f"cell {label} {cell['blocked']}"
        if not cell.get("kept", True):
            return f"cell {label} is too long to keep in the log"
        return None

    def failure(self, i: int) -> str | None:
        """Why cell ``i`` cannot be re-run: its own problem or the first of its dependencies'."""
        memo = self._failures
        for k in sorted(self.closure(i)):  # dependencies first: they are earlier in the log
            if k not in memo:
                memo[k] = self.problem.get(k) or next(
                    (memo[d] for d in sorted(self.deps.get(k, ())) if memo.get(d)), None
                )
        return memo[i]

    def closure(self, i: int) -> set[int]:
        out, stack = {i}, [i]
        while stack:
            for d in self.deps.get(stack.pop(), ()):
                if d not in out:
                    out.add(d)
                    stack.append(d)
        return out


def plan_text(plan: dict) -> str:
    """The line the UI shows: "`m`, `w`: re-run cells [3], [5] — 0.2 s"."""
    if not plan["names"]:
        return "nothing to rebuild"
    names = ", ".join(f"`{n}`" for n in plan["names"])
    cells = ", ".join(_label(c) for c in plan["cells"])
    noun = "cell" if len(plan["cells"]) == 1 else "cells"
    took = "run time unknown" if plan["seconds"] is None else f"{plan['seconds']:.1f} s"
    return f"{names}: re-run {noun} {cells} — {took}"


def run_plan(
    plan: dict,
    log: CellLog,
    user_ns: dict,
    shell=None,
    progress=None,
    allow_shared: bool = False,
) -> dict:
    """Run the plan's cells where they cannot reach the restored namespace; write back its names.

    Each restored value a cell reads is deep-copied into a scratch namespace (one memo for all,
    so two names for one object stay one object); modules are shared. A value that cannot be
    copied, or a shared function or class a plan cell may change, is listed in ``shared``
    (``[{"name", "reason"}]``) and nothing runs unless ``allow_shared``: a re-run could change
    the restored object through it.

    Returns ``{"ok": True, "rebuilt", "not_made", "seconds", "copy_seconds", "copy_bytes",
    "shared"}``, or ``{"ok": False, "failed": {"n", "index", "seq", "error"}, "rebuilt": [],
    …}`` when a cell raised (nothing is written back), or ``{"ok": False, "needs_confirm":
    True, "shared", "rebuilt": [], …}``. ``progress(done, total)`` is called after each cell.
    """
    started = time.perf_counter()
    result = {"ok": False, "rebuilt": [], "copy_seconds": 0.0, "copy_bytes": 0, "shared": []}
    steps: list[tuple[dict, int]] = []
    for step in plan["cells"]:
        index = log.position(step["seq"])
        if index is None:
            failed = {**_where(step, step["index"]), "error": "the cell is no longer in the log"}
            return {**result, "failed": failed, "seconds": time.perf_counter() - started}
        steps.append((step, index))
    writes = {n for _, i in steps for n in log.cells[i]["writes"]}
    copier = _Copier(user_ns, writes)
    scratch = _scratch(user_ns, shell)
    for name in sorted({n for c, _ in steps for n in c["restored"]}):
        if name in user_ns:
            scratch[name] = copier.copy(name)
    result.update(copier.stats())
    if copier.shared and not allow_shared:
        return {**result, "needs_confirm": True, "seconds": time.perf_counter() - started}
    changed: set[str] = set()
    for done, (step, index) in enumerate(steps, 1):
        cell = log.cells[index]
        for name in step["restored"]:
            if name in changed and name in user_ns:
                scratch[name] = copier.copy(name, fresh=True)
        try:
            code = shell.transform_cell(cell["code"]) if shell is not None else cell["code"]
            exec(compile(code, f"<rebuild cell {_label(cell)}>", "exec"), scratch)
        except BaseException as e:  # a re-run that stops for any reason stops the plan
            failed = {**_where(cell, index), "error": f"{type(e).__name__}: {e}"}
            return {
                **result,
                **copier.stats(),
                "failed": failed,
                "seconds": time.perf_counter() - started,
            }
        changed.update(cell["writes"])
        if progress is not None:
            progress(done, len(steps))
    rebuilt = [n for n in plan["names"] if n in scratch]
    for name in rebuilt:
        user_ns[name] = _rebind(scratch[name], scratch, user_ns)
    return {
        **result,
        **copier.stats(),
        "ok": True,
        "rebuilt": rebuilt,
        "not_made": [n for n in plan["names"] if n not in scratch],
        "seconds": time.perf_counter() - started,
    }


def _where(cell: dict, index: int) -> dict:
    return {"n": cell["n"], "index": index, "seq": cell["seq"]}


def _scratch(user_ns: dict, shell) -> dict:
    """A namespace with what IPython gives every cell and nothing a cell made."""
    scratch = {
        "__name__": user_ns.get("__name__", "__main__"),
        "__builtins__": user_ns.get("__builtins__", builtins),
    }
    if shell is not None:
        scratch["get_ipython"] = shell.get_ipython
    return scratch


def _rebind(value, scratch: dict, user_ns: dict):
    """A function a re-run defined, looking its globals up in the user's namespace (where it
    now lives) rather than in the scratch one that is about to be dropped."""
    if isinstance(value, types.FunctionType) and value.__globals__ is scratch:
        fn = types.FunctionType(
            value.__code__, user_ns, value.__name__, value.__defaults__, value.__closure__
        )
        fn.__kwdefaults__ = value.__kwdefaults__
        fn.__dict__.update(value.__dict__)
        fn.__qualname__, fn.__doc__ = value.__qualname__, value.__doc__
        fn.__annotations__ = value.__annotations__
        return fn
    return value


class _Copier:
    """Deep copies of restored values, what they cost, and what had to be shared instead."""

    def __init__(self, user_ns: dict, writes: set[str]):
        self.user_ns = user_ns
        self.writes = writes
        self.memo: dict = {}
        self.shared: list[dict] = []
        self.seconds = 0.0
        self.bytes = 0
        self._seen: set[int] = set()

    def copy(self, name: str, fresh: bool = False):
        value = self.user_ns[name]
        if isinstance(value, types.ModuleType):
            return value
        started = time.perf_counter()
        try:
            copied = copy.deepcopy(value, {} if fresh else self.memo)
        except Exception as e:
            if not fresh:
                self.shared.append({"name": name, "reason": f"it cannot be copied ({e})"})
            return value
        finally:
            self.seconds += time.perf_counter() - started
        if copied is value and not fresh and (reason := self._risk(name, value)):
            self.shared.append({"name": name, "reason": reason})
        self.bytes += _data_bytes(value, self._seen)
        return copied

    def _risk(self, name: str, value) -> str | None:
        """Why sharing ``value`` (which ``deepcopy`` gave back as it is) could reach it."""
        if isinstance(value, _ATOMIC) or (
            isinstance(value, tuple) and all(isinstance(v, _ATOMIC) for v in value)
        ):
            return None
        if isinstance(value, types.FunctionType) and _stores_globals(value.__code__):
            return "it is a function that assigns globals of the restored namespace"
        if name in self.writes:
            return "a re-run cell changes it and it cannot be copied"
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            return None
        return "copying it gives back the same object"

    def stats(self) -> dict:
        return {
            "copy_seconds": round(self.seconds, 6),
            "copy_bytes": self.bytes,
            "shared": list(self.shared),
        }


def _stores_globals(code: types.CodeType) -> bool:
    if {"STORE_GLOBAL", "DELETE_GLOBAL"} & {i.opname for i in dis.get_instructions(code)}:
        return True
    return any(isinstance(c, types.CodeType) and _stores_globals(c) for c in code.co_consts)


def _data_bytes(value, seen: set[int], limit: int = 100_000) -> int:
    """A rough size of what copying ``value`` copies: array and tensor data, strings and bytes,
    8 bytes per number and per container slot, through containers and instance attributes;
    other objects count nothing. Each object is counted once across calls (``seen``); the walk
    stops after ``limit`` objects."""
    total, stack, visited = 0, [value], 0
    while stack and visited < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, (str, bytes, bytearray)):
            total += len(obj)
        elif isinstance(obj, (int, float, complex)):
            total += 8
        elif hasattr(obj, "nbytes") and isinstance(getattr(obj, "nbytes", None), int):
            total += obj.nbytes  # numpy arrays (and anything that says the same)
        elif callable(getattr(obj, "element_size", None)) and callable(
            getattr(obj, "nelement", None)
        ):
            total += obj.element_size() * obj.nelement()  # torch tensors
        elif isinstance(obj, dict):
            total += 16 * len(obj)
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            total += 8 * len(obj)
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)):
            stack.extend(vars(obj).values())
    return total
