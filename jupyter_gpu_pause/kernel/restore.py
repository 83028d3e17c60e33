"""Restore: read and check every blob first, then rebuild the objects one by one.

Nothing is unpickled until every blob of the checkpoint has matched its hash. After that, one
object failing costs only that object (and the objects that reference it); the report names each.
"""

from __future__ import annotations

import importlib
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

from ..store import Store
from .pickling import NamespaceUnpickler


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
    """Buffers for blobs: from torch when it is (or will be) loaded, else numpy.

    numpy asks for transparent huge pages on large buffers, and on hosts that defragment on
    demand the first touch of such a buffer can stall for seconds; torch's allocator does not.
    """
    import numpy as np

    if doc["storages"] or "torch" in sys.modules:
        import torch

        return lambda n: torch.empty(n, dtype=torch.uint8).numpy()
    return lambda n: np.empty(n, dtype=np.uint8)


def load_blobs(doc: dict, store: Store, progress=None) -> dict:
    """Read every blob into memory, checking size and hash; raise at the first bad one.

    Nothing is unpickled before this has returned for the whole checkpoint.
    """
    alloc = _allocator(doc)
    total = int(doc["totals"]["bytes"])
    done = 0
    data = {h: alloc(int(meta["bytes"])) for h, meta in doc["blobs"].items()}
    # Two readers: a read from the page cache and the hash of the previous buffer both release
    # the GIL, so two threads keep both cores busy.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {pool.submit(store.read_blob_into, h, buf): h for h, buf in data.items()}
        try:
            for f in as_completed(futures):
                f.result()  # the first IntegrityError/StoreError stops the restore
                done += data[futures[f]].nbytes
                if progress:
                    progress("reading", done, total)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return data


class _Resolver:
    """Turns persistent ids back into storages, arrays and the live namespace."""

    def __init__(self, doc: dict, blobs: dict, user_ns: dict, device_map: dict):
        self.doc, self.blobs, self.user_ns, self.device_map = doc, blobs, user_ns, device_map
        self._storages: dict = {}
        self._arrays: dict = {}
        self._claimed: set = set()

    def _buffer(self, h: str):
        """The bytes of blob ``h``; a second object with the same content gets its own copy.

        Blobs are deduplicated by content, so two distinct tensors that happen to hold equal
        bytes (Adam's per-parameter ``step`` counters) share a blob but must not share memory.
        """
        raw = self.blobs[h]
        if h in self._claimed:
            return raw.copy()
        self._claimed.add(h)
        return raw

    def _untyped(self, index: int):
        if index not in self._storages:
            import torch

            meta = self.doc["storages"][index]
            raw = self._buffer(meta["blob"])
            if raw.nbytes:
                us = torch.from_numpy(raw).untyped_storage()
            else:
                us = torch.UntypedStorage(0)
            target = self.device_map.get(meta["device"])
            if target is not None:
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
            if pid[1] not in self._arrays:
                import numpy as np

                meta = self.doc["arrays"][pid[1]]
                dtype = np.lib.format.descr_to_dtype(meta["dtype"])
                flat = self._buffer(meta["blob"]).view(dtype)
                self._arrays[pid[1]] = flat.reshape(meta["shape"], order=meta["order"])
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent reference {kind!r}")


def _out_of_gpu_memory(e: BaseException) -> bool:
    """CUDA ran out of memory (another process took what NVML said was free)."""
    torch = sys.modules.get("torch")
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    return (oom is not None and isinstance(e, oom)) or "CUDA out of memory" in str(e)


def restore_objects(doc: dict, blobs: dict, user_ns: dict, device: str = "any") -> dict:
    """Rebuild the saved objects into ``user_ns``; returns the restore report.

    Running out of GPU memory is not one object's failure but the placement's: the whole
    restore stops with ``gpu-oom`` so the server can put the session back in line.
    """
    device_map = _device_map(doc["storages"], device)
    resolver = _Resolver(doc, blobs, user_ns, device_map)
    stream = blobs[doc["pickle"]["blob"]].tobytes() if doc["pickle"]["bytes"] else b""
    restored, failed, registered, hooks = [], [], [], None
    previous = None
    for obj in doc["objects"]:
        name = obj["name"]
        try:
            if obj["kind"] == "module":
                value = importlib.import_module(obj["module"])
            else:
                seg = stream[obj["offset"] : obj["offset"] + obj["length"]]
                unpickler = NamespaceUnpickler(seg, resolver, previous)
                value = unpickler.load()
                previous = unpickler
        except Exception as e:
            if _out_of_gpu_memory(e):
                raise RestoreError(
                    f"the GPU ran out of memory while restoring {name!r} ({e})", "gpu-oom"
                ) from e
            failed.append({"name": name, "reason": f"{type(e).__name__}: {e}"})
            continue
        if obj["kind"] == "hooks":
            hooks = value
            continue
        user_ns[name] = value
        restored.append(name)
        if obj.get("required"):
            registered.append(name)
    return {
        "checkpoint_id": doc["checkpoint_id"],
        "restored": restored,
        "failed": failed,
        "skipped": list(doc.get("skipped", [])),
        "registered": registered,
        "hooks": hooks,
        "device": device,
        # where each saved CUDA device's tensors went: "cuda:0", or "cpu"
        "devices": {
            saved: device_map.get(saved) or "cpu"
            for saved in sorted({s["device"] for s in doc["storages"]})
            if saved.startswith("cuda")
        },
    }
