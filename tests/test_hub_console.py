"""The Hub console (``jupyter gpu-pause hub-service``) on a real JupyterHub: two users' servers
on one real PostgreSQL queue (the quota provider standing in for GPUs: one GPU session fits),
the console run by the Hub as a managed service, people logging in with Hub tokens.

One Hub for the module (tests/hub_console.py): starting JupyterHub, its proxy, the console and
two single-user servers costs tens of seconds. The tests run in order, each from the state the
one before left (alice's a1 running, a2 and bob's b1 paused, bob's server stopped).
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.hub_console import ADMIN, NOBODY, SCOPED, ConsoleHub
from tests.hubs import WAIT

SEEN_WITHIN = 5.0  # seconds: a change on a user's server shows on the console within this long
STATE = "w = list(range(5)); msg = 'alice a1'"


@pytest.fixture(scope="module")
def hub(tmp_path_factory, postgres):
    tmp = tmp_path_factory.mktemp("hub-console")
    hub = ConsoleHub(tmp, postgres.new_database())
    try:
        hub.start()
        for user in ("alice", "bob"):
            hub.start_server_of(user)
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def notebooks(hub) -> dict:
    """The sessions the tests share, by notebook (filled by the first test)."""
    return {}


def _console_row(hub: ConsoleHub, sid: str) -> dict | None:
    code, body = hub.console_api("sessions")
    assert code == 200, body
    return next((s for s in body["sessions"] if s["session_id"] == sid), None)


def _seen(hub: ConsoleHub, sid: str, what: str, check) -> dict:
    """The console's row of ``sid`` once ``check(row)`` holds; fails if that takes longer
    than SEEN_WITHIN from now (the change already happened on the user's server)."""
    start = time.monotonic()
    while True:
        row = _console_row(hub, sid)
        if row is not None and check(row):
            return row
        if time.monotonic() - start > SEEN_WITHIN:
            pytest.fail(f"the console did not show {what} within {SEEN_WITHIN}s: {row}")
        time.sleep(0.2)


def _state_on_server(hub: ConsoleHub, user: str, sid: str, states) -> dict:
    return hub.wait_until(
        lambda: (s := hub.session_of(user, sid))["state"] in states and s,
        f"{user}'s session {sid} in {states}",
    )


def _events(hub: ConsoleHub, user: str, sid: str, type_: str) -> list[dict]:
    code, body = hub.api_of(user, "GET", f"gpu-pause/api/events?session_id={sid}")
    assert code == 200, body
    return [e for e in body["events"] if e["type"] == type_]


def test_every_users_gpu_sessions_are_listed_within_5_s_of_each_change(hub, notebooks):
    # Given alice's GPU notebook running a cell
    a1 = hub.open_notebook("alice", "exp/a1.ipynb")
    notebooks["a1"] = a1
    hub.run(a1["kernel_id"], STATE)
    # Then the console lists it as running, with its user, notebook file name, node and server
    row = _seen(hub, a1["id"], "a1 running", lambda r: r["state"] in ("active", "idle"))
    assert (row["user"], row["notebook"], row["server"]) == ("alice", "a1.ipynb", "alice"), row
    assert row["node"] and row["server_running"] and row["actions"] == ["pause"], row

    # Given a second notebook of alice's, paused by her
    a2 = hub.open_notebook("alice", "a2.ipynb")
    notebooks["a2"] = a2
    hub.run(a2["kernel_id"], "z = 'a2 state'")
    code, body = hub.api_of("alice", "POST", f"gpu-pause/api/sessions/{a2['id']}/pause")
    assert code == 202, body
    _state_on_server(hub, "alice", a2["id"], ("paused",))
    # Then the console shows it paused, with its checkpoint's size and age
    row = _seen(hub, a2["id"], "a2 paused", lambda r: r["state"] == "paused")
    assert row["checkpoint"]["bytes"] > 0 and row["checkpoint"]["age_seconds"] >= 0, row
    assert row["since"] == row["checkpoint"]["created"], row

    # Given bob's notebook, paused: his server stops itself (stop_server_when_paused)
    b1 = hub.open_notebook("bob", "b1.ipynb")
    notebooks["b1"] = b1
    hub.run(b1["kernel_id"], "v = 7")
    code, body = hub.api_of("bob", "POST", f"gpu-pause/api/sessions/{b1['id']}/pause")
    assert code == 202, body
    hub.wait_until(lambda: hub.servers_of("bob") == {}, "bob's server stopped")
    # Then the console still lists bob's paused session, saying his server is stopped
    row = _seen(hub, b1["id"], "b1 paused, server stopped", lambda r: not r["server_running"])
    assert row["state"] == "paused" and row["checkpoint"]["bytes"] > 0, row
    assert row["actions"] == [] and not row["stale"], row

    # When alice resumes a2 while a1 holds the one GPU
    code, body = hub.api_of("alice", "POST", f"gpu-pause/api/sessions/{a2['id']}/resume")
    assert code == 202, body
    _state_on_server(hub, "alice", a2["id"], ("waiting",))
    # Then the console shows it waiting, first in line, and the line says so
    row = _seen(hub, a2["id"], "a2 waiting", lambda r: r["state"] == "waiting")
    assert row["queue_position"] == 1 and row["actions"] == ["cancel"], row
    assert row["since"] == row["waiting"]["since"], row
    code, line = hub.console_api("line")
    assert code == 200, line
    (first,) = line["line"]
    assert (first["position"], first["user"], first["session_id"]) == (1, "alice", a2["id"])
    assert first["notebook"] == "a2.ipynb" and first["waited_seconds"] >= 0, first

    # And the three states are on one answer, as the page shows them
    code, body = hub.console_api("sessions")
    states = {s["session_id"]: s["state"] for s in body["sessions"]}
    assert states[a1["id"]] in ("active", "idle"), states
    assert (states[a2["id"]], states[b1["id"]]) == ("waiting", "paused"), states


@pytest.mark.parametrize("user, code", [(ADMIN, 200), (SCOPED, 200), (NOBODY, 403), ("alice", 403)])
def test_only_admins_and_holders_of_the_scope_get_in(hub, user, code):
    # When a person asks the API and the page with their own Hub token
    answer, body = hub.console_api("sessions", user=user)
    page = urllib.request.Request(
        hub.console, headers={"Authorization": f"token {hub.token_of(user)}"}
    )
    try:
        with urllib.request.urlopen(page, timeout=30) as r:
            page_code, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        page_code, text = e.code, e.read().decode()
    # Then admins and scope holders get both; everyone else 403 on both, saying why
    assert (answer, page_code) == (code, code), (body, text[:300])
    if code == 403:
        assert body["reason"] == "forbidden" and "custom:gpu-pause:admin" in body["message"], body
        assert "Ask a Hub admin" in text, text
    else:
        assert "sessions" in body and "<title>" in text


def test_no_credentials_are_refused_and_the_page_sends_to_the_hub_login(hub):
    code, body = hub.console_api("sessions", user=ADMIN)
    assert code == 200
    req = urllib.request.Request(f"{hub.console}api/sessions")
    try:
        urllib.request.urlopen(req, timeout=30)
        pytest.fail("answered without credentials")
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.read()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(hub.console, timeout=30)
        pytest.fail("the page answered without a login")
    except urllib.error.HTTPError as e:
        assert e.code == 302 and "/hub/api/oauth2/authorize" in e.headers["Location"], e.headers


def test_a_pause_on_behalf_keeps_every_variable_and_says_by_whom(hub, notebooks):
    a1, a2 = notebooks["a1"], notebooks["a2"]
    # When the admin pauses alice's running notebook from the console, with a message
    code, body = hub.console_api(
        f"sessions/alice/{a1['id']}/pause", method="POST", body={"message": "maintenance at 9"}
    )
    assert code == 202, body
    # Then it is paused through alice's server, which says who asked and why
    paused = _state_on_server(hub, "alice", a1["id"], ("paused",))
    assert paused["message"].startswith("Paused by an admin (ada): maintenance at 9"), paused
    (event,) = _events(hub, "alice", a1["id"], "paused")
    assert event["reason"] == "admin", event
    assert event["detail"]["by"] == ADMIN, event
    assert event["detail"]["via"] == "gpu-pause", event
    assert event["detail"]["admin_message"] == "maintenance at 9", event
    # and the console records the action with who did it
    code, actions = hub.console_api("actions")
    last = actions["actions"][0]
    assert (last["by"], last["action"], last["user"], last["session_id"], last["outcome"]) == (
        ADMIN, "pause", "alice", a1["id"], "ok"
    ), last  # fmt: skip
    assert last["detail"]["message"] == "maintenance at 9", last

    # And a2, which waited, got the GPU a1 gave back
    _state_on_server(hub, "alice", a2["id"], ("active", "idle"))

    # When alice resumes a1 (now waiting behind a2) and a scope holder cancels the wait
    code, body = hub.api_of("alice", "POST", f"gpu-pause/api/sessions/{a1['id']}/resume")
    assert code == 202, body
    _state_on_server(hub, "alice", a1["id"], ("waiting",))
    _seen(hub, a1["id"], "a1 waiting", lambda r: r["state"] == "waiting")
    code, body = hub.console_api(
        f"sessions/alice/{a1['id']}/cancel", user=SCOPED, method="POST", body={}
    )
    assert code == 200, body
    # Then it is paused again, and the cancel says by whom
    _state_on_server(hub, "alice", a1["id"], ("paused",))
    (cancelled,) = _events(hub, "alice", a1["id"], "cancelled")
    assert cancelled["detail"]["by"] == SCOPED, cancelled

    # When a2 is paused and a1 resumed
    code, body = hub.api_of("alice", "POST", f"gpu-pause/api/sessions/{a2['id']}/pause")
    assert code == 202, body
    _state_on_server(hub, "alice", a2["id"], ("paused",))
    code, body = hub.api_of("alice", "POST", f"gpu-pause/api/sessions/{a1['id']}/resume")
    assert code == 202, body
    back = _state_on_server(hub, "alice", a1["id"], ("active", "idle", "failed"))
    # Then every variable of a1 is there, as before the admin's pause
    assert back["state"] != "failed", back
    assert hub.run(back["kernel_id"], "print(sum(w), msg)").strip() == "10 alice a1"


def test_actions_the_console_refuses_change_nothing(hub, notebooks):
    b1 = notebooks["b1"]
    # A pause without a message, of a session of a stopped server, or by someone without rights
    cases = [
        (ADMIN, f"sessions/bob/{b1['id']}/pause", {}, 400, "no-message"),
        (ADMIN, f"sessions/bob/{b1['id']}/pause", {"message": "x"}, 409, "server-stopped"),
        (ADMIN, f"sessions/alice/{b1['id']}/pause", {"message": "x"}, 404, "no-such-session"),
        (NOBODY, f"sessions/bob/{b1['id']}/pause", {"message": "x"}, 403, "forbidden"),
        (ADMIN, "budget/grant", {"user": "alice", "hours": -1}, 400, "bad-hours"),
        (ADMIN, "budget/grant", {"user": "nosuchuser", "hours": 1}, 404, "unknown-user"),
        (ADMIN, "budget/grant", {"user": "alice", "hours": 1, "x": 1}, 400, "unknown-field"),
        (ADMIN, "usage?period=someday", None, 400, "bad-period"),
    ]
    _, before = hub.console_api("actions")
    for user, path, body, code, reason in cases:
        method = "GET" if body is None else "POST"
        got, answer = hub.console_api(path, user=user, method=method, body=body)
        assert (got, answer["reason"]) == (code, reason), (path, answer)
    _, after = hub.console_api("actions")
    # Then nothing was done, nor recorded as done, and bob's session is still paused
    assert after["actions"] == before["actions"], after["actions"][:3]
    row = _console_row(hub, b1["id"])
    assert row["state"] == "paused", row


def test_usage_matches_each_users_own_budget_and_exports_csv(hub):
    # Given bob's server started again (its GET budget answers) and GPU time used by both
    hub.start_server_of("bob")

    # When the admin reads usage by user, and each user reads their own budget
    code, usage = hub.console_api("usage?period=month&by=user")
    assert code == 200, usage
    own = {}
    for user in ("alice", "bob"):
        code, body = hub.api_of(user, "GET", "gpu-pause/api/budget")
        assert code == 200, body
        (row,) = body["budgets"]
        own[user] = row
    rows = {r["key"]: r for r in usage["rows"]}

    # Then each user's budget figures are the same, within one heartbeat of GPU time
    heartbeat_hours = 1.0 * 2 / 3600  # a heartbeat (lease / 3 = 1 s) for each of 2 sessions
    for user in ("alice", "bob"):
        mine, seen = own[user], rows[user]["budget"]
        assert seen["name"] == mine["name"] == "lab", seen
        assert abs(seen["used_hours"] - mine["used_hours"]) <= heartbeat_hours, (seen, mine)
        assert seen["limit_hours"] == mine["limit_hours"], (seen, mine)
    assert own["alice"]["used_hours"] > 0 and own["bob"]["used_hours"] > 0, own
    # and the GPU-hours held, idle and reclaimed are each user's own report's (what NVML
    # measured: none on this machine without GPUs), adding up to the total
    for user in ("alice", "bob"):
        code, report = hub.api_of(user, "GET", f"gpu-pause/api/report?since={usage['start']}")
        assert code == 200, report
        for kind in ("held", "idle", "reclaimed", "unpausable"):
            key = f"gpu_hours_{kind}"
            assert rows[user][key] == pytest.approx(report["total"][key], abs=1e-3), kind
    for kind in ("held", "idle", "reclaimed"):
        key = f"gpu_hours_{kind}"
        assert sum(r[key] for r in usage["rows"]) == pytest.approx(usage["total"][key], abs=1e-3)

    # When it is read by group
    code, groups = hub.console_api("usage?period=month&by=group")
    assert code == 200, groups
    by_group = {r["key"]: r for r in groups["rows"]}
    assert by_group["vision"]["users"] == ["alice"] and by_group["nlp"]["users"] == ["bob"]
    assert by_group["vision"]["gpu_hours_idle"] == pytest.approx(
        rows["alice"]["gpu_hours_idle"], abs=1e-3
    )

    # When finance gets the CSV
    req = urllib.request.Request(
        f"{hub.console}api/usage.csv?period=month&by=user",
        headers={"Authorization": f"token {hub.token_of(ADMIN)}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/csv")
        assert "attachment" in r.headers["Content-Disposition"]
        table = list(csv.DictReader(io.StringIO(r.read().decode())))
    # Then it has a row per user and the total, with the same figures
    by_user = {r["user"]: r for r in table}
    assert set(by_user) >= {"alice", "bob", "TOTAL"}, by_user
    assert float(by_user["alice"]["gpu_hours_held"]) == rows["alice"]["gpu_hours_held"]
    assert by_user["alice"]["budget"] == "lab"

    # And a past month has no usage
    code, past = hub.console_api("usage?period=2020-01&by=user")
    assert code == 200 and past["total"]["gpu_hours_held"] == 0, past


def test_a_grant_from_the_console_is_the_users_own_budget_and_recorded(hub):
    # When a scope holder grants alice two GPU-hours
    code, body = hub.console_api(
        "budget/grant", user=SCOPED, method="POST", body={"user": "alice", "hours": 2}
    )
    assert code == 200, body
    assert body["budget"]["granted_hours"] == 2, body
    # Then alice's own server shows the grant in her budget
    code, own = hub.api_of("alice", "GET", "gpu-pause/api/budget")
    assert own["budgets"][0]["granted_hours"] == 2, own
    assert own["budgets"][0]["limit_hours"] == 52, own
    # When the admin resets it
    code, body = hub.console_api("budget/reset", method="POST", body={"user": "alice"})
    assert code == 200, body
    code, own = hub.api_of("alice", "GET", "gpu-pause/api/budget")
    assert own["budgets"][0]["granted_hours"] == 0, own
    # And both are recorded with who did them
    code, actions = hub.console_api("actions")
    recent = [(a["by"], a["action"], a["user"]) for a in actions["actions"][:2]]
    assert recent == [(ADMIN, "reset", "alice"), (SCOPED, "grant", "alice")], recent


def test_the_page_comes_with_its_assets_and_xsrf_token(hub):
    req = urllib.request.Request(
        hub.console, headers={"Authorization": f"token {hub.token_of(ADMIN)}"}
    )
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        text = r.read().decode()
    assert "static/console.js" in text and "data-xsrf" in text, text[:500]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--HubServiceApp.refresh_seconds=0.1"], "HubServiceApp.refresh_seconds"),
        (["--queue-url=ftp://nowhere"], "GpuPauseApp.capacity_queue_url"),
        (["--HubServiceApp.queue_url="], "HubServiceApp.queue_url is not set"),
        (["--HubServiceApp.budgets=[{'name': 'x'}]"], "HubServiceApp.budgets"),
        (["--url=127.0.0.1"], "HubServiceApp.url"),
        (["--proxy-url=proxy:8000"], "HubServiceApp.proxy_url"),
    ],
)
def test_a_bad_setting_stops_the_console_naming_it(tmp_path, args, named):
    # Given what the Hub gives a managed service, and one bad setting
    env = {
        **os.environ,
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api",
        "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:10101",
        "JUPYTER_CONFIG_DIR": str(tmp_path),
    }
    queue = [] if any("queue" in a for a in args) else [f"--queue-url={tmp_path / 'queue'}"]
    # When the console starts
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu_pause.cli.app", "hub-service", *queue, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then it stops at once, naming the setting
    assert out.returncode != 0, out
    assert named in out.stderr + out.stdout, out.stderr
