"""Pickle the object graph, never the bulk bytes.

Each user variable is pickled into its own segment, but all segments share one memo, so an
object reachable from two names (a model and the optimizer that holds its parameters, two names
for one tensor) is written once and comes back as one object. Torch storages and large numpy
arrays are replaced by persistent references; their bytes go to raw blobs.

Protocol 3 is used on purpose: it memoizes with explicit indices (BINPUT), which lets a segment
that fails to load be skipped without shifting the memo of the segments after it.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import io
import pickle
import sys
import types

import cloudpickle

PROTOCOL = 3
_FILE_TYPES = (io.FileIO, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
# A numpy array from this size on is a blob of its own (written once, deduplicated by later
# pauses); a smaller one goes inline in the pickle stream: each blob costs a file, an fsync and
# a read-back, which for a DataFrame's columns cost more than their bytes.
ARRAY_BLOB_MIN_BYTES = 1024 * 1024
# Types that are never a reference of ours: persistent_id answers them first (it runs per object)
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), tuple, list, dict, set, complex})
# What a *plain* segment may hold besides _PLAIN (``NamespacePickler.plain``): objects whose
# rebuild is pickle's, numpy's or torch's own fixed functions, fed only with built-in values,
# so that it cannot fail where the pickling succeeded. The test-restore (``trial.py``) skips
# plain segments. Any other type (a user's class, a library's model, a by-value function)
# makes its segment one that is test-restored.
_TRUSTED_ROOTS = frozenset({"numpy"})  # every type of these packages, and their functions
_TRUSTED_CLASSES = frozenset({"builtins", "collections", "numpy"})  # classes by reference
_TRUSTED_FUNCTIONS = frozenset({"torch._utils"})  # functions by reference
_TRUSTED_TORCH = ("Tensor", "nn.Parameter", "storage.TypedStorage", "UntypedStorage")


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector held off while a capture pickles or a restore
    unpickles, and put back as it was (a user who turned it off keeps it off).

    Both make thousands of containers that stay alive, and so trigger collections that find
    nothing to free; a full one, due in a kernel that has just imported torch or pandas, walks
    every object of the process: measured at ~50 ms inside a 2 500-variable restore whose
    unpickling takes 10 ms. Deferred, it runs later at the cost it would have had anyway.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


class RefTable:
    """Storages and arrays found while pickling, in first-seen order."""

    def __init__(self):
        self.storages: list = []  # untyped torch storages
        self._storage_index: dict[int, int] = {}
        self.arrays: list = []  # numpy arrays
        self._array_index: dict[int, int] = {}

    def mark(self) -> tuple[int, int]:
        return len(self.storages), len(self.arrays)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Forget what a failed segment added."""
        for s in self.storages[mark[0] :]:
            self._storage_index.pop(s._cdata, None)
        for a in self.arrays[mark[1] :]:
            self._array_index.pop(id(a), None)
        del self.storages[mark[0] :]
        del self.arrays[mark[1] :]

    def storage_ref(self, untyped) -> int:
        key = untyped._cdata
        if key not in self._storage_index:
            self._storage_index[key] = len(self.storages)
            self.storages.append(untyped)
        return self._storage_index[key]

    def array_ref(self, arr) -> int:
        if id(arr) not in self._array_index:
            self._array_index[id(arr)] = len(self.arrays)
            self.arrays.append(arr)
        return self._array_index[id(arr)]


class NamespacePickler(cloudpickle.Pickler):
    """cloudpickle with persistent references for bulk data and for the user namespace itself.

    Functions defined in the notebook are pickled by value by cloudpickle; pointing their
    globals at the namespace (rather than a copy) means that after restore they read the live
    namespace again, so rebinding a global changes what the function sees.
    """

    def __init__(self, file, refs: RefTable, user_ns: dict):
        super().__init__(file, protocol=PROTOCOL)
        self.refs = refs
        self.user_ns = user_ns
        self.globals_ref[id(user_ns)] = user_ns
        # Looked up once: persistent_id runs for every object of the graph
        torch, np = _torch(), _numpy()
        self._typed = torch.storage.TypedStorage if torch is not None else None
        self._untyped = torch.UntypedStorage if torch is not None else None
        self._ndarray = np.ndarray if np is not None else None
        self.modules: set[str] = set()  # where the graph's classes come from (``packages``)
        # the current segment holds only _PLAIN and trusted objects (see _TRUSTED_ROOTS)
        self.plain = True
        self._trusted_types = {_resolve(torch, n) for n in _TRUSTED_TORCH} if torch else set()

    def persistent_id(self, obj):
        if obj is self.user_ns:
            return ("ns",)
        t = type(obj)
        if t in _PLAIN:
            return None
        self.modules.add(t.__module__)
        if self.plain and not self._trusted(obj, t):
            self.plain = False
        if t is type:  # a class pickled by reference
            self.modules.add(getattr(obj, "__module__", None) or "builtins")
        if isinstance(obj, _FILE_TYPES):
            # cloudpickle would save a read-mode file as its content, which restores as a
            # different object; an open file is kernel state we cannot carry over.
            name = getattr(obj, "name", None)
            raise TypeError(
                f"open file {name!r} cannot be saved"
                if name
                else f"open {type(obj).__name__} cannot be saved"
            )
        if t is self._typed:
            return ("storage", self.refs.storage_ref(obj._untyped_storage), str(obj.dtype))
        if t is self._untyped:
            return ("storage", self.refs.storage_ref(obj), None)
        if t is self._ndarray and obj.nbytes >= ARRAY_BLOB_MIN_BYTES:
            # A plain dtype (its descr is one text); structured and sub-array dtypes, and
            # object arrays, go through pickle with the rest of the graph.
            plain = obj.dtype.fields is None and obj.dtype.subdtype is None
            contiguous = obj.flags.c_contiguous or obj.flags.f_contiguous
            if plain and not obj.dtype.hasobject and contiguous:
                return ("array", self.refs.array_ref(obj))
        return None

    def _trusted(self, obj, t) -> bool:
        if t in self._trusted_types or t.__module__.partition(".")[0] in _TRUSTED_ROOTS:
            return True
        module = getattr(obj, "__module__", None) or ""
        if t is type:
            return module.partition(".")[0] in _TRUSTED_CLASSES
        if t is types.BuiltinFunctionType:
            return module.partition(".")[0] in _TRUSTED_ROOTS
        if t is types.FunctionType:  # by reference only where it is a module's own function
            return module in _TRUSTED_FUNCTIONS and "<" not in obj.__qualname__
        return t is collections.OrderedDict


