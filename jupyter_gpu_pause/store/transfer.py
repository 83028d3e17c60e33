"""Blob transfers with S3 (s3fs): parts in parallel, straight from and into the final memory.

A blob larger than one part goes up as a multipart upload whose parts are read from the
tensor's own memory (``body.Body``), several at a time; a smaller one is a single PUT. A
read is a set of ranged GETs, several at a time, each streamed into its slice of the final
buffer. Every request holds one of ``max_concurrency`` slots (s3fs's own option, 10 unless the
admin sets ``store_options["max_concurrency"]``) for all its attempts, so a request that waits
for a slot is not yet on the clock, and a stuck one frees its slot within the bound of
``bounded.attempts``. An upload that fails or is cancelled is aborted on S3 in the background
(AbortMultipartUpload), without making the caller wait for a store that may not answer.

Everything here runs on fsspec's event loop; ``io.Store`` calls it through ``bounded.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypedDict, TypeVar

from .bounded import attempts
from .integrity import StreamingHash, blob_hash
from .sources import BufferSource, Source

MIB = 1024 * 1024
PART = 8 * MIB  # bytes per uploaded part; S3 wants at least 5 MiB but for the last
MAX_PARTS = 10_000  # S3's limit on the parts of one upload
MAX_SPAN = 64 * MIB  # largest ranged GET (a blob is read in about one GET per slot)
STREAM = 256 * 1024  # most bytes taken from a response body at a time (see body.READ)
WINDOW = 4  # parts a sequential digest fetches ahead (memory: WINDOW * PART)

T = TypeVar("T")

# aborts still running; asyncio keeps only weak references to tasks
_background: set[asyncio.Task[None]] = set()


class SizeMismatch(Exception):
    """The stored object does not have the expected size."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the store holds {size} bytes")
        self.size = size


class Where(TypedDict):
    """An S3 object's address, as every request about it names it."""

    Bucket: str
    Key: str


class PartMismatch(Exception):
    """Bytes read back differ from the bytes that were sent."""


