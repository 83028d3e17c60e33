"""The whole corpus (``tests/corpus_cases.py``) through a real server: what comes back.

Every case is set up in a reference kernel and in a notebook that is checked, paused, resumed,
probed and modified again (``tests/corpus_run.py``); prints one row per case and the summary
line "N of M equal and usable; K named before the pause; L rebuilt; S silent losses". Cases
whose library the kernels cannot import are listed as skipped. Exit status 1 on a silent loss.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_corpus.py            # all cases
    PYTHONPATH=. .venv/bin/python benchmarks/bench_corpus.py --fast     # the CI subset
    PYTHONPATH=. .venv/bin/python benchmarks/bench_corpus.py --only wcs,torch --keep
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.server_process import JupyterServer  # noqa: E402
from tests.corpus_cases import CASES, fast_cases  # noqa: E402
from tests.corpus_run import SILENT, CorpusRun, summary, table  # noqa: E402

CONFIG = 'c.GpuPauseApp.shutdown_checkpoint = "none"\nc.GpuPauseApp.warm_kernels = False\n'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the CI subset")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--keep", action="store_true", help="keep the server's folders and log")
    args = ap.parse_args()
    cases = fast_cases() if args.fast else list(CASES)
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.name in wanted]
    # the kernels import this checkout, as the tests' do
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    tmp = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    server = JupyterServer(tmp, CONFIG, label="corpus")
    start = time.monotonic()
    failed = True
    try:
        server.start()
        run = CorpusRun(server)
        outcomes = run.run(cases)
        failed = False
    finally:
        server.stop()
        if failed or args.keep:
            print(f"kept {tmp} (server.log)", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(outcomes))
    if run.unattributed or run.unattributed_lost:
        print(f"\nnamed, no case's: {run.unattributed}; lost, no case's: {run.unattributed_lost}")
    if run.unverified:
        print(f"\nsaved but not test-restored: {run.unverified}")
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in run.timings.items())
    print(f"\n{steps}; {time.monotonic() - start:.0f} s in all")
    print(summary(outcomes))
    return 1 if any(o.verdict == SILENT for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
