"""Faults in the middle of a pause or a resume, made for real: nothing the user had is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

STATE = r"""
import torch, numpy as np
import jupyter_gpu_pause as gp
weights = torch.arange(300_000, dtype=torch.float32)
table = np.ones((500, 500))
note = "keep me"
"""

READBACK = "print(int(weights.double().sum().item()), table.sum(), note)"
READBACK_OK = "44999850000 250000.0 keep me"


def manifests(store_dir: Path, session_id: str) -> list[str]:
    return sorted(p.stem for p in (store_dir / "v1" / "sessions" / session_id).glob("*.json"))


async def assert_untouched(lab, s: dict, store_dir: Path, before: list[str]) -> dict:
    """The kernel still runs with every variable; the session is active; no new manifest."""
    after = await lab.wait_state(s["id"])
    assert after["state"] in ("active", "idle"), after
    assert after["kernel_id"] == s["kernel_id"] and lab.kernel_alive(s["kernel_id"])
    assert (await lab.run(s["kernel_id"], READBACK)).strip() == READBACK_OK
    assert manifests(store_dir, s["id"]) == before
    assert not list(store_dir.rglob("*.tmp-*")), "a temporary file was left in the store"
    event = await lab.event(s["id"], "pause_failed")
    assert event["reason"] == "user" and event["detail"]["message"]
    assert after["error"]["state_intact"] is True
    return after


async def test_registered_name_that_cannot_be_saved_fails_the_pause(lab, store_dir):
    # Given a registered variable that holds a generator
    s = await lab.open_notebook()
    await lab.run(
        s["kernel_id"], STATE + "\nstream = (i for i in range(3))\ngp.register('weights', 'stream')"
    )
    # When the user pauses
    code, _ = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202
    # Then the pause fails naming the variable, and the kernel keeps everything
    after = await assert_untouched(lab, s, store_dir, [])
    assert "'stream'" in after["error"]["message"] and "generator" in after["error"]["message"]
    assert "still running" in after["message"]
    assert (await lab.run(s["kernel_id"], "print(next(stream))")).strip() == "0"


async def test_registered_name_that_is_not_defined_fails_the_pause(lab, store_dir):
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + "\ngp.register('weights', 'modle')")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await assert_untouched(lab, s, store_dir, [])
    assert "'modle' is registered but not defined" in after["error"]["message"]


@pytest.fixture
def tmpfs(store_dir):
    """A real size-limited filesystem at the store path (needs root; CI runs as root)."""
    store_dir.mkdir(parents=True, exist_ok=True)  # the server made it at start, if it started

    def mount(options: str) -> None:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(store_dir)],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def remount(options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(store_dir)], check=True)

    yield mount, remount
    subprocess.run(["umount", "-l", str(store_dir)], capture_output=True)


async def test_store_full_in_the_middle_of_the_pause(lab, store_dir, tmpfs):
    # Given a store on a filesystem with room for only part of the checkpoint
    mount, remount = tmpfs
    mount("size=1m")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # When the user pauses and the disk fills up while blobs are written
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await assert_untouched(lab, s, store_dir, [])
    # Then the error says what happened
    assert "No space left on device" in after["error"]["message"]
    # And once there is room, the next pause works
    remount("size=64m")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


async def test_read_only_store(lab, store_dir, tmpfs):
    mount, remount = tmpfs
    mount("size=64m")
    remount("ro")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await assert_untouched(lab, s, store_dir, [])
    assert "Read-only file system" in after["error"]["message"]
    remount("rw")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


async def test_store_path_that_turned_into_a_file(lab, store_dir):
    # Given a store whose blob folder was replaced by a plain file
    (store_dir / "v1").mkdir(parents=True)
    (store_dir / "v1" / "blobs").write_text("not a folder")
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # When the user pauses, the pause fails and nothing is lost
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await assert_untouched(lab, s, store_dir, [])
    assert "Not a directory" in after["error"]["message"]
    # And after the store is repaired the next pause works
    (store_dir / "v1" / "blobs").unlink()
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


@pytest.mark.gp_config(max_checkpoint_bytes=100_000)
async def test_max_checkpoint_bytes(lab, store_dir):
    # Given an administrator limit far below the notebook's state
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # When the user pauses, it is refused before anything is written
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await assert_untouched(lab, s, store_dir, [])
    assert "max_checkpoint_bytes" in after["error"]["message"]
    assert not (store_dir / "v1" / "blobs").exists()


async def test_kernel_killed_while_writing(lab, store_dir):
    # Given a session with an earlier checkpoint, resumed, then holding a larger state
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    first = (await lab.wait_state(s["id"]))["checkpoint"]["id"]
    await lab.api("POST", f"sessions/{s['id']}/resume")
    kid = (await lab.wait_state(s["id"]))["kernel_id"]
    await lab.run(kid, "chunks = [torch.randn(2_000_000) for _ in range(60)]; note = 'newer'")
    pid = lab.app.kernel_manager.get_kernel(kid).provisioner.process.pid
    blobs_before = set((store_dir / "v1" / "blobs").rglob("*"))
    # When the kernel is SIGKILLed as soon as it has started writing blobs
    await lab.api("POST", f"sessions/{s['id']}/pause")
    import asyncio

    for _ in range(2000):
        if set((store_dir / "v1" / "blobs").rglob("*")) - blobs_before:
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError("the pause never started writing")
    os.kill(pid, signal.SIGKILL)
    failed = await lab.wait_state(s["id"], states=("failed", "paused", "active"))
    # Then no manifest is left behind and the session says clearly what happened
    assert failed["state"] == "failed", failed
    assert manifests(store_dir, s["id"]) == [first]
    assert "died" in failed["error"]["message"] and first in failed["error"]["message"]
    assert failed["error"]["state_intact"] is False
    event = await lab.event(s["id"], "pause_failed")
    assert event["detail"]["error_reason"] == "kernel-died"
    # And the older checkpoint still restores: into the kernel Jupyter restarted empty (which
    # resume never overwrites without being told), or into a new kernel if none runs
    restarted = failed["kernel_id"]
    code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    if restarted:
        assert code == 409 and restarted in err["message"] and "into_kernel" in err["message"]
        code, err = await lab.api("POST", f"sessions/{s['id']}/resume", {"into_kernel": restarted})
    assert code == 202, err
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle") and back["checkpoint"]["id"] == first
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK


MARKER_STATE = r'''
import jupyter_gpu_pause as gp, torch
MARKER = {marker!r}
class Tripwire:
    """Unpickling this object writes MARKER: proof that unpickling ran."""
    def __reduce__(self):
        return (trip, ())
def trip():
    open(MARKER, "w").write("unpickled")
    return Tripwire()
wire = Tripwire()
weights = torch.arange(300_000, dtype=torch.float32)
gp.register("wire", "weights")
'''


def _flip_blob(store_dir: Path, manifest: dict, kind: str) -> tuple[Path, bytes]:
    h = next(h for h, b in manifest["blobs"].items() if b["kind"] == kind)
    path = store_dir / "v1" / "blobs" / h[:2] / h
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return path, original


def _edit_manifest(path: Path) -> tuple[Path, bytes]:
    original = path.read_bytes()
    doc = json.loads(original)
    doc["objects"][0]["name"] = "renamed"
    path.write_text(json.dumps(doc))
    return path, original


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        ("manifest", "signature does not match"),
        ("pickle", "does not match its checksum"),
    ],
)
async def test_damaged_checkpoint_is_refused_before_unpickling(
    lab, store_dir, tmp_path, damage, check
):
    # Given a paused session whose state holds a tripwire that writes a file when unpickled
    marker = tmp_path / "unpickled.txt"
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], MARKER_STATE.format(marker=str(marker)))
    await lab.api("POST", f"sessions/{s['id']}/pause")
    cid = (await lab.wait_state(s["id"]))["checkpoint"]["id"]
    mpath = store_dir / "v1" / "sessions" / s["id"] / f"{cid}.json"
    doc = json.loads(mpath.read_text())
    # When the manifest is edited, or one byte of a blob flips
    path, original = (
        _edit_manifest(mpath) if damage == "manifest" else _flip_blob(store_dir, doc, damage)
    )
    await lab.api("POST", f"sessions/{s['id']}/resume")
    failed = await lab.wait_state(s["id"])
    # Then the checkpoint is refused, saying which check failed, and nothing was unpickled
    assert failed["state"] == "failed", failed
    assert check in failed["error"]["message"] and cid in failed["error"]["message"]
    assert failed["error"]["state_intact"] is False  # no checkpoint can bring the state back
    assert failed["error"]["message"].count(cid) == 1  # said once, not repeated
    assert not marker.exists()
    assert lab.app.kernel_manager.list_kernel_ids() == []  # the kernel started for it is gone
    event = await lab.event(s["id"], "resume_failed")
    assert event["detail"]["refused"][0]["checkpoint_id"] == cid
    # And the very same checkpoint, repaired, does unpickle the tripwire (the proof is live)
    path.write_bytes(original)
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle") and marker.read_text() == "unpickled"


async def test_a_damaged_tensor_costs_only_the_objects_that_use_it(lab, store_dir, tmp_path):
    # Given a paused session with a tripwire object and a tensor, the tensor's blob damaged
    marker = tmp_path / "unpickled.txt"
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], MARKER_STATE.format(marker=str(marker)))
    await lab.api("POST", f"sessions/{s['id']}/pause")
    cid = (await lab.wait_state(s["id"]))["checkpoint"]["id"]
    doc = json.loads((store_dir / "v1" / "sessions" / s["id"] / f"{cid}.json").read_text())
    _flip_blob(store_dir, doc, "tensor")
    # When the user resumes
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    # Then the session runs again: the intact object came back (its bytes were all checked
    # first), the tensor did not, and the report and the message say which and why
    assert back["state"] in ("active", "idle"), back
    assert marker.read_text() == "unpickled"
    assert "wire" in back["restore"]["restored"] and "weights" not in back["restore"]["restored"]
    (failed,) = back["restore"]["failed"]
    assert failed["name"] == "weights" and "does not match its checksum" in failed["reason"]
    assert "not restored: weights" in back["message"]
    out = await lab.run(
        back["kernel_id"],
        "import jupyter_gpu_pause as gp\n"
        "print('weights' in dir(), [f['name'] for f in gp.last_restore()['failed']])",
    )
    assert out.strip() == "False ['weights']"


async def _two_checkpoints(lab, store_dir):
    """A session paused at version 1, resumed, changed to version 2 and paused again."""
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + "\nversion = 1")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    older = (await lab.wait_state(s["id"]))["checkpoint"]["id"]
    await lab.api("POST", f"sessions/{s['id']}/resume")
    kid = (await lab.wait_state(s["id"]))["kernel_id"]
    await lab.run(kid, "version = 2; weights = weights * 2; extra = torch.randn(50_000)")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    newer = (await lab.wait_state(s["id"]))["checkpoint"]["id"]
    folder = store_dir / "v1" / "sessions" / s["id"]
    docs = [json.loads((folder / f"{c}.json").read_text()) for c in (older, newer)]
    return s, older, newer, docs


async def test_one_damaged_object_comes_from_the_older_checkpoint(lab, store_dir):
    # Given two checkpoints, and the blob of `weights` in the newer one damaged (only the
    # newer one has those bytes: the weights were doubled)
    s, older, newer, (older_doc, doc) = await _two_checkpoints(lab, store_dir)
    only_newer = {h: b for h, b in doc["blobs"].items() if h not in older_doc["blobs"]}
    weights_blob = {h: b for h, b in only_newer.items() if b["bytes"] == 300_000 * 4}
    _flip_blob(store_dir, {"blobs": weights_blob}, "tensor")
    # When the user resumes
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    # Then `weights` comes from the older checkpoint, everything else from the newer, and the
    # session, the event and gp.last_restore() all say so, object by object
    assert back["state"] in ("active", "idle"), back
    assert back["checkpoint"]["id"] == newer and back["restore"]["failed"] == []
    (took,) = back["restore"]["fallback"]
    assert (took["name"], took["checkpoint_id"]) == ("weights", older)
    assert took["older_seconds"] > 0
    assert f"weights from checkpoint {older}, " in back["message"], back["message"]
    event = await lab.event(s["id"], "resumed", nth=2)
    assert [x["name"] for x in event["detail"]["fallback"]] == ["weights"]
    out = await lab.run(
        back["kernel_id"],
        "import jupyter_gpu_pause as gp\n"
        "print(version, int(weights.double().sum().item()), extra.shape[0], note, "
        "[(x['name'], x['checkpoint_id']) for x in gp.last_restore()['fallback']])",
    )
    assert out.strip() == f"2 44999850000 50000 keep me [('weights', '{older}')]"


async def test_a_damaged_object_graph_falls_back_to_the_older_checkpoint_whole(lab, store_dir):
    # Given two checkpoints, the newer one's object graph (its pickle blob) damaged
    s, older, newer, (_, doc) = await _two_checkpoints(lab, store_dir)
    _flip_blob(store_dir, doc, "pickle")
    # When the user resumes
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    # Then the older checkpoint is restored and the report says exactly what was refused
    assert back["state"] in ("active", "idle"), back
    assert back["checkpoint"]["id"] == older
    assert [r["checkpoint_id"] for r in back["restore"]["refused"]] == [newer]
    assert "checksum" in back["restore"]["refused"][0]["message"]
    assert "refused" in back["message"]
    assert (
        await lab.run(back["kernel_id"], "print(version, 'extra' in dir())")
    ).strip() == "1 False"
