"""Store I/O through fsspec: a local-disk path that is atomic and durable, and bounded requests
to object stores, with S3 blobs streamed in parallel parts.

Blobs are immutable and content-addressed, so a writer never overwrites: if the name exists the
bytes are already there. On a local disk every file is written under a temporary name, fsync'd and
renamed, then its directory is fsync'd; on object stores one PUT, or one completed multipart
upload, is atomic by itself.

Every request to a remote store is bounded (``bounded``): ``timeout`` seconds per attempt,
``bounded.ATTEMPTS`` attempts with backoff, then a StoreError naming the path and the store's
error. Errors a caller must tell apart stay what they are: FileNotFoundError for a missing
object, IntegrityError for bytes that do not match their name.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from . import local
from .bounded import ATTEMPTS, POLL, attempts, call_bound, describe, retryable, run
from .format import blob_path, is_checkpoint_id, is_session_id, manifest_path, session_dir
from .integrity import IntegrityError, StreamingHash, blob_hash
from .sources import Source, as_source, source_hash
from .transfer import PART, PartMismatch, S3Transfer, SizeMismatch, ranges
from .writes import LocalWrites, Sent, SerialWrites

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

    from .integrity import BytesLike

S3_PROTOCOLS = ("s3", "s3a")
T = TypeVar("T")


def _manifest_id(entry: dict[str, Any]) -> str | None:
    """The checkpoint id a listing entry is the manifest of, or None (a stray file, a folder)."""
    name = posixpath.basename(entry["name"].rstrip("/"))
    if entry.get("type") != "file" or not name.endswith(".json"):
        return None
    cid = name[: -len(".json")]
    return cid if is_checkpoint_id(cid) else None


class StoreError(Exception):
    """The store could not be read or written; the message says which path and why."""


def s3_options(options: dict[str, Any], timeout: float) -> dict[str, Any]:
    """s3fs options with botocore's limits derived from ``timeout``.

    botocore's connect and read timeouts default to ``timeout`` and its own retries are off
    (``bounded.attempts`` retries, with a limit per attempt that also covers a stalled upload).
    Whatever the admin set in ``config_kwargs`` wins over these defaults; an attempt still never
    outlives ``timeout``.
    """
    slots = int(options.get("max_concurrency") or 10)
    config = {
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "retries": {"total_max_attempts": 1},
        "max_pool_connections": max(10, slots),
    }
    config.update(options.get("config_kwargs") or {})
    return {**options, "config_kwargs": config}


class Store:
    """One checkpoint store: a local folder or any fsspec URL (``s3://bucket/prefix``)."""

    def __init__(
        self, url: str, options: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> None:
        self.url = str(url)
        self.timeout = float(timeout)  # seconds per request attempt (GpuPauseApp.store_timeout)
        self.bound = call_bound(self.timeout)  # seconds one request may take, retries included
        import fsspec  # here: a kernel without it never opens a Store (``store/spool.py``)

        options = dict(options or {})
        self.protocol = fsspec.core.split_protocol(self.url)[0] or "file"
        if self.protocol in S3_PROTOCOLS:
            options = s3_options(options, self.timeout)
        self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        self.root = root.rstrip("/")
        self.local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )
        self.remote_async = not self.local and bool(getattr(self.fs, "async_impl", False))
        self._s3: S3Transfer | None = None
        if self.protocol in S3_PROTOCOLS and hasattr(self.fs, "_call_s3"):
            self.fs.retries = 1  # one try per s3fs call: our attempts retry, each one bounded
            self._s3 = S3Transfer(self.fs, self.timeout)
        self.endpoint = getattr(self.fs, "endpoint_url", None) or (
            getattr(self.fs, "client_kwargs", None) or {}
        ).get("endpoint_url")

    def _p(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if self.root else rel

    def _shown(self, path: str) -> str:
        return path if self.local or "://" in path else f"{self.protocol}://{path}"

    def _wrap(self, what: str, path: str, exc: BaseException) -> StoreError:
        reason = describe(exc)
        if not self.local and retryable(exc):
            reason += f" ({ATTEMPTS} attempts"
            reason += f", endpoint {self.endpoint})" if self.endpoint else ")"
        return StoreError(f"could not {what} {self._shown(path)}: {reason}")

    # -- bounded remote calls ------------------------------------------------------------------
    def _run(
        self,
        what: str,
        path: str,
        coro: Coroutine[Any, Any, T],
        limit: float | None = None,
        on_poll: Callable[[], object] | None = None,
    ) -> T:
        """Wait for ``coro`` on fsspec's loop; FileNotFoundError passes, the rest is a
        StoreError. The wait gives up once nothing has moved for longer than a request may
        take (``limit`` per attempt): S3 transfers count every piece they move."""
        stalled = call_bound(limit or self.timeout) + 2 * POLL
        s3 = self._s3
        progress = (lambda: s3.ticks) if s3 is not None else None
        try:
            return run(self.fs.loop, coro, stalled=stalled, progress=progress, on_poll=on_poll)
        except (FileNotFoundError, IntegrityError, StoreError, SizeMismatch, PartMismatch):
            raise
        except Exception as e:
            raise self._wrap(what, path, e) from e

    def call(
        self, what: str, path: str, op: str, *args: Any, timeout: float | None = None, **kw: Any
    ) -> Any:
        """Run ``fs.<op>(*args, **kw)`` as one bounded store request, for any code that needs
        an fsspec operation the methods below do not offer (GC's listings, its lease objects).

        On async stores (S3, GCS, Azure, HTTP) each attempt is cut at ``timeout`` (default
        ``store_timeout``) and retried ``ATTEMPTS`` times with backoff; on local and other sync
        filesystems it is a plain call. ``what`` and ``path`` name the request in the error:
        FileNotFoundError passes as it is, any other failure is a StoreError.
        """
        if not self.remote_async:
            try:
                return getattr(self.fs, op)(*args, **kw)
            except FileNotFoundError:
                raise
            except Exception as e:
                raise self._wrap(what, path, e) from e
        method = getattr(self.fs, f"_{op}")
        limit = timeout or self.timeout
        return self._run(what, path, attempts(lambda: method(*args, **kw), limit), limit)

    def _limit(self, nbytes: int) -> float:
        """The limit of one attempt carrying ``nbytes`` in one request (generic stores)."""
        return self.timeout * max(1, -(-nbytes // PART))

    # -- writing -----------------------------------------------------------------------------
    def blob_size(self, h: str) -> int | None:
        """Size of a stored blob, or None when it is not there."""
        return self.blob_sizes([h])[h]

    def blob_sizes(self, hashes: list[str]) -> dict[str, int | None]:
        """Sizes of stored blobs (None: not there), asked for all at once on S3."""
        paths = {h: self._p(blob_path(h)) for h in hashes}
        s3 = self._s3
        if s3 is not None and paths:

            async def sizes() -> list[int | None]:
                from .transfer import all_or_nothing

                return await all_or_nothing(s3.size(p) for p in paths.values())

            first = next(iter(paths.values()))
            return dict(zip(paths, self._run("stat", first, sizes())))
        out: dict[str, int | None] = {}
        for h, path in paths.items():
            try:
                out[h] = local.size(path) if self.local else self._info_size(path)
            except FileNotFoundError:
                out[h] = None
            except StoreError:
                raise
            except Exception as e:
                raise self._wrap("stat", path, e) from e
        return out

    def _info_size(self, path: str) -> int:
        self.fs.invalidate_cache(path)
        return int(self.call("stat", path, "info", path)["size"])

    def name_of(self, src: Source, stop: threading.Event | None = None) -> str:
        """The name a blob to write is stored under: its hash (``spool.SpoolStore``'s is
        provisional)."""
        return source_hash(src, stop)

    def put_blob(self, data: BytesLike, h: str | None = None) -> tuple[str, bool]:
        """Store bytes under their hash; returns (hash, written). Existing blobs are reused."""
        h = h or blob_hash(data)
        path = self._p(blob_path(h))
        try:
            src = as_source(data)
        except (TypeError, ValueError, BufferError) as e:  # not one run of bytes
            raise self._wrap("write", path, e) from e
        if self.blob_size(h) == src.nbytes:
            return h, False
        self.write_blobs([(h, src)])
        return h, True

    def write_blobs(
        self, items: list[tuple[str, Source]], verify: bool = False, sent: Sent | None = None
    ) -> None:
        """Write blobs ``[(hash, source)]`` the store does not have, and with ``verify`` read
        each one back and check it before returning.

        On S3 the blobs and their parts go up in parallel, straight from the sources' memory;
        on a local disk several blobs are written at once (``writes.LocalWrites``); on other
        stores one after another while a second thread re-reads the previous one.
        ``sent(bytes_so_far)`` is called from this thread only (a kernel's progress messages
        must come from its main thread). An interrupt stops at once: nothing waits for
        requests in flight, which are cancelled (S3 uploads are aborted).
        """
        if not items:
            return
        if self._s3 is not None:
            return self._write_s3(self._s3, items, verify, sent)
        if self.local:
            with LocalWrites(self, verify) as writes:
                writes.add(items)
                writes.wait(sent)
            return
        checks = ThreadPoolExecutor(max_workers=1) if verify else None
        pending: list[Future[None]] = []
        done = 0
        try:
            for h, src in items:
                self._put_whole(blob_path(h), src)
                done += src.nbytes
                if checks:
                    pending.append(checks.submit(self._verify_or_drop, h, src.nbytes))
                if sent:
                    sent(done)
            for f in pending:
                f.result()  # the first IntegrityError/StoreError
        finally:
            if checks:  # after an error or an interrupt, do not wait for a check in flight
                checks.shutdown(wait=False, cancel_futures=True)

    def _verify_or_drop(self, h: str, size: int) -> None:
        """``verify_blob`` of a blob just written to a remote store; one that fails it is
        deleted (best effort), or every later pause would find it by its name and reuse it."""
        try:
            self.verify_blob(h, size)
        except IntegrityError:
            path = self._p(blob_path(h))
            with contextlib.suppress(Exception):
                self.call("delete", path, "rm_file", path)
            raise

    async def _drop_bad_s3(self, s3: S3Transfer, path: str) -> None:
        """An S3 object that failed its read-back, deleted (best effort; see _verify_or_drop)."""
        with contextlib.suppress(Exception):
            await s3.request("delete_object", **s3._where(path))

    def writes(self, verify: bool, staged: bool = False) -> LocalWrites | SerialWrites:
        """Blob writes that go on while the caller hashes the next ones: on a local disk
        ``LocalWrites`` (several threads; ``staged``: the sources stream through staging
        buffers, so only the writers stream them and an interrupt waits for them to stop),
        elsewhere ``SerialWrites`` (``write_blobs`` within each ``add``)."""
        if self.local:
            return LocalWrites(self, verify, staged=staged)
        return SerialWrites(self, verify)

    def _put_whole(self, rel: str, src: Source) -> None:
        """A generic remote store: the blob in one request (its one copy in memory)."""
        path = self._p(rel)
        data = bytes(src.chunk(0, src.nbytes))
        self.call("write", path, "pipe_file", path, data, timeout=self._limit(len(data)))

    def _write_s3(
        self, s3: S3Transfer, items: list[tuple[str, Source]], verify: bool, sent: Sent | None
    ) -> None:
        count = [0]

        def add(n: int) -> None:
            count[0] += n  # on the loop thread only

        async def one(h: str, src: Source) -> None:
            path = self._p(blob_path(h))
            try:
                await s3.put(path, src, add)
                if verify:
                    try:
                        await s3.check(path, src)
                    except (SizeMismatch, PartMismatch, FileNotFoundError):
                        await self._drop_bad_s3(s3, path)
                        raise
            except SizeMismatch as e:
                raise IntegrityError(f"blob {h} was written but {e}", "blob-size") from e
            except PartMismatch as e:
                raise IntegrityError(
                    f"blob {h} does not read back as written: {e}", "blob-hash"
                ) from e
            except FileNotFoundError as e:
                raise IntegrityError(f"blob {h} is missing after its upload", "blob-missing") from e
            except IntegrityError:
                raise
            except Exception as e:
                raise self._wrap("write", path, e) from e

        async def every() -> None:
            from .transfer import all_or_nothing

            await all_or_nothing(one(h, src) for h, src in items)

        report = (lambda: sent(count[0])) if sent else None
        self._run("write", self._p(blob_path(items[0][0])), every(), on_poll=report)
        if sent:
            sent(count[0])

    def write_manifest(self, doc: dict[str, Any]) -> bytes:
        """Write a signed manifest; the last write of a checkpoint, after all of its blobs.
        Returns the bytes written, for the read-back to compare.

        Compact JSON: an indented dump runs on json's pure-Python encoder, 4x slower (22 ms of
        a pause's commit for 2 500 variables); ``jq`` shows a manifest indented."""
        path = self._p(manifest_path(doc["session_id"], doc["checkpoint_id"]))
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        if self.local:
            try:
                local.atomic_write(path, as_source(data))
            except Exception as e:
                raise self._wrap("write", path, e) from e
            return data
        self.call("write", path, "pipe_file", path, data)
        return data

    # -- reading -----------------------------------------------------------------------------
    def read_blob_into(self, h: str, out: WriteableBuffer) -> None:
        """Read blob ``h`` into the writable buffer ``out`` (its exact size) and check its hash.

        Raises IntegrityError when the size or the content hash differs from the name.
        """
        path = self._p(blob_path(h))
        view = memoryview(out).cast("B")
        try:
            if self.local:
                digest = local.read_into(path, view)
            elif self._s3 is not None:
                self._run("read", path, self._s3.read_into(path, view, lambda n: None))
                digest = blob_hash(view)  # parts arrive out of order: hash the final buffer
            else:
                digest = self._read_ranges(path, view)
        except FileNotFoundError as e:
            raise IntegrityError(f"blob {h} is missing from the store", "blob-missing") from e
        except (SizeMismatch, local.SizeMismatch) as e:
            raise IntegrityError(
                f"blob {h} has the wrong size (expected {view.nbytes} bytes)", "blob-size"
            ) from e
        except (StoreError, IntegrityError):
            raise
        except Exception as e:
            raise self._wrap("read", path, e) from e
        if digest != h:
            raise IntegrityError(f"blob {h} does not match its checksum", "blob-hash")

    def prefetch(self, hashes: list[str], budget: int, stop: Callable[[], bool]) -> int:
        """Bring blobs of a local store into the page cache ahead of a restore, in order,
        until ``budget`` bytes or ``stop()``; returns the bytes read. A remote store has no
        cache of ours to warm (its reads are already parallel ranged GETs): 0. Best effort:
        a blob that cannot be read is left for the restore to report."""
        if not self.local:
            return 0
        total = 0
        for h in hashes:
            if stop() or total >= budget:
                break
            left = budget - total
            try:
                total += local.warm(self._p(blob_path(h)), stop, left)
            except (OSError, ValueError):
                continue
        return total

    def open_blob(self, h: str, nbytes: int) -> local.BlobReader:
        """Blob ``h`` of a local store, opened to be read part by part into buffers the caller
        chooses and hashed as it goes (the GPU restore); errors as ``read_blob_into``."""
        if not self.local:
            raise ValueError("open_blob reads blobs of a local store only")
        path = self._p(blob_path(h))
        return local.BlobReader(path, h, nbytes, lambda e: self._wrap("read", path, e))

    def _read_ranges(self, path: str, view: memoryview) -> str:
        """A generic store: the blob in ranged reads of PART bytes, each one bounded."""
        size = self._info_size(path)
        if size != view.nbytes:
            raise local.SizeMismatch(size)
        hasher = StreamingHash()
        for off, n in ranges(size, PART):
            piece = self.call("read", path, "cat_file", path, start=off, end=off + n)
            if len(piece) != n:
                raise local.SizeMismatch(off + len(piece))
            view[off : off + n] = piece
            hasher.update(view[off : off + n])
        return hasher.hexdigest()

    def verify_blob(self, h: str, size: int, at: str | None = None) -> None:
        """Re-read a blob and check its size and hash without keeping it; ``at``: a local
        file holding it under another name (its temporary one, before the rename)."""
        path = at or self._p(blob_path(h))
        try:
            if self.local:
                total, digest = local.digest(path)
            elif self._s3 is not None:
                total, digest = size, self._run("read", path, self._s3.digest(path, size))
            else:
                total, digest = size, self._read_ranges(path, memoryview(bytearray(size)))
        except FileNotFoundError as e:
            raise IntegrityError(f"blob {h} is missing from the store", "blob-missing") from e
        except (SizeMismatch, local.SizeMismatch) as e:
            raise IntegrityError(
                f"blob {h} has {e.size} bytes, expected {size}", "blob-size"
            ) from e
        except (StoreError, IntegrityError):
            raise
        except Exception as e:
            raise self._wrap("read", path, e) from e
        if total != size:
            raise IntegrityError(f"blob {h} has {total} bytes, expected {size}", "blob-size")
        if digest != h:
            raise IntegrityError(f"blob {h} does not match its checksum", "blob-hash")

    def read_manifest_bytes(self, session_id: str, checkpoint_id: str) -> bytes:
        path = self._p(manifest_path(session_id, checkpoint_id))
        try:
            return local.read(path) if self.local else self.call("read", path, "cat_file", path)
        except FileNotFoundError as e:
            raise IntegrityError(f"checkpoint {checkpoint_id} has no manifest", "manifest") from e
        except StoreError:
            raise
        except Exception as e:
            raise self._wrap("read", path, e) from e

    def read_manifest(self, session_id: str, checkpoint_id: str) -> dict[str, Any]:
        raw = self.read_manifest_bytes(session_id, checkpoint_id)
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise IntegrityError(
                f"the manifest of checkpoint {checkpoint_id} is not valid JSON", "manifest"
            ) from e
        if not isinstance(doc, dict):
            raise IntegrityError(f"the manifest of {checkpoint_id} is not an object", "manifest")
        return doc

    def _ls(self, path: str) -> list[dict[str, Any]]:
        """A fresh listing (never fsspec's cache: another server may have written since)."""
        if not self.local:
            self.fs.invalidate_cache(path)
        entries: list[dict[str, Any]] = self.call("list", path, "ls", path, detail=True)
        return entries

    def list_checkpoints(self, session_id: str) -> list[str]:
        """Checkpoint ids of a session with a manifest, oldest first.

        Other files in the session's folder (a stray ``notes.json``, an editor's backup) are
        not checkpoints and are left out: a checkpoint id is what ``new_checkpoint_id`` makes.
        """
        d = self._p(session_dir(session_id))
        try:
            entries = self._ls(d)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(i for i in map(_manifest_id, entries) if i)

    def session_ids(self) -> list[str]:
        """Ids of the sessions with a folder in the store (checkpoints or not), sorted."""
        top = self._p("v1/sessions")
        try:
            entries = self._ls(top)
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = (posixpath.basename(e["name"].rstrip("/")) for e in entries)
        return sorted(n for n in names if is_session_id(n))

    def has_checkpoints(self) -> bool:
        """Whether any session has a checkpoint in this store (stops at the first one found)."""
        top = self._p("v1/sessions")
        try:
            folders = [e["name"] for e in self._ls(top)]
        except (FileNotFoundError, NotADirectoryError):
            return False
        for folder in folders:
            try:
                names = self._ls(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if any(map(_manifest_id, names)):
                return True
        return False

    def delete_manifest(self, session_id: str, checkpoint_id: str) -> None:
        path = self._p(manifest_path(session_id, checkpoint_id))
        try:
            self.call("delete", path, "rm_file", path)
        except FileNotFoundError:
            pass
