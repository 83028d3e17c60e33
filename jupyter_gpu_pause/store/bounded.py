"""Bounded store requests: a time limit per attempt, a few retries with backoff, then an error.

An object store that stops answering must never hang a pause. A frozen endpoint is the hard
case: TCP still connects (the operating system answers for the process), the request body fills
the socket buffer and then waits for room forever, and socket read timeouts never fire because
nothing is being read yet. So every attempt of every request runs under ``asyncio.wait_for``
with ``store_timeout`` as its limit, whatever the HTTP client is doing, and the thread that asked
waits on the event loop in a way that an interrupt (Ctrl-C, the server's cancel) ends at once,
cancelling the request instead of leaving it to run on.

The bound of one request, from its first attempt to its error, is
``ATTEMPTS * timeout + sum(BACKOFF)`` — 93 s at the default ``store_timeout`` of 30 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

ATTEMPTS = 3  # tries of one request before it fails
BACKOFF = (1.0, 2.0)  # seconds slept before the 2nd and the 3rd try (times 0.5-1, jitter)
POLL = 0.25  # seconds between two looks of a waiting thread (progress, deadlines)

# Error codes of S3 and S3-compatible stores that mean "try again later" (HTTP 4xx among them).
_RETRY_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "InternalError",
        "ServiceUnavailable",
        "XAmzContentSHA256Mismatch",
    }
)
_RETRY_ERRNO = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT}
)
_FINAL = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError)

T = TypeVar("T")


def call_bound(timeout: float) -> float:
    """Seconds one request may take in all, retries and backoff included."""
    return ATTEMPTS * timeout + sum(BACKOFF)


class AttemptTimeout(TimeoutError):
    """One attempt got no complete answer within ``store_timeout``."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"no answer within {timeout:g} s")


class Stalled(TimeoutError):
    """Work on the store made no progress for longer than any request may take."""


class _ClientError(Protocol):
    """botocore's ClientError, as far as it is read here (botocore has no types)."""

    response: dict[str, Any]


def _client_error(exc: BaseException) -> _ClientError | None:
    """The botocore ClientError behind ``exc`` (s3fs translates them into OSError)."""
    for e in (exc, exc.__cause__):
        if e is not None and hasattr(e, "response") and isinstance(e.response, dict):
            return e
    return None


def retryable(exc: BaseException) -> bool:
    """Whether another attempt could succeed: timeouts, lost connections, 5xx, throttling.

    A missing object, a refused permission, a bad request or a programming error is final.
    """
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # ours, sockets', botocore's
        return True
    ce = _client_error(exc)
    if ce is not None:
        err = ce.response.get("Error") or {}
        status = (ce.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        return err.get("Code") in _RETRY_CODES or status >= 500 or status in (408, 429)
    if isinstance(exc, _FINAL):
        return False
    if isinstance(exc, OSError) and exc.errno in _RETRY_ERRNO:
        return True
    try:  # the HTTP layers' own connection errors, without importing them for local stores
        from aiohttp import ClientError as AiohttpError
        from botocore.exceptions import (
            ConnectionError as BotoConnectionError,
        )
        from botocore.exceptions import (
            HTTPClientError,
            IncompleteReadError,
            ResponseStreamingError,
        )
    except ImportError:  # pragma: no cover - both come with s3fs
        return False
    transient = (
        AiohttpError,
        BotoConnectionError,
        HTTPClientError,
        IncompleteReadError,
        ResponseStreamingError,
    )
    return isinstance(exc, transient) or isinstance(exc.__cause__, transient)


def describe(exc: BaseException) -> str:
    """The store's error in words, for a message a user reads."""
    ce = _client_error(exc)
    if ce is not None:
        err = ce.response.get("Error") or {}
        code, message = err.get("Code"), err.get("Message")
        if code or message:
            return ": ".join(str(x) for x in (code, message) if x)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


async def attempts(
    request: Callable[[], Awaitable[T]],
    timeout: float,
    tries: int = ATTEMPTS,
    backoff: Sequence[float] = BACKOFF,
) -> T:
    """Run ``request()`` until it succeeds, each try cut at ``timeout`` seconds.

    Raises the last error once the tries are spent or at the first final one (a missing
    object is an answer, not a failure).
    """
    for i in range(tries):
        try:
            return await asyncio.wait_for(request(), timeout)
        except asyncio.TimeoutError as e:  # wait_for's (empty) or botocore's read timeout
            error: BaseException = e if str(e) else AttemptTimeout(timeout)
        except Exception as e:
            error = e
        if i == tries - 1 or not retryable(error):
            raise error
        await asyncio.sleep(backoff[min(i, len(backoff) - 1)] * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")  # pragma: no cover


def run(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, T],
    *,
    stalled: float,
    progress: Callable[[], object] | None = None,
    on_poll: Callable[[], object] | None = None,
) -> T:
    """Run ``coro`` on ``loop`` (fsspec's I/O thread) and wait here for its result.

    fsspec's ``sync`` does this too, but leaves the coroutine running when the waiting thread
    is interrupted; here an interrupt, like any other way out, cancels it. The wait also ends,
    cancelling the work, once ``progress()`` has not changed for ``stalled`` seconds — a
    backstop under the per-attempt limits, which should always fire first. ``on_poll`` runs in
    this thread at every look (progress reports must come from the kernel's main thread).
    """
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        seen: object = None
        since = time.monotonic()
        while True:
            done, _ = concurrent.futures.wait([future], timeout=POLL)
            if done:
                return future.result()
            if on_poll is not None:
                on_poll()
            now = progress() if progress is not None else None
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since > stalled:
                raise Stalled(f"no progress for {stalled:g} s")
    except BaseException:
        future.cancel()
        raise
