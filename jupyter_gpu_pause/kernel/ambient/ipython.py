"""IPython's own ambient state: loaded extensions, the ``%matplotlib`` backend, ``%config`` and
``%precision``, the execution counter with ``In``/``Out``/``_``, and display formatters a library
registered (``sympy.init_printing()``).

Formatters are functions a library made on the fly (closures), which cannot be carried as
values: the cells that registered them are re-run instead, in a scratch namespace (as the
rebuild does) that is handed the tools the cell reads (modules, classes, functions, IPython's
objects) as they are and any data it reads as copies, so the restored variables are never
touched. The resume report says which cells were re-run.
"""

from __future__ import annotations

import contextlib
import io
import time

from ..cells import cell_id as _cell_id
from ..deps import loads
from . import COUNTED, LATE, RESUME

DEFAULT_EXTENSIONS = frozenset({"IPython.extensions.storemagic"})  # loaded by every kernel

# Out values are carried up to these sizes once pickled; a larger one is named as not carried
# (the variable it came from travels with the namespace).
MAX_OUT_BYTES = 1 << 20
MAX_OUTS_BYTES = 8 << 20
RERUN_MAX_SECONDS = 5.0  # a formatter cell that took longer is named, not re-run


def _shell():
    from IPython import get_ipython

    return get_ipython()


def _quietly(fn, *args):
    """Run ``fn`` with its prints kept from the notebook (they would land in no cell)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        return fn(*args)


class Extensions:
    """``%load_ext`` since the baseline, loaded again in the same order."""

    label = "extensions"
    order = 60

    def __init__(self):
        self._start: set | None = None

    def baseline(self) -> None:
        shell = _shell()
        if shell is not None and not LATE["late"]:
            self._start = set(shell.extension_manager.loaded)

    def capture(self):
        shell = _shell()
        if shell is None:
            return None
        start = DEFAULT_EXTENSIONS if self._start is None else self._start
        added = sorted(set(shell.extension_manager.loaded) - start)
        return added or None

    def restore(self, state):
        shell, bad, loaded = _shell(), [], 0
        for name in state:
            try:
                _quietly(shell.extension_manager.load_extension, name)
                loaded += 1
            except Exception as e:
                bad.append((f"extension {name}", f"did not load: {type(e).__name__}: {e}"))
        label = f"{loaded} extension{'s' if loaded != 1 else ''}"
        return {"not_restored": bad, "restored": loaded > 0, "label": label}


_INLINE = "module://matplotlib_inline.backend_inline"
_GUI_OF = {_INLINE: "inline", "module://ipympl.backend_nbagg": "widget"}


class MatplotlibBackend:
    """``%matplotlib``: the backend, where it is not the one the kernel starts with. Set before
    ``rcParams`` (``order``): choosing a backend may change them."""

    label = "plotting settings"
    order = 40

    def capture(self):
        import os
        import sys

        mpl = sys.modules.get("matplotlib")
        if mpl is None:
            return None
        backend = dict.get(mpl.rcParams, "backend")  # never resolves the automatic choice
        if not isinstance(backend, str) or backend == os.environ.get("MPLBACKEND"):
            return None
        return backend

    def restore(self, state):
        gui = _GUI_OF.get(state, state.lower().removeprefix("module://"))
        try:
            _quietly(_shell().enable_matplotlib, gui)
        except Exception as e:
            return {
                "restored": False,
                "not_restored": [(f"%matplotlib {gui}", f"{type(e).__name__}: {e}")],
            }
        return None


def _literal(v, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if depth < 3 and isinstance(v, (list, tuple, set, frozenset)):
        return all(_literal(x, depth + 1) for x in v)
    if depth < 3 and isinstance(v, dict):
        return all(_literal(k, depth + 1) and _literal(x, depth + 1) for k, x in v.items())
    return False


def _configurables(shell) -> list:
    """What ``%config`` reaches, and the display formatters (``%precision`` sets one)."""
    found = [
        *shell.configurables,
        shell.display_formatter,
        *shell.display_formatter.formatters.values(),
    ]
    return list({id(c): c for c in found}.values())


_CONFIG_TRAITS: dict[type, list[str]] = {}


def _settings(c) -> dict:
    names = _CONFIG_TRAITS.get(type(c))
    if names is None:  # traitlets walks the whole class each time: 0.7 ms a configurable
        names = _CONFIG_TRAITS[type(c)] = c.class_trait_names(config=True)
    out = {}
    for name in names:
        try:
            v = getattr(c, name)
        except Exception:
            continue
        if _literal(v):
            out[name] = v
    return out


class Config:
    """``%config Class.trait = value`` and ``%precision``: configurable settings of IPython
    and its extensions (InlineBackend) changed since the baseline; for a configurable made
    after it (or with no baseline: cells ran before it), those set through the configuration
    (what ``%config`` does) or by ``%precision``, away from their defaults. A value the kernel
    itself gave a configurable is not the user's.

    Restored before matplotlib's ``rcParams`` (``order``): a setting of the inline backend can
    change them, and the notebook's own ``rcParams`` are put back exactly after it."""

    label = "IPython settings"
    order = 45

    def __init__(self):
        self._start: dict[int, dict] = {}

    def baseline(self) -> None:
        shell = _shell()
        if shell is not None and not LATE["late"]:  # late: compared with the defaults
            self._start = {id(c): _settings(c) for c in _configurables(shell)}

    def capture(self):
        shell = _shell()
        if shell is None:
            return None
        changed: dict[str, dict] = {}
        for c in _configurables(shell):
            start = self._start.get(id(c))
            for name, v in _settings(c).items():
                if start is not None:
                    if name in start and start[name] == v:
                        continue
                else:
                    if not _set_by_user(c, name):
                        continue
                    try:
                        if c.trait_defaults(name) == v:
                            continue
                    except Exception:
                        continue
                changed.setdefault(type(c).__name__, {})[name] = v
        return changed or None

    def restore(self, state) -> None:
        from traitlets.config import Config as TraitletsConfig

        shell = _shell()
        cfg = TraitletsConfig({cls: dict(values) for cls, values in state.items()})
        for c in _configurables(shell):
            c.update_config(cfg)  # as %config does; a later configurable reads shell.config


