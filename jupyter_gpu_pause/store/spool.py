"""The store as a kernel sees it when its environment cannot write the store itself.

A kernel whose agent the server brought (``server/kernels/bundle.py``) may lack what a store
needs: fsspec, s3fs for an S3 store, xxhash to name blobs. Its blobs then go through the
server: the kernel writes each one into a folder the server made for this pause, private to
their owner, under a provisional name; the server names it by its hash, checks its size, and
moves or uploads it into the store (``server/kernels/spool.py``). For a resume the server puts
the checkpoint's blobs there, each checked against its hash, and names any that failed the
check (``damaged``): reading one of those raises the IntegrityError the store would have.

The kernel never hashes here: the check is the server's, on the same bytes. Sizes are checked
on both sides. Writes reuse the local store's (``writes.LocalWrites``: several at once, each
file fsync'd and renamed into place), so nothing half-written is ever taken for a blob.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import local as local_files
from .integrity import IntegrityError
from .io import StoreError
from .writes import LocalWrites

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

    from .sources import Source


class SpoolStore:
    """Blobs written to, and read from, the server's spool folder ``folder``."""

    local = True  # a folder on this machine: the local writers, the GPU restore's reads

    def __init__(self, folder: str, damaged: dict[str, dict[str, Any]] | None = None) -> None:
        self.root = folder
        self.url = folder
        self._damaged = damaged or {}

    def _p(self, rel: str) -> str:
        """A blob's file: flat in the folder, whatever the store's layout (``blob_path``)."""
        return os.path.join(self.root, os.path.basename(rel))

    def _wrap(self, what: str, path: str, exc: BaseException) -> StoreError:
        return StoreError(f"could not {what} {path} in the server's spool folder: {exc}")

    def name_of(self, src: Source, stop: threading.Event | None = None) -> str:
        """A provisional name for a blob to write: the server names it by its hash."""
        return secrets.token_hex(16)

    def blob_sizes(self, hashes: list[str]) -> dict[str, int | None]:
        """Nothing is known stored: the server skips what the store has when it takes them."""
        return dict.fromkeys(hashes)

    def writes(self, verify: bool, staged: bool = False) -> LocalWrites:
        """The local writers, without the read-back: the server hashes every blob it takes."""
        return LocalWrites(self, verify=False, staged=staged)  # type: ignore[arg-type]

    def verify_blob(self, h: str, size: int, at: str | None = None) -> None:
        raise AssertionError("the server checks a spooled blob")  # writes() never verifies

    def _check(self, h: str) -> str:
        bad = self._damaged.get(h)
        if bad is not None:
            raise IntegrityError(str(bad.get("message")), str(bad.get("check") or "blob-hash"))
        return self._p(h)

    def read_blob_into(self, h: str, out: WriteableBuffer) -> None:
        path = self._check(h)
        view = memoryview(out).cast("B")
        try:
            local_files.read_into(path, view, hashed=False)
        except FileNotFoundError as e:
            raise IntegrityError(f"blob {h} is missing from the spool", "blob-missing") from e
        except local_files.SizeMismatch as e:
            raise IntegrityError(
                f"blob {h} has the wrong size (expected {view.nbytes} bytes)", "blob-size"
            ) from e
        except OSError as e:
            raise self._wrap("read", path, e) from e

    def open_blob(self, h: str, nbytes: int) -> local_files.BlobReader:
        path = self._check(h)
        return local_files.BlobReader(
            path, h, nbytes, lambda e: self._wrap("read", path, e), hashed=False
        )


# -- over the kernel's own channel ------------------------------------------------------------
MARK = "\x00jupyter_gpu_pause:"  # the prompt of our requests on the kernel's stdin channel
PART = 4 << 20  # bytes per request: 5.6 MB of base64, below a websocket message limit (10 MiB)


class ChannelStore(SpoolStore):
    """The spool of a kernel that cannot see the server's folder (a gateway's kernel on another
    machine): each blob goes to the server, or comes from it, in parts over the kernel's own
    channel, as the answers to input requests (``ask``: ipykernel's ``raw_input``). The server
    writes the parts into its spool folder, or reads them from it; ``take`` and ``stage`` are
    the same. One request at a time, each answered before the next part is sent, so the kernel
    holds at most a part beyond its own objects, and the server as much.

    Every request runs on the thread of the agent's request (ipykernel answers input requests
    there only): the writes as they are handed over, the reads one after another (``serial``).
    """

    local = False
    serial = True

    def __init__(
        self, ask: Callable[[str], str], damaged: dict[str, dict[str, Any]] | None = None
    ) -> None:
        super().__init__("", damaged)
        self.url = "the server, over the kernel's channel"
        self._ask = ask

    def _call(self, request: dict[str, Any]) -> str:
        reply = self._ask(MARK + json.dumps(request))
        if reply.startswith("!"):
            raise StoreError(f"the server could not take or give a blob: {reply[1:]}")
        return reply

    def writes(self, verify: bool, staged: bool = False) -> ChannelWrites:  # type: ignore[override]
        return ChannelWrites(self)

    def put(self, name: str, src: Source, sent: Callable[[int], object] | None = None) -> None:
        """Blob ``name`` to the server, part after part (a GPU tensor's parts copied to host
        memory one at a time: ``DeviceSource.chunk``)."""
        n = src.nbytes
        offset = 0
        while True:
            k = min(PART, n - offset)
            data = base64.b64encode(src.chunk(offset, k) if k else b"").decode("ascii")
            last = offset + k >= n
            self._call({"op": "put", "name": name, "offset": offset, "data": data, "last": last})
            offset += k
            if sent is not None:
                sent(k)
            if last:
                return

    def read_blob_into(self, h: str, out: WriteableBuffer) -> None:
        self._check(h)
        view = memoryview(out).cast("B")
        for offset in range(0, view.nbytes, PART):
            k = min(PART, view.nbytes - offset)
            data = base64.b64decode(self._call({"op": "get", "name": h, "offset": offset, "n": k}))
            if len(data) != k:
                raise IntegrityError(
                    f"blob {h} has the wrong size (expected {view.nbytes} bytes)", "blob-size"
                )
            view[offset : offset + k] = data

    def open_blob(self, h: str, nbytes: int) -> local_files.BlobReader:
        raise ValueError("a blob over the kernel's channel is read whole (read_blob_into)")


class ChannelWrites:
    """``ChannelStore``'s writes: each blob sent as it is handed over, on the caller's thread
    (the agent's request's), so ``wait`` has nothing left to wait for."""

    def __init__(self, store: ChannelStore) -> None:
        self._store = store
        self.sent = 0

    def __enter__(self) -> ChannelWrites:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _wrote(self, n: int) -> None:
        self.sent += n

    def add(
        self, items: list[tuple[str, Source]], sent: Callable[[int], object] | None = None
    ) -> None:
        for name, src in items:
            self._store.put(name, src, self._wrote)
            if sent is not None:
                sent(self.sent)

    def wait(self, sent: Callable[[int], object] | None = None) -> None:
        if sent is not None:
            sent(self.sent)
