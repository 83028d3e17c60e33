"""Nothing that will not restore is called saved (issue #25): before a check answers or a pause
commits, the plan is test-restored in a forked copy of the kernel (``kernel/trial.py``). An
object that pickles but does not unpickle is listed as "cannot be saved" at once; the live
kernel never runs any of that unpickling itself."""

from __future__ import annotations

import collections
import os
import time

import pytest

from jupyter_gpu_pause.kernel.trial import verified_plan

# An object that pickles fine and whose unpickling raises: found today only by the resume
FRAGILE = """
import jupyter_gpu_pause as gp
def rebuild(what):
    raise ValueError(f"{what} cannot be rebuilt")
class Fragile:
    def __reduce__(self):
        return (rebuild, ("p",))
p = Fragile()
y = 3
z = [y, "kept"]
"""

# Unpickling ``grows`` appends to a list the notebook holds (reached through ``builtins``, as
# any module-level state would be) and then fails; unpickling ``scribbles`` appends to a file.
SIDE_EFFECTS = """
import builtins
seen = []
builtins.gp_test_seen = seen
def grow():
    builtins.gp_test_seen.append("loaded")
    raise RuntimeError("half-built")
class Grows:
    def __reduce__(self):
        return (grow, ())
def scribble(path):
    with open(path, "a") as f:
        f.write("loaded\\n")
    return path
class Scribbles:
    def __init__(self, path):
        self.path = path
    def __reduce__(self):
        return (scribble, (self.path,))
grows, scribbles, y = Grows(), Scribbles({path!r}), 3
"""


@pytest.mark.gp_config(test_restore=False)
async def test_with_the_test_restore_off_such_an_object_is_saved_but_named_unverified(lab):
    # Given a server whose admin turned the test-restore off, and the same notebook
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], FRAGILE)
    # When the Lab asks what a pause would save
    code, body = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then the object is listed as saved, and named as not test-restored, saying why
    assert code == 200, body
    assert body["skipped"] == [] and "p" in {o["name"] for o in body["objects"]}
    assert body["unverified"]["reason"] == (
        "the test-restore is turned off on this server (test_restore = False)"
    )
    assert "p" in body["unverified"]["names"]
    # And the pause saves it (its resume will say it did not restore)
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused" and paused["checkpoint"]["skipped"] == 0, paused


async def test_an_object_that_does_not_unpickle_is_not_saved(lab):
    # Given a notebook holding an object that pickles but whose unpickling raises
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], FRAGILE)
    # When the Lab asks what a pause would save
    code, body = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then the object is listed as cannot-be-saved, with the exception, before any pause
    assert code == 200, body
    assert body["skipped"] == [
        {"name": "p", "reason": "does not restore: ValueError: p cannot be rebuilt"}
    ]
    assert {"y", "z", "rebuild", "Fragile"} <= {o["name"] for o in body["objects"]}
    assert "p" not in {o["name"] for o in body["objects"]}
    assert body["error"] is None and body["unverified"] is None
    # And gp.check() in the notebook says the same
    out = await lab.run(s["kernel_id"], "print(gp.check())")
    assert "Cannot be saved (1):" in out and "ValueError: p cannot be rebuilt" in out

    # When the notebook is paused
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    # Then the pause worked and its report says the object was not saved
    assert paused["state"] == "paused", paused
    assert "not saved: p" in paused["message"], paused["message"]
    assert [x["name"] for x in paused["checkpoint"]["skipped_objects"]] == ["p"]
    event = await lab.event(s["id"], "paused")
    assert [x["name"] for x in event["detail"]["skipped"]] == ["p"]

    # When it is resumed
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    # Then nothing failed to restore, every other variable is back, and p is absent
    assert back["state"] in ("active", "idle"), back
    assert "not restored" not in back["message"], back["message"]
    out = await lab.run(
        back["kernel_id"],
        "r = gp.last_restore(); print(r['failed'], [x['name'] for x in r['skipped']])\n"
        "print(y, z, 'p' in globals(), type(Fragile()).__name__)",
    )
    assert out.splitlines() == ["[] ['p']", "3 [3, 'kept'] False Fragile"]


