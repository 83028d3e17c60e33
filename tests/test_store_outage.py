"""A store that stops answering, or stops taking writes, in the middle of a pause.

Real faults only: moto's S3 server is stopped with SIGSTOP (TCP still connects, nothing
answers), and a local store folder is made immutable with ``chattr +i`` (root ignores file
modes, not the immutable flag). In both cases the pause must end by itself, the kernel must keep
every value and stay usable, no manifest may appear, and once the store is back the next pause
must work.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

from jupyter_gpu_pause.store.bounded import call_bound
from tests.moto import BUCKET, PREFIX
from tests.waiting import wait_for

TIMEOUT = 5  # store_timeout of these servers: a frozen endpoint fails a request within 18 s
BOUND = call_bound(TIMEOUT)
SLACK = 6.0  # the server noticing the agent's answer, and a shared VM's scheduling

# 128 MiB of weights in four tensors of four upload parts each, and small values next to them
SETUP = r"""
import torch, numpy as np
weights = [torch.full((8 << 20,), float(i)) for i in range(4)]
arr = np.arange(100_000, dtype=np.float64)
note = "keep me"
"""

DIGEST = r"""
def _digest():
    import hashlib
    h = hashlib.sha256()
    for t in weights:
        h.update(t.numpy().tobytes())
    h.update(arr.tobytes())
    return h.hexdigest(), len(weights), note
print(*_digest())
del _digest
"""

# Many blobs (24 x 4 MiB), so a local pause is still writing when the folder is locked
LOCAL_SETUP = r"""
import torch
weights = [torch.full((1 << 20,), float(i)) for i in range(24)]
arr = torch.arange(10).numpy()
note = "keep me"
"""


@pytest.fixture
def gp_config(s3, tmp_path) -> dict:
    """A server storing to moto, with store_timeout as the only limit an admin sets."""
    return {
        "store_url": f"s3://{BUCKET}/{PREFIX}",
        "store_options": {"endpoint_url": s3.endpoint, "skip_instance_cache": True},
        "store_timeout": TIMEOUT,
        "db_path": str(tmp_path / "records.sqlite"),
        "secret_file": str(tmp_path / "secret"),
    }


async def writing(lab, session_id: str) -> dict:
    """Wait until the pause reports bytes written (the agent is uploading)."""

    async def started():
        s = await lab.session(session_id)
        p = s.get("progress") or {}
        return s if p.get("phase") == "writing" and p.get("done_bytes") else None

    return await wait_for(started, timeout=120, step=0.05, what="the pause writing blobs")


def manifests(s3) -> list[str]:
    return list(s3.keys(f"{PREFIX}/v1/sessions/"))


async def test_a_frozen_s3_never_hangs_a_pause(lab, s3):
    # Given a notebook with 128 MiB of weights and a few values
    s = await lab.open_notebook()
    kid = s["kernel_id"]
    await lab.run(kid, SETUP)
    before = await lab.run(kid, DIGEST)

    # When S3 freezes half-way through a pause
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    await writing(lab, s["id"])
    s3.freeze()
    frozen_at = time.monotonic()
    after = await lab.wait_state(s["id"], timeout=BOUND + 60)

    # Then the pause ends by itself within the documented bound, the session active again
    took = time.monotonic() - frozen_at
    assert took <= BOUND + SLACK, f"{took:.1f} s"
    assert after["state"] in ("active", "idle"), after
    assert after["error"]["reason"] == "store" and after["error"]["state_intact"] is True
    assert "still running" in after["message"]
    # And the event names the store error: what could not be done, where, and why
    event = await lab.event(s["id"], "pause_failed")
    assert event["detail"]["error_reason"] == "store"
    said = event["detail"]["message"]
    assert f"s3://{BUCKET}/{PREFIX}/v1/blobs/" in said, said
    assert s3.endpoint in said and "3 attempts" in said, said
    # And the kernel is idle and usable, with every value as it was
    assert lab.kernel_alive(kid)
    assert await lab.run(kid, DIGEST, timeout=30) == before

    # When S3 freezes again, a pause starts, and the user cancels it after 5 s
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    await asyncio.sleep(5)  # the user's patience, not a synchronisation
    code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")
    assert code == 200, body
    cancelled_at = time.monotonic()

    # Then the kernel runs a cell within 10 s of the cancel, with every value as it was
    assert await lab.run(kid, DIGEST, timeout=10) == before
    assert time.monotonic() - cancelled_at <= 10
    s_now = await lab.wait_state(s["id"], timeout=30)
    assert s_now["state"] in ("active", "idle"), s_now

    # When S3 is back
    s3.thaw()
    # Then neither attempt left a manifest (the store may hold orphan blobs: GC's to collect)
    assert manifests(s3) == []
    # And the next pause succeeds, and only now is there a manifest
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"], timeout=180)
    assert paused["state"] == "paused", paused
    cid = paused["checkpoint"]["id"]
    assert manifests(s3) == [f"{PREFIX}/v1/sessions/{s['id']}/{cid}.json"]
    assert s3.keys(f"{PREFIX}/v1/blobs/")  # the blobs it names are there (verified at commit)


# -- a local store that stops taking writes ------------------------------------------------------


def chattr(flag: str, path) -> None:
    subprocess.run(["chattr", "-R", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def lockable(tmp_path):
    """``lock(path)`` makes a folder tree immutable, for root too; skips where that is not
    possible (no chattr, a filesystem without the flag, no CAP_LINUX_IMMUTABLE)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    why = None
    if shutil.which("chattr") is None:
        why = "chattr is not installed"
    else:
        try:
            chattr("+i", probe)
            try:
                (probe / "x").write_bytes(b"x")
                why = "chattr +i does not stop writes here"
            except PermissionError:
                pass
        except subprocess.CalledProcessError as e:
            why = f"chattr +i is refused here ({e.stderr.decode().strip()})"
        finally:
            subprocess.run(["chattr", "-R", "-i", str(probe)], capture_output=True)
    if why:
        pytest.skip(f"needs a way to make a folder unwritable for root: {why}")
    locked = []

    def lock(path):
        chattr("+i", path)
        locked.append(path)

    def unlock(path):
        chattr("-i", path)
        locked.remove(path)

    lock.unlock = unlock
    yield lock
    for path in locked:
        chattr("-i", path)


