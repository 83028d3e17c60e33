"""Whether killing this kernel loses anything its user relies on, and the parts of a graceful
exit that matter, done here when it does not (the agent's ``finish``).

Once a pause's checkpoint is committed the server stops the kernel. A graceful shutdown costs
a kernel with torch imported 0.6–1 s, its GPU held all along; a kill costs ~0.1 s. The server
asks this module first (``KernelBridge.finish``) and kills only when it answers ``safe``.

What a graceful shutdown does (read in jupyter_client 8.10, ipykernel 7.4, IPython 9.19 and
CPython 3.11), and what a kill (jupyter_client's SIGINT, then SIGKILL to the kernel's process
group) skips of it:

1. ipykernel's ``shutdown_request``: SIGTERM to the child processes in the kernel's process
   group, SIGKILL to those left after ~14 s; a ``shutdown_reply`` on IOPub; its loops stop.
2. Python's exit: ``threading._shutdown`` runs ``threading._register_atexit`` callbacks
   (concurrent.futures wakes its idle workers) and joins every non-daemon thread; then the
   ``atexit`` handlers, newest first: the user's and libraries' (wandb, tensorboard and the
   like flush or upload there), ``multiprocessing``'s (terminates daemonic children, joins the
   others, runs its ``Finalize`` callbacks), ``weakref.finalize`` callbacks marked ``atexit``
   (``tempfile.TemporaryDirectory`` removes its folder), ``logging.shutdown`` (flushes and
   closes every handler), IPython's ``atexit_operations`` (clears the user namespace, so
   objects' ``__del__`` run and unclosed files are flushed and closed; ends the history session:
   the pending cache and the session's end time and cell count go to ``history.sqlite``;
   removes IPython's temporary files), ipykernel's (closes its sockets).
3. Finalization: ``sys.stdout``/``sys.stderr`` flushed, modules torn down (more ``__del__``:
   buffered files still open flush as they are freed), then C's ``exit()``: C-level ``atexit``
   handlers (HDF5 closes its files) and the C stdio buffers flushed.

A kill skips every step; the OS closes the descriptors (what ``write(2)`` wrote is kept, as
are writes to a shared ``mmap``), frees the memory and the GPU's. The server removes the
connection file either way.

A kill is taken as safe only when (``_judge``):

- the server's first request to the kernel came before any cell ran (the baseline below is
  the kernel's own), and every ``atexit`` handler registered since is one of ``KNOWN_HANDLERS``
  (each harmless to skip, or its effect checked or done here); handlers are seen through
  ``atexit.register``/``unregister``, wrapped at the first request, and their count checked
  against ``atexit._ncallbacks()`` (one registered out of sight counts as unknown);
- every ``weakref.finalize`` callback marked ``atexit`` made since is in ``KNOWN_FINALIZERS``,
  and ``multiprocessing`` has no ``Finalize`` callback that runs at exit;
- no non-daemon thread but the main one is alive after ``GRACE`` seconds (ipykernel's and
  IPython's threads are all daemons);
- no child process of the kernel is alive (zombies aside) after ``GRACE`` seconds;
- every regular file open for writing that was not open at the first request (the history
  database aside) belongs to a Python file object that a flush writes out in full
  (``TextIOWrapper``, ``BufferedWriter``, ``BufferedRandom``, ``FileIO``), and no file object
  that writes more when closed (``GzipFile``, a ``ZipFile`` or ``TarFile`` being written, any
  other ``IOBase`` subclass) is open for writing. Only when such a file is open does it scan
  ``gc.get_objects()`` for its owner (0.075 s for a million tracked objects on the 2-core dev
  VM; a torch kernel holds ~0.2 million).

Then ``prepare_exit`` does what matters of the graceful exit: ends the IPython history session
(``end_session`` writes the pending cache first), removes IPython's temporary files, flushes
every logging handler (``logging.shutdown`` without the close), the open files it found,
the real process's ``sys.__stdout__``/``sys.__stderr__`` and C's stdio buffers
(``fflush(NULL)``). Not ipykernel's ``OutStream``: a flush of it from inside a request blocks.
Not done, and not checked: ``__del__`` of other objects in the namespace.
"""

from __future__ import annotations