async def test_a_registered_object_that_does_not_unpickle_fails_the_pause(lab, store_dir):
    # Given the same object, registered as required
    s = await lab.open_notebook()
    kid = s["kernel_id"]
    await lab.run(kid, FRAGILE + "gp.register('p')\n")
    # When the Lab asks for a check
    code, body = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then the check says the pause would fail, and why
    assert code == 200, body
    assert "registered variable 'p' cannot be saved" in body["error"], body
    assert "ValueError: p cannot be rebuilt" in body["error"]
    # When it is paused anyway
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    after = await lab.wait_state(s["id"])
    # Then the pause failed as registered-unsaveable, nothing was kept, the kernel runs on
    assert after["state"] in ("active", "idle"), after
    assert after["error"]["reason"] == "registered-unsaveable", after
    assert "'p'" in after["message"] and "p cannot be rebuilt" in after["message"]
    assert after["kernel_id"] == kid and lab.kernel_alive(kid)
    assert not list(store_dir.glob("v1/sessions/*/*.json"))
    out = await lab.run(kid, "print(type(p).__name__, y)")
    assert out.strip() == "Fragile 3"


async def test_an_object_pickled_by_its_name_in_the_notebook_is_named_before_the_pause(lab):
    # Given a notebook's lru_cache function: it pickles as a reference to __main__.fib, which a
    # new kernel does not have when it restores (the copy of the kernel had the notebook's own)
    s = await lab.open_notebook()
    await lab.run(
        s["kernel_id"],
        "import functools\n"
        "@functools.lru_cache(maxsize=None)\n"
        "def fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "y = fib(20)\n",
    )
    # When the Lab asks what a pause would save
    code, body = await lab.api("POST", f"sessions/{s['id']}/check")
    # Then fib is named as cannot be saved, with the exception the resume would have met
    assert code == 200, body
    assert body["skipped"] == [
        {
            "name": "fib",
            "reason": "does not restore: AttributeError: "
            "Can't get attribute 'fib' on <module '__main__'>",
        }
    ]
    # And after a pause and a resume nothing is found missing that was not named
    _, paused, back = await _pause_resume(lab, s)
    assert [x["name"] for x in paused["checkpoint"]["skipped_objects"]] == ["fib"]
    assert back["restore"]["failed"] == [], back["restore"]
    out = await lab.run(back["kernel_id"], "print(y, 'fib' in globals())")
    assert out == "6765 False\n"


async def _pause_resume(lab, s: dict) -> tuple[dict, dict, dict]:
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    return s, paused, back


@pytest.mark.gp_config(max_checkpoint_bytes=1)  # the pause then fails after its plan
async def test_the_test_restore_leaves_the_kernel_untouched(lab, tmp_path):
    # Given objects whose unpickling appends to the notebook's list and writes a file
    path = tmp_path / "written.txt"
    path.write_text("before\n")
    s = await lab.open_notebook()
    kid = s["kernel_id"]
    await lab.run(kid, SIDE_EFFECTS.format(path=str(path)))
    # When the Lab checks, and a pause plans (and so test-restores) before it stops at the limit
    code, body = await lab.api("POST", f"sessions/{s['id']}/check")
    assert code == 200, body
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    after = await lab.wait_state(s["id"])
    assert after["error"]["reason"] == "too-large", after
    # Then the failing one is listed with its exception, the writing one is saved but said to
    # be unverified (the test-restore refuses to write files)
    assert body["skipped"] == [
        {"name": "grows", "reason": "does not restore: RuntimeError: half-built"}
    ]
    assert "scribbles" in {o["name"] for o in body["objects"]}
    assert body["unverified"] == {
        "reason": "its loading writes files or starts processes",
        "names": ["scribbles"],
    }
    # And neither the live list nor the file changed
    out = await lab.run(kid, "print(seen, builtins.gp_test_seen is seen)")
    assert out == "[] True\n"
    assert path.read_text() == "before\n"


