"""The end-to-end benchmark suite, one command: pause and resume through the REST API of a real
``jupyter server`` with real kernels, each next to the ways of doing without us, side by side in
every repetition; medians of per-repetition numbers and ratios; a table and a JSON file.

Sections (``--only`` picks some; every repetition also starts a bare kernel, the floor of every
resume, so the ratios that need it are there whatever runs):

  states   float32 tensors in an ``nn.Sequential`` (``--sizes``, default 256M,1G,4G), fresh
           content every repetition: pause click -> paused (and the event's phases), cold resume
           click -> first cell, re-pause unchanged, warm resume, re-pause with 10 % changed;
           baselines: raw write+fsync / cold raw read, torch.save+fsync / cold torch.load, a new
           kernel + torch.load until the next cell answers. Kernel peak RSS over the state.
  small    ``--small-objects`` (10 000) Python objects in notebook variables plus a DataFrame:
           pause and cold resume, against pickle + fsync / read + pickle.loads in the kernel.
  fixed    a one-integer notebook: pause (click -> GPU released) and resume vs a bare kernel.
  storm    ``bench_storm.storm()`` (its own server), when benchmarks/bench_storm.py exists.

Every timed step waits first until each kernel the server runs has been idle for 1 s (not in a
smoke run): after a pause the server prepares a warm kernel for the next resume, as a person
coming back later finds it.

"Cold" means the page cache was dropped (``/proc/sys/vm/drop_caches``, root only) and the
libraries read back, so only the state's bytes come from the disk; where the cache cannot be
dropped the reads are warm and the output says so. ``--smoke`` is a fast check that everything
runs (8 MiB, one repetition, 200 small objects, warm reads; no storm, which starts a server of
its own, unless asked: ``--smoke --only storm`` is a storm of 3 notebooks of 1 MiB).

Usage: run.py [--sizes 256M,1G,4G] [--repeat 3] [--only states,small,fixed,storm] [--dir PATH]
              [--small-objects 10000] [--warm] [--smoke] [--json PATH] [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import suite_report  # noqa: E402
import suite_states  # noqa: E402
from procs import PageCache  # noqa: E402
from suite_server import GIB, MIB, SuiteServer  # noqa: E402

SECTIONS = ("states", "small", "fixed", "storm")
DEFAULT_JSON = os.path.join(HERE, "results", "latest.json")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", help="tensor states, binary units (default 256M,1G,4G)")
    ap.add_argument("--repeat", type=int, help="repetitions (default 3)")
    ap.add_argument("--only", help=f"comma-separated sections of {','.join(SECTIONS)}")
    ap.add_argument("--dir", help="folder for the store and the baselines' files (default: /tmp)")
    ap.add_argument("--small-objects", type=int, help="objects of the small state (10000)")
    ap.add_argument("--warm", action="store_true", help="never drop the page cache")
    ap.add_argument("--smoke", action="store_true", help="tiny and fast: checks that it runs")
    ap.add_argument("--json", default=DEFAULT_JSON, help=f"result file (default {DEFAULT_JSON})")
    ap.add_argument("--keep", action="store_true", help="keep the folders and the server log")
    args = ap.parse_args(argv)
    smoke = args.smoke
    args.sizes = args.sizes or ("8M" if smoke else "256M,1G,4G")
    args.repeat = args.repeat or (1 if smoke else 3)
    args.small_objects = args.small_objects or (200 if smoke else 10_000)
    args.warm = args.warm or smoke
    args.only_given = bool(args.only)
    args.only = [s.strip() for s in (args.only or ",".join(SECTIONS)).split(",") if s.strip()]
    if bad := [s for s in args.only if s not in SECTIONS]:
        ap.error(f"--only: unknown section {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    try:
        args.size_list = [(t.strip(), suite_states.parse_size(t)) for t in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: {args.sizes!r} is not a list like 256M,1G,4G")
    if args.repeat < 1 or any(n < MIB for _, n in args.size_list):
        ap.error("--repeat must be >= 1 and every size >= 1M")
    return args


def room(args, parent: str) -> str | None:
    """Why the machine cannot hold the run, or None. The store holds one state at a time
    (each notebook's checkpoints are deleted and collected before the next), beside the raw
    files and the torch.save file of the same state; memory holds the state twice (the
    kernel and a torch.load) plus the kernels."""
    largest = max(n for _, n in args.size_list) if "states" in args.only else 0
    disk = int(3.3 * largest) + 512 * MIB
    free = shutil.disk_usage(parent).free
    if free < disk:
        return (
            f"{parent} has {free / GIB:.1f} GiB free; the sizes {args.sizes} need "
            f"{disk / GIB:.1f} GiB there (3.3x the largest state: its checkpoint and a 10 % "
            "re-pause, the raw files, the torch.save file; + 512 MiB). Use --dir on a bigger "
            "disk or smaller --sizes"
        )
    ram = int(2.3 * largest) + 2 * GIB
    with open("/proc/meminfo") as f:
        avail = next(int(x.split()[1]) * 1024 for x in f if x.startswith("MemAvailable:"))
    if avail < ram:
        return (
            f"{avail / GIB:.1f} GiB of memory is available; the sizes {args.sizes} need "
            f"{ram / GIB:.1f} GiB (the largest state twice, + 2 GiB of kernels). Use smaller "
            "--sizes"
        )
    return None


def meta(args, parent: str, cache: PageCache) -> dict:
    try:
        commit = subprocess.run(
            ["git", "-C", HERE, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        commit = ""
    with open("/proc/meminfo") as f:
        mem = next(int(x.split()[1]) * 1024 for x in f if x.startswith("MemTotal:"))
    cold = "page cache dropped before each cold step, libraries read back (data cold)"
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "commit": commit,
        "repeat": args.repeat,
        "sizes": [lab for lab, _ in args.size_list],
        "sections": args.only,
        "small_objects": args.small_objects,
        "smoke": args.smoke,
        "dir": parent,
        "cold": cache.cold,
        "warm_reads": not cache.cold,
        "cold_note": cold
        if cache.cold
        else f"WARM: the page cache was not dropped: {cache.why_not}",
        "cpus": os.cpu_count(),
        "memory_gib": mem / GIB,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def measure(args, server: SuiteServer, result: dict) -> list[dict]:
    """Every repetition of every section but the storm; the bare-kernel records, one per
    repetition (the ratios' floor)."""
    fresh_runs = []
    states = {lab: {"bytes": n, "runs": []} for lab, n in args.size_list}
    small, fixed = {"runs": []}, {"runs": []}
    for rep in range(args.repeat):
        print(f"repetition {rep + 1}/{args.repeat}", flush=True)
        fresh = server.bare_kernel()
        fresh_runs.append(fresh)
        step(f"bare kernel start {fresh['bare_start_s']:.2f} s")
        if "fixed" in args.only:
            fixed["runs"].append(suite_states.fixed(server, rep, fresh))
            step(f"fixed costs: tiny pause {fixed['runs'][-1]['tiny_pause_s']:.2f} s")
        if "states" in args.only:
            for lab, n in args.size_list:
                rec = suite_states.tensors(server, lab, n, rep, fresh)
                states[lab]["runs"].append(rec)
                step(f"{lab}: pause {rec['pause_s']:.2f} s, resume {rec['resume_s']:.2f} s")
        if "small" in args.only:
            rec, small["layout"] = suite_states.small(server, args.small_objects, rep, fresh)
            small["runs"].append(rec)
            step(f"small objects: pause {rec['pause_s']:.2f} s, resume {rec['resume_s']:.2f} s")
    if "states" in args.only:
        result["states"] = {
            lab: {**s, "median": suite_report.medians(s["runs"])} for lab, s in states.items()
        }
    for name, sec, wanted in (("small_objects", small, "small"), ("fixed", fixed, "fixed")):
        if wanted in args.only:
            result[name] = {**sec, "median": suite_report.medians(sec["runs"])}
    result["bare_kernel"] = {"runs": fresh_runs, "median": suite_report.medians(fresh_runs)}
    return fresh_runs


T0 = time.monotonic()


def step(text: str) -> None:
    print(f"  [{time.monotonic() - T0:6.1f} s] {text}", flush=True)


def storm(args) -> dict:
    """``bench_storm.storm`` when another helper's module is there; else why not."""
    if "storm" not in args.only:
        return {"skipped": "not in --only"}
    if args.smoke and not args.only_given:
        return {"skipped": "--smoke runs the storm only when asked: --smoke --only storm"}
    if not os.path.exists(os.path.join(HERE, "bench_storm.py")):
        return {"skipped": "benchmarks/bench_storm.py is not there"}
    import bench_storm

    print("storm", flush=True)
    sessions, mib = (3, 1) if args.smoke else (20, 32)
    return dict(bench_storm.storm(sessions=sessions, mib=mib))


def main(argv=None) -> int:
    args = parse_args(argv)
    parent = os.path.abspath(args.dir or tempfile.gettempdir())
    os.makedirs(parent, exist_ok=True)
    if why := room(args, parent):
        print(f"refusing to run: {why}", file=sys.stderr)
        return 2
    cache = PageCache(enabled=not args.warm)
    result: dict = {"meta": meta(args, parent, cache)}
    print(result["meta"]["cold_note"], flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-run-", dir=parent))
    server, t0 = None, time.monotonic()
    try:
        fresh = []
        if set(args.only) - {"storm"}:
            server = SuiteServer(root / "server", cache, quiet=0.0 if args.smoke else 1.0)
            server.start()
            if not args.smoke:  # a smoke run's numbers mean nothing: no need to warm up
                server.warm_up()
            fresh = measure(args, server, result)
            server.stop()  # before the storm's own server starts
        for name in ("states", "small_objects", "fixed"):
            result.setdefault(name, {"skipped": "not in --only"})
        result["storm"] = storm(args)
        result["ratios"] = suite_report.ratios(result, fresh, [lab for lab, _ in args.size_list])
    except Exception:
        traceback.print_exc()
        if server is not None:
            print(f"--- end of the server log ---\n{server.log_tail()}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    result["meta"]["seconds"] = time.monotonic() - t0
    result["meta"]["page_cache_drops"] = cache.drops
    print(suite_report.report(result))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
