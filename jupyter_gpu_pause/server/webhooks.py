"""Lifecycle events POSTed to the admin's webhooks, signed the Standard Webhooks way.

The listener only serialises the event and appends it to one in-memory queue per URL; a task
per URL delivers that queue in order, in the background. So a receiver that is down, slow or
failing never delays a pause or a resume: at worst its queue fills and the oldest events are
dropped (with a log line). Each POST carries ``webhook-id`` (one per event, the same on every
retry, so a receiver can drop duplicates), ``webhook-timestamp`` (the attempt's time) and,
with a secret, ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``.
See docs/webhooks.md.
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
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Float, Int, TraitError, validate
from traitlets.config import LoggingConfigurable

from .. import __version__
from .bus import lifecycle_payload
from .metrics import webhook_delivery
from .model import Session

MAX_BACKOFF = 300.0  # seconds: the longest wait between two attempts, whatever backoff_seconds


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


@dataclass
class Message:
    """One event, serialised once: every attempt sends these very bytes."""

    id: str
    type: str
    body: bytes


@dataclass
class Target:
    """One webhook URL, its queue, its worker and what happened to its deliveries."""

    url: str
    queue: deque = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task | None = None
    sending: Message | None = None
    gone: bool = False
    counts: dict = field(
        default_factory=lambda: {"ok": 0, "failed": 0, "gone": 0, "dropped": 0, "retries": 0}
    )


class WebhookSender(LoggingConfigurable):
    """A ``SessionTable`` listener that delivers each event to every webhook URL; each
    event's outcome per URL (ok, failed, gone) is counted in ``status()`` and the
    ``jupyter_gpu_pause_webhook_deliveries_total`` metric."""

    timeout_seconds = Float(
        10.0,
        help="Seconds one POST (connect, send, answer) may take before it counts as a failed "
        "attempt. Default: 10. Must be > 0.",
    ).tag(config=True)

    max_attempts = Int(
        5,
        help="Attempts per event and URL (the first and its retries) before the event is "
        "given up for that URL, logged and counted as failed. Default: 5. Must be >= 1.",
    ).tag(config=True)

    backoff_seconds = Float(
        1.0,
        help="Wait before the first retry; it doubles with each retry (at most 300 s), each "
        "wait drawn at random between half and all of it (jitter), so many servers do not "
        "retry in step. Default: 1 (retries after ~1, 2, 4, 8 s). Must be > 0.",
    ).tag(config=True)

    queue_size = Int(
        1000,
        help="Events held per URL while its receiver is slow or down; when full, the oldest "
        "is dropped, with a log line. Default: 1000. Must be >= 1.",
    ).tag(config=True)

    flush_seconds = Float(
        5.0,
        help="At server stop, how long the events still queued may take to go out before the "
        "rest are abandoned (logged). Default: 5. 0 abandons them at once.",
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.key = signing_key(secret) if secret else None
        self.user, self.server = user, server
        self.targets = [Target(url) for url in urls]
        self._client: AsyncHTTPClient | None = None
        self._closing = False

    # -- the listener: quick, never raises, never waits ------------------------------------
    def __call__(self, event: dict, s: Session) -> None:
        if self._closing:
            self.log.warning(
                "jupyter_gpu_pause: the %s event came after the webhooks stopped; not sent",
                event.get("type"),
            )
            return
        body = {**lifecycle_payload(event, s), "user": self.user, "server": self.server}
        msg = Message(
            id=f"msg_{uuid.uuid4().hex}",
            type=body["type"],
            body=json.dumps(body, separators=(",", ":")).encode(),
        )
        for t in self.targets:
            if not t.gone:
                self._enqueue(t, msg)

    def _enqueue(self, t: Target, msg: Message) -> None:
        if len(t.queue) >= self.queue_size:
            old = t.queue.popleft()
            t.counts["dropped"] += 1
            self.log.warning(
                "jupyter_gpu_pause: webhook %s is %d events behind; dropped the oldest (%s %s)",
                url_label(t.url),
                len(t.queue) + 1,
                old.type,
                old.id,
            )
        t.queue.append(msg)
        t.wake.set()
        if t.worker is None or t.worker.done():
            t.worker = asyncio.get_running_loop().create_task(self._work(t))

    # -- delivery, one task per URL -----------------------------------------------------------
    async def _work(self, t: Target) -> None:
        """Send the queue in order until it is empty at stop, or the receiver is gone."""
        while True:
            if not t.queue:
                if self._closing:
                    return
                t.wake.clear()
                await t.wake.wait()
                continue
            t.sending = t.queue.popleft()
            try:
                result = await self._deliver(t, t.sending)
            except Exception:  # a bug here must not silence the webhook for good
                self.log.exception("jupyter_gpu_pause: webhook %s", url_label(t.url))
                result = "failed"
            t.sending = None
            t.counts[result] += 1
            try:
                webhook_delivery(result)
            except Exception:
                self.log.exception("jupyter_gpu_pause: could not count a webhook delivery")
            if result == "gone":
                t.gone = True
                self.log.warning(
                    "jupyter_gpu_pause: webhook %s answered 410 Gone: nothing more is sent to "
                    "it until the server restarts (%d queued events dropped)",
                    url_label(t.url),
                    len(t.queue),
                )
                t.counts["dropped"] += len(t.queue)
                t.queue.clear()
                return

    async def _deliver(self, t: Target, msg: Message) -> str:
        why = ""
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                t.counts["retries"] += 1
                await asyncio.sleep(self._backoff(attempt - 1))
            code, why = await self._post(t.url, msg)
            if 200 <= code < 300:
                return "ok"
            if code == 410:
                return "gone"
            self.log.debug(
                "jupyter_gpu_pause: webhook %s, %s %s, attempt %d: %s",
                url_label(t.url),
                msg.type,
                msg.id,
                attempt,
                why,
            )
        self.log.warning(
            "jupyter_gpu_pause: webhook %s: the %s event %s was not delivered after %d "
            "attempts (last: %s)",
            url_label(t.url),
            msg.type,
            msg.id,
            self.max_attempts,
            why,
        )
        return "failed"

    def _backoff(self, retry: int) -> float:
        full = min(MAX_BACKOFF, self.backoff_seconds * 2 ** (retry - 1))
        return random.uniform(full / 2, full)

    async def _post(self, url: str, msg: Message) -> tuple[int, str]:
        """One attempt: the status code (0 when there is none) and what went wrong."""
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"jupyter-gpu-pause/{__version__}",
            "webhook-id": msg.id,
            "webhook-timestamp": str(timestamp),
        }
        if self.key is not None:
            headers["webhook-signature"] = sign(self.key, msg.id, timestamp, msg.body)
        request = HTTPRequest(
            url,
            method="POST",
            headers=headers,
            body=msg.body,
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
        """Give the queued events ``flush_seconds`` to go out, then abandon the rest."""
        if self._closing:  # stopped already
            return
        self._closing = True
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
        unsent = sum(len(t.queue) + (t.sending is not None) for t in self.targets)
        if unsent:
            self.log.warning(
                "jupyter_gpu_pause: %d webhook deliveries abandoned at server stop", unsent
            )
        if self._client is not None:
            self._client.close()

    def status(self) -> list[dict]:
        """Per URL (as logs show it): whether it is disabled (it answered 410), the events
        queued, and the deliveries so far by result (ok, failed, gone, dropped, retries)."""
        return [
            {
                "url": url_label(t.url),
                "disabled": t.gone,
                "queued": len(t.queue) + (t.sending is not None),
                **t.counts,
            }
            for t in self.targets
        ]
