"""Finding the running server: the same rules for the client, the CLI and a kernel.

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from jupyter_core.paths import jupyter_runtime_dir

from .errors import ServerUnreachable

URL_ENV = "JUPYTER_GPU_PAUSE_URL"
TOKEN_ENV = "JUPYTER_GPU_PAUSE_CLI_TOKEN"


@dataclass
class Target:
    """A server to talk to, and how it was found (said in errors, so a wrong pick shows)."""

    url: str  # base URL, ending with "/"
    token: str | None
    source: str
    root_dir: str | None = None


def running_servers(runtime_dir: str) -> list[dict[str, Any]]:
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


def base_url(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def find_server(
    url: str | None = None,
    token: str | None = None,
    runtime_dir: str | None = None,
    warn: Callable[[str], object] | None = None,
    given_as: str = "--url",
) -> Target:
    """The server to talk to (see the module docstring), or ServerUnreachable.

    ``runtime_dir`` defaults to Jupyter's (``jupyter --runtime-dir``); ``given_as`` is how
    errors name an explicit ``url`` (the CLI's ``--url``, the client's ``url=``).

    ``warn(text)`` hears about a choice among several running servers.
    """
    runtime_dir = runtime_dir or jupyter_runtime_dir()
    servers = None
    if not url and os.environ.get(URL_ENV):
        url, source = os.environ[URL_ENV], f"${URL_ENV}"
        token = token if token is not None else os.environ.get(TOKEN_ENV)
    else:
        source = given_as  # said only when ``url`` was given
    if url:
        if token is None:  # the same server's entry in the runtime dir has its token
            servers = running_servers(runtime_dir)
            same = [s for s in servers if base_url(s["url"]) == base_url(url)]
            token = same[0].get("token") if same else None
        return Target(base_url(url), token or None, source)
    servers = running_servers(runtime_dir)
    if not servers:
        raise ServerUnreachable(
            f"no running Jupyter server found in {runtime_dir}; start one, or name it with "
            f"--url and --token (or ${URL_ENV} and ${TOKEN_ENV})"
        )
    chosen = servers[0]
    if len(servers) > 1 and warn:
        warn(
            f"{len(servers)} Jupyter servers are running; using the most recently started, "
            f"{chosen['url']} (pick another with --url)"
        )
    return Target(
        base_url(chosen["url"]),
        (token if token is not None else chosen.get("token")) or None,
        chosen["file"],
        chosen.get("root_dir"),
    )
