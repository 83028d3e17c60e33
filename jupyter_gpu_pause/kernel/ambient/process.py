"""The interpreter's own ambient state: Python's ``random``, ``warnings`` filters, the working
folder, the environment variables and import paths the user's cells changed, and what cannot
travel at all (threads, child processes, connections, asyncio tasks, open transactions).

"Changed" is measured against the baseline the agent takes when it first sees the kernel, so
what the server set when it started the kernel (``CUDA_VISIBLE_DEVICES``, ``JPY_SESSION_NAME``)
is never carried, and a resumed kernel's server-given values are never overwritten.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import warnings
from typing import cast

from ..finish import live_children
from . import RANDOM_LAST

# Environment variables the server or the kernel's launcher owns: never carried, whatever a
# cell did to them (a carried CUDA_VISIBLE_DEVICES would override the resume's GPU grant).
SERVER_OWNED = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
SERVER_OWNED_PREFIXES = ("JPY_", "JUPYTER_", "KERNEL_", "NVIDIA_VISIBLE_", "GPU_PAUSE_")


class PythonRandom:
    """``random``'s global generator, exactly (``getstate``/``setstate``), always: whether a
    cell seeded it cannot be told from a baseline that may have been taken after the cell ran
    (a notebook run whole the moment it opened, before the server's first request).

    IPython draws from that generator itself, for the "Tip:" of its banner, at every
    ``kernel_info_request``: each frontend that connects (a browser tab, a resume's server
    connections) would move the notebook's seeded sequence on. From the baseline on, the banner
    leaves the generator as it found it (``_own_banner_draws``), so the notebook's draws depend
    only on its cells."""

    label = "random state"
    order = RANDOM_LAST

    def baseline(self) -> None:
        _own_banner_draws()

    def capture(self):
        return random.getstate()

    def restore(self, state) -> None:
        random.setstate(state)


def _own_banner_draws() -> None:
    """IPython's banner picks its tip with ``random.choice``: leave the generator as it was."""
    try:
        from IPython.core import interactiveshell
    except ImportError:
        return
    pick = getattr(interactiveshell, "pick_tip", None)
    if pick is None or getattr(pick, "_keeps_random", False):
        return

    def pick_tip():
        state = random.getstate()
        try:
            return pick()
        finally:
            random.setstate(state)

    pick_tip._keeps_random = True  # type: ignore[attr-defined]  # a mark on a function object
    interactiveshell.pick_tip = pick_tip


class Interpreter:
    """The interpreter's limits a notebook sets: ``sys.setrecursionlimit`` (a deep recursion
    that worked must not raise RecursionError after the resume) and
    ``sys.set_int_max_str_digits`` (a big integer that printed must print again)."""

    label = "interpreter limits"
    early = True

    def __init__(self):
        self._start: dict = {}

    def baseline(self) -> None:
        self._start = _limits()

    def capture(self):
        now = _limits()
        changed = {k: v for k, v in now.items() if self._start.get(k, v) != v}
        return changed or None

    def restore(self, state) -> None:
        if "recursion" in state:
            sys.setrecursionlimit(state["recursion"])
        if "int_digits" in state and hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(state["int_digits"])  # novm: looked for first


def _limits() -> dict:
    out = {"recursion": sys.getrecursionlimit()}
    if hasattr(sys, "get_int_max_str_digits"):
        out["int_digits"] = sys.get_int_max_str_digits()  # novm: looked for first
    return out


class DecimalContext:
    """``decimal.getcontext()``: the precision, rounding and traps of the notebook's decimal
    arithmetic, where they differ from the defaults."""

    label = "decimal context"
    FIELDS = ("prec", "rounding", "Emin", "Emax", "capitals", "clamp")

    def capture(self):
        decimal = sys.modules.get("decimal")
        if decimal is None:
            return None
        now, default = decimal.getcontext(), decimal.DefaultContext
        state = {k: getattr(now, k) for k in self.FIELDS if getattr(now, k) != getattr(default, k)}
        traps = sorted(t.__name__ for t, on in now.traps.items() if on)
        if traps != sorted(t.__name__ for t, on in default.traps.items() if on):
            state["traps"] = traps
        return state or None

    def restore(self, state) -> None:
        import decimal

        context = decimal.getcontext()
        for k in self.FIELDS:
            if k in state:
                setattr(context, k, state[k])
        if "traps" in state:
            for t in context.traps:
                context.traps[t] = t.__name__ in state["traps"]


class Logging:
    """``logging.basicConfig(level=…)`` and ``logger.setLevel(…)``: the levels the notebook set
    and the handlers it added to the root logger that print to the notebook (its stdout or
    stderr), with their format. A handler writing elsewhere (a file, a server) is named."""

    label = "logging settings"

    def __init__(self):
        self._levels: dict = {}
        self._handlers: set = set()

    def baseline(self) -> None:
        import logging

        self._levels = _logger_levels(logging)
        self._handlers = {id(h) for h in logging.getLogger().handlers}

    def capture(self):
        import logging

        self.left_out = []
        levels = {
            name: level
            for name, level in _logger_levels(logging).items()
            if self._levels.get(name, logging.NOTSET) != level
        }
        handlers = []
        for h in logging.getLogger().handlers:
            if id(h) in self._handlers:
                continue
            stream = getattr(h, "stream", None)
            if type(h) is logging.StreamHandler and stream in (sys.stdout, sys.stderr):
                fmt = h.formatter
                handlers.append(
                    {
                        "stream": "stdout" if stream is sys.stdout else "stderr",
                        "level": h.level,
                        "format": getattr(fmt, "_fmt", None),
                        "datefmt": getattr(fmt, "datefmt", None),
                    }
                )
            else:
                self.left_out.append(
                    (
                        f"logging handler {type(h).__name__}",
                        "a handler that writes elsewhere "
                        "than the notebook is not carried: add it again after the resume",
                    )
                )
        if not levels and not handlers:
            return None
        return {"levels": levels, "handlers": handlers}

    def restore(self, state) -> None:
        import logging

        for name, level in state["levels"].items():
            logging.getLogger(name or None).setLevel(level)
        root = logging.getLogger()
        for spec in state["handlers"]:
            h = logging.StreamHandler(getattr(sys, spec["stream"]))
            h.setLevel(spec["level"])
            h.setFormatter(logging.Formatter(spec["format"], spec["datefmt"]))
            root.addHandler(h)


def _logger_levels(logging) -> dict:
    """The level of the root logger ("") and of every named logger that has one set."""
    levels = {"": logging.getLogger().level}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels


class Warnings:
    """The ``warnings`` filters, whole and in order, always (whether a cell added one cannot be
    told from a baseline taken after it ran; a filter a library added at import is in the new
    kernel too, so putting back the same list is exact either way)."""

    label = "warnings filters"

    def capture(self):
        return list(warnings.filters)

    def restore(self, state) -> None:
        cast(list, warnings.filters)[:] = state  # a list, typed as a Sequence
        warnings._filters_mutated()  # type: ignore[attr-defined]  # private: not in typeshed


class WorkingFolder:
    """``os.chdir``: the folder the notebook's cells were in (always carried: where the kernel
    started is not known once a cell may have moved before the baseline)."""

    label = "working folder"
    early = True

    def capture(self):
        return os.getcwd()

    def restore(self, state):
        try:
            os.chdir(state)
        except OSError as e:
            return {
                "restored": False,
                "not_restored": [("working folder", f"{state} cannot be entered here: {e}")],
            }
        return None


def _initial_environ() -> dict:
    """The environment the kernel's process was started with (``/proc/self/environ`` is what
    ``exec`` received, whatever a cell did to ``os.environ`` since), else ``os.environ`` now."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[os.fsdecode(key)] = os.fsdecode(value)
    return out


def _server_owned(key: str) -> bool:
    return key in SERVER_OWNED or key.startswith(SERVER_OWNED_PREFIXES)


class Environment:
    """The environment variables the user's cells set, changed or removed (``os.environ``);
    never the server's."""

    label = "environment variables"
    early = True

    def __init__(self):
        self._start: dict | None = None

    def baseline(self) -> None:
        self._start = _initial_environ()

    def given(self, environ: dict) -> None:
        """The server set these for this kernel (a warm kernel's resume): they are not the
        user's changes, now or at the next pause."""
        if self._start is not None:
            self._start.update({str(k): str(v) for k, v in environ.items()})

    def capture(self):
        if self._start is None:
            return None
        now = os.environ
        changed = {k: v for k, v in now.items() if self._start.get(k) != v and not _server_owned(k)}
        removed = [k for k in self._start if k not in now and not _server_owned(k)]
        return {"set": changed, "unset": removed} if changed or removed else None

    def restore(self, state):
        skipped = []
        for k, v in state["set"].items():
            if _server_owned(k):
                skipped.append((f"environment variable {k}", "set by the server for this kernel"))
                continue
            os.environ[k] = v
        for k in state["unset"]:
            if not _server_owned(k):
                os.environ.pop(k, None)
        # the baseline was taken before this: what was restored counts as changed next pause
        return {"not_restored": skipped}


class ImportPaths:
    """Entries the user's cells added to ``sys.path`` (``sys.path.append('src')``), put back
    in front of or after the new kernel's own as they were."""

    label = "import paths"
    early = True
    order = 10

    def __init__(self):
        self._start: list | None = None

    def baseline(self) -> None:
        self._start = list(sys.path)

    def capture(self):
        if self._start is None:
            return None
        known = set(self._start)
        first = next((i for i, p in enumerate(sys.path) if p in known), len(sys.path))
        added = [(i < first, p) for i, p in enumerate(sys.path) if p not in known]
        removed = [p for p in self._start if p not in sys.path]
        if not added and not removed:
            return None
        return {
            "front": [p for f, p in added if f],
            "back": [p for f, p in added if not f],
            "removed": removed,
        }

    def restore(self, state) -> None:
        for p in state.get("removed", ()):
            while p in sys.path:
                sys.path.remove(p)
        front = [p for p in state["front"] if p not in sys.path]
        sys.path[:0] = front
        sys.path.extend(p for p in state["back"] if p not in sys.path)


# Threads of these packages are the kernel's own machinery, recreated by the new kernel.
# (module prefixes: IPython's own threads, not a background job a cell started with
# IPython.lib.backgroundjobs, which is the notebook's work)
_OWN_THREADS = (
    "ipykernel",
    "IPython.core",
    "jupyter_client",
    "zmq",
    "tornado",
    "traitlets",
    "jupyter_gpu_pause",
    "comm",
    "debugpy",
    "tqdm",
    "concurrent",
    "asyncio",
    "anyio",
)


def _thread_origin(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)
    owner = target if target is not None else type(t).run
    return getattr(owner, "__module__", None) or type(t).__module__ or ""


class LooseEnds:
    """What no checkpoint can carry, named before the pause so that nothing is lost silently:
    running threads, child processes, listening sockets and open connections, asyncio tasks,
    and open transactions of sqlite connections in the namespace. What the kernel had before
    its first cell (its own threads and sockets; the baseline) is not the notebook's."""

    def __init__(self):
        self._threads: set[int] = set()
        self._children: set[int] = set()
        self._sockets: set = set()

    def baseline(self) -> None:
        self._threads = {t.ident for t in threading.enumerate() if t.ident is not None}
        self._children = {pid for pid, _name in live_children()}
        self._sockets = {(listening, local) for listening, local, _peer in _inet_sockets()}

    def capture(self):
        return None

    def restore(self, state) -> None:
        return None

    def not_carried(self) -> list[tuple[str, str]]:
        out = []
        for t in threading.enumerate():
            if t is threading.main_thread() or not t.is_alive() or t.ident in self._threads:
                continue
            origin = _thread_origin(t)
            if any(origin == p or origin.startswith(p + ".") for p in _OWN_THREADS):
                continue
            out.append(
                (
                    f"thread {t.name}",
                    "a running thread cannot travel: it is not "
                    "running after the resume (start it again)",
                )
            )
        out += [
            (
                f"child process {pid} ({name})",
                "a child process cannot travel: it is stopped with the kernel and not started "
                "again",
            )
            for pid, name in live_children()
            if pid not in self._children
        ]
        out += _connections(self._sockets)
        out += _tasks()
        out += _transactions()
        return out


def _kernel_ports() -> set[int]:
    """The kernel's own ZeroMQ ports: those of its connection file, and those of every socket
    of its ZeroMQ context (ipykernel binds one more, not in the connection file)."""
    try:
        from ipykernel.kernelapp import IPKernelApp

        if not IPKernelApp.initialized():
            return set()
        app = IPKernelApp.instance()
        names = ("shell", "iopub", "stdin", "control", "hb")
        ports = {int(getattr(app, f"{n}_port", 0) or 0) for n in names} - {0}
        import zmq

        for sock in list(getattr(app.context, "_sockets", ())):
            try:
                endpoint = sock.get(zmq.LAST_ENDPOINT).decode()
            except Exception:  # closed meanwhile
                continue
            if endpoint.startswith("tcp://"):
                ports.add(int(endpoint.rpartition(":")[2]))
        return ports
    except Exception:
        return set()


def _inet_sockets():
    """(listening, local port, peer or None) of each TCP/UDP socket this process holds.

    Read from the descriptors themselves (a duplicate of each, inspected and closed), not from
    ``/proc/net/tcp``: that table lists every socket of the machine, and reading it took 77 ms
    on a busy test machine, more than a whole capture may."""
    import socket

    fds = "/proc/self/fd"
    if not os.path.isdir(fds):
        return
    for name in os.listdir(fds):
        try:
            if not os.readlink(f"{fds}/{name}").startswith("socket:"):
                continue
            dup = os.dup(int(name))
        except (OSError, ValueError):
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                local = sock.getsockname()[1]
                listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            except OSError:
                continue
            try:
                peer = sock.getpeername()[:2]
            except OSError:
                peer = None
            yield listening, local, peer


def _connections(known: set) -> list[tuple[str, str]]:
    """Sockets of the notebook's: not the kernel's own ports, nor one it had before its first
    cell (``known``: (listening, local port))."""
    ports = _kernel_ports()
    out = []
    for listening, local, peer in _inet_sockets():
        if local in ports or (peer and peer[1] in ports) or (listening, local) in known:
            continue
        if listening:
            out.append(
                (
                    f"listening socket :{local}",
                    "a server socket cannot travel: nothing listens on it after the resume",
                )
            )
        elif peer:
            out.append(
                (
                    f"connection to {peer[0]}:{peer[1]}",
                    "an open network connection cannot travel: reconnect after the resume",
                )
            )
    return out


_OWN_TASK_FILES = (
    "/ipykernel/",
    "/tornado/",
    "/zmq/",
    "/jupyter_client/",
    "/IPython/",
    "/anyio/",
    "/asyncio/",
    "/jupyter_gpu_pause/",
    "/comm/",
)


def _tasks() -> list[tuple[str, str]]:
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return []
    out = []
    for task in asyncio.all_tasks(loop):
        if task.done() or task is asyncio.current_task(loop):
            continue
        coro = task.get_coro()
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        where = getattr(code, "co_filename", "") or ""
        if any(part in where for part in _OWN_TASK_FILES):
            continue
        name = getattr(coro, "__qualname__", None) or task.get_name()
        out.append(
            (
                f"asyncio task {name}",
                "a running asyncio task cannot travel: it is not running after the resume",
            )
        )
    return out


def _transactions() -> list[tuple[str, str]]:
    import sqlite3

    try:
        from IPython import get_ipython

        ns = get_ipython().user_ns
    except Exception:
        return []
    out = []
    for name, value in list(ns.items()):
        if isinstance(value, sqlite3.Connection):
            try:
                open_tx = value.in_transaction
            except sqlite3.ProgrammingError:  # closed
                continue
            if open_tx:
                out.append(
                    (
                        f"transaction of {name}",
                        "an open database transaction cannot "
                        "travel: commit it before the pause, or it is rolled back",
                    )
                )
    return out
