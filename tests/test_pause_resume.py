"""The core story: a notebook with a model pauses to the store and comes back with its state."""

from __future__ import annotations

import os

import psutil

from jupyter_gpu_pause.store.format import blob_path

SETUP = r"""
import torch, numpy as np
import jupyter_gpu_pause as gp
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 2)
    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))

model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
x = torch.randn(32, 8); y = torch.randn(32, 2)
def train_step():
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    return loss.item()
for _ in range(3):
    train_step()
arr = np.arange(300000, dtype=np.float32).reshape(1000, 300)
config = {"lr": 0.01, "tags": ["a", "b"], "arr": arr}
double = lambda v: v * 2
scale = 3
def scaled(v):
    return v * scale
steps = 3
big = torch.arange(4096.0)
alias = big
window = big[100:200]
gen = (i for i in range(10))
gp.register("model", "optimizer")
"""

AFTER_STEP = r"""
train_step()
torch.save({k: v.clone() for k, v in model.state_dict().items()}, "expected.pt")
"""


async def test_pause_then_resume_restores_the_notebook(lab, jp_root_dir, store_dir):
    # Given a notebook in a sub-folder with a model, an optimizer that stepped, arrays, a lambda
    # and a generator
    (jp_root_dir / "exp").mkdir()
    s = await lab.open_notebook("exp/train.ipynb")
    kid = s["kernel_id"]
    await lab.run(kid, SETUP)
    pid = lab.app.kernel_manager.get_kernel(kid).provisioner.process.pid
    before = await lab.run(kid, "print(model.l1.weight.sum().item(), arr.sum(), steps)")

    # When the user pauses it
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202 and body["state"] == "pausing"
    paused = await lab.wait_state(s["id"])

    # Then the checkpoint is in the store, the kernel process is gone, and the session says so
    assert paused["state"] == "paused", paused
    assert paused["kernel_id"] is None
    assert not lab.kernel_alive(kid)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    ck = paused["checkpoint"]
    assert ck["bytes"] > 400_000 and ck["objects"] >= 10
    assert [x["name"] for x in ck["skipped_objects"]] == ["gen"]
    assert "generator" in ck["skipped_objects"][0]["reason"]
    assert "gen" in paused["message"]
    assert f"{ck['objects']} objects saved" in paused["message"], paused["message"]
    manifests = list((store_dir / "v1" / "sessions" / s["id"]).glob("*.json"))
    assert [m.stem for m in manifests] == [ck["id"]]
    event = await lab.event(s["id"], "paused")
    assert event["reason"] == "user" and event["detail"]["checkpoint_id"] == ck["id"]

    # When the user resumes it
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202 and body["state"] in ("waiting", "restoring")
    resumed = await lab.wait_state(s["id"])
    assert resumed["state"] in ("active", "idle"), resumed
    new_kid = resumed["kernel_id"]
    assert new_kid and new_kid != kid and resumed["id"] == s["id"]
    assert f"Restored {ck['objects']} objects from checkpoint" in resumed["message"]

    # Then the notebook's Jupyter session points at the new kernel, in the same directory
    r = await lab.fetch("api", "sessions")
    import json

    (js,) = [x for x in json.loads(r.body) if x["path"] == "exp/train.ipynb"]
    assert js["kernel"]["id"] == new_kid
    assert (await lab.run(new_kid, "import os; print(os.getcwd())")).strip() == str(
        jp_root_dir / "exp"
    )

    # And the objects are back, bit-identical, with their shared references
    after = await lab.run(new_kid, "print(model.l1.weight.sum().item(), arr.sum(), steps)")
    assert after == before
    checks = await lab.run(
        new_kid,
        r"""
p = list(model.parameters())
print(optimizer.param_groups[0]["params"][0] is p[0])
print(alias is big, window.untyped_storage().data_ptr() == big.untyped_storage().data_ptr())
window[0] = -1.0
print(big[100].item())
print(config["arr"] is arr, double(21), scaled(2), type(model).__name__, isinstance(model, Net))
scale = 10
print(scaled(2))
print("gen" in dir())
print(gp.registered())
print(sorted(gp.last_restore()["restored"])[:3], gp.last_restore()["failed"])
""",
    )
    lines = checks.strip().splitlines()
    assert lines[0] == "True"
    assert lines[1] == "True True"
    assert lines[2] == "-1.0"  # a view still writes through to its base
    assert lines[3] == "True 42 6 Net True"
    assert lines[4] == "20"  # a notebook function reads the live namespace
    assert lines[5] == "False"
    assert lines[6] == "['model', 'optimizer']"
    assert lines[7].endswith(" []")  # nothing failed to restore

    # And one more training step gives exactly the weights it would have given before the pause
    await lab.run(new_kid, AFTER_STEP.replace("expected.pt", "resumed.pt"))
    fresh = await lab.open_notebook("exp/reference.ipynb")
    assert (await lab.run(fresh["kernel_id"], "import os; print(os.getcwd())")).strip() == str(
        jp_root_dir / "exp"
    )
    await lab.run(fresh["kernel_id"], SETUP + AFTER_STEP)
    same = await lab.run(
        fresh["kernel_id"],
        r"""
a = torch.load("expected.pt"); b = torch.load("resumed.pt")
print(all(torch.equal(a[k], b[k]) for k in a))
""",
    )
    assert same.strip() == "True"


