"""GPU-hour budgets on one server (the folder queue, the quota provider standing in for GPUs):
``GET budget``, an admin's grant and reset with their errors, the warnings as events, a GPU
resume refused over budget while a CPU one (and "any") goes, the metric, groups (Unix and
JupyterHub's) and the exempt list. Two servers sharing a PostgreSQL queue, pauses past the
grace and a killed server: tests/test_budgets_cluster.py."""

from __future__ import annotations

import getpass
import grp
import json
import os
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.config.settings import server_user
from tests.fakes import FakeProbe
from tests.receivers import Receiver
from tests.scrape import scrape
from tests.waiting import wait_for

GPU = dict(
    capacity_provider_class="quota", gpu_kernelspecs=["python3*"], poll_interval=0.3, policies=[]
)
ME = getpass.getuser()
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


async def budget(lab) -> dict:
    code, body = await lab.api("GET", "budget")
    assert code == 200, body
    return body


async def my_row(lab) -> dict | None:
    rows = [r for r in (await budget(lab))["budgets"] if r["user"] == server_user()]
    return rows[0] if rows else None


async def test_without_budgets_get_says_so_and_a_grant_is_not_found(lab):
    assert await budget(lab) == {
        "admin": False,
        "configured": False,
        "user": server_user(),
        "budgets": [],
    }
    code, body = await lab.api("POST", "budget/grant", {"user": ME, "hours": 1})
    assert code == 404 and body["reason"] == "no-budget", body
    assert "c.GpuPauseApp.budgets" in body["message"]


@pytest.fixture
def hook(gp_config):
    """A webhook receiver, configured before the server starts."""
    receiver = Receiver()
    gp_config["webhook_urls"] = [receiver.url]
    yield receiver
    receiver.close()


@pytest.mark.gp_config(
    budgets=[{"name": "solo", "gpu_hours": 0.001, "warn_at": 0.5, "grace": 100}],
    budget_admins=[ME],
    budget_exempt=["nob*"],
    **GPU,
)
async def test_over_budget_a_gpu_resume_is_refused_the_cpu_and_any_go_and_an_admin_lifts_it(
    hook, lab
):
    # Given a GPU session of a user whose budget is 0.001 GPU-hours (3.6 s)
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "v = 7")
    # When it runs past the budget: warned, then held, each as an event on the session
    warned = await lab.event(s["id"], "budget_warned")
    held = await lab.event(s["id"], "budget_held", timeout=60)
    assert warned["reason"] == held["reason"] == "budget:solo"
    assert "0.001 GPU-hours this month" in warned["detail"]["message"], warned
    assert held["detail"]["retry_at"] == held["detail"]["period_end"], held
    row = await my_row(lab)
    assert row["state"] == "held" and row["ratio"] >= 1 and row["retry_at"], row

    # and each went out as a webhook too
    async def delivered():
        types = [json.loads(p["body"])["type"] for p in hook.posts]
        return {"budget_warned", "budget_held"} <= set(types) and types

    types = await wait_for(delivered, what="the budget webhooks")
    assert types.count("budget_warned") == 1, types
    assert (row["name"], row["scope"], row["period"]) == ("solo", "default", "month")

    # Then /metrics shows the ratio by budget, with no user name
    m = await scrape(lab)
    assert m.value("budget_used_ratio", scope="solo") >= 1
    assert f'user="{ME}"' not in m.text

    # and once paused, a GPU resume is refused (nothing changes), saying when it renews
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    assert (await lab.wait_state(s["id"]))["state"] == "paused"
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 409 and body["reason"] == "budget-exceeded", body
    assert body["retry_at"] == row["retry_at"] and body["budget"] == "solo", body
    assert (await lab.session(s["id"]))["state"] == "paused"
    # while "any" takes the CPU at once, its variables back
    code, body = await lab.api("POST", f"sessions/{s['id']}/resume", {"device": "any"})
    assert code == 202, body
    back = await lab.wait_state(s["id"])
    assert back["device"] == "cpu", back
    assert (await lab.run(back["kernel_id"], "print(v * 6)")).strip() == "42"

    # An admin's bad grants are refused, naming what is wrong, and change nothing
    for bad, reason in [
        ({"user": ME, "hours": "two"}, "bad-field"),
        ({"user": ME, "hours": -1}, "bad-hours"),
        (f'{{"user": "{ME}", "hours": Infinity}}', "bad-hours"),  # JSON Python reads
        ({"user": ME, "hours": True}, "bad-field"),
        ({"hours": 1}, "bad-user"),
        ({"user": ME, "hours": 1, "note": "x"}, "unknown-field"),
    ]:
        code, body = await lab.api("POST", "budget/grant", bad)
        assert (code, body["reason"]) == (400, reason), (bad, body)
    code, body = await lab.api("POST", "budget/grant", {"user": "exempt-joe", "hours": 1})
    assert code == 404 and body["reason"] == "unknown-user", body
    assert f"known: {ME}" in body["message"], body
    code, body = await lab.api("POST", "budget/grant", {"user": "daemon", "hours": 1})
    assert code == 200, body  # a user of this machine whose server never ran: granted ahead
    code, body = await lab.api("POST", "budget/grant", {"user": "nobody", "hours": 1})
    assert code == 404 and body["reason"] == "no-budget", body  # exempt: no budget applies
    assert (await my_row(lab))["granted_hours"] == 0

    # A grant sent twice with one Idempotency-Key (a retry) counts once, and lifts the hold
    grant = {"user": ME, "hours": 1}
    headers = {"Idempotency-Key": "grant-once"}
    first = await lab.fetch(
        "gpu-pause", "api", "budget", "grant", method="POST", body=json.dumps(grant),
        headers=headers,
    )  # fmt: skip
    again = await lab.fetch(
        "gpu-pause", "api", "budget", "grant", method="POST", body=json.dumps(grant),
        headers=headers,
    )  # fmt: skip
    assert first.body == again.body
    row = json.loads(first.body)["budget"]
    assert row["granted_hours"] == 1 and row["limit_hours"] == 1.001 and row["state"] == "ok"
    assert (await my_row(lab))["granted_hours"] == 1

    # and a reset starts the period over: nothing used, the grant gone
    code, body = await lab.api("POST", "budget/reset", {"user": ME})
    assert code == 200, body
    assert body["budget"]["used_hours"] < 0.001 and body["budget"]["granted_hours"] == 0, body

    # The admin's view lists the known users, itself included
    view = await budget(lab)
    assert view["admin"] is True and ME in {r["user"] for r in view["budgets"]}


