"""Watching a cloud's preemption notice, so the sessions of a spot or preemptible VM are
checkpointed while the notice period runs (AWS gives two minutes, GCP about thirty seconds)
rather than only in the few seconds after the SIGTERM that follows.

The metadata endpoints answer the same question in two dialects:

- AWS ``/latest/meta-data/spot/instance-action``: 404 while there is no notice, 200 with a JSON
  body (``{"action": "terminate", "time": …}``) once there is one. Instances that require
  IMDSv2 answer 401 until a session token (``PUT /latest/api/token``) comes with the request;
  the poller fetches one when asked for it.
- GCP ``/computeMetadata/v1/instance/preempted``: 200 with ``FALSE`` or ``TRUE``; it needs the
  ``Metadata-Flavor: Google`` header, which is sent on every request (AWS ignores it).

An endpoint that cannot be reached is logged once, not at every poll: off the cloud, or
behind a firewall, the log would otherwise fill with the same line every few seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

REQUEST_TIMEOUT = 2.0  # seconds: the endpoints are link-local and answer in milliseconds
TOKEN_TTL = 21600  # seconds an IMDSv2 token is asked to live (its maximum)
MAX_NOTICE = 500  # characters of a notice's body kept for the log


class NoticeError(Exception):
    """The endpoint answered something that is neither a notice nor "no notice"."""


def notice_in(code: int, body: str) -> str | None:
    """The notice a metadata answer carries, or None when it says there is none."""
    if code == 404:  # AWS: no instance-action scheduled
        return None
    if code != 200:
        raise NoticeError(f"HTTP {code}")
    text = body.strip()
    if not text or text.upper() == "FALSE":  # GCP: not preempted
        return None
    return text[:MAX_NOTICE]  # AWS: the instance-action document; GCP: "TRUE"


class PreemptionPoller:
    """Read ``url`` every ``interval`` seconds; at the first notice, await ``on_notice(text)``
    once and stop polling (the notice does not go away until the VM does)."""

    def __init__(
        self,
        url: str,
        interval: float,
        on_notice: Callable[[str], Awaitable[object]],
        log,
        timeout: float = REQUEST_TIMEOUT,
    ):
        self.url, self.interval, self.on_notice, self.log = url, interval, on_notice, log
        self.timeout = timeout
        self.notice: str | None = None
        self._token: str | None = None
        self._problem: str | None = None  # the error last logged, so it is logged once
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                notice = await self.check()
            except Exception as e:
                self._trouble(str(e) or type(e).__name__)
                notice = None
            if notice is not None:
                self.notice = notice
                self.log.warning(
                    "jupyter_gpu_pause: preemption notice from %s: %s; checkpointing now",
                    self.url,
                    notice,
                )
                try:
                    await self.on_notice(notice)
                except Exception:
                    self.log.exception("jupyter_gpu_pause: the preemption checkpoint failed")
                return
            await asyncio.sleep(self.interval)

    async def check(self) -> str | None:
        """One read of the endpoint: the notice, or None. Raises on what is neither."""
        code, body = await self._get()
        if code == 401:  # IMDSv2 required: a (new) session token, then once more
            self._token = await self._new_token()
            code, body = await self._get()
        notice = notice_in(code, body)
        if self._problem is not None:
            self.log.info("jupyter_gpu_pause: %s answers again", self.url)
            self._problem = None
        return notice

    def _trouble(self, problem: str) -> None:
        if problem == self._problem:
            self.log.debug("jupyter_gpu_pause: preemption notice URL: %s", problem)
            return
        self._problem = problem
        self.log.warning(
            "jupyter_gpu_pause: cannot read the preemption notice at %s (%s); still trying "
            "every %g s, and this is logged again only if the error changes",
            self.url,
            problem,
            self.interval,
        )

    async def _get(self) -> tuple[int, str]:
        headers = {"Metadata-Flavor": "Google"}
        if self._token:
            headers["X-aws-ec2-metadata-token"] = self._token
        return await self._fetch(HTTPRequest(self.url, headers=headers, **self._limits()))

    async def _new_token(self) -> str:
        parts = urlsplit(self.url)
        url = urlunsplit((parts.scheme, parts.netloc, "/latest/api/token", "", ""))
        request = HTTPRequest(
            url,
            method="PUT",
            body=b"",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL)},
            **self._limits(),
        )
        code, body = await self._fetch(request)
        if code != 200 or not body.strip():
            raise NoticeError(f"HTTP 401, and no IMDSv2 token from {url} (HTTP {code})")
        return body.strip()

    def _limits(self) -> dict:
        return {"connect_timeout": self.timeout, "request_timeout": self.timeout}

    async def _fetch(self, request: HTTPRequest) -> tuple[int, str]:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
        if response.code == 599:  # tornado's code for "no HTTP answer at all"
            raise NoticeError(str(response.error or "no answer"))
        return response.code, response.body.decode("utf-8", "replace") if response.body else ""
