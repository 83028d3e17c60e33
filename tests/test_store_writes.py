"""Blobs written several at once on a local disk (store/writes.py) while the next batch is
hashed (kernel/capture.py): each blob still appears whole or not at all, the first writer to
fail stops the others and fails the write, an interrupt stops every writer at its next part,
and a pause through the staging buffers gets every buffer back whatever happens.

Faults are real: a file-size limit the OS enforces, a copy engine that fails (the CPU fake of
the CUDA one, tests/test_staging.py), Ctrl-C sent to this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import xxhash

from jupyter_gpu_pause.kernel.capture import (
    BATCH_BLOBS,
    BATCH_BYTES,
    FIRST_BATCH_BYTES,
    _batches,
    _Blob,
    make_plan,
    write_plan,
)
from jupyter_gpu_pause.kernel.staging import Staging
from jupyter_gpu_pause.store import Store, StoreError
from jupyter_gpu_pause.store.format import blob_path
from jupyter_gpu_pause.store.integrity import IntegrityError
from jupyter_gpu_pause.store.sources import as_source
from jupyter_gpu_pause.store.writes import INLINE_BYTES, WRITERS
from tests.test_staging import CopyFailed, LazyCopier, pattern
from tests.test_store_io import Interrupt, wait_until
from tests.test_store_unit import leftovers

MIB = 1024 * 1024


class Tally:
    """What the writers do with the test's sources: streams open now, the most at once, parts
    handed over, and a barrier the first part of each stream waits at."""

    def __init__(self, barrier: int = 0):
        self.lock = threading.Lock()
        self.open = self.peak = self.parts = 0
        self.barrier = threading.Barrier(barrier, timeout=20) if barrier else None


class SlowSource:
    """A test double of a source read part by part, as a GPU tensor's is (``DeviceSource``):
    ``data`` in parts of ``part`` bytes, each handed over ``delay`` seconds after it is asked
    for."""

    def __init__(self, data: bytes, tally: Tally, part: int = 64 * 1024, delay: float = 0.0):
        self.data, self.tally, self.part, self.delay = data, tally, part, delay
        self.nbytes = len(data)

    def chunk(self, offset: int, n: int) -> memoryview:
        return memoryview(self.data)[offset : offset + n]

    def stream(self, step: int):
        t = self.tally
        with t.lock:
            t.open += 1
            t.peak = max(t.peak, t.open)
        try:
            for off in range(0, self.nbytes, min(step, self.part)):
                if off == 0 and t.barrier is not None:
                    t.barrier.wait()  # BrokenBarrierError unless enough writes are in flight
                time.sleep(self.delay)
                with t.lock:
                    t.parts += 1
                yield self.chunk(off, min(step, self.part, self.nbytes - off))
        finally:
            with t.lock:
                t.open -= 1


def blobs_in(store_dir: Path) -> dict[str, bytes]:
    root = store_dir / "v1" / "blobs"
    return {p.name: p.read_bytes() for p in root.rglob("*") if p.is_file()} if root.exists() else {}


def assert_every_blob_whole(store_dir: Path) -> None:
    """Every file under a blob's name holds exactly the bytes that name is the hash of, and no
    temporary file is left."""
    for name, data in blobs_in(store_dir).items():
        assert ".tmp-" not in name, name
        assert xxhash.xxh3_128_hexdigest(data) == name, f"blob {name} is not whole"
    assert leftovers(store_dir) == []


def our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("gp-write", "gp-hash"))]


def items_of(datas: list[bytes], tally: Tally, **kw) -> list:
    return [(xxhash.xxh3_128_hexdigest(d), SlowSource(d, tally, **kw)) for d in datas]


def distinct(n: int, size: int) -> list[bytes]:
    return [bytes([i]) * size for i in range(n)]


# -- several at once -----------------------------------------------------------------------------


def test_blobs_are_written_several_at_once_and_each_appears_whole(store_dir):
    # Given twice as many blobs as writers, each read part by part, whose first part is handed
    # over only once WRITERS of them are being written at the same time
    tally = Tally(barrier=WRITERS)
    datas = distinct(2 * WRITERS, 3 * 512 * 1024 + 5)
    store = Store(str(store_dir))
    # When they are written and verified
    store.write_blobs(items_of(datas, tally), verify=True)
    # Then WRITERS writes were in flight at once (never more), and every blob is stored whole
    # under its name, with no temporary file left
    assert tally.peak == WRITERS and tally.open == 0
    assert sorted(blobs_in(store_dir).values()) == sorted(datas)
    assert len(datas[0]) * len(datas) >= INLINE_BYTES
    assert_every_blob_whole(store_dir)
    # And the writers are gone
    assert our_threads() == []


def test_a_small_plan_is_written_by_the_caller_with_its_progress(store_dir):
    # Given a notebook of a few small tensors (well under INLINE_BYTES)
    ns = {f"t{i}": pattern(200_000 + i, seed=i) for i in range(9)}
    plan = make_plan(ns, {}, [], "namespace")
    heard = []

    def progress(phase, done, total):
        heard.append((threading.current_thread() is threading.main_thread(), our_threads(), done))

    # When it is written
    result = write_plan(plan, Store(str(store_dir)), progress=progress)
    # Then no thread was started for it: waking threads costs more than it saves here
    assert all(main and not threads for main, threads, _ in heard)
    # And the progress grew to every byte of every blob
    assert [d for *_, d in heard] == sorted(d for *_, d in heard)
    assert heard[-1][-1] == sum(b["bytes"] for b in result["blobs"].values())
    assert_every_blob_whole(store_dir)


def test_progress_of_writers_is_reported_from_the_callers_thread(store_dir):
    # Given a namespace larger than INLINE_BYTES, in more than one batch
    ns = {f"t{i}": pattern(12 * MIB + i, seed=i) for i in range(8)}
    plan = make_plan(ns, {}, [], "namespace")
    heard = []

    def progress(phase, done, total):
        heard.append((threading.current_thread() is threading.main_thread(), done))

    # When it is written by the writers
    result = write_plan(plan, Store(str(store_dir)), progress=progress, verify=True)
    # Then every report came from the caller's thread, growing up to every byte
    assert all(main for main, _ in heard)
    assert [d for _, d in heard] == sorted(d for _, d in heard)
    assert heard[-1][1] == sum(b["bytes"] for b in result["blobs"].values())
    assert_every_blob_whole(store_dir)


# -- failures ------------------------------------------------------------------------------------

FSIZE_LIMITED = r"""
import json, resource, signal, sys
import xxhash
from jupyter_gpu_pause.store import Store, StoreError
from jupyter_gpu_pause.store.sources import BufferSource

