"""Checks that only a machine with an NVIDIA GPU can make (run it there; CI has no GPU).

1. NVML sees a real CUDA process: a child process holding a CUDA tensor counts as ``uses_gpu``,
   and while a background thread keeps the GPU busy it is *not* idle for a policy with
   ``gpu_idle_below: 5``; once the loop stops, it is.
2. The NVML capacity provider, through a real ``jupyter server`` (``capacity_provider_class =
   "nvml"``): two paused notebooks each hold a CUDA tensor; the GPU's free memory is made such
   that one fits and two do not (a ballast process holds the rest, or ``--tensor-fraction 0.6``
   sizes each tensor at 60 % of the GPU, with no ballast). The first resume gets the GPU (its
   kernel's ``CUDA_VISIBLE_DEVICES`` is the GPU's UUID, its tensor back on cuda); the second
   waits (``gpu-memory``, saying the need and the largest free); pausing the first releases its
   memory (NVML) and the second continues by itself, its tensor on cuda with the same values.
3. CUDA tensors go through capture and restore: back on the GPU bit-identical, or on the CPU
   with device="cpu", also through the pinned staging buffers with a blob damaged on disk.
4. ``bigstate`` (``gpu_bigstate.py``): a 3B-parameter fp16 model (6 GB) paused and resumed
   through a real server, each phase's GB/s against the copy and disk rates measured in the
   same run, and the targets: time to usable <= 3 s from the page cache, GPU released <= the
   D2H time + 1 s (PASS/MISS; a miss fails the run only with ``--strict-targets``).
5. ``suspend`` (``gpu_suspend.py``, issue #26): the same model through three servers. The tier
   in force (``GET capacity``: the driver's version, whether the CUDA checkpoint API is
   there); under ``suspend = "auto"`` the GPU released (NVML) <= 1.5 s after the click, the
   session ``suspended`` then ``paused``, the checkpoint verified, the resume from it <= 3 s;
   with ``keep_suspended_seconds`` and the store on a tmpfs made read-only, the session stays
   ``suspended`` ("checkpoint not written") and resumes in place with every variable, and a
   kept kernel resumes in place <= 1 s; under ``suspend = "never"`` the GPU released <= the
   durable write at the disk's measured rate + 0.5 s.

Prints one line per step and exits non-zero on the first failure. Usage:
gpu_device_check.py [--only nvml|capacity|roundtrip|bigstate|suspend] [--tensor-gib 4 |
--tensor-fraction 0.6] [--bigstate-params 3e9] [--strict-targets] [--only bigstate --only
suspend --cpu-rehearsal]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GIB, MIB = 2**30, 2**20

CHILD = r"""
import threading, time, torch
x = torch.randn(8192, 8192, device="cuda")
stop = time.time() + float(__import__("sys").argv[1])
def loop():
    while time.time() < stop:
        x @ x
        torch.cuda.synchronize()  # else the queue outlives the loop: the GPU stays busy