# Traits a magic sets directly rather than through the configuration
_SET_BY_MAGIC = {("PlainTextFormatter", "float_precision")}  # %precision


def _set_by_user(c, name: str) -> bool:
    cls = type(c).__name__
    return name in c.config.get(cls, {}) or (cls, name) in _SET_BY_MAGIC


class History:
    """The execution counter (the next cell is ``[n+1]``, not ``[1]``), ``In``, ``Out``,
    ``_``/``__``/``___`` and ``_N``/``_iN``. An ``Out`` value that is also a variable comes back
    as that very object; another travels as a copy when it pickles small enough."""

    label = "history"
    order = 80

    def __init__(self):
        self.left_out: list[tuple[str, str]] = []

    def capture(self):
        self.left_out = []
        shell = _shell()
        if shell is None or shell.execution_count <= 1:
            return None
        from ..deps import cloudpickle

        hm = shell.history_manager
        names = {
            id(v): k
            for k, v in shell.user_ns.items()
            if isinstance(k, str) and not k.startswith("_") and k not in ("In", "Out")
        }
        outs: dict[int, tuple[str, str | bytes]] = {}  # n -> ("name", name) or ("value", pickle)
        total, too_big = 0, []
        for n, value in list(hm.output_hist.items()):
            if id(value) in names:
                outs[n] = ("name", names[id(value)])
                continue
            room = min(MAX_OUT_BYTES, MAX_OUTS_BYTES - total)
            try:
                data = _bounded_dumps(cloudpickle, value, room)
            except _TooBig:
                too_big.append((n, f"more than the {room} bytes an output may take"))
                continue
            except Exception as e:
                too_big.append((n, f"cannot be saved: {type(e).__name__}"))
                continue
            total += len(data)
            outs[n] = ("value", data)
        self.left_out = [(f"Out[{n}]", why) for n, why in too_big]
        dh = shell.displayhook
        unders = [
            next((n for n, v in hm.output_hist.items() if v is u), None)
            for u in (dh._, dh.__, dh.___)
        ]
        return {
            "count": shell.execution_count,
            "in": list(hm.input_hist_parsed),
            "raw": list(hm.input_hist_raw),
            "out": outs,
            "unders": unders,
            "lost": too_big,
        }

    def restore(self, state):

        shell = _shell()
        if shell.execution_count > 1:  # restored into a kernel that ran cells (into_kernel)
            return {
                "restored": False,
                "not_restored": [
                    (
                        "history",
                        "this kernel ran cells of its own: its execution count and In/Out are kept",
                    )
                ],
            }
        hm = shell.history_manager
        hm.input_hist_parsed[:] = state["in"]
        hm.input_hist_raw[:] = state["raw"]
        shell.execution_count = state["count"]
        setattr(shell, COUNTED, state["count"] - 1)
        hidden = {}
        for n, code in enumerate(state["in"]):
            if n:
                hidden[f"_i{n}"] = code
        tail = state["in"][-3:][::-1] + ["", "", ""]
        hidden.update({"_i": tail[0], "_ii": tail[1], "_iii": tail[2]})
        lost = [(f"Out[{n}]", why) for n, why in state["lost"]]
        for n, (kind, data) in state["out"].items():
            try:
                value = shell.user_ns[data] if kind == "name" else loads(data)
            except Exception as e:
                lost.append((f"Out[{n}]", f"{type(e).__name__}: {e}"))
                continue
            hm.output_hist[n] = value
            hidden[f"_{n}"] = value
        dh = shell.displayhook
        values = [hm.output_hist.get(n, "") if n is not None else "" for n in state["unders"]]
        dh._, dh.__, dh.___ = values
        hidden.update({"_": values[0], "__": values[1], "___": values[2]})
        shell.push(hidden, interactive=False)
        return {"not_restored": lost}


