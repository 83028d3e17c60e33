"""Lifecycle events POSTed to the admin's webhooks, signed the Standard Webhooks way, and
delivered at least once across server restarts.

Each event is serialised once and written to an outbox in the records database, one row per
URL (webhook-id, the exact body, attempts made, when to try next), in the very transaction
that records the event: an event the records hold is one the webhooks will send, even after a
SIGTERM. A task per URL sends that URL's rows oldest first, in the background, and removes a
row only after a 2xx answer, once the retry schedule is spent (logged, counted ``failed``), or
when the URL's outbox is full (the oldest goes, logged, counted ``dropped``). So a receiver
that is down, slow or failing never delays a pause or a resume, and a restart goes on with the
schedule where it was. Each POST carries ``webhook-id`` (one per event, the same on every
attempt and after a restart, so a receiver can drop duplicates), ``webhook-timestamp`` (the
attempt's time) and, with a secret, ``webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">``. See docs/webhooks.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Float, Int, TraitError, validate
from traitlets.config import LoggingConfigurable

from ...version import __version__
from ..state.bus import lifecycle_payload
from ..state.model import Session
from ..state.records import Delivery, Records
from .metrics import webhook_delivery

MAX_BACKOFF = 300.0  # seconds: the longest wait between two attempts, whatever backoff_seconds
OUTBOX_RETRY = 5.0  # seconds: a URL's worker waits this long after the records failed it


def signing_key(secret: str) -> bytes:
    """The HMAC key: a ``whsec_`` secret is base64 (as Standard Webhooks libraries expect),
    anything else is used as its UTF-8 bytes."""
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[len("whsec_") :], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                "GpuPauseApp.webhook_secret: a secret starting with 'whsec_' must continue "
                "with base64 (e.g. 'whsec_' + base64 of 32 random bytes)"
            ) from None
    return secret.encode()


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` and the base64 HMAC-SHA256 of
    ``{id}.{timestamp}.{body}``."""
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def url_label(url: str) -> str:
    """The URL as logs show it: no user info, query or fragment (they may hold a token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


def target_key(url: str) -> str:
    """The outbox's name for a URL: its SHA-256, so a token in the URL is not kept on disk."""
    return hashlib.sha256(url.encode()).hexdigest()


@dataclass
class Target:
    """One webhook URL, its worker and what happened to its deliveries."""

    url: str
    key: str = ""
    label: str = ""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task | None = None
    sending: Delivery | None = None
    gone: bool = False
    counts: dict = field(
        default_factory=lambda: {"ok": 0, "failed": 0, "gone": 0, "dropped": 0, "retries": 0}
    )

    def __post_init__(self):
        self.key, self.label = target_key(self.url), url_label(self.url)