class TestLocalStore:
    @pytest.fixture
    def gp_config(self, store_dir, tmp_path) -> dict:
        """A server storing to a local folder."""
        return {
            "store_url": str(store_dir),
            "store_timeout": TIMEOUT,
            "db_path": str(tmp_path / "records.sqlite"),
            "secret_file": str(tmp_path / "secret"),
        }

    async def test_a_local_store_that_stops_taking_writes_fails_the_pause(
        self, lab, store_dir, lockable
    ):
        # Given a notebook with 24 tensors of 4 MiB
        s = await lab.open_notebook()
        kid = s["kernel_id"]
        await lab.run(kid, LOCAL_SETUP)
        before = await lab.run(kid, DIGEST)

        # When the store folder becomes unwritable once the first blob is on disk
        code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
        assert code == 202, body

        async def first_blob():
            return any(p.is_file() for p in (store_dir / "v1" / "blobs").rglob("*"))

        await wait_for(first_blob, timeout=120, step=0.01, what="the first blob on disk")
        lockable(store_dir)
        after = await lab.wait_state(s["id"], timeout=60)

        # Then the pause fails, saying what could not be written and why
        assert after["state"] in ("active", "idle"), after
        assert after["error"]["reason"] == "store", after
        assert "could not write" in after["error"]["message"], after
        assert "Operation not permitted" in after["error"]["message"], after
        event = await lab.event(s["id"], "pause_failed")
        assert event["detail"]["error_reason"] == "store"
        # And there is no manifest, and the kernel keeps every value
        assert not (store_dir / "v1" / "sessions").exists()
        assert await lab.run(kid, DIGEST, timeout=30) == before

        # When the folder takes writes again, the next pause succeeds, and only now is there a
        # manifest
        lockable.unlock(store_dir)
        await lab.api("POST", f"sessions/{s['id']}/pause")
        paused = await lab.wait_state(s["id"], timeout=120)
        assert paused["state"] == "paused", paused
        cid = paused["checkpoint"]["id"]
        found = [p.name for p in (store_dir / "v1" / "sessions").rglob("*.json")]
        assert found == [f"{cid}.json"]