def _resolve(root, dotted: str):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


class SegmentPickler:
    """Pickles variables one segment each, all on one pickler and so on one memo.

    One pickler for the whole capture: the memo grows as it goes, never copied (a copy per
    variable made a namespace of 2 000 variables take seconds, quadratic in its size). A
    variable that fails to pickle may have memoized objects whose bytes never reached the
    stream, so the pickler then starts over, replaying the variables that did pickle: costly,
    but only on that rare path, and the stream stays one a loader can follow.
    """

    def __init__(self, refs: RefTable, user_ns: dict):
        self.refs, self.user_ns = refs, user_ns
        self._objects: list = []  # the variables pickled so far, in order
        self._start()

    def _start(self) -> None:
        self._buf = io.BytesIO()
        self._pickler = NamespacePickler(self._buf, self.refs, self.user_ns)
        self._ends: list[int] = []
        self._plain: list[bool] = []

    def dump(self, obj) -> int:
        """Pickle one more variable; returns its segment's size. On error nothing of it is
        kept (``refs`` rolled back, the stream as before) and the error is raised."""
        mark = self.refs.mark()
        start = self._buf.tell()
        try:
            self._dump(obj)
        except BaseException:
            self.refs.rollback(mark)
            done, self._objects = self._objects, []
            self._start()
            for o in done:
                self._dump(o)
            raise
        return self._ends[-1] - start

    def _dump(self, obj) -> None:
        self._pickler.plain = True
        self._pickler.dump(obj)
        self._objects.append(obj)
        self._ends.append(self._buf.tell())
        self._plain.append(self._pickler.plain)

    def packages(self) -> list[str]:
        """The top-level packages the pickled classes come from (``torch``, ``pandas``): what
        a warm kernel imports ahead of a restore (``server/kernels/spares.py``)."""
        roots = {m.split(".", 1)[0] for m in self._pickler.modules if isinstance(m, str)}
        return sorted(
            r
            for r in roots
            if r.isidentifier() and not r.startswith("_") and r != "builtins" and r in sys.modules
        )

    def plain(self) -> list[bool]:
        """Per segment, whether it holds only built-in and trusted objects (``_TRUSTED_*``)."""
        return list(self._plain)

    def segments(self) -> list[bytes]:
        """The segments, in the order their variables were pickled."""
        data = self._buf.getbuffer()
        starts = [0, *self._ends][: len(self._ends)]
        return [bytes(data[a:b]) for a, b in zip(starts, self._ends, strict=True)]


class StreamUnpickler(pickle.Unpickler):
    """The whole pickle stream on one C unpickler: segment after segment on one memo.

    Each segment is loaded from its offset (``load_at``); the memo simply carries on, as a
    capture's one pickler wrote it. A new unpickler per segment would have to copy the memo
    into each (the C unpickler takes an assigned memo by copy): quadratic in the variables.
    """

    def __init__(self, stream: bytes, resolve):
        self._file = io.BytesIO(stream)  # no peek(): the unpickler reads no further than asked
        super().__init__(self._file)
        self._resolve = resolve

    def load_at(self, offset: int):
        self._file.seek(offset)
        return self.load()

    def persistent_load(self, pid):
        return self._resolve(pid)


class EditableMemoUnpickler(pickle._Unpickler):
    """StreamUnpickler in pure Python, one per object, whose memo is a plain dict shared down
    the chain.

    Used only when a checkpoint has a damaged blob: what a damaged object memoized must then
    be forgotten (``restore._forget_damaged``), and the C unpickler's memo cannot be edited
    (assigning it a dict leaves it empty). Slower, but only on that rare path.
    """

    def __init__(self, data: bytes, resolve, previous: pickle._Unpickler | None):
        super().__init__(io.BytesIO(data))
        self._resolve = resolve
        self.memo = previous.memo if previous is not None else ForgettingMemo()

    def persistent_load(self, pid):
        return self._resolve(pid)


class ForgettingMemo(dict):
    """A memo that remembers what it forgot: a later object referring to a forgotten entry
    fails saying which object it needed, not with pickle's bare "memo value not found"."""

    def __init__(self):
        super().__init__()
        self.forgotten: dict = {}  # memo key -> why it was forgotten

    def forget(self, key, why: str) -> None:
        del self[key]
        self.forgotten[key] = why

    def __missing__(self, key):
        if key in self.forgotten:
            raise pickle.UnpicklingError(self.forgotten[key])
        raise KeyError(key)
