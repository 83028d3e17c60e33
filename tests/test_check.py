"""The dry run behind the Lab's pause dialog (``POST sessions/{id}/check``): what a pause would
save and what it could not, as the kernel's own agent sees it, changing nothing: not the
variables, not the session's state, not its idle clock, not the store."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.waiting import wait_for

OPEN_FILE_AND_NUMBER = (
    "import jupyter_gpu_pause as gp\nx = open({path!r})\ny = 3\ngp.register({registered!r})"
)


@pytest.fixture
def gp_config(gp_config):
    gp_config.update(poll_interval=0.3)  # the idle monitor ticks while the tests wait
    return gp_config


@pytest.fixture
def data_file(tmp_path):
    f = tmp_path / "data.txt"
    f.write_text("hello")
    return f


async def assert_unchanged(lab, store_dir, before: dict) -> None:
    """Same state, same kernel, no event, nothing in the store, variables as they were."""
    now = await lab.session(before["id"])
    assert now["state"] == before["state"] and now["kernel_id"] == before["kernel_id"], now
    assert now["checkpoint"] is None and now["error"] is None
    assert await lab.events(before["id"]) == []
    assert not list(store_dir.glob("v1/sessions/*/*.json"))
    out = await lab.run(before["kernel_id"], "print(y, x.read(), x.closed)")
    assert out.strip() == "3 hello False"  # the file is still open, at its start


# (registered name, saved names, skipped names, words of the error; None: the pause would work)
CASES = [
    pytest.param("y", {"gp", "y"}, ["x"], None, id="open-file-skipped"),
    pytest.param("x", set(), [], ["registered variable 'x'", "cannot be saved"], id="registered"),
]


@pytest.mark.parametrize(("registered", "saved", "skipped", "error"), CASES)
async def test_check_lists_what_a_pause_would_save_and_skip(
    lab, store_dir, data_file, registered, saved, skipped, error
):
    # Given a notebook with an open file (which cannot be saved) and a number, one registered
    s = await lab.open_notebook()
    code = OPEN_FILE_AND_NUMBER.format(path=str(data_file), registered=registered)
    await lab.run(s["kernel_id"], code)
    before = await lab.session(s["id"])
    # When the Lab asks what a pause would save
    status, body = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then it answers with the objects, what cannot be saved and why, and the registered names
    assert status == 200, body
    assert {o["name"] for o in body["objects"]} == saved
    assert [x["name"] for x in body["skipped"]] == skipped
    assert body["registered"] == [registered]
    if skipped:
        assert "open file" in body["skipped"][0]["reason"]
        (y,) = [o for o in body["objects"] if o["name"] == "y"]
        assert y["bytes"] > 0 and y["required"] is True
        assert body["bytes"] >= y["bytes"] and body["error"] is None
    else:  # a registered name that cannot be saved: the pause would fail, and says why
        for w in error:
            assert w in body["error"], body["error"]
    # And nothing changed in the session, the store or the kernel
    await assert_unchanged(lab, store_dir, before)


async def test_check_is_not_user_activity(lab, store_dir, data_file):
    # Given a notebook idle for a few seconds, as the idle monitor sees it
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], OPEN_FILE_AND_NUMBER.format(path=str(data_file), registered="y"))

    async def idle_for_a_while():
        cur = await lab.session(s["id"])
        return cur if (cur["idle_seconds"] or 0) >= 2.0 else None

    before = await wait_for(idle_for_a_while)
    read_before = datetime.now(timezone.utc)
    # When the Lab runs a check, and the idle monitor makes several passes after it
    status, body = await lab.api("POST", f"sessions/{s['id']}/check")
    assert status == 200, body
    await lab.monitor_passes(passes=3)
    # Then the idle clock was not reset: the last activity is still the user's cell, and the
    # idle time grew by all the time between the two readings (each rounded to 0.1 s)
    read_after = datetime.now(timezone.utc)
    after = await lab.session(s["id"])
    assert after["last_activity"] == before["last_activity"]
    between = (read_after - read_before).total_seconds()
    assert after["idle_seconds"] >= before["idle_seconds"] + between - 0.1, (before, after)
    await assert_unchanged(lab, store_dir, before)


async def _paused(lab, s):
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    return await lab.wait_state(s["id"], states=("paused",))


async def _pausing(lab, s):
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(30)")
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202 and body["state"] == "pausing", body
    return body


async def _busy(lab, s):
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(30)")
    return await lab.session(s["id"])


# (how the session gets there, reason, words of the message, state afterwards)
REFUSED = [
    pytest.param(_paused, "wrong-state", ["is paused", "checkpoint"], "paused", id="paused"),
    pytest.param(_pausing, "wrong-state", ["is pausing", "already"], "pausing", id="pausing"),
    pytest.param(_busy, "kernel-busy", ["running a cell"], "active", id="busy"),
]


@pytest.mark.parametrize(("given", "reason", "words", "state"), REFUSED)
async def test_check_is_refused_without_an_idle_kernel(lab, given, reason, words, state):
    # Given a session whose kernel is stopped, being paused, or running a cell
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "y = 3")
    await given(lab, s)
    # When the Lab asks for a check
    code, err = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then it answers 409 with a reason and a sentence saying why
    assert code == 409, err
    assert err["reason"] == reason
    for w in words:
        assert w in err["message"], err["message"]
    # And the session is as it was
    assert (await lab.session(s["id"]))["state"] == state
    if state == "pausing":  # the refused check did not disturb the pause: it still cancels
        code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")
        assert code == 200 and body["state"] == "active", body
