"""Resumes restore a few at a time (``RestoreSlots``), so a storm of them cannot starve the
server: on their own, and through a real server where two notebooks resume at once."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_gpu_pause.server.capacity.slots import RestoreSlots, usable_cpus
from jupyter_gpu_pause.server.state.model import Session
from tests.test_faults import READBACK, READBACK_OK, STATE
from tests.waiting import wait_for


def restoring(path: str) -> Session:
    s = Session(path=path, name=path, type="notebook", kernel_id=None, kernel_name="python3")
    s.state, s.message = "restoring", "Restoring"
    s.progress = {"phase": "starting", "done_bytes": 0, "total_bytes": 100}
    return s


async def settle() -> None:
    """Let every task that can run, run (each waits on a slot or an event)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_at_most_size_restore_at_once_first_come_first_served():
    # Given two slots and five resumes asking for one, in order
    slots = RestoreSlots(2)
    sessions = [restoring(f"nb{i}.ipynb") for i in range(5)]
    entered: list[int] = []
    done = [asyncio.Event() for _ in sessions]

    async def resume(i: int) -> None:
        async with slots.hold(sessions[i]):
            entered.append(i)
            await done[i].wait()

    tasks = [asyncio.ensure_future(resume(i)) for i in range(5)]
    await settle()
    # Then two restore and three wait, each saying so and how many are before it
    assert entered == [0, 1]
    assert [s.progress["phase"] for s in sessions] == ["starting"] * 2 + ["queued"] * 3
    assert sessions[2].message == "Waiting to restore: this server restores 2 at a time"
    assert sessions[4].message.endswith(", 2 other resumes first")
    assert slots.waiting == 3
    # When the second one finishes, the next in line restores, with its message back
    done[1].set()
    await settle()
    assert entered == [0, 1, 2]
    assert sessions[2].message == "Restoring" and sessions[2].progress["phase"] == "starting"
    assert sessions[3].progress["phase"] == "queued"
    # And so on until every one has restored, in the order they asked
    for event in done:
        event.set()
    await asyncio.gather(*tasks)
    assert entered == [0, 1, 2, 3, 4] and slots.waiting == 0


async def test_a_cancelled_wait_leaves_the_line_and_loses_no_slot():
    # Given one slot, held, and two resumes waiting for it
    slots = RestoreSlots(1)
    a, b, c = (restoring(p) for p in ("a.ipynb", "b.ipynb", "c.ipynb"))
    release = asyncio.Event()
    entered: list[str] = []

    async def resume(s: Session, wait: bool) -> None:
        async with slots.hold(s):
            entered.append(s.path)
            if wait:
                await release.wait()

    first = asyncio.ensure_future(resume(a, True))
    await settle()
    second = asyncio.ensure_future(resume(b, False))
    third = asyncio.ensure_future(resume(c, False))
    await settle()
    # When the first waiter is cancelled (a stopping server drains its operations)
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    # Then the holder finishing lets the other waiter in, and the slot is free again after
    release.set()
    await asyncio.gather(first, third)
    assert entered == ["a.ipynb", "c.ipynb"]
    assert slots.waiting == 0
    async with slots.hold(restoring("d.ipynb")):
        pass  # would wait forever had the cancelled wait kept the slot


def test_the_default_size_is_twice_the_cpus_the_server_may_use():
    assert RestoreSlots().size == 2 * usable_cpus() >= 2
    assert RestoreSlots(3).size == 3


# the phases of a resume holding a restore slot (docs/capacity.md): before them it is asked or
# queued, after them attaching
SLOT_PHASES = ("starting", "reading")


@pytest.mark.gp_config(max_concurrent_restores=1)
async def test_resumes_asked_at_once_restore_one_at_a_time(lab):
    # Given two paused notebooks with state, and a server that restores one at a time
    ids = []
    for path in ("one.ipynb", "two.ipynb"):
        s = await lab.open_notebook(path)
        await lab.run(s["kernel_id"], STATE)
        await lab.api("POST", f"sessions/{s['id']}/pause")
        assert (await lab.wait_state(s["id"]))["state"] == "paused"
        ids.append(s["id"])
    # When both are resumed at once
    answers = await asyncio.gather(*(lab.api("POST", f"sessions/{sid}/resume") for sid in ids))
    assert [code for code, _ in answers] == [202, 202], answers
    # Then, each time we look, at most one restores while the other waits its turn, saying so
    # (one look: both sessions as the server holds them at one moment; a resume holds a slot
    # from its kernel's start to the end of its reading)
    seen_queued = []

    async def both_running():
        code, body = await lab.api("GET", "sessions")
        assert code == 200, body
        sessions = [s for s in body["sessions"] if s["id"] in ids]
        in_slot = [
            s
            for s in sessions
            if s["state"] == "restoring" and (s["progress"] or {}).get("phase") in SLOT_PHASES
        ]
        assert len(in_slot) <= 1, sessions
        seen_queued.extend(
            s["message"] for s in sessions if (s["progress"] or {}).get("phase") == "queued"
        )
        done = len(sessions) == 2 and all(s["state"] in ("active", "idle") for s in sessions)
        return done and sessions

    sessions = await wait_for(both_running, timeout=240, what="both notebooks running again")
    assert seen_queued and "restores 1 at a time" in seen_queued[0], seen_queued
    # And both have their variables back
    for s in sessions:
        assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
