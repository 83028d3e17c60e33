"""Test-restore: load a capture plan back in a forked copy of the kernel before anything is kept.

An object can pickle and still not unpickle (a ``__reduce__`` whose callable raises, a bokeh
figure): found only at resume, the old kernel is gone. So before a check answers or a pause
writes, the plan's object segments are unpickled in a child made with ``os.fork``, exactly as
``restore.py`` would (its ``_rebuild``: same order, one memo across variables), and what fails
moves to ``skipped``. The live namespace is never touched: the child has its own copy of the
memory.

A *plain* segment (only built-in values, numpy arrays and scalars, torch tensors and their
storages: ``pickling._TRUSTED_*``) needs no test-restore: its rebuild is pickle's, numpy's or
torch's own, fed with built-in values, and cannot fail where its pickling succeeded. An array
of a subclass (``recarray``, a masked array, ``memmap``, ``matrix``, ``nn.Parameter``) is not
plain: its own reduce and state rebuild it, and are test-restored. A plan of
plain segments only forks no child at all; otherwise the child loads the whole stream (the
segments share one memo) and judges the objects that are not plain. A pause starts the child
as soon as its plan is made and writes the blobs meanwhile (``start``, ``Pending``), the child
at a lower priority so that it takes only what the writing leaves of the CPU; a check waits
for it at once.

What the child gets instead of bulk bytes: every torch storage and blob array is an
uninitialised CPU buffer of its size (``torch.empty``/``np.empty``: no bytes copied, pages never
touched, no CUDA), so tensors come back with their dtype, shape and strides but not their
values. Tensor and array bytes are not test-restored; the blob checks of the commit and of the
resume cover them.

The child unpickles as a new kernel would: cloudpickle's record of the classes it pickled by
value is emptied first (``pickling.classes_by_value_forgotten``), else such a class comes back
as the live one in the fork, whatever its stream holds.

The child is fenced: its stdin/out/err go to /dev/null and every other inherited descriptor is
closed (the kernel's ZMQ sockets, ipykernel's output pipes: nothing reaches the notebook, and a
library that touches them there dies alone), writes to files fail (``RLIMIT_FSIZE`` 0 and an
audit hook refusing file creation, removal, subprocesses and connections), the collector stays
off and it leaves with ``os._exit`` (no atexit, no finalizers). An object whose loading needs
what the fence refuses (writing a file, CUDA) is saved but reported as not test-restored.
The parent waits at most ``TIMEOUT`` seconds in all (a lock some ipykernel thread held at the
fork can hang the child): then it kills the child and saves the plan as it is, saying that it
was not test-restored and why. Without ``os.fork`` (not Linux/macOS) the same is said.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import sys
import threading
import time
import types
import warnings
from dataclasses import dataclass, field
from typing import Literal

from .capture import Plan, _describe_error, _make_plan
from .pickling import classes_by_value_forgotten, collector_paused
from .restore import _rebuild

# Seconds, all rounds of one plan together, that a check or a pause waits for the test-restore:
# well inside the server's 30 s for a whole check (server/lifecycle/check.py).
TIMEOUT = 10.0
_ABSENT = object()
# The verdict on an object that met a memo entry an earlier, failed object never built: not a
# reason of its own (``verified_plan`` tries it again without the failed ones)
_MISSES = "a memo miss"
_PICKLE = "pickle"  # the stream's key in the child's stand-in for a manifest
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Audit events of effects outside the child's memory (open for writing is checked apart)
_FENCED = (
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.utime",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.kill",
    "os.killpg",
    "shutil.",
    "subprocess.Popen",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
)


@dataclass
class Verdict:
    """What the test-restore found: ``failed`` names (-> reason, worded as a skip) and the
    names it could not judge (``unverified``: {"reason", "names"}, or None)."""

    failed: dict = field(default_factory=dict)
    unverified: dict | None = None

    def own_failures(self) -> dict:
        """The objects that failed by themselves, to skip: a memo miss is tried again. (A
        round's first failure is never a memo miss: nothing failed before it.)"""
        return {n: why for n, why in self.failed.items() if why != _MISSES}


class Fenced(PermissionError):
    """Raised in the child where loading an object would act outside the child's memory."""


def verified_plan(
    user_ns: dict,
    hidden: dict,
    registered: list[str],
    mode: str,
    hooks: dict | None = None,
    timeout: float = TIMEOUT,
    exclude: dict | None = None,
    enabled: bool = True,
) -> Plan:
    """``capture.make_plan``, test-restored: what does not load back is skipped (a registered
    name raises CaptureError ``registered-unsaveable``), what could not be judged is named in
    ``plan.unverified``. ``exclude``: names already known not to restore.

    A skipped object leaves the stream, and the objects after it were pickled on the same memo:
    so the plan is made again without it, and test-restored again (one more round per
    failure found, only on that rare path; every round within the one ``timeout``).

    Only the objects that failed by themselves are skipped after a round. One that failed
    because it met a memo entry a failed object never built is tried again: most often that
    entry is only something both use (a class, ``numpy``'s array constructor) that the failed
    one happened to pickle first, and without it in the stream this one pickles its own copy.
    Skipping it at once skipped, behind one bokeh figure, a fitted model and a DataFrame that
    never referred to the figure (the corpus, ``tests/corpus_cases.py``). One that does refer
    to the failed object fails by itself in the next round, and is skipped then.
    """
    deadline = time.monotonic() + timeout
    exclude = dict(exclude or {})
    with collector_paused():
        while True:
            plan = _make_plan(user_ns, hidden, registered, mode, hooks, exclude)
            left = deadline - time.monotonic()
            verdict = start(plan, user_ns, hidden, left, enabled, said=timeout).verdict()
            plan.unverified = verdict.unverified
            if not verdict.failed:
                return plan
            exclude.update(verdict.own_failures())


class Pending:
    """A test-restore under way in a child process: ``verdict()`` waits for its answer.

    A pause starts it as soon as the plan is made and writes the blobs meanwhile, so the
    child's unpickling costs the pause only what outlasts the writes (``agent.capture``).
    """

    def __init__(self, names: list[str], done: Verdict | None = None):
        self.names = names
        self._done = done
        self._pid: int | None = None  # the child and the pipe it answers on: set by start()
        self._fd: int | None = None  # whenever no verdict is done
        self._deadline = 0.0
        self._timeout = 0.0

    def verdict(self) -> Verdict:
        if self._done is None:
            self._done = self._collect()
        return self._done

    def abandon(self) -> None:
        """Stop the child without waiting for its answer."""
        if self._done is None:
            assert self._pid is not None and self._fd is not None  # no verdict: a child runs
            self._done = self._unjudged("it was abandoned")
            os.close(self._fd)
            _kill(self._pid)
            threading.Thread(
                target=_reap, args=(self._pid,), name="gpu-pause-reap", daemon=True
            ).start()

    def _collect(self) -> Verdict:
        assert self._pid is not None and self._fd is not None  # no verdict: a child runs
        data = None
        try:
            data = _read(self._fd, self._deadline)
        finally:
            os.close(self._fd)
            if data is None:
                _kill(self._pid)
            # the exit of a process that shares the kernel's memory takes milliseconds:
            # waited for aside (the kernel keeps no zombie), not by the pause
            threading.Thread(
                target=_reap, args=(self._pid,), name="gpu-pause-reap", daemon=True
            ).start()
        if data is None:
            return self._unjudged(f"it did not finish within {self._timeout:.3g} s and was stopped")
        try:
            answer = json.loads(data)
        except ValueError:
            return self._unjudged("its process ended without an answer")
        if "error" in answer:
            return self._unjudged(answer["error"])
        unverified = answer["unverified"]
        return Verdict(
            failed=answer["failed"],
            unverified={"reason": answer["why"], "names": unverified} if unverified else None,
        )

    def _unjudged(self, why: str) -> Verdict:
        return Verdict(unverified={"reason": why, "names": self.names})


OFF = "the test-restore is turned off on this server (test_restore = False)"


def start(
    plan: Plan,
    user_ns: dict,
    hidden: dict,
    timeout: float = TIMEOUT,
    enabled: bool = True,
    said: float | None = None,
) -> Pending:
    """Fork the child that unpickles ``plan``'s segments; it answers through a pipe.
    ``enabled=False`` (the admin's ``test_restore``) forks nothing and judges nothing.
    ``said``: the time limit a stopped child's reason names (default ``timeout``: a later
    round of ``verified_plan`` gets what is left of the one limit, which it still names)."""
    loaded = [o for o in plan.objects if o["kind"] != "module"]
    names = [o["name"] for o, plain in zip(loaded, plan.plain) if not plain]
    pending = Pending(names)
    if not names:  # nothing, or only plain segments: no child at all
        pending._done = Verdict()
    elif not enabled:
        pending._done = pending._unjudged(OFF)
    elif not hasattr(os, "fork"):
        pending._done = pending._unjudged("this platform has no fork")
    elif timeout <= 0:
        pending._done = pending._unjudged("no time was left for it")
    else:
        try:
            pending._pid, pending._fd = _fork(plan, user_ns, hidden)
        except OSError as e:  # fork or pipe refused (memory, process limits)
            pending._done = pending._unjudged(f"it could not start ({_describe_error(e)})")
        pending._timeout = timeout if said is None else said
        pending._deadline = time.monotonic() + timeout
    return pending


def trial_restore(plan: Plan, user_ns: dict, hidden: dict, timeout: float) -> Verdict:
    """Unpickle ``plan``'s segments in a forked child; what fails, what could not be judged."""
    return start(plan, user_ns, hidden, timeout).verdict()


def _fork(plan: Plan, user_ns: dict, hidden: dict) -> tuple[int, int]:
    r, w = os.pipe()
    with warnings.catch_warnings():  # Python >= 3.12 warns of fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
    if pid == 0:  # the child: never returns
        os.close(r)
        _child(plan, user_ns, hidden, w)
    os.close(w)
    return pid, r


def _read(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; None at the deadline."""
    parts: list[bytes] = []
    poller = select.poll()  # not select(): a kernel may hold more than 1 024 descriptors
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # reaped already (SIGCHLD ignored)
        pass


def _child(plan: Plan, user_ns: dict, hidden: dict, w: int) -> None:
    """Fence, load, answer, leave: nothing here may return into the kernel's code."""
    code = 0
    try:
        _fence(w)
        answer = _load(plan, user_ns, hidden)
    except BaseException as e:
        answer = {"error": f"it failed ({_describe_error(e)})"}
        code = 1
    try:
        data = json.dumps(answer).encode()
        while data:
            data = data[os.write(w, data) :]
        os.close(w)  # the parent reads on now, while this process is torn down
    except BaseException:
        code = 1
    os._exit(code)


def _fence(w: int) -> None:
    import gc
    import resource

    gc.disable()
    os.nice(10)  # the kernel's own writing, and the server, go first
    try:  # the kernel's handlers are not for this process; a write past the limit: EFBIG
        for sig, how in ((signal.SIGINT, signal.SIG_DFL), (signal.SIGTERM, signal.SIG_DFL)):
            signal.signal(sig, how)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limits: tuple[int, ...] = (resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)
    except ValueError:  # forked from a thread that Python does not take as its main one
        limits = (resource.RLIMIT_CORE,)  # no file-size limit: it would kill, not refuse
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, w)  # the kernel's sockets and pipes, ``null`` among them
    os.closerange(w + 1, max(w + 2, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    quiet = open(os.devnull, "w")  # noqa: SIM115 - lives until os._exit
    for name in ("stdout", "stderr", "__stdout__", "__stderr__"):
        old = getattr(sys, name, None)
        for attr, stub in (("write", len), ("flush", _nothing)):
            try:  # an ipykernel OutStream kept by a logger would forward to the notebook
                setattr(old, attr, stub)
            except (AttributeError, TypeError):
                pass
        setattr(sys, name, quiet)
    for limit in limits:
        resource.setrlimit(limit, (0, 0))
    sys.addaudithook(_audit)


def _nothing(*_a) -> None:
    return None


def _audit(event: str, args) -> None:
    if event == "open":
        flags = args[2] if len(args) > 2 else None
        if isinstance(flags, int) and flags & _WRITE_FLAGS:
            raise Fenced(f"the test-restore does not write files ({args[0]!r})")
    elif event.startswith(_FENCED):
        raise Fenced(f"the test-restore does not allow {event}")


def _fenced(e: BaseException | None) -> str | None:
    """Why ``e`` comes from the fence, not from the object, or None."""
    seen: set = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, Fenced) or (isinstance(e, OSError) and e.errno == 27):  # EFBIG
            return "its loading writes files or starts processes"
        if "CUDA" in str(e) and "fork" in str(e):
            return "its loading uses CUDA"
        e = e.__cause__ or e.__context__
    return None


class _Placeholders:
    """The resolver ``_rebuild`` asks for persistent ids: the child's own copy of the
    namespace, and uninitialised buffers of the saved storages' and arrays' sizes."""

    def __init__(self, plan: Plan, stream: bytes, user_ns: dict):
        self.plan, self.user_ns = plan, user_ns
        self.bad: dict = {}
        self.damage: list[str] = []  # stays empty: no blob is damaged here
        self.blobs = {_PICKLE: stream}
        self._storages: dict = {}
        self._arrays: dict = {}

    def _untyped(self, index: int):
        if index not in self._storages:
            import torch

            n = int(self.plan.refs.storages[index].nbytes())
            try:
                us = torch.empty(n, dtype=torch.uint8).untyped_storage()
            except RuntimeError:  # no address space for it: a storage without memory
                us = torch.UntypedStorage(n, device="meta")
            self._storages[index] = us
        return self._storages[index]

    def __call__(self, pid):
        kind = pid[0]
        if kind == "ns":
            return self.user_ns
        if kind == "storage":
            import torch

            us = self._untyped(pid[1])
            if pid[2] is None:
                return us
            dtype = getattr(torch, pid[2].split(".", 1)[1])
            return torch.storage.TypedStorage(wrap_storage=us, dtype=dtype, _internal=True)
        if kind == "array":
            if pid[1] not in self._arrays:
                import numpy as np

                a = self.plan.refs.arrays[pid[1]]
                order: Literal["C", "F"] = (
                    "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
                )
                self._arrays[pid[1]] = np.empty(a.shape, dtype=a.dtype, order=order)
            return self._arrays[pid[1]]
        raise ValueError(f"unknown persistent reference {kind!r}")


def _load(plan: Plan, user_ns: dict, hidden: dict) -> dict:
    """In the child: ``restore._rebuild`` over the plan, as a resume would run it."""
    objects, offset, segments = [], 0, iter(plan.segments)
    for o in plan.objects:
        if o["kind"] == "module":
            objects.append(dict(o))
            continue
        n = len(next(segments))
        objects.append({**o, "offset": offset, "length": n})
        offset += n
    stream = b"".join(plan.segments)
    doc = {"pickle": {"blob": _PICKLE, "bytes": len(stream)}, "objects": objects}
    # A resume loads into a new kernel's namespace, where no variable of the notebook exists
    # until all are loaded: so does this one, a new dict (the notebook's values are not even
    # touched: each page of the kernel's memory written here is a copy the fork has to make)
    fresh = {
        k: v
        for k, v in user_ns.items()
        if hidden.get(k, _ABSENT) is v or (k.startswith("__") and k.endswith("__"))
    }
    # ... and so is the module pickle looks names of the notebook up in: an object pickled by
    # reference to ``__main__.name`` (an ``lru_cache`` function) finds nothing there at the
    # resume; in the copy of the kernel it found the notebook's own and was called saved.
    main = types.ModuleType(user_ns.get("__name__", "__main__"))
    main.__dict__.update(fresh)
    fresh = main.__dict__
    sys.modules[main.__name__] = main  # the child's own sys.modules: the kernel keeps its own
    resolver = _Placeholders(plan, stream, fresh)
    failed: dict[str, str] = {}  # name -> why it does not restore
    unverified, why, kept = [], None, []
    with classes_by_value_forgotten():  # a class pickled by value comes from the stream
        rebuilt = list(_rebuild(doc, resolver))
    for obj, value, error in rebuilt:
        kept.append(value)  # alive until os._exit: no finalizer of a user object runs
        if error is None or obj["kind"] == "module":
            continue
        fence = _fenced(error)
        if fence:
            unverified.append(obj["name"])
            why = why or fence
        elif failed and _memo_miss(error):
            failed[obj["name"]] = _MISSES
        else:
            failed[obj["name"]] = f"does not restore: {_describe_error(error)}"
    return {"failed": failed, "unverified": unverified, "why": why}


def _memo_miss(e: BaseException) -> bool:
    """The unpickler met a reference to an object an earlier, failed segment never built."""
    return isinstance(e, pickle.UnpicklingError) and "emo value not found" in str(e)
