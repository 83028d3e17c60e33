"""Refused requests: no token, an authorizer that says no, bad input, unknown ids, wrong state,
kernels that cannot be paused. Every refusal must be a clear JSON error and change nothing."""

from __future__ import annotations

import json
import logging
import sys
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.utils import url_path_join

from jupyter_gpu_pause.server.web.handlers import SID, KernelHandler
from jupyter_gpu_pause.server.web.routes import handlers

UNKNOWN = "00000000-0000-4000-8000-000000000000"
METHODS = ("get", "post", "put", "patch", "delete")


def _endpoints() -> list[tuple[str, str, type]]:
    """(method, path under gpu-pause/api/, handler) for every verb of every route, read from
    the extension's own handler list: a new endpoint is in these tables without editing them."""
    out = []
    for pattern, cls in handlers():
        path = pattern.removeprefix("/gpu-pause/api").lstrip("/")
        path = path.replace(SID, "{sid}").replace("(?:/.*)?", "/no/such/endpoint").lstrip("/")
        assert "(" not in path, f"a route the tables cannot fill in: {pattern}"
        out += [(m.upper(), path, cls) for m in METHODS if m in vars(cls)]
    return out


ENDPOINTS = _endpoints()
ENDPOINT_IDS = [f"{m} {p}" for m, p, _ in ENDPOINTS]


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


def fill(path: str, s: dict) -> str:
    return path.replace("{sid}", s["id"])


async def send(client, base_url, method, path, params=None, body=None, headers=None):
    """A request with exactly the given headers (jp_fetch would add the token)."""
    url = url_path_join(base_url, "gpu-pause/api", path)
    if params:
        url += "?" + urlencode(params)
    if method in ("POST", "PUT", "PATCH") and body is None:
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


async def assert_untouched(lab, s, store_dir, events: tuple[str, ...] = ()):
    """The session is still there, running its kernel, with no checkpoint and no event (but
    ``events``, by type)."""
    lc = lifecycle(lab)
    await lc.table.refresh()
    now = lc.table.sessions[s["id"]]
    assert now.state == "active" and now.kernel_id == s["kernel_id"], now
    assert now.checkpoint is None and now.error is None
    assert lab.kernel_alive(s["kernel_id"])
    assert [e["type"] for e in await lc.events(session_id=s["id"])] == list(events)
    assert not list((store_dir / "v1" / "sessions").glob("*/*.json"))
    assert await lc.list_checkpoints(s["id"]) == []


# -- 1. no token ------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "handler"), ENDPOINTS, ids=ENDPOINT_IDS)
async def test_no_token_is_refused(
    lab, http_server_client, jp_base_url, store_dir, method, path, handler
):
    # Given an open notebook with a running kernel
    s = await lab.open_notebook()
    # When a client without a token (or with a wrong one) calls the endpoint
    for headers in ({}, {"Authorization": "token not-the-token"}):
        code, raw = await send(
            http_server_client, jp_base_url, method, fill(path, s), None, None, headers
        )
        # Then it is refused, in JSON
        assert code == 403, (headers, code)
        assert set(json.loads(raw)) == {"message", "reason"}
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
@pytest.mark.parametrize(("method", "path", "handler"), ENDPOINTS, ids=ENDPOINT_IDS)
async def test_denied_by_authorizer(lab, store_dir, method, path, handler, authorizer):
    # Given a server whose authorizer denies the resource gpu_pause, and an open notebook
    s = await open_without_gpu_pause_api(lab)
    # When the user (with a valid token) calls the endpoint
    code, err = await lab.api(method, fill(path, s))
    # Then it answers 403 saying what was not authorized (the kernel's own endpoints take no
    # user token at all, only a kernel's capability)
    assert code == 403, err
    if issubclass(handler, KernelHandler):
        assert err["reason"] == "no-capability"
    else:
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


