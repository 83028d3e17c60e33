"""Rebuild by re-running cells, in-process: the cell log a real IPython shell records, the plan it
gives for lost names, and a re-run that gives them back without touching what was restored."""

from __future__ import annotations

import copy

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from jupyter_gpu_pause.kernel import cells, rerun
from jupyter_gpu_pause.kernel.cells import CellLog
from jupyter_gpu_pause.kernel.rebuild import make_plan, plan_text, run_plan


@pytest.fixture
def shell():
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell(config=config)
    yield sh
    cells.uninstall(sh)
    sh.history_manager.end_session()


def run(shell, *codes: str) -> None:
    """Run cells as a notebook would (history stored, hooks fired); each must succeed."""
    for code in codes:
        result = shell.run_cell(code, store_history=True)
        assert result.success, f"cell failed: {code!r}: {result.error_in_exec}"


def logged(shell, code: str) -> dict:
    """The log entry of one cell run in ``shell``."""
    log = cells.install(shell)
    shell.run_cell(code, store_history=True)
    return log.cells[-1]


def resume(shell, lost: list[str]) -> dict:
    """What a resume that could not bring back ``lost`` leaves: the other names, as restored."""
    hidden = set(shell.user_ns_hidden)
    restored = {k: v for k, v in shell.user_ns.items() if k not in hidden and k not in lost}
    return {k: v for k, v in restored.items() if not k.startswith("_")}


# -- the log --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reads", "writes"),
    [
        ("import os.path, numpy.linalg as la\nfrom math import pi as p", set(), {"os", "la", "p"}),
        ("def f(a):\n    return a + g\nclass C(Base):\n    k = 1", {"g", "Base"}, {"f", "C"}),
        ("z = [y * k for y in xs if (w := y)]", {"k", "xs"}, {"z", "w"}),
        ("x = 2\ny = x + u", {"u"}, {"x", "y"}),
        ("x = x + 1", {"x"}, {"x"}),
        ("acc += 1\nm[0] = v\nobj.attr = 3\ndel d[k]", {"acc", "m", "v", "obj", "d", "k"},
         {"acc", "m", "obj", "d"}),
        ("for i, (a, *b) in pairs:\n    pass\nwith open(p) as fh:\n    pass",
         {"pairs", "open", "p"}, {"i", "a", "b", "fh"}),
        ("try:\n    t = 1\nexcept ValueError as err:\n    pass", {"ValueError"}, {"t", "err"}),
        ("model.fit(data)\nitems.append(1)", {"model", "data", "items"}, set()),
        ("first = next(batches)\nf = lambda: next(other)", {"batches", "next", "other"},
         {"first", "f", "batches"}),
        ("files = !ls\n%matplotlib inline", {"get_ipython"}, {"files"}),
        ("def bump():\n    global counter\n    counter = 1", set(), {"bump", "counter"}),
    ],
)  # fmt: skip
def test_the_log_records_what_a_cell_reads_and_writes(shell, code, reads, writes):
    # Given a cell a person ran
    cell = logged(shell, code)
    # Then the log names what it loads from the namespace and what it binds or changes
    assert cell["analysed"]
    assert set(cell["reads"]) - {"print"} == reads
    assert set(cell["writes"]) == writes


def test_a_star_import_writes_the_names_the_module_gives(shell):
    cell = logged(shell, "from math import *")
    assert cell["analysed"] and {"pi", "sqrt", "floor"} <= set(cell["writes"])


@pytest.mark.parametrize(
    ("code", "analysed", "blocked"),
    [
        ("%run nothing_here.py", False, None),
        ("%time q = 1", True, "uses %time, which works on the live namespace"),
        ("%%capture out\nprint(1)", True, "uses %capture, which works on the live namespace"),
        ("x = = 1", False, None),
    ],
)
def test_cells_whose_writes_are_unknown_or_that_reach_the_namespace_are_said_so(
    shell, code, analysed, blocked
):
    cell = logged(shell, code)
    assert (cell["analysed"], cell["blocked"]) == (analysed, blocked)