import atexit
import functools
import gc
import io
import os
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _io import _IOBase

_FILE_BASE: type[_IOBase]
try:  # the C base of every file object: an isinstance of it is ~2x cheaper than io.IOBase's
    from _io import _IOBase as _C_FILE_BASE

    _FILE_BASE = _C_FILE_BASE
except ImportError:  # not CPython
    _FILE_BASE = io.IOBase

GRACE = 0.2  # seconds a thread or a child process that is ending anyway is given to end
MAX_WHY = 600  # characters of the answer's "why"

# atexit handlers (``module.qualname`` of the handler, or ``package:<built-in>`` for a built-in
# registered while that package was imported) whose skipping loses nothing, given the rest
KNOWN_HANDLERS = {
    "logging.shutdown": "flushes the logging handlers: done here",
    "weakref.finalize._exitfunc": "runs weakref finalizers: each is judged on its own",
    "multiprocessing.util._exit_function": "stops multiprocessing's children (none may be "
    "alive) and runs its finalizers (none may be pending)",
    "IPython.core.history.HistorySavingThread.stop": "stops IPython's history thread; the "
    "history is written here",
    "torch.utils.data._utils._set_python_exit_flag": "tells DataLoader worker processes the "
    "interpreter exits (none may be alive)",
    "torch._subclasses.fake_tensor.dump_cache_stats": "logs fake-tensor cache statistics",
    "torch._dynamo.utils.dump_compile_times": "logs TorchDynamo's compile times",
    "torch._dynamo.eval_frame._log_traced_frames": "logs the frames TorchDynamo traced",
    "torch.fx.experimental.symbolic_shapes.log_lru_cache_stats": "logs cache statistics",
    "torch:<built-in>": "torch's C++ clean-up of the Python objects it holds",
    "matplotlib._pylab_helpers.Gcf.destroy_all": "closes figure windows",
    "PIL._imaging.clear_cache": "frees Pillow's memory cache",
}
KNOWN_FINALIZERS = {
    "torch.library._del_library": "unregisters torch operators from the running process",
}

_LOCK = threading.Lock()
_watch: _Watch | None = None


def _finalizers() -> dict[weakref.finalize, Any]:
    """``weakref.finalize``'s live finalizers (finalizer -> its info), a CPython private."""
    return weakref.finalize._registry  # type: ignore[attr-defined]  # private: not in typeshed


def _name(func) -> str:
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if module is None or qualname is None:
        return ""
    return f"{module}.{qualname}"


def _origin(frame) -> str:
    """The module that called: the first frame outside importlib and this file."""
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith("<frozen importlib") and file != __file__:
            return str(frame.f_globals.get("__name__", "?"))
        frame = frame.f_back
    return "?"


def _writable_files(skip: str = "") -> dict[int, tuple[str, tuple[int, int]]]:
    """fd -> (path, (device, inode)) of the regular files this process has open for writing."""
    import psutil

    out = {}
    for f in psutil.Process().open_files():
        if f.mode == "r" or (skip and f.path.startswith(skip)):
            continue
        try:
            st = os.fstat(f.fd)
        except OSError:
            continue
        out[f.fd] = (f.path, (st.st_dev, st.st_ino))
    return out


