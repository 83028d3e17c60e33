"""Pausing (and cancelling) on a user's behalf: an admin's console, a JupyterHub service, pauses
alice's session with a word for her; she learns who did it and why, and loses no variable.

Who acted comes from JupyterHub's word on the caller (``server/web/on_behalf.py``), checked
here against a real Hub: its ``admin-script`` service token (``access:servers``) is a service
caller, a token of alice is the server's own user, and carol, a Hub user granted
``access:servers!user=alice``, is an admin acting as herself. Without a Hub (the ``lab``
fixture), the caller is always the server's own user.
"""

from __future__ import annotations

import json

import pytest

from jupyter_gpu_pause.server.state.asker import Asker
from jupyter_gpu_pause.server.state.errors import BadRequest, Forbidden
from jupyter_gpu_pause.server.web.on_behalf import MAX_MESSAGE, asker_of
from tests.http import request
from tests.hubs import WAIT, Hub

STATE = "import torch; w = torch.arange(10.); note = 'kept for alice'"
READBACK = "print(w.sum().item(), note)"
SERVICE = {"kind": "service", "name": "admin-script"}
ALICE = {"kind": "user", "name": "alice"}
CAROL = {"kind": "user", "name": "carol"}


# -- the identity rule, alone -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("caller", "by", "message", "asker"),
    [
        (SERVICE, "carol", "maintenance at 9", Asker("carol", "admin-script", "maintenance at 9")),
        (SERVICE, None, None, Asker("admin-script", "admin-script", None)),
        (SERVICE, " carol ", "  ", Asker("carol", "admin-script", None)),
        (CAROL, None, "sorry", Asker("carol", None, "sorry")),
        (CAROL, "carol", None, Asker("carol", None, None)),
        (ALICE, None, "a note to self", None),
        (None, None, None, None),
    ],
    ids=["service for an admin", "service alone", "blank", "admin user", "admin names herself",
         "own user", "no hub"],
)  # fmt: skip
def test_who_a_request_acts_for(caller, by, message, asker):
    # Given the Hub's word on a caller of alice's server and the body's fields
    # Then the request acts for the admin it names, or for nobody but alice
    assert asker_of(caller, "alice", by, message) == asker


@pytest.mark.parametrize(
    ("caller", "by"),
    [(ALICE, "carol"), (ALICE, "alice"), (None, "carol"), (CAROL, "dave")],
    ids=["own user names an admin", "own user names herself", "no hub", "admin names another"],
)
def test_only_a_service_says_whom_it_acts_for(caller, by):
    # When a user (alice on her own server, or carol) sends a by that is not theirs to give
    with pytest.raises(Forbidden) as e:
        asker_of(caller, "alice", by, None)
    # Then it is refused, saying to leave it out
    assert e.value.reason == "not-on-behalf"
    assert "leave out by" in e.value.message


def test_a_long_message_or_an_empty_name_is_a_bad_request():
    with pytest.raises(BadRequest) as e:
        asker_of(SERVICE, "alice", "carol", "x" * (MAX_MESSAGE + 1))
    assert (e.value.reason, str(MAX_MESSAGE) in e.value.message) == ("bad-message", True)
    assert asker_of(SERVICE, "alice", "carol", "x" * MAX_MESSAGE) is not None
    with pytest.raises(BadRequest):
        asker_of(SERVICE, "alice", "", None)


def test_the_session_is_told_who_paused_it_and_why():
    assert Asker("carol", "svc", "maintenance at 9.").told("Paused") == (
        "Paused by an admin (carol): maintenance at 9. "
    )
    assert Asker("carol").told("Resume cancelled") == "Resume cancelled by an admin (carol). "
    assert Asker("carol", "svc", "m").detail() == {
        "by": "carol",
        "via": "svc",
        "admin_message": "m",
    }


# -- without a Hub: the server's own user --------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "body", "status", "reason"),
    [
        ("pause", {"by": "carol"}, 403, "not-on-behalf"),
        ("cancel", {"by": "carol", "message": "m"}, 403, "not-on-behalf"),
        ("pause", {"message": "x" * (MAX_MESSAGE + 1)}, 400, "bad-message"),
        ("pause", {"message": 5}, 400, "bad-field"),
        ("pause", {"reason": "admin"}, 400, "unknown-field"),
    ],
    ids=["by", "cancel by", "long message", "not a string", "unknown field"],
)
async def test_the_own_user_pauses_as_herself(lab, action, body, status, reason):
    # Given a notebook of the server's own user
    s = await lab.open_notebook()
    # When she asks with a by (or a wrong body)
    code, answer = await lab.api("POST", f"sessions/{s['id']}/{action}", body)
    # Then it is refused, and nothing happened to the session
    assert (code, answer["reason"]) == (status, reason), answer
    assert (await lab.session(s["id"]))["state"] in ("active", "idle")
    assert await lab.events(s["id"]) == []


