"""Signed webhooks: real HTTP receivers (threads in the test, and the documented example
receiver as its own process) get every lifecycle event, and a bad receiver never holds up a
pause or a resume."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from tests.fakes import FakeProbe
from tests.receivers import EXAMPLE, SECRET, Receiver, closed_port_url, example
from tests.waiting import wait_for

FIELDS = {"time", "session_id", "type", "reason", "detail", "path", "state", "kernel_id"}


@pytest.fixture
def example_receiver(tmp_path):
    """The documented example receiver, as admins run it: its own process; its URL and a
    function reading what it printed so far."""
    out = open(tmp_path / "receiver.out", "w+")
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", "0"],
        env={**os.environ, "WEBHOOK_SECRET": SECRET},
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def lines() -> list[str]:
        out.seek(0)
        return out.read().splitlines()

    end = time.monotonic() + 30
    while not lines() and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.05)  # (no event loop yet: the server is not made)
    assert lines() and lines()[0].startswith("listening on "), lines()
    yield lines()[0].removeprefix("listening on "), lines
    proc.terminate()
    proc.wait(10)
    out.close()


@pytest.fixture
def hooks(request, gp_config):
    """The receivers of a test, by name (``request.param``), set up before its server starts
    and configured on it as an admin would: ``c.GpuPauseApp.webhook_*`` and
    ``c.WebhookSender.*``."""
    made: dict = {}
    sender: dict = {}
    if request.param == "retries":  # retries start after 0.2 s here
        made = {"good": Receiver(), "flaky": Receiver(answers=[500]), "gone": Receiver([410])}
        urls = [r.url for r in made.values()]
        sender = {"backoff_seconds": 0.2}
    elif request.param == "slow-or-down":
        made = {"slow": Receiver(hold=True)}
        urls = [made["slow"].url, closed_port_url()]
        sender = {"backoff_seconds": 0.05, "flush_seconds": 1.0}
    else:  # the example receiver, alerting on a GPU held 1.5 s and on a too large pause
        url, lines = request.getfixturevalue("example_receiver")
        made = {"lines": lines, "url": url}
        urls = [url]
        FakeProbe.readings = {}
        gp_config.update(
            policies=[],
            poll_interval=0.3,
            gpu_probe_class="tests.fakes.FakeProbe",
            gpu_hold_alarm_hours=1.5 / 3600,
            max_checkpoint_bytes=1,
        )
    gp_config.update(webhook_urls=urls, webhook_secret=SECRET)
    yield SimpleNamespace(sender=sender, **made)
    for r in made.values():
        if isinstance(r, Receiver):
            r.close()


@pytest.fixture
def jp_server_config(gp_config, hooks):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpu_pause": True}},
        "GpuPauseApp": gp_config,
        "WebhookSender": hooks.sender,
    }


def deliveries(result: str) -> float:
    """``jupyter_gpu_pause_webhook_deliveries_total{result=…}`` as /metrics shows it."""
    labels = {"result": result}
    return REGISTRY.get_sample_value("jupyter_gpu_pause_webhook_deliveries_total", labels) or 0


def app_of(lab):
    """The server's GpuPauseApp (its webhook sender, its session table)."""
    return lab.app.extension_manager.extension_points["jupyter_gpu_pause"].app


@pytest.mark.parametrize("hooks", ["retries"], indirect=True)
async def test_signed_posts_retries_and_gone(hooks, lab):
    # Given three receivers sharing a secret: a good one, one failing its first request with
    # 500, one answering 410 Gone
    good, flaky, gone = hooks.good, hooks.flaky, hooks.gone
    before = {r: deliveries(r) for r in ("ok", "failed", "gone")}

    # When a notebook is paused and resumed
    s, paused, resumed = await lab.pause_and_resume()

    # Then the good receiver gets both events, each signed, and the signatures verify
    await wait_for(good.has("paused", "resumed"), what="the paused and resumed posts")
    for post in good.posts:
        event = example.verify(SECRET, post["headers"], post["body"])
        assert FIELDS | {"user", "server"} == set(event)
        assert event["session_id"] == s["id"] and event["path"] == "nb.ipynb"
        assert event["server"].startswith("http://") and event["user"]
        assert abs(int(post["headers"]["Webhook-Timestamp"]) - time.time()) < 60
        assert post["headers"]["Content-Type"] == "application/json"
    by_type = {e["type"]: e for e in good.events()}
    assert by_type["paused"]["state"] == "paused" and by_type["paused"]["kernel_id"] is None
    assert by_type["paused"]["detail"]["checkpoint_id"] == paused["checkpoint"]["id"]
    assert by_type["resumed"]["kernel_id"] == resumed["kernel_id"]
    ids = [p["headers"]["Webhook-Id"] for p in good.posts]
    assert len(set(ids)) == len(ids), ids
    # And a body changed on the way does not verify
    post = good.posts[0]
    with pytest.raises(example.InvalidSignature):
        example.verify(SECRET, post["headers"], post["body"].replace(b"nb.ipynb", b"xx.ipynb"))

    # Then the flaky receiver got the first event twice (500, then 200), with one id, and the
    # rest in order after it
    await wait_for(flaky.has("paused", "resumed"), what="the flaky receiver's posts")
    first, retry = flaky.posts[0], flaky.posts[1]
    assert (first["answered"], retry["answered"]) == (500, 200)
    assert first["headers"]["Webhook-Id"] == retry["headers"]["Webhook-Id"] == ids[0]
    assert first["body"] == retry["body"]
    example.verify(SECRET, retry["headers"], retry["body"])
    assert [e["type"] for e in flaky.events()[1:]] == [e["type"] for e in good.events()]

    # Then the receiver that answered 410 got the first post only, and is sent nothing more
    async def gone_settled():
        status = {x["url"]: x for x in await app_of(lab).webhooks.status()}
        return next(x for u, x in status.items() if gone.url.startswith(u))

    settled = await wait_for(gone_settled, what="the 410 receiver's status")
    assert settled["disabled"] and settled["gone"] == 1 and settled["queued"] == 0, settled
    assert len(gone.posts) == 1 and gone.posts[0]["answered"] == 410
    s2, *_ = await lab.pause_and_resume("other.ipynb")

    async def second_notebook_delivered():
        return all(sum(e["session_id"] == s2["id"] for e in r.events()) >= 2 for r in (good, flaky))

    await wait_for(second_notebook_delivered, what="the second notebook's events")
    assert len(gone.posts) == 1

    # And /metrics counts the deliveries: 2 notebooks x 2 events to 2 receivers, 1 gone
    async def counted():
        return deliveries("ok") - before["ok"] >= 8

    await wait_for(counted, what="the deliveries counted")
    assert {r: deliveries(r) - before[r] for r in before} == {"ok": 8, "failed": 0, "gone": 1}
    # And the URL's token never appears in the status (or the logs, which use the same label)
    assert all("t0ps3cret" not in x["url"] for x in await app_of(lab).webhooks.status())


