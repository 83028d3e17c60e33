"""Staging: GPU <-> host copies through a few pinned buffers, overlapped with the host's work.

A pause reads each GPU storage twice (the store hashes it, then writes it) and a restore fills
each one once; either way the bytes cross host memory a part at a time. One pageable copy per
part makes the copy and the host's work (hashing, writing or reading a file) take turns. Here
the copy of the next part runs on a side stream while the host works on this one, in one of a
few pinned buffers (page-locked memory: the only host memory a GPU copies asynchronously).

The scheduling knows nothing of CUDA. A copier (``CudaCopier`` on a GPU, a CPU one in the
tests) allocates host buffers and starts copies, each returning an event to ``synchronize``.
Whatever the copier, three rules hold: a buffer goes to a copy (or to ``fill``) only once the
one before it is done with it (the store has asked for the next part, or the copy's event has
completed); no more than ``Staging.count`` buffers ever exist; and no buffer is handed back
while a copy may still use it, even when the work stops half-way.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

MIB = 1024 * 1024
BUFFER_BYTES = 32 * MIB  # a pause's pinned buffers: the part size the store hashes and writes
BUFFERS = 2  # a pause's pinned buffers: one the store works on, one being copied into (a local
#              store's pause has more: one per writer, ``capture.pause_buffers``)
DEPTH = 2  # buffers one run of parts holds at once (double buffering)
RESTORE_READERS = 4  # blobs a GPU restore reads at once, each through DEPTH buffers of ...
RESTORE_BUFFER_BYTES = 16 * MIB  # ... this size: 4 x 2 x 16 MiB pinned in all


class Event(Protocol):
    def synchronize(self) -> None:
        """Block until the copy (and every copy started before it) has completed."""


class Copier(Protocol):
    """The copy engine: host buffers, device memory and asynchronous copies between them."""

    def handles(self, device) -> bool: ...  # memory on ``device`` is copied by this engine

    def buffer(self, nbytes: int) -> tuple[object, memoryview]: ...  # (handle, its bytes)

    def empty(self, nbytes: int, device: str): ...  # device memory of ``nbytes`` (uint8)

    def to_host(self, src, offset: int, n: int, buf) -> Event: ...

    def to_device(self, buf, n: int, dst, offset: int) -> Event: ...

    def close(self) -> None: ...  # give back what the engine caches (pinned memory)


@dataclass(eq=False)
class Buffer:
    handle: object  # what the copier copies to and from
    view: memoryview  # the same bytes, for the host's work


class Staging:
    """A copier and at most ``count`` host buffers of ``size`` bytes, made on first use and
    handed out one at a time. ``out``: buffers handed out now; ``peak``: the most at once."""

    def __init__(self, copier: Copier, count: int = BUFFERS, size: int = BUFFER_BYTES):
        if count < 1 or size < 1:
            raise ValueError("a staging area needs at least one buffer of at least one byte")
        self.copier, self.count, self.size = copier, count, size
        self.out = self.peak = 0
        self._free: list[Buffer] = []
        self._made = 0
        self._closed = False
        self._cond = threading.Condition()

    def take(self, wait: bool = True) -> Buffer | None:
        """A free buffer; None when none is free and ``wait`` is false.

        A run of parts waits only while it holds no buffer: one that holds some reuses its
        own instead, so runs sharing the buffers can never wait for each other in a circle.
        """
        with self._cond:
            while not self._free and self._made >= self.count:
                if not wait:
                    return None
                self._cond.wait()
            buf = self._free.pop() if self._free else None
            if buf is None:
                self._made += 1
            self.out += 1
            self.peak = max(self.peak, self.out)
        if buf is None:
            try:
                buf = Buffer(*self.copier.buffer(self.size))
            except BaseException:
                self.drop(None)
                raise
        return buf

    def give(self, buf: Buffer) -> None:
        """``buf`` is free: no copy and no reader uses it any more."""
        with self._cond:
            self.out -= 1
            if not self._closed:
                self._free.append(buf)
            self._cond.notify()

    def drop(self, buf: Buffer | None) -> None:
        """Forget a buffer whose copy failed (its state is unknown); a new one may be made."""
        with self._cond:
            self.out -= 1
            self._made -= 1
            self._cond.notify()

    def close(self) -> None:
        """Free the buffers (after every run of parts has ended) and the copier's cache."""
        with self._cond:
            self._closed = True
            self._free.clear()
        self.copier.close()


def _settle(staging: Staging, buf: Buffer, event: Event) -> None:
    """Wait for ``buf``'s copy; a buffer whose copy failed is dropped, never reused."""
    try:
        event.synchronize()
    except BaseException:
        staging.drop(buf)
        raise


def _release(staging: Staging, flight: deque) -> None:
    """Give back buffers whose copies are in flight, each once its copy has ended (the error
    being handled already stops the work: these copies' own failures only drop buffers)."""
    while flight:
        buf, event = flight.popleft()[:2]
        try:
            event.synchronize()
        except Exception:
            staging.drop(buf)
        else:
            staging.give(buf)


