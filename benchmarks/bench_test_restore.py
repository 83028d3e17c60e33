"""What the test-restore costs a pause: the same namespace paused with it and without it, side
by side in one run.

Two servers of this tree, one with ``test_restore = True`` (the default) and one with ``False``,
alternating, each repetition a fresh notebook holding ``states.make_small`` (the 2 500-variable
namespace of ``run.py``'s small-objects step, with a 10 000-row DataFrame, so the test-restore
forks and loads the DataFrame). Prints click → ``paused`` per repetition and the medians, and the
ratio of the medians; exit status 1 above ``--limit`` (default 1.10: issue #25's "+10 %").

    PYTHONPATH=. .venv/bin/python benchmarks/bench_test_restore.py --reps 8
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite_server import server_with  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--objects", type=int, default=10_000)
    ap.add_argument("--limit", type=float, default=1.10)
    args = ap.parse_args()
    servers = {on: server_with("test_restore", on) for on in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for rep in range(args.reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for on in order:
                s = servers[on]
                sid, kid = s.open(f"small-{rep}.ipynb")
                s.call(kid, "states", "make_small", args.objects, 2000 + rep)
                pid = s.call(kid, "states", "memory")["pid"]
                times[on].append(s.pause_timed(sid, pid, "pause")["pause_s"])
                s.forget(sid)
            print(f"rep {rep + 1}: with {times[True][-1]:.3f} s, without {times[False][-1]:.3f} s")
    finally:
        for s in servers.values():
            s.stop()
            shutil.rmtree(s.tmp, ignore_errors=True)
    with_, without = statistics.median(times[True]), statistics.median(times[False])
    ratio = with_ / without
    print(
        f"\npause of {args.objects // 4} variables, click -> paused, median of {args.reps}: "
        f"with the test-restore {with_:.3f} s, without {without:.3f} s: x{ratio:.3f} "
        f"(limit x{args.limit:.2f})"
    )
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