def test_a_time_magic_shows_the_names_its_code_writes(shell):
    cell = logged(shell, "%time q = a + 1")
    assert "q" in cell["writes"] and "a" in cell["reads"]


def test_each_cell_is_logged_in_order_with_its_count_time_and_outcome(shell):
    # Given a log installed before a person runs three cells, one of which raises
    log = cells.install(shell)
    shell.run_cell("a = 1", store_history=True)
    shell.run_cell("b = 1 / 0", store_history=True)
    shell.run_cell("c = a", store_history=True)
    # Then each is there, in order, with its count and time, the failure marked
    assert [c["n"] for c in log.cells] == [1, 2, 3]
    assert [c["ok"] for c in log.cells] == [True, False, True]
    assert all(isinstance(c["seconds"], float) and c["seconds"] >= 0 for c in log.cells)
    assert log.cells[2]["code"] == "c = a"


def test_silent_runs_are_not_logged(shell):
    # Given the log; when the agent runs code silently, as its own requests do
    log = cells.install(shell)
    shell.run_cell("agent_state = 1", silent=True)
    run(shell, "mine = 2")
    # Then only the person's cell is in the log
    assert [c["code"] for c in log.cells] == ["mine = 2"]


def test_installing_twice_gives_the_same_log_and_records_once(shell):
    log = cells.install(shell)
    assert cells.install(shell) is log
    run(shell, "x = 1")
    assert len(log.cells) == 1


def test_cells_run_before_install_are_back_filled_with_unknown_time(shell):
    # Given cells run before the log existed, one of which raised
    run(shell, "a = 1", "b = a + 1")
    shell.run_cell("oops = 1 / 0", store_history=True)
    # When the log is installed
    log = cells.install(shell)
    # Then they are in it, their time unknown, the failure marked
    assert [(c["n"], c["code"], c["seconds"]) for c in log.cells] == [
        (1, "a = 1", None),
        (2, "b = a + 1", None),
        (3, "oops = 1 / 0", None),
    ]
    assert [c["ok"] for c in log.cells] == [True, True, False]
    assert log.cells[1]["reads"] == ["a"]


def test_the_cell_that_installs_the_log_is_recorded_once(shell):
    shell.user_ns["install"] = cells.install
    shell.run_cell("log = install(get_ipython())\nv = 1", store_history=True)
    log = cells.install(shell)
    assert [(c["n"], c["ok"]) for c in log.cells] == [(1, True)]


@pytest.mark.parametrize(
    ("code", "marked"),
    [
        ("x = 1  # gp: no-rerun", True),
        ("# GP:no-rerun\nx = 1", True),
        ("x = 1  #gp :  No-Rerun because it sends mail", True),
        ("x = '# gp: no-rerun'", False),
        ("x = 1  # gp: rerun", False),
    ],
)
def test_a_no_rerun_comment_marks_the_cell(shell, code, marked):
    assert logged(shell, code)["no_rerun"] is marked


def test_the_log_keeps_its_bounds(shell):
    # Given a log that keeps at most 3 cells
    log = cells.install(shell)
    log.max_cells = 3
    run(shell, *(f"v{i} = {i}" for i in range(5)))
    # Then the 3 newest are kept, and it knows it forgot 2
    assert [c["code"] for c in log.cells] == ["v2 = 2", "v3 = 3", "v4 = 4"]
    assert log.forgotten == 2
    # And a plan for a name only a forgotten cell made says so
    plan = make_plan(log, ["v0"], set())
    assert plan["unbuildable"] == [
        {
            "name": "v0",
            "reason": "no recorded cell makes `v0` (2 older cells are no longer in the log)",
        }
    ]


def test_a_cell_too_long_to_keep_is_analysed_but_never_re_run(shell):
    log = cells.install(shell)
    big = "x = 1\n" + "#" * cells.MAX_CELL_CHARS
    run(shell, big)
    (cell,) = log.cells
    assert cell["writes"] == ["x"] and not cell["kept"]
    assert len(cell["code"]) == cells.MAX_CELL_CHARS
    plan = make_plan(log, ["x"], set())
    assert plan["unbuildable"] == [
        {"name": "x", "reason": "cell [1] is too long to keep in the log"}
    ]


def test_the_log_survives_json_and_keeps_recording_after_it(shell):
    # Given the log of a kernel that was paused
    old = cells.install(shell)
    run(shell, "a = 1", "b = a + 1")
    doc = old.to_json()
    # When a new kernel adopts it and its person runs a cell (counts restart at 1)
    fresh_config = Config()
    fresh_config.HistoryManager.hist_file = ":memory:"
    new_shell = InteractiveShell(config=fresh_config)
    try:
        log = cells.install(new_shell)
        log.adopt(CellLog.from_json(doc))
        new_shell.run_cell("c = 3", store_history=True)
        # Then the old cells come first, then the new one, all told apart
        assert [(c["n"], c["code"], c["session"]) for c in log.cells] == [
            (1, "a = 1", 0),
            (2, "b = a + 1", 0),
            (1, "c = 3", 1),
        ]
        assert len({c["seq"] for c in log.cells}) == 3
        assert CellLog.from_json(log.to_json()).cells == log.cells
    finally:
        cells.uninstall(new_shell)
        new_shell.history_manager.end_session()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected an object"),
        ({"version": 2, "cells": []}, "version 2 is not 1"),
        ({"version": 1, "cells": {}}, "'cells' must be a list"),
        ({"version": 1, "cells": [{"n": 1}]}, "cell 0 has no 'code'"),
        ({"version": 1, "cells": ["x"]}, "cell 0 is not an object"),
        ({"version": 1, "forgotten": -1, "cells": []}, "'forgotten' must be a count"),
    ],
)
def test_a_bad_log_document_is_refused_with_what_is_wrong(doc, message):
    with pytest.raises(ValueError, match=message):
        CellLog.from_json(doc)


def test_a_cell_with_a_bad_field_is_refused(shell):
    log = cells.install(shell)
    run(shell, "a = 1")
    doc = log.to_json()
    doc["cells"][0]["reads"] = ["a", 3]
    with pytest.raises(ValueError, match="'reads' must be a list of names"):
        CellLog.from_json(doc)
    doc["cells"][0]["ok"] = "yes"
    with pytest.raises(ValueError, match="bad 'ok'"):
        CellLog.from_json(doc)


# -- the plan -------------------------------------------------------------------------------


def test_a_chain_re_runs_only_what_the_lost_name_needs_in_order(shell):
    # Given a -> b -> c, and an unrelated cell
    log = cells.install(shell)
    run(shell, "a = 1", "unrelated = 5", "b = a + 1", "c = b * 10")
    # When only c is lost and a, b were restored
    plan = make_plan(log, ["c"], {"a", "b", "unrelated"})
    # Then only c's cell is re-run, reading the restored b
    assert plan["names"] == ["c"] and plan["unbuildable"] == []
    assert [(c["n"], c["restored"]) for c in plan["cells"]] == [(4, ["b"])]
    # And when b is lost too, b's cell runs first, then c's
    plan = make_plan(log, ["c", "b"], {"a", "unrelated"})
    assert [c["n"] for c in plan["cells"]] == [3, 4] and plan["names"] == ["c", "b"]
    assert plan["seconds"] == pytest.approx(sum(c["seconds"] for c in log.cells[2:]), abs=1e-5)


def test_a_name_changed_later_is_rebuilt_as_it_was_when_read(shell):
    # Given a generator made from data, and data rebound afterwards
    log = cells.install(shell)
    run(shell, "data = [1, 2]", "gen = (x for x in data)", "data = data + [3]")
    ns = resume(shell, ["gen"])
    # When gen is lost: the restored data is the newer one, so its first cell re-runs
    plan = make_plan(log, ["gen"], set(ns))
    assert [c["n"] for c in plan["cells"]] == [1, 2]
    result = run_plan(plan, log, ns, shell)
    # Then gen yields what it did, and the restored data is untouched
    assert result["ok"] and result["rebuilt"] == ["gen"]
    assert list(ns["gen"]) == [1, 2]
    assert ns["data"] == [1, 2, 3]


