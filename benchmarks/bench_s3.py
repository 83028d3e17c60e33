"""Benchmark: pause and resume of 1 GiB through a real server to S3, against s3fs on its own.

One moto S3 server process (``moto_server``) serves both sides. In every repetition, side by
side (the order of the two pairs alternates):

  raw-put   s3fs ``pipe`` of the same bytes as six objects (its own multipart upload, 50 MiB
            parts, its own concurrency), from bytes made before the timer.
  raw-get   s3fs ``cat`` of those objects (its own concurrent ranged GETs).
  pause     POST pause of a notebook whose kernel holds the same bytes as six float32 tensors
            (fresh random content each repetition: nothing is deduplicated), until the session
            is ``paused``: capture, hash, upload (and with verify, read back), signed manifest,
            kernel shutdown. ``pause-saved``: until the session says the checkpoint is saved
            (manifest verified), before the kernel shutdown.
  resume    POST resume until the session runs again: a new kernel, parallel ranged GETs into
            the tensors' final buffers, hash checks, unpickling. ``resume-restore``: resume
            minus the time a fresh kernel takes to start and import torch, s3fs and the agent,
            measured in the same repetition.

Each configuration runs with a server of its own: ``verify_blobs`` on (the default: every
uploaded blob is read back before the kernel stops, so a pause moves the bytes twice) and off.

Memory: the kernel's peak RSS is read from ``/proc/<pid>/status`` (VmHWM, reset through
``clear_refs`` before the pause). Pause extra = peak - RSS before the pause (the state is
resident; the first repetition's kernel also imports s3fs during its pause, later ones were
started by a resume and have it). Resume extra = the resumed kernel's peak - the state - the
RSS of a fresh kernel with torch, s3fs and the agent imported. Both as a share of the state.

Machines drift 2-5x between runs: read the ratios (median of per-repetition ratios; >1 = ours
faster). Targets: pause >= 0.85x raw-put, resume >= 0.9x raw-get.
Usage: bench_s3.py [--gib 1.0] [--repeat 3] [--json] [--only verify|no-verify]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
import psutil
import s3fs
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from procs import PeakWatch, status_kib  # noqa: E402
from server_process import JupyterServer  # noqa: E402

MIB = 1024 * 1024
SHARES = (0.25, 0.25, 0.1875, 0.125, 0.125, 0.0625)  # 256,256,192,128,128,64 MiB per GiB
BUCKET, PREFIX = "bench", "ckpts"
TARGETS = {"pause/raw-put": 0.85, "resume/raw-get": 0.9}
STEPS = ("raw-put", "pause", "pause-saved", "raw-get", "resume", "resume-restore")
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}

STATE = """
import os, torch
_g = torch.Generator().manual_seed({seed})
weights = {{f"w{{i}}": torch.rand(n // 4, generator=_g) for i, n in enumerate({sizes})}}
del _g
print(os.getpid())
"""


def sizes(gib: float) -> list[int]:
    return [int(gib * 1024 * MIB * sh) // 4096 * 4096 for sh in SHARES]


def same_bytes(gib: float, seed: int) -> dict[str, bytes]:
    """The bytes the kernel's STATE cell makes, made here (torch's CPU generator is the same in
    every process)."""
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.rand(n // 4, generator=g) for n in sizes(gib)]
    return {f"w{i}": t.numpy().tobytes() for i, t in enumerate(tensors)}


class Moto:
    """moto's S3 server in its own process, with one bucket."""

    def __init__(self, log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        exe = str(Path(sys.executable).parent / "moto_server")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [exe, "-H", "127.0.0.1", "-p", str(self.port)], stdout=out, stderr=out
            )
        end = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                break
            except OSError as e:
                if time.monotonic() > end or self.proc.poll() is not None:
                    said = log.read_text()[-2000:]
                    raise RuntimeError(f"moto_server did not start: {said}") from e
                time.sleep(0.1)
        self.client = boto3.client("s3", endpoint_url=self.endpoint)
        self.client.create_bucket(Bucket=BUCKET)

    def empty(self) -> None:
        """Delete every object (moto keeps them in memory)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for page in pages:
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def kernel_pid(server: JupyterServer, kernel_id: str) -> int:
    me = psutil.Process(server.proc.pid)
    for p in me.children(recursive=True):
        if any(f"kernel-{kernel_id}.json" in a for a in p.cmdline()):
            return p.pid
    raise RuntimeError(f"no process for kernel {kernel_id}")


def config(endpoint: str, verify: bool) -> str:
    options = {"endpoint_url": endpoint, "skip_instance_cache": True}
    return f"c.GpuPauseApp.store_options = {options!r}\nc.GpuPauseApp.verify_blobs = {verify}\n"


def follow(server: JupyterServer, sid: str, goal: tuple, **marks) -> tuple[dict, dict]:
    """Poll the session every 20 ms until its state is in ``goal``; the seconds at which each
    ``marks[name](session)`` first held. Another settled state is an error."""
    t0, seen = time.perf_counter(), {}
    while True:
        s = server.session(sid)
        now = time.perf_counter() - t0
        for name, holds in marks.items():
            if name not in seen and holds(s):
                seen[name] = now
        if s["state"] in goal:
            return s, seen
        if s["state"] in ("active", "idle", "paused", "failed"):
            raise RuntimeError(f"the session ended {s['state']}: {s.get('error') or s}")
        time.sleep(0.02)


def committed(s: dict) -> bool:
    """The session says its checkpoint is saved (the manifest is verified; the kernel stops)."""
    return (s.get("message") or "").startswith("Checkpoint")


FRESH = """
import os, time, torch, s3fs, jupyter_gpu_pause.kernel.agent
print(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
"""


def fresh_kernel(server: JupyterServer) -> dict:
    """What a resume pays before it reads a byte: a new kernel, ready, with torch, s3fs and
    the agent imported (seconds), and that kernel's RSS (bytes)."""
    t = time.perf_counter()
    kid = server.ok("POST", "api/kernels", {"name": "python3"}, expect=201)["id"]
    rss = int(server.run(kid, FRESH).strip()) * 1024
    took = time.perf_counter() - t
    server.ok("DELETE", f"api/kernels/{kid}", expect=204)
    return {"start": took, "rss": rss}


def one_repetition(server, moto, fs, sid, rep: int, gib: float) -> dict:
    seed = 1000 + rep
    state = sum(sizes(gib))
    out = {}
    fresh = fresh_kernel(server)

    def raw():
        data = same_bytes(gib, seed)
        keys = {f"{BUCKET}/raw/{k}": v for k, v in data.items()}
        t = time.perf_counter()
        fs.pipe(keys)
        out["raw-put"] = time.perf_counter() - t
        del data
        t = time.perf_counter()
        back = fs.cat(list(keys))
        out["raw-get"] = time.perf_counter() - t
        if any(len(back[k]) != len(v) for k, v in keys.items()):
            raise RuntimeError("raw get returned other sizes")
        fs.rm(list(keys))

    def ours():
        kid = server.session(sid)["kernel_id"]
        pid = int(server.run(kid, STATE.format(seed=seed, sizes=sizes(gib))).strip())
        watch = PeakWatch(pid)
        t = time.perf_counter()
        server.ok("POST", f"gpu-pause/api/sessions/{sid}/pause", expect=202)
        s, marks = follow(
            server, sid, ("paused",), saved=lambda s: s["message"].startswith("Checkp")
        )
        out["pause"] = time.perf_counter() - t
        out["pause-saved"] = marks["saved"]
        out["pause_extra_mib"] = (watch.stop() - watch.base) / MIB
        t = time.perf_counter()
        server.ask_resume(sid)
        s, _ = follow(server, sid, ("active", "idle"))
        out["resume"] = time.perf_counter() - t
        if s["restore"]["failed"]:
            raise RuntimeError(f"resume lost objects: {s}")
        peak = status_kib(kernel_pid(server, s["kernel_id"]), "VmHWM:")
        out["resume_extra_mib"] = (peak - state - fresh["rss"]) / MIB
        out["resume-restore"] = out["resume"] - fresh["start"]

    for step in (raw, ours) if rep % 2 == 0 else (ours, raw):
        step()
    moto.empty()  # the next repetition's blobs are new anyway; moto holds everything in RAM
    out["pause_extra_share"] = out["pause_extra_mib"] * MIB / state
    out["resume_extra_share"] = out["resume_extra_mib"] * MIB / state
    return out


def run_config(root: Path, moto: Moto, verify: bool, gib: float, repeat: int) -> list[dict]:
    label = "verify" if verify else "no-verify"
    server = JupyterServer(
        root / label, config(moto.endpoint, verify), label, store_url=f"s3://{BUCKET}/{PREFIX}"
    )
    fs = s3fs.S3FileSystem(endpoint_url=moto.endpoint, skip_instance_cache=True)
    server.start()
    try:
        sid = server.open_notebook(f"{label}.ipynb")["id"]
        runs = []
        for rep in range(repeat):
            runs.append(one_repetition(server, moto, fs, sid, rep, gib))
            print(f"  {label} rep {rep + 1}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in runs[-1].items()), flush=True)  # fmt: skip
        return runs
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()


def summary(runs: list[dict], size: int) -> dict:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    per = [
        {
            "pause/raw-put": r["raw-put"] / r["pause"],
            "pause-saved/raw-put": r["raw-put"] / r["pause-saved"],
            "resume/raw-get": r["raw-get"] / r["resume"],
            "resume-restore/raw-get": r["raw-get"] / r["resume-restore"],
        }
        for r in runs
    ]
    ratios = {k: statistics.median(p[k] for p in per) for k in per[0]}
    speed = {k: size / MIB / med[k] for k in STEPS}
    return {"median": med, "mib_per_s": speed, "ratios": ratios, "per_rep": per, "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="state size in GiB (default 1.0)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--only", choices=("verify", "no-verify"), help="one configuration only")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = ap.parse_args(argv)
    os.environ.update(CREDENTIALS)  # the server, and so every kernel, reads them from here
    size = sum(sizes(args.gib))
    root = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    moto = Moto(root / "moto.log")
    results = {}
    try:
        for verify in (True, False):
            label = "verify" if verify else "no-verify"
            if args.only in (None, label):
                print(f"{label}: {args.repeat} repetitions of {size / MIB:.0f} MiB", flush=True)
                runs = run_config(root, moto, verify, args.gib, args.repeat)
                results[label] = summary(runs, size)
    finally:
        moto.stop()
    if args.json:
        print(json.dumps({"bytes": size, "targets": TARGETS, **results}, indent=1))
        return 0
    print(f"\nstate {size / MIB:.0f} MiB; medians of {args.repeat}; moto_server on this machine")
    for label, r in results.items():
        m, s = r["median"], r["mib_per_s"]
        print(f"\n[{label}]  {'':14}{'median s':>9}{'MiB/s':>8}")
        for k in STEPS:
            print(f"  {k:<22}{m[k]:>9.2f}{s[k]:>8.0f}")
        for k, v in r["ratios"].items():
            vals = [p[k] for p in r["per_rep"]]
            spread = f"{min(vals):.2f}-{max(vals):.2f}"
            ok = (
                f"; target >= {TARGETS[k]} {'ok' if v >= TARGETS[k] else 'MISS'}"
                if k in TARGETS
                else ""
            )
            print(f"  {k:<22}{v:>9.2f}   ({spread}{ok})")
        pause = f"{m['pause_extra_mib']:.0f} MiB ({100 * m['pause_extra_share']:.1f} % of state)"
        resume = f"{m['resume_extra_mib']:.0f} MiB ({100 * m['resume_extra_share']:.1f} %)"
        print(f"  kernel peak extra: pause {pause}, resume {resume}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
