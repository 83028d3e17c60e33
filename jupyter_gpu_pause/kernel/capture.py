"""Capture: decide what to save, pickle the object graph, write the bulk bytes as blobs.

The plan (pickling) happens before anything is written, so a registered name that cannot be
saved fails the pause before the store is touched. Capture only reads user objects; it never
changes the namespace.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ..store import Store
from ..store.schema import HOOKS_OBJECT
from ..store.sources import BufferSource, Source, source_hash
from ..store.writes import WRITERS, Threads
from .pickling import RefTable, SegmentPickler, collector_paused
from .staging import BUFFERS, Staging, cuda_staging, download

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from ..store.spool import SpoolStore

IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
HOOKS_NAME = "on_pause/on_restore hooks"  # the hooks' name where they are skipped
MAX_REASON = 500  # characters of an exception's first line kept as the reason of a skip
# Blobs are hashed, announced (``before_reuse``), looked up and written in batches of at most
# this many blobs or about this many bytes. The first batches are smaller (FIRST_BATCH_BYTES,
# doubling), so that writing starts soon: the batch after is hashed while one is written.
BATCH_BLOBS = 64
BATCH_BYTES = 1 << 30
FIRST_BATCH_BYTES = 64 << 20


class CaptureError(Exception):
    """The pause cannot go ahead; nothing was changed in the kernel."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class Plan:
    """What a capture would write: object segments, the bulk references and what is skipped."""

    objects: list = field(default_factory=list)
    segments: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    refs: RefTable = field(default_factory=RefTable)
    packages: list = field(default_factory=list)  # top-level packages of the pickled classes
    # per segment: only built-in and trusted objects (pickling.py), which the test-restore skips
    plain: list = field(default_factory=list)
    # saved, but not test-restored (trial.py): {"reason", "names"}, or None
    unverified: dict | None = None
    # the cell log (cells.py) as JSON, written as its own blob so a resume can rebuild
    cells: bytes | None = None
    # the process state around the namespace (ambient/), its own blob, and what it carries
    ambient: bytes | None = None
    ambient_report: dict | None = None

    @property
    def total_bytes(self) -> int:
        """Bytes the checkpoint writes: its objects', the cell log's and the ambient state's
        (blobs too, so the writing's progress never counts past its total)."""
        extra = len(self.cells or b"") + len(self.ambient or b"")
        return sum(o["bytes"] for o in self.objects) + extra


def _is_internal(name, value, hidden: dict) -> bool:
    if not isinstance(name, str) or name in IPYTHON_NAMES or name.startswith("_"):
        return True
    return name in hidden and hidden[name] is value


def _describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _storage_nbytes(s) -> int:
    return int(s.nbytes())


def make_plan(
    user_ns: dict, hidden: dict, registered: list[str], mode: str, hooks: dict | None = None
) -> Plan:
    """Pickle the chosen names; raise CaptureError if a registered one cannot be saved."""
    with collector_paused():
        return _make_plan(user_ns, hidden, registered, mode, hooks)


def _make_plan(
    user_ns: dict, hidden: dict, registered: list[str], mode: str, hooks, exclude=None
) -> Plan:
    """``exclude``: names (and HOOKS_OBJECT) -> why they cannot be saved, found by a
    test-restore (``trial.py``); they are skipped, a registered one fails the plan."""
    exclude = exclude or {}
    for name in registered:
        if name not in user_ns:
            raise CaptureError(
                f"'{name}' is registered but not defined in the notebook", "registered-missing"
            )
    names = [(n, True) for n in registered]
    plan = Plan()
    if mode == "namespace":
        for n, v in list(user_ns.items()):
            if n in registered or _is_internal(n, v, hidden):
                continue
            if n.isidentifier():
                names.append((n, False))
            else:  # set through globals(): it could not be restored as a variable anyway
                plan.skipped.append({"name": repr(n)[:200], "reason": "not a variable name"})
    # the names saved: a view of an array one of them holds is saved as a view of it
    pickler = SegmentPickler(plan.refs, user_ns, saved=[n for n, _ in names])
    for name, required in names:
        value = user_ns[name]
        if isinstance(value, types.ModuleType):
            plan.objects.append(
                {
                    "name": name,
                    "kind": "module",
                    "module": value.__name__,
                    "bytes": 0,
                    "required": required,
                }
            )
            continue
        if name in exclude:
            _refuse(plan, name, required, exclude[name])
            continue
        mark = plan.refs.mark()
        try:
            size = pickler.dump(value)
        except Exception as e:
            _refuse(plan, name, required, _describe_error(e), e)
            continue
        bulk = 0
        if plan.refs.mark() != mark:  # this variable brought bulk data
            bulk = sum(_storage_nbytes(s) for s in plan.refs.storages[mark[0] :])
            bulk += sum(int(a.nbytes) for a in plan.refs.arrays[mark[1] :])
        plan.objects.append(
            {"name": name, "kind": "pickle", "required": required, "bytes": size + bulk}
        )
    if hooks and any(hooks.values()) and HOOKS_OBJECT in exclude:
        plan.skipped.append({"name": HOOKS_NAME, "reason": exclude[HOOKS_OBJECT]})
    elif hooks and any(hooks.values()):
        try:
            size = pickler.dump(hooks)
            plan.objects.append(
                {"name": HOOKS_OBJECT, "kind": "hooks", "required": False, "bytes": size}
            )
        except Exception as e:
            plan.skipped.append({"name": HOOKS_NAME, "reason": _describe_error(e)})
    plan.segments = pickler.segments()
    plan.plain = pickler.plain()
    plan.packages = pickler.packages()
    return plan


