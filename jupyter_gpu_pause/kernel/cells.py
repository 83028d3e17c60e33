"""The cell log: what each cell a person ran read and wrote, so a lost variable can be rebuilt.

A checkpoint cannot hold everything (a generator, an open connection, an object that failed to
restore). What can bring such a name back is the code that made it, so the kernel keeps, per
executed cell, its code, its run time and the names it read and wrote. The names come from the
cell's syntax tree, after IPython's transforms (``%magic`` and ``!cmd`` become calls), once per
cell: nothing traces the lines a cell runs, so recording costs a parse, not a slowdown.

What the syntax shows, and therefore the limits of a plan built on it:

- ``writes``: every module-level binding (assignment targets, ``for``/``with``/``except``
  targets, walrus, ``import a.b`` binds ``a``, ``def``/``class`` names, ``del x``, match
  captures, names a nested function declares ``global``) and every mutation of a name through
  assignment syntax: ``x[i] = …``, ``x.attr = …``, ``x += …``, ``del x[i]``, and
  ``next(x)`` (it advances an iterator or generator). A star import
  writes the public names of the module as it was just after the cell ran.
- Not writes: method calls (``x.append(1)``, ``model.fit()``), ``setattr``, ``globals()[…]``,
  ``exec``, and a function that assigns a global when a *later* cell calls it (the write is
  charged to the cell that defined it). A plan can miss such a change; the re-run then works
  from the value as the syntax says it was.
- ``reads``: every name the cell loads from the module namespace: at top level, and the
  globals of its nested functions, lambdas, comprehensions and class bodies (a function defined
  in the cell reads them when called), but not their parameters or locals. Builtins count (a
  cell may have rebound ``list``). A name the cell binds at top level, outside any ``if``, loop
  or ``try``, before a statement loads it is not a read (``x = 2; y = x``); any other load is:
  a superset. A larger set never makes a plan wrong; it can make it longer, or make a cell
  unusable when one of its extra names cannot be found.
- A cell that does not parse (top-level ``await`` included), or uses a magic that can change
  any name (``%run``, ``%store``, ``%reset``…), has ``analysed=False``: its writes are unknown,
  so it may have changed any name.
- A cell whose magic runs code in the live namespace (``%time``, ``%%capture``, ``%timeit``…)
  is analysed through that code but ``blocked``: re-running it would reach the restored objects.

Memory is bounded (kernels live for days): at most ``MAX_CELLS`` cells and ``MAX_TOTAL_CHARS`` of
code, the oldest forgotten first; a cell longer than ``MAX_CELL_CHARS`` is analysed in full but
only its start is kept (``kept=False``), so it can never be re-run.

Cells are kept in run order, which is the truth; ``n`` is the execution count the notebook
showed (it restarts at 1 in a resumed kernel), ``session`` counts the kernels the log has lived
in, and ``seq`` is a position-independent id a plan uses to find a cell again.
"""

from __future__ import annotations

import ast
import sys
import time

from .cellsyntax import analyse, marked_no_rerun

MAX_CELLS = 2000
MAX_CELL_CHARS = 64 * 1024
MAX_TOTAL_CHARS = 8 * 1024 * 1024
VERSION = 1
NO_RERUN_TAG = "gp-no-rerun"  # a notebook cell tag: never re-run this cell (like the comment)

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "n": (int, type(None)),
    "code": str,
    "seconds": (int, float, type(None)),
    "reads": list,
    "writes": list,
    "cell_id": (str, type(None)),
    "no_rerun": bool,
    "ok": bool,
    "analysed": bool,
}


def _star_names(module: str) -> list[str] | None:
    """The names ``from module import *`` bound, read from the imported module; None if gone."""
    mod = sys.modules.get(module)
    if mod is None:
        return None
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in vars(mod) if not n.startswith("_")]
    return [str(n) for n in names]


