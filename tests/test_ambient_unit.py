"""Ambient state, provider by provider, in this process: what is carried, what never is (the
server's environment), and that one provider failing costs only itself.

The whole path through real kernels and a real server is ``tests/test_ambient.py``.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading

import pytest

from jupyter_gpu_pause.kernel import ambient
from jupyter_gpu_pause.kernel.ambient.libraries import NumpySettings, PandasOptions, TorchRandom
from jupyter_gpu_pause.kernel.ambient.process import Environment, ImportPaths, WorkingFolder


def test_environment_carries_the_users_variables_and_never_the_servers(monkeypatch):
    # Given a process's environment as it started (the baseline reads /proc/self/environ, so
    # what a cell did before the baseline counts too), then a cell that sets, changes and
    # removes variables, among them the GPU grant's
    assert "HOME" in os.environ
    env = Environment()
    env.baseline()
    monkeypatch.setenv("MY_RUN", "17")
    monkeypatch.setenv("HOME", "/elsewhere")
    monkeypatch.delenv("PATH")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("JPY_SESSION_NAME", "other.ipynb")
    # When it is captured
    state = env.capture()
    # Then the user's changes travel, the server's do not
    assert {"MY_RUN": "17", "HOME": "/elsewhere"}.items() <= state["set"].items()
    assert "PATH" in state["unset"]
    assert not {"CUDA_VISIBLE_DEVICES", "JPY_SESSION_NAME"} & set(state["set"])
    # And a restore that meets a server-owned name refuses it and says so
    monkeypatch.delenv("MY_RUN")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    note = env.restore({"set": {"MY_RUN": "17", "CUDA_VISIBLE_DEVICES": "3"}, "unset": []})
    assert os.environ["MY_RUN"] == "17" and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert note["not_restored"] == [
        ("environment variable CUDA_VISIBLE_DEVICES", "set by the server for this kernel")
    ]


def test_import_paths_go_back_in_front_or_behind_as_they_were(monkeypatch):
    monkeypatch.setattr(sys, "path", ["/base/a", "/base/b"])
    paths = ImportPaths()
    paths.baseline()
    sys.path.insert(0, "/mine/front")
    sys.path.append("/mine/back")
    sys.path.remove("/base/b")
    state = paths.capture()
    # a new kernel with its own paths
    monkeypatch.setattr(sys, "path", ["/new/a", "/base/b"])
    paths.restore(state)
    assert sys.path == ["/mine/front", "/new/a", "/mine/back"]


def test_a_working_folder_that_is_gone_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = WorkingFolder()
    note = folder.restore(str(tmp_path / "not-here"))
    assert note["restored"] is False
    assert note["not_restored"][0][0] == "working folder"
    assert os.getcwd() == str(tmp_path)


def test_settings_are_carried_only_where_they_differ_from_the_defaults():
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    assert NumpySettings().capture() is None and PandasOptions().capture() is None
    with np.printoptions(precision=3), pd.option_context("display.max_rows", 7):
        assert NumpySettings().capture() == {"print": {"precision": 3}, "err": {}}
        assert PandasOptions().capture() == {"display.max_rows": 7}


def test_cuda_generators_resumed_on_the_cpu_are_named_and_the_cpu_draws_are_exact():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a machine with CUDA restores the CUDA generators")
    # Given a capture made on a machine with two GPUs (their generators' states are bytes)
    torch.manual_seed(11)
    state = {"cpu": torch.get_rng_state(), "cuda": [torch.zeros(16, dtype=torch.uint8)] * 2}
    want = torch.rand(3)
    # When it is restored on the CPU
    note = TorchRandom().restore(state)
    # Then the CPU generator is exact and both CUDA generators are named, with the reason
    assert torch.equal(torch.rand(3), want)
    ((name, reason),) = note["not_restored"]
    assert name == "torch CUDA random state (cuda:0, cuda:1)"
    assert "resumed on the CPU" in reason


class _Unpicklable:
    label = "broken"

    def capture(self):
        return threading.Lock()  # a lock does not pickle

    def restore(self, state):
        raise AssertionError("never captured")


class _FailsToRestore:
    label = "fragile"

    def capture(self):
        return 1

    def restore(self, state):
        raise RuntimeError("the library changed its mind")


class _Fine:
    label = "fine settings"
    value = 0

    def capture(self):
        return 42

    def restore(self, state):
        _Fine.value = state


@pytest.fixture
def three_providers(monkeypatch):
    found = [("broken", _Unpicklable()), ("fragile", _FailsToRestore()), ("fine", _Fine())]
    monkeypatch.setattr(ambient, "_providers", found)
    yield
    ambient.reset_for_tests()


def test_one_provider_failing_costs_only_itself(three_providers):
    # When a capture meets a state that does not pickle
    blob, report = ambient.capture()
    # Then that provider is named before the pause, and the others are carried
    assert report["carried"] == ["fragile", "fine"]
    assert report["not_carried"][0]["name"] == "broken"
    assert report["not_carried"][0]["reason"].startswith("not captured: ")
    # When a restore meets a provider that raises
    _Fine.value = 0
    restoring = ambient.Restoring(blob)
    restoring.early()
    out = restoring.rest()
    # Then it is named with its error, and the others are restored
    assert _Fine.value == 42
    assert out["restored"] == ["fine"]
    assert out["not_restored"] == [
        {"name": "fragile", "reason": "RuntimeError: the library changed its mind"}
    ]
    assert out["text"] == "Fine settings restored; 1 part of the kernel's settings not restored"


def test_a_state_of_a_provider_this_kernel_lacks_is_named(three_providers):
    blob = pickle.dumps({"version": ambient.VERSION, "states": {"jax": pickle.dumps({})}})
    out = ambient.Restoring(blob).rest()
    assert [x["name"] for x in out["not_restored"]] == ["jax"]
    assert "no ambient provider" in out["not_restored"][0]["reason"]


def test_an_unreadable_blob_restores_nothing_and_says_why(three_providers):
    out = ambient.Restoring(b"not a pickle").rest()
    assert out["restored"] == []
    assert out["not_restored"][0]["name"] == "ambient state"


def test_a_formatter_cell_re_run_gets_tools_as_they_are_and_data_as_copies():
    # Given a notebook namespace with a module, a class, a function and a list
    import fractions

    from jupyter_gpu_pause.kernel.ambient.ipython import _lend

    ns = {"fractions": fractions, "F": fractions.Fraction, "show": print, "seen": [1]}
    scratch: dict = {}
    # When a cell that reads them all is about to be re-run
    _lend(scratch, "seen.append(F(1, 2)); show(fractions, seen, undefined)", ns)
    # Then the tools are the notebook's own, the list a copy the re-run cannot reach through
    assert scratch["fractions"] is fractions and scratch["F"] is fractions.Fraction
    assert scratch["show"] is print
    assert scratch["seen"] == [1] and scratch["seen"] is not ns["seen"]
    assert "undefined" not in scratch