class _TooBig(Exception):
    pass


class _Bounded(io.BytesIO):
    """A pickle's output that stops it once it passes ``limit`` bytes: an output of 1 GB is
    never pickled whole only to be found too big."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def write(self, b) -> int:
        if self.tell() + memoryview(b).nbytes > self.limit:
            raise _TooBig
        return super().write(b)


def _bounded_dumps(cloudpickle, value, limit: int) -> bytes:
    out = _Bounded(limit)
    cloudpickle.Pickler(out).dump(value)
    return out.getvalue()


# What a formatter cell may be handed as it is: the tools it registers with (modules, classes,
# functions, IPython's own objects) and values that cannot change. Any other value it reads
# is handed as a copy, so the re-run cannot change a restored variable.
_LENT_ROOTS = ("IPython", "ipykernel", "traitlets")


def _lend(scratch: dict, code: str, user_ns: dict) -> None:
    """Put into ``scratch`` the names ``code`` reads from the notebook (``cellsyntax``)."""
    import copy
    import types

    from ..cellsyntax import analyse

    shared = (
        types.ModuleType,
        type,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        int,
        float,
        complex,
        str,
        bytes,
        bool,
        type(None),
        frozenset,
    )
    for name in analyse(code)["reads"]:
        if name in scratch or name not in user_ns:
            continue
        value = user_ns[name]
        if isinstance(value, shared) or type(value).__module__.partition(".")[0] in _LENT_ROOTS:
            scratch[name] = value
            continue
        try:
            scratch[name] = copy.deepcopy(value)
        except Exception:  # not copyable: the cell meets a NameError, and the report says so
            continue


# Formatters these register by themselves when imported (matplotlib_inline's figure printer,
# once pyplot is imported): the resumed kernel's imports register them again
_SELF_REGISTERING = ("IPython", "ipykernel", "matplotlib_inline", "matplotlib")


def _registered_before(shell) -> bool:
    """Whether the shell has display formatters a fresh one does not, other than those a
    library registers by itself as it is imported (registered by the user's cells)."""
    from IPython.core.formatters import DisplayFormatter

    fresh = DisplayFormatter().formatters
    for mime, f in shell.display_formatter.formatters.items():
        new = fresh.get(mime)
        if new is None:
            continue
        extra = [f.type_printers[t] for t in set(f.type_printers) - set(new.type_printers)]
        extra += [
            f.deferred_printers[k] for k in set(f.deferred_printers) - set(new.deferred_printers)
        ]
        for printer in extra:
            module = getattr(printer, "__module__", None) or ""
            if module.partition(".")[0] not in _SELF_REGISTERING:
                return True
    return False


def _fingerprint(shell) -> tuple:
    """Changes whenever a formatter is registered, replaced or switched on or off."""
    return tuple(
        (
            mime,
            f.enabled,
            hash(tuple((id(k), id(v)) for k, v in f.type_printers.items())),
            hash(tuple((k, id(v)) for k, v in f.deferred_printers.items())),
        )
        for mime, f in shell.display_formatter.formatters.items()
    )


class Formatters:
    """Display formatters registered by the notebook's cells: each cell that changed them is
    recorded as it runs (a cheap fingerprint before and after it), and re-run at the resume."""

    label = "display formatters"
    order = 90  # after the extensions and settings the cell may rely on

    def __init__(self):
        self._cells: list[dict] = []
        self._before: tuple | None = None
        self._started = 0.0
        self.left_out: list[tuple[str, str]] = []

    def baseline(self) -> None:
        shell = _shell()
        if shell is None:
            return
        shell.events.register("pre_run_cell", self._pre)
        shell.events.register("post_run_cell", self._post)
        self.left_out = []
        if LATE["late"] and _registered_before(shell):
            self.left_out = [
                (
                    "display formatters",
                    "registered by a cell that ran before the kernel was watched: run that "
                    "cell again after the resume",
                )
            ]

    def _pre(self, info) -> None:
        self._before = _fingerprint(_shell())
        self._started = time.perf_counter()

    def _post(self, result) -> None:
        if self._before is None or not result.success:
            return
        if _fingerprint(_shell()) != self._before:
            self._cells.append(
                {
                    "n": result.execution_count,
                    "code": result.info.raw_cell,
                    "seconds": time.perf_counter() - self._started,
                    "cell_id": _cell_id(_shell(), result.info),
                }
            )
        self._before = None

    def capture(self):
        return list(self._cells) or None

    def restore(self, state):
        from ..cellsyntax import marked_no_rerun

        shell = _shell()
        scratch = {
            "__name__": "__main__",
            "__builtins__": shell.user_ns.get("__builtins__"),
            "get_ipython": shell.get_ipython,
        }
        rerun, bad = [], []
        no_rerun_ids = set(RESUME.get("no_rerun_ids") or ())
        for cell in state:
            where = f"cell [{cell['n']}]"
            if marked_no_rerun(cell["code"]) or cell.get("cell_id") in no_rerun_ids:
                bad.append((f"display formatters of {where}", "the cell is marked no-rerun"))
                continue
            if (cell.get("seconds") or 0) > RERUN_MAX_SECONDS:
                bad.append(
                    (
                        f"display formatters of {where}",
                        f"the cell took {cell['seconds']:.0f} s: run it again yourself",
                    )
                )
                continue
            try:
                code = shell.transform_cell(cell["code"])
                _lend(scratch, code, shell.user_ns)
                _quietly(exec, compile(code, f"<gpu-pause re-run {where}>", "exec"), scratch)
            except BaseException as e:
                bad.append(
                    (
                        f"display formatters of {where}",
                        f"its re-run failed: {type(e).__name__}: {e}",
                    )
                )
                continue
            rerun.append(where)
        self._cells = list(state)  # carried again at the next pause
        return {"rerun": rerun, "not_restored": bad, "restored": bool(rerun)}
