"""Pickle the object graph, never the bulk bytes.

Each user variable is pickled into its own segment, but all segments share one memo, so an
object reachable from two names (a model and the optimizer that holds its parameters, two names
for one tensor) is written once and comes back as one object. Torch storages and large numpy
arrays are replaced by persistent references; their bytes go to raw blobs.

Protocol 3 is used on purpose: it memoizes with explicit indices (BINPUT), which lets a segment
that fails to load be skipped without shifting the memo of the segments after it.
"""

from __future__ import annotations

import io
import pickle
import sys

import cloudpickle

PROTOCOL = 3
_FILE_TYPES = (io.FileIO, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
ARRAY_BLOB_MIN_BYTES = 16 * 1024


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

    def __init__(self, file, refs: RefTable, user_ns: dict, memo: dict | None):
        super().__init__(file, protocol=PROTOCOL)
        self.refs = refs
        self.user_ns = user_ns
        self.globals_ref[id(user_ns)] = user_ns
        if memo:
            self.memo = memo

    def persistent_id(self, obj):
        if obj is self.user_ns:
            return ("ns",)
        if isinstance(obj, _FILE_TYPES):
            # cloudpickle would save a read-mode file as its content, which restores as a
            # different object; an open file is kernel state we cannot carry over.
            name = getattr(obj, "name", None)
            raise TypeError(
                f"open file {name!r} cannot be saved"
                if name
                else f"open {type(obj).__name__} cannot be saved"
            )
        torch = _torch()
        if torch is not None:
            t = type(obj)
            if t is torch.storage.TypedStorage:
                return ("storage", self.refs.storage_ref(obj._untyped_storage), str(obj.dtype))
            if t is torch.UntypedStorage:
                return ("storage", self.refs.storage_ref(obj), None)
        np = _numpy()
        if np is not None and type(obj) is np.ndarray and obj.nbytes >= ARRAY_BLOB_MIN_BYTES:
            # A plain dtype (its descr is one text); structured and sub-array dtypes, and
            # object arrays, go through pickle with the rest of the graph.
            plain = obj.dtype.fields is None and obj.dtype.subdtype is None
            contiguous = obj.flags.c_contiguous or obj.flags.f_contiguous
            if plain and not obj.dtype.hasobject and contiguous:
                return ("array", self.refs.array_ref(obj))
        return None


def dump_segment(obj, refs: RefTable, user_ns: dict, memo: dict) -> tuple[bytes, dict]:
    """Pickle one object on top of ``memo``; returns its bytes and the grown memo.

    On error nothing is kept: the caller still holds the old memo, and ``refs`` is rolled back.
    """
    mark = refs.mark()
    buf = io.BytesIO()
    try:
        p = NamespacePickler(buf, refs, user_ns, memo)
        p.dump(obj)
        return buf.getvalue(), p.memo.copy()
    except BaseException:
        refs.rollback(mark)
        raise


class NamespaceUnpickler(pickle.Unpickler):
    """Resolves the persistent references written by NamespacePickler."""

    def __init__(self, data: bytes, resolve, previous: pickle.Unpickler | None):
        super().__init__(io.BytesIO(data))
        self._resolve = resolve
        if previous is not None:
            self.memo = previous.memo

    def persistent_load(self, pid):
        return self._resolve(pid)


class EditableMemoUnpickler(pickle._Unpickler):
    """NamespaceUnpickler in pure Python, whose memo is a plain dict shared down the chain.

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
