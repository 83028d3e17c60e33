"""No state without a way out: a fault at each step of a pause or a resume ends in a defined
state with an event, the kernel's variables intact whenever the commit point was not reached,
and the next attempt works once the fault is gone.

Faults are real: a stopped kernel process, a kernel whose agent was replaced by user code (as a
hostile or broken package could do), a folder in the store turned into a file, a kernelspec
that no longer starts, and Jupyter parts (kernel manager, session manager) or a capacity backend
configured as failing test doubles from ``tests/fakes.py``."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from jupyter_gpu_pause.kernel.agent import PROTOCOL
from jupyter_gpu_pause.version import __version__
from tests.fakes import FailingCapacity, FlakySessionManager, StubbornKernelManager
from tests.test_faults import READBACK, READBACK_OK, STATE, manifests
from tests.waiting import wait_for

# A cell that replaces the agent in this kernel by one that publishes REPLY (or nothing).
LIAR = r"""
import jupyter_gpu_pause.kernel.agent as _agent
from IPython.display import publish_display_data as _publish
_reply = {reply}
def _lie():
    if _reply is not None:
        _publish({{_agent.MIME_RESULT: _reply}})
_agent.call_parent = _lie
"""
HONEST = "import importlib, jupyter_gpu_pause.kernel.agent as _agent; importlib.reload(_agent)"


def _minimal_capture(blob: str) -> dict:
    """A well-formed capture report naming one (absent) blob."""
    return {
        "blobs": {blob: {"bytes": 10, "kind": "pickle"}},
        "storages": [],
        "arrays": [],
        "pickle": {"blob": blob, "bytes": 10},
        "objects": [],
        "skipped": [],
        "registered": [],
        "new_bytes": 0,
        "kernel": {"python": "3.11"},
        "origin": {"host": "elsewhere", "gpu": None},
    }


def _ok(result) -> dict:
    """A well-formed reply claiming the server's own version (one of another version is set
    aside: the server brings its own agent, ``test_an_agent_of_another_version_is_set_aside``)."""
    return {"protocol": PROTOCOL, "version": __version__, "ok": True, "result": result}


async def pause(lab, s: dict) -> dict:
    """Ask for a pause and return the session once the pause has ended, however it ended."""
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    return await lab.wait_state(s["id"])


# Replies of an agent of another protocol: without bring_agent, the pause says so; with it (the
# default) the server brings its own agent instead
OTHER_PROTOCOL = [
    ("no-protocol", {"ok": True, "result": {}}, "agent-version", ["protocol"]),
    ("other-protocol", {**_ok({}), "protocol": 99}, "agent-version", ["protocol 99"]),
]
WITHOUT_BRINGING = pytest.mark.gp_config(bring_agent=False)
# (id, the agent's reply, error reason, words of the message)
LIES = [
    ("silent", None, "agent-silent", ["did not answer"]),
    *[pytest.param(*case, marks=WITHOUT_BRINGING) for case in OTHER_PROTOCOL],
    (
        "no-result",
        {"protocol": PROTOCOL, "version": __version__, "ok": True},
        "bad-agent-reply",
        ["without a result"],
    ),
    (
        "failed-silently",
        {"protocol": PROTOCOL, "version": __version__, "ok": False},
        "bad-agent-reply",
        ["without saying why"],
    ),
    (
        "path-as-hash",
        _ok({**_minimal_capture("0" * 32), "blobs": {"../../etc/passwd": {"bytes": 1}}}),
        "bad-agent-reply",
        ["not a blob hash", "cannot trust"],
    ),
    (
        "offset-outside-stream",
        _ok(
            {
                **_minimal_capture("0" * 32),
                "objects": [
                    {"name": "x", "kind": "pickle", "bytes": 10, "offset": 5, "length": 50}
                ],
            }
        ),
        "bad-agent-reply",
        ["outside the pickle stream"],
    ),
    ("blob-not-written", _ok(_minimal_capture("0" * 32)), "integrity", ["missing from the store"]),
]


def _case(x):
    """A LIES entry as a parameter: its reply, reason and words, with its marks and its id."""
    if hasattr(x, "values"):  # a pytest.param
        return pytest.param(*x.values[1:], marks=x.marks, id=x.values[0])
    return pytest.param(*x[1:], id=x[0])


@pytest.mark.parametrize(("reply", "reason", "words"), [_case(x) for x in LIES])
async def test_a_lying_agent_never_gets_a_checkpoint_signed(lab, store_dir, reply, reason, words):
    # Given a notebook with state whose agent was replaced by code that answers `reply`
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.run(s["kernel_id"], LIAR.format(reply=repr(reply)))
    # When the user pauses
    after = await pause(lab, s)
    # Then the pause fails saying what was wrong, and nothing was signed
    assert after["state"] == "active", after
    assert after["error"]["reason"] == reason and after["error"]["state_intact"] is True
    for w in words:
        assert w in after["error"]["message"], after["error"]["message"]
    assert manifests(store_dir, s["id"]) == []
    event = await lab.event(s["id"], "pause_failed")
    assert event["detail"]["error_reason"] == reason
    # And the kernel still holds every variable
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
    # And once the agent is itself again, the next pause works
    await lab.run(s["kernel_id"], HONEST)
    assert (await pause(lab, s))["state"] == "paused"


@pytest.mark.parametrize("reply", [pytest.param(case[1], id=case[0]) for case in OTHER_PROTOCOL])
async def test_an_agent_of_another_version_is_set_aside(lab, store_dir, reply):
    # Given a notebook with state whose agent was replaced by one of another protocol
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.run(s["kernel_id"], LIAR.format(reply=repr(reply)))
    # When the user pauses
    after = await pause(lab, s)
    # Then the server brought its own agent, which wrote and signed the checkpoint
    assert after["state"] == "paused", after["error"]
    assert len(manifests(store_dir, s["id"])) == 1
    # And the resume brings every variable back
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK


@WITHOUT_BRINGING
async def test_a_kernel_with_an_older_agent_is_told_to_upgrade(lab, store_dir):
    # Given a kernel whose environment has an older agent (no `call_parent`)
    s = await lab.open_notebook()
    await lab.run(
        s["kernel_id"],
        STATE + "\nimport jupyter_gpu_pause.kernel.agent as _a\ndel _a.call_parent",
    )
    # When the user pauses
    after = await pause(lab, s)
    # Then the pause says the versions differ and what to do, and changes nothing
    assert after["state"] == "active" and after["error"]["reason"] == "agent-version", after
    assert "older jupyter_gpu_pause" in after["error"]["message"]
    assert "install the server's version" in after["error"]["message"]
    assert manifests(store_dir, s["id"]) == []
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK


@pytest.mark.gp_config(kernel_answer_timeout=2)
async def test_a_stopped_kernel_process_ends_the_pause_by_itself(lab, store_dir):
    # Given a notebook with state whose kernel process is stopped (SIGSTOP: it shows idle)
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    kernel = lab.app.kernel_manager.get_kernel(s["kernel_id"])

    # the server has the kernel's idle status (it follows the cell's reply by a moment: a
    # process stopped before it would stay busy, and a pause of a busy kernel waits for its
    # cell, which is another test's case)
    async def shown_idle() -> bool:
        return kernel.execution_state == "idle"

    await wait_for(shown_idle, what="the kernel shown idle")
    pid = kernel.provisioner.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # When the user pauses
        after = await pause(lab, s)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Then the pause gives up by itself, touching nothing, and says the kernel is stuck
    assert after["state"] == "active" and after["error"]["reason"] == "kernel-unresponsive"
    assert "did not answer for 2 s" in after["error"]["message"]
    assert manifests(store_dir, s["id"]) == []
    # And the kernel, running again, has all its variables, and pauses
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
    assert (await pause(lab, s))["state"] == "paused"


async def test_the_commit_failing_leaves_the_kernel_untouched(lab, store_dir):
    # Given a notebook whose folder in the store is blocked by a file (blobs can be written,
    # the manifest, the commit point, cannot)
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    blocker = store_dir / "v1" / "sessions" / s["id"]
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")
    # When the user pauses
    after = await pause(lab, s)
    # Then the pause fails at the commit, and the kernel keeps everything
    assert after["state"] == "active" and after["error"]["reason"] == "store", after
    assert "Not a directory" in after["error"]["message"]
    assert any((store_dir / "v1" / "blobs").rglob("*")), "the blobs had been written"
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
    # And once the folder is free, the pause works
    blocker.unlink()
    assert (await pause(lab, s))["state"] == "paused"


async def test_stray_files_in_a_session_folder_are_not_checkpoints(lab, store_dir):
    # Given a session folder in the store holding files that are not checkpoints
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    folder = store_dir / "v1" / "sessions" / s["id"]
    folder.mkdir(parents=True)
    (folder / "notes.json").write_text("{}")
    (folder / "20261202T101500Z-1a2b3c4d.json.bak").write_text("{}")
    (folder / "20261202T101500Z-00000000.json").mkdir()
    # When the user pauses and resumes
    paused = await pause(lab, s)
    assert paused["state"] == "paused", paused
    code, body = await lab.api("GET", f"sessions/{s['id']}/checkpoints")
    assert [c["id"] for c in body["checkpoints"]] == [paused["checkpoint"]["id"]]
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    # Then both work, and the stray files were neither used nor touched
    assert back["state"] in ("active", "idle"), back
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK
    assert (folder / "notes.json").read_text() == "{}"


@pytest.fixture
def jupyter_parts():
    return {}


@pytest.fixture
def jp_server_config(jp_server_config, jupyter_parts):
    jp_server_config["ServerApp"].update(jupyter_parts)
    StubbornKernelManager.refuse = set()
    FlakySessionManager.broken = False
    FailingCapacity.down = True
    return jp_server_config


@pytest.mark.parametrize(
    "jupyter_parts", [{"kernel_manager_class": "tests.fakes.StubbornKernelManager"}]
)
async def test_a_kernel_that_will_not_stop_after_the_commit(lab, store_dir, jupyter_parts):
    # Given a notebook whose kernel will refuse to shut down
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    StubbornKernelManager.refuse.add(s["kernel_id"])
    # When the user pauses
    after = await pause(lab, s)
    # Then the checkpoint is kept and the session says the kernel could not be stopped
    assert after["state"] == "failed" and after["error"]["reason"] == "shutdown", after
    assert after["error"]["state_intact"] is True
    (ck,) = manifests(store_dir, s["id"])
    assert after["checkpoint"]["id"] == ck and ck in after["error"]["message"]
    assert lab.kernel_alive(s["kernel_id"])
    event = await lab.event(s["id"], "pause_failed")
    assert event["detail"]["error_reason"] == "shutdown"
    # And there is a way out: once the kernel is shut down, the session resumes
    StubbornKernelManager.refuse.clear()
    await lab.app.kernel_manager.shutdown_kernel(s["kernel_id"])
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK


async def _paused(lab, store_dir, path="nb.ipynb", kernel_name="python3") -> dict:
    s = await lab.open_notebook(path, kernel_name=kernel_name)
    await lab.run(s["kernel_id"], STATE)
    paused = await pause(lab, s)
    assert paused["state"] == "paused", paused
    return paused


async def assert_resume_fails_then_works(lab, s: dict, reason: str, words, repair) -> None:
    """Resume fails with ``reason``, leaving no kernel and the checkpoint; after ``repair``,
    it works and brings the state back."""
    kernels_before = set(lab.app.kernel_manager.list_kernel_ids())
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    failed = await lab.wait_state(s["id"])
    assert failed["state"] == "failed", failed
    assert failed["error"]["reason"] == reason and failed["error"]["state_intact"] is True
    for w in words:
        assert w in failed["error"]["message"], failed["error"]["message"]
    assert failed["checkpoint"]["id"] == s["checkpoint"]["id"]
    assert set(lab.app.kernel_manager.list_kernel_ids()) == kernels_before
    event = await lab.event(s["id"], "resume_failed")
    assert event["detail"]["error_reason"] == reason
    repair()
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK


@pytest.mark.gp_config(
    capacity_provider_class="tests.fakes.FailingCapacity", gpu_kernelspecs=["python3*"]
)
async def test_resume_when_the_capacity_backend_fails(lab, store_dir):
    s = await _paused(lab, store_dir)

    def repair():
        FailingCapacity.down = False

    await assert_resume_fails_then_works(
        lab, s, "capacity", ["capacity provider 'failing' failed", "refused"], repair
    )


async def test_resume_when_the_kernelspec_no_longer_starts(lab, store_dir, jp_data_dir):
    # Given a notebook paused from a kernelspec that is then broken (its program is gone)
    spec = jp_data_dir / "kernels" / "py-local"
    spec.mkdir(parents=True, exist_ok=True)
    good = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (local)",
        "language": "python",
    }
    (spec / "kernel.json").write_text(json.dumps(good))
    s = await _paused(lab, store_dir, kernel_name="py-local")
    broken = {**good, "argv": ["/nonexistent/python", "-f", "{connection_file}"]}
    (spec / "kernel.json").write_text(json.dumps(broken))

    def repair():
        (spec / "kernel.json").write_text(json.dumps(good))

    await assert_resume_fails_then_works(
        lab, s, "kernel-start", ["'py-local' could not be started", "/nonexistent/python"], repair
    )


@pytest.fixture
def startup_dir(tmp_path, monkeypatch):
    """The IPython startup folder of kernels started from now on (a user's own files)."""
    ipython = tmp_path / "ipython"
    folder = ipython / "profile_default" / "startup"
    folder.mkdir(parents=True)
    monkeypatch.setenv("IPYTHONDIR", str(ipython))
    return folder


@pytest.mark.parametrize(
    ("startup", "reason", "words"),
    [
        (
            LIAR.format(reply=repr(_ok({"restored": "everything"}))),
            "bad-agent-reply",
            ["restore report"],
        ),
        (
            "import jupyter_gpu_pause.kernel.agent as _a, os\n_a.call_parent = lambda: os._exit(1)",
            "kernel-died",
            ["died"],
        ),
    ],
    ids=["bad-report", "kernel-dies"],
)
async def test_resume_when_the_new_kernel_misbehaves(
    lab, store_dir, startup_dir, startup, reason, words
):
    # Given a paused notebook, and a startup file that breaks the agent of new kernels
    s = await _paused(lab, store_dir)
    (startup_dir / "00-break.py").write_text(startup)

    def repair():
        (startup_dir / "00-break.py").unlink()

    await assert_resume_fails_then_works(lab, s, reason, words, repair)


@pytest.mark.parametrize(
    "jupyter_parts", [{"session_manager_class": "tests.fakes.FlakySessionManager"}]
)
async def test_resume_when_the_notebook_cannot_be_attached(lab, store_dir, jupyter_parts):
    s = await _paused(lab, store_dir)
    FlakySessionManager.broken = True

    def repair():
        FlakySessionManager.broken = False

    await assert_resume_fails_then_works(
        lab, s, "attach", ["could not be attached", "disk is full"], repair
    )
