"""A kernel whose environment has never heard of jupyter_gpu_pause: the server brings its agent.

The kernels here run real venvs (``tests/venvs.py``): the project venv holds ipykernel and numpy
and nothing else, the way a research group registers one environment per project. The server
sends its agent over the kernel's own channel at the first request; the blobs go through the
server (the venv has no fsspec, s3fs or xxhash); nothing is installed in the venv, and nothing
of the user's is shadowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_gpu_pause.server.kernels.spool import SpoolRoot
from tests.moto import BUCKET, PREFIX
from tests.venvs import ROOT, pip_freeze, project_kernelspec, project_venv, python_venv

SPEC = "project-py"
GIB = 2**30

STATE = r"""
import numpy as np, collections, fractions
big = np.arange({n}, dtype=np.float64)
small = {{"a": [1, 2, 3], "b": "text", "c": (1.5, None)}}
counts = collections.Counter("mississippi")
third = fractions.Fraction(1, 3)
def triple(x):
    return 3 * x
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm2(self):
        return self.x ** 2 + self.y ** 2
p = Point(3, 4)
rng = np.random.default_rng(7)
"""
# What the notebook's next cell prints, after the resume (``rng``); before the pause, it is
# printed with a copy of the generator (``copy.deepcopy(rng)``), which the pause must not see
LOOK = r"""
import copy
print(repr(float(big.sum())), big.dtype, big.shape, small, sorted(counts.items()), third,
      triple(14), p.norm2(), type(p).__name__, {gen}.integers(0, 10**9))
"""
BEFORE, AFTER = LOOK.format(gen="copy.deepcopy(rng)"), LOOK.format(gen="rng")


@pytest.fixture
def project(jp_data_dir) -> Path:
    """The project venv, as the kernelspec ``project-py`` of the test's server."""
    venv = project_venv()
    project_kernelspec(jp_data_dir / "kernels", SPEC, venv)
    return venv


async def _paused_and_resumed(lab, s: dict, timeout: float = 300) -> dict:
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"], timeout=timeout)
    assert paused["state"] == "paused", paused.get("error") or paused
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202, body
    resumed = await lab.wait_state(s["id"], timeout=timeout)
    assert resumed["state"] in ("active", "idle"), resumed
    return resumed


def _spool_folders(store: Path) -> list[str]:
    """What the pauses' and resumes' spool folders left in the store's spool root."""
    root = store / "spool"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []


async def test_a_project_venv_kernel_pauses_and_resumes_with_every_variable(
    lab, project, store_dir
):
    # Given a notebook on the project venv (ipykernel and numpy, nothing of ours), holding a
    # 1 GiB array, plain objects, a function and a class defined in the notebook
    before = pip_freeze(project)
    s = await lab.open_notebook(kernel_name=SPEC)
    kid = s["kernel_id"]
    await lab.run(kid, STATE.format(n=GIB // 8))
    # the kernel API works there: the package, register, check, the magic
    out = await lab.run(
        kid,
        "import jupyter_gpu_pause as gp, sys\n"
        "gp.register('big')\n"
        "r = gp.check()\n"
        "print(gp.__version__, gp.registered(), r['bytes'] >= 2**30, sys.executable)\n"
        "%load_ext jupyter_gpu_pause\n"
        "%gpu_pause registered\n",
    )
    from jupyter_gpu_pause import __version__

    assert out.split()[0] == __version__, out
    assert "['big'] True" in out and str(project) in out, out
    expected = await lab.run(kid, BEFORE)

    # When it is paused and resumed
    resumed = await _paused_and_resumed(lab, s)

    # Then every variable is back, the next cell prints what it would have printed, and the
    # registered name is still registered
    new = resumed["kernel_id"]
    assert new != kid and not resumed["restore"]["failed"], resumed["restore"]
    assert await lab.run(new, AFTER) == expected
    assert "['big']" in await lab.run(new, "print(gp.registered())")
    # the checkpoint holds the array's bytes, stored by the server under their hash
    assert resumed["checkpoint"]["bytes"] >= GIB
    # nothing was installed in the venv, and the user's imports are the venv's: the agent's
    # own cloudpickle is private to it, under our package
    assert pip_freeze(project) == before
    out = await lab.run(
        new,
        "import importlib.util, sys\n"
        "print(importlib.util.find_spec('cloudpickle'), 'cloudpickle' in sys.modules,\n"
        "      sorted(m for m in sys.modules if m.startswith('jupyter_gpu_pause._brought'))[0])",
    )
    assert out.split() == ["None", "False", "jupyter_gpu_pause._brought"], out
    # and no spool folder is left behind
    assert _spool_folders(store_dir) == []


async def test_a_kernel_that_cannot_see_the_spool_sends_its_blobs_over_its_channel(
    lab, jp_data_dir, store_dir
):
    # Given a project-venv kernel that does not see the server's spool folder (a mount
    # namespace of its own: as a kernel on another machine), holding a 24 MiB array and more
    project_kernelspec(jp_data_dir / "kernels", "far", project_venv(), hide=store_dir / "spool")
    s = await lab.open_notebook(kernel_name="far")
    kid = s["kernel_id"]
    await lab.run(kid, STATE.format(n=3 * 2**20))
    look = "import os; print(os.path.exists({!r}))".format(str(store_dir / "spool" / "probe"))
    assert await lab.run(kid, look) == "False\n"
    expected = await lab.run(kid, BEFORE)

    # When it is paused and resumed
    resumed = await _paused_and_resumed(lab, s)

    # Then its blobs went over its own channel, into the store, and back: the next cell prints
    # what it would have printed
    assert await lab.run(resumed["kernel_id"], AFTER) == expected
    assert resumed["checkpoint"]["bytes"] >= 24 * 2**20
    assert _spool_folders(store_dir) == []


@pytest.mark.gp_config(bring_agent=False)
async def test_without_bring_agent_a_kernel_lacking_it_is_not_paused(lab, project):
    # Given bring_agent = False and a notebook on the project venv
    s = await lab.open_notebook(kernel_name=SPEC)
    await lab.run(s["kernel_id"], "x = 41")

    # When it is paused
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    after = await lab.wait_state(s["id"], ("active", "idle", "failed", "paused"))

    # Then the pause fails saying what to install, the kernel untouched; nothing was brought
    assert after["error"]["reason"] == "agent-missing", after
    assert "pip install jupyter_gpu_pause" in after["error"]["message"]
    assert after["kernel_id"] == s["kernel_id"]
    assert await lab.run(s["kernel_id"], "print(x)") == "41\n"
    out = await lab.run(s["kernel_id"], "import sys; print('jupyter_gpu_pause' in sys.modules)")
    assert out == "False\n"


def _older_copy(dest: Path) -> Path:
    """This package as an older commit of it had it (another agent protocol), from git."""
    old = "bc9dd59"  # 2026-12-05: agent protocol 5
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", old, "jupyter_gpu_pause"],
            check=True,
            capture_output=True,
        ).stdout
    except (subprocess.CalledProcessError, OSError) as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no git history to take an older version from: {e}")
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / "jupyter_gpu_pause" / "_version.py").write_text("__version__ = '0.0.5'\n")
    return dest