async def test_a_message_alone_is_the_users_own_pause_and_the_event_says_no_admin(lab):
    # Given a notebook with state
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 41")
    # When its user pauses it with a message
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause", {"message": "lunch"})
    assert code == 202, body
    paused = await lab.wait_state(s["id"])
    # Then it is her own pause: no admin named, in the event or the message
    assert paused["state"] == "paused", paused
    event = await lab.event(s["id"], "paused")
    assert event["reason"] == "user"
    assert {k: event["detail"][k] for k in ("by", "via", "admin_message")} == dict.fromkeys(
        ("by", "via", "admin_message")
    )
    assert paused["message"].startswith("Paused — "), paused["message"]


async def test_an_admin_joining_the_users_pause_is_named(lab, tmp_path):
    # Given alice's pause waiting for her running cell
    s = await lab.open_notebook()
    flag = tmp_path / "cell-may-end"
    await lab.send_cell(
        s["kernel_id"],
        f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)",
    )
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert (code, body["state"]) == (202, "pausing"), body
    # When an admin asks for the same pause, with a word for her
    lc = lab.app.web_app.settings["gpu_pause"]
    carol = Asker("carol", "gpu-pause", "the node is drained at 9")
    joined = await lc.pause(s["id"], reason="admin", asker=carol)
    assert joined.state == "pausing"
    flag.touch()
    # Then the pause that ends is told as the admin's too
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    assert paused["message"].startswith("Paused by an admin (carol): the node is drained at 9. ")
    detail = (await lab.event(s["id"], "paused"))["detail"]
    assert (detail["by"], detail["via"], detail["admin_message"]) == (
        "carol",
        "gpu-pause",
        "the node is drained at 9",
    )
    # And asked again once paused, it is left as it is
    again = await lc.pause(s["id"], reason="admin", asker=Asker("dave"))
    assert again.state == "paused" and again.message == paused["message"]


# -- against a real JupyterHub --------------------------------------------------------------------
@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    user_config = f"""
c.ServerApp.jpserver_extensions = {{"jupyter_gpu_pause": True}}
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.store_url = {str(tmp / "store")!r}
c.GpuPauseApp.db_path = {str(tmp / "records.sqlite")!r}
c.GpuPauseApp.secret_file = {str(tmp / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {str(tmp / "queue")!r}
c.GpuPauseApp.warm_kernels = False
"""
    hub = Hub(tmp, user_config)
    # carol: a Hub user who may reach alice's server (an admin); the admin service may make
    # tokens for both, as a test needs them
    with open(tmp / "jupyterhub_config.py", "a") as config:
        config.write(
            """
c.Authenticator.allowed_users = {"alice", "carol"}
c.JupyterHub.load_roles.append(
    {"name": "alice-admins", "scopes": ["access:servers!user=alice"], "users": ["carol"]}
)
c.JupyterHub.load_roles.append(
    {"name": "token-maker", "scopes": ["tokens"], "services": ["admin-script"]}
)
"""
        )
    hub.start()
    hub.start_server()
    yield hub
    hub.stop()


def _token_of(hub: Hub, user: str) -> str:
    code, body = hub.api("POST", f"hub/api/users/{user}/tokens", {"note": "test_on_behalf"})
    assert code in (200, 201), body
    return body["token"]


def _as(hub: Hub, token: str, method: str, path: str, body=None):
    """alice's server through the proxy, with ``token``: ``(status, JSON)``."""
    code, raw = request(f"{hub.url}/user/{hub.user}/gpu-pause/api/{path}", token, method, body)
    return code, json.loads(raw) if raw else None


