"""What carrying the ambient state costs a pause and a resume: the same notebook (matplotlib,
pandas and torch imported, their settings changed, generators seeded) paused and resumed with
``c.GpuPauseApp.ambient = True`` and with ``False``, side by side in one run.

Two servers of this tree, one per setting, alternating, each repetition a fresh notebook.
Prints per repetition the kernel's own measure of capturing the ambient state (the ``paused``
event's ``ambient_seconds``) and of restoring it (the ``resumed`` event's
``ambient.seconds``), and click -> paused / click -> first cell answered for both settings;
then the medians. Exit status 1 when the median capture or restore passes ``--limit-ms``
(default 20: issue #33's budget).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ambient.py --reps 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite_server import PAUSE_PHASES, RESUME_PHASES, SuiteServer, server_with  # noqa: E402

NOTEBOOK = """
import random, warnings
import numpy as np, pandas as pd, torch
import matplotlib.pyplot as plt
np.random.seed(0); random.seed(0); torch.manual_seed(0)
plt.rc("figure", figsize=(12, 6)); np.set_printoptions(precision=3)
pd.set_option("display.max_rows", 20); torch.set_printoptions(precision=2)
warnings.simplefilter("ignore", FutureWarning)
frame = pd.DataFrame({"x": np.random.rand(1000)})
weights = torch.rand(256, 256)
frame.describe()
"""


def _deleted(s: SuiteServer, sid: str) -> bool:
    code, _body = s.api("DELETE", f"gpu-pause/api/sessions/{sid}?delete_checkpoints=true")
    return code == 204


def one(s: SuiteServer, rep: int) -> dict:
    sid, kid = s.open(f"ambient-{rep}.ipynb")
    s.run(kid, NOTEBOOK)
    pid = s.call(kid, "states", "memory")["pid"]
    paused = s.pause_timed(sid, pid, "pause")
    before = s.count(sid, "resumed")
    resumed, _ = s.resume_timed(sid, "resume")
    paused_detail = s.event(sid, "paused", 0)
    resumed_detail = s.event(sid, "resumed", before)
    s.ok("POST", f"gpu-pause/api/sessions/{sid}/pause", expect=202)  # untimed: to delete it
    s.reach(sid, ("paused",), 120)
    # A session shown paused may still refuse a DELETE while its pause finishes (issue #34):
    # ask again until it is taken
    s.until(lambda: _deleted(s, sid), f"{sid} deleted", 30)
    s.ok("POST", "gpu-pause/api/store/gc", {"dry_run": False})
    return {
        **{k: v for k, v in {**paused, **resumed}.items() if "." in k},
        "pause_s": paused["pause_s"],
        "resume_s": resumed["resume_s"],
        "capture_ms": 1000 * (paused_detail.get("ambient_seconds") or 0.0),
        "restore_ms": 1000 * ((resumed_detail.get("ambient") or {}).get("seconds") or 0.0),
        "exit": paused_detail.get("exit"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--limit-ms", type=float, default=20.0)
    args = ap.parse_args()
    servers = {on: server_with("ambient", on) for on in (True, False)}
    runs: dict[bool, list[dict]] = {True: [], False: []}
    try:
        for rep in range(args.reps):
            for on in (True, False) if rep % 2 == 0 else (False, True):
                runs[on].append(one(servers[on], rep))
            a, b = runs[True][-1], runs[False][-1]
            print(
                f"rep {rep + 1}: capture {a['capture_ms']:.1f} ms, restore "
                f"{a['restore_ms']:.1f} ms; pause {a['pause_s']:.3f} s on / "
                f"{b['pause_s']:.3f} s off, resume {a['resume_s']:.3f} s on / "
                f"{b['resume_s']:.3f} s off; kernel stopped: {a['exit']} / {b['exit']}"
            )
    finally:
        for s in servers.values():
            s.stop()
            shutil.rmtree(s.tmp, ignore_errors=True)

    def med(on: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[on])

    capture, restore = med(True, "capture_ms"), med(True, "restore_ms")
    print(
        f"\nmedian of {args.reps}: capturing the ambient state {capture:.1f} ms, restoring it "
        f"{restore:.1f} ms (limit {args.limit_ms:g} ms each)\n"
        f"click -> paused: on {med(True, 'pause_s'):.3f} s, off {med(False, 'pause_s'):.3f} s "
        f"(x{med(True, 'pause_s') / med(False, 'pause_s'):.3f}); click -> first cell: on "
        f"{med(True, 'resume_s'):.3f} s, off {med(False, 'resume_s'):.3f} s "
        f"(x{med(True, 'resume_s') / med(False, 'resume_s'):.3f})"
    )
    phases = [f"pause.{p}" for p in PAUSE_PHASES] + [f"resume.{p}" for p in RESUME_PHASES]
    for key in phases + ["resume.running_s"]:
        on = [r[key] for r in runs[True] if isinstance(r.get(key), int | float)]
        off = [r[key] for r in runs[False] if isinstance(r.get(key), int | float)]
        if on and off:
            print(
                f"  {key:<18} on {statistics.median(on):.3f} s, off {statistics.median(off):.3f} s"
            )
    return 0 if capture <= args.limit_ms and restore <= args.limit_ms else 1


if __name__ == "__main__":
    sys.exit(main())
