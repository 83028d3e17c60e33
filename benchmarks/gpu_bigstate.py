"""gpu_device_check's ``bigstate`` check: a 3B-parameter fp16 model (6 GB) paused and resumed
through a real server, each phase's speed against what the machine can do.

It measures first, in the same run: pinned (and pageable) device-to-host and host-to-device
copies of 1 GiB in a child process, and an fsync'd write and a page-cache read of 2 GiB on the
store's disk. Then a notebook kernel builds the model on cuda (45 bias-free 8192x8192 fp16
linear layers: 3.02e9 parameters), and is paused through the REST API: NVML (sampled every 50
ms) shows when the kernel's GPU memory is back to the base, and the ``paused`` event gives
``gpu_released_seconds`` and its phase ``timings``. The resume follows at once, so the blobs
are read from the page cache: time to usable runs from POST resume until a cell sees the model
on cuda (with the same checksum). Then it is paused again, unchanged, and resumed once ``GET
capacity`` shows the warm kernel ready, as for a person who comes back later. It prints each
phase's GB/s against the measured copies and disk, and the targets (PASS/MISS): time to usable
<= 3 s (both resumes); GPU released <= the D2H time of the state + 1 s. A miss fails the run
only with ``--strict-targets``. It refuses to start without about twice the state free on the
disk. ``--cpu-rehearsal`` runs the same steps with the model on the CPU, NVML skipped and host
memory copies for the bandwidths, where there is no GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_device_check import GIB, MIB, Nvml, Sampler, check, held_text, step

WIDTH = 8192  # each layer: WIDTH x WIDTH fp16 weights, no bias
PARAMS = 3e9
DISK_PROBE = 2 * GIB
TTU_TARGET = 3.0  # seconds from POST resume to a cell seeing the model on cuda
RELEASE_SLACK = 1.0  # seconds allowed over the state's D2H time before the GPU is released

CONFIG = """
c.GpuPauseApp.policies = []
c.GpuPauseApp.poll_interval = 1.0
c.GpuPauseApp.shutdown_checkpoint = "none"
c.GpuPauseApp.resume_timeout = 300
"""

# Copies of 1 GiB, timed with the device synchronized: the median of three after a warm-up.
BANDWIDTH = r"""
import json, sys, time, torch
n = int(sys.argv[1])
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
pageable = torch.empty(n, dtype=torch.uint8)
def timed(fn):
    spent = []
    for _ in range(4):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        spent.append(time.perf_counter() - t)
    return sorted(spent[1:])[1]
print(json.dumps({
    "d2h": n / timed(lambda: pinned.copy_(dev, non_blocking=True)),
    "h2d": n / timed(lambda: dev.copy_(pinned, non_blocking=True)),
    "d2h_pageable": n / timed(lambda: pageable.copy_(dev)),
    "h2d_pageable": n / timed(lambda: dev.copy_(pageable)),
}))
"""

MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[
    torch.nn.Linear({width}, {width}, bias=False, dtype=torch.float16, device={device!r})
    for _ in range({layers})
])
"""

# Where the model is and a checksum of its weights (int16 sums on the GPU); leaves no name.
PROBE = """
def _probe():
    import json, os, torch
    ps = list(model.parameters())
    total = sum(int(p.view(torch.int16).sum(dtype=torch.int64)) for p in ps)
    return json.dumps({"device": str(ps[0].device), "pid": os.getpid(), "sum": total,
                       "params": sum(p.numel() for p in ps),
                       "on_device": all(p.device.type == {device!r} for p in ps)})
print(_probe())
del _probe
"""

USABLE = "print(next(model.parameters()).device)"


def gbps(nbytes: float, seconds: float | None) -> str:
    return f"{nbytes / seconds / 1e9:6.2f} GB/s" if seconds else "      -     "