async def test_an_older_copy_in_the_environment_is_set_aside(lab, jp_data_dir, tmp_path):
    # Given a kernelspec whose environment has an older jupyter_gpu_pause (another protocol):
    # the server's Python, with the older copy first on its path
    older = _older_copy(tmp_path / "older")
    spec = jp_data_dir / "kernels" / "older-gp"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "language": "python", "display_name": "older gp"}
    kernel["env"] = {"PYTHONPATH": str(older)}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    s = await lab.open_notebook(kernel_name="older-gp")
    kid = s["kernel_id"]
    out = await lab.run(kid, "import os; print(os.environ['PYTHONPATH'])")
    assert out.strip() == str(older)
    await lab.run(kid, "x = [41]")

    # When it is paused and resumed
    resumed = await _paused_and_resumed(lab, s)

    # Then the server's agent ran, not the older one, and the notebook goes on
    from jupyter_gpu_pause import __version__

    out = await lab.run(
        resumed["kernel_id"], "import jupyter_gpu_pause as gp; print(gp.__version__, x)"
    )
    assert out.split() == [__version__, "[41]"], out


async def test_a_damaged_blob_falls_back_object_by_object(lab, project, store_dir):
    # Given a paused project-venv notebook with two arrays
    s = await lab.open_notebook(kernel_name=SPEC)
    await lab.run(
        s["kernel_id"],
        "import numpy as np\nkept = np.full(2**18, 7.0)\nlost = np.full(2**18, 9.0)",
    )
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused.get("error") or paused
    # and one array's blob is damaged in the store (a bad disk)
    manifest = next(store_dir.glob(f"v1/sessions/{s['id']}/*.json"))
    doc = json.loads(manifest.read_text())
    assert len(doc["arrays"]) == 2, doc["arrays"]  # each array a blob of its own
    bad = doc["arrays"][0]["blob"]
    path = store_dir / "v1/blobs" / bad[:2] / bad
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))

    # When it is resumed
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202, body
    resumed = await lab.wait_state(s["id"])

    # Then the server's check names the damaged blob, the object that needs it fails alone,
    # and the other comes back
    restore = resumed["restore"]
    assert len(restore["failed"]) == 1, restore
    failed = restore["failed"][0]["name"]
    other = ({"kept", "lost"} - {failed}).pop()
    assert other in restore["restored"], restore
    want = {"kept": "7.0", "lost": "9.0"}[other]
    assert await lab.run(resumed["kernel_id"], f"print({other}.max())") == f"{want}\n"
    assert _spool_folders(store_dir) == []


