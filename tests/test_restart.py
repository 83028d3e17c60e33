"""Session records survive a server restart (SQLite at db_path): a paused session is listed and
resumes after a real ``jupyter server`` process was stopped and started again."""

from __future__ import annotations

import pytest

from tests.servers import READBACK, STATE, Server, nodes


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path)
    yield srv
    srv.stop()


def test_paused_session_is_listed_and_resumes_after_a_restart(server):
    # Given a notebook whose kernel holds a tensor and a string, paused by the user
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    ck = server.pause(s["id"])["checkpoint"]["id"]

    # When the server is stopped (SIGTERM) and started again, on another port
    assert server.stop() == 0
    server.start()

    # Then the session is listed under the same id, still paused, with the same checkpoint
    again = server.sessions()[s["id"]]
    assert again["state"] == "paused" and again["kernel_id"] is None, again
    assert again["path"] == "nb.ipynb" and again["checkpoint"]["id"] == ck
    code, body = server.api("GET", f"gpu-pause/api/events?session_id={s['id']}")
    assert code == 200 and "paused" in [e["type"] for e in body["events"]]

    # When the user resumes it
    back = server.resume(s["id"])

    # Then a new kernel holds the notebook's values, and the notebook is attached to it
    kid = back["kernel_id"]
    assert kid and kid != s["kernel_id"] and back["checkpoint"]["id"] == ck
    assert server.run(kid, READBACK).strip() == "45.0 hi"
    code, js = server.api("GET", "api/sessions")
    assert code == 200
    assert [(x["path"], x["kernel"]["id"]) for x in js] == [("nb.ipynb", kid)]


def test_sessions_running_at_shutdown_after_a_restart(server):
    # Given one notebook that never paused and one that paused, resumed and runs again
    server.start()
    fresh = server.open_notebook("fresh.ipynb")
    server.run(fresh["kernel_id"], STATE)
    cycled = server.open_notebook("cycled.ipynb")
    server.run(cycled["kernel_id"], STATE)
    ck = server.pause(cycled["id"])["checkpoint"]["id"]
    kid = server.resume(cycled["id"])["kernel_id"]
    server.run(kid, "msg = 'changed after the checkpoint'")
    before = server.sessions()
    assert before[fresh["id"]]["state"] in ("active", "idle")
    assert before[cycled["id"]]["state"] in ("active", "idle")

    # When the server stops (its kernels end with it) and starts again
    assert server.stop() == 0
    server.start()

    # Then the never-paused session is gone: it had no checkpoint to come back from
    after = server.sessions()
    assert fresh["id"] not in after
    assert "fresh.ipynb" not in [s["path"] for s in after.values()]

    # And the other is paused at its last checkpoint, saying its kernel ended outside the tool
    s = after[cycled["id"]]
    assert s["state"] == "paused" and s["kernel_id"] is None, s
    assert s["checkpoint"]["id"] == ck
    assert "ended outside jupyter_gpu_pause" in s["message"] and ck in s["message"]

    # And it resumes from that checkpoint (the later change is, as the message says, lost)
    back = server.resume(cycled["id"])
    assert server.run(back["kernel_id"], READBACK).strip() == "45.0 hi"


