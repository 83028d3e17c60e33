"""Warm kernels (``server/spares.py``): once a notebook is paused, one kernel of its kernelspec is
kept started with torch imported, and its resume restores into that kernel instead of waiting
for a new one. What a user must not be able to tell apart: the resumed kernel runs in the
notebook's folder with the environment Jupyter gives a notebook's kernel, and has its variables.
"""

from __future__ import annotations

import json

import pytest

from tests.moto import BUCKET, PREFIX
from tests.servers import STATE as SERVER_STATE
from tests.servers import nodes
from tests.waiting import wait_for

pytestmark = pytest.mark.gp_config(warm_kernels=True)

STATE = """
import os, torch, pandas
w = torch.arange(12.0).reshape(3, 4)
table = {"runs": pandas.DataFrame({"loss": [0.5, 0.25]})}
note = "kept"
"""
WHERE = "import os, json; print(json.dumps([os.getcwd(), os.environ.get('JPY_SESSION_NAME')]))"


async def kernels_without_notebook(lab) -> list[str]:
    """Kernels Jupyter runs that no notebook's session uses: the warm ones."""
    used = {s["kernel"]["id"] for s in await lab.app.session_manager.list_sessions()}
    return [k for k in lab.app.kernel_manager.list_kernel_ids() if k not in used]


async def a_warm_kernel(lab, other_than: str | None = None) -> str:
    """The warm kernel GET capacity reports ready, once it is one Jupyter runs for no notebook."""

    async def one():
        found = [k for k in await kernels_without_notebook(lab) if k != other_than]
        code, cap = await lab.api("GET", "capacity")
        assert code == 200, cap
        ready = [w["kernel_id"] for w in cap["warm_kernels"] if w["ready"]]
        return next((k for k in found if k in ready), None)

    return await wait_for(one, timeout=120, what="a warm kernel, ready")


async def test_a_resume_restores_into_the_warm_kernel_as_if_it_were_new(lab, jp_root_dir):
    # Given a notebook in a sub-folder holding a tensor, and where its kernel runs
    (jp_root_dir / "sub").mkdir()
    s = await lab.open_notebook("sub/nb.ipynb")
    await lab.run(s["kernel_id"], STATE)
    before = json.loads(await lab.run(s["kernel_id"], WHERE))
    # When it is paused
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    # Then a kernel is started and made ready, used by no notebook, with the packages of the
    # notebook's objects imported (pandas inside a dict included)
    warm = await a_warm_kernel(lab)
    code, cap = await lab.api("GET", "capacity")
    (pool,) = cap["warm_kernels"]
    assert pool["kernel_name"] == s["kernel_name"] and {"torch", "pandas"} <= set(pool["modules"])
    has = "import sys; print(all(m in sys.modules for m in ('torch', 'pandas')))"
    assert (await lab.run(warm, has)).strip() == "True"

    # When the notebook is resumed
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202, body
    resumed = await lab.wait_state(s["id"])

    # Then it runs in that warm kernel, with its variables back
    assert resumed["state"] in ("active", "idle"), resumed
    assert resumed["kernel_id"] == warm
    out = await lab.run(warm, "print(w.sum().item(), table['runs'].loss.sum(), note)")
    assert out.split() == ["66.0", "0.75", "kept"]
    # And in the notebook's folder, with the session variable Jupyter gives a notebook's kernel
    assert json.loads(await lab.run(warm, WHERE)) == before
    # And the notebook's Jupyter session uses it
    (js,) = [x for x in await lab.app.session_manager.list_sessions() if x["path"] == s["path"]]
    assert js["kernel"]["id"] == warm

    # And with nothing paused any more, no kernel is kept warm
    async def only_the_notebook():
        return await kernels_without_notebook(lab) == []

    await wait_for(only_the_notebook, timeout=60, what="the warm kernel shut down")
    assert (await lab.api("GET", "capacity"))[1]["warm_kernels"] == []


async def test_a_warm_kernel_shut_down_by_someone_is_started_again(lab):
    # Given a paused notebook and its warm kernel
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    first = await a_warm_kernel(lab)
    # When a person shuts that kernel down from Jupyter's kernel list
    r = await lab.fetch("api", "kernels", first, method="DELETE")
    assert r.code == 204
    # Then another one is started and made ready
    second = await a_warm_kernel(lab, other_than=first)
    assert second != first and first not in lab.app.kernel_manager
    # And the resume uses it, the variable back
    await lab.api("POST", f"sessions/{s['id']}/resume")
    resumed = await lab.wait_state(s["id"])
    assert resumed["kernel_id"] == second
    assert (await lab.run(second, "print(x)")).strip() == "1"


