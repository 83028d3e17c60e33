"""``c.GpuPauseApp.stop_server_when_paused`` against a real JupyterHub (docs/deploy/): a user
server that stops itself once its GPU sessions are paused, and lists them on its next start.

One Hub for the module: starting JupyterHub, its proxy and a single-user server costs seconds.
"""

from __future__ import annotations

import json
import signal
import sys

import psutil
import pytest

from jupyter_gpu_pause.server.integrations.hub import HubServer
from tests.hubs import DEFAULT_SCOPES, STOP_SCOPES, WAIT, Hub
from tests.servers import Server

STATE = "import torch; w = torch.arange(10.); msg = 'kept across a stop'"
READBACK = "print(w.sum().item(), msg)"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    user_config = f"""
c.ServerApp.jpserver_extensions = {{"jupyter_gpu_pause": True}}
c.GpuPauseApp.stop_server_when_paused = True
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.store_url = {str(tmp / "store")!r}
c.GpuPauseApp.db_path = {str(tmp / "records.sqlite")!r}
c.GpuPauseApp.secret_file = {str(tmp / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {str(tmp / "queue")!r}
c.GpuPauseApp.warm_kernels = False
"""
    hub = Hub(tmp, user_config)
    # a kernelspec that is no GPU one (gpu_kernelspecs above does not match it)
    cpu = tmp / "user-data" / "kernels" / "cpu-python"
    cpu.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (cpu / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "CPU Python", "language": "python"})
    )
    hub.start()
    yield hub
    hub.stop()


def _open_notebook(hub: Hub, path: str, kernel: str = "python3") -> dict:
    code, js = hub.user_api(
        "POST",
        "api/sessions",
        {"path": path, "type": "notebook", "name": path, "kernel": {"name": kernel}},
    )
    assert code == 201, js
    code, body = hub.user_api("GET", f"gpu-pause/api/sessions?kernel_id={js['kernel']['id']}")
    assert code == 200, body
    (s,) = body["sessions"]
    return s


def _session(hub: Hub, sid: str) -> dict:
    code, s = hub.user_api("GET", f"gpu-pause/api/sessions/{sid}")
    assert code == 200, s
    return s


def _events(hub: Hub, sid: str) -> list[dict]:
    code, body = hub.user_api("GET", f"gpu-pause/api/events?session_id={sid}")
    assert code == 200, body
    return body["events"]


def _pause(hub: Hub, sid: str) -> None:
    code, body = hub.user_api("POST", f"gpu-pause/api/sessions/{sid}/pause")
    assert code == 202, body


def _resume(hub: Hub, sid: str) -> dict:
    """Resume a session; the session once the resume has ended (resumed or failed)."""
    code, body = hub.user_api("POST", f"gpu-pause/api/sessions/{sid}/resume")
    assert code == 202, body

    def ended():
        s = _session(hub, sid)
        return s if s["state"] in ("active", "idle", "failed") else None

    return hub.wait_until(ended, "the resume's end")


def _kernel_busy(hub: Hub, kernel_id: str) -> bool:
    code, model = hub.user_api("GET", f"api/kernels/{kernel_id}")
    assert code == 200, model
    return model["execution_state"] == "busy"


def _exited(proc: psutil.Process) -> bool:
    """Whether a process has ended; a child of the Hub stays a zombie until the Hub's next
    poll reaps it (up to Spawner.poll_interval, 30 s), which is not the server's doing."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _fresh_server(hub: Hub, scopes: list[str]) -> None:
    """The user's server, started anew with its token holding ``scopes``."""
    hub.stop_server()
    hub.set_token_scopes(scopes)
    hub.start_server()


def test_the_server_stops_once_its_gpu_session_is_paused_and_resumes_after_a_restart(hub):
    # Given the user's server, started through the Hub, with a GPU notebook holding state
    mark = hub.log_mark()
    _fresh_server(hub, STOP_SCOPES)
    s = _open_notebook(hub, "train.ipynb")
    hub.run(s["kernel_id"], STATE)

    # When the user pauses it through our REST API
    _pause(hub, s["id"])

    # Then the server asks the Hub to stop it, and the Hub reports it stopped
    hub.wait_until(lambda: hub.servers() == {}, "the user's server stopped")
    log = hub.log_since(mark)
    assert "stop_server_when_paused: Every GPU session is paused" in log, log
    assert "may not stop it" not in log, log  # the token's scope was enough

    # When the user starts the server again
    hub.start_server()

    # Then the session is listed, paused, with its checkpoint
    back = _session(hub, s["id"])
    assert back["state"] == "paused", back
    assert back["checkpoint"], back
    # and its events say why the server stopped
    types = [e["type"] for e in _events(hub, s["id"])]
    assert types[-2:] == ["paused", "server_stop"], types

    # When it is resumed
    resumed = _resume(hub, s["id"])

    # Then the variables are back in the new kernel, and the server keeps running
    assert resumed["state"] in ("active", "idle"), resumed
    assert hub.run(resumed["kernel_id"], READBACK).strip() == "45.0 kept across a stop"
    assert hub.servers().get("", {}).get("ready")


