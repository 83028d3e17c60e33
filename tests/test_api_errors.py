"""Refused requests: no token, an authorizer that says no, bad input, unknown ids, wrong state,
kernels that cannot be paused. Every refusal must be a clear JSON error and change nothing."""

from __future__ import annotations

import json
import sys
from urllib.parse import urlencode

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.utils import url_path_join

UNKNOWN = "00000000-0000-4000-8000-000000000000"

# (method, path under gpu-pause/api/ with {sid} for a real session id, query, JSON body)
ENDPOINTS = [
    ("GET", "sessions", None, None),
    ("GET", "sessions", {"path": "nb.ipynb"}, None),
    ("GET", "sessions", {"kernel_id": "{kid}"}, None),
    ("GET", "sessions/{sid}", None, None),
    ("DELETE", "sessions/{sid}", None, None),
    ("DELETE", "sessions/{sid}", {"delete_checkpoints": "true"}, None),
    ("POST", "sessions/{sid}/pause", None, {}),
    ("POST", "sessions/{sid}/resume", None, {}),
    ("POST", "sessions/{sid}/resume", None, {"device": "cpu"}),
    ("POST", "sessions/{sid}/cancel", None, {}),
    ("POST", "sessions/{sid}/check", None, {}),
    ("GET", "sessions/{sid}/checkpoints", None, None),
    ("GET", "capacity", None, None),
    ("GET", "events", None, None),
    ("GET", "events", {"since": "2000-01-01T00:00:00Z", "session_id": "{sid}"}, None),
    ("GET", "report", None, None),
    ("GET", "report", {"since": "7d"}, None),
]
ENDPOINT_IDS = [
    f"{m} {p} {q or ''}{'' if b is None else json.dumps(b)}" for m, p, q, b in ENDPOINTS
]


class DenyGpuPause(Authorizer):
    """Allows everything except this extension's resource."""

    def is_authorized(self, handler, user, action, resource):
        return resource != "gpu_pause"


@pytest.fixture
def authorizer():
    return None  # tests that need one parametrize this fixture


@pytest.fixture
def jp_server_config(gp_config, authorizer):
    server = {"jpserver_extensions": {"jupyter_gpu_pause": True}}
    if authorizer is not None:
        server["authorizer_class"] = authorizer
    return {"ServerApp": server, "GpuPauseApp": gp_config}


def fill(value, s):
    if isinstance(value, dict):
        return {k: fill(v, s) for k, v in value.items()}
    if isinstance(value, str):
        return value.replace("{sid}", s["id"]).replace("{kid}", s["kernel_id"] or "")
    return value


async def send(client, base_url, method, path, params=None, body=None, headers=None):
    """A request with exactly the given headers (jp_fetch would add the token)."""
    url = url_path_join(base_url, "gpu-pause/api", path)
    if params:
        url += "?" + urlencode(params)
    if method == "POST" and body is None:
        body = {}
    r = await client.fetch(
        url,
        method=method,
        body=None if body is None else json.dumps(body),
        headers=headers or {},
        raise_error=False,
        follow_redirects=False,
    )
    return r.code, r.body


def lifecycle(lab):
    return lab.app.web_app.settings["gpu_pause"]


async def assert_untouched(lab, s, store_dir):
    """The session is still there, running its kernel, with no checkpoint and no event."""
    lc = lifecycle(lab)
    await lc.refresh()
    now = lc.sessions[s["id"]]
    assert now.state == "active" and now.kernel_id == s["kernel_id"], now
    assert now.checkpoint is None and now.error is None
    assert lab.kernel_alive(s["kernel_id"])
    assert await lc.events(session_id=s["id"]) == []
    assert not list((store_dir / "v1" / "sessions").glob("*/*.json"))
    assert await lc.list_checkpoints(s["id"]) == []


# -- 1. no token ------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "params", "body"), ENDPOINTS, ids=ENDPOINT_IDS)
async def test_no_token_is_refused(
    lab, http_server_client, jp_base_url, store_dir, method, path, params, body
):
    # Given an open notebook with a running kernel
    s = await lab.open_notebook()
    # When a client without a token (or with a wrong one) calls the endpoint
    for headers in ({}, {"Authorization": "token not-the-token"}):
        code, _ = await send(
            http_server_client, jp_base_url, method, fill(path, s), fill(params, s), body, headers
        )
        # Then it is refused
        assert code in (401, 403), (headers, code)
    # And the session is exactly as it was
    await assert_untouched(lab, s, store_dir)


