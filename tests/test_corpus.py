"""Nothing lost (issue #25): real library objects, declared as a notebook would, come back from a
pause equal and usable, or were named as *cannot be saved* before it and rebuilt by re-running
their cells where that gives them back. Never silently lost.

The fast subset of ``corpus_cases.py`` runs here through a real ``jupyter server`` process: one
reference kernel never paused, one paused and resumed (``corpus_run.py``). The whole corpus is
``benchmarks/bench_corpus.py``.
"""

from __future__ import annotations

import pytest

from benchmarks.server_process import JupyterServer
from tests.corpus_cases import fast_cases
from tests.corpus_run import (
    EQUAL,
    NAMED,
    REBUILT,
    SETUP_FAILED,
    SILENT,
    SKIPPED,
    UNSTABLE,
    CorpusRun,
    summary,
    table,
)

# What a user is told before the pause will not come back by itself
NAMED_BEFORE_THE_PAUSE = {"gen", "file", "sql", "bkfig", "widget", "sha", "celprm"}
# ...and what the offered rebuild brings back equal and usable (the list first). The
# generator comes back as its cell made it, not advanced by the later next() calls, and the
# file as a new file (a re-run cell makes a new temporary folder): named, not equal.
REBUILT_BY_RERUN = {"widget", "sha", "celprm", "sql", "bkfig"}

CONFIG = 'c.GpuPauseApp.shutdown_checkpoint = "none"\nc.GpuPauseApp.warm_kernels = False\n'


@pytest.fixture
def server(tmp_path):
    s = JupyterServer(tmp_path, CONFIG, label="corpus")
    s.start()
    yield s
    s.stop()


@pytest.mark.timeout(240)
def test_no_object_of_the_fast_corpus_is_lost_silently(server, capsys):
    # Given the fast corpus, set up in a reference kernel and in the notebook to pause
    run = CorpusRun(server)
    # When the notebook is checked, paused, resumed, probed, modified and probed again
    outcomes = run.run(fast_cases())
    with capsys.disabled():
        print("\n" + table(outcomes) + "\n" + summary(outcomes))
    by = {o.case.name: o for o in outcomes if o.verdict != SKIPPED}
    assert by, "no case's library is installed in the kernel's environment"
    # Then every case's cells ran, and its probe said the same in both kernels before the pause
    assert not [o.row() for o in outcomes if o.verdict in (SETUP_FAILED, UNSTABLE)]
    # And nothing was lost without being named before the pause
    assert not [o.row() for o in outcomes if o.verdict == SILENT]
    assert not run.unattributed and not run.unattributed_lost
    # And what the check named is what the pause left out, each with a reason a user can read
    assert run.check_skipped == run.pause_skipped
    named = {n for n, o in by.items() if o.verdict in (NAMED, REBUILT)}
    assert named == NAMED_BEFORE_THE_PAUSE & set(by), table(outcomes)
    assert all(r for o in outcomes for r in o.named.values())
    # And the rebuild the resume offered brought those back, equal and usable
    assert {n for n, o in by.items() if o.verdict == REBUILT} == REBUILT_BY_RERUN & set(by)
    # And the rest came back equal and usable, before and after being modified again
    assert {n for n, o in by.items() if o.verdict == EQUAL} == set(by) - named
