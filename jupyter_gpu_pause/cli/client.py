"""Finding the running server and talking to its REST API (``{base_url}gpu-pause/api/``).

Which server, in this order: ``--url`` (with ``--token``); the environment,
``JUPYTER_GPU_PAUSE_URL`` with ``JUPYTER_GPU_PAUSE_CLI_TOKEN``; else the servers that
``jupyter server list`` sees (``jpserver-*.json`` in the Jupyter runtime dir), the most
recently started one whose process is alive.

The token variable is deliberately not ``JUPYTER_GPU_PAUSE_TOKEN``: the server sets
``JUPYTER_GPU_PAUSE_URL`` for its kernels (so ``gp.pause()`` finds it) and must never hand
them a token, so a kernel that runs this CLI gets the URL and, for the token, falls back to
the runtime dir's entry for that same server (readable only by its owner).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from .errors import UNREACHABLE, CliError, for_status

URL_ENV = "JUPYTER_GPU_PAUSE_URL"
TOKEN_ENV = "JUPYTER_GPU_PAUSE_CLI_TOKEN"
API = "gpu-pause/api/"
TIMEOUT = 30.0  # seconds per request: a GET is quick, a POST only starts an operation


@dataclass
class Target:
    """A server to talk to, and how it was found (said in errors, so a wrong pick shows)."""

    url: str  # base URL, ending with "/"
    token: str | None
    source: str
    root_dir: str | None = None


def running_servers(runtime_dir: str) -> list[dict]:
    """The servers of ``runtime_dir`` whose process is alive, most recently started first."""
    found = []
    for f in Path(runtime_dir).glob("jpserver-*.json"):
        try:
            info = json.loads(f.read_text())
            started = f.stat().st_mtime
        except (OSError, ValueError):
            continue  # being written or removed by its server
        if not isinstance(info, dict) or not info.get("url"):
            continue  # a server on a UNIX socket only: no URL to reach
        pid = info.get("pid")
        if isinstance(pid, int) and not psutil.pid_exists(pid):
            continue  # a server that died without cleaning up
        found.append((started, {**info, "file": str(f)}))
    return [info for _, info in sorted(found, key=lambda x: x[0], reverse=True)]


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def find_server(url: str, token: str | None, runtime_dir: str, warn=None) -> Target:
    """The server this command talks to (see the module docstring), or CliError(5).

    ``warn(text)`` hears about a choice among several running servers.
    """
    servers = None
    if not url and os.environ.get(URL_ENV):
        url, source = os.environ[URL_ENV], f"${URL_ENV}"
        token = token if token is not None else os.environ.get(TOKEN_ENV)
    elif url:
        source = "--url"
    else:
        source = None
    if url:
        if token is None:  # the same server's entry in the runtime dir has its token
            servers = running_servers(runtime_dir)
            same = [s for s in servers if _base(s["url"]) == _base(url)]
            token = same[0].get("token") if same else None
        return Target(_base(url), token or None, source)
    servers = running_servers(runtime_dir)
    if not servers:
        raise CliError(
            f"no running Jupyter server found in {runtime_dir}; start one, or name it with "
            f"--url and --token (or ${URL_ENV} and ${TOKEN_ENV})",
            UNREACHABLE,
        )
    chosen = servers[0]
    if len(servers) > 1 and warn:
        warn(
            f"{len(servers)} Jupyter servers are running; using the most recently started, "
            f"{chosen['url']} (pick another with --url)"
        )
    return Target(
        _base(chosen["url"]),
        (token if token is not None else chosen.get("token")) or None,
        chosen["file"],
        chosen.get("root_dir"),
    )


class Client:
    """The REST API of one server; every error becomes a CliError with its exit code."""

    def __init__(self, target: Target, timeout: float = TIMEOUT):
        self.target = target
        self.timeout = timeout

    def url(self, path: str, query: dict | None = None) -> str:
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return self.target.url + API + path + (f"?{urllib.parse.urlencode(q)}" if q else "")

    def request(self, method: str, path: str, body=None, query: dict | None = None):
        """The decoded JSON answer (None for 204)."""
        headers = {"Accept": "application/json"}
        if self.target.token:
            headers["Authorization"] = f"token {self.target.token}"
        data = None
        if method in ("POST", "PUT"):
            data = json.dumps(body if body is not None else {}).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(
            self.url(path, query), data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise self._refusal(e.code, e.read()) from None
        except OSError as e:  # URLError, refused, reset, timed out
            why = getattr(e, "reason", None) or e
            raise CliError(
                f"cannot reach the Jupyter server at {self.target.url} ({why}); is it running? "
                f"(found via {self.target.source})",
                UNREACHABLE,
            ) from None
        return json.loads(raw) if raw else None

    def _refusal(self, status: int, raw: bytes) -> CliError:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or "message" not in body:
            return CliError(
                f"the server at {self.target.url} answered HTTP {status} without "
                "jupyter_gpu_pause's JSON; is the extension enabled there? "
                "(jupyter server extension list)",
                UNREACHABLE,
            )
        message, reason = str(body["message"]), body.get("reason")
        if status in (401, 403) and reason in ("unauthorized", "forbidden", None):
            message += (
                f" (the server refused this client; give its token with --token or ${TOKEN_ENV})"
            )
        return CliError(message, for_status(status, reason))

    def get(self, path: str, **query):
        return self.request("GET", path, query=query)

    def post(self, path: str, body=None):
        return self.request("POST", path, body=body)

    def delete(self, path: str, **query):
        return self.request("DELETE", path, query=query)


def session_path(session_id: str, action: str = "") -> str:
    """``sessions/{id}[/action]``, the id quoted (a name typed by a user may hold anything)."""
    p = f"sessions/{urllib.parse.quote(session_id, safe='')}"
    return f"{p}/{action}" if action else p
