"""The fixed costs of a pause and a resume: a tiny notebook (a few small variables) paused and
resumed N times through a real server with warm kernels (``c.GpuPauseApp.warm_kernels = True``),
timed as a script or the Lab meets them.

* pause: POST pause until GET shows the session ``paused``;
* resume: POST resume, once the warm kernel is ready (``GET capacity``), until a cell run in the
  resumed kernel answers (``running`` is when GET first shows it running).

Beside each, the server's own event (``paused``, ``resumed``) gives its phase clock
(``timings``, ``duration_seconds``); what the click took beyond the event's duration is
``publish`` (pause: persisting the session and recording the event before GET shows it, plus
the 20 ms polls) or ``cell`` (resume: from ``running`` until the cell answered).

``--before DIR`` runs a second server from another copy of the package (a folder holding a
``jupyter_gpu_pause`` package, put first on its ``PYTHONPATH``, which its kernels inherit),
alternating with this tree's in each repetition: a before/after measured side by side.
``--after DIR`` runs the measured side from such a copy too, instead of the installed package.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_fixed_costs.py --reps 7
    PYTHONPATH=. .venv/bin/python benchmarks/bench_fixed_costs.py --before /tmp/old --reps 7

Exit status 1 with ``--strict-targets`` when a median of this tree misses its target
(pause <= 0.4 s, resume <= 0.4 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from procs import PageCache  # noqa: E402
from suite_server import (  # noqa: E402
    CONFIG,
    PAUSE_PHASES,
    RESUME_PHASES,
    SuiteServer,
    phases,
)

TARGET_PAUSE = 0.4  # seconds, click -> paused
TARGET_RESUME = 0.4  # seconds, click -> first cell answered, warm kernel ready
NOTEBOOK = 'a = 1\nb = "text"\nc = [1, 2, 3]\nd = {"k": 2.5}\n'
CHECK = "print(a, b, c, d)"
EXPECTED = "1 text [1, 2, 3] {'k': 2.5}"


def server(label: str, tree: str | None) -> SuiteServer:
    """A started server with warm kernels; ``tree``: a folder put first on its PYTHONPATH."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-fixed-{label}-"))
    s = SuiteServer(tmp, PageCache(False))
    s.label = label
    (tmp / "config" / "jupyter_server_config.py").write_text(
        CONFIG + "c.GpuPauseApp.warm_kernels = True\n"
    )
    if tree:
        s.env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])
    s.start()
    s.warm_up()
    return s


def warm_ready(s: SuiteServer) -> None:
    s.until(
        lambda: any(w["ready"] for w in s.capacity().get("warm_kernels", [])),
        "a warm kernel, ready (GET capacity)",
    )


def pause(s: SuiteServer, sid: str, at_once: bool) -> dict:
    before = s.count(sid, "paused")
    if not at_once:
        s.settle()
    t = time.perf_counter()
    s.ok("POST", f"gpu-pause/api/sessions/{sid}/pause", expect=202)
    s.reach(sid, ("paused",), 60)
    took = time.perf_counter() - t
    d = s.event(sid, "paused", before)
    out = {"pause_s": took, **phases("pause", d, PAUSE_PHASES)}
    out["pause.publish_s"] = took - (d.get("duration_seconds") or 0.0)
    out["pause.exit"] = d.get("exit")
    return out


def resume(s: SuiteServer, sid: str, at_once: bool) -> tuple[dict, str]:
    if at_once:
        quiet, s.quiet = s.quiet, 0.0  # resume_timed settles first: not now
        try:
            rec, kid = s.resume_timed(sid, "resume")
        finally:
            s.quiet = quiet
    else:
        warm_ready(s)
        rec, kid = s.resume_timed(sid, "resume")
    rec["resume.cell_s"] = rec["resume_s"] - rec["resume.running_s"]
    return rec, kid


