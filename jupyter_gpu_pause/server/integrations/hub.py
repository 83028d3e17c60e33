"""Under JupyterHub, a user server that stops itself once its GPU work is paused
(``c.GpuPauseApp.stop_server_when_paused``).

Why: with KubeSpawner the GPU belongs to the user's *pod*. Pausing a kernel frees the GPU's
memory, but Kubernetes still counts the GPU as allocated to the pod until the pod goes; only
stopping the server gives it back to the cluster. The paused sessions live in the store and
the records, so the next start of the server lists them, ready to resume.

The rule, checked each time a pause completes (a user's, a policy's, the kernel API's):

1. no pause or resume is in flight (a pause still writing, a resume waiting or restoring);
2. at least one GPU session (docs/capacity.md) is ``paused``, and no GPU session has a kernel
   running;
3. every other running kernel of a notebook or console is idle and speaks Python: those are
   paused too (reason ``stop-server``), so their state survives the stop like the GPU
   sessions'; their own ``paused`` events bring the check back here. A kernel running a cell
   (someone's work in progress) or one that cannot be paused (not Python) keeps the server
   running: nothing is interrupted and no state is lost; the log says which session holds it;
4. then a ``server_stop`` event is recorded (on the session whose pause completed the rule)
   and the Hub is asked to stop this server. If the Hub refuses or cannot be reached, the
   failure is logged and recorded (``server_stop_failed``) and the server keeps serving.

A server start by itself never triggers a stop: its sessions may be paused since its last run,
and the user came back to resume them. Nor do the pauses of a stopping server's shutdown
checkpoint: ``stop_extension`` closes the listener before that checkpoint runs.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..config.checks import ConfigError
from ..lifecycle.lifecycle import Lifecycle
from ..state.errors import GpuPauseError
from ..state.event_types import EventType
from ..state.model import Session, SessionState

TRAIT = "GpuPauseApp.stop_server_when_paused"
REASON = "stop-server"  # the reason of the events and of the pauses this module starts
HUB_ENV = ("JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_USER")
REQUEST_TIMEOUT = 30.0  # seconds: the Hub answers a stop at once (202 while it is under way)
SCOPE = "delete:servers!server"  # what c.Spawner.server_token_scopes must add (docs/deploy)


@dataclass(frozen=True)
class HubServer:
    """This user server as the Hub's REST API names it, and the token it may use there."""

    api_url: str  # JUPYTERHUB_API_URL, e.g. http://hub:8081/hub/api
    user: str
    server_name: str  # "" for the user's default server
    token: str = field(repr=False)  # a credential: never in a log line or a traceback

    @classmethod
    def from_env(cls, env=os.environ) -> HubServer:
        """The server JupyterHub started, from the variables its spawner sets; ConfigError
        naming the setting and what is missing when JupyterHub did not start this server."""
        missing = [k for k in HUB_ENV if not env.get(k)]
        if missing:
            raise ConfigError(
                f"{TRAIT} = True, but this server was not started by JupyterHub: "
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set. "
                "Only a JupyterHub user server can stop itself; set it to False here."
            )
        return cls(
            api_url=env["JUPYTERHUB_API_URL"].rstrip("/"),
            user=env["JUPYTERHUB_USER"],
            server_name=env.get("JUPYTERHUB_SERVER_NAME", ""),
            token=env["JUPYTERHUB_API_TOKEN"],
        )

    @property
    def label(self) -> str:
        return f"{self.user}/{self.server_name}" if self.server_name else f"{self.user}'s server"

    @property
    def server_url(self) -> str:
        """``DELETE`` here stops this server (named servers have their own path)."""
        user = f"{self.api_url}/users/{quote(self.user, safe='')}"
        if self.server_name:
            return f"{user}/servers/{quote(self.server_name, safe='')}"
        return f"{user}/server"

    def may_stop(self, scopes: list[str]) -> bool:
        """Whether a token holding ``scopes`` (as the Hub's ``GET /user`` lists them,
        expanded) may stop this server. A group filter cannot be resolved here: trusted."""
        allowed = {
            "",
            f"!user={self.user}",
            f"!server={self.user}/{self.server_name}",
        }
        for scope in scopes:
            name, _, filter_ = scope.partition("!")
            if name in ("delete:servers", "servers", "admin:servers") and (
                ("!" + filter_ if filter_ else "") in allowed or filter_.startswith("group=")
            ):
                return True
        return False


