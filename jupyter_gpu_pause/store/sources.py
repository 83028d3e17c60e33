"""The bytes of a blob to write, read part by part so that nothing copies a whole blob.

A source has ``nbytes`` and ``chunk(offset, n)``, which returns a buffer of ``n`` bytes. For
memory the process can address (bytes, numpy arrays, CPU tensors), a chunk is a slice of a
memoryview: no copy at all. A device tensor's source (``kernel/capture.py``) copies just that
chunk to host memory, so a GPU blob never needs its whole size in host RAM.

``Body`` hands a chunk to botocore as a file-like request body: botocore accepts bytes or
file-like objects, not memoryviews, and ``bytes(chunk)`` would copy every part once more.
"""

from __future__ import annotations

import io
from typing import Protocol

from .integrity import StreamingHash, blob_hash

HASH_CHUNK = 64 * 1024 * 1024  # bytes a chunked source is hashed in
READ = 64 * 1024  # most bytes one read of a Body returns


class Source(Protocol):
    nbytes: int

    def chunk(self, offset: int, n: int) -> memoryview: ...


class BufferSource:
    """A source over any C-contiguous buffer, read in place."""

    def __init__(self, data):
        self.view = memoryview(data).cast("B")  # TypeError for a buffer not in one run
        self.nbytes = self.view.nbytes

    def chunk(self, offset: int, n: int) -> memoryview:
        return self.view[offset : offset + n]

    def hash(self) -> str:
        return blob_hash(self.view)


def as_source(data) -> Source:
    """``data`` itself when it already is a source, else a BufferSource over it."""
    return data if hasattr(data, "chunk") and hasattr(data, "nbytes") else BufferSource(data)


def source_hash(src: Source) -> str:
    """The blob name of a source: in one call over memory, else chunk by chunk."""
    if isinstance(src, BufferSource):
        return src.hash()
    hasher = StreamingHash()
    for off in range(0, src.nbytes, HASH_CHUNK):
        hasher.update(src.chunk(off, min(HASH_CHUNK, src.nbytes - off)))
    return hasher.hexdigest()


class Body(io.RawIOBase):
    """A read-only, seekable file over one memoryview, for botocore and aiohttp to stream.

    botocore reads it to sign and checksum the request and seeks back; aiohttp then reads it
    in 64 KiB pieces. Each read copies only what it returns, and never more than READ bytes:
    botocore asks for 1 MiB at a time, and with ten requests in flight on several threads,
    glibc kept those freed megabytes around, adding some 20 MiB to a kernel's peak memory
    for nothing. Short reads are part of the file protocol; every reader copes with them.
    """

    def __init__(self, view: memoryview):
        super().__init__()
        self._view = view
        self._pos = 0

    def __len__(self) -> int:
        return self._view.nbytes

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = READ if n is None or n < 0 else min(n, READ)
        end = min(self._pos + n, self._view.nbytes)
        data = bytes(self._view[self._pos : end])
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        n = min(len(b), self._view.nbytes - self._pos)
        if n <= 0:
            return 0
        memoryview(b).cast("B")[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._view.nbytes}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos
