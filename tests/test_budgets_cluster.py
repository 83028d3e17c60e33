"""GPU-hour budgets across a cluster: two real ``jupyter server`` processes of one user sharing a
real PostgreSQL capacity queue (the quota provider standing in for GPUs: every python3 kernel
is a GPU session), and a third server of a budget admin on the same queue.

One budget for the user whatever server they use: the warning comes once, a GPU resume over
budget is refused with when it renews, a CPU resume still works, running GPU sessions past the
grace are paused at their next idle moment with every variable kept, and an admin's grant lets
the GPU resume through. A server killed with SIGKILL loses only the GPU-seconds after its last
heartbeat (a heartbeat every third of the lease) and has none counted twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

from jupyter_gpu_pause.store.format import iso
from tests.servers import TOKEN, WAIT, Server, nodes
from tests.test_cli import CLI, cli_env

LEASE = 3.0  # c.CapacityQueue.lease_seconds: a heartbeat every second
USER = "root"  # the user of the servers under test (the OS user of this run)


def _config(pg_url: str, budget: dict, extra: str = "") -> str:
    return f"""
c.GpuPauseApp.capacity_queue_url = {pg_url!r}
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 4
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.CapacityQueue.lease_seconds = {LEASE}
c.GpuPauseApp.policies = []
c.GpuPauseApp.poll_interval = 0.5
c.GpuPauseApp.budgets = [{budget!r}]
c.GpuPauseApp.budget_admins = ["boss"]
c.GpuPauseApp.budget_pause_warning_seconds = 1
{extra}"""


def admin_server(tmp_path: Path, pg_url: str, budget: dict) -> Server:
    """A server of the budget admin "boss" on the same queue (own store, records, key)."""
    admin = Server(tmp_path / "admin", _config(pg_url, budget))
    admin.env["JUPYTERHUB_USER"] = "boss"  # whose server it is (server_user)
    return admin


def events(node: Server, type_: str) -> list[dict]:
    code, body = node.api("GET", "gpu-pause/api/events")
    assert code == 200, body
    return [e for e in body["events"] if e["type"] == type_]


def budget_of(node: Server) -> dict:
    code, body = node.api("GET", "gpu-pause/api/budget")
    assert code == 200, body
    return body


def my_row(node: Server) -> dict:
    (row,) = [r for r in budget_of(node)["budgets"] if r["user"] == USER]
    return row


def last_heartbeat(pg_url: str, pid: int) -> float:
    """When the server of process ``pid`` last renewed its lease in the queue (epoch
    seconds, the database's clock): every heartbeat renews it, and meters with it."""
    with psycopg.connect(pg_url, autocommit=True) as db:
        (until,) = db.execute(
            "SELECT lease_until FROM gpu_pause.servers WHERE pid = %s", (pid,)
        ).fetchone()
    return until - LEASE


def wait_paused_by_budget(node: Server, sid: str) -> dict:
    return node.wait_until(
        lambda: (s := node.sessions()[sid])["state"] == "paused" and s,
        f"session {sid} paused by the budget",
    )


@pytest.fixture
def cluster(tmp_path, pg_url):
    budget = {"name": "lab", "gpu_hours": 0.01, "warn_at": 0.5, "hold_at": 1.0, "grace": 0.2}
    config = _config(pg_url, budget, f"c.GpuPauseApp.secret_file = {str(tmp_path / 'key')!r}\n")
    config += f"c.GpuPauseApp.store_url = {str(tmp_path / 'store')!r}\n"
    admin = admin_server(tmp_path, pg_url, budget)
    with nodes(tmp_path, config) as (n1, n2):
        admin.start()
        try:
            yield n1, n2, admin
        finally:
            admin.stop()


def test_one_budget_over_two_servers_warns_once_holds_pauses_and_a_grant_lifts_it(
    cluster, tmp_path
):
    n1, n2, admin = cluster
    # Given one GPU session on each of the user's two servers: 0.01 GPU-hours (36 s) between
    # them, used twice as fast
    a = n1.open_notebook("a.ipynb")
    n1.run(
        a["kernel_id"], "x = 41; msg = 'kept on node 1'; import threading; lock = threading.Lock()"
    )
    b = n2.open_notebook("b.ipynb")
    flag = tmp_path / "home" / "cell-may-end"
    # and on node 2 a cell that runs until the test lets it end (the kernel waits on a file)
    long_cell = (
        "import os, time\n"
        f"while not os.path.exists({str(flag)!r}):\n"
        "    time.sleep(0.05)\n"
        "y = 'made by the long cell'"
    )
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(n2.run, b["kernel_id"], long_cell)

        # Then each server shows the one budget, counting both servers' GPU-seconds
        row = n1.wait_until(lambda: (r := my_row(n1))["used_hours"] > 0 and r, "usage metered")
        assert (row["name"], row["scope"], row["limit_hours"]) == ("lab", "default", 0.01)
        assert budget_of(n1)["admin"] is False and len(budget_of(n1)["budgets"]) == 1

        # The first GPU session past the grace (hold_at 1.0 + 0.2) is paused: the idle one
        # on node 1, with a warning first and its pause reason naming the budget
        paused_a = wait_paused_by_budget(n1, a["id"])
        (pause_event,) = [e for e in events(n1, "paused") if e["session_id"] == a["id"]]
        assert pause_event["reason"] == "budget:lab", pause_event
        warned = [e for e in events(n1, "warned") if e["session_id"] == a["id"]]
        assert warned and warned[0]["reason"] == "budget:lab", warned
        # naming, as an idle policy's warning does, what the pause will not save
        assert [x["name"] for x in warned[0]["detail"]["skipped"]] == ["lock"], warned
        assert "will not survive: lock" in warned[0]["detail"]["message"], warned
        assert warned[0]["time"] <= pause_event["time"]
        assert paused_a["checkpoint"] is not None

        # while node 2's session, whose cell still runs, is warned but never paused mid-cell
        s_b = n2.wait_until(
            lambda: (s := n2.sessions()[b["id"]])["pause_at"] and s, "node 2's session warned"
        )
        assert s_b["state"] in ("active", "idle") and not running.done(), s_b
        # and a keep-alive cannot postpone a budget's pause
        code, body = n2.api("POST", f"gpu-pause/api/sessions/{b['id']}/keepalive", {"seconds": 60})
        assert code == 409 and body["reason"] == "budget-exceeded", body
        flag.write_text("go")
        assert running.result(WAIT) == ""
    wait_paused_by_budget(n2, b["id"])

    # The warning and the hold came once for the user, from whichever server saw them first
    warned = events(n1, "budget_warned") + events(n2, "budget_warned")
    held = events(n1, "budget_held") + events(n2, "budget_held")
    assert len(warned) == 1 and len(held) == 1, (warned, held)
    assert warned[0]["detail"]["budget"] == "lab" and warned[0]["reason"] == "budget:lab"
    assert held[0]["detail"]["retry_at"], held

    # A GPU resume is refused with its own reason and when the budget renews (next month)
    code, body = n1.api("POST", f"gpu-pause/api/sessions/{a['id']}/resume")
    assert code == 409 and body["reason"] == "budget-exceeded", body
    month = datetime.now(timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    renews = (month + timedelta(days=32)).replace(day=1)
    assert body["retry_at"] == iso(renews), body
    assert body["budget"] == "lab" and "resume on the CPU" in body["message"]
    assert my_row(n2)["state"] == "held" and my_row(n2)["retry_at"] == body["retry_at"]
    assert n1.sessions()[a["id"]]["state"] == "paused"  # nothing changed

    # while a CPU resume works, every variable back
    code, body = n1.api("POST", f"gpu-pause/api/sessions/{a['id']}/resume", {"device": "cpu"})
    assert code == 202, body
    back = n1.wait_state(a["id"])
    assert back["state"] in ("active", "idle") and back["device"] == "cpu", back
    assert n1.run(back["kernel_id"], "print(x + 1, msg)").strip() == "42 kept on node 1"

    # A user who is not a budget admin may not grant
    code, body = n2.api("POST", "gpu-pause/api/budget/grant", {"user": USER, "hours": 1})
    assert code == 403 and body["reason"] == "not-budget-admin", body

    # The admin sees everyone's budget and grants an hour with the CLI
    assert {r["user"] for r in budget_of(admin)["budgets"]} == {USER, "boss"}
    assert budget_of(admin)["admin"] is True
    env = {**cli_env(admin.runtime)}
    url = f"http://127.0.0.1:{admin.port}/"
    done = subprocess.run(
        [CLI, "budget", "grant", USER, "1", f"--url={url}", f"--token={TOKEN}"],
        env=env, capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "of 1.01 GPU-hours this month" in done.stdout and "ok" in done.stdout, done.stdout

    # and at once the GPU resume goes through, on node 2, with the long cell's result kept
    code, body = n2.api("POST", f"gpu-pause/api/sessions/{b['id']}/resume")
    assert code == 202, body
    back_b = n2.wait_state(b["id"])
    assert back_b["state"] in ("active", "idle") and back_b["device"] == "gpu", back_b
    assert n2.run(back_b["kernel_id"], "print(y)").strip() == "made by the long cell"
    granted = n2.wait_until(
        lambda: events(n1, "budget_granted") + events(n2, "budget_granted"), "budget_granted"
    )
    assert len(granted) == 1 and granted[0]["detail"]["limit_hours"] == 1.01, granted


def test_a_killed_server_loses_at_most_a_heartbeat_and_counts_nothing_twice(tmp_path, pg_url):
    budget = {"name": "lab", "gpu_hours": 100}
    config = _config(pg_url, budget)
    with nodes(tmp_path, config) as (n1, n2):
        # Given a GPU session on node 1, metered
        opened = time.time()  # the wall clock: the database's, which dates the heartbeats
        n1.open_notebook("a.ipynb")
        n2.wait_until(lambda: my_row(n2)["used_hours"] > 0, "node 1's usage seen by node 2")
        metered = time.time()  # the meter runs since at least here
        n2.wait_until(lambda: my_row(n2)["used_hours"] * 3600 > 3, "a few seconds used")
        # When node 1 stops (SIGSTOP: no heartbeat after the one its lease records)
        os.kill(n1.proc.pid, signal.SIGSTOP)
        beat = last_heartbeat(pg_url, n1.proc.pid)
        # and is killed (SIGKILL: no cleanup, no last write)
        n1.kill()
        # and its lease ends (node 2 no longer counts it among the GPU holders)
        n2.wait_until(
            lambda: n2.api("GET", "gpu-pause/api/capacity")[1]["usage"]["sessions"] == 0,
            "node 1's lease to end",
        )
        used = my_row(n2)["used_hours"] * 3600
        # Then what it held until its last heartbeat is counted, and nothing after it: how
        # late that heartbeat came (a loaded machine) is all a crash may cost
        assert beat - metered - 0.25 <= used <= beat - opened + 0.25, (
            used,
            beat - metered,
            beat - opened,
        )
        # and it stays so (node 2 makes more heartbeats; nothing extends the dead interval)
        passes = n2.api("GET", "gpu-pause/api/policies")[1]["monitor"]["passes"]
        n2.wait_until(
            lambda: n2.api("GET", "gpu-pause/api/policies")[1]["monitor"]["passes"] >= passes + 4,
            "more heartbeats of node 2",
        )
        assert my_row(n2)["used_hours"] * 3600 == pytest.approx(used, abs=0.01)

        # When node 1 starts again and runs a GPU session for a while
        n1.start()
        again = time.monotonic()
        n1.open_notebook("b.ipynb")
        n1.wait_until(lambda: my_row(n1)["used_hours"] * 3600 > used + 2 or None, "new use")
        n1.stop()
        stopped = time.monotonic()
        # Then only the new session's time is added: the gap while node 1 was down is not
        total = my_row(n2)["used_hours"] * 3600
        assert 2 <= total - used <= stopped - again + 0.5, (total - used, stopped - again)