def hub_server(enabled: bool) -> HubServer | None:
    """For ``_check_configuration``: the Hub server to stop, when the setting is on."""
    return HubServer.from_env() if enabled else None


class HubClient:
    """The two Hub API calls this server makes, with its own token."""

    def __init__(self, hub: HubServer):
        self.hub = hub
        self._http: AsyncHTTPClient | None = None

    async def _call(self, method: str, url: str) -> tuple[int, str]:
        if self._http is None:  # made on the running loop, for this client alone
            self._http = AsyncHTTPClient(force_instance=True)
        request = HTTPRequest(
            url,
            method=method,
            headers={"Authorization": f"token {self.hub.token}"},
            connect_timeout=REQUEST_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )
        response = await self._http.fetch(request, raise_error=False)
        if response.code == 599 and response.error:  # refused, unreachable, timed out
            raise OSError(str(response.error))
        return response.code, (response.body or b"").decode(errors="replace")

    async def _user(self) -> dict:
        """The Hub's model of the token's user (``GET /user``)."""
        code, body = await self._call("GET", f"{self.hub.api_url}/user")
        if code != 200:
            raise OSError(f"HTTP {code}: {_hub_message(body)}")
        return json.loads(body)

    async def token_scopes(self) -> list[str]:
        return list((await self._user()).get("scopes") or [])

    async def user_groups(self) -> list[str] | None:
        """The user's JupyterHub groups; None when the token may not read them (the Hub
        leaves ``groups`` out without ``read:users:groups``)."""
        groups = (await self._user()).get("groups")
        return None if groups is None else [str(g) for g in groups]

    async def stop_server(self) -> None:
        """Ask the Hub to stop this server; 202 (stopping) and 204 (stopped) are success."""
        code, body = await self._call("DELETE", self.hub.server_url)
        if code not in (202, 204):
            raise OSError(f"HTTP {code}: {_hub_message(body)}")

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


def _hub_message(body: str) -> str:
    try:
        return str(json.loads(body).get("message") or body)[:300]
    except (ValueError, AttributeError):
        return body[:300]