@pytest.mark.gp_config(
    budgets=[
        {"name": "everyone", "gpu_hours": 1},
        {"name": "my-group", "match": {"group": MY_GROUP}, "gpu_hours": 2, "period": "week"},
    ],
    budget_metric_users=True,
    **GPU,
)
async def test_a_unix_group_entry_beats_the_default_and_the_metric_may_name_the_user(lab):
    row = await wait_for(lambda: my_row(lab), what="the budget row")
    assert (row["name"], row["scope"], row["limit_hours"]) == ("my-group", "group", 2)
    assert row["text"].endswith("GPU-hours this week") and row["state"] == "ok"
    assert (await budget(lab))["admin"] is False
    # a user who is not an admin may not reset
    code, body = await lab.api("POST", "budget/reset", {"user": ME})
    assert code == 403 and body["reason"] == "not-budget-admin", body

    async def labelled():
        m = await scrape(lab)
        try:
            return m.value("budget_used_ratio", scope="my-group", user=ME) >= 0
        except KeyError:
            return False

    await wait_for(labelled, what="the ratio labelled with the user")


@pytest.mark.gp_config(
    budgets=[{"name": "everyone", "gpu_hours": 1}], budget_exempt=[f"@{MY_GROUP}"], **GPU
)
async def test_an_exempt_user_has_no_budget(lab):
    assert await budget(lab) == {
        "admin": False,
        "configured": True,
        "user": server_user(),
        "budgets": [],
    }


class _HubUser(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = self.path == "/hub/api/user" and self.headers["Authorization"] == "token hub-token"
        body = json.dumps({"name": "hubuser", "groups": ["gpu-team"], "scopes": []}).encode()
        self.send_response(200 if ok else 403)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body if ok else b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def hub_api(monkeypatch):
    """A Hub's REST API answering ``GET /user`` with the user's groups, as JupyterHub does for
    a server token holding ``read:users:groups!user``; its variables set as a spawner does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HubUser)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("JUPYTERHUB_API_URL", f"http://127.0.0.1:{server.server_port}/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token")
    monkeypatch.setenv("JUPYTERHUB_USER", "hubuser")
    yield
    server.shutdown()
    server.server_close()


@pytest.mark.gp_config(
    budgets=[
        {"name": "everyone", "gpu_hours": 1},
        {"name": "team", "match": {"group": "gpu-team"}, "gpu_hours": 8},
    ],
    **GPU,
)
async def test_a_jupyterhub_group_entry_applies_once_the_hub_said_the_groups(hub_api, lab):
    async def team():
        row = await my_row(lab)
        return row if row and row["name"] == "team" else None

    row = await wait_for(team, what="the team budget")
    assert row["user"] == "hubuser" and row["limit_hours"] == 8


@pytest.fixture
def mig_slice(gp_config, tmp_path):
    """A fake NVML seeing one GPU, a MIG slice, that the test's notebook will hold; the queue
    in a folder of the test's, to read what it counted."""
    gp_config["capacity_queue_url"] = str(tmp_path / "queue")
    FakeProbe.gpus = [{"uuid": "MIG-0", "name": "NVIDIA A100 MIG 1g.10gb"}]
    FakeProbe.readings = {}
    yield
    FakeProbe.gpus, FakeProbe.readings = [], {}


@pytest.mark.gp_config(
    budgets=[{"name": "everyone", "gpu_hours": 10}],
    gpu_weights={"NVIDIA A100 MIG 1g.10gb": 0.125},
    gpu_probe_class="tests.fakes.FakeProbe",
    poll_interval=0.3,
    policies=[],
)
async def test_a_gpu_counts_the_weight_of_its_model(mig_slice, lab, tmp_path):
    # Given a notebook whose kernel holds the MIG slice (as NVML reports it)
    s = await lab.open_notebook()
    FakeProbe.readings = {s["id"]: GpuUsage(devices=["MIG-0"], memory_bytes=10**9)}
    # When the meter has run a while
    await wait_for(lambda: _used_positive(lab), what="GPU-seconds metered")
    # Then the queue counts each hour of it as the slice's weight, not as a whole GPU
    db = sqlite3.connect(tmp_path / "queue" / "capacity-queue.sqlite")
    try:
        rows = db.execute("SELECT weight FROM usage WHERE session_id = ?", (s["id"],))
        weights = {w for (w,) in rows}
    finally:
        db.close()
    assert weights == {0.125}


async def _used_positive(lab):
    row = await my_row(lab)
    return row is not None and row["used_hours"] > 0
