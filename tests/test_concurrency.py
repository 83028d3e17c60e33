"""Operations that meet: a pause asked twice, a busy kernel, cancel, a resume asked twice."""

from __future__ import annotations

import asyncio
import time

from jupyter_gpu_pause.kernel.agent import MIME_PROGRESS
from jupyter_gpu_pause.store import new_checkpoint_id
from tests.test_faults import READBACK, READBACK_OK, STATE, manifests
from tests.waiting import wait_for

# An object whose pickling hangs (a lock never released, a network call that never answers):
# the agent's capture is stuck inside it until someone interrupts the kernel.
HANGS_WHEN_SAVED = """
import pathlib, threading
class Stuck:
    def __reduce__(self):
        pathlib.Path({marker!r}).touch()
        threading.Event().wait()  # never set
stuck = Stuck()
"""


async def test_manual_pause_of_a_busy_kernel_waits_for_the_cell(lab, store_dir):
    # Given a kernel running a long cell
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(3); finished = True")
    # When the user pauses, and asks again while the pause waits
    code, first = await lab.api("POST", f"sessions/{s['id']}/pause")
    code2, second = await lab.api("POST", f"sessions/{s['id']}/pause")
    # Then both answers show one pause waiting for the cell, which the kernel finishes
    assert (code, code2) == (202, 202)
    assert first["state"] == second["state"] == "pausing"
    assert "running cell" in first["message"]
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused"
    assert len(manifests(store_dir, s["id"])) == 1
    assert len(await lab.events(s["id"], "paused")) == 1
    # And a pause of the paused session is a no-op
    code, again = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202 and again["state"] == "paused"
    assert again["checkpoint"]["id"] == paused["checkpoint"]["id"]
    # And the cell's work is in the checkpoint
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    assert (await lab.run(back["kernel_id"], "print(finished)")).strip() == "True"


async def test_cancel_a_pause_that_waits_for_a_cell(lab, store_dir):
    # Given a pause waiting for a long cell
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.send_cell(s["kernel_id"], "import time; time.sleep(2); note = 'still mine'")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    # When the user cancels it
    code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")
    # Then the session is active again, with no pause under way (no progress)
    assert code == 200 and body["state"] in ("active", "idle"), body
    assert "cancelled" in body["message"] and body["progress"] is None, body
    # And once the cell has ended (the next cell waits for it), the kernel is untouched and
    # still the session's, no pause is under way (no progress), and nothing was written
    assert (await lab.run(s["kernel_id"], "print(note)")).strip() == "still mine"
    after = await lab.session(s["id"])
    assert after["state"] in ("active", "idle") and after["kernel_id"] == s["kernel_id"]
    assert after["progress"] is None, after
    assert manifests(store_dir, s["id"]) == []
    assert [e["type"] for e in await lab.events(s["id"])] == ["cancelled"]
    # And cancel with nothing to cancel is refused
    code, err = await lab.api("POST", f"sessions/{s['id']}/cancel")
    assert code == 409 and "nothing to cancel" in err["message"]


async def test_cancel_frees_a_kernel_stuck_inside_the_capture(lab, store_dir, tmp_path):
    # Given a notebook with state and an object whose saving hangs
    s = await lab.open_notebook()
    marker = tmp_path / "capture-started"
    await lab.run(s["kernel_id"], STATE + HANGS_WHEN_SAVED.format(marker=str(marker)))
    # And a pause stuck inside the capture
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body

    async def capturing():
        return marker.exists()

    await wait_for(capturing, what="the capture reaching the hanging object")

    # When the user cancels
    asked = time.monotonic()
    code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")

    # Then the answer says active and the kernel runs the next cell within seconds,
    # with every variable as it was and nothing written
    assert code == 200 and body["state"] in ("active", "idle"), body
    assert (await lab.run(s["kernel_id"], READBACK, timeout=10)).strip() == READBACK_OK
    assert time.monotonic() - asked < 10
    assert (await lab.session(s["id"]))["kernel_id"] == s["kernel_id"]
    assert manifests(store_dir, s["id"]) == []
    assert [e["type"] for e in await lab.events(s["id"])] == ["cancelled"]


async def test_second_resume_joins_the_first(lab):
    # Given a paused session
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    await lab.wait_state(s["id"])
    # When resume is asked twice at once
    (c1, r1), (c2, r2) = await asyncio.gather(
        lab.api("POST", f"sessions/{s['id']}/resume"),
        lab.api("POST", f"sessions/{s['id']}/resume"),
    )
    # Then both are accepted, and exactly one new kernel restores the state
    assert (c1, c2) == (202, 202), (r1, r2)
    back = await lab.wait_state(s["id"])
    assert lab.app.kernel_manager.list_kernel_ids() == [back["kernel_id"]]
    assert len(await lab.events(s["id"], "resumed")) == 1
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK
    # And resuming the active session is refused
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 409 and err["reason"] == "wrong-state"


