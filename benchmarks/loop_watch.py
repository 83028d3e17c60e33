"""What blocks a server's event loop: every asyncio callback of the main thread that runs longer
than a threshold is written down with its wall time, its CPU time and the main thread's stack,
sampled while it ran.

``install`` runs inside a benchmark's server process (its ``jupyter_server_config.py`` calls
it); the benchmark reads the JSON lines back with ``offenders``. Wall time much above CPU time
means the loop thread waited (a blocking system call, the GIL held by another thread, or the
OS giving the CPU to a kernel); the two close means it computed. Benchmark tooling only: it
wraps ``asyncio.events.Handle._run``, which nothing in the extension may do.
"""

from __future__ import annotations

import asyncio.events
import gc
import itertools
import json
import os
import statistics
import sys
import threading
import time
import traceback
from collections import defaultdict

PACKAGES = ("jupyter_gpu_pause", "jupyter_server", "jupyter_client", "tornado", "zmq", "traitlets")
STACK_DEPTH = 40


def _short(filename: str) -> str:
    for marker in ("site-packages/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 3)[-1] if "/" in filename else filename


def _describe(handle) -> str:
    """The callback in words: a task's coroutine, or the function a handle calls."""
    cb = handle._callback
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {getattr(coro, '__qualname__', repr(coro))}"
    func = getattr(cb, "func", cb)  # functools.partial
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _stack(frame) -> list[str]:
    summary = traceback.StackSummary.extract(
        traceback.walk_stack(frame), limit=STACK_DEPTH, lookup_lines=False
    )
    return [f"{_short(f.filename)}:{f.lineno} {f.name}" for f in reversed(summary)]


def _run_delay(schedstat: str) -> float:
    """Seconds the thread has waited on a run queue (the OS ran something else), or 0."""
    try:
        with open(schedstat) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def install(path: str, threshold: float = 0.01, every: float = 0.002) -> None:
    """Log, as JSON lines in ``path``, every callback of this (main) thread's loop that runs
    ``threshold`` seconds or more; the stack is sampled every ``every`` seconds meanwhile."""
    main = threading.get_ident()
    schedstat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    queued: dict[int, float] = {}  # seq -> the thread's run-queue wait when first sampled
    original = asyncio.events.Handle._run
    counter = itertools.count()
    current: list = [None]  # (start, seq) of the callback running now
    samples: dict[int, list] = {}
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)

    def _run(self):
        if threading.get_ident() != main:
            return original(self)
        seq = next(counter)
        t0, c0 = time.perf_counter(), time.thread_time()
        current[0] = (t0, seq)
        try:
            return original(self)
        finally:
            current[0] = None
            wall = time.perf_counter() - t0
            stacks = samples.pop(seq, [])
            first_queued = queued.pop(seq, None)
            if wall >= threshold:
                record = {
                    "wall": wall,
                    "cpu": time.thread_time() - c0,
                    "runq": None if first_queued is None else _run_delay(schedstat) - first_queued,
                    "callback": _describe(self),
                    "stacks": stacks,
                }
                out.write(json.dumps(record) + "\n")

    def watch():
        while True:
            time.sleep(every)
            cur = current[0]
            if cur is None or time.perf_counter() - cur[0] < every:
                continue
            if cur[1] not in queued:
                queued[cur[1]] = _run_delay(schedstat)
            frame = sys._current_frames().get(main)
            if frame is not None and current[0] is cur:
                samples.setdefault(cur[1], []).append(_stack(frame))

    gc_began = [0.0, 0.0]

    def gc_timer(phase, info):
        """Collections of the cyclic GC that take ``threshold`` or more, as their own records:
        one runs inside whatever callback allocated last, which is then not to blame."""
        if threading.get_ident() != main:
            return
        if phase == "start":
            gc_began[:] = time.perf_counter(), time.thread_time()
            return
        wall = time.perf_counter() - gc_began[0]
        if wall >= threshold:
            record = {
                "wall": wall,
                "cpu": time.thread_time() - gc_began[1],
                "callback": f"gc of generation {info['generation']} (within a callback)",
                "stacks": [],
                "gc": True,
            }
            out.write(json.dumps(record) + "\n")

    gc.callbacks.append(gc_timer)
    asyncio.events.Handle._run = _run
    threading.Thread(target=watch, name="loop-watch", daemon=True).start()


def threads(pid: int) -> dict[int, tuple[str, float, float]]:
    """Every thread of a process: ``{tid: (name, seconds on a CPU, seconds on a run queue)}``."""
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                on_cpu, queued = (int(x) / 1e9 for x in f.read().split()[:2])
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError):
            continue
        out[int(task)] = (name, on_cpu, queued)
    return out


def thread_usage(pid: int, before: dict, after: dict, seconds: float) -> dict:
    """Over ``seconds`` of wall time: the main thread's CPU and run-queue shares and the
    CPU seconds of the process's other threads."""

    def delta(tid, i):
        return after[tid][i] - (before[tid][i] if tid in before else 0.0)

    others = [delta(t, 1) for t in after if t != pid]
    return {
        "loop_thread_cpu_share": round(delta(pid, 1) / seconds, 3),
        "loop_thread_runq_share": round(delta(pid, 2) / seconds, 3),
        "other_threads_cpu_seconds": round(sum(others), 2),
    }


def _blame(stack: list[str]) -> str:
    """Where a sample stood: the innermost frame of a Jupyter package or ours, and below it
    the innermost frame overall (the call that took the time)."""
    ours = next((f for f in reversed(stack) if f.startswith(PACKAGES)), "?")
    inner = stack[-1] if stack else "?"
    return ours if inner == ours else f"{ours} -> {inner}"


def read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def offenders(records: list[dict], top: int = 12) -> list[dict]:
    """The slow callbacks grouped by callback and by where most of their samples stood:
    count, total and largest wall ms, the share of CPU in the wall time (the loop thread
    computing) and of run-queue wait (the OS running something else; from the first sample
    on, so a lower bound)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        if r["stacks"]:
            where = statistics.mode(_blame(s) for s in r["stacks"])
        else:
            where = "(too short to sample)"
        groups[(r["callback"], where)].append(r)
    rows = []
    for (callback, where), rs in groups.items():
        walls = [r["wall"] for r in rs]
        rows.append(
            {
                "callback": callback,
                "where": where,
                "count": len(rs),
                "total_ms": round(1000 * sum(walls), 1),
                "max_ms": round(1000 * max(walls), 1),
                "cpu_share": round(sum(r["cpu"] for r in rs) / sum(walls), 2),
                "runq_share": round(sum(r.get("runq") or 0 for r in rs) / sum(walls), 2),
                "stack": max(rs, key=lambda r: r["wall"])["stacks"][:1],
            }
        )
    rows.sort(key=lambda r: -r["total_ms"])
    return rows[:top]


def print_offenders(rows: list[dict], stacks: bool = False) -> None:
    for r in rows:
        print(
            f"  {r['total_ms']:8.1f} ms in {r['count']:4d} (max {r['max_ms']:6.1f} ms, "
            f"cpu {r['cpu_share']:.0%}, run queue {r['runq_share']:.0%})  {r['callback']}\n"
            f"      at {r['where']}"
        )
        if stacks and r["stack"]:
            for frame in r["stack"][0][-14:]:
                print(f"        {frame}")
