"""Restore: read and check every blob first, then rebuild the objects one by one.

Nothing is unpickled before every blob of the checkpoint has been read and checked. A blob
that does not match its hash (or is missing) is never used: the objects that need it fail, and
so does one whose class is gone; every other object is restored. A failed object is then taken
from the newest older checkpoint where it restores (``fallbacks``), and the report says, per
object, which checkpoint it came from.

A tensor bound for a GPU is read from a local store straight into its GPU memory, through a
few pinned buffers (``staging.py``): the unpickling then finds its storage already in place.
"""

from __future__ import annotations

import importlib
import pickle
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any, Protocol

from ..store import IntegrityError, Store
from ..store.format import parse_iso
from .pickling import EditableMemoUnpickler, StreamUnpickler, collector_paused
from .staging import DEPTH, RESTORE_BUFFER_BYTES, RESTORE_READERS, Staging, cuda_staging, read_in

if TYPE_CHECKING:
    from ..store.spool import SpoolStore


class RestoreError(Exception):
    """The checkpoint cannot be used at all (a check failed or the device is unavailable)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _device_map(storages: list[dict], device: str):
    """Map each saved CUDA device to a visible one; None means keep tensors on the CPU."""
    saved = sorted({s["device"] for s in storages if s["device"].startswith("cuda")})
    if not saved or device == "cpu":
        return {}
    import torch

    if not torch.cuda.is_available():
        if device == "gpu":
            raise RestoreError(
                "this checkpoint holds GPU tensors and no GPU is visible to the kernel; "
                "resume with device='cpu' to load them on the CPU",
                "no-gpu",
            )
        return {}
    count = torch.cuda.device_count()
    return {d: f"cuda:{i % count}" for i, d in enumerate(saved)}


def _allocator(doc: dict):
    """Buffers for blobs: from torch when it is (or will be) loaded, else numpy; a bytearray
    when the checkpoint is only a pickle stream and numpy is not loaded (importing it would
    cost a small notebook's resume ~50 ms).

    numpy asks for transparent huge pages on large buffers, and on hosts that defragment on
    demand the first touch of such a buffer can stall for seconds; torch's allocator does not.
    """
    if not doc["storages"] and not doc["arrays"] and "numpy" not in sys.modules:
        return bytearray
    import numpy as np

    if doc["storages"] or "torch" in sys.modules:
        import torch

        return lambda n: torch.empty(n, dtype=torch.uint8).numpy()
    return lambda n: np.empty(n, dtype=np.uint8)


def load_blobs(
    doc: dict,
    store: Store | SpoolStore,
    progress=None,
    bad: dict | None = None,
    have: dict | None = None,
    device: str | None = None,
    staging: Staging | None = None,
) -> dict:
    """Read every blob of ``doc`` into memory, checking size and hash.

    Without ``bad``, the first damaged blob raises IntegrityError. With it, a damaged blob is
    left out of the result and recorded in ``bad`` (hash -> its IntegrityError), so only the
    objects that need it fail. Blobs already in ``have`` (read for a newer checkpoint) are not
    read again. A store that cannot be read (StoreError) always stops the restore. Nothing is
    unpickled before this has returned.

    ``device`` is the resume's ("gpu", "cpu" or "any"; None reads everything into host
    memory). On a local store, each tensor blob bound for a GPU is streamed into GPU memory
    of its size (``_to_device``) and comes back as a uint8 tensor there, which
    ``restore_objects`` takes as the storage itself; a blob that fails its check gives that
    memory back at once. ``staging`` replaces the CUDA copy engine (the tests' CPU one).
    """
    have = have or {}
    wanted = {h: m for h, m in doc["blobs"].items() if h not in have and h not in (bad or {})}
    device_map = _device_map(doc["storages"], device) if device is not None else {}
    own = staging is None
    if own and store.local:
        staging = cuda_staging(device_map.values(), RESTORE_READERS * DEPTH, RESTORE_BUFFER_BYTES)
    targets = _targets(doc, wanted, device_map, staging) if staging and store.local else {}
    try:
        data = _read_all(store, doc, wanted, targets, staging, progress, bad)
    finally:
        if own and staging is not None:
            staging.close()
    return {**{h: b for h, b in have.items() if h in doc["blobs"]}, **data}


def _targets(doc: dict, wanted: dict, device_map: dict, staging: Staging) -> dict:
    """Blob -> device of the tensor blobs to stream straight to their device: those whose
    storage goes where ``staging`` copies to (an array or the pickle stream needs host bytes)."""
    host = {a["blob"] for a in doc["arrays"]} | {doc["pickle"]["blob"]}
    out: dict = {}
    for s in doc["storages"]:
        h, target = s["blob"], device_map.get(s["device"]) or "cpu"
        if h in wanted and h not in host and staging.copier.handles(target):
            out.setdefault(h, target)
    return out


def _read_all(store, doc, wanted, targets, staging, progress, bad) -> dict:
    total = sum(int(m["bytes"]) for m in wanted.values())
    done = 0
    alloc = _allocator(doc)
    data = {h: alloc(int(meta["bytes"])) for h, meta in wanted.items() if h not in targets}
    if getattr(store, "serial", False):  # the kernel's own channel: on this thread only
        return _read_serially(store, data, wanted, progress, bad)
    placed = _place(targets, wanted, staging)
    stop = threading.Event()
    # Two readers: a read from the page cache and the hash of the previous buffer both release
    # the GIL, so two threads keep both cores busy (four for a remote store: latency-bound).
    # Reads to a GPU are bound by the host's reading and hashing too: RESTORE_READERS at once.
    pool = ThreadPoolExecutor(max_workers=RESTORE_READERS if placed else 2 if store.local else 4)
    futures = {pool.submit(store.read_blob_into, h, buf): h for h, buf in data.items()}
    futures.update(
        {pool.submit(_to_device, store, staging, h, dst, stop): h for h, dst in placed.items()}
    )
    staged = bool(placed)
    try:
        for f in as_completed(futures):
            h = futures[f]
            try:
                f.result()
            except IntegrityError as e:
                if bad is None:
                    raise
                _without_frames(e)
                bad[h] = e
                data.pop(h, None)
                placed.pop(h, None)  # its GPU memory goes back now
                continue
            done += int(wanted[h]["bytes"])
            if progress:
                progress("reading", done, total)
    except BaseException:
        # an interrupt (Cancel) or a failure: do not wait for reads stuck on a frozen store;
        # they end by themselves within the store's bound. Reads to a GPU (a local store) stop
        # at their next part and are waited for: their copies use buffers freed after this.
        stop.set()
        pool.shutdown(wait=staged, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return {**data, **placed}


def _read_serially(store, data: dict, wanted: dict, progress, bad) -> dict:
    """``_read_all`` of a store read one blob after another on the calling thread."""
    total, done = sum(int(m["bytes"]) for m in wanted.values()), 0
    for h, buf in list(data.items()):
        try:
            store.read_blob_into(h, buf)
        except IntegrityError as e:
            if bad is None:
                raise
            _without_frames(e)
            bad[h] = e
            data.pop(h)
            continue
        done += int(wanted[h]["bytes"])
        if progress:
            progress("reading", done, total)
    return data


def _place(targets: dict, wanted: dict, staging: Staging) -> dict:
    """Device memory for each blob to stream there; too little of it fails the restore as
    ``gpu-oom``, as running out while unpickling does."""
    placed: dict = {}
    try:
        for h, target in targets.items():
            placed[h] = staging.copier.empty(int(wanted[h]["bytes"]), target)
    except Exception as e:
        placed.clear()
        if _out_of_gpu_memory(e):
            raise RestoreError(
                f"the GPU ran out of memory while reading the checkpoint's tensors ({e})",
                "gpu-oom",
            ) from e
        raise
    return placed


def _to_device(
    store: Store | SpoolStore, staging: Staging, h: str, dst, stop: threading.Event
) -> None:
    """Blob ``h`` of a local store into its device memory, hashed as it streams (IntegrityError
    as ``Store.read_blob_into``)."""
    read_in(staging, store.open_blob(h, dst.numel()), dst, dst.numel(), stop)


def _without_frames(e: BaseException | None) -> None:
    """Drop the tracebacks of ``e`` and its causes: kept in ``bad``, they would keep the
    reader's frames, and so the blob's buffers (host or GPU memory), alive."""
    seen: set = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__


def _staged(raw) -> bool:
    """A blob ``load_blobs`` put on its device (a torch tensor), not host bytes (numpy)."""
    return hasattr(raw, "untyped_storage")


def _host(raw):
    return raw.cpu().numpy() if _staged(raw) else raw


class DamagedBlob(Exception):
    """An object needs a blob that failed its check; the object cannot be rebuilt from it."""


# What an object's unpickling memoizes that carries no data of its own: kept for the objects
# after a damaged one. Everything else it memoized (tensors, containers, instances) may hold
# the stand-in for the damaged bytes, so it is forgotten, and objects that refer to it fail.
_PLAIN = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
)


def _forget_damaged(memo, before: set, name: str) -> None:
    torch = sys.modules.get("torch")
    plain = _PLAIN + ((torch.dtype, torch.device) if torch is not None else ())
    why = f"it refers to {name!r}, which could not be restored"
    for key in [k for k, v in memo.items() if k not in before and not isinstance(v, plain)]:
        memo.forget(key, why)


class _Resolves(Protocol):
    """What ``_rebuild`` uses of a resolver: ``_Resolver`` below, or the test-restore's
    placeholders (``trial._Placeholders``)."""

    blobs: dict
    bad: dict  # blob -> why it is damaged
    damage: list[str]  # damaged blobs the object being rebuilt asked for

    def __call__(self, pid: Any) -> Any: ...


class _Resolver:
    """Turns persistent ids back into storages, arrays and the live namespace."""

    def __init__(
        self,
        doc: dict,
        blobs: dict,
        user_ns: dict,
        device_map: dict,
        bad: dict | None = None,
        claimed: set | None = None,
    ):
        self.doc, self.blobs, self.user_ns, self.device_map = doc, blobs, user_ns, device_map
        self.bad = bad or {}
        self.damage: list[str] = []  # damaged blobs the object being rebuilt asked for
        self._storages: dict = {}
        self._arrays: dict = {}
        # shared between the resolvers of one restore: a buffer handed to an object of one
        # checkpoint is copied for an object of another
        self._claimed: set = set() if claimed is None else claimed

    def _buffer(self, h: str):
        """The bytes of blob ``h``; a second object with the same content gets its own copy.

        Blobs are deduplicated by content, so two distinct tensors that happen to hold equal
        bytes (Adam's per-parameter ``step`` counters) share a blob but must not share memory.
        """
        if h in self.bad:
            # A stand-in of the right size lets the unpickling of this object run to its end,
            # so everything it memoizes after the damaged part exists for the objects after
            # it; the object itself is then dropped (``_rebuild``), never handed to the user.
            self.damage.append(str(self.bad[h]))
            import numpy as np

            return np.zeros(int(self.doc["blobs"][h]["bytes"]), dtype=np.uint8)
        raw = self.blobs[h]
        if h in self._claimed:
            return raw.clone() if _staged(raw) else raw.copy()
        self._claimed.add(h)
        return raw

    def _again(self, h: str) -> None:
        """A second object sharing a damaged blob's storage or array is damaged too: say so
        each time (the stand-in is cached, so ``_buffer`` is not asked again)."""
        if h in self.bad:
            self.damage.append(str(self.bad[h]))

    def _untyped(self, index: int):
        if index in self._storages:
            self._again(self.doc["storages"][index]["blob"])
        else:
            import torch

            meta = self.doc["storages"][index]
            raw = self._buffer(meta["blob"])
            target = self.device_map.get(meta["device"])
            if _staged(raw):  # read into device memory already: it is the storage
                want = torch.device(target or "cpu")
                us = (raw if raw.device == want else raw.to(want)).untyped_storage()
            else:
                empty = not raw.nbytes
                us = torch.UntypedStorage(0) if empty else torch.from_numpy(raw).untyped_storage()
                if target is not None and meta["blob"] not in self.bad:
                    us = us.cuda(int(target.split(":")[1]))
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
            if pid[1] in self._arrays:
                self._again(self.doc["arrays"][pid[1]]["blob"])
            else:
                import numpy as np

                meta = self.doc["arrays"][pid[1]]
                dtype = np.lib.format.descr_to_dtype(meta["dtype"])
                flat = _host(self._buffer(meta["blob"])).view(dtype)
                self._arrays[pid[1]] = flat.reshape(meta["shape"], order=meta["order"])
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent reference {kind!r}")


def _out_of_gpu_memory(e: BaseException) -> bool:
    """CUDA ran out of memory (another process took what NVML said was free)."""
    torch = sys.modules.get("torch")
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    return (oom is not None and isinstance(e, oom)) or "CUDA out of memory" in str(e)


def _rebuild(doc: dict, resolver: _Resolves, want: set | None = None):
    """Unpickle the objects of ``doc`` in order: yields ``(object, value, error)``.

    Objects share one memo (a later object may refer to an earlier one), so an older
    checkpoint's object is rebuilt after those before it; ``want`` stops after the last
    object wanted. Running out of GPU memory raises RestoreError("gpu-oom") at once.
    """
    h = doc["pickle"]["blob"]
    damaged = resolver.bad.get(h)
    stream = b"" if damaged or not doc["pickle"]["bytes"] else bytes(_host(resolver.blobs[h]))
    left = set(want) if want is not None else None
    previous = None
    # with every blob sound, one unpickler over the stream; else one per object (see below)
    whole = None if resolver.bad else StreamUnpickler(stream, resolver)
    for obj in doc["objects"]:
        if left is not None and not left:
            return
        name = obj["name"]
        try:
            if obj["kind"] == "module":
                value = importlib.import_module(obj["module"])
            elif damaged:
                raise DamagedBlob(str(damaged))
            elif whole is not None:
                value = whole.load_at(obj["offset"])
            else:
                seg = stream[obj["offset"] : obj["offset"] + obj["length"]]
                # the memo chains on even past a failed object: what it memoized before
                # failing (a class, a function) is what later objects may refer to
                previous = unpickler = EditableMemoUnpickler(seg, resolver, previous)
                before = set(unpickler.memo)
                resolver.damage = []
                value = unpickler.load()
                if resolver.damage:
                    _forget_damaged(unpickler.memo, before, name)
                    raise DamagedBlob(resolver.damage[0])
        except Exception as e:
            if _out_of_gpu_memory(e):
                raise RestoreError(
                    f"the GPU ran out of memory while restoring {name!r} ({e})", "gpu-oom"
                ) from e
            yield obj, None, e
        else:
            yield obj, value, None
        if left is not None:
            left.discard(name)


def _why(e: BaseException) -> str:
    plain = isinstance(e, DamagedBlob) or type(e) is pickle.UnpicklingError
    return str(e) if plain else f"{type(e).__name__}: {e}"


def _older_by(doc: dict, than: dict) -> float | None:
    try:
        return (parse_iso(than["created"]) - parse_iso(doc["created"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def restore_objects(
    doc: dict,
    blobs: dict,
    user_ns: dict,
    device: str = "any",
    bad: dict | None = None,
    fallbacks=(),
) -> dict:
    """Rebuild the saved objects into ``user_ns``; returns the restore report.

    ``fallbacks``: ``(doc, blobs, bad)`` of older checkpoints, newest first; an object that
    fails here is taken from the first of them where it restores (``report["fallback"]``).
    Running out of GPU memory is not one object's failure but the placement's: the whole
    restore stops with ``gpu-oom`` so the server can put the session back in line.
    """
    with collector_paused():
        return _restore_objects(doc, blobs, user_ns, device, bad, fallbacks)


def _restore_objects(doc, blobs, user_ns, device, bad, fallbacks) -> dict:
    device_map = _device_map(doc["storages"], device)
    claimed: set = set()
    resolver = _Resolver(doc, blobs, user_ns, device_map, bad, claimed)
    values, failures, hooks = {}, {}, None
    for obj, value, error in _rebuild(doc, resolver):
        if error is not None:
            failures[obj["name"]] = (obj, _why(error))
        elif obj["kind"] == "hooks":
            hooks = value
        else:
            values[obj["name"]] = value
    fallback, used = [], []
    older_ones = iter(fallbacks)  # a generator may read each one's blobs only when asked
    while failures:
        entry = next(older_ones, None)
        if entry is None:
            break
        older, older_blobs, older_bad = entry
        used.append(older)
        names = set(failures) & {o["name"] for o in older["objects"]}
        if not names:
            continue
        older_map = _device_map(older["storages"], device)
        device_map.update({k: v for k, v in older_map.items() if k not in device_map})
        scratch = _Resolver(older, older_blobs, user_ns, device_map, older_bad, claimed)
        for obj, value, error in _rebuild(older, scratch, want=names):
            name = obj["name"]
            if name not in names or error is not None:
                continue
            obj_here, _ = failures.pop(name)
            if obj_here["kind"] == "hooks":
                hooks = value
            else:
                values[name] = value
            fallback.append(
                {
                    "name": name,
                    "checkpoint_id": older["checkpoint_id"],
                    "created": older.get("created"),
                    "older_seconds": _older_by(older, doc),
                }
            )
    restored, registered = [], []
    for obj in doc["objects"]:  # in the saved order, so later names win as they did
        name = obj["name"]
        if name in values:
            user_ns[name] = values[name]
            restored.append(name)
            if obj.get("required"):
                registered.append(name)
    storages = [*doc["storages"], *(st for d in used for st in d["storages"])]
    return {
        "checkpoint_id": doc["checkpoint_id"],
        "restored": restored,
        "failed": [{"name": n, "reason": why} for n, (_, why) in failures.items()],
        "fallback": fallback,
        "skipped": list(doc.get("skipped", [])),
        "registered": registered,
        "hooks": hooks,
        "device": device,
        # where each saved CUDA device's tensors went: "cuda:0", or "cpu"
        "devices": {
            saved: device_map.get(saved) or "cpu"
            for saved in sorted({s["device"] for s in storages})
            if saved.startswith("cuda")
        },
    }
