"""The cluster's queue in PostgreSQL when PostgreSQL is not there: real ``jupyter server``
processes and a real PostgreSQL server, stopped as a crash stops it (``pg_ctl -m immediate``),
or never reachable at all.

What must hold: nothing is lost (waiting resumes keep waiting and say why, paused sessions stay
paused), pauses still work, a new resume is refused with 503 ``capacity-unavailable``, the
database's password never shows, and everything goes on by itself once PostgreSQL is back.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.http import request
from tests.postgres import Postgres, _free_port
from tests.scrape import Scrape
from tests.servers import STATE, TOKEN, Server
from tests.test_capacity_node import ask_resume, config, paused_notebook, running, until
from tests.test_cli import cli_env, run_cli

PASSWORD = "Sup3r-secret-pw"


def queue_up(server: Server) -> float:
    """``jupyter_gpu_pause_capacity_queue_up`` on the server's ``/metrics``."""
    code, raw = request(f"http://127.0.0.1:{server.port}/metrics", TOKEN)
    assert code == 200, raw
    return Scrape(raw.decode()).value("capacity_queue_up")


@pytest.fixture
def cluster(tmp_path):
    """Two servers sharing a queue in their own PostgreSQL server (the test stops it)."""
    pg = Postgres()
    pg.start()
    url = pg.new_database()
    servers = [Server(tmp_path / f"node{i}", config(url)) for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(Server.start, servers))
    yield pg, servers
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: s.proc and s.stop(), servers))
    pg.remove()


def test_postgres_down_while_a_resume_waits_loses_nothing_and_it_goes_on_after(cluster):
    pg, (s0, s1) = cluster
    a = paused_notebook(s0, "a.ipynb")
    b = paused_notebook(s1, "b.ipynb")
    s0.resume(a["id"])  # A holds the one GPU session of the cluster
    ask_resume(s1, b["id"])
    until(s1, b["id"], lambda s: s["queue_position"] == 1, "B waiting #1")

    # When PostgreSQL crashes
    pg.stop("immediate")
    # Then the waiting resume keeps waiting and says why, in words
    down = until(
        s1,
        b["id"],
        lambda s: s["waiting"] and s["waiting"]["reason"] == "queue-unavailable",
        "B waiting, the queue unavailable",
    )
    assert down["state"] == "waiting", down
    assert "cannot be reached" in down["message"] and "kept" in down["message"], down
    code, cap = s0.api("GET", "gpu-pause/api/capacity")
    assert code == 200 and cap["queue_available"] is False, cap
    assert "cannot be reached" in cap["queue_error"]
    assert queue_up(s1) == 0  # what an alert on Prometheus sees
    # and a pause still works: the checkpoint is written and the kernel goes
    paused = s0.pause(a["id"])
    assert paused["state"] == "paused" and s0.kernel_pids() == []
    # while a new GPU resume is refused, the session left paused
    code, body = s0.api("POST", f"gpu-pause/api/sessions/{a['id']}/resume")
    assert code == 503 and body["reason"] == "capacity-unavailable", body
    assert s0.sessions()[a["id"]]["state"] == "paused"

    # When PostgreSQL is back
    pg.start()
    # Then B goes on by itself (A's GPU session was given back during the outage)
    back = running(s1, b["id"])
    assert back["device"] == "gpu"
    code, cap = s0.api("GET", "gpu-pause/api/capacity")
    assert cap["queue_available"] is True and cap["queue_error"] is None, cap
    assert queue_up(s1) == 1
    assert [h["session_id"] for h in cap["holders"]] == [b["id"]]


def test_an_unreachable_database_at_start_serves_notebooks_pauses_and_refuses_resume(tmp_path):
    url = f"postgresql://gp:{PASSWORD}@127.0.0.1:{_free_port()}/queue"
    server = Server(tmp_path, config(url))
    server.start()
    try:
        # The server says what is wrong, where, without the password
        line = server.wait_log("cannot be reached")
        assert "capacity queue at postgresql://gp@127.0.0.1:" in line, line
        # Notebooks are served and pause works
        s = server.open_notebook("n.ipynb")
        server.run(s["kernel_id"], STATE)
        server.pause(s["id"])
        # A resume answers 503 capacity-unavailable, on a GPU or the CPU alike (nothing could
        # make sure another node is not resuming it), and nothing changes
        for body in ({}, {"device": "cpu"}):
            code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume", body)
            assert code == 503 and body["reason"] == "capacity-unavailable", body
            assert "checkpoint is safe" in body["message"], body
            assert server.sessions()[s["id"]]["state"] == "paused"
            assert server.kernel_pids() == []
        code, cap = server.api("GET", "gpu-pause/api/capacity")
        assert cap["queue_available"] is False and cap["queue_url"].startswith("postgresql://gp@")
        # and an operator's `jupyter gpu-pause capacity` says so
        env = {**cli_env(server.runtime), "JUPYTER_CONFIG_DIR": str(server.tmp / "config")}
        shown = run_cli(env, "capacity")
        assert shown.returncode == 0, shown.stderr
        assert "queue (postgresql://gp@127.0.0.1:" in shown.stdout, shown.stdout
        assert "UNAVAILABLE: the capacity queue at" in shown.stdout, shown.stdout
        assert PASSWORD not in shown.stdout
        assert PASSWORD not in str(cap) and PASSWORD not in str(body)
    finally:
        server.stop()
    assert PASSWORD not in server.log.read_text()