threading.Thread(target=loop, daemon=True).start()
print("ready", flush=True)
time.sleep(float(__import__("sys").argv[1]) + 30)
"""


def check(label: str, ok: bool, detail: str = "") -> None:
    print(f"{'OK  ' if ok else 'FAIL'} {label} {detail}", flush=True)
    if not ok:
        sys.exit(1)


def step(text: str) -> None:
    print(f"     {text}", flush=True)


def nvml_checks() -> None:
    from jupyter_gpu_pause.server.capacity.probes import NvmlProbe, process_tree
    from jupyter_gpu_pause.server.monitor.policy import first_match, parse_policies

    probe = NvmlProbe()
    check("NVML available", probe.available, str(probe.devices()))
    busy_for = 15
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(busy_for)], stdout=subprocess.PIPE, text=True
    )
    try:
        child.stdout.readline()
        time.sleep(3)
        usage = probe.sample({"s": process_tree(child.pid)}).get("s")
        check(
            "CUDA process counted as uses_gpu", bool(usage and usage.memory_bytes > 0), str(usage)
        )
        policy = first_match(
            parse_policies([{"name": "gpu", "match": {"uses_gpu": True}, "gpu_idle_below": 5}]),
            "python3",
            True,
            None,
        )
        check(
            "background GPU loop is not idle",
            usage.utilization >= policy.gpu_idle_below,
            f"{usage.utilization}%",
        )
        time.sleep(busy_for + 2)
        # The probe reports the highest use since its last look (busy then = not idle): one
        # look closes the window that still holds the loop, the next sees the quiet GPU.
        probe.sample({"s": process_tree(child.pid)})
        time.sleep(3)
        usage = probe.sample({"s": process_tree(child.pid)}).get("s")
        check(
            "after the loop the GPU counts as idle", usage.utilization < 5, f"{usage.utilization}%"
        )
    finally:
        child.kill()
        child.wait()  # its GPU memory is given back once the process is gone


def cuda_roundtrip() -> None:
    import torch

    from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
    from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
    from jupyter_gpu_pause.store import Store, blob_hash

    ns = {"__name__": "__main__"}
    model = torch.nn.Linear(1024, 1024).cuda()
    ns.update(
        model=model,
        opt=torch.optim.Adam(model.parameters()),
        t=torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16),
        # four of the pause's 64 MiB pinned parts and a bit, thirteen of the restore's 16 MiB
        big=torch.randn(50 * MIB + 3, device="cuda"),
    )
    ns["view"] = ns["t"][10:20]
    root = tempfile.mkdtemp()
    store = Store(root)
    res = write_plan(make_plan(ns, {}, ["model", "opt", "t"], "namespace"), store)
    doc = {
        "checkpoint_id": "gpu",
        "totals": {"bytes": sum(b["bytes"] for b in res["blobs"].values())},
        **res,
    }
    name = {k: blob_hash(ns[k].cpu().view(torch.uint8).numpy()) for k in ("t", "big")}
    check(
        "captured through pinned buffers: blob names are the hashes of .cpu() bytes",
        all(h in res["blobs"] for h in name.values()),
    )
    for device in ("any", "cpu", None):  # None: load_blobs as the agent called it before
        out = {"__name__": "__main__"}
        blobs = load_blobs(doc, store, device=device)
        staged = [h for h, b in blobs.items() if isinstance(b, torch.Tensor) and b.is_cuda]
        check(
            f"device={device}: tensor blobs read straight to the GPU",
            sorted(staged)
            == (sorted({s["blob"] for s in doc["storages"]}) if device == "any" else []),
            f"{len(staged)} of {len(doc['storages'])} storages",
        )
        restore_objects(doc, blobs, out, device or "any")
        del blobs
        want = "cuda" if device != "cpu" else "cpu"
        check(f"big bit-identical on {want}", torch.equal(out["big"].cpu(), ns["big"].cpu()))
        check(f"restored on {want}", out["t"].device.type == want, str(out["t"].device))
        check(f"bit-identical on {want}", torch.equal(out["t"].cpu(), ns["t"].cpu()))
        check(
            f"view kept on {want}",
            out["view"].untyped_storage().data_ptr() == out["t"].untyped_storage().data_ptr(),
        )
        check(
            f"optimizer linked on {want}",
            out["opt"].param_groups[0]["params"][0] is out["model"].weight,
        )
    # A blob damaged on disk: read to the GPU, it is bad, its memory given back, and only the
    # objects that need it fail
    path = Path(root) / "v1" / "blobs" / name["big"][:2] / name["big"]
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10
    path.write_bytes(bytes(data))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    bad: dict = {}
    blobs = load_blobs(doc, store, bad=bad, device="any")
    held = torch.cuda.memory_allocated() - before
    check(
        "a damaged blob read to the GPU is bad and holds no GPU memory",
        list(bad) == [name["big"]] and held < ns["big"].nbytes,
        f"bad {[e.check for e in bad.values()]}, {held} bytes held by the other blobs",
    )
    out = {"__name__": "__main__"}
    report = restore_objects(doc, blobs, out, "any", bad)
    failed = [f["name"] for f in report["failed"]]
    check("only the damaged tensor fails", failed == ["big"], str(report["failed"]))
    check("the rest restored on cuda", out["t"].is_cuda and torch.equal(out["t"], ns["t"]))


# -- the NVML capacity provider through a real server ------------------------------------------
HEADROOM_FRACTION, HEADROOM_BYTES = 0.10, 512 * MIB  # set in the server's config: needs are known

CAPACITY_CONFIG = """
c.GpuPauseApp.capacity_provider_class = "nvml"
c.GpuPauseApp.capacity_queue_url = {queue!r}
c.GpuPauseApp.policies = []
c.GpuPauseApp.resume_timeout = 0
c.GpuPauseApp.poll_interval = 1.0
c.NvmlCapacity.headroom_fraction = {fraction!r}
c.NvmlCapacity.headroom_bytes = {headroom!r}
"""

# Holds all but ``leave`` bytes of one GPU's free memory (as NVML counts it) until stdin closes.
BALLAST = r"""
import sys, pynvml, torch
uuid, leave = sys.argv[1], int(sys.argv[2])
torch.zeros(1, device="cuda")  # the CUDA context first: it takes GPU memory too
pynvml.nvmlInit()
mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid))
take = max(int(mem.total - mem.used) - leave, 0)
held = torch.empty(take, dtype=torch.uint8, device="cuda") if take else None
print(take, flush=True)
sys.stdin.read()
"""

# The notebooks' state: one CUDA tensor of seeded random bytes (no other name left behind).
STATE = """
import torch
def _fill(n, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)
x = _fill({n}, {seed})
del _fill
"""

# Where the tensor is, a checksum of its values (summed in 64 MiB chunks: no full-size copy)
# and what the kernel sees; leaves no name behind and gives the chunks' memory back.
PROBE = """
def _probe():
    import json, os, torch
    total = sum(int(c.sum(dtype=torch.int64)) for c in x.view(torch.int32).split(1 << 24))
    torch.cuda.empty_cache()
    return json.dumps({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(x.device),
                       "pid": os.getpid(), "sum": total, "bytes": x.nbytes})
