"""Rebuild through the real server: what a checkpoint could not hold comes back by re-running the
cells that made it, without touching what was restored (issue #25, docs/rebuild.md).

Each test runs cells in a real kernel as a notebook does, pauses and resumes through the REST
API, and looks at what a user sees: the restore report's plan, the session's message, the
events, and the variables in the new kernel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.waiting import wait_for

# the demo's shape: a model made in one cell, a cell that makes the generator `batches` and
# trains the model with it, and a hash object nobody can pickle
DEMO = [
    "import hashlib",
    "data = list(range(100))",
    "model = {'w': 0}",
    "batches = (data[i:i + 10] for i in range(0, 100, 10))\n"
    "for b in [data]:\n"
    "    model['w'] += sum(b)",
    "h = hashlib.sha256(b'abc')",
]


async def run_cells(lab, kernel_id: str, cells: list[str], ids: list[str] | None = None) -> None:
    """Run cells one by one as JupyterLab does, each with its ``cellId`` when given."""
    for i, code in enumerate(cells):
        if ids is None:
            await lab.run(kernel_id, code)
            continue
        c = lab.client(kernel_id)
        try:
            await c.wait_for_ready(timeout=60)
            content = {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            }
            msg = c.session.msg("execute_request", content, metadata={"cellId": ids[i]})
            c.shell_channel.send(msg)
            while True:
                reply = await c.get_shell_msg(timeout=60)
                if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                    break
            assert reply["content"]["status"] == "ok", reply["content"]
        finally:
            c.stop_channels()


async def pause_resume(lab, s: dict) -> dict:
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    resumed = await lab.wait_state(s["id"])
    assert resumed["state"] in ("active", "idle"), resumed
    return resumed


async def values(lab, kernel_id: str, expr: str):
    return json.loads(await lab.run(kernel_id, f"import json; print(json.dumps({expr}))"))


async def wait_event(lab, sid: str, *types: str) -> dict:
    async def seen():
        found = [e for e in await lab.events(sid) if e["type"] in types]
        return found[-1] if found else None

    return await wait_for(seen, timeout=60, what=f"an event of {types}")


async def test_a_generator_and_a_hash_come_back_by_rerun_and_the_model_is_untouched(lab):
    # Given the demo's notebook: a model trained by the cell that also makes `batches`, and a
    # hash object; neither `batches` nor `h` can be saved
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], DEMO)
    # When it is paused and resumed
    resumed = await pause_resume(lab, s)
    # Then the restore report offers the smallest plan: `data` and `hashlib` came back, so only
    # the cell making `model` as the training cell read it, that cell, and the hash's cell
    plan = resumed["restore"]["rebuild"]
    assert sorted(plan["names"]) == ["batches", "h"]
    assert [c["execution_count"] for c in plan["cells"]] == [3, 4, 5]
    assert plan["seconds"] is not None and plan["seconds"] < 5
    assert "re-run cells [3], [4], [5]" in plan["text"]
    assert "Rebuild `" in resumed["message"]
    event = await lab.event(s["id"], "resumed")
    assert event["detail"]["rebuild"]["names"] == plan["names"]
    kid = resumed["kernel_id"]
    assert await values(lab, kid, "[n in globals() for n in ('batches', 'h', 'model')]") == [
        False,
        False,
        True,
    ]
    # When the user asks for the rebuild
    code, body = await lab.api("POST", f"sessions/{s['id']}/rebuild", {})
    assert code == 202, body
    rebuilt = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    # Then both names are back and usable, and the restored model was not trained again
    assert rebuilt["type"] == "rebuilt", rebuilt
    assert sorted(rebuilt["detail"]["names"]) == ["batches", "h"]
    assert await values(lab, kid, "[len(list(batches)), h.hexdigest()[:8], model['w']]") == [
        10,
        "ba7816bf",
        4950,
    ]
    # And the session no longer offers a rebuild, and says what came back
    after = await lab.session(s["id"])
    assert after["restore"]["rebuild"] is None
    assert "Rebuilt batches, h by re-running cells [3], [4], [5]" in after["message"]
    # And asking again is refused with its reason
    code, body = await lab.api("POST", f"sessions/{s['id']}/rebuild", {})
    assert (code, body["reason"]) == (409, "nothing-to-rebuild")


async def test_a_failing_cell_stops_the_rebuild_and_changes_nothing(lab):
    # Given a lost generator made from a file that is gone by the time of the rebuild
    s = await lab.open_notebook()
    await run_cells(
        lab,
        s["kernel_id"],
        [
            "open('rows.txt', 'w').write('1\\n2\\n')",
            "rows = (line for line in open('rows.txt'))\nkept = 1",
        ],
    )
    resumed = await pause_resume(lab, s)
    assert resumed["restore"]["rebuild"]["names"] == ["rows"]
    kid = resumed["kernel_id"]
    await lab.run(kid, "import os; os.remove('rows.txt'); kept = 2")
    # When the rebuild runs
    assert (await lab.api("POST", f"sessions/{s['id']}/rebuild", {}))[0] == 202
    failed = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    # Then it stops at the failing cell and says which, with the error
    assert failed["type"] == "rebuild_failed"
    assert failed["detail"]["error_reason"] == "cell-failed"
    assert failed["detail"]["failed"]["execution_count"] == 2
    assert "FileNotFoundError" in failed["detail"]["failed"]["error"]
    session = await lab.session(s["id"])
    assert "Rebuild stopped at cell [2]" in session["message"]
    # And nothing was written back: the later value of `kept` stands, `rows` is still missing
    assert await values(lab, kid, "[kept, 'rows' in globals()]") == [2, False]
    assert session["restore"]["rebuild"]["names"] == ["rows"]


async def test_marked_cells_are_never_rerun(lab, tmp_path):
    # Given a notebook whose generator cells are marked: one by a comment, one by a cell tag
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "id": "tagged",
                "metadata": {"tags": ["gp-no-rerun"]},
                "source": "g1 = (i for i in range(3))",
                "outputs": [],
                "execution_count": None,
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    root = lab.app.root_dir
    with open(f"{root}/tags.ipynb", "w") as f:
        json.dump(nb, f)
    s = await lab.open_notebook("tags.ipynb")
    await run_cells(
        lab,
        s["kernel_id"],
        ["g1 = (i for i in range(3))", "# gp: no-rerun\ng2 = (i for i in range(3))"],
        ids=["tagged", "other"],
    )
    # When it is paused and resumed
    resumed = await pause_resume(lab, s)
    # Then neither generator has a plan, and the report says why
    plan = resumed["restore"]["rebuild"]
    assert plan["names"] == []
    reasons = {u["name"]: u["reason"] for u in plan["unbuildable"]}
    assert set(reasons) == {"g1", "g2"}
    assert all("no-rerun" in r for r in reasons.values()), reasons
    code, body = await lab.api("POST", f"sessions/{s['id']}/rebuild", {})
    assert (code, body["reason"]) == (409, "nothing-to-rebuild")


async def test_rebuild_answers_bad_input_with_a_clear_error(lab):
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], ["g = (i for i in range(3))"])
    resumed = await pause_resume(lab, s)
    assert resumed["restore"]["rebuild"]["names"] == ["g"]
    for body, reason in (
        ({"names": "g"}, "bad-field"),
        ({"names": ["1x"]}, "bad-names"),
        ({"names": ["other"]}, "bad-names"),
        ({"confirm": "yes"}, "bad-field"),
        ({"nope": 1}, "unknown-field"),
    ):
        code, answer = await lab.api("POST", f"sessions/{s['id']}/rebuild", body)
        assert (code, answer["reason"]) == (400, reason), (body, answer)
    # and none of them changed anything: the plan is still offered
    assert (await lab.session(s["id"]))["restore"]["rebuild"]["names"] == ["g"]
    assert (await lab.api("POST", "sessions/nope/rebuild", {}))[0] == 404


@pytest.mark.gp_config(rebuild="auto", rebuild_auto_seconds=5)
async def test_auto_reruns_a_quick_plan_without_asking(lab):
    # Given a server set to rebuild quick plans by itself
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], ["import hashlib", "h = hashlib.md5(b'x')"])
    # When the notebook is paused and resumed
    resumed = await pause_resume(lab, s)
    # Then the rebuild runs at once, recorded as automatic, and `h` is back
    event = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    assert (event["type"], event["reason"], event["detail"]["names"]) == ("rebuilt", "auto", ["h"])
    assert await values(lab, resumed["kernel_id"], "h.hexdigest()[:6]") == "9dd4e4"


@pytest.mark.gp_config(rebuild="never")
async def test_never_offers_no_plan_and_refuses_a_rebuild(lab):
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], ["g = (i for i in range(3))"])
    resumed = await pause_resume(lab, s)
    assert resumed["restore"]["rebuild"] is None
    code, body = await lab.api("POST", f"sessions/{s['id']}/rebuild", {})
    assert (code, body["reason"]) == (409, "rebuild-off")


async def test_gp_rebuild_in_a_cell_tells_the_session(lab):
    # Given a resumed notebook with a lost generator
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], ["g = (i * 2 for i in range(3))"])
    resumed = await pause_resume(lab, s)
    kid = resumed["kernel_id"]
    # When the user calls gp.rebuild() in a cell
    out = await lab.run(
        kid, "import jupyter_gpu_pause as gp; print(repr(gp.rebuild())); print(list(g))"
    )
    # Then it says what it did, `g` works, and the session and its events know it
    assert out.startswith("Rebuilt g in "), out
    assert out.strip().endswith("[0, 2, 4]")
    event = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    assert (event["type"], event["reason"]) == ("rebuilt", "kernel")
    assert (await lab.session(s["id"]))["restore"]["rebuild"] is None


def demo_cells() -> list[str]:
    """The demo notebook's cells up to its pause (which the test asks for through REST)."""
    root = Path(__file__).resolve().parent.parent
    nb = json.loads((root / "demo" / "pause_and_resume.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return code[: next(i for i, c in enumerate(code) if "%gpu_pause pause" in c)]


async def test_the_demo_notebooks_batches_come_back_and_its_model_is_not_trained_again(lab):
    # Given the demo notebook run up to its pause: the cell that makes the generator `batches`
    # also trains the model
    s = await lab.open_notebook("demo.ipynb")
    await run_cells(lab, s["kernel_id"], demo_cells())
    state = "[round(sum(p.sum().item() for p in model.parameters()), 6), len(history), history[-1]]"
    before = await values(lab, s["kernel_id"], state)
    # When it is paused and resumed
    resumed = await pause_resume(lab, s)
    # Then the resume offers `batches`, made by re-running the training cell alone
    plan = resumed["restore"]["rebuild"]
    assert plan["names"] == ["batches"]
    assert [c["execution_count"] for c in plan["cells"]] == [2]
    assert plan["cells"][0]["code"] == "def train(steps):"
    # When the user rebuilds it
    assert (await lab.api("POST", f"sessions/{s['id']}/rebuild", {}))[0] == 202
    event = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    # Then `batches` is back from its start, and the restored model, optimizer and history are
    # exactly as they were paused: the re-run trained copies, not them
    assert event["type"] == "rebuilt", event
    kid = resumed["kernel_id"]
    assert await values(lab, kid, "next(batches)") == 0
    assert await values(lab, kid, state) == before


async def test_a_plan_that_would_share_a_restored_object_asks_first(lab):
    # Given a lost generator over a restored object that cannot be copied
    s = await lab.open_notebook()
    await run_cells(
        lab,
        s["kernel_id"],
        [
            "class NoCopy:\n"
            "    def __deepcopy__(self, memo):\n"
            "        raise TypeError('no copies')\n"
            "src = NoCopy()",
            "g = (src for _ in range(2))",
        ],
    )
    resumed = await pause_resume(lab, s)
    kid = resumed["kernel_id"]
    # When the rebuild is asked for without confirming
    assert (await lab.api("POST", f"sessions/{s['id']}/rebuild", {}))[0] == 202
    asked = await wait_event(lab, s["id"], "rebuilt", "rebuild_failed")
    # Then nothing ran: it names what the re-run would share, and why
    assert asked["detail"]["error_reason"] == "needs-confirm"
    assert [x["name"] for x in asked["detail"]["shared"]] == ["src"]
    assert "no copies" in asked["detail"]["shared"][0]["reason"]
    assert "Confirm to re-run anyway" in (await lab.session(s["id"]))["message"]
    assert await values(lab, kid, "'g' in globals()") is False
    # When the user confirms
    assert (await lab.api("POST", f"sessions/{s['id']}/rebuild", {"confirm": True}))[0] == 202

    async def rebuilt():
        return await lab.events(s["id"], "rebuilt")

    await wait_for(rebuilt, timeout=60, what="the confirmed rebuild")
    # Then `g` is back, yielding the restored object itself
    assert await values(lab, kid, "next(g) is src") is True


async def test_a_damaged_cell_log_costs_the_rebuild_only(lab, store_dir):
    # Given a paused notebook whose checkpoint's cell log rotted in the store
    s = await lab.open_notebook()
    await run_cells(lab, s["kernel_id"], ["x = 7", "g = (i for i in range(3))"])
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    cid = paused["checkpoint"]["id"]
    manifest = json.loads((store_dir / "v1" / "sessions" / s["id"] / f"{cid}.json").read_text())
    # the log is its own blob, listed and signed with the rest
    log = manifest["cells"]["blob"]
    assert manifest["blobs"][log]["kind"] == "cells"
    blob = store_dir / "v1" / "blobs" / log[:2] / log
    assert json.loads(blob.read_bytes())["cells"]
    blob.write_bytes(b" " * blob.stat().st_size)  # bit rot: the size holds, the hash does not
    # When it is resumed
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    resumed = await lab.wait_state(s["id"])
    # Then every object is restored, and the report says why `g` cannot be rebuilt
    assert resumed["state"] in ("active", "idle"), resumed
    assert resumed["restore"]["restored"] == ["x"]
    plan = resumed["restore"]["rebuild"]
    assert plan["names"] == [] and "cell log failed its check" in plan["problem"]
    assert plan["unbuildable"] == [{"name": "g", "reason": plan["problem"]}]