@pytest.fixture
def s3_config(s3, tmp_path, gp_config) -> dict:
    gp_config.update(
        store_url=f"s3://{BUCKET}/{PREFIX}",
        store_options={
            "endpoint_url": s3.endpoint,
            "skip_instance_cache": True,
            "config_kwargs": {"retries": {"max_attempts": 1}},
        },
    )
    return gp_config


async def test_an_s3_store_through_the_server(s3_config, lab, project, s3):
    # Given an S3 store (the venv has no s3fs) and a notebook on the project venv
    s = await lab.open_notebook(kernel_name=SPEC)
    await lab.run(s["kernel_id"], "import numpy as np\na = np.arange(3 * 2**18)\nnote = 'kept'")

    # When it is paused and resumed
    resumed = await _paused_and_resumed(lab, s)

    # Then its blobs are in the bucket, named by the server, and the notebook goes on
    keys = s3.keys(f"{PREFIX}/v1/blobs/")
    assert any(size >= 6 * 2**20 for size in keys.values()), keys
    out = await lab.run(resumed["kernel_id"], "print(int(a.sum()), note)")
    assert out.split() == [str(sum(range(3 * 2**18))), "kept"]
    # and the kernel API's own pause, from a cell, reaches the server and pauses it again
    out = await lab.run(
        resumed["kernel_id"], "import jupyter_gpu_pause as gp\nprint(gp.pause()['state'])"
    )
    assert out.strip() == "pausing"
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


async def test_a_python_39_kernel_pauses_and_resumes(lab, jp_data_dir):
    # Given a project venv of Python 3.9, the oldest the agent serves
    venv = python_venv("3.9")
    project_kernelspec(jp_data_dir / "kernels", "py39", venv)
    s = await lab.open_notebook(kernel_name="py39")
    kid = s["kernel_id"]
    await lab.run(kid, STATE.format(n=2**16))
    expected = await lab.run(kid, BEFORE)
    assert (await lab.run(kid, "import sys; print(sys.version_info[:2])")).strip() == "(3, 9)"

    # When it is paused and resumed
    resumed = await _paused_and_resumed(lab, s)

    # Then the next cell prints what it would have printed
    assert await lab.run(resumed["kernel_id"], AFTER) == expected


async def test_a_python_38_kernel_is_named_not_pausable(lab, jp_data_dir):
    # Given a kernel of Python 3.8, older than the agent serves
    venv = python_venv("3.8")
    project_kernelspec(jp_data_dir / "kernels", "py38", venv)
    s = await lab.open_notebook(kernel_name="py38")
    await lab.run(s["kernel_id"], "x = 41")

    # When it is paused
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await lab.wait_state(s["id"], ("active", "idle", "failed", "paused"))

    # Then the pause is refused saying why, the kernel untouched, the session marked
    reason = (after.get("error") or {}).get("reason") or body.get("reason")
    assert reason == "python-too-old", (code, body, after)
    assert after["pausable"]["ok"] is False and after["pausable"]["reason"] == "python-too-old"
    assert await lab.run(s["kernel_id"], "print(x)") == "41\n"


async def test_a_kernel_that_refuses_the_agent_is_named_not_pausable(lab, jp_data_dir):
    # Given a kernel whose ipykernel is older than the agent serves (5.x: no get_parent)
    venv = python_venv("3.9", ("ipykernel<6",), name="39-ipykernel5")
    project_kernelspec(jp_data_dir / "kernels", "old-ipykernel", venv)
    s = await lab.open_notebook(kernel_name="old-ipykernel")
    await lab.run(s["kernel_id"], "x = 41")

    # When the server brings it the agent (its first request), and the user asks to pause
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await lab.wait_state(s["id"], ("active", "idle", "failed", "paused"))

    # Then the session says it cannot be paused and why, once; the kernel goes on untouched
    assert after["pausable"]["ok"] is False, after["pausable"]
    assert after["pausable"]["reason"] == "agent-refused"
    assert "ipykernel 6" in after["pausable"]["message"]
    assert len(await lab.events(s["id"], "unpausable")) == 1
    assert await lab.run(s["kernel_id"], "print(x)") == "41\n"


def test_the_spool_sweep_removes_what_a_dead_server_left(tmp_path):
    # Given a spool root with a folder untouched for two days and one in use
    root = SpoolRoot(str(tmp_path / "spool"))
    stale, fresh = root.folder("old"), root.folder("new")
    (Path(stale.path) / ("0" * 32)).write_bytes(b"x")
    two_days = time.time() - 2 * 24 * 3600
    os.utime(stale.path, (two_days, two_days))

    # When the server starts and sweeps it
    gone = root.sweep()

    # Then the stale folder is gone and the fresh one kept
    assert gone == 1 and not Path(stale.path).exists() and Path(fresh.path).exists()
    shutil.rmtree(root.root)
