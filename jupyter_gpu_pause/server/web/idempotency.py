"""``Idempotency-Key`` on the requests that change something (DESIGN §12, docs/client.md).

Why: a client that lost an answer (a proxy dropped it, the network reset) cannot know whether
the server acted; retrying a pause might pause twice, or fail with a 409 that hides the pause
that did happen. With a key, the first answer (status and body, byte for byte) is kept in the
records for ``KEEP_SECONDS``, and the same request with the same key gets it again instead of
acting again. The same key with another request (method, path or body) is refused with 422
``idempotency-key-reused``: it cannot be a retry, and answering it with another request's answer
would mislead.

Keys are per user: one user's key never answers, nor blocks, another's request. A retry that
arrives while the first request is still being handled waits for it (``hold``), then gets its
answer. Answers of 500 and above are not kept: the request may not have acted, so a retry acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import time
from collections.abc import AsyncIterator

from ..state.errors import BadRequest, GpuPauseError, IdempotencyKeyReused
from ..state.records import KeptAnswer, Records

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
KEEP_SECONDS = 24 * 3600


def error_document(e: GpuPauseError) -> dict:
    """The REST error body of a domain error: ``{"message", "reason"}`` and its detail."""
    return {**e.detail, "message": e.message, "reason": e.reason}


def request_fingerprint(method: str, uri: str, body: bytes | None) -> str:
    """What makes two requests the same: method, path with query, and the JSON body (parsed,
    so that spacing and key order do not matter; no body and ``{}`` are the same)."""
    raw = body or b"{}"
    try:
        raw = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        pass  # not JSON: the handler refuses it, and the same bytes are the same request
    return f"{method} {uri} {hashlib.sha256(raw).hexdigest()}"


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise BadRequest(
            f"the {HEADER} header must be 1 to {MAX_KEY_LENGTH} printable ASCII characters "
            f"(a uuid4 is a good key); got {len(key)} characters",
            "bad-idempotency-key",
        )
    return key


def principal(handler) -> str:
    """Whose key it is: the user's name, except for the server's own token.

    Jupyter gives a request made with the server's shared token a new random "Anonymous" user
    each time (no user is named by that token), so every holder of that token is one
    principal, ``token:<hash>``; a named user (JupyterHub, an identity provider) is its name.
    """
    token = handler.token
    if token and handler.identity_provider.get_token(handler) == token:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    user = handler.current_user
    return "user:" + (getattr(user, "username", None) or str(user))


class IdempotencyKeys:
    """The kept answers (in the records) and the keys being answered now (in memory)."""

    def __init__(self, records: Records, keep_seconds: float = KEEP_SECONDS):
        self.records = records
        self.keep_seconds = keep_seconds
        self._held: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, user: str, key: str) -> AsyncIterator[None]:
        """Hold ``user``'s ``key`` while its request is handled; a second one waits."""
        name = (user, key)
        lock, users = self._held.get(name, (asyncio.Lock(), 0))
        self._held[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[name]
            if users == 1:
                del self._held[name]
            else:
                self._held[name] = (lock, users - 1)

    async def kept(self, user: str, key: str) -> KeptAnswer | None:
        return await self.records.kept_answer(user, key, time.time() - self.keep_seconds)

    async def keep(self, user: str, key: str, answer: KeptAnswer) -> None:
        await self.records.keep_answer(user, key, answer, time.time() - self.keep_seconds)


def idempotent(method):
    """A handler verb that honours ``Idempotency-Key`` (module docstring). The handler answers
    through ``send`` (which remembers the text it sent) or raises a GpuPauseError."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        key = self.request.headers.get(HEADER)
        if key is None:
            return await method(self, *args, **kwargs)
        check_key(key)
        keys: IdempotencyKeys = self.settings["gpu_pause_idempotency"]
        user = principal(self)
        request = request_fingerprint(self.request.method, self.request.uri, self.request.body)
        async with keys.hold(user, key):
            kept = await keys.kept(user, key)
            if kept is not None:
                if kept.request != request:
                    raise IdempotencyKeyReused(
                        f"the {HEADER} {key!r} was used within the last "
                        f"{keys.keep_seconds / 3600:g} h for another request (another body, "
                        "path or method); nothing was done. Use a new key for a new request",
                    )
                return _replay(self, kept)
            try:
                result = await method(self, *args, **kwargs)
            except GpuPauseError as e:
                if e.status < 500:
                    body = json.dumps(error_document(e)).encode()
                    await _keep(self, keys, user, key, KeptAnswer(request, e.status, body))
                raise
            answer = KeptAnswer(request, self.get_status(), self.sent)
            await _keep(self, keys, user, key, answer)
            return result

    return wrapper


async def _keep(handler, keys: IdempotencyKeys, user: str, key: str, answer: KeptAnswer) -> None:
    """Keep the answer; failing to (the records' disk) loses only the replay, never the
    answer already given, so it is logged, not raised."""
    try:
        await keys.keep(user, key, answer)
    except Exception:
        handler.log.warning("could not keep the answer to an %s", HEADER, exc_info=True)


def _replay(handler, kept: KeptAnswer) -> None:
    handler.set_status(kept.status)
    handler.set_header(REPLAYED_HEADER, "true")
    if kept.status == 204:
        handler.finish()
    else:
        handler.set_header("Content-Type", "application/json")
        handler.finish(kept.body)
