"""The local-disk store: atomic, durable writes and hashed reads, with plain system calls.

A file is written under a temporary name, fsync'd and renamed, then its folder is fsync'd, so a
crash leaves either the whole file or none of it. Reads go through one unbuffered file object
into the caller's buffer. A local disk needs no time limit or retry: it answers or it errs.
"""

from __future__ import annotations

import contextlib
import os
import secrets

from .integrity import StreamingHash
from .private import private_makedirs
from .sources import Source

CHUNK = 64 * 1024 * 1024  # bytes per write / read system call
VERIFY_CHUNK = 1024 * 1024  # one small reused buffer: fresh chunks would cost more than a
#                             warm page-cache read


class SizeMismatch(Exception):
    """The file does not have the expected size; ``size``: what it has (or has so far)."""

    def __init__(self, size: int):
        super().__init__(f"the file has {size} bytes")
        self.size = size


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def size(path: str) -> int:
    return os.stat(path).st_size


def atomic_write(path: str, src: Source) -> None:
    """Write ``src`` to ``path`` through a temporary file; no temporary file survives an error
    or an interrupt."""
    d = os.path.dirname(path)
    private_makedirs(d)
    tmp = f"{path}.tmp-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            for off in range(0, src.nbytes, CHUNK):
                view = src.chunk(off, min(CHUNK, src.nbytes - off))
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(d)


def read_into(path: str, view: memoryview) -> str:
    """Fill ``view`` from the file, hashing as it goes; SizeMismatch unless the sizes agree."""
    hasher = StreamingHash()
    with open(path, "rb", buffering=0) as f:
        pos = 0
        while pos < view.nbytes:
            n = f.readinto(view[pos : pos + CHUNK])
            if not n:
                break
            hasher.update(view[pos : pos + n])
            pos += n
        extra = f.read(1)
    if pos != view.nbytes or extra:
        raise SizeMismatch(pos + len(extra))
    return hasher.hexdigest()


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


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