def test_a_failed_or_marked_cell_is_never_used_and_says_why(shell):
    log = cells.install(shell)
    run(shell, "a = 1")
    shell.run_cell("b = a + 1\nraise RuntimeError('half done')", store_history=True)
    run(shell, "mail = 'sent'  # gp: no-rerun", "c = 3")
    plan = make_plan(log, ["b", "mail", "c"], {"a"})
    assert plan["names"] == ["c"]
    assert plan["unbuildable"] == [
        {"name": "b", "reason": "cell [2] raised an error when it ran, so what it made is unknown"},
        {"name": "mail", "reason": "cell [3] is marked gp: no-rerun"},
    ]


def test_a_cell_tagged_no_rerun_by_its_id_is_not_used(shell):
    log = cells.install(shell)
    run(shell, "a = 1", "b = a")
    log.cells[0]["cell_id"] = "cell-a"
    plan = make_plan(log, ["b"], set(), no_rerun_ids={"cell-a"})
    assert plan["names"] == []
    assert plan["unbuildable"] == [{"name": "b", "reason": "cell [1] is marked gp: no-rerun"}]


def test_a_name_no_cell_makes_is_unbuildable_with_its_reason(shell):
    log = cells.install(shell)
    shell.user_ns["given"] = 1  # put there by something other than a cell
    run(shell, "y = given + 1", "z = 2")
    plan = make_plan(log, ["y", "ghost"], {"z"})
    assert plan["names"] == [] and plan["cells"] == []
    assert plan["unbuildable"] == [
        {"name": "y", "reason": "`given` is read by cell [1] and no recorded cell makes it"},
        {"name": "ghost", "reason": "no recorded cell makes `ghost`"},
    ]


def test_an_unanalysable_cell_blocks_what_it_may_have_changed(shell):
    log = cells.install(shell)
    run(shell, "a = 1")
    shell.run_cell("%run no_such_script.py", store_history=True)
    run(shell, "b = 2")
    plan = make_plan(log, ["a", "b"], set())
    assert plan["names"] == ["b"]
    assert plan["unbuildable"] == [
        {
            "name": "a",
            "reason": "cell [2] could not be analysed, so it may have changed any name",
        }
    ]


def test_the_plan_line_the_ui_shows(shell):
    log = cells.install(shell)
    run(shell, "m = 1", "w = m + 1")
    plan = make_plan(log, ["m", "w"], set())
    plan["seconds"] = 0.2
    assert plan_text(plan) == "`m`, `w`: re-run cells [1], [2] — 0.2 s"
    log.cells[0]["seconds"] = None
    assert plan_text(make_plan(log, ["m"], set())) == "`m`: re-run cell [1] — run time unknown"


# -- the run --------------------------------------------------------------------------------

TRAINING = """\
class Model:
    def __init__(self):
        self.steps = 0
        self.weights = [0.0, 0.0]
"""


def test_a_rebuild_gives_back_the_generator_and_leaves_the_trained_model_alone(shell, capsys):
    # Given a model, and a cell that makes the generator `batches` and trains the model with it
    log = cells.install(shell)
    run(
        shell,
        TRAINING,
        "model = Model()\nconfig = {'lr': 0.5}",
        "data = list(range(6))",
        "batches = (data[i:i + 2] for i in range(0, len(data), 2))\n"
        "for batch in [next(batches)]:\n"
        "    model.steps += 1\n"
        "    model.weights[0] += config['lr'] * sum(batch)\n"
        "print('trained', model.steps)",
    )
    # When a resume restores everything but the generator
    ns = resume(shell, ["batches"])
    model, snapshot = ns["model"], copy.deepcopy(ns["model"].__dict__)
    plan = make_plan(log, ["batches"], set(ns))
    # (the restored model was trained by that cell: it re-runs against a new one from cell [2])
    assert [(c["n"], c["restored"]) for c in plan["cells"]] == [
        (2, ["Model"]),
        (4, ["config", "data"]),
    ]
    capsys.readouterr()
    seen = []
    result = run_plan(plan, log, ns, shell, progress=lambda done, total: seen.append((done, total)))
    # Then batches is back, fresh from the data, and the model is the same object, unchanged
    assert result["ok"] and result["rebuilt"] == ["batches"] and result["shared"] == []
    assert next(ns["batches"]) == [2, 3]
    assert ns["model"] is model and model.__dict__ == snapshot and model.steps == 1
    # And the copies it worked on are accounted for, the cell's print reached the output
    assert result["copy_bytes"] > 0 and result["copy_seconds"] >= 0
    assert seen == [(1, 2), (2, 2)]
    assert capsys.readouterr().out == "trained 1\n"


