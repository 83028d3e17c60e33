"""As if it never paused (issue #33): a real notebook, paused and resumed twice mid-way, prints in
its later cells what it would have printed, or the difference was named before the pause.

The fast subset of the replay corpus (``tests/replay/``) runs here through a real ``jupyter
server`` process: seeded numpy draws and an F-test (statsmodels ``ols``), sympy's
``init_printing`` (Lecture 5 of J.R. Johansson's lectures), numpy and pandas print options with
matplotlib rc settings (pydata-book ch05), and scikit-learn pipelines with rc settings and
seeded draws (handson-ml3 chapter 4). The whole corpus is ``benchmarks/bench_replay.py``.
"""

from __future__ import annotations

import pytest

from benchmarks.server_process import JupyterServer
from tests.replay.corpus import fast_corpus
from tests.replay.run import (
    CONFIG,
    DIFFERS,
    FAILED,
    ReplayRun,
    details,
    pin_hash_seed,
    summary,
    table,
)


@pytest.fixture
def server(tmp_path):
    s = JupyterServer(tmp_path, CONFIG, label="replay")
    pin_hash_seed(s)
    s.start()
    yield s
    s.stop()


@pytest.mark.timeout(300)
def test_fast_corpus_goes_on_as_if_it_never_paused(server, capsys):
    # Given the fast subset of the replay corpus, each notebook run twice without a pause
    notebooks = fast_corpus()
    # When each is run again, paused and resumed after a third and after two thirds of its
    # cells (the offered rebuild accepted), then run to the end, two notebooks at a time
    replays = ReplayRun(server, log=lambda line: None).run(notebooks, jobs=2)
    report = table(replays) + "\n" + details(replays) + "\n" + summary(replays)
    with capsys.disabled():
        print("\n" + report)
    # Then every run went to the end, and each notebook had later cells to compare
    assert not [r.notebook.name for r in replays if r.verdict == FAILED], report
    assert all(r.compared for r in replays), report
    # And no later cell printed something else without a warning before the pause
    assert not [r.notebook.name for r in replays if r.verdict == DIFFERS], report
    # And the execution counter went on: the cell after a resume is [n+1], not [1]
    assert all(r.counts_continue for r in replays), report
