"""Waiting for capacity on one server: the timeout, CPU and any-GPU resumes, a GPU checkpoint
brought back on the CPU, and the NVML provider's placement, through a fake NVML probe
(``tests.fakes.FakeProbe``, injected with ``gpu_probe_class`` as an admin would inject one)."""

from __future__ import annotations

import json

import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.store import Store
from jupyter_gpu_pause.store.integrity import Signer
from jupyter_gpu_pause.store.keyfile import load_secret
from tests.fakes import FakeProbe
from tests.test_faults import READBACK, READBACK_OK, STATE
from tests.test_no_stuck_states import _paused
from tests.waiting import wait_for

GB = 10**9
QUOTA_OF_ONE = dict(
    capacity_provider_class="quota", gpu_kernelspecs=["python3*"], poll_interval=0.5, policies=[]
)


@pytest.fixture
def jp_server_config(jp_server_config, request):
    marker = request.node.get_closest_marker("quota")
    if marker:
        jp_server_config["QuotaCapacity"] = dict(marker.kwargs)
    FakeProbe.readings, FakeProbe.gpus, FakeProbe.hidden = {}, [], []
    return jp_server_config


async def resume(lab, s: dict, **body) -> dict:
    code, answer = await lab.api("POST", f"sessions/{s['id']}/resume", body)
    assert code == 202, answer
    return answer


async def waiting(lab, s: dict, position: int = 1) -> dict:
    async def there():
        cur = await lab.session(s["id"])
        return cur if cur["state"] == "waiting" and cur["queue_position"] == position else None

    return await wait_for(there, timeout=90, what=f"waiting #{position}")


@pytest.mark.quota(max_sessions=1)
@pytest.mark.gp_config(resume_timeout=2, **QUOTA_OF_ONE)
async def test_a_resume_that_waits_too_long_fails_and_a_later_one_works(lab, store_dir):
    # Given a notebook paused, and another one taking the machine's one GPU session
    s = await _paused(lab, store_dir)
    other = await lab.open_notebook("other.ipynb")
    # When the first is resumed, it waits, saying why
    await resume(lab, s)
    w = await waiting(lab, s)
    assert w["waiting"]["reason"] == "quota-sessions" and w["gpu_session"] is True
    assert "the limit of 1 GPU session on this machine is in use" in w["message"]
    # Then after resume_timeout it fails, its checkpoint intact, saying what to do
    failed = await lab.wait_state(s["id"])
    assert failed["state"] == "failed", failed
    assert failed["error"]["reason"] == "capacity-timeout"
    assert failed["error"]["state_intact"] is True
    assert "no GPU became free within 2 s; your checkpoint is intact" in failed["message"]
    event = await lab.event(s["id"], "waiting")
    assert event["detail"]["position"] == 1 and event["detail"]["reason"] == "quota-sessions"
    code, cap = await lab.api("GET", "capacity")
    assert cap["queue"] == [] and cap["usage"]["sessions"] == 1
    # When the other notebook's kernel is shut down, a new resume goes through
    await lab.fetch("api", "kernels", other["kernel_id"], method="DELETE")
    await resume(lab, s)
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK


@pytest.mark.quota(max_sessions=1)
@pytest.mark.gp_config(**QUOTA_OF_ONE)
async def test_any_takes_the_cpu_when_no_gpu_is_free_and_a_gpu_when_one_is(lab, store_dir):
    s = await _paused(lab, store_dir)
    other = await lab.open_notebook("other.ipynb")
    # When resumed with device "any" while the quota is in use: on the CPU, at once
    await resume(lab, s, device="any")
    back = await lab.wait_state(s["id"])
    assert back["device"] == "cpu" and back["gpu_session"] is False, back
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK
    # When paused, the GPU freed, and resumed with "any" again: on the GPU
    code, _ = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    await lab.fetch("api", "kernels", other["kernel_id"], method="DELETE")
    await resume(lab, s, device="any")
    back = await lab.wait_state(s["id"])
    assert back["device"] == "gpu", back
    (event,) = (await lab.events(s["id"], "resumed"))[-1:]
    assert event["detail"]["device"] == "gpu" and event["detail"]["waited_seconds"] == 0


def make_gpu_checkpoint(store_dir, secret_file, s: dict) -> str:
    """Rewrite the session's checkpoint as one taken on ``cuda:3``: the same real bytes, its
    storages marked as CUDA ones, signed with the server's key: what a GPU machine writes."""
    store = Store(str(store_dir))
    doc = store.read_manifest(s["id"], s["checkpoint"]["id"])
    for st in doc["storages"]:
        st["device"] = "cuda:3"
        if st["blob"] in doc.get("blobs", {}) and "device" in doc["blobs"][st["blob"]]:
            doc["blobs"][st["blob"]]["device"] = "cuda:3"
    assert doc["storages"], "the state must hold torch tensors"
    store.write_manifest(Signer(load_secret(str(secret_file))).sign(doc))
    return json.dumps(doc["storages"])