def test_a_running_cell_keeps_the_server_and_idle_notebooks_are_paused_with_it(hub, tmp_path):
    # Given a GPU notebook, an idle CPU notebook with state, and a CPU notebook running a cell
    _fresh_server(hub, STOP_SCOPES)
    gpu = _open_notebook(hub, "gpu.ipynb")
    idle = _open_notebook(hub, "notes.ipynb", kernel="cpu-python")
    hub.run(idle["kernel_id"], "note = 'cpu side'")
    busy = _open_notebook(hub, "etl.ipynb", kernel="cpu-python")
    flag = tmp_path / "cell-may-end"
    cell = hub.client(busy["kernel_id"])
    try:
        msg_id = cell.execute(
            f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)"
        )
        hub.wait_until(lambda: _kernel_busy(hub, busy["kernel_id"]), "the cell running")

        # When the GPU notebook is paused
        mark = hub.log_mark()
        _pause(hub, gpu["id"])

        # Then the server stays up, saying which cell holds it, and nothing else is paused
        hub.wait_log("not stopping alice's server yet: a cell is running (etl.ipynb)", mark)
        assert hub.servers()[""]["ready"]
        assert _session(hub, idle["id"])["state"] in ("active", "idle")

        # When the cell ends and the user pauses that notebook too
        flag.touch()
        reply = cell.get_shell_msg(timeout=WAIT)
        assert reply["parent_header"]["msg_id"] == msg_id, reply
    finally:
        cell.stop_channels()
    _pause(hub, busy["id"])

    # Then the idle notebook is paused as well (its state saved), and the server stops
    hub.wait_until(lambda: hub.servers() == {}, "the user's server stopped")
    hub.start_server()
    assert {_session(hub, x["id"])["state"] for x in (gpu, idle, busy)} == {"paused"}
    paused = [e for e in _events(hub, idle["id"]) if e["type"] == "paused"]
    assert paused[-1]["reason"] == "stop-server", paused
    back = _resume(hub, idle["id"])
    assert back["state"] in ("active", "idle"), back
    assert hub.run(back["kernel_id"], "print(note)").strip() == "cpu side"


def test_a_hub_that_refuses_the_stop_leaves_the_server_serving(hub):
    # Given a server whose token has JupyterHub's default scopes (no delete:servers)
    mark = hub.log_mark()
    try:
        _fresh_server(hub, DEFAULT_SCOPES)
        # Then its start says the setting cannot work, naming the scope to add
        line = hub.wait_log("may not stop it", mark)
        assert "'delete:servers!server' to c.Spawner.server_token_scopes" in line, line

        # When its GPU notebook is paused
        s = _open_notebook(hub, "refused.ipynb")
        _pause(hub, s["id"])

        # Then the refusal is logged and recorded, and the server keeps serving, paused
        line = hub.wait_log("JupyterHub did not stop alice's server (HTTP 403", mark)
        assert "nothing is lost" in line, line

        def types():
            return [e["type"] for e in _events(hub, s["id"])]

        hub.wait_until(lambda: types()[-1] == "server_stop_failed", "server_stop_failed")
        assert types()[-3:] == ["paused", "server_stop", "server_stop_failed"], types()
        assert hub.servers()[""]["ready"]
        assert _session(hub, s["id"])["state"] == "paused"
    finally:
        hub.set_token_scopes(STOP_SCOPES)


