"""The Hub's REST API and the users' servers behind its proxy, with this service's own token.

The token is the service's (``JUPYTERHUB_API_TOKEN``, given by the Hub to a managed service, or
the ``api_token`` of the service's entry in ``jupyterhub_config.py``). Its role needs
``list:users`` and ``read:users`` (names, groups, servers) and ``access:servers`` (to call a
user's server); docs/hub-console.md gives the lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

TIMEOUT = 20.0  # seconds: a Hub or a user's server that answers nothing in this long is down


class HubUnreachable(Exception):
    """The Hub or a user's server could not be reached (refused, timed out)."""


@dataclass(frozen=True)
class Answer:
    code: int
    body: dict | list | None
    text: str

    def message(self) -> str:
        """The answer's own sentence (``{"message"}`` of Jupyter's and the Hub's errors)."""
        if isinstance(self.body, dict) and self.body.get("message"):
            return str(self.body["message"])
        return self.text[:300] or f"HTTP {self.code}"


@dataclass
class HubApi:
    api_url: str  # JUPYTERHUB_API_URL, e.g. http://127.0.0.1:8081/hub/api
    proxy_url: str  # where the users' servers are reached: the Hub's proxy, e.g. http://proxy
    token: str = field(repr=False)  # a credential: never in a log line

    def __post_init__(self) -> None:
        self.api_url = self.api_url.rstrip("/")
        self.proxy_url = self.proxy_url.rstrip("/")
        self._http: AsyncHTTPClient | None = None

    async def _fetch(self, method: str, url: str, body=None, headers=None) -> Answer:
        if self._http is None:  # made on the running loop, for this client alone
            self._http = AsyncHTTPClient(force_instance=True)
        request = HTTPRequest(
            url,
            method=method,
            headers={
                "Authorization": f"token {self.token}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
            body=None if body is None else json.dumps(body),
            connect_timeout=TIMEOUT,
            request_timeout=TIMEOUT,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )
        response = await self._fetch_raw(request)
        text = (response.body or b"").decode(errors="replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        return Answer(response.code, parsed, text)

    async def _fetch_raw(self, request: HTTPRequest):
        assert self._http is not None
        response = await self._http.fetch(request, raise_error=False)
        if response.code == 599:  # refused, unreachable, timed out
            raise HubUnreachable(str(response.error))
        return response

    # -- the Hub ------------------------------------------------------------------------------
    async def _pages(self, path: str, params: dict) -> list[dict]:
        """Every item of a paginated Hub list (JupyterHub 2.0+ pagination)."""
        items: list[dict] = []
        offset = 0
        while True:
            query = urlencode({**params, "offset": offset, "limit": 200})
            answer = await self._fetch(
                "GET",
                f"{self.api_url}/{path}?{query}",
                headers={"Accept": "application/jupyterhub-pagination+json"},
            )
            if answer.code != 200:
                raise HubUnreachable(f"the Hub answered {path}: {answer.message()}")
            body = answer.body
            if isinstance(body, list):  # an older Hub: no pagination
                return body
            assert isinstance(body, dict)
            items.extend(body.get("items") or [])
            nxt = (body.get("_pagination") or {}).get("next")
            if not nxt:
                return items
            offset = int(nxt["offset"])

    async def users(self) -> list[dict]:
        """Every user's model: name, admin, groups, servers (stopped ones included)."""
        return await self._pages("users", {"include_stopped_servers": 1})

    async def groups(self) -> dict[str, frozenset[str]]:
        """{user: their Hub groups}, from the users' models (no groups scope needed)."""
        return {u["name"]: frozenset(u.get("groups") or []) for u in await self.users()}

    # -- a user's server, through the proxy ---------------------------------------------------
    async def server_api(self, prefix: str, method: str, path: str, body=None) -> Answer:
        """``method`` on ``{prefix}gpu-pause/api/{path}`` of a user's server (``prefix``: its
        ``/user/<name>/`` path, as the server published it)."""
        url = f"{self.proxy_url}/{prefix.strip('/')}/gpu-pause/api/{path}"
        return await self._fetch(method, url, body)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