def test_a_failing_re_run_stops_the_plan_and_writes_back_nothing(shell, tmp_path):
    # Given two lost names, the second read from a file that is gone by the time of the resume
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    shell.user_ns["path"] = str(notes)
    log = cells.install(shell)
    run(shell, "first = 1", "second = open(path).read()")
    ns = resume(shell, ["first", "second"])
    notes.unlink()
    plan = make_plan(log, ["first", "second"], set(ns))
    # When the plan runs
    result = run_plan(plan, log, ns, shell)
    # Then it says where it stopped and why, and neither name is in the namespace
    assert not result["ok"] and result["rebuilt"] == []
    assert {k: result["failed"][k] for k in ("n", "index", "seq")} == {"n": 2, "index": 1, "seq": 1}
    assert result["failed"]["error"].startswith("FileNotFoundError: ")
    assert "first" not in ns and "second" not in ns


def test_the_copy_cost_counts_array_data():
    np = pytest.importorskip("numpy")
    log = CellLog()
    log.append(cells.record("total = float(big.sum())", "total = float(big.sum())\n", 1, 0.5, True))
    ns = {"big": np.ones(1000)}
    result = run_plan(make_plan(log, ["total"], {"big"}), log, ns)
    assert result["ok"] and ns["total"] == 1000.0
    assert result["copy_bytes"] >= 8000


def test_a_value_that_cannot_be_copied_is_shared_only_when_allowed(shell):
    # Given a lost name made from a generator that was restored (it cannot be copied)
    log = cells.install(shell)
    run(shell, "source = (v for v in [1, 2, 3])", "head = sum(source)")
    ns = {"source": (v for v in [7, 8, 9])}
    plan = make_plan(log, ["head"], set(ns))
    # When the plan runs without leave to share it
    result = run_plan(plan, log, ns, shell)
    # Then nothing runs: it asks, saying which name would be shared and why
    assert result["ok"] is False and result["needs_confirm"] is True
    assert [s["name"] for s in result["shared"]] == ["source"]
    assert "cannot be copied" in result["shared"][0]["reason"]
    assert "head" not in ns and next(ns["source"]) == 7
    # And with leave, it runs against the shared object
    result = run_plan(plan, log, ns, shell, allow_shared=True)
    assert result["ok"] and ns["head"] == 8 + 9


def test_a_re_run_reads_a_restored_value_again_after_an_earlier_plan_cell_rebinds_it(shell):
    # Given x rebound by cell 2, read by cell 3; cell 1 also makes `a`, needed by cell 4
    log = cells.install(shell)
    run(shell, "x = 1\na = 10", "x = 2", "y = x * 100", "z = a + y")
    ns = resume(shell, ["a", "y", "z"])
    plan = make_plan(log, ["z"], set(ns))
    assert [c["n"] for c in plan["cells"]] == [1, 3, 4]
    result = run_plan(plan, log, ns, shell)
    # Then y was made from the restored x (2), not the x cell 1 set in scratch
    assert result["ok"] and ns["z"] == 210 and ns["x"] == 2 and "y" not in ns