@pytest.fixture
def gp_config(gp_config, request):
    """A test that asks for ``s3`` stores to moto's S3 server (its own process)."""
    if "s3" in request.fixturenames:
        s3 = request.getfixturevalue("s3")
        gp_config["store_url"] = f"s3://{BUCKET}/{PREFIX}"
        gp_config["store_options"] = {"endpoint_url": s3.endpoint, "skip_instance_cache": True}
    return gp_config


async def warm_pool(lab) -> list[dict]:
    code, cap = await lab.api("GET", "capacity")
    assert code == 200, cap
    return cap["warm_kernels"]


# python3 governed as a GPU kernelspec; S3 frozen below for as long as the test looks
@pytest.mark.gp_config(warm_kernels=True, gpu_kernelspecs=["python3"], store_timeout=60)
async def test_a_gpu_session_gets_its_warm_kernel_while_its_pause_is_still_writing(lab, s3):
    # Given a GPU notebook holding torch and pandas objects
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], STATE)
    # When it is paused, and the store stops answering before a byte is written
    s3.freeze()
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body

    # Then, while the pause is still writing, a warm kernel is started and imports the
    # packages the capture found
    async def warm_while_pausing():
        cur = await lab.session(s["id"])
        assert cur["state"] == "pausing", cur  # S3 is frozen: the pause cannot end
        ready = [w for w in await warm_pool(lab) if w["ready"]]
        return ready[0] if ready and {"torch", "pandas"} <= set(ready[0]["modules"]) else None

    early = await wait_for(warm_while_pausing, timeout=120, what="a warm kernel while pausing")
    has = "import sys; print(all(m in sys.modules for m in ('torch', 'pandas')))"
    assert (await lab.run(early["kernel_id"], has)).strip() == "True"
    assert "packages" not in ((await lab.session(s["id"]))["progress"] or {})

    # When the store answers again, the pause ends, and the notebook is resumed at once
    s3.thaw()
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    assert [w["kernel_id"] for w in await warm_pool(lab)] == [early["kernel_id"]]
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 202, body
    resumed = await lab.wait_state(s["id"])
    # Then it restores into that same kernel, started while the pause was writing
    assert resumed["kernel_id"] == early["kernel_id"], resumed
    out = await lab.run(resumed["kernel_id"], "print(w.sum().item(), note)")
    assert out.split() == ["66.0", "kept"]


@pytest.fixture
def two_nodes(tmp_path, s3, pg_url):
    """Two servers of one user sharing home, store, signing key and queue (as in
    test_cross_node.py); node 1 keeps warm kernels, node 2 does not (one torch import less)."""
    config = f"""
c.GpuPauseApp.store_url = "s3://{BUCKET}/{PREFIX}"
c.GpuPauseApp.store_options = {{"endpoint_url": {s3.endpoint!r}, "skip_instance_cache": True}}
c.GpuPauseApp.secret_file = {str(tmp_path / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {pg_url!r}
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.store_rescan_interval = 1.0
c.CapacityQueue.lease_seconds = 3
c.GpuPauseApp.policies = []
"""
    per_node = ("c.GpuPauseApp.warm_kernels = True\n", "c.GpuPauseApp.warm_kernels = False\n")
    with nodes(tmp_path, config, per_node) as both:
        yield both


def test_no_warm_kernel_for_a_session_another_server_runs(two_nodes):
    n1, n2 = two_nodes

    def pool(node) -> list[dict]:
        code, cap = node.api("GET", "gpu-pause/api/capacity")
        assert code == 200, cap
        return cap["warm_kernels"]

    def checked(node) -> str | None:
        return node.api("GET", "gpu-pause/api/capacity")[1]["warm_kernels_checked"]

    # Given a notebook paused on node 1, which keeps a warm kernel for it
    s = n1.open_notebook("shared.ipynb")
    n1.run(s["kernel_id"], SERVER_STATE)
    n1.pause(s["id"])
    (warm,) = n1.wait_until(lambda: [w for w in pool(n1) if w["ready"]], "a warm kernel on node 1")

    # When node 2 resumes it
    n2.wait_until(lambda: n2.sessions().get(s["id"]), "the session listed on node 2")
    back = n2.resume(s["id"])
    assert back["kernel_id"] != warm["kernel_id"]

    # Then node 1, seeing it run there, shuts its warm kernel down and keeps none
    n1.wait_until(lambda: n1.sessions()[s["id"]]["running_elsewhere"], "node 1 seeing node 2")
    n1.wait_until(lambda: pool(n1) == [], "node 1 without a warm kernel")
    # (the pool lets go of it first, then waits for its shutdown)
    n1.wait_until(lambda: n1.api("GET", "api/kernels")[1] == [], "node 1 with no kernel")
    assert n1.kernel_pids() == []
    # and keeps none while it runs there: two more looks (the second begun after the drop)
    for _ in range(2):
        seen = checked(n1)
        n1.wait_until(lambda seen=seen: checked(n1) != seen, "node 1's warm pool looking again")
    assert pool(n1) == [] and n1.kernel_pids() == []