# (method, path under gpu-pause/api/, status, reason, words of the message)
NOT_JSON_BEFORE = [
    ("GET", "sessions/does-not-exist", 404, "unknown-session", ["'does-not-exist'"]),
    ("POST", "sessions/not an id/pause", 404, "unknown-session", ["'not an id'"]),
    ("GET", "sessions/{sid}/frobnicate", 404, "unknown-endpoint", ["/frobnicate"]),
    ("GET", "no-such-thing", 404, "unknown-endpoint", ["GET", "/no-such-thing"]),
    ("DELETE", "", 404, "unknown-endpoint", ["DELETE"]),
    ("PUT", "sessions", 405, "method-not-allowed", []),
    ("PATCH", "sessions/{sid}/pause", 405, "method-not-allowed", []),
    ("POST", "policies", 405, "method-not-allowed", []),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "reason", "words"),
    NOT_JSON_BEFORE,
    ids=[f"{m} {p}" for m, p, *_ in NOT_JSON_BEFORE],
)
async def test_every_answer_under_the_prefix_is_json(lab, method, path, status, reason, words):
    # Given an open notebook
    s = await lab.open_notebook()
    # When a request names a malformed id, an unknown path or a verb a route does not have
    r = await lab.api(method, fill(path, s), raw=True)
    # Then the answer is JSON {message, reason}, never Jupyter's HTML error page
    assert r.code == status, r.body
    assert r.headers["Content-Type"].startswith("application/json")
    body = json.loads(r.body)
    assert set(body) == {"message", "reason"} and body["reason"] == reason, body
    for w in words:
        assert w in body["message"], body["message"]
    assert (await lab.session(s["id"]))["state"] in ("active", "idle")


async def _login_cookies(client, base_url, token) -> dict:
    """Log in through Jupyter's login form, as a browser does; returns the cookies it set."""

    def cookies_of(r) -> dict:
        jar = SimpleCookie()
        for header in r.headers.get_list("Set-Cookie"):
            jar.load(header)
        return {k: m.value for k, m in jar.items()}

    page = await client.fetch(url_path_join(base_url, "login"), raise_error=False)
    cookies = cookies_of(page)
    form = urlencode({"_xsrf": cookies["_xsrf"], "password": token})
    done = await client.fetch(
        url_path_join(base_url, "login"),
        method="POST",
        body=form,
        headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())},
        follow_redirects=False,
        raise_error=False,
    )
    assert done.code == 302, done.body
    return {**cookies, **cookies_of(done)}


async def test_a_browser_session_without_the_xsrf_header_is_refused(
    lab, http_server_client, jp_base_url, store_dir
):
    # Given a browser logged in with a cookie, and an open notebook
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    cookies = await _login_cookies(http_server_client, jp_base_url, lab.app.identity_provider.token)
    cookie = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    # When a page elsewhere makes the browser POST a pause with that cookie (no XSRF header)
    code, raw = await send(
        http_server_client, jp_base_url, "POST", f"sessions/{s['id']}/pause", headers=cookie
    )
    # Then it is refused, and nothing happened
    assert code == 403, raw
    await assert_untouched(lab, s, store_dir)
    # And the same request from the Lab itself (cookie plus its XSRF header) is accepted
    code, raw = await send(
        http_server_client,
        jp_base_url,
        "POST",
        f"sessions/{s['id']}/pause",
        headers={**cookie, "X-XSRFToken": cookies["_xsrf"]},
    )
    assert code == 202, raw
    assert (await lab.wait_state(s["id"]))["state"] == "paused"


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
    # And the kernel keeps running, untouched (its session said unpausable once, at its start)
    await assert_untouched(lab, s, store_dir, events=("unpausable",))
    assert (await lab.run(s["kernel_id"], "print(6 * 7)")).strip() == "42"


async def test_a_409_is_logged_once(lab, caplog):
    # Given an active session
    s = await lab.open_notebook()
    caplog.clear()
    # When a resume is asked of it, which answers 409
    with caplog.at_level(logging.DEBUG):
        code, err = await lab.api("POST", f"sessions/{s['id']}/resume")
    assert code == 409, err
    # Then the server's log has one line for it at INFO or above: jupyter_server's request line
    logged = [
        f"{r.name} {r.levelname} {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.INFO and f"{s['id']}/resume" in r.getMessage()
    ]
    assert len(logged) == 1, logged
    assert "WARNING 409 POST" in logged[0], logged
    # and the refusal's words, for whoever debugs, at DEBUG
    assert any(
        r.levelno == logging.DEBUG and err["message"] in r.getMessage() for r in caplog.records
    )