async def test_a_gpu_checkpoint_comes_back_on_the_cpu(lab, store_dir, tmp_path):
    # Given a checkpoint whose tensors were on cuda:3 (no GPU on this machine)
    s = await _paused(lab, store_dir)
    make_gpu_checkpoint(store_dir, tmp_path / "secret", s)
    # When resumed with device "cpu"
    await resume(lab, s, device="cpu")
    back = await lab.wait_state(s["id"])
    # Then every object is back, as CPU tensors, and the report says where cuda:3 went
    assert back["state"] in ("active", "idle"), back
    assert back["restore"]["devices"] == {"cuda:3": "cpu"}
    out = await lab.run(back["kernel_id"], READBACK + "; print(weights.device)")
    assert out.split("\n")[:2] == [READBACK_OK, "cpu"]


async def test_a_gpu_checkpoint_asked_onto_a_gpu_says_how_to_get_it_back(lab, store_dir, tmp_path):
    s = await _paused(lab, store_dir)
    make_gpu_checkpoint(store_dir, tmp_path / "secret", s)
    await resume(lab, s, device="gpu")
    failed = await lab.wait_state(s["id"])
    assert failed["state"] == "failed" and failed["error"]["state_intact"] is True, failed
    assert "resume with device='cpu'" in failed["message"]
    await resume(lab, s, device="any")  # no GPU free now (none at all): the CPU
    back = await lab.wait_state(s["id"])
    assert back["device"] == "cpu" and back["restore"]["devices"] == {"cuda:3": "cpu"}


def gpu(uuid: str, total_gb: float, used_gb: float) -> dict:
    return {
        "uuid": uuid,
        "name": "NVIDIA H200",
        "memory_total": int(total_gb * GB),
        "memory_used": int(used_gb * GB),
        "utilization": 0,
    }


NVML = dict(capacity_provider_class="nvml", gpu_probe_class="tests.fakes.FakeProbe", policies=[])