async def test_resume_never_overwrites_a_new_kernel_silently(lab):
    # Given a paused notebook that the user re-opened with a new kernel, and ran a cell in
    s = await lab.open_notebook("work.ipynb")
    await lab.run(s["kernel_id"], STATE)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    await lab.wait_state(s["id"])
    fresh = {"kernel_id": await lab.open_kernel("work.ipynb")}
    await lab.run(fresh["kernel_id"], "scratch = 'typed after the pause'")
    # When the user resumes without saying where
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    # Then it is refused, naming the kernel that would be overwritten
    assert code == 409 and err["reason"] == "kernel-exists"
    assert fresh["kernel_id"] in err["message"]
    assert (await lab.session(s["id"]))["state"] == "paused"
    # When the user names that kernel, the state is restored into it and the two rows merge
    code, _ = await lab.api(
        "POST", f"sessions/{s['id']}/resume", {"into_kernel": fresh["kernel_id"]}
    )
    assert code == 202
    back = await lab.wait_state(s["id"])
    assert back["kernel_id"] == fresh["kernel_id"]
    out = await lab.run(fresh["kernel_id"], READBACK + "; print(scratch)")
    assert out.splitlines() == [READBACK_OK, "typed after the pause"]
    code, body = await lab.api("GET", "sessions", params={"path": "work.ipynb"})
    assert [x["id"] for x in body["sessions"]] == [s["id"]]


async def test_progress_is_reported_while_pausing(lab):
    # Given a state of a few hundred MB, and a frontend listening to the kernel's messages
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + "\nbig = [torch.randn(4_000_000) for _ in range(25)]")
    frontend = lab.client(s["kernel_id"])
    await asyncio.wait_for(frontend.wait_for_ready(timeout=60), 60)
    published: list[dict] = []

    async def listen():
        while True:
            data = (await frontend.get_iopub_msg())["content"].get("data") or {}
            if MIME_PROGRESS in data:
                published.append(data[MIME_PROGRESS])

    listening = asyncio.ensure_future(listen())
    try:
        # When it is paused, the session polled as the panel polls it
        await lab.api("POST", f"sessions/{s['id']}/pause")
        seen = []
        while True:
            cur = await lab.session(s["id"])
            if cur["state"] != "pausing":
                break
            if cur["progress"] and cur["progress"]["phase"] == "writing":
                seen.append(cur["progress"])
            await asyncio.sleep(0.05)
    finally:
        listening.cancel()
        frontend.stop_channels()
    # Then the session showed the writing phase, bytes done out of a known total, never back
    assert cur["state"] == "paused" and cur["progress"] is None
    assert seen and all(p["total_bytes"] >= 400_000_000 for p in seen)
    assert all(0 <= p["done_bytes"] <= p["total_bytes"] for p in seen)
    assert [p["done_bytes"] for p in seen] == sorted(p["done_bytes"] for p in seen)
    # and the kernel told the bytes as they were written, from none to all of them (how many
    # of those updates a poll sees depends on the disk's speed: a fast one writes this in
    # less time than the updates' quarter-second spacing)
    writing = [p for p in published if p["phase"] == "writing"]
    done = [p["done_bytes"] for p in writing]
    assert done[0] == 0 and done[-1] == writing[-1]["total_bytes"] >= 400_000_000, done
    assert done == sorted(done), done


async def test_a_pause_says_its_total_before_writing_the_first_byte(lab, store_dir):
    # Given a kernel holding ~100 MB of tensors
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + "\nbig = [torch.randn(1_000_000) for _ in range(25)]")

    # When its agent captures the state as a pause asks it to
    bridge = lab.app.web_app.settings["gpu_pause"].bridge
    seen: list[dict] = []
    await bridge.run_agent(
        s["kernel_id"],
        "capture",
        {"store_url": str(store_dir), "checkpoint_id": new_checkpoint_id(), "capture": "namespace"},
        seen.append,
    )

    # Then its first progress, before any writing, carries the checkpoint's total size
    first, writing = seen[0], [p for p in seen if p["phase"] == "writing"]
    assert first["phase"] == "capturing" and first["done_bytes"] == 0, seen[:3]
    assert first["total_bytes"] >= 100_000_000
    assert writing and {p["total_bytes"] for p in writing} == {first["total_bytes"]}
