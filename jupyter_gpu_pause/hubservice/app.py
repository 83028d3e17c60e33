"""``jupyter gpu-pause hub-service``: the Hub console as a JupyterHub service.

Run by the Hub as a managed service (``c.JupyterHub.services``, with ``command``), which gives
it its address, prefix, token and OAuth client in ``JUPYTERHUB_*`` variables; or on its own
with the same variables set (an external service: its ``url`` and ``api_token`` in the Hub's
config). docs/hub-console.md gives the ``jupyterhub_config.py`` lines.

Settings come from ``jupyter_gpu_pause_hub_config.py`` (the Jupyter config path, or
``--config``) and the command line. The queue and the budgets are the users' servers' own
settings: when this service's are not given, it reads ``c.GpuPauseApp.capacity_queue_url``,
``budgets`` and ``budget_exempt`` from the same config, so one shared file serves both.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import secrets
import signal
import uuid
from urllib.parse import urlparse

from jupyter_core.application import JupyterApp, base_aliases
from tornado import web
from traitlets import Float, List, TraitError, Unicode, default, validate

from ..server.budgets.rules import BudgetError, parse_budgets
from ..server.capacity.folder import FolderQueue
from ..server.capacity.postgres import PostgresQueue, is_postgres_url
from ..server.capacity.queue import CapacityQueue
from ..server.capacity.where import check_queue_url
from ..server.config.checks import ConfigError
from ..version import __version__
from .console import Console
from .hub import HubApi

NAME = "gpu-pause"
SCOPE = "custom:gpu-pause:admin"


def _env(key: str) -> str:
    return os.environ.get(key, "")


class HubServiceApp(JupyterApp):
    """The Hub console: every user's GPU sessions, the line, usage and budgets."""

    name = "jupyter-gpu-pause-hub-service"
    version = __version__
    description = (
        "The GPU pause console, a JupyterHub service for the Hub's admins: every user's GPU "
        "sessions (running, waiting, paused, also of stopped servers), the line for capacity, "
        "usage and budgets, with pause, cancel, grant and reset. See docs/hub-console.md."
    )
    config_file_name = Unicode("jupyter_gpu_pause_hub_config", config=True)
    aliases = {
        **base_aliases,
        "url": "HubServiceApp.url",
        "queue-url": "HubServiceApp.queue_url",
        "proxy-url": "HubServiceApp.proxy_url",
    }

    url = Unicode(
        help="Where the service listens, e.g. http://127.0.0.1:10101. Default: "
        "$JUPYTERHUB_SERVICE_URL, which the Hub sets from the service's 'url' entry.",
    ).tag(config=True)

    prefix = Unicode(
        help="The URL path the Hub's proxy routes to the service. Default: "
        "$JUPYTERHUB_SERVICE_PREFIX, else /services/gpu-pause/.",
    ).tag(config=True)

    queue_url = Unicode(
        help="The capacity queue the users' servers share: the same value as their "
        "c.GpuPauseApp.capacity_queue_url (a postgresql:// URL, or a folder on this machine). "
        "Default: c.GpuPauseApp.capacity_queue_url of this service's config. Required.",
    ).tag(config=True)

    proxy_url = Unicode(
        help="Where the service reaches the users' servers: the Hub's proxy as seen from the "
        "service, e.g. http://proxy-public (Kubernetes) or http://127.0.0.1:8000. Default: "
        "the origin of $JUPYTERHUB_PUBLIC_HUB_URL (set when c.JupyterHub.public_url is). "
        "Required for pausing or cancelling on a user's behalf.",
    ).tag(config=True)

    budgets: List[list | None] = List(
        default_value=None,
        allow_none=True,
        help="The GPU-hour budgets, as the users' servers have them (c.GpuPauseApp.budgets, "
        "docs/budgets.md): the console shows each user's budget by the same rules. Default "
        "(None): c.GpuPauseApp.budgets of this service's config, else no budgets.",
    ).tag(config=True)

    budget_exempt = List(
        Unicode(),
        default_value=None,
        allow_none=True,
        help="Users no budget applies to, as c.GpuPauseApp.budget_exempt. Default (None): "
        "that setting of this service's config, else [].",
    ).tag(config=True)

    admin_scope = Unicode(
        SCOPE,
        help="The scope that opens the console to people who are not Hub admins: a JupyterHub "
        "5 custom scope, granted through a role (docs/hub-console.md). Hub admins are always "
        f"let in. Default: {SCOPE}.",
    ).tag(config=True)

    refresh_seconds = Float(
        3.0,
        help="Seconds between two looks of an open console page at the sessions and the line. "
        "Default: 3. Must be >= 0.5.",
    ).tag(config=True)

    @default("url")
    def _url(self):
        return _env("JUPYTERHUB_SERVICE_URL")

    @default("prefix")
    def _prefix(self):
        return _env("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{NAME}/"

    @default("queue_url")
    def _queue_url(self):
        return str(self.config.GpuPauseApp.get("capacity_queue_url") or "")

    @default("proxy_url")
    def _proxy_url(self):
        public = _env("JUPYTERHUB_PUBLIC_HUB_URL")
        if not public:
            return ""
        parts = urlparse(public)
        return f"{parts.scheme}://{parts.netloc}"

    @validate("refresh_seconds")
    def _refresh(self, proposal):
        if not proposal["value"] >= 0.5:
            raise TraitError(
                f"HubServiceApp.refresh_seconds = {proposal['value']!r}: must be >= 0.5"
            )
        return proposal["value"]

    # -- checks --------------------------------------------------------------------------------
    def _checked(self) -> tuple[str, list, list[str], str, HubApi]:
        """Every setting as it will be used; ConfigError naming the first bad one."""
        if not self.queue_url:
            raise ConfigError(
                "HubServiceApp.queue_url is not set (nor c.GpuPauseApp.capacity_queue_url): "
                "give the capacity queue the users' servers share"
            )
        where = check_queue_url(self.queue_url)
        raw = self.budgets
        if raw is None:
            raw = list(self.config.GpuPauseApp.get("budgets") or [])
        try:
            rules = parse_budgets(raw)
        except BudgetError as e:
            raise ConfigError(f"HubServiceApp.budgets: {e}") from None
        exempt = self.budget_exempt
        if exempt is None:
            exempt = list(self.config.GpuPauseApp.get("budget_exempt") or [])
        url = urlparse(self.url)
        if url.scheme not in ("http", "https") or not url.port:
            raise ConfigError(
                f"HubServiceApp.url = {self.url!r}: give http://IP:PORT (or run the service "
                "from the Hub, which sets $JUPYTERHUB_SERVICE_URL)"
            )
        if not self.prefix.startswith("/") or not self.prefix.endswith("/"):
            raise ConfigError(f"HubServiceApp.prefix = {self.prefix!r}: must start and end with /")
        token, api = _env("JUPYTERHUB_API_TOKEN"), _env("JUPYTERHUB_API_URL")
        if not token or not api:
            raise ConfigError(
                "JUPYTERHUB_API_TOKEN and JUPYTERHUB_API_URL are not set: run the service from "
                "the Hub (c.JupyterHub.services), or set them to the service's token and the "
                "Hub's API URL"
            )
        if self.proxy_url and urlparse(self.proxy_url).scheme not in ("http", "https"):
            raise ConfigError(
                f"HubServiceApp.proxy_url = {self.proxy_url!r}: give http(s)://HOST[:PORT]"
            )
        return where, rules, list(exempt), url.netloc, HubApi(api, self.proxy_url, token)

    def _queue(self, where: str) -> CapacityQueue:
        cls = PostgresQueue if is_postgres_url(where) else FolderQueue
        return cls(where, uuid.uuid4().hex, NAME, "the Hub console", parent=self)

    # -- running -------------------------------------------------------------------------------
    def start(self):
        try:
            importlib.import_module("jupyterhub.services.auth")
        except ImportError as e:
            self.log.critical(
                "jupyter gpu-pause hub-service needs JupyterHub (%s): run it where the Hub is "
                "installed, or pip install 'jupyter_gpu_pause[hub]'",
                e,
            )
            self.exit(1)
        try:
            where, rules, exempt, netloc, hub = self._checked()
        except ConfigError as e:
            self.log.critical("jupyter gpu-pause hub-service: %s", e)
            self.exit(1)
        if not self.proxy_url:
            self.log.warning(
                "HubServiceApp.proxy_url is not set (nor $JUPYTERHUB_PUBLIC_HUB_URL): the "
                "console shows everything, but cannot pause or cancel on a user's behalf"
            )
        asyncio.run(self._serve(where, rules, exempt, netloc, hub))

    async def _serve(self, where, rules, exempt, netloc: str, hub: HubApi) -> None:
        from .handlers import routes  # JupyterHub's auth: checked by start()

        queue = self._queue(where)
        console = Console(
            queue=queue,
            hub=hub,
            rules=rules,
            exempt=exempt,
            refresh_seconds=self.refresh_seconds,
            log=self.log,
        )
        app = web.Application(
            routes(self.prefix, console, self.admin_scope),
            cookie_secret=secrets.token_bytes(32),  # a restart asks the Hub to log in again
            console_prefix=self.prefix,
            log_function=self._log_request,
        )
        host, _, port = netloc.rpartition(":")
        server = app.listen(int(port), address=host.strip("[]") or "127.0.0.1")
        self.log.info(
            "jupyter gpu-pause hub-service %s: %s%s, queue %s", __version__, self.url,
            self.prefix, queue.where,
        )  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.stop()
        hub.close()
        await queue.close()

    def _log_request(self, handler) -> None:
        status = handler.get_status()
        level = self.log.info if status < 400 else self.log.warning
        level(
            "%d %s %.1fms", status, handler._request_summary(),
            1000 * handler.request.request_time(),
        )  # fmt: skip


main = launch_new_instance = HubServiceApp.launch_instance