def _open_notebook(hub: Hub, path: str) -> dict:
    code, js = hub.user_api(
        "POST",
        "api/sessions",
        {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
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


def _events(hub: Hub, sid: str, type_: str | None = None) -> list[dict]:
    code, body = hub.user_api("GET", f"gpu-pause/api/events?session_id={sid}")
    assert code == 200, body
    return [e for e in body["events"] if type_ is None or e["type"] == type_]


def _kernel_busy(hub: Hub, kernel_id: str) -> bool:
    code, model = hub.user_api("GET", f"api/kernels/{kernel_id}")
    assert code == 200, model
    return model["execution_state"] == "busy"


def _ended(hub: Hub, sid: str, states: tuple[str, ...]) -> dict:
    def ended():
        s = _session(hub, sid)
        return s if s["state"] in (*states, "failed") else None

    return hub.wait_until(ended, f"the session {'/'.join(states)}")


def _on_behalf(event: dict) -> tuple:
    d = event["detail"]
    return event["reason"], d.get("by"), d.get("via"), d.get("admin_message")


def test_an_admin_service_pauses_for_carol_and_alice_keeps_every_variable(hub):
    # Given alice's GPU notebook holding state
    s = _open_notebook(hub, "train.ipynb")
    hub.run(s["kernel_id"], STATE)

    # When the admin console (a Hub service) pauses it for carol, with a word for alice
    body = {"message": "maintenance at 9", "by": "carol"}
    code, answer = hub.user_api("POST", f"gpu-pause/api/sessions/{s['id']}/pause", body)
    assert code == 202, answer

    # Then the session says who paused it and why, before the usual account of the pause
    paused = _ended(hub, s["id"], ("paused",))
    assert paused["state"] == "paused", paused
    assert paused["message"].startswith("Paused by an admin (carol): maintenance at 9. Paused — ")
    # and its event names carol, the service she acted through, and her message
    (event,) = _events(hub, s["id"], "paused")
    assert _on_behalf(event) == ("admin", "carol", "admin-script", "maintenance at 9")

    # When alice resumes it
    code, answer = hub.user_api("POST", f"gpu-pause/api/sessions/{s['id']}/resume")
    assert code == 202, answer
    back = _ended(hub, s["id"], ("active", "idle"))

    # Then every variable is back
    assert back["state"] in ("active", "idle"), back
    assert hub.run(back["kernel_id"], READBACK).strip() == "45.0 kept for alice"


def test_alice_cannot_name_an_admin_and_her_session_is_unchanged(hub):
    # Given alice's notebook, and a token of alice herself
    s = _open_notebook(hub, "own.ipynb")
    alice = _token_of(hub, "alice")
    before = _events(hub, s["id"])

    # When alice, on her own server, asks for a pause naming carol
    code, answer = _as(hub, alice, "POST", f"sessions/{s['id']}/pause", {"by": "carol"})

    # Then it is refused, saying why, and nothing happened to the session
    assert (code, answer["reason"]) == (403, "not-on-behalf"), answer
    assert "leave out by" in answer["message"]
    assert _session(hub, s["id"])["state"] in ("active", "idle")
    assert _events(hub, s["id"]) == before


def test_a_cancel_on_behalf_of_a_pause_waiting_for_a_cell_names_the_admin(hub, tmp_path):
    # Given alice's own pause of a notebook whose cell is running: it waits in pausing
    s = _open_notebook(hub, "etl.ipynb")
    alice, carol = _token_of(hub, "alice"), _token_of(hub, "carol")
    flag = tmp_path / "cell-may-end"
    cell = hub.client(s["kernel_id"])
    try:
        msg_id = cell.execute(
            f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)"
        )
        hub.wait_until(lambda: _kernel_busy(hub, s["kernel_id"]), "the cell running")
        code, answer = _as(hub, alice, "POST", f"sessions/{s['id']}/pause")
        assert (code, answer["state"]) == (202, "pausing"), answer

        # When carol, a Hub user who may reach alice's server, names someone else
        code, answer = _as(hub, carol, "POST", f"sessions/{s['id']}/cancel", {"by": "dave"})
        # Then she is refused, and the pause goes on
        assert (code, answer["reason"]) == (403, "not-on-behalf"), answer
        assert _session(hub, s["id"])["state"] == "pausing"

        # When the admin service cancels it for carol, saying why
        body = {"by": "carol", "message": "wrong notebook"}
        code, answer = hub.user_api("POST", f"gpu-pause/api/sessions/{s['id']}/cancel", body)

        # Then the kernel runs on, and the session and the event say who cancelled it
        assert code == 200, answer
        assert answer["state"] == "active", answer
        assert (
            "Pause cancelled by an admin (carol): wrong notebook. The kernel was not touched"
            in answer["message"]
        ), answer
        (event,) = _events(hub, s["id"], "cancelled")
        assert _on_behalf(event) == ("admin", "carol", "admin-script", "wrong notebook")
        assert event["detail"]["operation"] == "pause"
    finally:
        flag.touch()
        reply = cell.get_shell_msg(timeout=WAIT)
        cell.stop_channels()
    assert reply["parent_header"]["msg_id"] == msg_id, reply

    # When carol pauses it herself, as herself
    code, answer = _as(hub, carol, "POST", f"sessions/{s['id']}/pause", {"message": "sorry"})
    assert code == 202, answer

    # Then the pause is hers, through no service
    paused = _ended(hub, s["id"], ("paused",))
    assert paused["message"].startswith("Paused by an admin (carol): sorry. "), paused
    (event,) = _events(hub, s["id"], "paused")
    assert _on_behalf(event) == ("admin", "carol", None, "sorry")
