"""Coming back to a paused notebook: JupyterLab starts a new kernel when the notebook is opened
again. While that kernel has run nothing, it is no session of its own (one row per notebook)
and a resume restores into it without being told; once code ran in it, a resume never
overwrites it unasked (409 ``kernel-exists``), even when the code ran as the resume began."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.test_capacity import QUOTA_OF_ONE, waiting
from tests.waiting import wait_for

STATE = "x = 41; name = 'saved'"
READBACK = "print(x + 1, name)"
READBACK_OK = "42 saved"


@pytest.fixture
def jp_server_config(jp_server_config, request):
    marker = request.node.get_closest_marker("quota")
    if marker:
        jp_server_config["QuotaCapacity"] = dict(marker.kwargs)
    return jp_server_config


async def paused(lab, path: str) -> dict:
    s = await lab.open_notebook(path)
    await lab.run(s["kernel_id"], STATE)
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    back = await lab.wait_state(s["id"])
    assert back["state"] == "paused", back
    return back


async def rows(lab, path: str) -> list[dict]:
    code, body = await lab.api("GET", "sessions", params={"path": path})
    assert code == 200, body
    return body["sessions"]


async def test_resume_restores_into_the_kernel_lab_opened_without_asking(lab):
    # Given a paused notebook, opened again: Jupyter starts a new kernel for it
    s = await paused(lab, "back.ipynb")
    kid = await lab.open_kernel("back.ipynb")
    # Then the notebook still has one row, the paused one, saying the kernel waits for it
    (row,) = await rows(lab, "back.ipynb")
    assert row["id"] == s["id"] and row["state"] == "paused"
    assert row["open_kernel"] == kid
    assert "new kernel that has run nothing" in row["message"]
    # When the user resumes without naming a kernel
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    # Then it is accepted and the saved variables come back in that very kernel
    assert code == 202, body
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle") and back["kernel_id"] == kid, back
    assert (await lab.run(kid, READBACK)).strip() == READBACK_OK
    # And the notebook is one session, no other kernel was started for it
    assert [r["id"] for r in await rows(lab, "back.ipynb")] == [s["id"]]
    assert lab.app.kernel_manager.list_kernel_ids() == [kid]
    event = await lab.event(s["id"], "resumed")
    assert event["detail"]["kernel_id"] == kid


async def test_lab_opening_the_notebook_under_a_temporary_path_never_makes_a_second_row(lab):
    # Given a paused notebook in a folder
    (Path(lab.app.root_dir) / "exp").mkdir()
    s = await paused(lab, "exp/back.ipynb")
    # When JupyterLab opens it: a session under a bare UUID in its folder, then renamed
    r = await lab.fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps(
            {
                "path": f"exp/{uuid.uuid4()}",
                "type": "notebook",
                "name": "back.ipynb",
                "kernel": {"name": "python3"},
            }
        ),
    )
    js = json.loads(r.body)
    kid = js["kernel"]["id"]
    # Then the kernel under the temporary path is no row of its own
    assert [x["id"] for x in await rows(lab, js["path"])] == []
    assert [x["id"] for x in await rows(lab, "exp/back.ipynb")] == [s["id"]]
    # When it is renamed to the notebook's path
    await lab.fetch(
        "api",
        "sessions",
        js["id"],
        method="PATCH",
        body=json.dumps({"path": "exp/back.ipynb"}),
    )
    # Then the paused row is still the only one, offering that kernel
    (row,) = await rows(lab, "exp/back.ipynb")
    assert row["id"] == s["id"] and row["open_kernel"] == kid
    assert [x["id"] for x in (await lab.api("GET", "sessions"))[1]["sessions"]] == [s["id"]]


@pytest.mark.parametrize("listed", [False, True], ids=["at-once", "after-the-panel-listed-it"])
async def test_a_kernel_that_ran_a_cell_is_a_session_and_resume_asks(lab, listed):
    # Given a paused notebook, opened again with a new kernel
    s = await paused(lab, "used.ipynb")
    kid = await lab.open_kernel("used.ipynb")
    if listed:  # (the panel's poll: the kernel waits for the resume)
        assert [r["id"] for r in await rows(lab, "used.ipynb")] == [s["id"]]
    # When the user runs a cell in it, at once or later
    await lab.run(kid, "scratch = 'typed after the pause'")
    # Then that kernel is a session of its own: the notebook has two rows

    async def two_rows():
        return {r["kernel_id"]: r for r in await rows(lab, "used.ipynb")}.get(kid)

    await wait_for(two_rows, what="the used kernel's own row")
    # When the user resumes without naming a kernel
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    # Then it is refused, naming the kernel whose variables it would overwrite
    assert code == 409 and err["reason"] == "kernel-exists", err
    assert kid in err["message"] and "into_kernel" in err["message"]
    assert (await lab.run(kid, "print(scratch)")).strip() == "typed after the pause"
    # And the paused session is still paused, no longer offering that kernel
    listed = {r["kernel_id"]: r for r in await rows(lab, "used.ipynb")}
    assert listed[None]["id"] == s["id"] and listed[None]["state"] == "paused"
    assert listed[None]["open_kernel"] is None
    assert listed[kid]["state"] in ("active", "idle")


async def test_the_kernel_itself_says_whether_a_person_ran_code_in_it(lab):
    # Given a new kernel (what the server asks before a resume takes it, and the restore again)
    kid = await lab.open_kernel("asked.ipynb")
    lc = lab.app.web_app.settings["gpu_pause"]

    async def cells_run() -> int:
        return (await lc.bridge.run_agent(kid, "usage", {}))["cells_run"]

    # Then it has run nothing, and the question itself (a silent request) does not count
    assert await cells_run() == 0
    assert await cells_run() == 0
    assert await lc.ran_nothing(kid)
    # When a person runs a cell, even one that fails
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        await lab.run(kid, "1 / 0")
    # Then it has
    assert await cells_run() == 1
    assert not await lc.ran_nothing(kid)


@pytest.mark.quota(max_sessions=1)
@pytest.mark.gp_config(**QUOTA_OF_ONE)
async def test_a_cell_run_while_the_resume_waits_is_never_overwritten(lab):
    # Given a paused GPU notebook opened again with a new kernel, and the machine's one GPU
    # session taken by another notebook
    s = await paused(lab, "race.ipynb")
    kid = await lab.open_kernel("race.ipynb")
    other = await lab.open_notebook("other.ipynb")
    # When the user resumes: the new kernel is taken, but the resume waits for the GPU like any
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    w = await waiting(lab, s)
    assert w["waiting"]["reason"] == "quota-sessions"
    # And meanwhile the user runs a cell in that kernel, then the GPU becomes free
    await lab.run(kid, "x = 'typed while waiting'")
    await lab.fetch("api", "kernels", other["kernel_id"], method="DELETE")
    # Then the restore refuses to overwrite it: the checkpoint and the kernel are untouched
    failed = await lab.wait_state(s["id"])
    assert failed["state"] == "failed", failed
    assert failed["error"]["reason"] == "kernel-used" and failed["error"]["state_intact"]
    assert "Resume again" in failed["error"]["message"]
    assert (await lab.run(kid, "print(x)")).strip() == "typed while waiting"
    # And resuming again asks first (409), then restores into it when told to
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 409 and err["reason"] == "kernel-exists", err
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume", {"into_kernel": kid})
    assert code == 202, err
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle") and back["kernel_id"] == kid, back
    assert (await lab.run(kid, READBACK)).strip() == READBACK_OK
    # And that kernel keeps its own execution count and history (cells ran in it), and says so
    (kept,) = [x for x in back["restore"]["ambient"]["not_restored"] if x["name"] == "history"]
    assert "ran cells of its own" in kept["reason"], kept
