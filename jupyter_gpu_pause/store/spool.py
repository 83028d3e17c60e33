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

import os
import secrets
import threading
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
