"""Blob writes that go on while the caller does other work: on a local disk, several at once.

A pause hashes a batch of blobs, announces and looks them up, then writes the new ones
(``kernel/capture.py``). Written one after another, a blob first fills the page cache (the CPU
copies) and then waits for its fsync (the disk writes): the disk idles during the one, the
CPU during the other, and each rename cost a folder fsync, i.e. a journal commit, of its own.
On an H200 machine such writes reached 64-75 % of the disk's rate. Here ``LocalWrites`` hands
each blob to one of ``WRITERS`` threads (``os.write``, fsync and the hash of a re-read all
release the GIL), so while one blob waits for its fsync others fill the cache, and the caller
hashes the next batch meanwhile. The folders are fsync'd once, when the caller waits for the
writes, not once per blob.

Every blob keeps its guarantees: it appears under its name whole or not at all (temporary
name, fsync, rename), and with ``verify`` its writer re-reads it and checks its hash before the
rename, so a blob that fails the read-back never appears under its name (later pauses find
blobs by name and would reuse it). The first writer to fail stops the others at their next
part (their temporary files are removed, no new blob appears) and its error is raised; an
interrupt does the same without waiting for them, unless their sources stream through buffers
freed after the writes (``staged``: a GPU pause's pinned staging buffers, which only the
writers ever stream).

Other stores write as they always did, in ``add`` itself (``SerialWrites``): S3 already sends
its blobs and their parts in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from . import local
from .format import blob_path
from .integrity import IntegrityError
from .sources import Source, Stopped

if TYPE_CHECKING:
    from typing import ParamSpec  # novm: Python 3.10's, and a kernel's may be 3.9

    from .io import Store

    P = ParamSpec("P")
T = TypeVar("T")
Sent = Callable[[int], object]  # hears of the bytes written so far

# Blobs written at once on a local disk. Two already overlap one blob's fsync with the next
# one's copy into the page cache; four keep the disk busy while one writer re-reads (verify)
# and another waits on a staging copy. More bring nothing on one disk (measured with 8 on the
# dev VM: the same rate) and cost threads and, for GPU tensors, a pinned staging buffer each.
WRITERS = 4
# Blobs of fewer bytes than this, handed over while no write is in flight, are written by the
# caller: for a small notebook's few small blobs, waking threads cost more than they overlap.
INLINE_BYTES = 8 << 20
REPORT = 0.1  # seconds between two progress reports while waiting for the writers


class Threads(ThreadPoolExecutor):
    """A thread pool whose ``close`` can wait for every task it ran, even one run by a thread
    the pool never noted: an interrupt (the server cancelling a pause) raised inside the
    ``Thread.start`` that ``submit`` calls leaves such a thread, which ``shutdown`` does not
    wait for, and which could go on streaming a staging buffer after the pause freed them.

    Each task must look at its stop event first: one that starts after ``close`` then does
    nothing, and one that started before is counted and waited for.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._busy = 0
        self._idle = threading.Condition()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(self._counted, fn, *args, **kwargs)

    def _counted(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self._idle:
            self._busy += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def close(self, wait: bool) -> None:
        """Cancel the tasks not started; with ``wait``, return once every task has ended."""
        self.shutdown(wait=wait, cancel_futures=True)
        if wait:
            with self._idle:
                self._idle.wait_for(lambda: self._busy == 0)


class LocalWrites:
    """Blobs written to a local store by up to ``writers`` threads while the caller goes on.

    ``add`` hands blobs over and returns at once; ``wait`` returns once every blob handed over
    is written, verified (``verify``) and durable (its folders fsync'd). Use it as a context
    manager: leaving it early (an error, an interrupt) stops the writers.
    """

    def __init__(
        self, store: Store, verify: bool, writers: int = WRITERS, staged: bool = False
    ) -> None:
        self._store = store
        self._verify = verify
        self._staged = staged
        self._pool = Threads(max_workers=max(1, writers), thread_name_prefix="gp-write")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._futures: list[Future[None]] = []
        self._dirs: set[str] = set()
        self.sent = 0  # bytes written so far, by all writers

    def __enter__(self) -> LocalWrites:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is not None:
            self._stop.set()
        # a failure waits for the writers to stop (a part at most: no temporary file is left
        # when the error is raised); an interrupt does not, unless staging buffers are in use
        wait = kind is None or self._staged or issubclass(kind, Exception)
        self._pool.close(wait)

    def add(self, items: list[tuple[str, Source]], sent: Sent | None = None) -> None:
        """Start writing blobs ``[(hash, source)]`` the store does not have; small ones with
        nothing in flight are written here (``INLINE_BYTES``), unless ``staged``: an interrupt
        could then come between taking a staging buffer and noting it."""
        idle = all(f.done() for f in self._futures)
        if idle and not self._staged and sum(src.nbytes for _, src in items) < INLINE_BYTES:
            for h, src in items:
                self._one(h, src)
            return
        for h, src in items:
            self._futures.append(self._pool.submit(self._one, h, src))

    def _one(self, h: str, src: Source) -> None:
        if self._stop.is_set():
            return
        path = self._store._p(blob_path(h))
        check: Callable[[str], None] | None = None
        if self._verify:  # read back under its temporary name: a bad blob never gets its name

            def check(tmp: str) -> None:
                self._store.verify_blob(h, src.nbytes, at=tmp)

        try:
            changed = local.write_file(path, src, self._stop, self._wrote, check)
        except Stopped:
            return
        except IntegrityError:
            raise
        except Exception as e:
            raise self._store._wrap("write", path, e) from e
        with self._lock:
            self._dirs |= changed

    def _wrote(self, n: int) -> None:
        with self._lock:
            self.sent += n

    def wait(self, sent: Sent | None = None) -> None:
        """Wait for every blob handed over; ``sent(bytes_so_far)`` hears of the progress, from
        this thread only. The first error of a writer is raised (leaving the context manager
        then stops the others)."""
        pending = set(self._futures)
        while pending:
            done, pending = wait_for(pending, timeout=REPORT, return_when=FIRST_EXCEPTION)
            for f in done:
                f.result()  # the first IntegrityError / StoreError
            if sent:
                sent(self.sent)
        self._futures.clear()
        with self._lock:
            dirs, self._dirs = self._dirs, set()
        try:
            local.fsync_dirs(dirs)
        except Exception as e:
            raise self._store._wrap("write", self._store.root, e) from e


class SerialWrites:
    """Blobs written by ``Store.write_blobs`` within ``add``: a remote store's own way."""

    def __init__(self, store: Store, verify: bool) -> None:
        self._store = store
        self._verify = verify
        self.sent = 0

    def __enter__(self) -> SerialWrites:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def add(self, items: list[tuple[str, Source]], sent: Sent | None = None) -> None:
        base = self.sent
        report = (lambda n: sent(base + n)) if sent else None
        self._store.write_blobs(items, verify=self._verify, sent=report)
        self.sent += sum(src.nbytes for _, src in items)

    def wait(self, sent: Sent | None = None) -> None:
        if sent:
            sent(self.sent)
