"""Benchmark: does the server stay responsive while many notebooks resume at once?

One real ``jupyter server`` (``server_process.py``); N notebooks, each holding ``--mib`` MiB of
torch tensors (fresh random content: nothing deduplicates), are paused. Then every resume is
asked at the same moment while a client thread GETs ``gpu-pause/api/sessions``, each followed
by ``GET api`` (Jupyter's version, nothing of ours: the control), on keep-alive connections,
until every session is running again (read from the same replies, so watching adds no load).
The GETs start every ``--interval`` seconds (20 ms: some 50 open Lab panels), or at once when
the last one was late: back to back (``--interval 0``), a responsive server answers so many
that the probing itself takes a CPU from the resumes, and a slow one so few that it is spared.

Reported: median, p99 (nearest rank) and max latency of the sessions GET during the storm, the
same for the control and for a quiet server before the storm, how long the storm took, and how
much of it the server's loop thread spent on a CPU and waiting for one (``/proc``'s
schedstat). Target: p99 <= 50 ms at 20 notebooks.

A latency spike is the event loop not answering: something ran on it for that long, or the
OS gave the CPU to the kernels being started. ``--watch`` finds out which: the server logs
every loop callback of 10 ms or more with its stack (``loop_watch.py``), and the top offenders
are printed (with ``--stacks``, their stacks).

Usage: bench_storm.py [--sessions 20] [--mib 32] [--interval S] [--keep] [--json]
                      [--watch [--stacks]]
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import loop_watch  # noqa: E402
from server_process import RUNNING, TOKEN, JupyterServer, ServerError  # noqa: E402

TARGET_MS = 50.0
STORM_TIMEOUT = 600.0
QUIET_REQUESTS = 100
INTERVAL = 0.02  # seconds between two probes
PREPARE_THREADS = 4  # notebooks opened and paused at once while preparing
CONFIG = """
c.GpuPauseApp.policies = []
"""
WATCH_CONFIG = """
import sys
sys.path.insert(0, {here!r})
import loop_watch
loop_watch.install({path!r}, threshold={threshold})
"""
# four tensors of mib/4 MiB each, seeded per notebook
STATE = (
    "import torch; _g = torch.Generator().manual_seed({i}); "
    "ts = [torch.rand({n}, generator=_g) for _ in range(4)]; print(float(ts[0][0]))"
)


def p99(values: list[float]) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _stats(prefix: str, ms: list[float]) -> dict:
    if not ms:
        return {f"{prefix}requests": 0}
    return {
        f"{prefix}requests": len(ms),
        f"{prefix}median_ms": round(statistics.median(ms), 1),
        f"{prefix}p99_ms": round(p99(ms), 1),
        f"{prefix}max_ms": round(max(ms), 1),
    }


class Prober:
    """GETs the session list and the control back to back on keep-alive connections."""

    def __init__(self, port: int, interval: float):
        self.port, self.interval = port, interval
        self.next = time.monotonic()
        self.conns = {}
        self.sessions_ms: list[float] = []
        self.control_ms: list[float] = []
        self.last: list[dict] = []
        self.quiet: tuple[list[float], list[float]] = ([], [])  # before the storm
        self.usable: dict[str, float] = {}  # session id -> when first seen running

    def _get(self, path: str) -> tuple[float, bytes]:
        conn = self.conns.get(path)
        if conn is None:
            conn = self.conns[path] = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        t0 = time.perf_counter()
        conn.request("GET", "/" + path, headers={"Authorization": f"token {TOKEN}"})
        resp = conn.getresponse()
        body = resp.read()
        ms = 1000 * (time.perf_counter() - t0)
        if resp.status != 200:
            raise ServerError(f"GET {path} answered {resp.status}: {body[:300]!r}")
        return ms, body

    def once(self) -> None:
        """One probe, at its time (or at once when late): the schedule does not slip, so a
        slow answer is followed by the ones that were due meanwhile."""
        wait = self.next - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self.next = max(self.next + self.interval, time.monotonic() - self.interval)
        ms, body = self._get("gpu-pause/api/sessions")
        self.sessions_ms.append(ms)
        self.last = json.loads(body)["sessions"]
        # not api/status: jupyter_server answers it 500 while a kernel starts (its
        # kernel_model reads last_activity before the kernel has one)
        self.control_ms.append(self._get("api")[0])

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def prepare(server: JupyterServer, sessions: int, mib: int) -> list[str]:
    """Open N notebooks, give each its tensors, pause them all; the session ids."""
    n = mib * (1 << 20) // 4 // 4  # floats per tensor

    def one(i: int) -> str:
        s = server.open_notebook(f"nb{i + 1:02d}.ipynb")
        server.run(s["kernel_id"], STATE.format(i=i, n=n))
        server.pause(s["id"], timeout=300)
        return s["id"]

    with ThreadPoolExecutor(PREPARE_THREADS) as pool:
        return list(pool.map(one, range(sessions)))


def run_storm(server: JupyterServer, sids: list[str], interval: float) -> tuple[Prober, float]:
    """Ask every resume at once while probing; return the prober and the storm's seconds."""
    prober = Prober(server.port, interval)
    for _ in range(QUIET_REQUESTS):
        prober.once()
    prober.quiet = (prober.sessions_ms[:], prober.control_ms[:])
    prober.sessions_ms.clear()
    prober.control_ms.clear()
    go = threading.Barrier(len(sids) + 1)

    def ask(sid: str) -> None:
        go.wait()
        server.ask_resume(sid)

    pool = ThreadPoolExecutor(len(sids))
    asked = [pool.submit(ask, sid) for sid in sids]
    go.wait()
    began = time.monotonic()
    try:
        while True:
            prober.once()
            states = {s["id"]: s["state"] for s in prober.last}
            for sid, state in states.items():
                if state in RUNNING and sid not in prober.usable:
                    prober.usable[sid] = time.monotonic() - began
            failed = [s for s in prober.last if s["id"] in sids and s["state"] == "failed"]
            if failed:
                raise ServerError(f"a resume failed: {failed[0]['message']}")
            if all(states.get(sid) in RUNNING for sid in sids):
                break
            if time.monotonic() - began > STORM_TIMEOUT:
                raise ServerError(f"not every session running after {STORM_TIMEOUT:g} s")
        seconds = time.monotonic() - began
        for f in asked:
            f.result()
    finally:
        pool.shutdown(wait=True)
        prober.close()
    return prober, seconds