@pytest.mark.gp_config(gpu_kernelspecs=["python3*"], **NVML)
async def test_nvml_puts_the_kernel_on_the_best_fitting_gpu(lab, store_dir):
    # Given GPU 0 mostly free, GPU 1 with just enough free, GPU 2 full
    FakeProbe.gpus = [gpu("GPU-0", 80, 10), gpu("GPU-1", 80, 78), gpu("GPU-2", 80, 80)]
    s = await _paused(lab, store_dir)
    # When resumed (a GPU session through gpu_kernelspecs; it needs the 512 MiB headroom)
    await resume(lab, s)
    back = await lab.wait_state(s["id"])
    # Then it is pinned to GPU 1, the smallest that fits, not to GPU 0
    assert back["state"] in ("active", "idle") and back["device"] == "gpu", back
    env = await lab.run(back["kernel_id"], "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    assert env.strip() == "GPU-1"
    code, cap = await lab.api("GET", "capacity")
    assert cap["provider"] == "nvml" and cap["configured"] == "nvml"
    assert [d["uuid"] for d in cap["devices"]] == ["GPU-0", "GPU-1", "GPU-2"]
    assert cap["devices"][1]["sessions"] == [s["id"]]


@pytest.mark.gp_config(gpu_kernelspecs=["python3*"], resume_timeout=0, **NVML)
async def test_nvml_waits_saying_how_much_it_needs_and_continues_when_memory_frees(lab, store_dir):
    FakeProbe.gpus = [gpu("GPU-0", 80, 80), gpu("GPU-1", 40, 39.9)]
    FakeProbe.hidden = ["GPU 0 is in MIG mode: NVML cannot tell which kernel uses it"]
    s = await _paused(lab, store_dir)
    await resume(lab, s)
    w = await waiting(lab, s)
    assert w["waiting"]["reason"] == "gpu-memory", w
    assert "needs 536.9 MB on one GPU; the largest free is 100.0 MB" in w["message"]
    code, cap = await lab.api("GET", "capacity")
    assert cap["notes"] == FakeProbe.hidden
    assert cap["queue"][0]["reason"] == "gpu-memory"
    # When another process frees memory on GPU 0, the resume continues by itself there
    FakeProbe.gpus = [gpu("GPU-0", 80, 20), gpu("GPU-1", 40, 39.9)]
    back = await lab.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    env = await lab.run(back["kernel_id"], "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
    assert env.strip() == "GPU-0"


@pytest.mark.gp_config(**NVML)
async def test_a_checkpoint_larger_than_any_gpu_fails_at_once_offering_the_cpu(
    lab, store_dir, tmp_path
):
    FakeProbe.gpus = [gpu("GPU-0", 0.5, 0)]  # 500 MB: less than the headroom alone
    s = await _paused(lab, store_dir)
    make_gpu_checkpoint(store_dir, tmp_path / "secret", s)
    await resume(lab, s)
    failed = await lab.wait_state(s["id"])
    assert failed["state"] == "failed" and failed["error"]["reason"] == "too-large", failed
    assert "the largest with 500.0 MB" in failed["message"]
    assert failed["error"]["state_intact"] is True


OOM_ONCE = """
import os, torch
class Flaky:
    '''Unpickling it runs out of GPU memory the first time, as a CUDA allocation would.'''
    def __init__(self, flag):
        self.flag = flag
    def __setstate__(self, state):
        self.__dict__.update(state)
        if not os.path.exists(self.flag):
            open(self.flag, "w").close()
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
flaky = Flaky({flag!r})
"""


@pytest.mark.gp_config(gpu_kernelspecs=["python3*"], resume_timeout=0, **NVML)
async def test_a_restore_that_runs_out_of_gpu_memory_goes_back_in_line_once(
    lab, store_dir, tmp_path
):
    FakeProbe.gpus = [gpu("GPU-0", 80, 0)]
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE + OOM_ONCE.format(flag=str(tmp_path / "oom-once")))
    code, _ = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    # When the restore runs out of GPU memory (another process took what NVML said was free)
    await resume(lab, s)
    back = await lab.wait_state(s["id"])
    # Then it went back in line once, said so, and the second try brought everything back
    assert back["state"] in ("active", "idle"), back
    waits = await lab.events(s["id"], "waiting")
    assert [e["detail"]["reason"] for e in waits] == ["gpu-oom"], waits
    assert (await lab.run(back["kernel_id"], READBACK)).strip() == READBACK_OK
    assert (await lab.run(back["kernel_id"], "print(type(flaky).__name__)")).strip() == "Flaky"


@pytest.mark.gp_config(**NVML)
async def test_a_kernel_started_by_hand_counts_toward_usage(lab):
    # Given a notebook whose kernel NVML sees holding 12 GB on GPU 0
    FakeProbe.gpus = [gpu("GPU-0", 80, 12)]
    s = await lab.open_notebook()
    FakeProbe.readings = {s["id"]: GpuUsage(devices=["GPU-0"], memory_bytes=12 * GB)}

    async def counted():
        code, cap = await lab.api("GET", "capacity")
        return cap if cap["usage"]["sessions"] == 1 else None

    cap = await wait_for(counted, what="the kernel counted as a GPU session")
    assert cap["usage"]["gpu_bytes"] == 12 * GB
    assert cap["devices"][0]["sessions"] == [s["id"]]
    assert (await lab.session(s["id"]))["gpu_session"] is True


async def states_until(lab, sid: str, done) -> list[tuple[str, int | None]]:
    """Every (state, queue position) a client polling as fast as it can sees, from now until
    ``done(session)``."""
    seen: list[tuple[str, int | None]] = []

    async def there():
        cur = await lab.session(sid)
        if not seen or seen[-1] != (cur["state"], cur["queue_position"]):
            seen.append((cur["state"], cur["queue_position"]))
        return done(cur)

    await wait_for(there, timeout=90, step=0, what="the resume's outcome")
    return seen


@pytest.mark.quota(max_sessions=1)
@pytest.mark.gp_config(**QUOTA_OF_ONE)
async def test_a_resume_with_room_never_shows_waiting_and_one_without_says_its_place(
    lab, store_dir
):
    # Given a paused GPU notebook on a machine whose one GPU session is free
    s = await _paused(lab, store_dir)

    # When it is resumed
    answer = await resume(lab, s)

    # Then the answer says the resume was asked, not that it waits
    assert answer["state"] == "restoring" and answer["message"] == "Resume asked", answer
    assert answer["queue_position"] is None and answer["waiting"] is None

    # And a client polling all along never sees it waiting, nor is a "waiting" event recorded
    seen = await states_until(lab, s["id"], lambda x: x["state"] in ("active", "idle", "failed"))
    assert "waiting" not in [state for state, _ in seen], seen
    assert seen[-1][0] in ("active", "idle"), seen
    assert await lab.events(s["id"], "waiting") == []

    # When it is paused again, another notebook takes the GPU session, and it is resumed
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    await lab.open_notebook("other.ipynb")
    await resume(lab, s)

    # Then it shows waiting only with its place in line, saying why
    seen = await states_until(lab, s["id"], lambda x: x["state"] == "waiting")
    assert seen[-1] == ("waiting", 1) and ("waiting", None) not in seen, seen
    w = await lab.session(s["id"])
    assert w["waiting"]["reason"] == "quota-sessions", w
    code, body = await lab.api("POST", f"sessions/{s['id']}/cancel")
    assert code == 200, body
    assert (await lab.wait_state(s["id"], ("paused",)))["state"] == "paused"
