"""``jupyter_gpu_pause.client``: what a script sees when it talks to a real server through the
public client. Refusals arrive as typed errors, one class per ``reason`` (docs/client.md), and
a request sent twice with one ``Idempotency-Key`` acts once and is answered twice the same,
for that user only; another request under that key is refused with 422."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from jupyter_gpu_pause.client import (
    BadRequest,
    Forbidden,
    GpuPauseClient,
    IdempotencyKeyReused,
    NotFound,
    Retry,
    ServerUnreachable,
    WrongState,
)
from tests.servers import TOKEN, Server, _free_port

# Two named users besides the server's own token: alice-token and bob-token
CONFIG = """
from jupyter_server.auth.identity import IdentityProvider, User


class NamedTokens(IdentityProvider):
    async def get_user(self, handler):
        m = self.auth_header_pat.match(handler.request.headers.get("Authorization", ""))
        name = {"alice-token": "alice", "bob-token": "bob"}.get(m.group(2) if m else "")
        if name:
            handler._token_authenticated = True  # a token, not a cookie: no XSRF check
            return User(name)
        return await super().get_user(handler)


c.ServerApp.identity_provider_class = NamedTokens
c.GpuPauseApp.policies = []
"""
QUICK = Retry(attempts=3, backoff=0.05, budget=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("client"), config=CONFIG)
    s.env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    s.start()
    yield s
    s.stop()


@pytest.fixture
def gp(server) -> GpuPauseClient:
    return GpuPauseClient(f"http://127.0.0.1:{server.port}/", TOKEN)


def paused_events(gp: GpuPauseClient, sid: str) -> list[dict]:
    return [e for e in gp.events(session=sid) if e["type"] == "paused"]


def test_a_session_is_paused_and_resumed_with_progress_and_typed_refusals(server, gp):
    # Given a running notebook
    s = server.open_notebook("typed.ipynb")
    # When a script resumes it although it runs
    with pytest.raises(WrongState) as running:
        gp.resume(s)
    # Then a WrongState carries the server's words, status and reason
    assert running.value.status == 409 and running.value.reason == "wrong-state"
    assert "cannot resume" in running.value.message
    assert running.value.body == {"message": running.value.message, "reason": "wrong-state"}

    # When it pauses it and waits, hearing the progress
    seen = []
    paused = gp.pause(s, wait=True, progress=lambda x: seen.append(x["state"]))
    # Then it is paused, with one checkpoint, and the progress went through pausing
    assert paused["state"] == "paused" and seen[0] == "pausing" and seen[-1] == "paused"
    assert [c["valid"] for c in gp.iter_checkpoints(s)] == [True]
    # And pausing it again answers it as it is (the server joins, never pauses twice)
    assert gp.pause(s["id"])["state"] == "paused"
    assert len(paused_events(gp, s["id"])) == 1

    # When it resumes it and waits for the running state
    gp.resume(s)
    back = gp.wait(s, ("active", "idle"), timeout=120)
    assert back["kernel_id"] not in (None, s["kernel_id"])
    types = [e["type"] for e in gp.iter_events(session=s)]
    assert types.index("paused") < types.index("resumed"), types


@pytest.mark.parametrize(
    "call, error, status, reason",
    [
        (lambda gp, s: gp.session("no-such-session"), NotFound, 404, "unknown-session"),
        (lambda gp, s: gp.checkpoints("no-such-session"), NotFound, 404, "unknown-session"),
        (lambda gp, s: gp.resume(s, device="tpu"), BadRequest, 400, "bad-device"),
        (lambda gp, s: gp.keepalive(s, 0), BadRequest, 400, "bad-seconds"),
        (lambda gp, s: gp.keepalive(s, 60), WrongState, 409, "no-policy"),
        (lambda gp, s: gp.cancel(s), WrongState, 409, "wrong-state"),
        (lambda gp, s: gp.delete(s), WrongState, 409, "wrong-state"),
        (lambda gp, s: gp.request("GET", "nowhere"), NotFound, 404, "unknown-endpoint"),
    ],
)
def test_each_refusal_is_its_typed_error(server, gp, call, error, status, reason):
    s = server.open_notebook("refusals.ipynb")
    with pytest.raises(error) as refused:
        call(gp, s)
    assert (refused.value.status, refused.value.reason) == (status, reason), refused.value.body


def test_a_wrong_token_is_forbidden_and_a_dead_server_unreachable(server):
    # Given a token the server does not know, and a port where nothing listens
    wrong = GpuPauseClient(f"http://127.0.0.1:{server.port}/", "not-the-token")
    dead = GpuPauseClient(f"http://127.0.0.1:{_free_port()}/", TOKEN, retry=QUICK)
    # Then the first is Forbidden, saying how to give the token
    with pytest.raises(Forbidden) as refused:
        wrong.sessions()
    assert refused.value.status == 403 and "--token" in refused.value.message
    # And the second is ServerUnreachable once its bounded retries are spent
    start = time.monotonic()
    with pytest.raises(ServerUnreachable) as unreachable:
        dead.sessions()
    assert time.monotonic() - start < QUICK.budget
    assert "cannot reach the Jupyter server" in unreachable.value.message


def test_one_key_sent_twice_pauses_once_and_answers_twice_the_same(server, gp):
    # Given a running notebook and a key
    s = server.open_notebook("twice.ipynb")
    key = str(uuid.uuid4())
    # When a script sends the same pause twice with that key
    first = gp.pause(s, idempotency_key=key)
    second = gp.pause(s, idempotency_key=key)
    # Then the second got the first answer, not a 409 although the session is pausing
    assert second == first and first["state"] == "pausing"
    paused = gp.wait(s, ("paused", "failed"), timeout=120)
    assert paused["state"] == "paused"
    # And there was one pause: one event, one checkpoint
    assert len(paused_events(gp, s["id"])) == 1
    assert len(gp.checkpoints(s)) == 1
    # And a third time, long after, still the first answer (kept for 24 h)
    assert gp.pause(s, idempotency_key=key) == first

    # When the key is used for another request (a resume, or a pause of another session)
    with pytest.raises(IdempotencyKeyReused) as reused:
        gp.resume(s, idempotency_key=key)
    other = server.open_notebook("other.ipynb")
    with pytest.raises(IdempotencyKeyReused):
        gp.pause(other, idempotency_key=key)
    # Then 422 idempotency-key-reused, and nothing was done
    assert (reused.value.status, reused.value.reason) == (422, "idempotency-key-reused")
    assert gp.session(s)["state"] == "paused" and gp.session(other)["state"] in ("active", "idle")
    assert len(gp.checkpoints(s)) == 1


def test_the_same_key_at_the_same_moment_pauses_once(server, gp):
    # Given a running notebook, and two copies of one request (a retry racing its original)
    s = server.open_notebook("race.ipynb")
    key = str(uuid.uuid4())
    start = threading.Barrier(2)
    answers: list = [None, None]

    def send(i):
        start.wait()
        try:
            answers[i] = gp.pause(s, idempotency_key=key)
        except Exception as e:  # noqa: BLE001  (the assertion below names it)
            answers[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then both got the same answer, and the session paused once
    assert answers[0] == answers[1] and answers[0]["state"] == "pausing", answers
    assert gp.wait(s, ("paused", "failed"), timeout=120)["state"] == "paused"
    assert len(paused_events(gp, s["id"])) == 1


def test_a_users_key_never_answers_another_user(server):
    # Given alice and bob, with their own tokens, and one notebook
    url = f"http://127.0.0.1:{server.port}/"
    alice, bob = GpuPauseClient(url, "alice-token"), GpuPauseClient(url, "bob-token")
    s = server.open_notebook("shared-key.ipynb")
    key = str(uuid.uuid4())
    # When alice pauses it with a key, and bob sends another request with her key
    first = alice.pause(s, idempotency_key=key)
    assert first["state"] == "pausing"
    # Then bob's request is his own, answered as the session's state says (not a 422 for
    # a key reused with another request, which would tell him alice used it)
    with pytest.raises(WrongState) as refused:
        bob.resume(s, idempotency_key=key)
    assert refused.value.reason == "wrong-state"
    # And alice's retry still gets her first answer
    assert alice.pause(s, idempotency_key=key) == first


@pytest.mark.parametrize("key", ["k" * 256, "clé"])
def test_a_bad_key_is_a_bad_request(server, gp, key):
    s = server.open_notebook("badkey.ipynb")
    with pytest.raises(BadRequest) as refused:
        gp.request("POST", f"sessions/{s['id']}/keepalive", {"seconds": 60}, idempotency_key=key)
    assert refused.value.reason == "bad-idempotency-key"