def record(
    code: str, transformed: str | None, n: int | None, seconds: float | None, ok: bool
) -> dict:
    """One log entry for a cell that ran (or failed before running when ``transformed`` is None)."""
    names = analyse(transformed) if transformed is not None else analyse("")
    if transformed is None:
        names["analysed"] = False
    for module in names["star"]:
        found = _star_names(module) if ok else None
        if found is None:
            names["analysed"] = False
        else:
            names["writes"] = sorted(set(names["writes"]).union(found))
    kept = len(code) <= MAX_CELL_CHARS
    return {
        "n": n,
        "code": code if kept else code[:MAX_CELL_CHARS],
        "seconds": seconds,
        "reads": names["reads"],
        "writes": names["writes"],
        "deletes": names["deletes"],
        "cell_id": None,
        "no_rerun": marked_no_rerun(code),
        "ok": ok,
        "ran": transformed is not None,
        "analysed": names["analysed"],
        "blocked": names["blocked"],
        "kept": kept,
    }


class CellLog:
    """The record of the cells a person ran in this kernel (and, after ``adopt``, before it).

    ``cells`` is in run order; each is the dict ``record`` makes plus ``seq`` (unique in this
    log, never reused) and ``session`` (0 for the first kernel, one more per resume).
    """

    def __init__(self, max_cells: int = MAX_CELLS, max_total_chars: int = MAX_TOTAL_CHARS):
        self.cells: list[dict] = []
        self.forgotten = 0
        self.session = 0
        self.max_cells = max_cells
        self.max_total_chars = max_total_chars
        self._next_seq = 0
        self._chars = 0
        self._pending: list[tuple[float, object]] = []
        self._shell = None

    def append(self, cell: dict) -> dict:
        """Add a cell at the end, forgetting the oldest ones past the bounds."""
        cell = {**cell, "seq": self._next_seq, "session": self.session}
        self._next_seq += 1
        self.cells.append(cell)
        self._chars += len(cell["code"])
        self._bound()
        return cell

    def _bound(self) -> None:
        while self.cells and (
            len(self.cells) > self.max_cells or self._chars > self.max_total_chars
        ):
            self._chars -= len(self.cells.pop(0)["code"])
            self.forgotten += 1

    def position(self, seq: int) -> int | None:
        """The index in ``cells`` of the cell with ``seq``; None once it is forgotten."""
        for i in range(len(self.cells) - 1, -1, -1):
            if self.cells[i]["seq"] == seq:
                return i
        return None

    def adopt(self, older: CellLog) -> None:
        """Put the cells of the kernel before a resume ahead of this kernel's own.

        This kernel's cells become one session newer than the older log's and get ``seq``
        values after its, so a plan made on the joined log finds every cell again.
        """
        own = self.cells
        self.session = older.session + 1
        self._next_seq = older._next_seq
        self.cells = [dict(c) for c in older.cells]
        self.forgotten += older.forgotten
        self._chars = sum(len(c["code"]) for c in self.cells)
        for cell in own:
            self.append({k: v for k, v in cell.items() if k not in ("seq", "session")})

    def to_json(self) -> dict:
        return {
            "version": VERSION,
            "session": self.session,
            "next_seq": self._next_seq,
            "forgotten": self.forgotten,
            "cells": [dict(c) for c in self.cells],
        }

    @classmethod
    def from_json(cls, doc: object) -> CellLog:
        """The log ``to_json`` wrote; ValueError naming what is wrong with any other document."""
        if not isinstance(doc, dict):
            raise ValueError("cell log: expected an object")
        if doc.get("version") != VERSION:
            raise ValueError(f"cell log: version {doc.get('version')!r} is not {VERSION}")
        cells = doc.get("cells")
        if not isinstance(cells, list):
            raise ValueError("cell log: 'cells' must be a list")
        log = cls()
        for key in ("session", "next_seq", "forgotten"):
            value = doc.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"cell log: {key!r} must be a count, not {value!r}")
        log.session, log.forgotten = doc.get("session", 0), doc.get("forgotten", 0)
        seqs = set()
        for i, cell in enumerate(cells):
            log.cells.append(_checked(i, cell))
            seqs.add(log.cells[-1]["seq"])
        if len(seqs) != len(cells):
            raise ValueError("cell log: two cells share a 'seq'")
        log._next_seq = max([doc.get("next_seq", 0), *(s + 1 for s in seqs)])
        log._chars = sum(len(c["code"]) for c in log.cells)
        log._bound()
        return log

    def _pre_run_cell(self, info) -> None:
        self._pending.append((time.perf_counter(), info))

    def _post_run_cell(self, result) -> None:
        info = result.info
        raw = getattr(info, "raw_cell", None) or ""
        if not raw.strip():  # IPython skips pre_run_cell for a blank cell, not post_run_cell
            return
        seconds = None
        for i in range(len(self._pending) - 1, -1, -1):
            if self._pending[i][1] is info:
                seconds = time.perf_counter() - self._pending.pop(i)[0]
                break
        ran = result.error_before_exec is None
        transformed = _transformed(self._shell, info) if ran else None
        cell = record(raw, transformed, result.execution_count, seconds, result.success)
        cell["cell_id"] = cell_id(self._shell, info)
        last = self.cells[-1] if self.cells else None
        if seconds is None and last and last["n"] == cell["n"] and last["code"] == cell["code"]:
            last.update(cell)  # the cell that installed the log, back-filled already
            return
        self.append(cell)


