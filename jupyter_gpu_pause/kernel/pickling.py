"""Pickle the object graph, never the bulk bytes.

Each user variable is pickled into its own segment, but all segments share one memo, so an
object reachable from two names (a model and the optimizer that holds its parameters, two names
for one tensor) is written once and comes back as one object. Torch storages and large numpy
arrays are replaced by persistent references; their bytes go to raw blobs.

Protocol 3 is used on purpose: it memoizes with explicit indices (BINPUT), which lets a segment
that fails to load be skipped without shifting the memo of the segments after it.

A numpy view of an array the notebook holds (``x = data[:, :-1]``) is pickled as a view of that
array (``_view_of``), not as a copy: after a resume, writing through one is still seen through
the other, as it was before the pause.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import importlib
import io
import pickle
import sys
import threading
import types
from typing import Any

from .deps import cloudpickle, local_module

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
# functions by reference: torch's rebuilders, and ours of a numpy view (``_view_of``)
_TRUSTED_FUNCTIONS = frozenset({"torch._utils", __name__})
# Exact types only: a subclass of ndarray or Tensor (``recarray``, a masked array,
# ``nn.Parameter``, a user's Tensor subclass) is rebuilt by its own reduce and state, which can
# fail where plain arrays do not: its segment is test-restored (``_trusted``).
_TRUSTED_TORCH = ("Tensor", "storage.TypedStorage", "UntypedStorage", "dtype")
# torch's rebuilds of a tensor that do not take its ``requires_grad`` (``_requiring_grad``)
_GRADLESS = ("_rebuild_sparse_tensor", "_rebuild_nested_tensor")


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


@contextlib.contextmanager
def classes_by_value_forgotten():
    """cloudpickle's record of the classes it pickled by value, empty for a while, as in a
    new kernel.

    A class pickled by value is tagged with an id, and unpickling it in the process that
    pickled it (a forked test-restore, a test) hands back the live class of that id, not the
    class rebuilt from the stream; a new kernel has only the stream. Without this, a class
    whose rebuild fails (``np.recarray`` by value: ``_find_home``) passed the test-restore
    and failed the resume. ``_lookup_class_or_track`` reads both globals at each call.
    """
    module: Any = cloudpickle.cloudpickle  # its privates are not typed
    saved = module._DYNAMIC_CLASS_TRACKER_BY_ID, module._DYNAMIC_CLASS_TRACKER_BY_CLASS
    lock = module._DYNAMIC_CLASS_TRACKER_LOCK
    # a new lock too: in a forked child, another thread of the kernel may have held it
    module._DYNAMIC_CLASS_TRACKER_LOCK = threading.Lock()
    module._DYNAMIC_CLASS_TRACKER_BY_ID = type(saved[0])()
    module._DYNAMIC_CLASS_TRACKER_BY_CLASS = type(saved[1])()
    try:
        yield
    finally:
        module._DYNAMIC_CLASS_TRACKER_BY_ID, module._DYNAMIC_CLASS_TRACKER_BY_CLASS = saved
        module._DYNAMIC_CLASS_TRACKER_LOCK = lock


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

    def __init__(self, file, refs: RefTable, user_ns: dict, saved=None):
        super().__init__(file, protocol=PROTOCOL)
        self.refs = refs
        self.user_ns = user_ns
        self.globals_ref[id(user_ns)] = user_ns
        # Looked up once: persistent_id runs for every object of the graph
        torch, np = _torch(), _numpy()
        self._typed = torch.storage.TypedStorage if torch is not None else None
        self._untyped = torch.UntypedStorage if torch is not None else None
        self._ndarray = np.ndarray if np is not None else None
        self._tensor = torch.Tensor if torch is not None else None
        self._gradless = {getattr(torch._utils, n, None) for n in _GRADLESS} if torch else set()
        self.modules: set[str] = set()  # where the graph's classes come from (``packages``)
        # the current segment holds only _PLAIN and trusted objects (see _TRUSTED_ROOTS)
        self.plain = True
        self._trusted_types = {_resolve(torch, n) for n in _TRUSTED_TORCH} if torch else set()
        # the arrays a view is pickled as a view of (``_view``): the notebook's own, which are
        # saved anyway, so a view costs no bytes of its own; a view of an array the notebook
        # does not hold is a copy of what it shows, never the whole array behind it
        self._roots = _roots(_saved(user_ns, saved), self._ndarray) if self._ndarray else {}
        self._bounds: dict = {}  # id of a root -> its ``_bounds``, found when first needed
        self._blob_dtypes: dict = {}  # dtype -> whether its descr gives it back (``_blob``)
        self._homeless: set[str] = set()  # modules ``_find_home`` could not import

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
            contiguous = obj.flags.c_contiguous or obj.flags.f_contiguous
            if contiguous and self._blob(obj.dtype) and self._view(obj) is None:
                return ("array", self.refs.array_ref(obj))
        return None

    def reducer_override(self, obj):
        t = type(obj)
        nd = self._ndarray
        if t is nd:
            view = self._view(obj)
            if view is not None:
                return view
        if nd is not None and isinstance(obj, nd):
            if obj.dtype.fields is None and not obj.dtype.isnative:
                return self._byte_order_reduce(obj)
        elif t is self._tensor or (self._tensor is not None and self._tensor in t.__mro__):
            return self._tensor_reduce(obj)
        elif t is types.FunctionType or isinstance(obj, type):
            self._find_home(obj)
        return super().reducer_override(obj)

    def _byte_order_reduce(self, arr):
        """``arr``, of a non-native byte order, as its bytes under the native order and then
        viewed back (``_byte_order``).

        numpy's own reduce (protocols below 5) gives such an array back byte-swapped into
        the native order: equal values, but ``>i4`` comes back ``int32``, and a file
        format's header or a ``view`` the user meant for those bytes is then wrong.
        A plain ndarray's bytes are copied, so that they are not a view of ``arr`` itself
        (``_view`` would pickle that as a view of ``arr``, and so on without end).
        """
        native = arr.view(arr.dtype.newbyteorder("="))
        if type(arr) is self._ndarray:
            native = native.copy(order="K")
        fill = getattr(arr, "_fill_value", None)  # a masked array's; its view dropped it
        return _byte_order, (native, arr.dtype) if fill is None else (native, arr.dtype, fill)

    def _tensor_reduce(self, tensor):
        """torch's own reduce of a tensor (or of a subclass: its rebuild wraps the tensor's,
        ``_rebuild_from_type_v2``), mended where torch's rebuild counts on ``torch.load``.

        For the dtypes of ``torch.storage._new_dtypes()`` (uint16/32/64, float8, complex32)
        torch passes ``_rebuild_tensor_v3`` an ``UntypedStorage`` and counts on its loader
        to hand back a ``TypedStorage``, whose ``_untyped_storage`` the rebuild reads: ours
        gives back what was pickled, so such a tensor failed to restore ("'UntypedStorage'
        object has no attribute '_untyped_storage'"). Typed as bytes here, the storage is
        still the one other tensors share (``storage_ref``). And the rebuild of a sparse or
        nested tensor drops ``requires_grad``: ``_requiring_grad`` sets it again.
        """
        torch = _torch()
        reduced = tensor.__reduce_ex__(PROTOCOL)
        if reduced[0] is torch._tensor._rebuild_from_type_v2:
            func, kind, args, state = reduced[1]
            func, args = self._mend(tensor, func, args)
            return reduced[0], (func, kind, args, state)
        return (*self._mend(tensor, *reduced[:2]), *reduced[2:])

    def _mend(self, tensor, func, args) -> tuple:
        torch = _torch()
        if func is torch._utils._rebuild_tensor_v3 and type(args[0]) is self._untyped:
            typed = torch.storage.TypedStorage(
                wrap_storage=args[0], dtype=torch.uint8, _internal=True
            )
            args = (typed, *args[1:])
        if tensor.requires_grad and func in self._gradless:
            func, args = _requiring_grad, (func, args)
        return func, args

    def _blob(self, dtype) -> bool:
        """Whether an array of ``dtype`` can be a blob: its manifest descr (``dtype_to_descr``)
        must give back this very dtype. Structured, sub-array, object dtypes, dtypes with
        metadata, numpy 2's ``StringDType`` and a library's own (``ml_dtypes``' bfloat16 reads
        back as ``V2``) do not: those arrays go through pickle, which keeps their dtype."""
        ok = self._blob_dtypes.get(dtype)
        if ok is None:
            fmt = sys.modules["numpy"].lib.format
            ok = (
                dtype.fields is None
                and dtype.subdtype is None
                and dtype.metadata is None
                and _bytes_only(dtype)
            )
            if ok:
                try:
                    back = fmt.descr_to_dtype(fmt.dtype_to_descr(dtype))
                    ok = type(back) is type(dtype) and back == dtype
                except (TypeError, ValueError):
                    ok = False
            self._blob_dtypes[dtype] = ok
        return ok

    def _view(self, arr):
        """``arr`` as a view of the notebook's array whose memory it lies in (``_view_of``),
        or None where it is pickled as an array of its own.

        The array looked into is a root (``_roots``): a plain, contiguous ndarray of the
        namespace, of a dtype whose values are bytes; of those holding ``arr``'s bytes, the
        largest (then the first in the namespace). It is itself saved as an array of its own:
        no root ranks before it. Any other array is pickled by its own reduce, as a copy of
        what it shows.
        """
        if arr.size == 0 or not _bytes_only(arr.dtype):
            return None
        group = self._roots.get(id(_owner(arr, self._ndarray)))
        if not group or group[0][1] is arr:  # most often: an array alone on its memory
            return None
        low, high = _bounds(arr)
        for _rank, root in group:  # best first
            if root is arr:
                return None
            start, end = self._bounds.get(id(root)) or self._bounds.setdefault(
                id(root), _bounds(root)
            )
            if start <= low and high <= end:
                offset = arr.__array_interface__["data"][0] - start
                return _view_of, (root, arr.dtype, arr.shape, arr.strides, offset)
        return None

    def _find_home(self, obj) -> None:
        """Import the module a class or function says it lives in, when its package is loaded.

        cloudpickle pickles a class *by value* when its ``__module__`` is not in sys.modules,
        and numpy 2 names lazily imported modules there: ``np.recarray`` says ``numpy.rec``,
        which ``import numpy`` does not import. By value, its methods are pickled as
        attributes of the class being rebuilt, which has none yet: a new kernel fails with
        "type object 'recarray' has no attribute 'field'". Imported, it is pickled by
        reference, as plain pickle (which imports it too) does.
        """
        module = getattr(obj, "__module__", None)
        if type(module) is not str or module in sys.modules or module in self._homeless:
            return
        root = module.partition(".")[0]
        if root == module or root not in sys.modules:
            self._homeless.add(module)
            return
        try:
            importlib.import_module(module)
        except Exception:
            self._homeless.add(module)

    def _trusted(self, obj, t) -> bool:
        if t in self._trusted_types:
            return True
        if t.__module__.partition(".")[0] in _TRUSTED_ROOTS:
            # numpy's own types, but not an ndarray subclass (recarray, matrix, masked
            # arrays, memmap): those are rebuilt by their own reduce and state
            nd = self._ndarray
            return nd is None or t is nd or not isinstance(obj, nd)
        module = getattr(obj, "__module__", None) or ""
        if t is type:
            return module.partition(".")[0] in _TRUSTED_CLASSES
        if t is types.BuiltinFunctionType:
            return module.partition(".")[0] in _TRUSTED_ROOTS
        if t is types.FunctionType:  # by reference only where it is a module's own function
            return module in _TRUSTED_FUNCTIONS and "<" not in obj.__qualname__
        return t is collections.OrderedDict


def _bytes_only(dtype) -> bool:
    """A dtype whose values are their bytes (no object references, no string arena)."""
    return not dtype.hasobject and dtype.kind in "biufcmMSUV" and dtype.itemsize > 0


def _owner(arr, ndarray):
    """What holds ``arr``'s memory: the end of its chain of bases (an ndarray that owns its
    data, or another object: ``bytes``, an ``mmap``, a torch tensor's memory)."""
    while isinstance(arr, ndarray) and arr.base is not None:
        arr = arr.base
    return arr


def _bounds(arr) -> tuple[int, int]:
    """The addresses of ``arr``'s first and one past its last byte (not empty)."""
    low = high = arr.__array_interface__["data"][0]
    for n, stride in zip(arr.shape, arr.strides):
        if stride < 0:
            low += stride * (n - 1)
        else:
            high += stride * (n - 1)
    return low, high + arr.itemsize


def _saved(user_ns: dict, saved) -> list:
    """The values of the names a capture saves (``saved``; by default the namespace's public
    names, as a namespace capture saves them): an array only IPython's ``_5`` holds is no
    root, or a view of it would bring it whole into the checkpoint."""
    if saved is not None:
        return [user_ns[n] for n in saved if n in user_ns]
    return [v for k, v in user_ns.items() if isinstance(k, str) and not k.startswith("_")]


def _roots(values: list, ndarray) -> dict:
    """The arrays views are pickled as views of (``NamespacePickler._view``), by the id of
    their memory's owner: ``(rank, array)``, best first (the largest, then the first in the
    namespace; a contiguous array spans its ``nbytes``)."""
    groups: dict = {}
    seen: set = set()
    for index, value in enumerate(values):
        if type(value) is not ndarray or id(value) in seen or value.size == 0:
            continue
        seen.add(id(value))
        if not (value.flags.c_contiguous or value.flags.f_contiguous):
            continue
        if not _bytes_only(value.dtype):
            continue
        groups.setdefault(id(_owner(value, ndarray)), []).append(((-value.nbytes, index), value))
    for group in groups.values():
        group.sort(key=lambda entry: entry[0])
    return groups


def _requiring_grad(rebuild, args):
    """A tensor whose rebuild (``pickling._GRADLESS``) leaves out ``requires_grad``, rebuilt
    requiring grad, as it did (a leaf, as after ``torch.load``)."""
    return rebuild(*args).requires_grad_(True)


def _byte_order(native, dtype, fill=None):
    """The array ``NamespacePickler._byte_order_reduce`` saved: its bytes, viewed as ``dtype``
    again; a masked array's ``fill_value`` set again (numpy drops it on a view to another
    dtype)."""
    out = native.view(dtype)
    if fill is not None:
        out.fill_value = fill
    return out


def _view_of(root, dtype, shape, strides, offset):
    """A view into ``root`` (``NamespacePickler._view``): ``offset`` bytes from its start, in
    its memory order; ``root`` comes back with the layout it was saved with, so the offset
    and strides of the view still fit it."""
    import numpy as np

    memory = root.ravel(order="K").view(np.uint8)
    return np.ndarray(shape, dtype, buffer=memory, offset=offset, strides=strides)


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

    def __init__(self, refs: RefTable, user_ns: dict, saved=None):
        """``saved``: the names this capture saves, whose arrays views are pickled as views
        of (``NamespacePickler._view``); None: the namespace's public names."""
        self.refs, self.user_ns, self._saved = refs, user_ns, saved
        self._objects: list = []  # the variables pickled so far, in order
        self._start()

    def _start(self) -> None:
        self._buf = io.BytesIO()
        self._pickler = NamespacePickler(self._buf, self.refs, self.user_ns, self._saved)
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
        return [bytes(data[a:b]) for a, b in zip(starts, self._ends)]


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

    def find_class(self, module, name):  # cloudpickle's functions under either name (deps.py)
        return super().find_class(local_module(module), name)

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

    def __init__(self, data: bytes, resolve, previous: EditableMemoUnpickler | None):
        super().__init__(io.BytesIO(data))
        self._resolve = resolve
        self.memo: ForgettingMemo = previous.memo if previous is not None else ForgettingMemo()

    def find_class(self, module, name):
        return super().find_class(local_module(module), name)

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
