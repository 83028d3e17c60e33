"""Webhook deliveries survive server restarts: a real ``jupyter server`` process records each
event with its deliveries in the records' outbox, is stopped with SIGTERM while its receiver
refuses them, and delivers every one after the next start, under the same ``webhook-id``, with
the same bytes, in order per session; the retry schedule and the outbox's bound hold across
the restart too."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from jupyter_gpu_pause.server.state.migrations import migrate_sqlite
from jupyter_gpu_pause.server.state.records import MIGRATIONS, Records
from tests.http import request
from tests.receivers import SECRET, Receiver, closed_port_url, example
from tests.scrape import Scrape
from tests.servers import TOKEN, Server

POLICY = (
    "c.GpuPauseApp.poll_interval = 0.5\n"
    'c.GpuPauseApp.policies = [{"name": "hooks", "match": {"kernel_name": "python3*"}, '
    '"idle_timeout": 3600, "warn_before": 300, "action": "pause"}]\n'
)


def configure(server: Server, urls: list[str], **sender) -> None:
    """Write the server's config as an admin would: a policy (keep-alives need one), the
    webhook URLs and secret, and ``c.WebhookSender.*``; read at the server's next start."""
    text = POLICY + f"c.GpuPauseApp.webhook_urls = {urls!r}\n"
    text += f"c.GpuPauseApp.webhook_secret = {SECRET!r}\n"
    text += "".join(f"c.WebhookSender.{k} = {v!r}\n" for k, v in sender.items())
    path = server.tmp / "config" / "jupyter_server_config.py"
    path.write_text(path.read_text().split("\n", 1)[0] + "\n" + text)  # (its first line kept)


def keepalive(server: Server, sid: str, seconds: int) -> None:
    """A user postponing the policy: one ``keepalive`` event, recorded when this returns."""
    code, body = server.api("POST", f"gpu-pause/api/sessions/{sid}/keepalive", {"seconds": seconds})
    assert code == 200, body


def open_under_policy(server: Server, path: str) -> dict:
    s = server.open_notebook(path)
    server.wait_until(lambda: server.sessions()[s["id"]]["policy"], "the policy applying")
    return s


def outbox(db: Path) -> list[dict]:
    """The outbox rows in the records database, oldest first, read as any SQLite client."""
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT webhook_id, type, attempts, body FROM webhook_outbox ORDER BY seq"
        ).fetchall()
    return [{"id": r[0], "type": r[1], "attempts": r[2], "event": json.loads(r[3])} for r in rows]


def deliveries(server: Server, result: str) -> float:
    """``jupyter_gpu_pause_webhook_deliveries_total{result}`` on the server's ``/metrics``."""
    code, raw = request(f"http://127.0.0.1:{server.port}/metrics", TOKEN)
    assert code == 200
    return Scrape(raw.decode()).value("webhook_deliveries_total", result=result)


def webhook_id(post: dict) -> str:
    return post["headers"]["webhook-id"]


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def receiver():
    r = Receiver(default=503)  # refuses every delivery until a test says otherwise
    yield r
    r.close()


def test_undelivered_events_are_delivered_once_after_a_sigterm(server, receiver):
    # Given a server whose webhook receiver answers 503 to everything, and two notebooks,
    # checkpointed at shutdown
    configure(server, [receiver.url], backoff_seconds=0.01, max_attempts=1000)
    server.args.append("--GpuPauseApp.shutdown_checkpoint=all")
    server.start()
    a, b = (open_under_policy(server, p) for p in ("a.ipynb", "b.ipynb"))

    # When 20 events happen, interleaved between the notebooks, none of them delivered
    for i in range(1, 11):
        for s in (a, b):
            keepalive(server, s["id"], 60 * i)
    server.wait_until(lambda: receiver.posts, "a first, refused, attempt")

    # And the server gets SIGTERM (its shutdown checkpoint adds a `paused` event per notebook),
    # then the receiver comes back and the server starts again on the same db_path
    assert server.stop() == 0
    refused = list(receiver.posts)
    assert refused and {p["answered"] for p in refused} == {503}
    receiver.default = 200
    server.start()

    # Then every event the records hold reaches the receiver once, answered 200
    code, body = server.api("GET", "gpu-pause/api/events")
    assert code == 200
    recorded = body["events"]
    assert len(recorded) == 22, [e["type"] for e in recorded]

    def delivered():
        ok = [p for p in receiver.posts if p["answered"] == 200]
        return ok if len(ok) >= len(recorded) else None

    ok = server.wait_until(delivered, "every event delivered")
    assert len({webhook_id(p) for p in ok}) == len(ok) == len(recorded)

    # And in the order each session's events happened, each body signed and verifiable
    events = [example.verify(SECRET, p["headers"], p["body"]) for p in ok]
    for s in (a, b):
        mine = [(e["time"], e["type"]) for e in recorded if e["session_id"] == s["id"]]
        sent = [(e["time"], e["type"]) for e in events if e["session_id"] == s["id"]]
        assert sent == mine
        theirs = [e for e in events if e["session_id"] == s["id"]]
        kept = [e["detail"]["seconds"] for e in theirs if e["type"] == "keepalive"]
        assert kept == [60 * i for i in range(1, 11)]
        assert (theirs[-1]["type"], theirs[-1]["reason"]) == ("paused", "shutdown")

    # And the attempts refused before the restart carried the same webhook-id and the very
    # bytes delivered after it
    sent_bytes = {webhook_id(p): p["body"] for p in ok}
    for p in refused:
        assert p["body"] == sent_bytes[webhook_id(p)]

    # And the outbox is empty once the deliveries are answered
    server.wait_until(lambda: not outbox(server.tmp / "records.sqlite"), "an empty outbox")
    assert deliveries(server, "ok") == 22