class _Watch:
    """What the kernel had when the server first asked it something: its own exit handlers,
    finalizers and files, as opposed to those of the user's code that runs after."""

    def __init__(self, shell):
        self.clean = shell.execution_count <= 1  # no cell has run yet
        self.expected = atexit._ncallbacks()
        self.handlers: list[tuple[object, str]] = []  # (handler, module that registered it)
        self.finalizers = set(_finalizers())
        self.files: set[tuple[int, int]] | None
        try:
            self.files = {key for _, key in _writable_files().values()}
        except Exception:  # no psutil: files cannot be judged, and a kill is never safe
            self.files = None
        # typed loosely: functools.wraps cannot take atexit.register's ParamSpec-generic type
        original_register: Callable[..., Any] = atexit.register
        original_unregister: Callable[..., Any] = atexit.unregister
        self._register, self._unregister = original_register, original_unregister

        @functools.wraps(original_register)
        def register(func, *args, **kwargs):
            with _LOCK:
                before = atexit._ncallbacks()
                result = self._register(func, *args, **kwargs)
                self.expected += atexit._ncallbacks() - before
                self.handlers.append((func, _origin(sys._getframe(1))))
            return result

        @functools.wraps(original_unregister)
        def unregister(func):
            with _LOCK:
                before = atexit._ncallbacks()
                self._unregister(func)
                self.expected += atexit._ncallbacks() - before
                self.handlers = [(f, o) for f, o in self.handlers if f != func]

        # a wrapper cannot be typed as atexit.register's ParamSpec-generic signature (mypy
        # accepts no function for it, functools.wraps turns it into Never): the ignore stays
        atexit.register, atexit.unregister = register, unregister  # type: ignore[assignment]

    def unknown_handlers(self) -> list[str]:
        out = []
        for func, origin in self.handlers:
            name = _name(func)
            if not name and isinstance(func, types.BuiltinFunctionType):
                name = f"{origin.partition('.')[0]}:<built-in>"
            if name not in KNOWN_HANDLERS:
                out.append(f"the exit handler {name or repr(func)[:80]} (registered by {origin})")
        hidden = atexit._ncallbacks() - self.expected
        if hidden > 0:
            out.append(f"{hidden} exit handler(s) registered without atexit.register")
        return out

    def unknown_finalizers(self) -> list[str]:
        out = []
        for f, info in list(_finalizers().items()):
            if f in self.finalizers or not info.atexit:
                continue
            name = _name(info.func)
            if name not in KNOWN_FINALIZERS:
                out.append(f"the weakref finalizer {name or repr(info.func)[:80]}")
        return sorted(set(out))


def watch(shell) -> None:
    """Take the baseline, once per kernel: the agent calls this on every request, first."""
    global _watch
    if _watch is None:
        _watch = _Watch(shell)


def _multiprocessing_finalizers() -> list[str]:
    util = sys.modules.get("multiprocessing.util")
    registry = getattr(util, "_finalizer_registry", None) or {}
    pending = [f for key, f in list(registry.items()) if key[0] is not None]
    return [f"{len(pending)} multiprocessing finalizer(s)"] if pending else []


def _threads(deadline: float) -> list[str]:
    main = threading.main_thread()
    left = []
    for t in threading.enumerate():
        if t is main or t.daemon or t is threading.current_thread():
            continue
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            left.append(f"the thread {t.name!r} (not a daemon: a graceful exit waits for it)")
    return left


def live_children() -> list[tuple[int, str]]:
    """(pid, name) of every live process below the kernel's, zombies aside."""
    import psutil

    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append((p.pid, p.name()))
        except psutil.Error:  # ended meanwhile
            continue
    return alive


def _children(deadline: float) -> list[str]:
    while True:
        alive = [f"the child process {pid} ({name})" for pid, name in live_children()]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.01)


_FLUSHED_IN_FULL = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.FileIO)
_IN_MEMORY = (io.BytesIO, io.StringIO)


def _archive_written(o) -> str | None:
    """An archive being written: no file object, but it writes its end when closed."""
    if getattr(o, "mode", "r") not in ("a", "w", "x"):
        return None
    if getattr(o, "fp", None) is not None:  # a ZipFile
        return f"a ZipFile being written ({o.filename})"
    if hasattr(o, "fileobj") and not o.closed:  # a TarFile
        return f"a TarFile being written ({o.name})"
    return None


def _file_objects() -> tuple[list, set[int], list[str]]:
    """The file objects open for writing that a flush writes out in full, their descriptors,
    and the writers open for writing that a flush does not write out."""
    outstream = getattr(sys.modules.get("ipykernel.iostream"), "OutStream", ())
    archives = {
        getattr(sys.modules.get(module), name, None)
        for module, name in (("zipfile", "ZipFile"), ("tarfile", "TarFile"))
    }
    flush, owned, lost = [], set(), []
    for o in gc.get_objects():
        if isinstance(o, _FILE_BASE):
            if isinstance(o, _IN_MEMORY) or (outstream and isinstance(o, outstream)):
                continue
            try:
                if o.closed or not o.writable():
                    continue
            except Exception:
                continue
            if type(o) in _FLUSHED_IN_FULL:
                flush.append(o)
                try:
                    owned.add(o.fileno())
                except Exception:
                    pass
            else:
                kind = f"{type(o).__module__}.{type(o).__qualname__}"
                lost.append(f"an open {kind} (it writes more when closed than a flush does)")
        elif type(o) in archives:
            archive = _archive_written(o)
            if archive:
                lost.append(archive)
    # text first: a TextIOWrapper's flush goes down to its buffer
    flush.sort(key=lambda o: not isinstance(o, io.TextIOWrapper))
    return flush, owned, lost


