"""Rounds of pause then resume through the public client, as a script runs them, with every core
kept busy by other processes: how many actions were refused, and whether every round's value
came back.

Each round: ``pause(wait=True)`` → ``resume(wait=True)`` → the value read back in the resumed
kernel → ``pause(wait=True)`` asked the moment the resume returned → ``resume(wait=True)``. A
refusal (a state shown that did not accept the action it offers) is counted, not retried.

    .venv/bin/python benchmarks/bench_rounds.py                 # 300 rounds
    .venv/bin/python benchmarks/bench_rounds.py --rounds 50 --json

Exit status 1 when any action was refused or any value did not come back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_gpu_pause.client import GpuPauseClient, GpuPauseError  # noqa: E402
from tests.servers import TOKEN, Server  # noqa: E402

CONFIG = "c.GpuPauseApp.policies = []\nc.GpuPauseApp.gc_grace_seconds = 0\n"
SPIN = "import time\nend = time.monotonic() + 7200\nwhile time.monotonic() < end: pass\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 2)]
    refused: list[str] = []
    wrong: list[str] = []
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), config=CONFIG)
        server.env["PYTHONPATH"] = str(ROOT)
        server.start()
        try:
            gp = GpuPauseClient(f"http://127.0.0.1:{server.port}/", TOKEN)
            s = server.open_notebook("rounds.ipynb")
            sid = s["id"]
            server.run(s["kernel_id"], "x = 0")
            for i in range(args.rounds):
                began = time.monotonic()
                try:
                    gp.pause(sid, wait=True)
                    back = gp.resume(sid, wait=True)
                    got = server.run(back["kernel_id"], f"print(x); x = {i + 1}").strip()
                    if got != str(i):
                        wrong.append(f"round {i}: x was {got!r}, not {i}")
                    gp.pause(sid, wait=True)  # right after the resume returned
                    gp.resume(sid, wait=True)
                except GpuPauseError as e:
                    refused.append(f"round {i}: {type(e).__name__}: {e}")
                    # carry on from where it stands: a failed resume leaves the checkpoint
                    now = gp.wait(sid, ("paused", "active", "idle", "failed"), timeout=120)
                    if now["state"] in ("paused", "failed"):
                        gp.resume(sid, wait=True)
                seconds.append(time.monotonic() - began)
        finally:
            server.stop()
            for p in spinners:
                p.kill()
                p.wait()
    result = {
        "rounds": args.rounds,
        "actions": 4 * args.rounds,
        "refused": len(refused),
        "values_wrong": len(wrong),
        "round_seconds_median": round(statistics.median(seconds), 3) if seconds else None,
        "cores_busy": os.cpu_count(),
        "problems": refused[:20] + wrong[:20],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['rounds']} rounds ({result['actions']} actions), every core busy: "
            f"{result['refused']} refused, {result['values_wrong']} values wrong; "
            f"median round {result['round_seconds_median']} s"
        )
        for p in result["problems"]:
            print("  " + p)
    return 1 if refused or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
