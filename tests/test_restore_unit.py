"""Restore object by object, in-process: what a damaged blob costs, and what an older checkpoint
gives back. (The end-to-end cases, through a server and a kernel, are in test_faults.py.)"""

from __future__ import annotations

import secrets
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
