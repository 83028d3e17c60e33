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
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..store import Store, blob_hash
from ..store.schema import HOOKS_OBJECT
from .pickling import RefTable, dump_segment

IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
MAX_REASON = 500  # characters of an exception's first line kept as the reason of a skip


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

    @property
    def total_bytes(self) -> int:
        return sum(o["bytes"] for o in self.objects)


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
    memo: dict = {}
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
        mark = plan.refs.mark()
        try:
            data, memo = dump_segment(value, plan.refs, user_ns, memo)
        except Exception as e:
            reason = _describe_error(e)
            if required:
                raise CaptureError(
                    f"registered variable '{name}' cannot be saved ({reason})",
                    "registered-unsaveable",
                ) from e
            plan.skipped.append({"name": name, "reason": reason})
            continue
        bulk = sum(_storage_nbytes(s) for s in plan.refs.storages[mark[0] :])
        bulk += sum(int(a.nbytes) for a in plan.refs.arrays[mark[1] :])
        plan.objects.append(
            {"name": name, "kind": "pickle", "required": required, "bytes": len(data) + bulk}
        )
        plan.segments.append(data)
    if hooks and any(hooks.values()):
        try:
            data, memo = dump_segment(hooks, plan.refs, user_ns, memo)
            plan.objects.append(
                {"name": HOOKS_OBJECT, "kind": "hooks", "required": False, "bytes": len(data)}
            )
            plan.segments.append(data)
        except Exception as e:
            plan.skipped.append({"name": "on_pause/on_restore hooks", "reason": _describe_error(e)})
    return plan


def _storage_buffer(untyped):
    """The bytes of a torch storage as a memoryview, copied to host memory if on a GPU."""
    import torch

    if untyped.device.type != "cpu":
        untyped = untyped.cpu()
    n = untyped.nbytes()
    if n == 0:
        return memoryview(b"")
    flat = torch.empty(0, dtype=torch.uint8).set_(untyped, 0, (n,), (1,))
    return memoryview(flat.numpy())


def _array_buffer(arr):
    import numpy as np

    return memoryview(np.ravel(arr, order="K").view(np.uint8))


def write_plan(plan: Plan, store: Store, progress=None, verify: bool = True) -> dict:
    """Write every blob of the plan (skipping those already stored) and describe them.

    ``verify`` re-reads each newly written blob and checks its hash, so a bad disk or a torn
    upload is caught while the kernel, and so the state, still exists.
    """
    total = plan.total_bytes
    done = 0
    blobs: dict = {}
    new_bytes = 0

    # Read-back checks run in one worker thread, overlapping the next blob's write; all of
    # them finish before this function returns, so before the manifest can be written.
    checks = ThreadPoolExecutor(max_workers=1) if verify else None
    pending = []

    def put(buf, kind, extra):
        nonlocal done, new_bytes
        n = buf.nbytes
        h = blob_hash(buf)
        h, written = store.put_blob(buf, h)
        if written:
            new_bytes += n
            if checks:
                pending.append(checks.submit(store.verify_blob, h, n))
        blobs.setdefault(h, {"bytes": n, "kind": kind, **extra})
        done += n
        if progress:
            progress("writing", done, total)
        return h

    try:
        result = _write_all_blobs(plan, put)
        for f in pending:
            f.result()  # raises the first IntegrityError/StoreError
    finally:
        if checks:
            checks.shutdown(wait=True, cancel_futures=True)
    result.update(blobs=blobs, new_bytes=new_bytes)
    return result


def _write_all_blobs(plan: Plan, put) -> dict:
    import_np = sys.modules.get("numpy")
    storages = []
    for s in plan.refs.storages:
        device = str(s.device)
        h = put(_storage_buffer(s), "tensor", {"device": device})
        storages.append({"blob": h, "nbytes": int(s.nbytes()), "device": device})
    arrays = []
    for a in plan.refs.arrays:
        descr = import_np.lib.format.dtype_to_descr(a.dtype)
        h = put(_array_buffer(a), "buffer", {"dtype": descr})
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        arrays.append({"blob": h, "dtype": descr, "shape": list(a.shape), "order": order})
    offset = 0
    for obj, seg in zip(
        [o for o in plan.objects if o["kind"] != "module"], plan.segments, strict=True
    ):
        obj["offset"], obj["length"] = offset, len(seg)
        offset += len(seg)
    stream = b"".join(plan.segments)
    pickle_blob = put(memoryview(stream), "pickle", {})
    return {
        "objects": plan.objects,
        "skipped": plan.skipped,
        "storages": storages,
        "arrays": arrays,
        "pickle": {"blob": pickle_blob, "bytes": len(stream)},
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