class _Plan:
    """What a kill would lose (``lost``), else the files to flush and how many were opened."""

    def __init__(self, lost: list[str], files: list | None = None, opened: int = 0):
        self.lost, self.files, self.opened = lost, files or [], opened


def _judge(shell) -> _Plan:
    w = _watch
    if w is None or not w.clean:
        return _Plan(
            [
                "cells ran before the server's first request to this kernel, so what they "
                "registered to run at exit cannot be told from the kernel's own"
            ]
        )
    if w.files is None:
        return _Plan(["psutil is not installed in the kernel's environment"])
    lost = w.unknown_handlers() + w.unknown_finalizers() + _multiprocessing_finalizers()
    deadline = time.monotonic() + GRACE
    lost += _threads(deadline) + _children(deadline)
    if lost:
        return _Plan(lost)
    hm = getattr(shell, "history_manager", None)
    hist = str(getattr(hm, "hist_file", "") or "")
    opened = {
        fd: path
        for fd, (path, key) in _writable_files(hist if hist != ":memory:" else "").items()
        if key not in w.files
    }
    if not opened:  # nothing to look for: no scan of the objects
        return _Plan([])
    with warnings.catch_warnings():  # a deprecated object may warn when its type is looked at
        warnings.simplefilter("ignore")
        files, owned, lost = _file_objects()
    lost += [
        f"the file {path} (open for writing by something other than a Python file object)"
        for fd, path in opened.items()
        if fd not in owned
    ]
    return _Plan(lost, files, len(opened))


def _flush(shell, plan: _Plan) -> list[str]:
    """The graceful exit's steps that matter; raises if one fails."""
    done = []
    hm = getattr(shell, "history_manager", None)
    if hm is not None and getattr(hm, "enabled", False):
        hm.end_session()  # the pending cache, then the session's end and cell count
        done.append("IPython history")
    temporary = list(getattr(shell, "tempfiles", [])) + list(getattr(shell, "tempdirs", []))
    if temporary:
        _remove(temporary)
        done.append(f"{len(temporary)} IPython temporary file(s) removed")
    handlers = 0
    for ref in list(getattr(sys.modules.get("logging"), "_handlerList", [])):
        h = ref()
        if h is not None:
            h.acquire()
            try:
                h.flush()
            finally:
                h.release()
            handlers += 1
    if handlers:
        done.append(f"{handlers} logging handler(s)")
    for f in plan.files:
        if not f.closed:
            f.flush()
    if plan.opened:
        done.append(f"{plan.opened} file(s) open for writing")
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None and not stream.closed:
            stream.flush()
    done.append("stdout and stderr")
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
        done.append("C stdio")
    except (OSError, AttributeError):  # no C library to ask (not Linux/macOS)
        pass
    return done


def _remove(paths: list) -> None:
    import shutil

    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)


def prepare_exit(shell) -> dict:
    """``{"safe", "why", "flushed"}``: when ``safe``, what a graceful exit would have written
    is written (``flushed``) and the server may kill the kernel; otherwise ``why`` says what a
    kill would lose, and nothing was done."""
    try:
        plan = _judge(shell)
    except Exception as e:  # cannot tell: a graceful exit
        plan = _Plan([f"the kernel could not check ({type(e).__name__}: {e})"])
    if plan.lost:
        return {"safe": False, "why": "; ".join(plan.lost)[:MAX_WHY], "flushed": []}
    try:
        flushed = _flush(shell, plan)
    except Exception as e:
        why = f"flushing failed ({type(e).__name__}: {e})"
        return {"safe": False, "why": why[:MAX_WHY], "flushed": []}
    return {"safe": True, "why": None, "flushed": flushed}
