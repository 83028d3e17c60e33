"""The local-disk store: atomic, durable writes and hashed reads, with plain system calls.

A file is written under a temporary name, fsync'd and renamed, then its folder is fsync'd, so a
crash leaves either the whole file or none of it. Many blobs written together share their
folders' fsyncs (``write_file``, then ``fsync_dirs`` once: ``store/writes.py``). Reads go through
one unbuffered file object into the caller's buffer. A local disk needs no time limit or retry:
it answers or it errs.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import threading
from collections.abc import Callable, Iterable

from .integrity import IntegrityError, StreamingHash
from .private import private_makedirs
from .sources import Source, Stopped, chunks

CHUNK = 64 * 1024 * 1024  # bytes per write / read system call
VERIFY_CHUNK = 1024 * 1024  # one small reused buffer: fresh chunks would cost more than a
#                             warm page-cache read


class SizeMismatch(Exception):
    """The file does not have the expected size; ``size``: what it has (or has so far)."""

    def __init__(self, size: int):
        super().__init__(f"the file has {size} bytes")
        self.size = size


def fsync_dir(path: str) -> None:
    """Make a folder's entries (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dirs(paths: Iterable[str]) -> None:
    """``fsync_dir`` of each folder, the deepest first."""
    for d in sorted(set(paths), key=lambda p: (-p.count(os.sep), p)):
        fsync_dir(d)


def size(path: str) -> int:
    return os.stat(path).st_size


def write_file(
    path: str,
    src: Source,
    stop: threading.Event | None = None,
    wrote: Callable[[int], object] | None = None,
    check: Callable[[str], object] | None = None,
) -> set[str]:
    """Write ``src`` to ``path`` through a temporary file, fsync'd, then renamed: ``path`` holds
    all of it or does not exist. Returns the folders whose entries changed (``path``'s, and the
    parent of any folder made for it): the rename is durable once they are fsync'd
    (``fsync_dirs``), which the caller does, once for all the files it writes.

    ``stop`` (a ``threading.Event``), once set, ends the write at its next part, or before the
    rename, with Stopped; ``wrote(n)`` hears of each part written; ``check(tmp_path)`` judges
    the written file before the rename, so a file that fails it never appears under its name
    (a blob is found by its name: one that failed its read-back would be reused by every later
    pause). No temporary file survives an error, a stop or an interrupt.
    """
    d = os.path.dirname(path)
    changed = {d, *(os.path.dirname(m) for m in private_makedirs(d))}
    tmp = f"{path}.tmp-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            with contextlib.closing(chunks(src, CHUNK)) as parts:
                for view in parts:
                    if stop is not None and stop.is_set():
                        raise Stopped
                    n = view.nbytes
                    while view:
                        view = view[os.write(fd, view) :]
                    if wrote is not None:
                        wrote(n)
            os.fsync(fd)
        finally:
            os.close(fd)
        if check is not None:
            check(tmp)
        if stop is not None and stop.is_set():
            raise Stopped  # no new blob appears once the writes were told to stop
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return changed


def atomic_write(path: str, src: Source) -> None:
    """Write ``src`` to ``path`` through a temporary file, durably (``write_file``, then its
    folders' fsync); no temporary file survives an error or an interrupt."""
    fsync_dirs(write_file(path, src))


def read_into(path: str, view: memoryview, hashed: bool = True) -> str | None:
    """Fill ``view`` from the file, hashing as it goes (``hashed``: else None, for a file the
    server checked already, ``spool.py``); SizeMismatch unless the sizes agree."""
    hasher = StreamingHash() if hashed else None
    with open(path, "rb", buffering=0) as f:
        pos = 0
        while pos < view.nbytes:
            n = f.readinto(view[pos : pos + CHUNK])
            if not n:
                break
            if hasher is not None:
                hasher.update(view[pos : pos + n])
            pos += n
        extra = f.read(1)
    if pos != view.nbytes or extra:
        raise SizeMismatch(pos + len(extra))
    return hasher.hexdigest() if hasher is not None else None


class BlobReader:
    """A blob's file read part by part into buffers the caller chooses, hashed as it goes.

    A GPU restore (``kernel/staging.py``) reads each part into a pinned buffer and copies it on
    to the device while it reads the next, so a blob never sits whole in host memory. Errors
    are those of ``Store.read_blob_into``: IntegrityError for a missing file, a wrong size
    (seen at once, before any part is read) or, from ``finish``, a wrong hash; ``wrap`` turns
    any other failure into the store's error.
    """

    def __init__(
        self,
        path: str,
        h: str,
        nbytes: int,
        wrap: Callable[[Exception], Exception],
        hashed: bool = True,
    ) -> None:
        self.h, self.nbytes, self._wrap = h, nbytes, wrap
        # not ``hashed``: a file the server checked already (``spool.py``); sizes still are
        self._hasher = StreamingHash() if hashed else None
        self._pos = 0
        try:
            self._f: io.FileIO = open(path, "rb", buffering=0)
        except Exception as e:
            raise self._error(e) from e
        try:
            size = os.fstat(self._f.fileno()).st_size
        except Exception as e:
            self.close()
            raise self._error(e) from e
        if size != nbytes:
            self.close()
            raise self._error(SizeMismatch(size))

    def _error(self, e: Exception) -> Exception:
        if isinstance(e, FileNotFoundError):
            return IntegrityError(f"blob {self.h} is missing from the store", "blob-missing")
        if isinstance(e, SizeMismatch):
            return IntegrityError(
                f"blob {self.h} has the wrong size (expected {self.nbytes} bytes)", "blob-size"
            )
        return self._wrap(e)

    def readinto(self, view: memoryview) -> None:
        """Fill all of ``view`` with the next bytes of the blob."""
        got = 0
        try:
            while got < view.nbytes:
                n = self._f.readinto(view[got:])
                if not n:
                    raise SizeMismatch(self._pos + got)
                got += n
        except Exception as e:
            raise self._error(e) from e
        if self._hasher is not None:
            self._hasher.update(view)
        self._pos += got

    def finish(self) -> None:
        """Check that the whole blob was read, nothing follows, and its hash is its name."""
        try:
            extra = self._f.read(1)
        except Exception as e:
            raise self._error(e) from e
        if self._pos != self.nbytes or extra:
            raise self._error(SizeMismatch(self._pos + len(extra)))
        if self._hasher is not None and self._hasher.hexdigest() != self.h:
            raise IntegrityError(f"blob {self.h} does not match its checksum", "blob-hash")

    def close(self) -> None:
        self._f.close()


def digest(path: str) -> tuple[int, str]:
    """Size and hash of a file, read into one small reused buffer."""
    hasher = StreamingHash()
    buf = bytearray(VERIFY_CHUNK)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            hasher.update(view[:n])
            total += n
    return total, hasher.hexdigest()


def warm(path: str, stop: Callable[[], bool], budget: int) -> int:
    """Read a file into the page cache, one small reused buffer at a time, until ``stop()``
    or ``budget`` bytes (overshooting by one buffer at most).

    Plain reads, not ``posix_fadvise(WILLNEED)``: measured on these VMs, the advice returned at
    once and left the next read as slow as a cold one. Returns the bytes read.
    """
    buf = bytearray(VERIFY_CHUNK * 8)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while total < budget and not stop() and (n := f.readinto(buf)):
            total += n
    return total


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
