"""One HTTP exchange with the REST API, retried when the network or a proxy loses it.

Why retrying is safe: a GET changes nothing, and every POST and DELETE carries an
``Idempotency-Key`` (a uuid4 per call unless the caller gives one) that stays the same across
that call's retries, so a server that already acted answers a retry with its first answer
instead of acting twice (docs/client.md). Retried: no connection (refused, reset), an answer
dropped or cut mid-way, a timeout, and 502/503/504 (a proxy's or a starting server's), waiting
with exponential backoff or the answer's ``Retry-After``, within a bounded total time.
Everything else is an answer and becomes its typed error at once.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from email.message import Message
from typing import Any

from .discovery import TOKEN_ENV, Target
from .errors import GpuPauseError, ServerUnreachable, error_for

API = "gpu-pause/api/"
IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRIED_STATUS = (502, 503, 504)
# 503s that waiting a few seconds does not fix: the answer is final
FINAL_503 = ("key-missing",)


@dataclass(frozen=True)
class Retry:
    """How hard to try. ``attempts``: tries in all (1: no retry); ``backoff``: the first wait in
    seconds, doubled after each try up to ``max_backoff``, with ±25 % jitter so that clients
    dropped together do not come back together; ``budget``: seconds after which no new try
    starts, waits included (a ``Retry-After`` beyond it ends the retries)."""

    attempts: int = 6
    backoff: float = 0.1
    max_backoff: float = 5.0
    budget: float = 30.0

    def delay(self, attempt: int) -> float:
        base = min(self.max_backoff, self.backoff * 2.0**attempt)
        return base * random.uniform(0.75, 1.25)


DEFAULT_RETRY = Retry()
NO_RETRY = Retry(attempts=1)


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Lost(Exception):
    """A try that got no usable answer; ``wait`` is the server's Retry-After, if it gave one."""

    def __init__(self, error: GpuPauseError, wait: float | None = None):
        self.error, self.wait = error, wait


class Transport:
    """The REST API of one server: JSON in and out, typed errors, retries."""

    def __init__(self, target: Target, timeout: float = 30.0, retry: Retry = DEFAULT_RETRY):
        self.target = target
        self.timeout = timeout  # seconds per try: a GET is quick, a POST only starts an operation
        self.retry = retry

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return self.target.url + API + path + (f"?{urllib.parse.urlencode(q)}" if q else "")

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """The decoded JSON answer (None for 204), or the typed error of the last try.

        POST and DELETE get an Idempotency-Key (``idempotency_key`` or a new uuid4), the same
        for every retry of this call.
        """
        headers = {"Accept": "application/json"}
        if self.target.token:
            headers["Authorization"] = f"token {self.target.token}"
        data = None
        if method in ("POST", "PUT"):
            data = json.dumps(body if body is not None else {}).encode()
            headers["Content-Type"] = "application/json"
        if method in ("POST", "PUT", "DELETE", "PATCH"):
            headers[IDEMPOTENCY_HEADER] = idempotency_key or str(uuid.uuid4())
        url = self.url(path, query)
        start = time.monotonic()
        for attempt in range(max(1, self.retry.attempts)):
            try:
                return self._once(method, url, data, headers)
            except _Lost as lost:
                last = lost.error
                wait = lost.wait if lost.wait is not None else self.retry.delay(attempt)
                if time.monotonic() + wait - start > self.retry.budget:
                    break
                if attempt + 1 < self.retry.attempts:
                    time.sleep(wait)
        raise last

    def _once(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> Any:
        status, answer_headers, raw = self.exchange(method, url, data, headers)
        if not 200 <= status < 300:  # urllib raises HTTPError for every other status
            error = self._refusal(status, raw)
            if status in RETRIED_STATUS and error.reason not in FINAL_503:
                raise _Lost(error, retry_after(answer_headers.get("Retry-After"))) from None
            raise error from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise _Lost(self._unreachable(ValueError("an answer that is not JSON"))) from None

    def exchange(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, Message, bytes]:
        """One HTTP request and its whole answer, ``(status, headers, body)``, whatever the
        status; an answer that never came, or came cut, is ``_Lost``. The one place bytes
        cross the network (the tests check every answer here against ``api.yaml``)."""
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            try:
                return e.code, e.headers, e.read()
            except (OSError, http.client.HTTPException) as cut:
                raise _Lost(self._unreachable(cut)) from None
        except (OSError, http.client.HTTPException) as e:
            # refused, reset, closed before the answer (RemoteDisconnected), cut mid-way
            # (IncompleteRead), timed out: the request may or may not have been acted on
            raise _Lost(self._unreachable(e)) from None

    def _unreachable(self, e: BaseException) -> ServerUnreachable:
        why = getattr(e, "reason", None) or str(e) or type(e).__name__
        return ServerUnreachable(
            f"cannot reach the Jupyter server at {self.target.url} ({why}); is it running? "
            f"(found via {self.target.source})"
        )

    def _refusal(self, status: int, raw: bytes) -> GpuPauseError:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or "message" not in body:
            return ServerUnreachable(
                f"the server at {self.target.url} answered HTTP {status} without "
                "jupyter_gpu_pause's JSON; is the extension enabled there? "
                "(jupyter server extension list)",
                status,
            )
        error = error_for(status, body)
        if status in (401, 403) and error.reason in ("unauthorized", "forbidden", None):
            error.message += (
                f" (the server refused this client; give its token with --token or ${TOKEN_ENV})"
            )
            error.args = (error.message,)
        return error
