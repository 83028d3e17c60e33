"""The staging pipeline (kernel/staging.py) driven on CPU by a fake copy engine: bytes in and
out, buffer reuse only after release, bounded buffers, failures half-way; then a real capture
and restore through ``write_plan`` / ``load_blobs`` on a local store with the same pipeline.

The CUDA copy engine itself (pinned memory, side streams, events) needs a GPU:
benchmarks/gpu_device_check.py exercises it there.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import deque
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
import torch

from jupyter_gpu_pause.kernel.capture import DeviceSource
from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
from jupyter_gpu_pause.kernel.staging import (
    DEPTH,
    Staging,
    Stopped,
    cuda_staging,
    download,
    read_in,
    upload,
)
from jupyter_gpu_pause.store import IntegrityError, Store, blob_hash
from jupyter_gpu_pause.store.integrity import StreamingHash
from jupyter_gpu_pause.store.sources import source_hash
from tests.test_restore_unit import checkpoint

SIZE = 64  # bytes per buffer in the pipeline tests: many parts from small data
SIZES = [0, 1, SIZE - 1, SIZE, SIZE + 1, 3 * SIZE + 7]


class CopyFailed(RuntimeError):
    """What a CUDA error looks like to the pipeline."""


def address(view) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


class FakeEvent:
    def __init__(self, copier: LazyCopier, index: int):
        self.copier, self.index, self.done = copier, index, False

    def synchronize(self) -> None:
        self.copier.run_until(self)


class LazyCopier:
    """A fake of the CUDA copy engine over CPU tensors. A copy runs only when an event at or
    after it is synchronized, in the order the copies started (one stream), so a pipeline that
    reads a buffer before waiting for its copy, or refills one whose copy has not run, gets
    wrong bytes. It also follows each buffer (free, filled, copying, done, held) and fails at
    once on a step out of order; ``log`` records every step. ``fail_copy``/``fail_sync``: the
    index of the copy that cannot be started, or whose wait reports an error."""

    def __init__(self, fail_copy: int | None = None, fail_sync: int | None = None):
        self.lock = threading.RLock()
        self.queue: deque = deque()
        self.state: dict[int, str] = {}
        self.log: list[tuple] = []
        self.made = self.copies = 0
        self.fail_copy, self.fail_sync = fail_copy, fail_sync
        self.dsts: list = []  # weak references to the device memory it made
        self.closed = False

    def handles(self, device) -> bool:
        return torch.device(device).type == "cpu"

    def buffer(self, nbytes: int):
        with self.lock:
            self.made += 1
        t = torch.full((nbytes,), 0xEE, dtype=torch.uint8)  # garbage until a copy fills it
        return t, memoryview(t.numpy())

    def empty(self, nbytes: int, device: str):
        t = torch.full((nbytes,), 0xEE, dtype=torch.uint8)
        self.dsts.append(weakref.ref(t))
        return t

    def _move(self, ptr: int, allowed: tuple, to: str, step: tuple) -> None:
        with self.lock:
            now = self.state.get(ptr, "new")
            assert now in allowed, f"{step}: buffer {ptr:#x} is {now}"
            self.state[ptr] = to
            self.log.append(step)

    def _start(self, buf, allowed: tuple, fn, what: str, off: int) -> FakeEvent:
        with self.lock:
            index = self.copies
            self.copies += 1
            if index == self.fail_copy:
                raise CopyFailed("CUDA error: invalid argument")
            self._move(buf.data_ptr(), allowed, "copying", (what, buf.data_ptr(), off))
            ev = FakeEvent(self, index)
            self.queue.append((ev, fn, buf.data_ptr(), off))
            return ev

    def to_host(self, src, offset: int, n: int, buf) -> FakeEvent:
        def copy():
            buf[:n].copy_(src[offset : offset + n])

        return self._start(buf, ("new", "free", "done"), copy, "copy", offset)

    def to_device(self, buf, n: int, dst, offset: int) -> FakeEvent:
        def copy():
            dst[offset : offset + n].copy_(buf[:n])

        # "filled" when the test reports its fills; a reader's fills are not reported
        return self._start(buf, ("filled", "new", "done"), copy, "copy", offset)

    def run_until(self, ev: FakeEvent) -> None:
        with self.lock:
            if ev.index == self.fail_sync:
                raise CopyFailed("CUDA error: an illegal memory access was encountered")
            while not ev.done:
                first, fn, ptr, off = self.queue.popleft()
                fn()
                first.done = True
                self._move(ptr, ("copying",), "done", ("run", ptr, off))

    # what the host does with a buffer, as the tests' consumers and fills report it
    def got(self, view, off: int) -> None:
        self._move(address(view), ("done",), "held", ("got", address(view), off))

    def released(self, view, off: int) -> None:
        self._move(address(view), ("held",), "free", ("released", address(view), off))

    def filling(self, view, off: int) -> None:
        self._move(address(view), ("new", "free", "done"), "filled", ("fill", address(view), off))

    def close(self) -> None:
        self.closed = True


def pattern(n: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8))


def read_out(staging: Staging, src: torch.Tensor, fail_at: int | None = None) -> bytes:
    """Everything ``download`` gives, as a store would take it, reporting each part's life."""
    copier, out = staging.copier, bytearray()
    with closing(download(staging, src, src.numel(), SIZE)) as parts:
        for i, view in enumerate(parts):
            off = len(out)
            copier.got(view, off)
            if i == fail_at:
                raise OSError("No space left on device")
            out += view
            copier.released(view, off)
    return bytes(out)