def test_a_delivery_is_given_up_after_its_attempts_counted_across_a_restart(server, receiver):
    # Given a server allowed 4 attempts per delivery, retrying after ~1 s, then ~2 s, then
    # ~4 s, and a receiver that answers 503 to everything
    configure(server, [receiver.url], backoff_seconds=1.0, max_attempts=4)
    server.start()
    s = open_under_policy(server, "nb.ipynb")

    # When an event is refused twice and the server restarts (SIGTERM, then a new start)
    keepalive(server, s["id"], 60)
    server.wait_until(lambda: len(receiver.posts) >= 2, "two refused attempts")
    assert server.stop() == 0
    before_restart = len(receiver.posts)
    server.start()

    # Then the restarted server makes only the attempts left, and gives the event up
    server.wait_log("attempts (last: HTTP 503); given up")
    assert before_restart < len(receiver.posts) == 4
    assert len({webhook_id(p) for p in receiver.posts}) == 1
    assert len({p["body"] for p in receiver.posts}) == 1

    # And it is counted as failed and gone from the outbox
    assert deliveries(server, "failed") == 1
    assert outbox(server.tmp / "records.sqlite") == []


def test_a_full_outbox_drops_the_oldest_and_a_removed_url_is_dropped_at_start(server):
    # Given a server whose one webhook URL refuses connections, with room for 3 events
    down = closed_port_url()
    configure(server, [down], backoff_seconds=60, queue_size=3)
    server.start()
    s = open_under_policy(server, "nb.ipynb")

    # When 5 events happen
    for i in range(1, 6):
        keepalive(server, s["id"], 60 * i)

    # Then the outbox keeps the 3 newest, oldest first, and the 2 dropped are logged and
    # counted
    db = server.tmp / "records.sqlite"
    assert [r["event"]["detail"]["seconds"] for r in outbox(db)] == [180, 240, 300]
    server.wait_log("dropped the keepalive event")
    dropped = [x for x in server.log.read_text().splitlines() if "dropped the keepalive" in x]
    assert len(dropped) == 2 and all("(the outbox is full)" in x for x in dropped), dropped
    assert deliveries(server, "dropped") == 2

    # When the admin removes the URL and restarts the server
    assert server.stop() == 0
    configure(server, [])
    server.start()

    # Then its 3 waiting events are dropped at start, with a log line naming the URL
    line = server.wait_log("undelivered events for the webhook")
    assert f"dropped 3 undelivered events for the webhook {down}, which is no longer" in line
    server.wait_until(lambda: not outbox(db), "an empty outbox")


def test_records_of_the_previous_version_gain_an_empty_outbox_and_keep_their_events(tmp_path):
    # Given a records database as the previous version left it (schema 2), holding an event
    db = tmp_path / "records.sqlite"
    with sqlite3.connect(db) as c:
        migrate_sqlite(c, MIGRATIONS, str(db), to=2)
        c.execute(
            "INSERT INTO events (time, session_id, type, reason, detail) "
            "VALUES ('2026-12-01T10:00:00Z', 's1', 'paused', 'user', '{}')"
        )

    # When this version opens it
    records = Records(str(db))
    try:
        events = asyncio.run(records.events())
        waiting = asyncio.run(records.outbox_counts())
    finally:
        records.close()

    # Then the event is kept, the outbox is there and empty, and the schema is up to date
    assert [(e["session_id"], e["type"]) for e in events] == [("s1", "paused")]
    assert waiting == {}
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS.latest