async def test_check_lists_what_would_be_saved(lab):
    # Given a notebook with a generator and an open file
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], SETUP + "\nfh = open(__import__('os').devnull)\n")
    # When the user asks for a dry run, by function and by magic
    out = await lab.run(
        s["kernel_id"],
        r"""
r = gp.check()
print(sorted(x["name"] for x in r["skipped"]))
print([o["name"] for o in r["objects"]][:2], r["bytes"] > 400000, r["error"])
print(repr(r).splitlines()[0])
%load_ext jupyter_gpu_pause
%gpu_pause check
""",
    )
    lines = out.splitlines()
    # Then it names what cannot be saved and why, and the sizes, without writing anything
    assert lines[0] == "['fh', 'gen']"
    assert lines[1] == "['model', 'optimizer'] True None"
    assert lines[2].startswith("A pause would save") and "MB" in lines[2]
    assert "generator" in out and "Cannot be saved (2)" in out
    assert "model" in out and "(registered)" in out


async def test_blobs_are_shared_between_checkpoints(lab, store_dir):
    # Given a paused and resumed session
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], SETUP)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    first = (await lab.wait_state(s["id"]))["checkpoint"]
    await lab.api("POST", f"sessions/{s['id']}/resume")
    resumed = await lab.wait_state(s["id"])
    # When it pauses again without changing the big array
    await lab.api("POST", f"sessions/{s['id']}/pause")
    second = await lab.wait_state(s["id"])
    # Then the second checkpoint names the first as parent and wrote almost nothing new
    code, body = await lab.api("GET", f"sessions/{s['id']}/checkpoints")
    newest, oldest = body["checkpoints"]
    assert newest["id"] == second["checkpoint"]["id"] and oldest["id"] == first["id"]
    assert newest["valid"] and oldest["valid"]
    assert newest["new_bytes"] < newest["bytes"] / 4
    assert resumed["kernel_id"]
    blobs = [p for p in (store_dir / "v1" / "blobs").rglob("*") if p.is_file()]
    assert all(len(p.name) == 32 and p.parent.name == p.name[:2] for p in blobs)
    assert os.path.exists(store_dir / blob_path(blobs[0].name))


async def test_pause_from_inside_the_notebook(lab, store_dir):
    # Given a notebook that registered its model
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], SETUP)
    # When a cell asks for the pause itself, by magic and then by function
    out = await lab.run(s["kernel_id"], "%load_ext jupyter_gpu_pause\n%gpu_pause status")
    assert out.startswith("nb.ipynb: active")
    out = await lab.run(s["kernel_id"], "r = gp.pause(); print(r['state'], r['id'])")
    # Then the server answers at once (the pause waits for this very cell to end)
    assert out.split() == ["pausing", s["id"]]
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused" and not lab.kernel_alive(s["kernel_id"])
    assert paused["checkpoint"]["objects"] >= 10


async def test_one_variable_is_counted_as_one_object(lab):
    # Given a notebook holding a single variable
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "w = list(range(1000))")
    # When it is paused, then resumed
    await lab.api("POST", f"sessions/{s['id']}/pause")
    paused = await lab.wait_state(s["id"])
    await lab.api("POST", f"sessions/{s['id']}/resume")
    resumed = await lab.wait_state(s["id"])
    # Then the messages a user reads count it in the singular
    assert paused["checkpoint"]["objects"] == 1
    assert ", 1 object saved" in paused["message"], paused["message"]
    assert "Restored 1 object from checkpoint" in resumed["message"], resumed["message"]
    assert (await lab.run(resumed["kernel_id"], "print(sum(w))")).strip() == "499500"


async def test_a_small_notebook_pauses_and_resumes_again_and_again(lab):
    # Given a notebook whose restore finishes within milliseconds of its kernel starting (the
    # agent's answer then races the new client's IOPub subscription: once, resume hung there)
    s = await lab.open_notebook()
    kid = s["kernel_id"]
    await lab.run(kid, "w = []")
    for i in range(10):
        # When it is changed, paused and resumed, round after round
        await lab.run(kid, f"w.append({i})")
        await lab.api("POST", f"sessions/{s['id']}/pause")
        assert (await lab.wait_state(s["id"], timeout=30))["state"] == "paused"
        await lab.api("POST", f"sessions/{s['id']}/resume")
        back = await lab.wait_state(s["id"], timeout=30)
        # Then every round comes back, with the state of that round
        assert back["state"] in ("active", "idle"), back
        kid = back["kernel_id"]
        assert (await lab.run(kid, "print(w)")).strip() == str(list(range(i + 1)))