# -- the fork's guards, without a server ---------------------------------------------------------
def test_a_hanging_test_restore_is_stopped_and_said():
    # Given a namespace with an object whose unpickling never ends
    ns = {"__name__": "__main__", "y": 3, "stuck": Stuck()}
    # When a plan is test-restored with a short timeout
    start = time.monotonic()
    plan = verified_plan(ns, {}, [], "namespace", timeout=0.5)
    # Then it gives up in time, keeps every object and says they were not test-restored
    assert time.monotonic() - start < 5
    assert [o["name"] for o in plan.objects] == ["y", "stuck"] and plan.skipped == []
    # (``y``, an int, is plain: never loaded, so never in doubt)
    assert plan.unverified == {
        "reason": "it did not finish within 0.5 s and was stopped",
        "names": ["stuck"],
    }


def test_only_what_needs_the_failed_object_is_skipped_with_it():
    # Given an object that does not unpickle, pickled first, whose list also holds an
    # OrderedDict; a later OrderedDict that shares only its class; one that holds the object
    bad = Fragile()
    ns = {
        "__name__": "__main__",
        "p": [bad, collections.OrderedDict(a=1)],
        "y": collections.OrderedDict(b=2),
        "q": {"holds": bad},
        "z": 3,
    }
    # When a plan is test-restored
    plan = verified_plan(ns, {}, [], "namespace")
    # Then the failed object and the one holding it are not saved, each with the exception;
    # the OrderedDict that only met its class in the failed object's part of the stream is
    # saved (it was skipped as "it refers to 'p'" before)
    assert plan.skipped == [
        {"name": "p", "reason": "does not restore: ValueError: p cannot be rebuilt"},
        {"name": "q", "reason": "does not restore: ValueError: p cannot be rebuilt"},
    ]
    assert [o["name"] for o in plan.objects] == ["y", "z"] and plan.unverified is None


def test_without_fork_the_plan_is_kept_and_said(monkeypatch):
    # Given a platform without os.fork
    monkeypatch.delattr(os, "fork")
    ns = {"__name__": "__main__", "y": 3, "h": Holder([1])}
    # When a plan is made
    plan = verified_plan(ns, {}, [], "namespace")
    # Then it is today's plan, what is not plain named as not test-restored
    assert [o["name"] for o in plan.objects] == ["y", "h"]
    assert plan.unverified == {"reason": "this platform has no fork", "names": ["h"]}


def test_plain_values_fork_no_child(monkeypatch):
    # Given built-in values, numpy arrays and torch tensors only
    import numpy as np
    import torch

    ns = {
        "__name__": "__main__",
        "d": {"a": [1, 2.5, "x"]},
        "a": np.arange(4),
        "big": np.zeros(300_000),
        "t": torch.ones(3),
        "f": np.float32(2),
    }

    # When a plan is test-restored, on a platform whose fork would fail
    def no_fork():
        raise OSError("fork refused")

    monkeypatch.setattr(os, "fork", no_fork)
    plan = verified_plan(ns, {}, [], "namespace")
    # Then no child was needed: everything is saved, nothing is in doubt
    assert sorted(o["name"] for o in plan.objects) == ["a", "big", "d", "f", "t"]
    assert plan.skipped == [] and plan.unverified is None


def test_an_object_sharing_a_plain_value_is_judged_on_its_own():
    # Given a restorable object and an unrestorable one, both holding a list that an earlier,
    # plain variable holds too (the stream refers back to it: the child then loads all)
    shared = [1, 2, 3]
    ns = {"__name__": "__main__", "shared": shared, "ok": Holder(shared), "bad": Broken(shared)}
    # When the plan is test-restored
    plan = verified_plan(ns, {}, [], "namespace")
    # Then only the broken one is refused, for its own reason
    assert [o["name"] for o in plan.objects] == ["shared", "ok"]
    assert [s["name"] for s in plan.skipped] == ["bad"]
    assert "does not restore: ValueError: refuses to load" in plan.skipped[0]["reason"]
    assert plan.unverified is None


def rebuild(what):
    raise ValueError(f"{what} cannot be rebuilt")


class Fragile:
    def __reduce__(self):
        return (rebuild, ("p",))


def _hang():
    time.sleep(600)


class Stuck:
    def __reduce__(self):
        return (_hang, ())


class Holder:
    def __init__(self, items):
        self.items = items


def _refuse(items):
    raise ValueError("refuses to load")


class Broken:
    def __init__(self, items):
        self.items = items

    def __reduce__(self):
        return (_refuse, (self.items,))