print(_probe())
del _probe
"""


class Nvml:
    """NVML as this check reads it: each GPU's memory and the processes holding it."""

    def __init__(self):
        import pynvml

        pynvml.nvmlInit()
        self.n = pynvml
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self.uuids = [pynvml.nvmlDeviceGetUUID(h) for h in self.handles]

    def memory(self, i: int = 0) -> tuple[int, int]:
        """(total, used) bytes of GPU ``i``."""
        mem = self.n.nvmlDeviceGetMemoryInfo(self.handles[i])
        return int(mem.total), int(mem.used)

    def procs(self, i: int = 0) -> dict[int, int]:
        """pid -> bytes of the compute processes NVML shows on GPU ``i`` (none where it cannot)."""
        try:
            procs = self.n.nvmlDeviceGetComputeRunningProcesses(self.handles[i])
        except self.n.NVMLError:
            return {}
        return {p.pid: int(p.usedGpuMemory or 0) for p in procs}


class Sampler(threading.Thread):
    """NVML's view of GPU 0 every 50 ms while a pause hands the GPU on: (time, used, pids)."""

    def __init__(self, nvml: Nvml):
        super().__init__(daemon=True)
        self.nvml, self.samples, self.halt = nvml, [], threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.time(), self.nvml.memory(0)[1], set(self.nvml.procs(0))))
            self.halt.wait(0.05)

    def stop(self) -> None:
        self.halt.set()
        self.join()