def _refuse(plan: Plan, name: str, required: bool, reason: str, cause=None) -> None:
    """``name`` cannot be saved: skipped, or the whole plan refused if it is registered."""
    if required:
        raise CaptureError(
            f"registered variable '{name}' cannot be saved ({reason})", "registered-unsaveable"
        ) from cause
    plan.skipped.append({"name": name, "reason": reason})


class DeviceSource:
    """The bytes of a storage on a GPU (any non-CPU device), copied to host memory one part at
    a time as the store asks for them, so a pause never holds a whole GPU tensor in host RAM.

    The store's passes in order (hashing, writing a local file) ask for ``stream``: with a
    ``staging`` area the parts go through its pinned buffers, the copy of the next part
    running while the store hashes or writes this one. ``chunk`` serves parts asked for in
    any order and kept by requests in flight (S3 uploads): each is a host copy of its own.
    """

    def __init__(self, untyped, staging: Staging | None = None):
        import torch

        self.nbytes = int(untyped.nbytes())
        self._flat = torch.empty(0, dtype=torch.uint8, device=untyped.device)
        self._flat.set_(untyped, 0, (self.nbytes,), (1,))
        self._staging = staging

    def chunk(self, offset: int, n: int) -> memoryview:
        return memoryview(cast("ReadableBuffer", self._flat[offset : offset + n].cpu().numpy()))

    def stream(self, step: int):
        """The bytes in order, each part valid until the next is asked for (``sources.chunks``)."""
        if self._staging is None:
            offsets = range(0, self.nbytes, step)
            return (self.chunk(off, min(step, self.nbytes - off)) for off in offsets)
        return download(self._staging, self._flat, self.nbytes, step)


def storage_key(untyped) -> tuple:
    """What tells one storage from another without touching its device (no CUDA call)."""
    return (str(untyped.device), int(untyped.data_ptr()), int(untyped.nbytes()))


def host_copies(storages, have: dict | None = None) -> dict:
    """A host copy of every GPU storage in ``storages`` not in ``have`` yet, by ``storage_key``.

    Made before a kernel is suspended in place: from then on its CUDA calls block until it is
    restored, so its checkpoint is written from these copies only (``write_plan(host=...)``).
    Pageable memory: pinning gigabytes costs more than the copy gains, and a pinned buffer
    could not be freed while the process is suspended."""
    import torch

    out = dict(have or {})
    for s in storages:
        if s.device.type == "cpu" or storage_key(s) in out:
            continue
        n = int(s.nbytes())
        flat = torch.empty(0, dtype=torch.uint8, device=s.device).set_(s, 0, (n,), (1,))
        out[storage_key(s)] = flat.to("cpu").numpy()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out


def _storage_source(untyped, staging: Staging | None = None, host: dict | None = None):
    """A CPU storage is read in place; another device's from its host copy (``host``: the
    kernel is suspended), else (or one ``staging`` copies, in tests) through DeviceSource."""
    import torch

    if host is not None and untyped.device.type != "cpu":
        copy = host.get(storage_key(untyped))
        if copy is None:
            raise CaptureError(
                "a GPU tensor was not copied to host memory before the kernel was suspended",
                "agent-error",
            )
        return BufferSource(copy)
    if staging is not None and staging.copier.handles(untyped.device):
        return DeviceSource(untyped, staging)
    if untyped.device.type != "cpu":
        return DeviceSource(untyped)
    n = untyped.nbytes()
    if n == 0:
        return BufferSource(b"")
    flat = torch.empty(0, dtype=torch.uint8).set_(untyped, 0, (n,), (1,))
    return BufferSource(flat.numpy())