async def test_no_token_cannot_resume_or_delete_a_paused_session(
    lab, http_server_client, jp_base_url
):
    # Given a paused session with a checkpoint
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 41")
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    # When a client without a token tries to resume it or delete it with its checkpoints
    for method, path, params in [
        ("POST", f"sessions/{s['id']}/resume", None),
        ("DELETE", f"sessions/{s['id']}", {"delete_checkpoints": "true"}),
    ]:
        code, _ = await send(http_server_client, jp_base_url, method, path, params)
        assert code in (401, 403)
    # Then the session is still paused with its checkpoint, and nothing was started
    now = await lab.session(s["id"])
    assert now["state"] == "paused" and now["kernel_id"] is None
    assert now["checkpoint"]["id"] == paused["checkpoint"]["id"]
    code, body = await lab.api("GET", f"sessions/{s['id']}/checkpoints")
    assert [c["id"] for c in body["checkpoints"]] == [paused["checkpoint"]["id"]]
    assert len(lab.app.kernel_manager.list_kernel_ids()) == 0


# -- 2. an authorizer that denies gpu_pause ---------------------------------------------------
async def open_without_gpu_pause_api(lab, path="nb.ipynb") -> dict:
    r = await lab.fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": path, "type": "notebook", "kernel": {"name": "python3"}}),
    )
    kid = json.loads(r.body)["kernel"]["id"]
    (s,) = await lifecycle(lab).list(kernel_id=kid)
    return s


@pytest.mark.parametrize("authorizer", [DenyGpuPause])
@pytest.mark.parametrize(("method", "path", "params", "body"), ENDPOINTS, ids=ENDPOINT_IDS)
async def test_denied_by_authorizer(lab, store_dir, method, path, params, body, authorizer):
    # Given a server whose authorizer denies the resource gpu_pause, and an open notebook
    s = await open_without_gpu_pause_api(lab)
    # When the user (with a valid token) calls the endpoint
    code, err = await lab.api(method, fill(path, s), body=body, params=fill(params, s))
    # Then it answers 403 saying what was not authorized
    assert code == 403, err
    assert "not authorized" in err["message"] and "gpu_pause" in err["message"]
    # And Jupyter's own APIs still work and still show the notebook's kernel
    r = await lab.fetch("api", "sessions")
    assert [x["kernel"]["id"] for x in json.loads(r.body)] == [s["kernel_id"]]
    # And nothing changed
    await assert_untouched(lab, s, store_dir)


# -- 3. bad input -----------------------------------------------------------------------------
# (method, path after sessions/{sid}, raw body or JSON, query, reason, words the message has)
BAD_INPUT = [
    ("POST", "/pause", "not json", None, "bad-json", ["not valid json"]),
    ("POST", "/resume", '{"device": ', None, "bad-json", ["not valid json"]),
    ("POST", "/pause", "[]", None, "bad-json", ["json object"]),
    ("POST", "/resume", '["gpu"]', None, "bad-json", ["json object"]),
    ("POST", "/cancel", "42", None, "bad-json", ["json object"]),
    ("POST", "/check", "not json", None, "bad-json", ["not valid json"]),
    ("POST", "/check", {"capture": "registered"}, None, "unknown-field", ["'capture'"]),
    ("POST", "/pause", {"force": True}, None, "unknown-field", ["'force'"]),
    ("POST", "/resume", {"dev": "gpu"}, None, "unknown-field", ["'dev'", "device"]),
    ("POST", "/cancel", {"now": 1}, None, "unknown-field", ["'now'"]),
    ("POST", "/resume", {"device": 5}, None, "bad-field", ["'device'"]),
    ("POST", "/resume", {"checkpoint_id": 7}, None, "bad-field", ["'checkpoint_id'"]),
    ("POST", "/resume", {"into_kernel": ["k"]}, None, "bad-field", ["'into_kernel'"]),
    ("POST", "/resume", {"device": "tpu"}, None, "bad-device", ["'tpu'", "gpu", "cpu", "any"]),
    ("POST", "/resume", {"checkpoint_id": "nonsense"}, None, "bad-checkpoint-id", ["'nonsense'"]),
    ("DELETE", "", None, {"delete_checkpoints": "maybe"}, "bad-query", ["delete_checkpoints"]),
]
BAD_INPUT += [
    ("POST", "/resume", {"checkpoint_id": "50%"}, None, "bad-checkpoint-id", ["'50%'"]),
    ("POST", "/resume", {"device": ""}, None, "bad-device", ["''"]),
    ("DELETE", "", None, {"delete_checkpoints": "maybe"}, "bad-query", ["'maybe'"]),
]
BAD_CASES = [pytest.param(*c, id=f"{c[0]}{c[1]} {c[2]!r}{c[3] or ''}") for c in BAD_INPUT]


