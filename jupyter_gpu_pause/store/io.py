"""Store I/O through fsspec, with a local-disk fast path that is atomic and durable.

Blobs are immutable and content-addressed, so a writer never overwrites: if the name exists the
bytes are already there. On a local disk every file is written under a temporary name, fsync'd and
renamed, then its directory is fsync'd; on object stores one PUT is atomic by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets

import fsspec

from .format import blob_path, is_checkpoint_id, is_session_id, manifest_path, session_dir
from .integrity import IntegrityError, StreamingHash, blob_hash
from .private import private_makedirs

_CHUNK = 64 * 1024 * 1024
_VERIFY_CHUNK = 1024 * 1024


def _manifest_id(entry: dict) -> str | None:
    """The checkpoint id a listing entry is the manifest of, or None (a stray file, a folder)."""
    name = posixpath.basename(entry["name"].rstrip("/"))
    if entry.get("type") != "file" or not name.endswith(".json"):
        return None
    cid = name[: -len(".json")]
    return cid if is_checkpoint_id(cid) else None


class StoreError(Exception):
    """The store could not be read or written; the message says which path and why."""


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view[:_CHUNK])
        view = view[n:]


class Store:
    """One checkpoint store: a local folder or any fsspec URL (``s3://bucket/prefix``)."""

    def __init__(self, url: str, options: dict | None = None, timeout: float = 30.0):
        self.url = str(url)
        self.timeout = float(timeout)  # seconds per request (GpuPauseApp.store_timeout)
        self.fs, root = fsspec.core.url_to_fs(self.url, **(options or {}))
        self.root = root.rstrip("/")
        self.local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )

    def _p(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if self.root else rel

    def _wrap(self, what: str, path: str, exc: Exception) -> StoreError:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return StoreError(f"could not {what} {path}: {reason}")

    # -- writing -----------------------------------------------------------------------------
    def _atomic_write(self, rel: str, data) -> None:
        path = self._p(rel)
        try:
            if not self.local:
                self.fs.pipe_file(path, bytes(data) if not isinstance(data, bytes) else data)
                return
            d = os.path.dirname(path)
            private_makedirs(d)
            tmp = f"{path}.tmp-{secrets.token_hex(6)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            _fsync_dir(d)
        except StoreError:
            raise
        except Exception as e:
            raise self._wrap("write", path, e) from e

    def blob_size(self, h: str) -> int | None:
        """Size of a stored blob, or None when it is not there."""
        path = self._p(blob_path(h))
        try:
            if self.local:
                return os.stat(path).st_size
            return int(self.fs.info(path)["size"])
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._wrap("stat", path, e) from e

    def put_blob(self, data, h: str | None = None) -> tuple[str, bool]:
        """Store bytes under their hash; returns (hash, written). Existing blobs are reused."""
        h = h or blob_hash(data)
        size = memoryview(data).nbytes
        if self.blob_size(h) == size:
            return h, False
        self._atomic_write(blob_path(h), data)
        return h, True

    def write_manifest(self, doc: dict) -> None:
        """Write a signed manifest; the last write of a checkpoint, after all of its blobs."""
        rel = manifest_path(doc["session_id"], doc["checkpoint_id"])
        self._atomic_write(rel, json.dumps(doc, indent=1, sort_keys=True).encode())

    # -- reading -----------------------------------------------------------------------------
    def read_blob_into(self, h: str, out) -> None:
        """Read blob ``h`` into the writable buffer ``out`` (its exact size) and check its hash.

        Raises IntegrityError when the size or the content hash differs from the name.
        """
        path = self._p(blob_path(h))
        view = memoryview(out).cast("B")
        hasher = StreamingHash()
        try:
            with open(path, "rb", buffering=0) if self.local else self.fs.open(path, "rb") as f:
                pos = 0
                while pos < view.nbytes:
                    n = f.readinto(view[pos : pos + _CHUNK])
                    if not n:
                        break
                    hasher.update(view[pos : pos + n])
                    pos += n
                extra = f.read(1)
        except FileNotFoundError as e:
            raise IntegrityError(f"blob {h} is missing from the store", "blob-missing") from e
        except Exception as e:
            raise self._wrap("read", path, e) from e
        if pos != view.nbytes or extra:
            raise IntegrityError(
                f"blob {h} has the wrong size (expected {view.nbytes} bytes)", "blob-size"
            )
        if hasher.hexdigest() != h:
            raise IntegrityError(f"blob {h} does not match its checksum", "blob-hash")

    def verify_blob(self, h: str, size: int) -> None:
        """Re-read a blob and check its size and hash without keeping it.

        Reads into one small reused buffer: allocating fresh chunks would cost more than the
        read itself on a warm page cache.
        """
        path = self._p(blob_path(h))
        hasher = StreamingHash()
        buf = bytearray(_VERIFY_CHUNK)
        view = memoryview(buf)
        total = 0
        try:
            with open(path, "rb", buffering=0) if self.local else self.fs.open(path, "rb") as f:
                while n := f.readinto(buf):
                    hasher.update(view[:n])
                    total += n
        except FileNotFoundError as e:
            raise IntegrityError(f"blob {h} is missing from the store", "blob-missing") from e
        except Exception as e:
            raise self._wrap("read", path, e) from e
        if total != size:
            raise IntegrityError(f"blob {h} has {total} bytes, expected {size}", "blob-size")
        if hasher.hexdigest() != h:
            raise IntegrityError(f"blob {h} does not match its checksum", "blob-hash")

    def read_manifest(self, session_id: str, checkpoint_id: str) -> dict:
        path = self._p(manifest_path(session_id, checkpoint_id))
        try:
            with self.fs.open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError as e:
            raise IntegrityError(f"checkpoint {checkpoint_id} has no manifest", "manifest") from e
        except Exception as e:
            raise self._wrap("read", path, e) from e
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise IntegrityError(
                f"the manifest of checkpoint {checkpoint_id} is not valid JSON", "manifest"
            ) from e
        if not isinstance(doc, dict):
            raise IntegrityError(f"the manifest of {checkpoint_id} is not an object", "manifest")
        return doc

    def list_checkpoints(self, session_id: str) -> list[str]:
        """Checkpoint ids of a session with a manifest, oldest first.

        Other files in the session's folder (a stray ``notes.json``, an editor's backup) are
        not checkpoints and are left out: a checkpoint id is what ``new_checkpoint_id`` makes.
        """
        d = self._p(session_dir(session_id))
        try:
            entries = self.fs.ls(d, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except Exception as e:
            raise self._wrap("list", d, e) from e
        return sorted(i for i in map(_manifest_id, entries) if i)

    def session_ids(self) -> list[str]:
        """Ids of the sessions with a folder in the store (checkpoints or not), sorted."""
        top = self._p("v1/sessions")
        try:
            entries = self.fs.ls(top, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except Exception as e:
            raise self._wrap("list", top, e) from e
        names = (posixpath.basename(e["name"].rstrip("/")) for e in entries)
        return sorted(n for n in names if is_session_id(n))

    def has_checkpoints(self) -> bool:
        """Whether any session has a checkpoint in this store (stops at the first one found)."""
        top = self._p("v1/sessions")
        try:
            folders = self.fs.ls(top, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except Exception as e:
            raise self._wrap("list", top, e) from e
        for folder in folders:
            try:
                names = self.fs.ls(folder, detail=True)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except Exception as e:
                raise self._wrap("list", folder, e) from e
            if any(map(_manifest_id, names)):
                return True
        return False

    def delete_manifest(self, session_id: str, checkpoint_id: str) -> None:
        path = self._p(manifest_path(session_id, checkpoint_id))
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self._wrap("delete", path, e) from e
