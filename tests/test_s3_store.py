"""Object storage through fsspec/s3fs, against a real S3-compatible server process (moto)."""

from __future__ import annotations

import json
import time

import pytest

from tests.moto import BUCKET, PREFIX
from tests.waiting import wait_for

SETUP = r"""
import torch, numpy as np
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 2)
for _ in range(3):
    optimizer.zero_grad(); ((model(x) - y) ** 2).mean().backward(); optimizer.step()
arr = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
note = "keep me"
"""

# Every byte of the model, the optimizer's moments and the array, hashed; nothing left behind.
DIGEST = r"""
def _digest():
    import hashlib
    h = hashlib.sha256()
    opt = optimizer.state_dict()
    moments = [v for st in opt["state"].values() for v in st.values() if torch.is_tensor(v)]
    for t in [*model.state_dict().values(), *moments]:
        h.update(t.detach().cpu().numpy().tobytes())
    h.update(arr.tobytes())
    return h.hexdigest(), len(moments), opt["param_groups"][0]["lr"], arr.shape, note
print(*_digest())
del _digest
"""


@pytest.fixture
def gp_config(s3, tmp_path) -> dict:
    return {
        "store_url": f"s3://{BUCKET}/{PREFIX}",
        "store_options": {
            # No key or secret here: they come from the AWS_* environment (the s3 fixture),
            # in the server and in every kernel, as the README says credentials should.
            "endpoint_url": s3.endpoint,
            "skip_instance_cache": True,
            "config_kwargs": {
                "retries": {"max_attempts": 1},
                "connect_timeout": 2,
                "read_timeout": 5,
            },
        },
        "db_path": str(tmp_path / "records.sqlite"),
        "secret_file": str(tmp_path / "secret"),
    }


async def _paused(lab, s3, store_dir):
    """A notebook with a model, an optimizer and an array, paused to S3; returns its parts."""
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], SETUP)
    before = await lab.run(s["kernel_id"], DIGEST)
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    cid = paused["checkpoint"]["id"]
    doc = json.loads(s3.get(f"{PREFIX}/v1/sessions/{s['id']}/{cid}.json"))
    return s, before, paused, doc


async def test_pause_to_s3_and_resume_bit_identical(lab, s3, store_dir):
    # Given a notebook with a trained model, its optimizer and a numpy array, paused
    s, before, paused, doc = await _paused(lab, s3, store_dir)

    # Then the manifest and every blob it names are objects in the bucket, nothing on local disk
    cid = paused["checkpoint"]["id"]
    assert list(s3.keys(f"{PREFIX}/v1/sessions/")) == [f"{PREFIX}/v1/sessions/{s['id']}/{cid}.json"]
    blobs = s3.keys(f"{PREFIX}/v1/blobs/")
    named = {f"{PREFIX}/v1/blobs/{h[:2]}/{h}": int(b["bytes"]) for h, b in doc["blobs"].items()}
    assert named and named.items() <= blobs.items()
    assert sum(blobs.values()) >= 240_000  # the array alone is 240 kB
    assert not store_dir.exists()
    # And the kernel is gone
    assert paused["kernel_id"] is None and not lab.kernel_alive(s["kernel_id"])

    # When the user resumes
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202, body
    back = await lab.wait_state(s["id"])

    # Then a new kernel holds the very same bytes
    assert back["state"] in ("active", "idle"), back
    assert back["checkpoint"]["id"] == cid and back["restore"]["failed"] == []
    after = await lab.run(back["kernel_id"], DIGEST)
    assert after == before and " 12 0.01 (300, 200) keep me" in after
    code, listed = await lab.api("GET", f"sessions/{s['id']}/checkpoints")
    assert code == 200 and [(c["id"], c["valid"]) for c in listed["checkpoints"]] == [(cid, True)]


async def test_flipped_byte_in_an_s3_pickle_blob_is_refused(lab, s3, store_dir):
    # Given a paused session, and its pickle blob in the bucket with one bit flipped
    s, before, paused, doc = await _paused(lab, s3, store_dir)
    cid = paused["checkpoint"]["id"]
    h = doc["pickle"]["blob"]  # the object graph: no object can come back without it
    key = f"{PREFIX}/v1/blobs/{h[:2]}/{h}"
    original = s3.get(key)
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0x01
    s3.put(key, bytes(damaged))

    # When the user resumes
    await lab.api("POST", f"sessions/{s['id']}/resume")
    failed = await lab.wait_state(s["id"])

    # Then the checkpoint is refused, naming the check and the checkpoint; no kernel is left
    assert failed["state"] == "failed", failed
    assert "does not match its checksum" in failed["error"]["message"]
    assert cid in failed["error"]["message"] and failed["error"]["state_intact"] is False

    # (the kernel started for it is shut down first; a warm spare goes once nothing is paused)
    async def no_kernel():
        return lab.app.kernel_manager.list_kernel_ids() == []

    await wait_for(no_kernel, what="no kernel left")

    # And once the object is repaired, the same checkpoint restores the same bytes
    s3.put(key, original)
    await lab.api("POST", f"sessions/{s['id']}/resume")
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert await lab.run(back["kernel_id"], DIGEST) == before


async def test_s3_down_before_a_pause_leaves_the_kernel_running(lab, s3, store_dir):
    # Given a notebook with state, and the S3 server process gone
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], SETUP)
    before = await lab.run(s["kernel_id"], DIGEST)
    s3.stop()

    # When the user pauses
    started = time.monotonic()
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    after = await lab.wait_state(s["id"])

    # Then the pause fails quickly, saying the store could not be reached
    assert time.monotonic() - started < 60
    assert after["state"] in ("active", "idle"), after
    message = after["error"]["message"]
    assert "store could not be written" in message and s3.endpoint in message, message
    assert after["error"]["state_intact"] is True and "still running" in after["message"]
    assert after["checkpoint"] is None
    event = await lab.event(s["id"], "pause_failed")
    assert event["detail"]["error_reason"] == "store"

    # And the kernel still runs with every variable
    assert after["kernel_id"] == s["kernel_id"] and lab.kernel_alive(s["kernel_id"])
    assert await lab.run(s["kernel_id"], DIGEST) == before

    # And once S3 is back (an empty bucket: moto keeps nothing), the next pause works
    s3.start()
    assert s3.keys(PREFIX) == {}
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    assert f"{PREFIX}/v1/sessions/{s['id']}/{paused['checkpoint']['id']}.json" in s3.keys(PREFIX)
