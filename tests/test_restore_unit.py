"""Restore object by object, in-process: what a damaged blob costs, and what an older checkpoint
gives back. (The end-to-end cases, through a server and a kernel, are in test_faults.py.)"""

from __future__ import annotations

import gc
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
from jupyter_gpu_pause.store import IntegrityError, Store
from jupyter_gpu_pause.store.format import build_manifest, new_checkpoint_id


def checkpoint(store: Store, ns: dict, staging=None) -> dict:
    """Capture ``ns`` into ``store`` (through ``staging``, the copy engine for device tensors,
    when given); the manifest document (unsigned: not needed here)."""
    result = write_plan(make_plan(ns, {}, [], "namespace"), store, staging=staging)
    return build_manifest(
        session_id="s1",
        checkpoint_id=new_checkpoint_id(),
        parent=None,
        kernel={},
        origin={},
        capture=result,
    )


def damage(store_dir: Path, doc: dict, size: int) -> str:
    """Flip one byte of the blob of ``size`` bytes; its hash."""
    (h,) = [h for h, b in doc["blobs"].items() if b["bytes"] == size]
    path = store_dir / "v1" / "blobs" / h[:2] / h
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return h


def restore(store: Store, doc: dict, older=()):
    bad: dict = {}
    blobs = load_blobs(doc, store, bad=bad)
    fallbacks = []
    for o in older:
        o_bad = {h: e for h, e in bad.items() if h in o["blobs"]}
        fallbacks.append((o, load_blobs(o, store, bad=o_bad, have=blobs), o_bad))
    ns: dict = {}
    return ns, restore_objects(doc, blobs, ns, "cpu", bad, fallbacks)


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(str(tmp_path / "store"))


def test_a_damaged_tensor_fails_it_and_what_refers_to_it_only(store, tmp_path):
    # Given a model, a second name for its weight, an unrelated tensor and a note
    model = torch.nn.Linear(100, 10)
    ns = {"model": model, "w": model.weight, "other": torch.ones(7), "note": "kept"}
    doc = checkpoint(store, ns)
    # When the blob of the weight (1000 floats) is damaged and the checkpoint restored
    damage(tmp_path / "store", doc, 1000 * 4)
    back, report = restore(store, doc)
    # Then the model fails, naming the damaged blob, and so does the second name of its
    # weight, saying what it needed; the rest comes back intact
    why = {f["name"]: f["reason"] for f in report["failed"]}
    assert set(why) == {"model", "w"}
    assert "does not match its checksum" in why["model"]
    assert why["w"] == "it refers to 'model', which could not be restored"
    assert report["restored"] == ["other", "note"] and report["fallback"] == []
    assert torch.equal(back["other"], torch.ones(7)) and back["note"] == "kept"


def test_a_view_of_a_damaged_tensor_fails_too_never_zeros(store, tmp_path):
    # Given a tensor and a view of part of it, as two variables (one storage, one blob)
    t = torch.arange(1000.0)
    ns = {"t": t, "part": t[10:20].clone(), "view": t[10:20], "note": "kept"}
    doc = checkpoint(store, ns)
    # When the tensor's blob is damaged and the checkpoint restored
    damage(tmp_path / "store", doc, 1000 * 4)
    back, report = restore(store, doc)
    # Then the view fails as the tensor does, instead of coming back as zeros
    failed = {f["name"] for f in report["failed"]}
    assert failed == {"t", "view"}, report
    assert "view" not in back and torch.equal(back["part"], torch.arange(10.0, 20.0))


def test_a_failed_object_comes_from_an_older_checkpoint_sharing_what_it_shared(store, tmp_path):
    # Given an older checkpoint, then a newer one where the weights changed
    model = torch.nn.Linear(100, 10)
    older = checkpoint(store, {"model": model, "step": 1})
    with torch.no_grad():
        model.weight.mul_(2)
    newer = checkpoint(store, {"model": model, "step": 2, "fresh": torch.zeros(3)})
    # When the newer weight's blob is damaged
    damage(tmp_path / "store", newer, 1000 * 4)
    back, report = restore(store, newer, older=[older])
    # Then the model comes from the older checkpoint, the rest from the newer, and the report
    # names where each fallback came from
    assert report["failed"] == []
    (took,) = report["fallback"]
    assert (took["name"], took["checkpoint_id"]) == ("model", older["checkpoint_id"])
    assert back["step"] == 2 and torch.equal(back["fresh"], torch.zeros(3))
    assert torch.equal(back["model"].weight, model.weight / 2)