def storm(
    sessions: int = 20,
    mib: int = 32,
    keep: bool = False,
    watch: bool = False,
    interval: float = INTERVAL,
    config: str = "",
) -> dict:
    """Run the storm once on a fresh server; the result as a dict (see the module docstring).

    ``watch``: log slow loop callbacks in the server; the dict then has ``offenders``.
    ``interval``: seconds between two probes (0: back to back). ``config``: more lines of the
    server's ``jupyter_server_config.py`` (``c.GpuPauseApp.max_concurrent_restores = 100``).
    """
    root = Path(tempfile.mkdtemp(prefix="bench-storm-"))
    watch_log = root / "slow-callbacks.jsonl"
    config = CONFIG + config + "\n"
    if watch:
        config += WATCH_CONFIG.format(here=HERE, path=str(watch_log), threshold=0.01)
    server = JupyterServer(root / "server", config, "storm")
    ok = False
    try:
        server.start()
        began = time.monotonic()
        sids = prepare(server, sessions, mib)
        prepared = time.monotonic() - began
        before = len(loop_watch.read(str(watch_log)))
        threads_before = loop_watch.threads(server.proc.pid)
        prober, seconds = run_storm(server, sids, interval)
        usage = loop_watch.thread_usage(
            server.proc.pid, threads_before, loop_watch.threads(server.proc.pid), seconds
        )
        ms = prober.sessions_ms
        result = {
            "sessions": sessions,
            "mib": mib,
            "interval_ms": round(1000 * interval, 1),
            "requests": len(ms),
            "median_ms": round(statistics.median(ms), 1),
            "p99_ms": round(p99(ms), 1),
            "max_ms": round(max(ms), 1),
            "resume_seconds": round(seconds, 2),
            # when each notebook was seen running again: the first ones need not wait for all
            "usable_median_seconds": round(statistics.median(prober.usable.values()), 2),
            **_stats("control_", prober.control_ms),
            **_stats("quiet_", prober.quiet[0]),
            **_stats("quiet_control_", prober.quiet[1]),
            "prepare_seconds": round(prepared, 1),
            **usage,
        }
        if watch:
            storm_records = loop_watch.read(str(watch_log))[before:]
            slow = [r for r in storm_records if not r.get("gc")]
            gcs = [r for r in storm_records if r.get("gc")]
            result["slow_callbacks"] = len(slow)
            result["slow_callbacks_ms"] = round(1000 * sum(r["wall"] for r in slow), 1)
            result["gc_pauses"] = len(gcs)
            result["gc_pauses_ms"] = round(1000 * sum(r["wall"] for r in gcs), 1)
            result["offenders"] = loop_watch.offenders(storm_records)
        ok = True
        return result
    except ServerError as e:
        raise ServerError(f"{e}\n--- server log ---\n{server.log_tail()}") from None
    finally:
        server.stop()
        if keep or not ok:
            print(f"folders and server log kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20, help="notebooks (default 20)")
    ap.add_argument("--mib", type=int, default=32, help="MiB of tensors per notebook (32)")
    ap.add_argument("--keep", action="store_true", help="keep the folders and server log")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--watch", action="store_true", help="log loop callbacks >= 10 ms")
    ap.add_argument(
        "--interval", type=float, default=INTERVAL, help="s between probes (0.02; 0: back to back)"
    )
    ap.add_argument("--config", default="", help="more server config lines (c.X.y = z)")
    ap.add_argument("--stacks", action="store_true", help="with --watch: print their stacks")
    args = ap.parse_args(argv)
    if args.sessions < 1 or args.mib < 1 or args.interval < 0:
        ap.error("need --sessions >= 1, --mib >= 1 and --interval >= 0")
    r = storm(
        args.sessions,
        args.mib,
        args.keep,
        watch=args.watch,
        interval=args.interval,
        config=args.config,
    )
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(
            f"{r['sessions']} notebooks x {r['mib']} MiB resumed at once in "
            f"{r['resume_seconds']:.1f} s, each usable after {r['usable_median_seconds']:.1f} s "
            f"(median; prepared in {r['prepare_seconds']:.0f} s)\n"
            f"GET sessions, {r['requests']} during the storm: median {r['median_ms']} ms, "
            f"p99 {r['p99_ms']} ms, max {r['max_ms']} ms\n"
            f"GET api (control): median {r['control_median_ms']} ms, "
            f"p99 {r['control_p99_ms']} ms, max {r['control_max_ms']} ms\n"
            f"quiet server before the storm: median {r['quiet_median_ms']} ms, "
            f"p99 {r['quiet_p99_ms']} ms"
        )
        print(
            f"server's loop thread during the storm: on a CPU {r['loop_thread_cpu_share']:.0%}, "
            f"waiting for one {r['loop_thread_runq_share']:.0%} of the time; its other threads "
            f"used {r['other_threads_cpu_seconds']:.1f} CPU s"
        )
        if args.watch:
            print(
                f"loop callbacks >= 10 ms during the storm: {r['slow_callbacks']}, "
                f"{r['slow_callbacks_ms']:.0f} ms in all (garbage collections among them: "
                f"{r['gc_pauses']}, {r['gc_pauses_ms']:.0f} ms); top offenders:"
            )
            loop_watch.print_offenders(r["offenders"], stacks=args.stacks)
    met = r["p99_ms"] <= TARGET_MS
    if not args.json:
        print(f"target p99 <= {TARGET_MS:g} ms: {'PASS' if met else 'FAIL'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