def _array_source(arr):
    import numpy as np

    return BufferSource(np.ravel(arr, order="K").view(np.uint8))


@dataclass
class _Blob:
    """One blob to write: its source, its manifest description, and later its hash."""

    src: Source
    kind: str
    extra: dict
    h: str = ""


def _batches(blobs: list[_Blob]) -> list[list[_Blob]]:
    """Runs of at most BATCH_BLOBS blobs or about BATCH_BYTES bytes, in order; the first one of
    about FIRST_BATCH_BYTES, each next one up to twice the one before."""
    out, batch, size, limit = [], [], 0, FIRST_BATCH_BYTES
    for b in blobs:
        batch.append(b)
        size += b.src.nbytes
        if len(batch) >= BATCH_BLOBS or size >= limit:
            out.append(batch)
            batch, size, limit = [], 0, min(2 * limit, BATCH_BYTES)
    return out + [batch] if batch else out


def _hash_batch(batch: list[_Blob], stop: threading.Event, name_of) -> None:
    for b in batch:
        if stop.is_set():
            return
        b.h = name_of(b.src, stop)


class _HashedAhead:
    """The batches in order, each with its blobs hashed; while the caller announces, looks up
    and writes one batch, the next is hashed on a thread of its own (xxh3, a staging copy and
    the writers' system calls all release the GIL). The first batch is hashed by the caller
    (a plan of one batch, most small notebooks, starts no thread), unless it is ``staged``.

    With ``staged`` sources (parts in staging buffers) the caller's thread never streams one:
    an interrupt there could come between taking a buffer and noting it. Leaving early (an
    error, an interrupt) stops the hashing at its next part; the thread is waited for after an
    error, or when ``staged`` (its buffers are freed after the pause).
    """

    def __init__(self, batches: list[list[_Blob]], staged: bool, name_of=source_hash):
        self._name_of = name_of  # the store's: a blob's hash, or a spool's provisional name
        self._batches = batches
        self._staged = staged
        self._stop = threading.Event()
        self._pool = Threads(max_workers=1, thread_name_prefix="gp-hash")

    def __enter__(self) -> _HashedAhead:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            self._stop.set()
        wait = kind is None or self._staged or issubclass(kind, Exception)
        self._pool.close(wait)

    def _submit(self, batch: list[_Blob]):
        return self._pool.submit(_hash_batch, batch, self._stop, self._name_of)

    def __iter__(self):
        ahead = None
        for i, batch in enumerate(self._batches):
            if ahead is None and not self._staged:
                _hash_batch(batch, self._stop, self._name_of)  # the first: nothing to overlap with
            else:
                (ahead or self._submit(batch)).result()  # its error (a failed copy) is ours
            if i + 1 < len(self._batches):
                ahead = self._submit(self._batches[i + 1])
            yield batch


def pause_buffers(store: Store | SpoolStore) -> int:
    """Staging buffers a pause of GPU tensors uses: one per local writer and two for the
    hashing (a remote store's writes copy parts on their own, ``DeviceSource.chunk``)."""
    return WRITERS + 2 if store.local else BUFFERS


def write_plan(
    plan: Plan,
    store: Store | SpoolStore,
    progress=None,
    verify: bool = True,
    before_reuse=None,
    staging: Staging | None = None,
    host: dict | None = None,
) -> dict:
    """Write every blob of the plan (skipping those already stored) and describe them.

    Blobs go in batches (``_batches``): hash the batch, tell ``before_reuse(hashes)`` which
    blobs the checkpoint will reference (garbage collection must then keep them) and only then
    ask the store which of them it already has: those are not written again. ``verify``
    re-reads each newly written blob and checks it, so a bad disk or a torn upload is caught
    while the kernel, and so the state, still exists.

    An interrupt (the server cancelling the pause) ends this at once: requests in flight are
    cancelled and nothing waits for a store that does not answer. The namespace is only read.

    The batch after the one being written is hashed meanwhile on a thread of its own, and on a
    local disk several blobs are written at once (``store.writes``), so the disk is kept busy.

    GPU storages are read through ``staging``: by default a few pinned buffers made for this
    pause and freed at its end (``staging.cuda_staging``, ``pause_buffers``); the tests pass a
    CPU copier. With ``host`` (``host_copies``: the kernel is suspended in place) they are read
    from those copies and no CUDA call is made.
    """
    own = staging is None and host is None
    if own:
        staging = cuda_staging((s.device for s in plan.refs.storages), pause_buffers(store))
    try:
        return _write(plan, store, progress, verify, before_reuse, staging, host)
    finally:
        if own and staging is not None:
            staging.close()