def write_in(staging: Staging, data: torch.Tensor, dst, fail_at: int | None = None) -> None:
    """``upload`` of ``data``, each fill reporting to the copier."""
    pos = [0]

    def fill(view):
        staging.copier.filling(view, pos[0])
        if pos[0] // SIZE == fail_at:
            raise OSError("Input/output error")
        view[:] = data[pos[0] : pos[0] + view.nbytes].numpy()
        pos[0] += view.nbytes

    upload(staging, fill, dst, data.numel())


@pytest.mark.parametrize("n", SIZES)
def test_download_gives_the_bytes_in_order(n):
    # Given device memory of n bytes, buffers of SIZE bytes
    src, staging = pattern(n), Staging(LazyCopier(), 2, SIZE)
    # When it is read out part by part
    got = read_out(staging, src)
    # Then the bytes are the same, every buffer is back, and at most two were ever used
    assert got == src.numpy().tobytes()
    assert staging.out == 0 and staging.peak <= DEPTH and staging.copier.made <= DEPTH
    assert staging.copier.made == min(-(-n // SIZE), DEPTH)


@pytest.mark.parametrize("n", SIZES)
def test_upload_puts_the_bytes_in_place(n):
    src, dst, staging = (
        pattern(n),
        torch.zeros(n, dtype=torch.uint8),
        Staging(LazyCopier(), 2, SIZE),
    )
    write_in(staging, src, dst)
    # Then every copy ran before upload returned, and all buffers are back
    assert torch.equal(dst, src) and not staging.copier.queue and staging.out == 0


def test_download_copies_the_next_part_while_the_caller_holds_this_one():
    # Given four parts and two buffers
    staging = Staging(LazyCopier(), 2, SIZE)
    read_out(staging, pattern(4 * SIZE))
    log = staging.copier.log
    # Then when the caller got part k, the copy of part k+1 had started already...
    for k in range(3):
        got = log.index(
            ("got", *next((e[1], e[2]) for e in log if e[0] == "got" and e[2] == k * SIZE))
        )
        started = next(i for i, e in enumerate(log) if e[0] == "copy" and e[2] == (k + 1) * SIZE)
        assert started < got
    # ...and a copy went into a buffer only after the caller released what it held there
    # (LazyCopier checks every step; here the whole order, as it ran)
    a, b = log[0][1], log[1][1]
    assert [(e[0], e[1] == a, e[2]) for e in log] == [
        ("copy", True, 0), ("copy", False, SIZE),
        ("run", True, 0), ("got", True, 0), ("released", True, 0),
        ("copy", True, 2 * SIZE),
        ("run", False, SIZE), ("got", False, SIZE), ("released", False, SIZE),
        ("copy", False, 3 * SIZE),
        ("run", True, 2 * SIZE), ("got", True, 2 * SIZE), ("released", True, 2 * SIZE),
        ("run", False, 3 * SIZE), ("got", False, 3 * SIZE), ("released", False, 3 * SIZE),
    ]  # fmt: skip
    assert a != b


def test_upload_fills_the_next_part_while_the_last_one_is_copied():
    staging = Staging(LazyCopier(), 2, SIZE)
    write_in(staging, pattern(5 * SIZE), torch.zeros(5 * SIZE, dtype=torch.uint8))
    log = staging.copier.log
    # Then part k+1 was filled before part k's copy ran (the copy was still in flight), and a
    # buffer was filled again only after its copy had run (checked at each step)
    for k in range(4):
        filled = log.index(next(e for e in log if e[0] == "fill" and e[2] == (k + 1) * SIZE))
        ran = log.index(next(e for e in log if e[0] == "run" and e[2] == k * SIZE))
        assert filled < ran
    assert staging.copier.made == 2


def test_one_buffer_still_works_without_overlap():
    staging = Staging(LazyCopier(), 1, SIZE)
    src = pattern(3 * SIZE + 5)
    assert read_out(staging, src) == src.numpy().tobytes()
    dst = torch.zeros_like(src)
    write_in(staging, src, dst)
    assert torch.equal(dst, src) and staging.peak == 1 and staging.copier.made == 1


def test_runs_sharing_few_buffers_never_hold_more_and_never_wait_in_a_circle():
    # Given six uploads at once in threads, sharing three buffers
    staging = Staging(LazyCopier(), 3, SIZE)
    srcs = [pattern(7 * SIZE + i, seed=i) for i in range(6)]
    dsts = [torch.zeros_like(s) for s in srcs]
    errors: list = []

    def run(i):
        try:
            write_in(staging, srcs[i], dsts[i])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then all end with their bytes, never more than three buffers existed or were out at once
    assert not errors and not any(t.is_alive() for t in threads)
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    assert staging.peak <= 3 and staging.copier.made <= 3 and staging.out == 0


def test_a_caller_failing_half_way_gets_its_error_and_every_buffer_comes_back():
    staging = Staging(LazyCopier(), 2, SIZE)
    with pytest.raises(OSError, match="No space left"):
        read_out(staging, pattern(6 * SIZE), fail_at=2)
    # Then the copy in flight was waited for before its buffer came back
    assert staging.out == 0 and not staging.copier.queue


@pytest.mark.parametrize("fail", [{"fail_copy": 3}, {"fail_sync": 2}], ids=["start", "wait"])
def test_a_copy_failing_half_way_is_raised_and_its_buffer_never_reused(fail):
    # Given a copy engine whose fourth copy cannot start, or whose third reports an error
    staging = Staging(LazyCopier(**fail), 2, SIZE)
    with pytest.raises(CopyFailed):
        read_out(staging, pattern(6 * SIZE))
    # Then no buffer is out, and the one of the failed copy is gone from the free list
    assert staging.out == 0 and len(staging._free) == 1
    with pytest.raises(CopyFailed):
        write_in(Staging(LazyCopier(**fail), 2, SIZE), pattern(6 * SIZE), torch.zeros(6 * SIZE))


def test_a_fill_failing_half_way_waits_for_the_copies_in_flight():
    staging = Staging(LazyCopier(), 2, SIZE)
    dst = torch.zeros(6 * SIZE, dtype=torch.uint8)
    with pytest.raises(OSError, match="Input/output"):
        write_in(staging, pattern(6 * SIZE), dst, fail_at=3)
    # Then the copies already started did run, and every buffer is back
    assert not staging.copier.queue and staging.out == 0
    assert torch.equal(dst[: 3 * SIZE], pattern(6 * SIZE)[: 3 * SIZE])


def test_a_stopped_read_ends_at_its_next_part(tmp_path):
    store, data = Store(str(tmp_path / "store")), pattern(5 * SIZE)
    h, _ = store.put_blob(data.numpy())
    stop = threading.Event()
    stop.set()
    staging = Staging(LazyCopier(), 2, SIZE)
    with pytest.raises(Stopped):
        read_in(staging, store.open_blob(h, data.numel()), torch.zeros_like(data), 5 * SIZE, stop)
    assert staging.out == 0


@pytest.mark.parametrize("n", [0, 1, 3 * SIZE + 7])
def test_hashes_streamed_through_the_buffers_are_the_blob_names(tmp_path, n):
    # Given bytes whose blob name is the hash of the whole
    data = pattern(n)
    name = blob_hash(data.numpy())
    staging = Staging(LazyCopier(), 2, SIZE)
    # When a storage is hashed through DeviceSource's stream (the pause's first pass)
    assert source_hash(DeviceSource(data.untyped_storage(), staging)) == name
    # And read back from a local store into device memory, hashed as it streams
    store = Store(str(tmp_path / "store"))
    store.put_blob(data.numpy())
    dst = torch.zeros_like(data)
    read_in(staging, store.open_blob(name, n), dst, n)
    hasher = StreamingHash()
    hasher.update(dst.numpy())
    assert hasher.hexdigest() == name and torch.equal(dst, data) and staging.out == 0


def test_cuda_staging_is_only_for_cuda_devices():
    assert cuda_staging([torch.device("cpu"), "cpu"]) is None
    assert cuda_staging([]) is None


# -- the real capture and restore, through the same pipeline on CPU ------------------------------


def namespace() -> dict:
    model = torch.nn.Linear(33, 7)
    t = torch.arange(1000, dtype=torch.float64)
    return {
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
        "t": t,
        "view": t[10:20],
        "empty": torch.empty(0),
        "one": torch.tensor([7], dtype=torch.uint8),
        "odd": pattern(5 * 4096 + 3, seed=9),
        "arr": np.arange(12.0).reshape(3, 4),
        "note": "kept",
    }


def blob_file(store_dir: Path, h: str) -> Path:
    return store_dir / "v1" / "blobs" / h[:2] / h


def test_a_capture_through_the_buffers_writes_the_same_blobs_and_restores(tmp_path):
    # Given a namespace captured once read in place and once through the staging buffers
    ns = namespace()
    plain = checkpoint(Store(str(tmp_path / "plain")), ns)
    staging = Staging(LazyCopier(), 2, 4096)
    store = Store(str(tmp_path / "store"))
    doc = checkpoint(store, ns, staging)
    # Then the blobs are the same (names and sizes), and the buffers all came back
    assert doc["blobs"] == plain["blobs"] and staging.out == 0 and staging.copier.made == 2
    # When it is restored with every tensor blob streamed into "device" memory
    restore_staging = Staging(LazyCopier(), 4, 4096)
    bad: dict = {}
    blobs = load_blobs(doc, store, bad=bad, staging=restore_staging)
    # Then those blobs are tensors already (the pickle stream's and the array's are not)
    on_device = {h for h, b in blobs.items() if isinstance(b, torch.Tensor)}
    assert on_device == {s["blob"] for s in doc["storages"]} and not bad
    back: dict = {}
    report = restore_objects(doc, blobs, back, "cpu", bad)
    # And everything comes back equal, views and links kept
    assert report["failed"] == [] and restore_staging.out == 0
    for name in ("t", "view", "empty", "one", "odd"):
        assert torch.equal(back[name], ns[name]), name
    assert back["view"].untyped_storage().data_ptr() == back["t"].untyped_storage().data_ptr()
    assert back["opt"].param_groups[0]["params"][0] is back["model"].weight
    assert torch.equal(back["model"].weight, ns["model"].weight)
    assert np.array_equal(back["arr"], ns["arr"]) and back["note"] == "kept"


def test_a_damaged_blob_read_to_the_device_fails_only_its_objects_and_frees_its_memory(tmp_path):
    # Given a checkpoint whose "odd" tensor blob has one byte flipped, and one whose blob of
    # "t" is missing
    ns = namespace()
    store = Store(str(tmp_path / "store"))
    doc = checkpoint(store, ns)
    (odd,) = [h for h, b in doc["blobs"].items() if b["bytes"] == 5 * 4096 + 3]
    path = blob_file(tmp_path / "store", odd)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    (t,) = [h for h, b in doc["blobs"].items() if b["bytes"] == 8000]
    blob_file(tmp_path / "store", t).unlink()
    # When it is restored through the staging buffers, tolerating damage
    copier = LazyCopier()
    staging = Staging(copier, 4, 4096)
    bad: dict = {}
    blobs = load_blobs(doc, store, bad=bad, staging=staging)
    # Then both blobs are bad with the usual checks, left out, and their memory is free
    assert {h: e.check for h, e in bad.items()} == {odd: "blob-hash", t: "blob-missing"}
    assert odd not in blobs and t not in blobs and staging.out == 0
    gc.collect()
    alive = {id(r()) for r in copier.dsts if r() is not None}
    assert alive == {id(b) for b in blobs.values() if isinstance(b, torch.Tensor)}
    assert len(copier.dsts) == len(alive) + 2
    # And only the objects that need them fail; the rest is restored
    back: dict = {}
    report = restore_objects(doc, blobs, back, "cpu", bad)
    assert {"t", "odd"} <= {f["name"] for f in report["failed"]}
    assert {"model", "opt", "one", "arr", "note"} <= set(report["restored"])
    assert torch.equal(back["model"].weight, ns["model"].weight) and back["note"] == "kept"


def test_without_tolerance_a_damaged_blob_stops_every_read_and_frees_the_buffers(tmp_path):
    # Given many tensors, one of them damaged
    ns = {f"w{i}": pattern(3 * 4096 + i, seed=i) for i in range(12)}
    store = Store(str(tmp_path / "store"))
    doc = checkpoint(store, ns)
    (h,) = [h for h, b in doc["blobs"].items() if b["bytes"] == 3 * 4096 + 5]
    path = blob_file(tmp_path / "store", h)
    path.write_bytes(path.read_bytes()[:-1] + b"?")
    # When it is restored through the staging buffers without tolerating damage
    staging = Staging(LazyCopier(), 4, 4096)
    with pytest.raises(IntegrityError, match="does not match its checksum"):
        load_blobs(doc, store, staging=staging)
    # Then the other reads stopped or ended, their copies ran, and every buffer is back
    assert staging.out == 0 and not staging.copier.queue
