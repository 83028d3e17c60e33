"""Two nodes, one user: a session paused on one Jupyter server resumes on another.

Two real ``jupyter server`` processes ("node 1", "node 2") of the same user and root folder
share what a cluster shares: the store (moto's S3 server, its own process), the signing key,
and the queue (a real PostgreSQL). Each has its own records. The store is the source of truth:
node 2 lists what node 1 paused; the queue's claims make sure a session runs on one node only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from jupyter_gpu_pause.client import GpuPauseClient, ResumedElsewhere
from tests.moto import BUCKET, PREFIX
from tests.servers import READBACK, STATE, TOKEN, nodes

RESCAN = 1.0  # GpuPauseApp.store_rescan_interval here: how soon a node sees the other's work


@pytest.fixture
def two_nodes(tmp_path, s3, pg_url):
    config = f"""
c.GpuPauseApp.store_url = "s3://{BUCKET}/{PREFIX}"
c.GpuPauseApp.store_options = {{"endpoint_url": {s3.endpoint!r}, "skip_instance_cache": True}}
c.GpuPauseApp.secret_file = {str(tmp_path / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {pg_url!r}
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 2
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.store_rescan_interval = {RESCAN}
c.CapacityQueue.lease_seconds = 3
c.GpuPauseApp.policies = []
"""
    with nodes(tmp_path, config) as both:  # one home folder (a shared volume), own records
        yield both


def resume_path(sid: str) -> str:
    return f"gpu-pause/api/sessions/{sid}/resume"


def test_paused_on_node_1_resumes_on_node_2_and_never_on_both(two_nodes):
    n1, n2 = two_nodes
    s = n1.open_notebook("shared.ipynb")
    n1.run(s["kernel_id"], STATE)
    paused = n1.pause(s["id"])

    # Node 2 lists the session node 1 paused, with its checkpoint
    listed = n2.wait_until(lambda: n2.sessions().get(s["id"]), "the session on node 2")
    assert listed["state"] == "paused" and listed["path"] == "shared.ipynb", listed
    assert listed["checkpoint"]["id"] == paused["checkpoint"]["id"]
    # and resumes it there: its variables back, the notebook attached to the new kernel
    back = n2.resume(s["id"])
    assert n2.run(back["kernel_id"], READBACK).strip() == "45.0 hi"
    code, jupyter_sessions = n2.api("GET", "api/sessions")
    assert [(j["path"], j["kernel"]["id"]) for j in jupyter_sessions] == [
        ("shared.ipynb", back["kernel_id"])
    ]

    # Node 1 says where it runs now, and refuses to resume it a second time
    there = n1.wait_until(
        lambda: n1.sessions()[s["id"]]["running_elsewhere"] and n1.sessions()[s["id"]],
        "node 1 saying the session runs on node 2",
    )
    assert there["message"].startswith("Running on root@") and f":{n2.port}" in there["message"]
    code, body = n1.api("POST", resume_path(s["id"]))
    assert code == 409 and body["reason"] == "resumed-elsewhere", body
    assert n1.kernel_pids() == []
    # and a script using the client gets a ResumedElsewhere naming that node
    with pytest.raises(ResumedElsewhere) as refused:
        GpuPauseClient(f"http://127.0.0.1:{n1.port}/", TOKEN).resume(s["id"])
    assert refused.value.where.endswith(f":{n2.port}"), refused.value.body
    # nor deletes the checkpoints node 2 runs from
    code, body = n1.api("DELETE", f"gpu-pause/api/sessions/{s['id']}?delete_checkpoints=true")
    assert code == 409 and body["reason"] == "resumed-elsewhere", body

    # Paused again on node 2 after a change: node 1 shows that newer checkpoint
    n2.run(back["kernel_id"], "msg = 'from node 2'")
    again = n2.pause(s["id"])
    assert again["checkpoint"]["id"] != paused["checkpoint"]["id"]
    n1.wait_until(
        lambda: (
            (x := n1.sessions()[s["id"]])["checkpoint"]["id"] == again["checkpoint"]["id"]
            and x["running_elsewhere"] is None
        ),
        "node 1 showing node 2's checkpoint",
    )

    # Two resumes at the same moment, one on each node: one kernel, on one node
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda n: n.api("POST", resume_path(s["id"])), (n1, n2)))
    assert sorted(code for code, _ in answers) == [202, 409], answers
    winner, loser = (n1, n2) if answers[0][0] == 202 else (n2, n1)
    assert [b for c, b in answers if c == 409][0]["reason"] == "resumed-elsewhere"
    won = winner.wait_state(s["id"])
    assert won["state"] in ("active", "idle"), won
    assert winner.run(won["kernel_id"], READBACK).strip() == "45.0 from node 2"
    code, kernels = loser.api("GET", "api/kernels")
    assert kernels == [] and loser.kernel_pids() == []
    assert loser.sessions()[s["id"]]["state"] == "paused"