def download(staging: Staging, src, nbytes: int, step: int) -> Iterator[memoryview]:
    """The ``nbytes`` of device memory ``src`` in order, in parts of at most ``step`` bytes.

    Each part is a view of a host buffer, valid until the next part is asked for: that is when
    the caller is done with it and the buffer goes back to the copier. Meanwhile the next
    parts are copied into the other buffers. Close the iterator when stopping early
    (``contextlib.closing``): that waits for the copies in flight and frees their buffers.
    """
    copier = staging.copier
    step = max(1, min(step, staging.size))
    flight: deque = deque()  # (buffer, event, bytes): copies started, in order
    held: Buffer | None = None  # the buffer of the part the caller has
    offset = 0  # where the next copy starts

    def start(buf: Buffer) -> None:
        nonlocal offset
        n = min(step, nbytes - offset)
        try:
            flight.append((buf, copier.to_host(src, offset, n, buf.handle), n))
        except BaseException:
            staging.drop(buf)
            raise
        offset += n

    try:
        while True:
            if held is not None:  # the caller asked for the next part: done with this one
                buf, held = held, None
                if offset < nbytes:
                    start(buf)
                else:
                    staging.give(buf)
            while len(flight) < DEPTH and offset < nbytes:
                free = staging.take(wait=not flight)
                if free is None:
                    break
                start(free)
            if not flight:
                return
            buf, event, n = flight.popleft()
            _settle(staging, buf, event)
            held = buf
            yield buf.view[:n]
    finally:
        if held is not None:
            staging.give(held)
        _release(staging, flight)


def upload(
    staging: Staging, fill: Callable[[memoryview], None], dst, nbytes: int, step: int = 0
) -> None:
    """Copy ``nbytes`` into device memory ``dst`` in parts of at most ``step`` bytes (default:
    the buffer size). ``fill(view)`` puts the next part's bytes into a free host buffer (reads a
    file, hashes what it read); that buffer's copy to the device then starts, and the next
    part is filled into another buffer while it runs. Returns once every copy has completed;
    on an error (from ``fill`` or a copy) it first waits for the copies in flight."""
    copier = staging.copier
    step = max(1, min(step or staging.size, staging.size))
    flight: deque = deque()  # (buffer, event): copies started, in order
    try:
        for off in range(0, nbytes, step):
            n = min(step, nbytes - off)
            buf = staging.take(wait=not flight) if len(flight) < DEPTH else None
            if buf is None:  # reuse the oldest buffer once its copy has completed
                buf, event = flight.popleft()
                _settle(staging, buf, event)
            try:
                fill(buf.view[:n])
            except BaseException:
                staging.give(buf)
                raise
            try:
                flight.append((buf, copier.to_device(buf.handle, n, dst, off)))
            except BaseException:
                staging.drop(buf)
                raise
        while flight:
            buf, event = flight.popleft()
            _settle(staging, buf, event)
            staging.give(buf)
    finally:
        _release(staging, flight)


class Stopped(Exception):
    """The work a copy belonged to has already failed or was interrupted."""


def read_in(staging: Staging, reader, dst, nbytes: int, stop: threading.Event | None = None):
    """Fill device memory ``dst`` from ``reader`` through the buffers (``upload``), then let the
    reader check what it read (``finish``: its size and hash); the reader is closed. ``stop``,
    once set, ends it at the next part with Stopped."""

    def fill(view: memoryview) -> None:
        if stop is not None and stop.is_set():
            raise Stopped
        reader.readinto(view)

    try:
        upload(staging, fill, dst, nbytes)
        reader.finish()
    finally:
        reader.close()


class CudaCopier:
    """The copy engine on NVIDIA GPUs: pinned host buffers, one side stream per device, and an
    event recorded after each copy (its ``synchronize`` waits without holding the GIL).

    Before each copy the side stream waits for the device's current stream: a pause must copy
    what the user's queued kernels wrote, and a restore's fresh storage may be memory the
    caching allocator just took back from work still queued there.
    """

    def __init__(self):
        import torch

        self._torch = torch
        self._streams: dict = {}
        self._lock = threading.Lock()

    def handles(self, device) -> bool:
        return self._torch.device(device).type == "cuda"

    def buffer(self, nbytes: int):
        t = self._torch.empty(nbytes, dtype=self._torch.uint8, pin_memory=True)
        return t, memoryview(cast("ReadableBuffer", t.numpy()))

    def empty(self, nbytes: int, device: str):
        return self._torch.empty(nbytes, dtype=self._torch.uint8, device=device)

    def _copy(self, device, out, src):
        torch = self._torch
        with self._lock:
            stream = self._streams.get(device.index)
            if stream is None:
                stream = self._streams[device.index] = torch.cuda.Stream(device)
        with torch.cuda.device(device):
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                out.copy_(src, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        return event

    def to_host(self, src, offset: int, n: int, buf):
        return self._copy(src.device, buf[:n], src[offset : offset + n])

    def to_device(self, buf, n: int, dst, offset: int):
        return self._copy(dst.device, dst[offset : offset + n], buf[:n])

    def close(self) -> None:
        # torch keeps freed pinned blocks cached for reuse: give them back to the system
        empty_host_cache = getattr(self._torch._C, "_host_emptyCache", None)
        if empty_host_cache is not None:
            empty_host_cache()


def cuda_staging(
    devices: Iterable, count: int = BUFFERS, size: int = BUFFER_BYTES
) -> Staging | None:
    """Pinned staging when any of ``devices`` (torch devices or names) is a CUDA device, else
    None: CPU memory is read in place and needs none."""
    if not any(str(d).startswith("cuda") for d in devices):
        return None
    return Staging(CudaCopier(), count, size)