def test_the_shutdown_checkpoint_of_a_stopping_server_does_not_ask_for_a_stop(hub):
    # Given a server with a running GPU notebook
    _fresh_server(hub, STOP_SCOPES)
    s = _open_notebook(hub, "shutdown.ipynb")
    hub.run(s["kernel_id"], "kept = 'by the shutdown checkpoint'")

    # When the server gets SIGTERM (a pod deleted by Kubernetes, an eviction)
    mark = hub.log_mark()
    server = hub.server_process()
    server.send_signal(signal.SIGTERM)
    hub.wait_until(lambda: _exited(server), "the server's exit")

    # Then its shutdown checkpoint pauses the notebook, and no stop of its own follows it
    hub.stop_server()  # the Hub learns the server is gone
    hub.start_server()
    events = _events(hub, s["id"])
    assert [(e["type"], e["reason"]) for e in events][-1] == ("paused", "shutdown"), events
    log = hub.log_since(mark)
    assert "asking JupyterHub to stop" not in log, log


def test_a_stop_through_the_hub_checkpoints_the_running_notebook_first(hub):
    # Given the user's server, started by the Hub's local spawner (without a terminal), with
    # a GPU notebook holding state
    _fresh_server(hub, STOP_SCOPES)
    s = _open_notebook(hub, "stopped.ipynb")
    hub.run(s["kernel_id"], STATE)

    # When the Hub stops the server (the user's Stop, an admin, the idle culler): SIGINT
    mark = hub.log_mark()
    hub.stop_server()

    # Then the server stopped as on SIGTERM, its shutdown checkpoint pausing the notebook
    log = hub.log_since(mark)
    assert "received signal 2, stopping" in log, log
    assert "received signal 15" not in log, log  # the SIGINT did it, not the Hub's SIGTERM
    assert "shutdown checkpoint: 1 paused" in log, log
    assert "Interrupted..." not in log, log  # Python's default: exit without any cleanup
    assert "asking JupyterHub to stop" not in log, log

    # When the user starts the server again
    hub.start_server()

    # Then the notebook is listed paused, by the shutdown, at a checkpoint that verifies
    back = _session(hub, s["id"])
    assert back["state"] == "paused", back
    events = _events(hub, s["id"])
    assert [(e["type"], e["reason"]) for e in events][-1] == ("paused", "shutdown"), events
    code, body = hub.user_api("GET", f"gpu-pause/api/sessions/{s['id']}/checkpoints")
    assert code == 200, body
    (ck,) = body["checkpoints"]
    assert (ck["id"], ck["valid"]) == (back["checkpoint"]["id"], True), ck

    # And it resumes with its values
    resumed = _resume(hub, s["id"])
    assert resumed["state"] in ("active", "idle"), resumed
    assert hub.run(resumed["kernel_id"], READBACK).strip() == "45.0 kept across a stop"


def test_true_outside_jupyterhub_stops_the_server_at_start_naming_the_setting(
    tmp_path, monkeypatch
):
    # Given a plain jupyter server (no JUPYTERHUB_* variables) with the setting on
    for key in ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_USER"):
        monkeypatch.delenv(key, raising=False)
    server = Server(tmp_path, config="c.GpuPauseApp.stop_server_when_paused = True\n")
    # When it starts
    server.launch()
    # Then it exits with a failure, naming the setting and what is missing
    assert server.exit_status() != 0
    log = server.log_tail()
    assert "bad configuration: GpuPauseApp.stop_server_when_paused = True" in log, log
    assert "JUPYTERHUB_API_TOKEN, JUPYTERHUB_API_URL, JUPYTERHUB_USER are not set" in log, log


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("", "http://hub:8081/hub/api/users/al%40ice/server"),
        ("gpu 1", "http://hub:8081/hub/api/users/al%40ice/servers/gpu%201"),
    ],
)
def test_a_named_server_stops_its_own_named_server(name, url):
    env = {
        "JUPYTERHUB_API_URL": "http://hub:8081/hub/api/",
        "JUPYTERHUB_USER": "al@ice",
        "JUPYTERHUB_API_TOKEN": "secret-token",
        "JUPYTERHUB_SERVER_NAME": name,
    }
    hub = HubServer.from_env(env)
    assert hub.server_url == url
    assert "secret-token" not in repr(hub)  # never in a log line or a traceback


@pytest.mark.parametrize(
    ("scopes", "may"),
    [
        (["delete:servers!server=alice/"], True),
        (["delete:servers!user=alice"], True),
        (["servers!user=alice"], True),
        (["admin:servers"], True),
        (["delete:servers!server=alice/other"], False),
        (["delete:servers!user=bob"], False),
        (["access:servers!server=alice/", "users:activity!user=alice"], False),  # the default
    ],
)
def test_the_start_check_knows_which_scopes_may_stop_the_server(scopes, may):
    hub = HubServer("http://hub/hub/api", "alice", "", "t")
    assert hub.may_stop(scopes) is may