def test_unreadable_records_make_the_api_say_so_and_change_nothing(server):
    # Given a records database that is not a database (a disk fault, a bad copy)
    db = server.tmp / "records.sqlite"
    garbage = b"not a sqlite file\n" * 64
    db.write_bytes(garbage)

    # When the server starts
    server.start()

    # Then every call of our API answers 503 naming the records, instead of an empty list
    # that would tell users their paused sessions are gone
    code, body = server.api("GET", "gpu-pause/api/sessions")
    assert code == 503, body
    assert body["reason"] == "not-started"
    assert "could not load its records" in body["message"] and "db_path" in body["message"]
    code, body = server.api("POST", "gpu-pause/api/sessions/0123abcd/pause")
    assert code == 503 and body["reason"] == "not-started"

    # And Jupyter itself keeps working: notebooks still open and run
    notebook = {"path": "nb.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    code, js = server.api("POST", "api/sessions", notebook)
    assert code == 201, js
    assert server.run(js["kernel"]["id"], "print(6 * 7)").strip() == "42"

    # And the records file is left exactly as it was, for an administrator to inspect
    assert db.read_bytes() == garbage
    assert "could not load its records" in server.log_tail()


def _lose_records(server) -> None:
    for suffix in ("", "-wal", "-shm"):
        (server.tmp / f"records.sqlite{suffix}").unlink(missing_ok=True)


def test_lost_records_the_store_brings_paused_sessions_back(server, tmp_path):
    # Given three notebooks (one in a folder), each paused with its own values
    server.start()
    paths = ["a.ipynb", "b.ipynb", "exp/c.ipynb"]
    (server.root / "exp").mkdir()
    paused = {}
    for i, path in enumerate(paths):
        s = server.open_notebook(path)
        server.run(s["kernel_id"], f"{STATE}; n = {i}")
        paused[s["id"]] = (path, server.pause(s["id"])["checkpoint"]["id"])

    # When the server stops and its records database is lost (a new pod, a wiped home)
    assert server.stop() == 0
    _lose_records(server)
    server.start()

    # Then all three are listed again, paused at the same checkpoints, saying where they
    # came from
    server.wait_log("store read: 3 session(s) brought back")
    listed = server.sessions()
    assert {sid: (s["path"], s["checkpoint"]["id"]) for sid, s in listed.items()} == paused
    for sid, s in listed.items():
        assert s["state"] == "paused" and s["kernel_name"] == "python3", s
        assert "Found in the store" in s["message"]
        code, body = server.api("GET", f"gpu-pause/api/events?session_id={sid}")
        assert [e["type"] for e in body["events"]] == ["recovered"]

    # And every one resumes with its own values, into its notebook
    for i, (sid, (path, _)) in enumerate(sorted(paused.items(), key=lambda x: x[1][0])):
        back = server.resume(sid)
        assert server.run(back["kernel_id"], "print(n, msg)").strip() == f"{i} hi"
        code, js = server.api("GET", "api/sessions")
        assert (path, back["kernel_id"]) in [(x["path"], x["kernel"]["id"]) for x in js]

    # And another user's server sharing the store (its own root and records) leaves them
    # alone
    other = Server(
        tmp_path / "other",
        args=(
            f"--GpuPauseApp.store_url={server.tmp / 'store'}",
            f"--GpuPauseApp.secret_file={server.tmp / 'secret'}",
            f"--GpuPauseApp.db_path={tmp_path / 'other' / 'records.sqlite'}",
        ),
        own_paths=False,
    )
    try:
        other.start()
        other.wait_log("store read: 0 session(s) brought back from it, 3 of other servers")
        assert other.sessions() == {}
    finally:
        other.stop()


def test_checkpoints_deleted_by_hand_and_discarded_sessions(server):
    # Given two paused notebooks; the user discards one keeping its checkpoints
    server.start()
    gone = server.open_notebook("gone.ipynb")
    server.run(gone["kernel_id"], STATE)
    ck = server.pause(gone["id"])["checkpoint"]["id"]
    kept = server.open_notebook("kept.ipynb")
    server.run(kept["kernel_id"], STATE)
    server.pause(kept["id"])
    code, _ = server.api("DELETE", f"gpu-pause/api/sessions/{kept['id']}")
    assert code == 204
    # And someone deletes the other's checkpoints from the store by hand
    for manifest in (server.tmp / "store" / "v1" / "sessions" / gone["id"]).glob("*.json"):
        manifest.unlink()

    # When the server restarts
    assert server.stop() == 0
    server.start()
    server.wait_log("store read:")

    # Then the session whose checkpoints went is shown failed, saying so, not resumable
    s = server.wait_state(gone["id"], states=("failed",))
    assert s["error"]["reason"] == "checkpoints-gone" and ck in s["error"]["message"]
    assert "deleted outside jupyter_gpu_pause" in s["message"]
    code, err = server.api("POST", f"gpu-pause/api/sessions/{gone['id']}/resume")
    assert code == 409 and err["reason"] == "wrong-state", err
    assert s["checkpoint"] is None  # so the panel offers no Resume
    assert server.sessions()[gone["id"]]["state"] == "failed"
    # And the user can discard it
    code, _ = server.api("DELETE", f"gpu-pause/api/sessions/{gone['id']}?delete_checkpoints=true")
    assert code == 204
    # And the discarded one stays discarded although its checkpoints are still stored
    assert kept["id"] not in server.sessions()
    assert list((server.tmp / "store" / "v1" / "sessions" / kept["id"]).glob("*.json"))


def test_a_crashed_servers_running_session_resumes_at_once(server):
    # Given a session resumed on this server, so that the queue holds its claim
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    ck = server.pause(s["id"])["checkpoint"]["id"]
    server.resume(s["id"])

    # When the server is SIGKILLed (no cleanup: the claim stays in the queue, its lease
    # running) and started again on another port
    server.kill()
    server.start()

    # Then the session is paused at its checkpoint
    again = server.wait_until(
        lambda: (x := server.sessions().get(s["id"])) and x["state"] == "paused" and x,
        "the session listed paused",
    )
    assert again["checkpoint"]["id"] == ck and again["running_elsewhere"] is None, again

    # And the first resume is accepted at once, not refused for the dead server's claim
    code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume")
    assert code == 202, body
    back = server.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert server.run(back["kernel_id"], READBACK).strip() == "45.0 hi"

    # And the log says why the claim went
    assert "on this machine is gone" in server.wait_log("is gone: its claims")


def test_a_session_of_a_crashed_server_resumes_at_once_on_another_of_this_machine(tmp_path):
    # Given two servers of one machine sharing a store, a key and the machine's queue folder
    # (each with its own records), and a session resumed on the first (the queue holds its
    # claim for it)
    shared = f"""
c.GpuPauseApp.store_url = {str(tmp_path / "store")!r}
c.GpuPauseApp.secret_file = {str(tmp_path / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {str(tmp_path / "queue")!r}
c.GpuPauseApp.store_rescan_interval = 1.0
"""
    with nodes(tmp_path, shared) as (first, second):
        s = first.open_notebook("nb.ipynb")
        first.run(s["kernel_id"], STATE)
        first.pause(s["id"])
        first.resume(s["id"])
        second.wait_until(
            lambda: (x := second.sessions().get(s["id"])) and x["running_elsewhere"],
            "the second server seeing the session run on the first",
        )

        # When the first server is SIGKILLed, its lease (30 s) still running
        first.kill()

        # Then a resume there is accepted at once (not refused for the dead server's claim)
        code, body = second.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume")
        assert code == 202, body
        assert body["running_elsewhere"] is None, body

        # And it brings the values back
        back = second.wait_state(s["id"])
        assert back["state"] in ("active", "idle"), back
        assert second.run(back["kernel_id"], READBACK).strip() == "45.0 hi"


def test_a_server_killed_mid_pause_resumes_its_session_at_once_after_a_restart(server):
    # Given a notebook with values, being paused
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
    assert code == 202, body

    # When the server is SIGKILLed as soon as the checkpoint's manifest is in the store (before
    # the kernel is shut down and the session's record says paused)
    manifests = server.tmp / "store" / "v1" / "sessions" / s["id"]
    server.wait_until(lambda: list(manifests.glob("*.json")), "the checkpoint's manifest")
    server.kill()

    # And started again on another port
    server.start()

    # Then the session is listed paused at that checkpoint
    (manifest,) = manifests.glob("*.json")
    again = server.wait_until(
        lambda: (x := server.sessions().get(s["id"])) and x["state"] == "paused" and x,
        "the session listed paused",
    )
    assert again["checkpoint"]["id"] == manifest.stem, again

    # And the first resume is accepted at once and brings the values back
    code, body = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume")
    assert code == 202, body
    back = server.wait_state(s["id"])
    assert back["state"] in ("active", "idle"), back
    assert server.run(back["kernel_id"], READBACK).strip() == "45.0 hi"