class StopWhenPaused:
    """A ``SessionTable`` listener applying the module's rule after each completed pause."""

    def __init__(self, lifecycle: Lifecycle, hub: HubServer, log):
        self.lc, self.hub, self.log = lifecycle, hub, log
        self.client = HubClient(hub)
        self._task: asyncio.Task | None = None
        self._again: str | None = None  # a pause completed while a check was running
        self._checking_scopes: asyncio.Task | None = None
        self.stopping = False  # asking the Hub, or the Hub accepted the stop
        self.closed = False  # the server is stopping anyway: its shutdown pauses stop nothing

    def start(self) -> None:
        """Check, in the background, that the token may stop this server, so that an admin
        learns of a missing scope when the server starts, not at the first pause."""
        self._checking_scopes = asyncio.ensure_future(self._check_scopes())

    async def _check_scopes(self) -> None:
        try:
            scopes = await self.client.token_scopes()
        except Exception as e:
            self.log.warning(
                "jupyter_gpu_pause: %s: could not read this server's token scopes from the "
                "Hub (%s); the server will try to stop itself anyway once its GPU sessions "
                "are paused",
                TRAIT,
                e,
            )
            return
        if not self.hub.may_stop(scopes):
            self.log.error(
                "jupyter_gpu_pause: %s is on, but this server's JUPYTERHUB_API_TOKEN may not "
                "stop it (no delete:servers scope for %s): pauses work, the server will not "
                "stop. The Hub's admin adds %r to c.Spawner.server_token_scopes "
                "(docs/deploy/jupyterhub-kubespawner.md).",
                TRAIT,
                self.hub.label,
                SCOPE,
            )

    # -- the listener ---------------------------------------------------------------------------
    def __call__(self, event: dict, s: Session) -> None:
        if event["type"] != EventType.PAUSED or self.stopping or self.closed:
            return
        if self._task is not None and not self._task.done():
            self._again = s.id  # checked again once the running check ends
            return
        self._task = asyncio.ensure_future(self._run(s.id))

    async def _run(self, session_id: str | None) -> None:
        while session_id:
            self._again = None
            # The paused event is recorded from inside the pause's operation: wait until the
            # operation has ended, or the rule would see a pause in flight: its own.
            task = self.lc.op_task(session_id)
            if task is not None:
                await asyncio.wait([task])
            try:
                await self.consider(session_id)
            except Exception:
                self.log.exception("jupyter_gpu_pause: %s: the check failed", TRAIT)
            session_id = self._again

    async def consider(self, trigger_id: str) -> None:
        """Apply the rule once, after the pause of ``trigger_id`` completed."""
        lc = self.lc
        await lc.table.refresh()
        in_flight = [s.path for s in lc.table if s.id in lc.ops]
        if in_flight:
            self._keep("a pause or resume is in flight", in_flight)
            return
        gpu = [s for s in lc.table if lc.gpu_session(s)]
        if not any(s.state == SessionState.PAUSED for s in gpu):
            return
        running = [
            s
            for s in lc.table
            if s.state != SessionState.PAUSED and lc.bridge.is_running(s.kernel_id)
        ]
        gpu_running = [s.path for s in running if lc.gpu_session(s)]
        if gpu_running:
            self._keep("GPU sessions still run", gpu_running)
            return
        if running:
            await self._pause_others(running)
            return
        await self._stop(lc.table.sessions.get(trigger_id), [s.path for s in gpu])

    def _keep(self, why: str, paths: list[str]) -> None:
        self.log.info(
            "jupyter_gpu_pause: %s: not stopping %s yet: %s (%s)",
            TRAIT,
            self.hub.label,
            why,
            ", ".join(paths),
        )

    async def _pause_others(self, running: list[Session]) -> None:
        """Pause the non-GPU sessions still running, all or none: if one cannot be paused
        without interrupting someone or losing its state, the server stays up as it is."""
        lc = self.lc
        # running: each has a kernel (bridge.is_running)
        busy = [s.path for s in running if s.kernel_id and lc.user_cell_running(s.kernel_id)]
        if busy:
            self._keep("a cell is running", busy)
            return
        other = [s.path for s in running if lc.bridge.language(s.kernel_name) != "python"]
        if other:
            self._keep("kernels that cannot be paused (not Python) are running", other)
            return
        self.log.warning(
            "jupyter_gpu_pause: %s: every GPU session of %s is paused; pausing the other "
            "running sessions before the server stops: %s",
            TRAIT,
            self.hub.label,
            ", ".join(s.path for s in running),
        )
        for s in running:
            try:
                await lc.pause(s.id, reason=REASON)
            except GpuPauseError as e:
                self._keep(f"{s.path} could not be paused: {e.message}", [s.path])
                return

    async def _stop(self, trigger: Session | None, paused: list[str]) -> None:
        lc = self.lc
        detail = {
            "message": f"Every GPU session is paused; asking JupyterHub to stop {self.hub.label}",
            "paused": paused,
            "hub_url": self.hub.server_url,
        }
        self.log.warning(
            "jupyter_gpu_pause: %s: %s (%s)", TRAIT, detail["message"], ", ".join(paused)
        )
        if trigger is not None:
            await lc.table.record_event(trigger, EventType.SERVER_STOP, REASON, **detail)
        self.stopping = True
        try:
            await self.client.stop_server()
        except Exception as e:
            self.stopping = False
            message = (
                f"JupyterHub did not stop {self.hub.label} ({e}); the server keeps running "
                "and nothing is lost: the sessions stay paused"
            )
            self.log.error("jupyter_gpu_pause: %s: %s", TRAIT, message)
            if trigger is not None:
                await lc.table.record_event(
                    trigger, EventType.SERVER_STOP_FAILED, REASON, message=message, error=str(e)
                )

    async def stop(self) -> None:
        """Server stop, before its shutdown checkpoint: from here on no pause leads to a
        stop of ours, and a check or a Hub call still running is cancelled (when the Hub is
        stopping this server at our request, the request has done its work)."""
        self.closed = True
        for task in (self._checking_scopes, self._task):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self.client.close()