def held_text(nvml: Nvml, pid: int, base: int) -> tuple[int, str]:
    """What NVML shows a kernel holding: its own bytes where its pid is visible, else the GPU's
    growth over ``base`` (a container's PID namespace hides pids from NVML)."""
    from jupyter_gpu_pause.units import size_text

    used, procs = nvml.memory(0)[1], nvml.procs(0)
    mine = procs.get(pid)
    held = mine if mine is not None else used - base
    who = (
        f"kernel pid {pid} holds {size_text(mine)}"
        if mine is not None
        else (f"kernel pid {pid} not visible to NVML (PID namespace?)")
    )
    return held, f"{who}; GPU 0 used {size_text(used)} ({size_text(used - base)} over the base)"


def capacity_check(tensor_gib: float, tensor_fraction: float | None) -> None:
    """One GPU, room for one of two notebooks: the second waits, then follows by itself."""
    from server_process import RUNNING, JupyterServer, parse_time

    from jupyter_gpu_pause.units import size_text

    try:
        nv = Nvml()
    except Exception as e:  # NVMLError_LibraryNotFound and friends: no GPU here
        check("NVML available", False, f"({type(e).__name__}: {e})")
    check("NVML sees a GPU", bool(nv.handles), f"{len(nv.handles)} GPU(s): {nv.uuids}")
    total, used0 = nv.memory(0)
    uuid = nv.uuids[0]
    size = tensor_fraction * total if tensor_fraction else tensor_gib * GIB
    n = int(size) // (4 * MIB) * (4 * MIB)  # whole int32 chunks for the checksum
    need = int(n * (1 + HEADROOM_FRACTION)) + HEADROOM_BYTES  # as NvmlCapacity.need counts it
    ballast_here = tensor_fraction is None
    leave = need + 512 * MIB  # GPU 0's free memory under the ballast: one fits, two do not
    step(
        f"GPU 0 {uuid}: {size_text(total)} total, {size_text(used0)} used; each notebook holds "
        f"{size_text(n)} on cuda, a resume needs {size_text(need)} (tensor + 10 % + 512 MiB)"
    )
    if ballast_here:
        check(
            "a ballast can leave room for exactly one",
            total - used0 >= leave + GIB,
            f"free {size_text(total - used0)}, to leave {size_text(leave)}",
        )
    else:
        free = total - used0
        check(
            "one fits on the GPU, two do not",
            need <= free < need + n,
            f"free {size_text(free)}, need {size_text(need)}, tensor {size_text(n)}",
        )
    root = Path(tempfile.mkdtemp(prefix="gpu-capacity-"))
    disk = shutil.disk_usage(root).free
    check("disk for two checkpoints", disk > 2 * n + 2 * GIB, f"{size_text(disk)} free in {root}")
    slow = 120 + n / 50e6  # seconds for a pause or a resume: 50 MB/s at the very least
    server = JupyterServer(
        root / "server",
        CAPACITY_CONFIG.format(
            queue=str(root / "queue"), fraction=HEADROOM_FRACTION, headroom=HEADROOM_BYTES
        ),
    )
    ballasts: list[subprocess.Popen] = []
    sampler: Sampler | None = None
    try:
        server.start()
        sids, ref = {}, {}
        for name, seed in (("a", 1), ("b", 2)):  # one after the other: both never fit at once
            s = server.open_notebook(f"{name}.ipynb")
            server.run(s["kernel_id"], STATE.format(n=n, seed=seed), timeout=slow)
            ref[name] = json.loads(server.run(s["kernel_id"], PROBE, timeout=slow))
            began = time.monotonic()
            paused = server.pause(s["id"], timeout=slow)
            gpu = paused["checkpoint"]["gpu_bytes"]
            check(
                f"{name}.ipynb paused with its CUDA tensor",
                gpu >= n,
                f"checkpoint {size_text(gpu)} of GPU tensors in {time.monotonic() - began:.1f} s",
            )
            sids[name] = s["id"]

        for i, other in enumerate(nv.uuids):  # other GPUs full, so GPU 0 is the only choice
            if i == 0 and not ballast_here:
                continue
            keep = leave if i == 0 else 256 * MIB
            ballasts.append(
                subprocess.Popen(
                    [sys.executable, "-c", BALLAST, other, str(keep)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "CUDA_VISIBLE_DEVICES": other},
                )
            )
            took = ballasts[-1].stdout.readline().strip()
            check(f"ballast on GPU {i}", took.isdigit(), f"holds {size_text(int(took or 0))}")
        _, base = nv.memory(0)
        step(f"GPU 0 before the resumes: {size_text(total - base)} free, {size_text(base)} used")

        # When A resumes, it gets GPU 0
        server.ask_resume(sids["a"])
        a = server.settled(sids["a"], slow)
        check("a.ipynb resumed", a["state"] in RUNNING, a["message"] or "")
        (ev_a,) = [e for e in server.events(sids["a"]) if e["type"] == "resumed"][-1:]
        check(
            "a granted GPU 0", ev_a["detail"]["devices"] == [uuid], str(ev_a["detail"]["devices"])
        )
        got_a = json.loads(server.run(a["kernel_id"], PROBE))
        check("a's CUDA_VISIBLE_DEVICES names GPU 0's UUID", got_a["cvd"] == uuid, got_a["cvd"])
        check(
            "a's tensor on cuda with its values",
            got_a["device"].startswith("cuda") and got_a["sum"] == ref["a"]["sum"],
            f"{got_a['device']}, checksum {got_a['sum']} (was {ref['a']['sum']})",
        )
        held, text = held_text(nv, got_a["pid"], base)
        check("NVML: a's kernel holds its memory", held >= n, text)
        a_visible = got_a["pid"] in nv.procs(0)

        # When B asks, it waits: not enough free GPU memory
        server.ask_resume(sids["b"])
        b = server.session_until(
            sids["b"],
            lambda s: (
                s["state"] == "waiting" and (s["waiting"] or {}).get("reason") == "gpu-memory"
            ),
            "waiting for GPU memory",
        )
        needs = b["waiting"]["needs_bytes"]
        check(
            "b waits (gpu-memory), needing what was computed",
            needs >= need,
            f"needs {size_text(needs)}, computed {size_text(need)}",
        )
        check(
            "b's message says the need and the largest free",
            size_text(needs) in b["message"] and "the largest free is" in b["message"],
            repr(b["message"]),
        )
        cap = server.capacity()
        dev = next(d for d in cap["devices"] if d["uuid"] == uuid)
        check(
            "GET capacity: b first in line, GPU 0 too full for it",
            [q["session_id"] for q in cap["queue"]] == [sids["b"]] and dev["free_bytes"] < needs,
            f"GPU 0 free {size_text(dev['free_bytes'])}, sessions {dev['sessions']}",
        )

        # When A pauses, its memory is released and B continues by itself
        sampler = Sampler(nv)
        sampler.start()
        asked = time.time()
        server.pause(sids["a"], timeout=slow)
        b = server.settled(sids["b"], slow)
        sampler.stop()
        low_t, low, _ = min(sampler.samples, key=lambda x: x[1])
        gone = any(got_a["pid"] not in pids for _, _, pids in sampler.samples)
        check(
            "NVML: a's memory released",
            low - base < n // 4 and (gone or not a_visible),
            f"GPU 0 used fell to {size_text(low)} ({size_text(low - base)} over the base) "
            f"{low_t - asked:.1f} s after the pause was asked; a's pid "
            + ("left NVML's list" if gone else "still listed" if a_visible else "never listed"),
        )
        check("b continued by itself", b["state"] in RUNNING, b["message"] or "")
        (ev_b,) = [e for e in server.events(sids["b"]) if e["type"] == "resumed"][-1:]
        (paused_a,) = [e for e in server.events(sids["a"]) if e["type"] == "paused"][-1:]
        gap = parse_time(ev_b["detail"]["granted_at"]) - parse_time(paused_a["time"])
        step(
            f"a paused -> b granted: {gap.total_seconds():.3f} s; b waited "
            f"{ev_b['detail']['waited_seconds']:.1f} s in line"
        )
        check(
            "b granted GPU 0", ev_b["detail"]["devices"] == [uuid], str(ev_b["detail"]["devices"])
        )
        got_b = json.loads(server.run(b["kernel_id"], PROBE))
        check("b's CUDA_VISIBLE_DEVICES names GPU 0's UUID", got_b["cvd"] == uuid, got_b["cvd"])
        check(
            "b's tensor on cuda with its values",
            got_b["device"].startswith("cuda") and got_b["sum"] == ref["b"]["sum"],
            f"{got_b['device']}, checksum {got_b['sum']} (was {ref['b']['sum']})",
        )
        held, text = held_text(nv, got_b["pid"], base)
        check("NVML: b's kernel holds its memory", held >= n, text)
    finally:
        if sampler is not None:
            sampler.stop()
        for p in ballasts:
            p.kill()
            p.wait()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def bigstate_check(params: float = 3e9, strict: bool = False, rehearsal: bool = False) -> bool:
    from gpu_bigstate import run

    return run(params, strict, rehearsal)