def copy_bandwidth(rehearsal: bool) -> dict:
    """Bytes per second of 1 GiB copies between the GPU and pinned or pageable host memory,
    in a child process (this one keeps no CUDA memory of its own for NVML's base); in a
    rehearsal, of a host memory copy."""
    if rehearsal:
        import torch

        a, b = torch.ones(256 * MIB, dtype=torch.uint8), torch.empty(256 * MIB, dtype=torch.uint8)
        began = time.perf_counter()
        b.copy_(a)
        rate = a.numel() / (time.perf_counter() - began)
        return {"d2h": rate, "h2d": rate, "d2h_pageable": rate, "h2d_pageable": rate}
    out = subprocess.run(
        [sys.executable, "-c", BANDWIDTH, str(GIB)], capture_output=True, text=True, timeout=180
    )
    check("copy bandwidth measured", out.returncode == 0, out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def disk_bandwidth(folder: Path, nbytes: int = DISK_PROBE) -> dict:
    """Bytes per second of one file's fsync'd write and its read back from the page cache."""
    import numpy as np

    chunk = np.random.default_rng(0).integers(0, 256, 64 * MIB, dtype=np.uint8)
    path = folder / "disk-probe"
    began = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(nbytes // chunk.nbytes):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    write = time.perf_counter() - began
    buf = bytearray(chunk.nbytes)
    began = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    read = time.perf_counter() - began
    path.unlink()
    return {"write": nbytes / write, "read": nbytes / read}


def last_event(server, sid: str, kind: str) -> dict:
    return [e for e in server.events(sid) if e["type"] == kind][-1]["detail"]


def released_at(samples, asked: float, base: int, pid: int, visible: bool) -> float | None:
    """Seconds from the pause request to the first NVML sample with the kernel's memory gone:
    GPU 0 back within 256 MiB of the base, and the kernel's pid off the list (where NVML
    showed it at all)."""
    for t, used, pids in samples:
        if t >= asked and used - base < 256 * MIB and not (visible and pid in pids):
            return t - asked
    return None


def nvml_with_room(n: int):
    """NVML, once GPU 0 is seen to have room for an ``n``-byte model (and 4 GiB to spare)."""
    from jupyter_gpu_pause.units import size_text

    try:
        nv = Nvml()
    except Exception as e:  # NVMLError_LibraryNotFound and friends: no GPU here
        check("NVML available", False, f"({type(e).__name__}: {e})")
    total, used0 = nv.memory(0)
    check(
        "GPU 0 has room for the model",
        total - used0 > n + 4 * GIB,
        f"free {size_text(total - used0)}, model {size_text(n)}",
    )
    return nv


def run(params: float = PARAMS, strict: bool = False, rehearsal: bool = False) -> bool:
    """The check; False when a target was missed (an error stops the run at once)."""
    from server_process import RUNNING, JupyterServer

    from jupyter_gpu_pause.units import size_text

    layers = max(1, round(params / WIDTH**2))
    n = layers * WIDTH * WIDTH * 2  # bytes of fp16 weights
    root = Path(tempfile.mkdtemp(prefix="gpu-bigstate-"))
    try:
        free = shutil.disk_usage(root).free
        need = 2 * n + DISK_PROBE + GIB
        if free < need:
            print(
                f"REFUSED bigstate: it needs {size_text(need)} free on the disk of {root} (the "
                f"{size_text(n)} checkpoint twice over, and a {size_text(DISK_PROBE)} disk "
                f"probe) and has {size_text(free)}. Set TMPDIR to a larger disk, or pass "
                "--bigstate-params with fewer parameters.",
                flush=True,
            )
            sys.exit(2)
        nv = None if rehearsal else nvml_with_room(n)
        step(
            f"model: {layers} fp16 layers {WIDTH}x{WIDTH}, {layers * WIDTH * WIDTH / 1e9:.2f}e9 "
            f"parameters, {n / 1e9:.2f} GB; store on {root} ({size_text(free)} free)"
        )
        copies = copy_bandwidth(rehearsal)
        (root / "store").mkdir()
        disk = disk_bandwidth(root / "store")
        step(
            f"measured: pinned D2H {gbps(copies['d2h'], 1)}, H2D {gbps(copies['h2d'], 1)}; "
            f"pageable D2H {gbps(copies['d2h_pageable'], 1)}, H2D {gbps(copies['h2d_pageable'], 1)}"
        )
        step(f"measured: disk fsync'd write {gbps(disk['write'], 1)}, page-cache read "
             f"{gbps(disk['read'], 1)} (one thread, {size_text(DISK_PROBE)})")  # fmt: skip
        return _pause_and_resume(
            JupyterServer(root / "server", CONFIG, store_url=str(root / "store")),
            nv, n, layers, copies, disk, RUNNING, strict,
        )  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pause_and_resume(server, nv, n, layers, copies, disk, running, strict) -> bool:
    slow = 120 + n / 50e6  # a pause or a resume: 50 MB/s at the very least
    device = "cuda" if nv is not None else "cpu"
    probe = PROBE.replace("{device!r}", repr(device))
    sampler = nvml_s = None
    try:
        server.start()
        base = nv.memory(0)[1] if nv else 0
        s = server.open_notebook("bigstate.ipynb")
        sid = s["id"]
        began = time.monotonic()
        model = MODEL.format(width=WIDTH, layers=layers, device=device)
        server.run(s["kernel_id"], model, timeout=slow)
        ref = json.loads(server.run(s["kernel_id"], probe, timeout=slow))
        check(
            f"the model is on {device}",
            ref["on_device"] and ref["params"] * 2 == n,
            f"{ref['params']} parameters in {time.monotonic() - began:.1f} s",
        )
        if nv:
            step(held_text(nv, ref["pid"], base)[1])
            visible = ref["pid"] in nv.procs(0)
            sampler = Sampler(nv)
            sampler.start()

        # When it is paused: NVML shows when the kernel's memory is back to the base
        asked = time.time()
        server.pause(sid, timeout=slow)
        ev = last_event(server, sid, "paused")
        if sampler is not None:
            sampler.stop()
            nvml_s = released_at(sampler.samples, asked, base, ref["pid"], visible)
            check(
                "NVML: the kernel's GPU memory is released",
                nvml_s is not None,
                f"{nvml_s:.2f} s after the request" if nvml_s is not None else "never seen",
            )
        print_phases("pause", n, ev, copies, disk)

        # When it is resumed at once (its blobs in the page cache) until a cell sees the model
        ttu = timed_resume(server, sid, device, probe, ref, slow, running)
        print_phases("resume", n, last_event(server, sid, "resumed"), copies, disk)

        # When it is paused again with nothing changed, and resumed once the warm kernel is
        # ready (the case of a person who comes back later: the pool had time to start it)
        server.pause(sid, timeout=slow)
        again = last_event(server, sid, "paused")
        step(f"re-pause, nothing changed: GPU released at {again['gpu_released_seconds']:.2f} s "
             f"(the event), {json.dumps(again.get('timings') or {})}")  # fmt: skip
        server.until(
            lambda: any(w["ready"] for w in server.capacity().get("warm_kernels", [])),
            "a warm kernel, ready (GET capacity)",
            timeout=slow,
        )
        ttu_warm = timed_resume(server, sid, device, probe, ref, slow, running)
        print_phases(
            "resume into the warm kernel", n, last_event(server, sid, "resumed"), copies, disk
        )
    finally:
        if sampler is not None:
            sampler.stop()
        server.stop()

    d2h_s = n / copies["d2h"]
    released = nvml_s if nvml_s is not None else ev["gpu_released_seconds"]
    source = "NVML" if nvml_s is not None else "the paused event"
    floor = n / disk["write"]
    ok_ttu = ttu <= TTU_TARGET and ttu_warm <= TTU_TARGET
    alone = (
        f"reading {n / 1e9:.2f} GB at the page-cache read rate alone takes "
        f"{n / disk['read']:.2f} s, the H2D copy {n / copies['h2d']:.2f} s"
    )
    for label, t in (("resumed at once after its pause", ttu),
                     ("the warm kernel ready", ttu_warm)):  # fmt: skip
        print(
            f"{'PASS' if t <= TTU_TARGET else 'MISS'} time to usable from the page cache, "
            f"{label}: {t:.2f} s (target <= {TTU_TARGET:g} s; {alone})",
            flush=True,
        )
    ok_release = released <= d2h_s + RELEASE_SLACK
    print(
        f"{'PASS' if ok_release else 'MISS'} GPU released {released:.2f} s after the click "
        f"({source}; the event says {ev['gpu_released_seconds']}) (target <= D2H {d2h_s:.2f} s + "
        f"{RELEASE_SLACK:g} s). The kernel stops only once the checkpoint is written, fsync'd "
        f"and read back: at the disk's measured write rate that alone is {floor:.2f} s",
        flush=True,
    )
    if strict and not (ok_ttu and ok_release):
        print("FAIL a target was missed (--strict-targets)", flush=True)
    return ok_ttu and ok_release


def timed_resume(server, sid, device, probe, ref, slow, running) -> float:
    """Resume; seconds from POST resume until a cell sees the model (then its weights checked)."""
    asked = time.monotonic()
    server.ask_resume(sid)
    back = server.settled(sid, slow)
    check("resumed", back["state"] in running, back["message"] or "")
    where = server.run(back["kernel_id"], USABLE, timeout=slow).strip()
    ttu = time.monotonic() - asked
    check(f"a cell sees the model on {device}", where.startswith(device), f"{where} at {ttu:.2f} s")
    got = json.loads(server.run(back["kernel_id"], probe, timeout=slow))
    check(
        f"the model is back on {device} with the same weights",
        got["on_device"] and got["sum"] == ref["sum"],
        f"checksum {got['sum']} (was {ref['sum']})",
    )
    return ttu


def print_phases(what: str, n: int, ev: dict, copies: dict, disk: dict) -> None:
    """One line per phase of the event: seconds, and GB/s of the state where bytes move."""
    timings = ev.get("timings") or {}
    versus = {
        "capture": "the object graph only: pickling, planning",
        "write": f"vs disk write {gbps(disk['write'], 1)}, pinned D2H {gbps(copies['d2h'], 1)}",
        "read": f"vs page-cache read {gbps(disk['read'], 1)}, pinned H2D {gbps(copies['h2d'], 1)}",
        "unpickle": f"vs pinned H2D {gbps(copies['h2d'], 1)} (0 if already on the GPU)",
    }
    extra = ev.get("gpu_released_seconds")
    head = f"GPU released at {extra:.2f} s, " if isinstance(extra, int | float) else ""
    step(f"{what}: {head}duration {ev.get('duration_seconds')} s, {json.dumps(timings)}")
    for phase, seconds in timings.items():
        rate = gbps(n, seconds) if phase in versus else " " * 12
        step(f"  {phase:<9} {seconds:7.3f} s {rate}  {versus.get(phase, '')}")