def _write(
    plan: Plan, store: Store | SpoolStore, progress, verify: bool, before_reuse, staging, host
) -> dict:
    total = plan.total_bytes
    blobs, pickle_meta = _blobs_of(plan, staging, host)
    described: dict = {}
    seen: set = set()
    skipped = new_bytes = 0  # skipped: bytes of blobs already stored, or earlier in the plan

    def report(written: int) -> None:
        if progress:
            progress("writing", skipped + written, total)

    report(0)  # the server's clock: capture (the object graph) ends, writing begins
    staged = staging is not None  # parts in staging buffers: only threads stream them
    with (
        _HashedAhead(_batches(blobs), staged, store.name_of) as hashed,
        store.writes(verify, staged=staged) as writes,
    ):
        for batch in hashed:
            fresh = list(dict.fromkeys(b.h for b in batch if b.h not in seen))
            if before_reuse is not None and fresh:
                before_reuse(fresh)
            stored = store.blob_sizes(fresh)
            todo: dict[str, Source] = {}
            for b in batch:
                described.setdefault(b.h, {"bytes": b.src.nbytes, "kind": b.kind, **b.extra})
                if b.h not in seen and stored.get(b.h) != b.src.nbytes:
                    todo.setdefault(b.h, b.src)
                seen.add(b.h)
            skipped += sum(b.src.nbytes for b in batch) - sum(s.nbytes for s in todo.values())
            new_bytes += sum(s.nbytes for s in todo.values())
            writes.add(list(todo.items()), report)
            report(writes.sent)
        writes.wait(report)
    return _describe(plan, blobs, pickle_meta, described, new_bytes)


def _blobs_of(plan: Plan, staging: Staging | None, host=None) -> tuple[list[_Blob], dict]:
    """Every blob of the plan in manifest order: storages, arrays, the cell log, the ambient
    state, then the pickle stream (last: ``_describe`` finds it there)."""
    blobs = []
    for s in plan.refs.storages:
        src = _storage_source(s, staging, host)
        blobs.append(_Blob(src, "tensor", {"device": str(s.device)}))
    for a in plan.refs.arrays:
        descr = sys.modules["numpy"].lib.format.dtype_to_descr(a.dtype)  # the arrays' numpy
        blobs.append(_Blob(_array_source(a), "buffer", {"dtype": descr}))
    offset = 0
    for obj, seg in zip([o for o in plan.objects if o["kind"] != "module"], plan.segments):
        obj["offset"], obj["length"] = offset, len(seg)
        offset += len(seg)
    if plan.cells is not None:
        blobs.append(_Blob(BufferSource(plan.cells), "cells", {}))
    if plan.ambient is not None:
        blobs.append(_Blob(BufferSource(plan.ambient), "ambient", {}))
    stream = b"".join(plan.segments)
    blobs.append(_Blob(BufferSource(stream), "pickle", {}))
    return blobs, {"bytes": len(stream)}


def _describe(plan: Plan, blobs: list[_Blob], pickle_meta: dict, described, new_bytes) -> dict:
    storages = [
        {"blob": b.h, "nbytes": b.src.nbytes, "device": b.extra["device"]}
        for b in blobs
        if b.kind == "tensor"
    ]
    arrays = []
    for a, b in zip(plan.refs.arrays, [b for b in blobs if b.kind == "buffer"]):
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        shape = list(a.shape)
        arrays.append({"blob": b.h, "dtype": b.extra["dtype"], "shape": shape, "order": order})
    cells = next(({"blob": b.h, "bytes": b.src.nbytes} for b in blobs if b.kind == "cells"), None)
    around = next(
        ({"blob": b.h, "bytes": b.src.nbytes} for b in blobs if b.kind == "ambient"), None
    )
    if around is not None:
        report = plan.ambient_report or {}
        around["carried"] = list(report.get("carried", []))
        around["not_carried"] = list(report.get("not_carried", []))
    return {
        **({"cells": cells} if cells else {}),
        **({"ambient": around} if around else {}),
        "objects": plan.objects,
        "skipped": plan.skipped,
        "storages": storages,
        "arrays": arrays,
        "pickle": {"blob": blobs[-1].h, **pickle_meta},
        "blobs": described,
        "new_bytes": new_bytes,
    }


def environment() -> tuple[dict, dict]:
    """What the manifest records about the kernel and the machine it ran on."""
    torch = sys.modules.get("torch")
    kernel = {
        "language": "python",
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "cwd": os.getcwd(),
    }
    gpu = None
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = torch.cuda.get_device_name(0)
    return kernel, {"host": socket.gethostname(), "gpu": gpu}