async def test_events_since_must_be_a_time(lab):
    # When the user asks for events since something that is not a time
    code, err = await lab.api("GET", "events", params={"since": "yesterday-ish"})
    # Then it answers 400 naming the value and the expected format
    assert code == 400 and err["reason"] == "bad-query"
    assert "'yesterday-ish'" in err["message"] and "ISO 8601" in err["message"]


@pytest.mark.parametrize(("method", "path", "body", "params", "reason", "words"), BAD_CASES)
async def test_bad_input_is_400(lab, store_dir, method, path, body, params, reason, words):
    # Given an open notebook
    s = await lab.open_notebook()
    # When the request is malformed
    code, err = await lab.api(method, f"sessions/{s['id']}{path}", body=body, params=params)
    # Then it answers 400 with a reason code and a message naming what was wrong
    assert code == 400, err
    assert err["reason"] == reason
    for w in words:
        assert w.lower() in err["message"].lower(), err["message"]
    # And nothing changed
    await assert_untouched(lab, s, store_dir)
    assert [x["id"] for x in (await lab.api("GET", "sessions"))[1]["sessions"]] == [s["id"]]


UNKNOWN_ID = [
    ("GET", ""),
    ("DELETE", ""),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("POST", "/cancel"),
    ("POST", "/check"),
    ("GET", "/checkpoints"),
]


@pytest.mark.parametrize(("method", "path"), UNKNOWN_ID, ids=[m + p for m, p in UNKNOWN_ID])
async def test_unknown_session_is_404(lab, store_dir, method, path):
    # Given an open notebook
    s = await lab.open_notebook()
    # When the request names a session id that does not exist
    code, err = await lab.api(method, f"sessions/{UNKNOWN}{path}")
    # Then it answers 404 naming the id
    assert code == 404, err
    assert err["reason"] == "unknown-session" and UNKNOWN in err["message"]
    # And the real session is untouched
    await assert_untouched(lab, s, store_dir)


# -- 4. wrong state ---------------------------------------------------------------------------
WRONG_STATE = [
    ("POST", "/resume", ["cannot resume", "active"]),
    ("POST", "/cancel", ["nothing to cancel", "active"]),
    ("DELETE", "", ["cannot delete", "active"]),
    ("DELETE?delete_checkpoints=true", "", ["cannot delete", "active"]),
]


@pytest.mark.parametrize(
    ("method", "path", "words"), WRONG_STATE, ids=[m + p for m, p, _ in WRONG_STATE]
)
async def test_wrong_state_is_409(lab, store_dir, method, path, words):
    # Given an active session
    s = await lab.open_notebook()
    method, _, query = method.partition("?")
    params = dict([query.split("=")]) if query else None
    # When the user asks for something only a paused or pausing session allows
    code, err = await lab.api(method, f"sessions/{s['id']}{path}", params=params)
    # Then it answers 409 with the state in words
    assert code == 409, err
    assert err["reason"] == "wrong-state"
    for w in words:
        assert w in err["message"], err["message"]
    # And the session is still listed, active, with its kernel
    code, body = await lab.api("GET", "sessions")
    assert [x["id"] for x in body["sessions"]] == [s["id"]]
    await assert_untouched(lab, s, store_dir)


# -- 5. kernels that are not Python -----------------------------------------------------------
@pytest.mark.parametrize("action", ["pause", "check"])
async def test_pause_refuses_a_non_python_kernel(lab, jp_data_dir, store_dir, action):
    # Given a kernelspec whose language is R (it runs ipykernel, but says it is R)
    spec = jp_data_dir / "kernels" / "fake-r"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Fake R", "language": "R"})
    )
    s = await lab.open_notebook("analysis.ipynb", kernel_name="fake-r")
    assert s["kernel_name"] == "fake-r"
    # When the user pauses it, or asks what a pause would save
    code, err = await lab.api("POST", f"sessions/{s['id']}/{action}")
    # Then it answers 409 saying pause does not support that language
    assert code == 409, err
    assert "pause is not supported for r kernels" in err["message"].lower()
    assert err["reason"] == "unsupported-kernel"
    # And the kernel keeps running, untouched
    await assert_untouched(lab, s, store_dir)
    assert (await lab.run(s["kernel_id"], "print(6 * 7)")).strip() == "42"
