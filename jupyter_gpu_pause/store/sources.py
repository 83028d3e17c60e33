"""The bytes of a blob to write, read part by part so that nothing copies a whole blob.

A source has ``nbytes`` and ``chunk(offset, n)``, which returns a buffer of ``n`` bytes. For
memory the process can address (bytes, numpy arrays, CPU tensors), a chunk is a slice of a
memoryview: no copy at all. A device tensor's source (``kernel/capture.py``) copies just that
chunk to host memory, so a GPU blob never needs its whole size in host RAM. (``body.Body``
hands a chunk to an S3 request.) A pass that reads a source in order (hashing it, writing a
local file) goes through ``chunks``, which lets a GPU storage stream its parts through a few
reused pinned buffers instead (``kernel/staging.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from contextlib import closing
from typing import TYPE_CHECKING, Protocol, cast

from .integrity import StreamingHash, blob_hash

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from .integrity import BytesLike

HASH_CHUNK = 64 * 1024 * 1024  # bytes a chunked source is hashed in


class Stopped(Exception):
    """A pass over a source was asked to stop (another writer failed, or the pause was
    interrupted) and ended at its next part."""


class Source(Protocol):
    nbytes: int

    def chunk(self, offset: int, n: int) -> memoryview: ...


class BufferSource:
    """A source over any C-contiguous buffer, read in place."""

    def __init__(self, data: BytesLike) -> None:
        # TypeError for a buffer not in one run
        self.view = memoryview(cast("ReadableBuffer", data)).cast("B")
        self.nbytes = self.view.nbytes

    def chunk(self, offset: int, n: int) -> memoryview:
        return self.view[offset : offset + n]

    def hash(self) -> str:
        return blob_hash(self.view)


def as_source(data: Source | BytesLike) -> Source:
    """``data`` itself when it already is a source, else a BufferSource over it."""
    if hasattr(data, "chunk") and hasattr(data, "nbytes"):
        return cast(Source, data)  # these two attributes are all a Source is
    return BufferSource(data)


def chunks(src: Source, step: int) -> Generator[memoryview, None, None]:
    """The bytes of ``src`` in order, in parts of at most ``step`` bytes.

    A part is valid only until the next one is asked for: a source with a ``stream(step)`` of
    its own (a GPU storage) reuses a few host buffers and copies the next parts while the
    caller works on this one. Close the iterator when stopping early (``contextlib.closing``).
    """
    stream = getattr(src, "stream", None)
    if stream is not None:
        parts: Generator[memoryview, None, None] = stream(step)
        return parts
    return (src.chunk(off, min(step, src.nbytes - off)) for off in range(0, src.nbytes, step))


def source_hash(src: Source, stop: threading.Event | None = None) -> str:
    """The blob name of a source: in one call over memory, else part by part. ``stop`` (a
    ``threading.Event``), once set, ends a hash part by part at its next part with Stopped."""
    if isinstance(src, BufferSource):
        return src.hash()
    hasher = StreamingHash()
    with closing(chunks(src, HASH_CHUNK)) as parts:
        for part in parts:
            if stop is not None and stop.is_set():
                raise Stopped
            hasher.update(part)
    return hasher.hexdigest()