def test_a_rebuilt_function_reads_the_users_namespace(shell):
    log = cells.install(shell)
    run(shell, "scale = 3", "def times(v):\n    return v * scale")
    ns = resume(shell, ["times"])
    result = run_plan(make_plan(log, ["times"], set(ns)), log, ns, shell)
    assert result["ok"]
    ns["scale"] = 5
    assert ns["times"](2) == 10


# -- the offer and the run a kernel makes of it (rerun.py) ------------------------------------


def lose(shell, *names: str) -> dict | None:
    """A resume that could not bring ``names`` back: they are gone, and the offer is made."""
    for n in names:
        del shell.user_ns[n]
    return rerun.offer(shell, list(names), None, None, ())


def test_a_plan_that_would_copy_a_lot_asks_first(shell, monkeypatch):
    # Given a lost generator whose cell reads a restored array of 80 kB, and a threshold below
    import numpy as np

    shell.user_ns["np"] = np
    run(shell, "big = np.zeros(10_000)", "g = (x for x in big[:3])")
    offer = lose(shell, "g")
    assert offer["names"] == ["g"] and offer["text"].startswith("`g`: re-run cell [2]")
    monkeypatch.setattr(rerun, "COPY_ASK_BYTES", 50_000)
    # When it is run without confirming
    result = rerun.run(shell)
    # Then nothing ran: it says what copying would take
    assert result["needs_confirm"] and not result["ok"] and result["rebuilt"] == []
    assert result["copy_bytes"] >= 80_000 and "g" not in shell.user_ns
    assert "big" in result["shared"][0]["name"] and "bytes" in result["shared"][0]["reason"]
    # When the user confirms
    result = rerun.run(shell, confirm=True)
    # Then `g` is back, the array untouched, and nothing is offered any more
    assert result["ok"] and result["rebuilt"] == ["g"] and result["offer"] is None
    assert list(shell.user_ns["g"]) == [0.0, 0.0, 0.0]


def test_a_name_made_again_since_the_resume_is_left_alone(shell):
    # Given two lost names, one of which the user has made again by hand
    run(shell, "a = iter([1])", "b = iter([2])")
    lose(shell, "a", "b")
    run(shell, "a = 'mine'")
    # When the rebuild runs
    result = rerun.run(shell)
    # Then only the other one is rebuilt, and the user's value stands
    assert result["rebuilt"] == ["b"] and result["already"] == ["a"]
    assert shell.user_ns["a"] == "mine" and next(shell.user_ns["b"]) == 2
    assert rerun.result_text(result).startswith("Rebuilt b in ")


def test_names_outside_the_offer_are_said_unknown(shell):
    run(shell, "a = iter([1])")
    lose(shell, "a")
    result = rerun.run(shell, ["zzz"])
    assert result["unknown"] == ["zzz"] and result["rebuilt"] == [] and "a" not in shell.user_ns


@pytest.mark.parametrize(
    ("doc", "blob", "bad", "problem"),
    [
        ({}, None, {}, "has no cell log"),
        ({"cells": {"blob": "h"}}, b"x", {"h": ValueError("hash differs")}, "failed its check"),
        ({"cells": {"blob": "h"}}, b"{not json", {}, "cannot be read"),
        ({"cells": {"blob": "h"}}, b'{"version": 9, "cells": []}', {}, "cannot be read"),
    ],
)
def test_a_missing_or_damaged_log_is_said_and_never_read(doc, blob, bad, problem):
    log, why = rerun.load_log(doc, {"h": blob} if blob else {}, bad)
    assert log is None and problem in why


def test_a_generator_advanced_by_later_cells_comes_back_as_far(shell):
    # Given a generator a later cell advanced with next()
    run(shell, "g = (i for i in range(5))", "first = next(g)", "x = 1")
    # When a resume lost it (the rest restored)
    offer = lose(shell, "g")
    # Then the plan re-runs the cell that advanced it too, on a copy of what it read
    assert [c["execution_count"] for c in offer["cells"]] == [1, 2]
    assert rerun.run(shell)["rebuilt"] == ["g"]
    assert next(shell.user_ns["g"]) == 1 and shell.user_ns["first"] == 0