@pytest.mark.parametrize("hooks", ["slow-or-down"], indirect=True)
async def test_slow_or_down_receiver_never_delays_a_pause(hooks, lab):
    # Given a receiver that hangs for 30 s and one whose port is closed
    slow = hooks.slow

    # When a notebook is paused and resumed
    s, paused, resumed = await lab.pause_and_resume()

    # Then both finished while the slow receiver still holds the first event's POST: no
    # operation waited for a webhook
    await wait_for(slow.has("paused"), what="the slow receiver getting the first post")
    assert [p["answered"] for p in slow.posts] == [None]
    assert await lab.event(s["id"], "resumed")

    # And recording an event with its deliveries to the slow and the dead receiver costs
    # about what recording it alone does: one SQLite write, no receiver waited for
    app = app_of(lab)
    session = app.lifecycle.table.get(s["id"])
    event = (await lab.events(s["id"], "resumed"))[-1]
    costs: dict[str, list[float]] = {"event alone": [], "with deliveries": []}
    for _ in range(20):
        for name, record in (
            ("event alone", lambda: app.records.add_event(event)),
            ("with deliveries", lambda: app.webhooks.record(event, session)),
        ):
            began = time.perf_counter()
            await record()
            costs[name].append(time.perf_counter() - began)
    alone, with_deliveries = (statistics.median(c) for c in costs.values())
    assert with_deliveries < alone + 0.01, costs

    # Then, at server stop, the undelivered events are abandoned within flush_seconds
    began = asyncio.get_running_loop().time()
    await app.webhooks.stop()
    assert asyncio.get_running_loop().time() - began < 1.0 + 0.5
    assert any(x["queued"] for x in await app.webhooks.status())  # (still in the outbox)


@pytest.mark.parametrize("hooks", ["example"], indirect=True)
async def test_example_receiver_alerts_on_failures_and_gpu_hold(hooks, lab):
    # Given the example receiver in its own process, a server signing with its secret, an
    # alarm period of 1.5 s and a checkpoint size limit no notebook fits in
    lines = hooks.lines
    url = hooks.url

    # When a notebook holds a GPU past the alarm period, and its pause fails
    s = await lab.open_notebook("train.ipynb")
    await lab.run(s["kernel_id"], "x = list(range(1000))")
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 1_000_000, 50.0)
    await lab.api("POST", f"sessions/{s['id']}/pause")
    after = await lab.wait_state(s["id"])
    assert after["state"] == "active" and after["error"]["reason"] == "too-large", after

    # Then the receiver verified both and raised an alert for each
    async def alerts():
        found = [x for x in lines() if x.startswith("ALERT")]
        kinds = {x.split()[1] for x in found}
        return found if {"gpu_hold_alarm", "pause_failed"} <= kinds else None

    found = await wait_for(alerts, what="the receiver's alerts")
    failed = next(x for x in found if x.startswith("ALERT pause_failed"))
    assert "train.ipynb" in failed and "too-large" in failed and "session now active" in failed
    assert any("held a GPU" in x for x in found if "gpu_hold_alarm" in x)
    assert not [x for x in lines() if x.startswith("refused")]

    # And a forged request (no or a wrong signature) is refused with 401
    forged = json.dumps({"type": "pause_failed", "path": "x"}).encode()
    for headers in (
        {},
        {
            "webhook-id": "msg_1",
            "webhook-timestamp": str(int(time.time())),
            "webhook-signature": "v1," + base64.b64encode(b"x" * 32).decode(),
        },
    ):
        code = await asyncio.to_thread(_post, url, forged, headers)
        assert code == 401
    assert not [x for x in lines() if x.startswith("ALERT pause_failed x ")]


def _post(url: str, body: bytes, headers: dict) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