def _transformed(shell, info) -> str | None:
    if getattr(info, "transformed_cell", None):
        return info.transformed_cell
    try:
        return shell.transform_cell(info.raw_cell)
    except Exception:
        return None


def cell_id(shell, info) -> str | None:
    """JupyterLab's ``cellId`` of the request that ran the cell; None outside a kernel."""
    cell_id = getattr(info, "cell_id", None)
    if cell_id is None:
        try:
            cell_id = shell.kernel.get_parent()["metadata"].get("cellId")
        except Exception:
            return None
    return str(cell_id) if cell_id is not None else None


def _checked(i: int, cell: object) -> dict:
    if not isinstance(cell, dict):
        raise ValueError(f"cell log: cell {i} is not an object")
    for key, kind in _FIELDS.items():
        if key not in cell:
            raise ValueError(f"cell log: cell {i} has no {key!r}")
        if not isinstance(cell[key], kind) or (kind is not bool and isinstance(cell[key], bool)):
            raise ValueError(f"cell log: cell {i} has a bad {key!r}: {cell[key]!r}")
    for key in ("reads", "writes", "deletes"):
        if not all(isinstance(name, str) for name in cell.get(key, [])):
            raise ValueError(f"cell log: cell {i}: {key!r} must be a list of names")
    seq = cell.get("seq", i)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"cell log: cell {i} has a bad 'seq': {seq!r}")
    blocked = cell.get("blocked")
    if blocked is not None and not isinstance(blocked, str):
        raise ValueError(f"cell log: cell {i} has a bad 'blocked': {blocked!r}")
    session = cell.get("session", 0)
    if not isinstance(session, int) or isinstance(session, bool):
        raise ValueError(f"cell log: cell {i} has a bad 'session': {session!r}")
    return {
        **cell,
        "deletes": list(cell.get("deletes", [])),
        "ran": bool(cell.get("ran", True)),
        "blocked": blocked,
        "kept": bool(cell.get("kept", True)),
        "seq": seq,
        "session": session,
    }


_ATTR = "_gpu_pause_cell_log"


def install(shell) -> CellLog:
    """The shell's cell log, made and hooked on the first call (later calls return it).

    IPython fires neither hook for ``silent`` executions, which is how the server's own agent
    requests run: they never enter the log. Cells already in the history are back-filled with
    an unknown run time.
    """
    log = getattr(shell, _ATTR, None)
    if log is not None:
        return log
    log = CellLog()
    log._shell = shell
    _backfill(log, shell)
    shell.events.register("pre_run_cell", log._pre_run_cell)
    shell.events.register("post_run_cell", log._post_run_cell)
    setattr(shell, _ATTR, log)
    return log


def uninstall(shell) -> None:
    """Stop recording into the shell's log (the log itself is left as it is)."""
    log = getattr(shell, _ATTR, None)
    if log is None:
        return
    shell.events.unregister("pre_run_cell", log._pre_run_cell)
    shell.events.unregister("post_run_cell", log._post_run_cell)
    delattr(shell, _ATTR)


def _backfill(log: CellLog, shell) -> None:
    history = getattr(shell, "history_manager", None)
    if history is None:
        return
    raw = list(history.input_hist_raw)
    parsed = list(history.input_hist_parsed)
    failed = getattr(history, "exceptions", {}) or {}
    for n in range(1, len(raw)):
        code = raw[n]
        if not code.strip():
            continue
        transformed = parsed[n] if n < len(parsed) else None
        try:
            ast.parse(transformed or "")
        except (SyntaxError, ValueError):
            transformed = None
        log.append(record(code, transformed, n, None, n not in failed))
