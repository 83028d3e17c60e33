"""The request body of an S3 upload part: one chunk of a source, handed over without copies.

botocore accepts bytes or file-like objects, not memoryviews, and ``bytes(chunk)`` would copy
every part once more. Its own module because it subclasses aiohttp's Payload: importing aiohttp
costs a kernel ~0.15 s, which a pause or resume on a local store should not pay
(``store.transfer`` imports this on its first request with a body).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

READ = 256 * 1024  # most bytes one read of a Body returns, and one write of it sends

if TYPE_CHECKING:
    from aiohttp.abc import AbstractStreamWriter
    from aiohttp.payload import Payload as _Payload

    _HAVE_AIOHTTP = True
else:
    try:  # s3fs always brings aiohttp (through aiobotocore); a plain file object without it
        from aiohttp.payload import Payload as _Payload

        _HAVE_AIOHTTP = True
    except ImportError:  # pragma: no cover
        _Payload = object
        _HAVE_AIOHTTP = False


class Body(_Payload):
    """A request body over one memoryview: a seekable file for botocore, and for aiohttp a
    payload that sends the memory itself.

    botocore reads the body to sign and checksum the request and seeks back. aiohttp would
    read a file-like body again in executor threads, 256 KiB per hop, copying each piece; with
    ten requests in flight, glibc kept those threads' freed pieces (one arena per thread), and
    a 256 MiB pause grew the kernel by some 20 MiB. As its own Payload type (not an
    ``io.IOBase``, which aiobotocore would wrap) the body hands slices of the memoryview to the
    socket instead. botocore's reads are cut at READ bytes (it asks for 1 MiB; short reads are
    part of the file protocol): measured, 2-3 MiB extra for a 256 MiB pause, against 4-5 MiB
    for 1 MiB reads.
    """

    def __init__(self, view: memoryview) -> None:
        if _HAVE_AIOHTTP:
            super().__init__(view, content_type="application/octet-stream")
        self._view = view
        self._pos = 0
        self._size = view.nbytes

    # -- a file, for botocore -------------------------------------------------------------------
    def __len__(self) -> int:
        return self._view.nbytes

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        n = READ if n is None or n < 0 else min(n, READ)
        data = bytes(self._view[self._pos : self._pos + n])
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._view.nbytes}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    # -- a payload, for aiohttp -----------------------------------------------------------------
    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return bytes(self._view).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        end = self._view.nbytes if content_length is None else min(content_length, len(self))
        for off in range(0, end, READ):
            await writer.write(self._view[off : min(off + READ, end)])