def suspend_check(params: float = 3e9, strict: bool = False, rehearsal: bool = False) -> bool:
    from gpu_suspend import run

    return run(params, strict, rehearsal)


CHECKS = {
    "nvml": nvml_checks,
    "capacity": capacity_check,
    "roundtrip": cuda_roundtrip,
    "bigstate": bigstate_check,
    "suspend": suspend_check,
}
REHEARSED = ("bigstate", "suspend")  # the checks --cpu-rehearsal can run without a GPU


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=list(CHECKS), action="append", help="run only these checks")
    size = ap.add_mutually_exclusive_group()
    size.add_argument(
        "--tensor-gib",
        type=float,
        default=4.0,
        help="capacity check: GiB of each notebook's CUDA tensor, the GPU's free "
        "memory cut down to fit one by a ballast process (default 4, >= 1)",
    )
    size.add_argument(
        "--tensor-fraction",
        type=float,
        default=None,
        help="capacity check: each tensor this fraction of the GPU's memory "
        "(e.g. 0.6), no ballast; needs disk for two such checkpoints",
    )
    ap.add_argument(
        "--bigstate-params",
        type=float,
        default=3e9,
        help="bigstate, suspend: parameters of the fp16 model (default 3e9: 6 GB)",
    )
    ap.add_argument(
        "--strict-targets",
        action="store_true",
        help="bigstate, suspend: exit 1 when a speed target is missed (default: print MISS only)",
    )
    ap.add_argument(
        "--cpu-rehearsal",
        action="store_true",
        help="bigstate, suspend only: the model on the CPU and NVML skipped (suspend: the "
        "driver a declared fake), to try them without a GPU",
    )
    args = ap.parse_args(argv)
    if args.cpu_rehearsal and not (args.only and set(args.only) <= set(REHEARSED)):
        ap.error("--cpu-rehearsal goes with --only bigstate and/or --only suspend")
    if args.tensor_gib < 1 or not 0 < (args.tensor_fraction or 0.5) < 1:
        ap.error("--tensor-gib must be >= 1 and --tensor-fraction between 0 and 1")
    met = True
    for name in args.only or list(CHECKS):
        print(f"--- {name}", flush=True)
        if name == "capacity":
            capacity_check(args.tensor_gib, args.tensor_fraction)
        elif name in REHEARSED:
            met = (
                CHECKS[name](args.bigstate_params, args.strict_targets, args.cpu_rehearsal) and met
            )
        else:
            CHECKS[name]()
    return 1 if args.strict_targets and not met else 0


if __name__ == "__main__":
    sys.exit(main())