MIB = 1 << 20
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
store = Store(sys.argv[1])
datas = [bytes([i]) * (MIB // 2) for i in range(7)] + [b"\x07" * (6 * MIB)]
resource.setrlimit(resource.RLIMIT_FSIZE, (2 * MIB, 2 * MIB))  # no file of more than 2 MiB
try:
    store.write_blobs([(xxhash.xxh3_128_hexdigest(d), BufferSource(d)) for d in datas], True)
except StoreError as e:
    print(json.dumps({"error": str(e), "big": xxhash.xxh3_128_hexdigest(datas[-1])}))
"""


def test_a_disk_error_in_one_writer_fails_the_write_and_leaves_no_partial_blob(store_dir):
    # Given a process whose files may not grow past 2 MiB (the OS refuses with EFBIG), writing
    # seven blobs of 0.5 MiB and one of 6 MiB at once
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", FSIZE_LIMITED, str(store_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # Then the write fails with the OS's reason and the blob's path
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert "could not write" in failed["error"] and "File too large" in failed["error"]
    assert blob_path(failed["big"]) in failed["error"]
    # And the big blob does not exist, no temporary file is left, and whatever was stored is
    # whole under its name
    assert failed["big"] not in blobs_in(store_dir)
    assert_every_blob_whole(store_dir)


PART = 256 * 1024  # staging buffers of the tests through them: 9 parts per tensor below


def namespaces(layout: str) -> dict:
    """``one``: six tensors of 9 parts, one batch; ``two``: 70 tensors of 2 parts, two batches
    (BATCH_BLOBS), the second hashed on the hashing thread while the first is written."""
    if layout == "one":
        return {f"t{i}": pattern(8 * PART + i + 1, seed=i) for i in range(6)}
    return {f"t{i}": pattern(PART + i + 1, seed=i) for i in range(70)}


# "one": 108 copies, 54 parts hashed by the caller, then written by the writers; "two": 280
# copies, 128 hashed by the caller, then batch 1's writes beside batch 2's hashing (12), ...
@pytest.mark.parametrize(
    ("layout", "fail"),
    [("one", 0), ("one", 20), ("one", 54), ("one", 60), ("one", 90), ("one", 107)]
    + [("two", 100), ("two", 130), ("two", 140), ("two", 200), ("two", 279)],
)
def test_a_copy_failing_in_any_thread_fails_the_pause_and_every_buffer_comes_back(
    tmp_path, layout, fail
):
    # Given tensors captured through the staging buffers, whose copy engine fails at one copy
    # (of the hashing or of one of the writers, which run at once)
    ns = namespaces(layout)
    before = {k: v.clone() for k, v in ns.items()}
    staging = Staging(LazyCopier(fail_copy=fail), WRITERS + 2, PART)
    store_dir = tmp_path / "store"
    # When the plan is written
    # Then it fails with the copy's error (as the store's, "could not write", from a writer)
    with pytest.raises((CopyFailed, StoreError), match="CUDA error"):
        write_plan(make_plan(ns, {}, [], "namespace"), Store(str(store_dir)), staging=staging)
    # once every writer has stopped: every buffer is back, no thread of the write is left,
    # and nothing partial is visible
    assert staging.out == 0 and our_threads() == []
    assert_every_blob_whole(store_dir)
    # And the namespace is unchanged
    assert all(torch.equal(ns[k], before[k]) for k in ns)


# -- interrupts ----------------------------------------------------------------------------------


def test_an_interrupt_stops_every_writer_at_its_next_part(store_dir):
    # Given blobs read part by part, slowly enough that the writes take many seconds
    tally = Tally()
    items = items_of(distinct(2 * WRITERS, 64 * 64 * 1024), tally, delay=0.05)
    store = Store(str(store_dir))
    # When the process is interrupted (the server cancelling the pause) while WRITERS blobs
    # are being written
    with Interrupt(lambda: tally.open == WRITERS and tally.parts >= 2 * WRITERS) as ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            store.write_blobs(items, verify=True)
        returned_at = time.monotonic()
        parts_then = tally.parts
    # Then the call returns at once, without waiting for the writers
    assert returned_at - ctrl_c.sent_at < 1.0
    # And every writer stops at its next part: at most one more part each, then its thread ends
    wait_until(lambda: our_threads() == [], 5, "the writers' end")
    assert tally.open == 0 and tally.parts - parts_then <= WRITERS
    # And no blob appeared and no temporary file is left
    assert blobs_in(store_dir) == {} and leftovers(store_dir) == []


class SlowCopier(LazyCopier):
    """The CPU fake of the CUDA copy engine, each copy taking a few milliseconds."""

    def to_host(self, src, offset: int, n: int, buf):
        time.sleep(0.005)
        return super().to_host(src, offset, n, buf)


@pytest.mark.parametrize("moment", ["hashing", "writing"])
def test_an_interrupted_pause_through_the_buffers_waits_for_its_copies(tmp_path, moment):
    # Given tensors captured through the staging buffers, the copies slow
    ns = {f"t{i}": pattern(16 * PART, seed=i) for i in range(6)}
    staging = Staging(SlowCopier(), WRITERS + 2, PART)
    store_dir = tmp_path / "store"
    plan = make_plan(ns, {}, [], "namespace")
    # When the process is interrupted while the blobs are hashed, or while they are written
    if moment == "hashing":
        when = lambda: staging.copier.copies > 20 and not (store_dir / "v1" / "blobs").exists()  # noqa: E731
    else:
        when = lambda: leftovers(store_dir)  # noqa: E731
    with Interrupt(when) as ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            write_plan(plan, Store(str(store_dir)), staging=staging)
        returned_at = time.monotonic()
    # Then it returns within a part's time of each thread, once every copy has ended and
    # every buffer is back (they may be freed now), and no thread of the write is left
    assert returned_at - ctrl_c.sent_at < 2.0
    assert staging.out == 0 and our_threads() == []
    # And nothing partial is visible
    assert_every_blob_whole(store_dir)


# -- batches -------------------------------------------------------------------------------------


def sized(sizes: list[int]) -> list[_Blob]:
    return [_Blob(SimpleNamespace(nbytes=n), "tensor", {}) for n in sizes]


@pytest.mark.parametrize(
    ("sizes", "batches"),
    [
        # the first batch is about FIRST_BATCH_BYTES, each next one up to twice the one before
        ([FIRST_BATCH_BYTES] * 4, [1, 2, 1]),
        ([FIRST_BATCH_BYTES // 2] * 8, [2, 4, 2]),
        # never more than BATCH_BYTES
        ([BATCH_BYTES // 2] * 8, [1, 1, 1, 1, 2, 2]),
        # nor BATCH_BLOBS blobs
        ([1] * (2 * BATCH_BLOBS + 1), [BATCH_BLOBS, BATCH_BLOBS, 1]),
        ([], []),
    ],
)
def test_the_first_batches_are_small_so_that_writing_starts_soon(sizes, batches):
    assert [len(b) for b in _batches(sized(sizes))] == batches


# -- a blob that fails its read-back -------------------------------------------------------------


@pytest.mark.parametrize("where", ["local disk", "other fsspec store"])
@pytest.mark.parametrize("size", [64 * 1024, 3 * INLINE_BYTES])  # written inline / by the writers
def test_a_blob_that_fails_its_read_back_never_stays_under_its_name(where, size, store_dir):
    # Given bytes that changed after they were hashed (another thread writing into the array
    # while it is paused): what is written is not what the blob's name says
    good = bytes(range(256)) * (size // 256)
    h = xxhash.xxh3_128_hexdigest(good)
    changed = bytearray(good)
    changed[size // 2] ^= 0xFF
    url = str(store_dir) if where == "local disk" else f"memory://gp-{os.getpid()}-{size}"
    store = Store(url)

    # When the blob is written with its read-back
    with pytest.raises(IntegrityError, match="checksum"):
        store.write_blobs([(h, as_source(changed))], verify=True)

    # Then nothing is left under its name, so the next pause writes it again instead of
    # finding it there and reusing it
    assert store.blob_size(h) is None
    if where == "local disk":
        assert blobs_in(store_dir) == {} and leftovers(store_dir) == []
    store.write_blobs([(h, as_source(good))], verify=True)
    out = bytearray(size)
    store.read_blob_into(h, out)
    assert out == good