def part_size(nbytes: int) -> int:
    """PART, or the MiB multiple that keeps a huge blob within S3's 10 000 parts."""
    need = -(-nbytes // MAX_PARTS)
    return max(PART, -(-need // MIB) * MIB)


def read_span(nbytes: int, slots: int) -> int:
    """Bytes per ranged GET: about one GET per slot, between PART and MAX_SPAN.

    Fewer, larger GETs cost less per byte (some stores, moto among them, pay for the whole
    object on every ranged GET); a span streams straight into its place, so its size costs no
    memory. A stalled GET is noticed by botocore's read timeout, whatever its size.
    """
    want = -(-nbytes // max(1, slots))
    return max(PART, min(MAX_SPAN, -(-want // MIB) * MIB))


def ranges(nbytes: int, step: int) -> list[tuple[int, int]]:
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


async def all_or_nothing(coros: Iterable[Awaitable[T]]) -> list[T]:
    """Run coroutines together; at the first failure cancel the others and raise it.

    ``asyncio.gather`` would let the others run on after one failed, holding slots and
    sending bytes for a blob that is already lost.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    for t in tasks:  # a second failure is not "never retrieved": the first one is raised
        t.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                error = None if t.cancelled() else t.exception()
                if error is not None:
                    raise error
        return [t.result() for t in tasks]
    finally:
        for t in tasks:
            t.cancel()


class S3Transfer:
    """Transfers of one Store over one s3fs filesystem (whose own retries are turned off)."""

    def __init__(self, fs: Any, timeout: float) -> None:
        self.fs = fs  # an s3fs S3FileSystem (untyped)
        self.timeout = timeout
        self.width = max(1, int(getattr(fs, "max_concurrency", 10) or 10))
        self.slots = asyncio.Semaphore(self.width)
        self.ticks = 0  # requests answered and body pieces moved: what "progress" means

    def _limit(self, nbytes: int) -> float:
        """The hard limit of one GET attempt: ``timeout`` per PART it carries."""
        return self.timeout * max(1, -(-nbytes // PART))

    def _where(self, path: str) -> Where:
        bucket, key, _ = self.fs.split_path(path)
        return {"Bucket": bucket, "Key": key}

    async def request(
        self, method: str, body: Callable[[], memoryview] | None = None, **kw: Any
    ) -> Any:
        """One S3 request with its attempts, holding a slot; ``body`` makes the payload anew
        for each attempt (a device source copies its part to host memory only then)."""

        from .body import Body  # aiohttp, only once something is sent (see body.py)

        async def once() -> Any:
            extra = {"Body": Body(body())} if body is not None else {}
            return await self.fs._call_s3(method, **kw, **extra)

        async with self.slots:
            out = await attempts(once, self.timeout)
        self.ticks += 1
        return out

    async def size(self, path: str) -> int | None:
        """The object's size (a HEAD), or None when there is no such object."""
        try:
            out = await self.request("head_object", **self._where(path))
        except FileNotFoundError:
            return None
        return int(out["ContentLength"])

    # -- upload ----------------------------------------------------------------------------------
    async def put(self, path: str, src: Source, sent: Callable[[int], None]) -> None:
        """Store ``src`` under ``path``: one PUT up to PART, else a multipart upload."""
        n, where = src.nbytes, self._where(path)
        if n <= PART:
            await self.request("put_object", body=lambda: src.chunk(0, n), **where)
            sent(n)
            return
        upload = await self.request("create_multipart_upload", **where)
        uid = upload["UploadId"]
        try:

            async def part(number: int, off: int, size: int) -> dict[str, Any]:
                out = await self.request(
                    "upload_part",
                    body=lambda: src.chunk(off, size),
                    UploadId=uid,
                    PartNumber=number,
                    **where,
                )
                sent(size)
                return {"PartNumber": number, "ETag": out["ETag"]}

            parts = await all_or_nothing(
                part(i + 1, off, size) for i, (off, size) in enumerate(ranges(n, part_size(n)))
            )
            await self.request(
                "complete_multipart_upload",
                UploadId=uid,
                MultipartUpload={"Parts": parts},
                **where,
            )
        except BaseException:
            self._abort_later(where, uid)
            raise

    def _abort_later(self, where: Where, uid: str) -> None:
        """Abort an upload in the background: best effort, bounded, never waited for."""

        async def abort() -> None:
            with contextlib.suppress(Exception):
                await attempts(
                    lambda: self.fs._call_s3("abort_multipart_upload", UploadId=uid, **where),
                    self.timeout,
                )

        task = asyncio.get_running_loop().create_task(abort())
        _background.add(task)
        task.add_done_callback(_background.discard)

    # -- download --------------------------------------------------------------------------------
    async def _stream(
        self, where: Where, off: int, n: int, sink: Callable[[int, bytes], None]
    ) -> None:
        """One ranged GET, handing each piece of the body to ``sink(offset, piece)``."""
        resp = await self.fs._call_s3("get_object", Range=f"bytes={off}-{off + n - 1}", **where)
        body = resp["Body"]
        try:
            pos = off
            while pos < off + n:
                piece = await body.read(min(STREAM, off + n - pos))
                if not piece:
                    from botocore.exceptions import IncompleteReadError

                    raise IncompleteReadError(actual_bytes=pos - off, expected_bytes=n)
                sink(pos, piece)
                pos += len(piece)
                self.ticks += 1
        finally:
            body.close()

    async def _checked_size(self, path: str, expected: int) -> Where:
        size = await self.size(path)
        if size is None:
            raise FileNotFoundError(path)
        if size != expected:
            raise SizeMismatch(size)
        return self._where(path)

    async def read_into(self, path: str, view: memoryview, got: Callable[[int], None]) -> None:
        """Fill ``view`` (the blob's exact size) with parallel ranged GETs."""
        where = await self._checked_size(path, view.nbytes)

        def sink(pos: int, piece: bytes) -> None:
            view[pos : pos + len(piece)] = piece

        async def part(off: int, n: int) -> None:
            async with self.slots:
                await attempts(lambda: self._stream(where, off, n, sink), self._limit(n))
            got(n)

        span = read_span(view.nbytes, self.width)
        await all_or_nothing(part(off, n) for off, n in ranges(view.nbytes, span))

    async def check(self, path: str, src: Source) -> None:
        """Read an uploaded blob back and compare it with its source, part by part.

        Each part's bytes are hashed as they stream in and compared with the hash of the same
        part of the source, so nothing is buffered; equal parts and equal sizes mean the object
        holds exactly the source's bytes, whose hash names the blob.
        """
        where = await self._checked_size(path, src.nbytes)

        async def part(off: int, n: int) -> None:
            async def once() -> str:
                hasher = StreamingHash()
                await self._stream(where, off, n, lambda _, piece: hasher.update(piece))
                return hasher.hexdigest()

            async with self.slots:
                got = await attempts(once, self._limit(n))
            if got != blob_hash(src.chunk(off, n)):
                raise PartMismatch(f"bytes {off}-{off + n - 1} differ from what was sent")

        # a device source copies each compared span to host memory: keep those small
        span = read_span(src.nbytes, self.width) if isinstance(src, BufferSource) else PART
        await all_or_nothing(part(off, n) for off, n in ranges(src.nbytes, span))

    async def digest(self, path: str, expected: int) -> str:
        """The xxh3-128 of a stored object, read in order with WINDOW parts fetched ahead."""
        where = await self._checked_size(path, expected)
        hasher = StreamingHash()

        async def fetch(off: int, n: int) -> bytearray:
            buf = bytearray(n)

            def sink(pos: int, piece: bytes) -> None:
                buf[pos - off : pos - off + len(piece)] = piece

            async with self.slots:
                await attempts(lambda: self._stream(where, off, n, sink), self.timeout)
            return buf

        todo = ranges(expected, PART)
        for i in range(0, len(todo), WINDOW):
            for buf in await all_or_nothing(fetch(off, n) for off, n in todo[i : i + WINDOW]):
                hasher.update(buf)
        return hasher.hexdigest()