def test_an_object_no_checkpoint_holds_intact_stays_failed(store, tmp_path):
    # Given an older checkpoint without the tensor the newer one adds, damaged there
    older = checkpoint(store, {"step": 1})
    newer = checkpoint(store, {"step": 2, "extra": torch.arange(20.0)})
    damage(tmp_path / "store", newer, 20 * 4)
    back, report = restore(store, newer, older=[older])
    # Then it is reported failed, and nothing else is taken from the older checkpoint
    assert [f["name"] for f in report["failed"]] == ["extra"]
    assert report["fallback"] == [] and back == {"step": 2}


def test_without_tolerance_the_first_damaged_blob_refuses_the_checkpoint(store, tmp_path):
    doc = checkpoint(store, {"t": torch.arange(30.0), "tag": secrets.token_hex(4)})
    damage(tmp_path / "store", doc, 30 * 4)
    with pytest.raises(IntegrityError, match="does not match its checksum"):
        load_blobs(doc, store)


class Witness:
    """Notes, as it is pickled and unpickled, whether Python's garbage collector could run."""

    seen: list = []

    def __getstate__(self):
        Witness.seen.append(("pickled", gc.isenabled()))
        return {}

    def __setstate__(self, state):
        Witness.seen.append(("unpickled", gc.isenabled()))


class Unloadable:
    """Pickles, but fails to load: one object of a checkpoint that does not come back."""

    def __init__(self):
        self.state = "some"

    def __setstate__(self, state):
        raise RuntimeError("this object refuses to load")


@pytest.fixture
def collector():
    """Python's garbage collector as the test found it, put back after."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_waits_while_objects_are_pickled_and_rebuilt_then_is_as_before(
    store, collector
):
    # Given a notebook with an object that cannot come back, in a kernel collecting garbage
    gc.enable()
    Witness.seen = []
    doc = checkpoint(store, {"w": Witness(), "bad": Unloadable(), "n": 3})
    # When it is restored (one object failing)
    back, report = restore(store, doc)
    # Then no collection could interrupt the pickling or the unpickling (a full one, due
    # after importing torch, cost a 2 500-variable restore ~50 ms), and the collector is
    # back on after both, even though an object failed
    assert Witness.seen == [("pickled", False), ("unpickled", False)]
    assert [f["name"] for f in report["failed"]] == ["bad"] and back["n"] == 3
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off(store, collector):
    gc.disable()
    doc = checkpoint(store, {"n": 3})
    restore(store, doc)
    assert not gc.isenabled()


def test_a_small_notebook_restores_without_importing_numpy(tmp_path):
    # Given a checkpoint of plain Python objects (no tensor, no array)
    store = Store(str(tmp_path / "store"))
    doc = checkpoint(store, {"n": 3, "cfg": {"lr": 0.1, "tags": ["a", "b"]}})
    # When a fresh process (a kernel that never imported numpy) restores it
    code = (
        "import json, sys\n"
        "from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects\n"
        "from jupyter_gpu_pause.store import Store\n"
        "doc = json.loads(sys.stdin.read())\n"
        "store = Store(sys.argv[1])\n"
        "ns = {}\n"
        "restore_objects(doc, load_blobs(doc, store), ns, 'any')\n"
        "print(json.dumps({'ns': ns, 'numpy': 'numpy' in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "store")],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    # Then the objects come back and numpy was never imported (~50 ms of a small resume)
    got = json.loads(out.stdout)
    assert got == {"ns": {"n": 3, "cfg": {"lr": 0.1, "tags": ["a", "b"]}}, "numpy": False}