def rounds(s: SuiteServer, sid: str, n: int, at_once: bool) -> list[dict]:
    out = []
    for _ in range(n):
        rec = pause(s, sid, at_once)
        more, kid = resume(s, sid, at_once)
        rec.update(more)
        got = s.run(kid, CHECK).strip()  # untimed: the state came back
        if got != EXPECTED:
            raise SystemExit(f"{s.label}: the notebook came back as {got!r}, not {EXPECTED!r}")
        out.append(rec)
    return out


def median(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in runs if isinstance(r.get(key), int | float)]
    return statistics.median(xs) if xs else None


def report(runs: dict[str, list[dict]]) -> None:
    labels = list(runs)
    keys = ["pause_s"] + [f"pause.{p}" for p in PAUSE_PHASES]
    keys += ["pause.duration_s", "pause.publish_s", "resume_s", "resume.running_s"]
    keys += [f"resume.{p}" for p in RESUME_PHASES] + ["resume.duration_s", "resume.cell_s"]
    print(f"\nmedians (s) of {len(runs[labels[0]])} rounds:")
    print(f"  {'':<20}" + "".join(f"{x:>10}" for x in labels))
    for key in keys:
        vals = [median(runs[x], key) for x in labels]
        cells = "".join(f"{v:>10.3f}" if v is not None else f"{'-':>10}" for v in vals)
        print(f"  {key:<20}{cells}")
    if len(labels) == 2:
        a, b = labels
        for key in ("pause_s", "resume_s"):
            ratios = [x[key] / y[key] for x, y in zip(runs[a], runs[b], strict=False)]
            print(f"  {key} {a}/{b}, median of per-round ratios: x{statistics.median(ratios):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="rounds of pause + resume per server")
    ap.add_argument("--before", help="a folder holding another copy of jupyter_gpu_pause")
    ap.add_argument("--after", help="the same, for the measured side (default: installed)")
    ap.add_argument(
        "--at-once",
        action="store_true",
        help="each click the moment the last one ended (a script's pause then resume), not "
        "once every kernel is idle and the warm kernel ready",
    )
    ap.add_argument("--json", help="write every round here")
    ap.add_argument("--strict-targets", action="store_true")
    args = ap.parse_args()
    trees = {"after": args.after}
    if args.before:
        trees = {"before": args.before, **trees}
    servers = {label: server(label, tree) for label, tree in trees.items()}
    runs: dict[str, list[dict]] = {label: [] for label in servers}
    try:
        sessions = {}
        for label, s in servers.items():
            sid, kid = s.open("tiny.ipynb")
            s.run(kid, NOTEBOOK)
            sessions[label] = sid
        order = list(servers)
        for rep in range(args.reps):
            for label in order if rep % 2 == 0 else order[::-1]:
                runs[label] += rounds(servers[label], sessions[label], 1, args.at_once)
            print(
                f"round {rep + 1}: "
                + "; ".join(
                    f"{x} pause {runs[x][-1]['pause_s']:.3f} s (exit "
                    f"{runs[x][-1]['pause.exit']}), resume {runs[x][-1]['resume_s']:.3f} s"
                    for x in order
                ),
                flush=True,
            )
    finally:
        for s in servers.values():
            s.stop()
            shutil.rmtree(s.tmp, ignore_errors=True)
    report(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    ours = runs["after"]
    p, r = median(ours, "pause_s") or 0.0, median(ours, "resume_s") or 0.0
    ok_p, ok_r = p <= TARGET_PAUSE, r <= TARGET_RESUME
    print(
        f"\nclick -> paused {p:.3f} s (target <= {TARGET_PAUSE} s): {'PASS' if ok_p else 'MISS'}"
        f"\nclick -> first cell {r:.3f} s (target <= {TARGET_RESUME} s, warm kernel ready): "
        f"{'PASS' if ok_r else 'MISS'}"
    )
    return 1 if args.strict_targets and not (ok_p and ok_r) else 0


if __name__ == "__main__":
    sys.exit(main())