class WebhookSender(LoggingConfigurable):
    """Delivers each event to every webhook URL through the records' outbox: the session
    table writes events through ``record``. Each event's outcome per URL (ok, failed, gone,
    dropped) is counted in ``status()`` and the ``jupyter_gpu_pause_webhook_deliveries_total``
    metric."""

    timeout_seconds = Float(
        10.0,
        help="Seconds one POST (connect, send, answer) may take before it counts as a failed "
        "attempt. Default: 10. Must be > 0.",
    ).tag(config=True)

    max_attempts = Int(
        5,
        help="Attempts per event and URL (the first and its retries, counted across server "
        "restarts) before the event is given up for that URL, logged and counted as failed. "
        "Default: 5. Must be >= 1.",
    ).tag(config=True)

    backoff_seconds = Float(
        1.0,
        help="Wait before the first retry; it doubles with each retry (at most 300 s), each "
        "wait drawn at random between half and all of it (jitter), so many servers do not "
        "retry in step. The time of the next attempt is kept across restarts. Default: 1 "
        "(retries after ~1, 2, 4, 8 s). Must be > 0.",
    ).tag(config=True)

    queue_size = Int(
        1000,
        help="Events held per URL in the outbox (in the records database, db_path) while its "
        "receiver is slow or down, across restarts; when full, the oldest is dropped, with a "
        "log line, and counted as dropped. It bounds the disk a receiver down for days can "
        "take: about 1 KB an event. Default: 1000. Must be >= 1.",
    ).tag(config=True)

    flush_seconds = Float(
        5.0,
        help="At server stop, how long the deliveries that are due may take to go out before "
        "the server stops sending; the rest stay in the outbox and are sent after the next "
        "start (an attempt cut short may then arrive twice, under one webhook-id). Default: "
        "5. 0 stops sending at once.",
    ).tag(config=True)

    @validate("timeout_seconds", "backoff_seconds")
    def _positive(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(
                f"WebhookSender.{proposal['trait'].name} = {proposal['value']!r}: must be > 0"
            )
        return proposal["value"]

    @validate("max_attempts", "queue_size", "flush_seconds")
    def _at_least(self, proposal):
        least = 0 if proposal["trait"].name == "flush_seconds" else 1
        if proposal["value"] < least:
            raise TraitError(
                f"WebhookSender.{proposal['trait'].name} = {proposal['value']!r}: must be "
                f">= {least}"
            )
        return proposal["value"]

    def __init__(
        self,
        urls: list[str],
        secret: str | None,
        user: str,
        server: str,
        records: Records | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.key = signing_key(secret) if secret else None
        self.user, self.server = user, server
        self.records = records
        self.targets = [Target(url) for url in dict.fromkeys(urls)]  # a URL listed twice: once
        self._by_key = {t.key: t for t in self.targets}
        self._client: AsyncHTTPClient | None = None
        self._starting: asyncio.Task | None = None
        self._closing = False

    @property
    def _outbox(self) -> Records:
        """The records that hold the outbox (a sender built without them only checks its
        settings, and never records or starts)."""
        if self.records is None:
            raise RuntimeError("this WebhookSender has no records: it only checks settings")
        return self.records

    # -- recording: the event and its deliveries, in one transaction ---------------------------
    async def record(self, event: dict, s: Session) -> None:
        """Write ``event`` to the records with one outbox row per URL, in one transaction, then
        wake the URLs' workers. Takes what recording the event alone takes (one SQLite write,
        off the event loop): no receiver is waited for. Raises what the records raise."""
        try:
            rows = self._deliveries(event, s)
        except Exception:  # a bug here costs the webhooks this event, never the records
            self.log.exception("jupyter_gpu_pause: no webhook for the %s event", event["type"])
            rows = []
        for d in await self._outbox.add_event(event, rows, self.queue_size):
            self._dropped(d, "the outbox is full")
        if self._closing:
            if rows:
                self.log.info(
                    "jupyter_gpu_pause: the %s event came after the webhooks stopped: it waits "
                    "in the outbox and is sent after the next start",
                    event["type"],
                )
            return
        for t in self.targets:
            t.wake.set()

    def _deliveries(self, event: dict, s: Session) -> list[Delivery]:
        """The event serialised once, due at every URL that is not gone: every attempt, and
        every restart, sends these bytes under this webhook-id."""
        body = {**lifecycle_payload(event, s), "user": self.user, "server": self.server}
        data = json.dumps(body, separators=(",", ":")).encode()
        msg_id, now = f"msg_{uuid.uuid4().hex}", time.time()
        return [
            Delivery(t.key, t.label, msg_id, event["session_id"], body["type"], data, now, now)
            for t in self.targets
            if not t.gone
        ]

    def _dropped(self, d: Delivery, why: str) -> None:
        t = self._by_key.get(d.target)
        if t is not None:
            t.counts["dropped"] += 1
        self._count("dropped")
        self.log.warning(
            "jupyter_gpu_pause: webhook %s: dropped the %s event %s unsent (%s)",
            d.label,
            d.type,
            d.webhook_id,
            why,
        )

    def _count(self, result: str) -> None:
        try:
            webhook_delivery(result)
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not count a webhook delivery")

    # -- start: what the outbox holds, then each new event -----------------------------------
    def start(self) -> None:
        """Start a worker per URL, once the outbox is pruned: rows due at URLs no longer
        configured are dropped, and each URL keeps its newest ``queue_size``. A previous run's
        events go out first, with their attempts and schedule."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        try:
            stale, over = await self._outbox.outbox_prune(
                [t.key for t in self.targets], self.queue_size
            )
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not read the webhook outbox")
        else:
            for label, n in stale.items():
                self.log.warning(
                    "jupyter_gpu_pause: dropped %d undelivered events for the webhook %s, "
                    "which is no longer in GpuPauseApp.webhook_urls",
                    n,
                    label,
                )
                for _ in range(n):
                    self._count("dropped")
            for d in over:
                self._dropped(d, f"over queue_size = {self.queue_size}")
        for t in self.targets:
            t.worker = asyncio.get_running_loop().create_task(self._work(t))

    # -- delivery, one task per URL -----------------------------------------------------------
    async def _work(self, t: Target) -> None:
        """Send the URL's outbox oldest first, each row when it is due, until nothing is due
        at stop or the receiver is gone. Later rows wait behind a retried one: in order."""
        while not t.gone:
            t.wake.clear()  # before the read: an event written after it sets it again
            try:
                d = await self._outbox.outbox_head(t.key)
            except Exception:
                self.log.exception("jupyter_gpu_pause: could not read the webhook outbox")
                if self._closing:
                    return
                await self._nap(t, OUTBOX_RETRY)
                continue
            if d is None or d.next_attempt > time.time():
                if self._closing:
                    return  # nothing due before the stop: the rest waits for the next start
                await self._nap(t, None if d is None else d.next_attempt - time.time())
                continue
            t.sending = d
            try:
                await self._attempt(t, d)
            except Exception:  # a bug, or the records failing, must not silence the webhook
                self.log.exception("jupyter_gpu_pause: webhook %s", t.label)
                if self._closing:
                    return
                await self._nap(t, OUTBOX_RETRY)
            finally:
                t.sending = None

    async def _nap(self, t: Target, seconds: float | None) -> None:
        """Wait ``seconds`` (None: no limit), or less when an event or the stop wakes ``t``."""
        try:
            await asyncio.wait_for(t.wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _attempt(self, t: Target, d: Delivery) -> None:
        """One attempt, and what it leaves in the outbox: nothing after a 2xx, a 410 or the
        last attempt; else the row with one more attempt and the time of the next."""
        code, why = await self._post(t.url, d)
        if 200 <= code < 300:
            await self._outbox.outbox_done(d.seq)
            t.counts["ok"] += 1
            self._count("ok")
        elif code == 410:
            t.gone = True
            unsent = await self._outbox.outbox_clear(t.key) - 1
            t.counts["gone"] += 1
            self._count("gone")
            t.counts["dropped"] += max(unsent, 0)
            for _ in range(unsent):
                self._count("dropped")
            self.log.warning(
                "jupyter_gpu_pause: webhook %s answered 410 Gone: nothing more is sent to "
                "it until the server restarts (%d waiting events dropped)",
                t.label,
                max(unsent, 0),
            )
        elif d.attempts + 1 >= self.max_attempts:
            await self._outbox.outbox_done(d.seq)
            t.counts["failed"] += 1
            self._count("failed")
            self.log.warning(
                "jupyter_gpu_pause: webhook %s: the %s event %s was not delivered after %d "
                "attempts (last: %s); given up",
                t.label,
                d.type,
                d.webhook_id,
                d.attempts + 1,
                why,
            )
        else:
            retry_at = time.time() + self._backoff(d.attempts + 1)
            await self._outbox.outbox_retry(d.seq, d.attempts + 1, retry_at)
            t.counts["retries"] += 1
            self.log.debug(
                "jupyter_gpu_pause: webhook %s, %s %s, attempt %d: %s",
                t.label,
                d.type,
                d.webhook_id,
                d.attempts + 1,
                why,
            )

    def _backoff(self, retry: int) -> float:
        full = min(MAX_BACKOFF, self.backoff_seconds * 2 ** (retry - 1))
        return random.uniform(full / 2, full)

    async def _post(self, url: str, d: Delivery) -> tuple[int, str]:
        """One attempt: the status code (0 when there is none) and what went wrong."""
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"jupyter-gpu-pause/{__version__}",
            "webhook-id": d.webhook_id,
            "webhook-timestamp": str(timestamp),
        }
        if self.key is not None:
            headers["webhook-signature"] = sign(self.key, d.webhook_id, timestamp, d.body)
        request = HTTPRequest(
            url,
            method="POST",
            headers=headers,
            body=d.body,
            connect_timeout=self.timeout_seconds,
            request_timeout=self.timeout_seconds,
            follow_redirects=False,
        )
        if self._client is None:  # made here, on the running loop, for this sender alone
            self._client = AsyncHTTPClient(force_instance=True, max_clients=len(self.targets))
        try:
            response = await self._client.fetch(request, raise_error=False)
        except Exception as e:  # refused, unreachable, timed out, TLS…
            return 0, f"{type(e).__name__}: {e}"
        return response.code, f"HTTP {response.code}"

    # -- stop and status ------------------------------------------------------------------------
    async def stop(self) -> None:
        """Give the due deliveries ``flush_seconds`` to go out; what is left stays in the
        outbox for the next start."""
        if self._closing:  # stopped already
            return
        self._closing = True
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            await asyncio.wait([self._starting])
        workers = [t.worker for t in self.targets if t.worker and not t.worker.done()]
        for t in self.targets:
            t.wake.set()
        late = set(workers)
        if workers and self.flush_seconds > 0:
            _, late = await asyncio.wait(workers, timeout=self.flush_seconds)
        if late:
            for w in late:
                w.cancel()
            await asyncio.wait(late)
        if self._client is not None:
            self._client.close()
        if self.records is None or not self.targets:
            return
        try:
            left = sum((await self.records.outbox_counts()).values())
        except Exception:
            self.log.exception("jupyter_gpu_pause: could not read the webhook outbox")
            return
        if left:
            self.log.info(
                "jupyter_gpu_pause: %d webhook deliveries wait in the outbox (%s); they are "
                "sent after the next start",
                left,
                self.records.db_path,
            )

    async def status(self) -> list[dict]:
        """Per URL (as logs show it): whether it is disabled (it answered 410), the events
        waiting in the outbox (one being sent included), and the deliveries so far by result
        (ok, failed, gone, dropped) and the retries."""
        waiting = await self.records.outbox_counts() if self.records else {}
        return [
            {"url": t.label, "disabled": t.gone, "queued": waiting.get(t.key, 0), **t.counts}
            for t in self.targets
        ]
