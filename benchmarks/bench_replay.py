"""The replay corpus (``tests/replay/``): do real notebooks go on as if they never paused?

Each notebook of ``tests/replay/corpus.py`` runs in two reference kernels and in a subject that
is checked, paused and resumed through the REST API after a third and after two thirds of its
cells (the offered rebuild accepted), then run to the end, all through one real ``jupyter
server`` with the extension (``tests/replay/run.py``). Every later cell's outputs and execution
count are compared with the reference; cells whose outputs differ between the two references
are left out and counted. Prints one row per notebook, each divergence, and the summary line
"N of M notebooks continue identically after two pauses; K silent divergences"; writes the
whole result to ``--json``. Exit status 1 on a silent divergence.

    .venv/bin/python benchmarks/bench_replay.py                       # the whole corpus
    .venv/bin/python benchmarks/bench_replay.py --fast                # the CI subset
    .venv/bin/python benchmarks/bench_replay.py --only ols,ch05 --keep
    .venv/bin/python benchmarks/bench_replay.py --ambient off        # the setting off
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.server_process import JupyterServer  # noqa: E402
from tests.replay.corpus import CORPUS, fast_corpus  # noqa: E402
from tests.replay.run import (  # noqa: E402
    CONFIG,
    DIFFERS,
    HASH_SEED,
    ReplayRun,
    details,
    pin_hash_seed,
    summary,
    table,
)

DEFAULT_JSON = ROOT / "benchmarks" / "results" / "replay.json"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip()
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the CI subset")
    ap.add_argument("--only", default="", help="comma-separated notebook names (file stems)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="notebooks replayed at once, three kernels each (default 2: ~2.5 GiB of kernels)",
    )
    ap.add_argument(
        "--ambient",
        choices=("default", "on", "off"),
        default="default",
        help="c.GpuPauseApp.ambient: left at the tree's default, or set (needs a tree that has it)",
    )
    ap.add_argument(
        "--hash-seed",
        default=HASH_SEED,
        help=f"PYTHONHASHSEED of every kernel (default {HASH_SEED}; 'random': each its own)",
    )
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    ap.add_argument("--keep", action="store_true", help="keep the server's folders and log")
    args = ap.parse_args()
    notebooks = fast_corpus() if args.fast else list(CORPUS)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {nb.name for nb in notebooks}
        if unknown:
            ap.error(f"not in the corpus: {', '.join(sorted(unknown))}")
        notebooks = [nb for nb in notebooks if nb.name in wanted]
    config = CONFIG
    if args.ambient != "default":
        config += f"c.GpuPauseApp.ambient = {args.ambient == 'on'}\n"
    # the kernels import this checkout, as the tests' do
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    server = JupyterServer(tmp, config, label="replay")
    pin_hash_seed(server, None if args.hash_seed == "random" else args.hash_seed)
    start = time.monotonic()
    failed = True
    try:
        server.start()
        print(f"{len(notebooks)} notebooks, {args.jobs} at a time", flush=True)
        replays = ReplayRun(server, log=lambda line: print(line, flush=True)).run(
            notebooks, jobs=args.jobs
        )
        failed = False
    finally:
        server.stop()
        if failed or args.keep:
            print(f"kept {tmp} (server.log)", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - start
    print("\n" + table(replays))
    more = details(replays)
    if more:
        print("\n" + more)
    print(f"\n{seconds:.0f} s in all")
    line = summary(replays)
    print(line)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "meta": {
                    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "commit": _commit(),
                    "machine": f"{platform.node()} {os.cpu_count()} cpus {platform.platform()}",
                    "python": platform.python_version(),
                    "ambient": args.ambient,
                    "hash_seed": args.hash_seed,
                    "jobs": args.jobs,
                    "seconds": round(seconds, 1),
                },
                "summary": line,
                "notebooks": [r.as_json() for r in replays],
            },
            indent=1,
        )
    )
    print(f"wrote {args.json}")
    return 1 if any(r.verdict == DIFFERS for r in replays) else 0


if __name__ == "__main__":
    sys.exit(main())
