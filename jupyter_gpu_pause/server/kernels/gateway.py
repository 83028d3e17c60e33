"""Kernels behind a gateway (``--GatewayClient.url``, Jupyter Enterprise Gateway).

jupyter_server then starts kernels through the gateway's REST API and relays the browser's
websocket to it; the kernel runs elsewhere, and this server holds no ZMQ ports, no process and
no connection key of it. So here:

- the agent runs over the gateway's websocket for the kernel (``gateway_channels.py``), with the
  gateway's own auth headers (jupyter_server's ``GatewayKernelClient`` sends none, blocks the
  event loop while it connects, and cannot run ``execute_interactive``);
- a kernel's death shows as the gateway's ``restarting``/``dead`` status on that websocket
  (there is no pid to watch), and the gateway's kernel model says when a restart settled;
- kernelspecs are the gateway's (its spec manager is async, and lists specs this machine lacks);
- every kernel started through the gateway gets, in ``KERNEL_*`` variables of its start request
  (the only ones jupyter_server forwards), the server's URL, an id the server chose and a key
  derived from that id (``KernelKeys``, ``issue_kernel_keys``): it can call for its own session
  only;
- jupyter_server's log line for a gateway kernel start, which prints the server's whole
  environment and the kernel's key, is cut short (``RedactSecrets``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import secrets
import uuid

from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayMappingKernelManager
from traitlets import TraitError, Unicode, validate
from traitlets.config import LoggingConfigurable

from ...kernel import capability
from ...kernel.api import GATEWAY_KEY_VARIABLE, GATEWAY_URL_VARIABLE
from ...kernel.protocol import GPU, NoArgs, Request
from ..capacity.probes import GpuUsage
from ..state.errors import AgentFailed, KernelDied, WrongState
from .bridge import WATCH_INTERVAL, KernelBridge, _parent
from .gateway_channels import GatewayChannels, IopubWatch

SETTLE_POLL = 0.5
# Seconds a look at the gateway's kernel list (``GET /api/kernels``) is reused: the sessions API
# polled by the Lab panel, scripts and the idle monitor asks for it on every look. The list
# brings the kernels' connections, the state of kernels the monitor does not watch, and kernels
# the gateway culled; our own starts and shutdowns make the next look ask again.
KERNEL_LIST_SECONDS = 10.0
# Seconds between two GPU reports asked of an idle remote kernel's agent (each is one silent
# request, which the kernel shows as a moment of busy)
GPU_REPORT_INTERVAL = 30.0
# Environment variables whose values the server's log must never show
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$", re.IGNORECASE)
# Variables Enterprise Gateway reads from a start request: the id the client chose for the kernel
KERNEL_ID_VARIABLE = "KERNEL_ID"


def gateway_enabled(kernel_manager) -> bool:
    """jupyter_server runs its kernels through a gateway (``--GatewayClient.url``)."""
    return isinstance(kernel_manager, GatewayMappingKernelManager)


class KernelKeys:
    """One key per remote kernel, which its capability is derived from (``kernel/capability.py``).

    A local kernel uses its own ZMQ connection key, which the server knows; a gateway's kernel
    has a key only the gateway knows. So the server chooses the id of each kernel it starts
    through the gateway and sends it ``derived_key(secret, id)``: the kernel runs user code, and
    holds the key of its own id only, never one that opens another kernel's session. The secret
    is made anew at each start of the server and stays in its memory (not in ``os.environ``,
    which terminals and every other local process the server starts inherit): kernels started
    before a restart cannot call ``gp.pause()`` (the server's own pauses still work).
    """

    def __init__(self, server_url: str, log: logging.Logger):
        self.server_url = server_url
        self.log = log
        self._secret = secrets.token_bytes(32)
        self._warned = False

    def key(self, kernel_id: str) -> bytes:
        return capability.derived_key(self._secret, kernel_id)

    def environment(self, kernel_id: str) -> dict[str, str]:
        """What a kernel started under ``kernel_id`` gets: its id, where this server is, its key."""
        return {
            KERNEL_ID_VARIABLE: kernel_id,
            GATEWAY_URL_VARIABLE: self.server_url,
            GATEWAY_KEY_VARIABLE: self.key(kernel_id).hex(),
        }

    def check(self, chosen: str, started: str) -> None:
        """Warn (once) when the gateway gave a kernel another id than the one chosen: that
        kernel holds the key of an id no kernel has, so its calls answer 403."""
        if started != chosen and not self._warned:
            self._warned = True
            self.log.warning(
                "jupyter_gpu_pause: the gateway ignored the kernel id the server chose "
                "(KERNEL_ID %s, started as %s): its kernels cannot call gp.pause() or "
                "gp.session() (403); the panel, the REST API and the policies still pause them",
                chosen,
                started,
            )


def issue_kernel_keys(kernel_manager, keys: KernelKeys) -> None:
    """Make every kernel the server starts through the gateway carry its own id and key.

    Notebooks opened in Lab, ``POST /api/kernels`` and our resumes all start kernels through the
    mapping kernel manager's ``start_kernel``, whose ``env`` jupyter_server merges into the
    gateway's start request; so the server's instance gets this wrapper of that one method. The
    chosen id travels as ``KERNEL_ID`` in ``env`` only: a ``kernel_id`` argument means "use a
    kernel the gateway already runs", and such a call passes through untouched (no key is made
    for a kernel the server did not start).
    """
    start = kernel_manager.start_kernel

    @functools.wraps(start)
    async def start_kernel(*, kernel_id=None, **kwargs):
        if kernel_id is not None:
            return await start(kernel_id=kernel_id, **kwargs)
        chosen = str(uuid.uuid4())
        kwargs["env"] = {**(kwargs.get("env") or {}), **keys.environment(chosen)}
        started = await start(**kwargs)
        keys.check(chosen, started)
        return started

    kernel_manager.start_kernel = start_kernel


class GatewayBridge(KernelBridge):
    """``KernelBridge`` for kernels that run behind a gateway (see the module's docstring)."""

    supports_warm_kernels = False  # a warm kernel would take on this machine's paths
    local_processes = False

    def __init__(self, *args, kernel_keys: KernelKeys, **kwargs):
        super().__init__(*args, **kwargs)
        self._keys = kernel_keys
        self._languages: dict[str, str] = {}  # kernelspec name -> language, from the gateway
        self._states: dict[str, str] = {}  # kernel id -> last status seen on IOPub
        self._watches: dict[str, IopubWatch] = {}
        self._listed: float | None = None  # loop time of the last look at the gateway's list
        self._gpu: dict[str, tuple[float, GpuUsage | None]] = {}  # kernel id -> (when, report)
        self._gpu_tasks: dict[str, asyncio.Task] = {}

    # -- facts -----------------------------------------------------------------------------
    def pid(self, kernel_id: str) -> int | None:
        return None  # the process runs where the gateway put it

    def execution_state(self, kernel_id: str) -> str | None:
        """The kernel's last status on IOPub while the monitor watches it, else the gateway's
        model (refreshed with every look at the sessions)."""
        if kernel_id in self._states:
            return self._states[kernel_id]
        return super().execution_state(kernel_id)

    def connections(self, kernel_id: str) -> int:
        """Browser connections, as the gateway counts them, less our own IOPub watch."""
        if not self.is_running(kernel_id):
            return 0
        model = getattr(self.kernel(kernel_id), "kernel", None) or {}
        ours = 1 if getattr(self._watches.get(kernel_id), "connected", False) else 0
        return max(0, int(model.get("connections") or 0) - ours)

    def gpu_usage(self, kernel_id: str) -> GpuUsage | None:
        """What the kernel's agent last reported holding on GPUs (NVML on this machine cannot
        see a remote process), or None before its first report. A new report is asked for in
        the background when the last is ``GPU_REPORT_INTERVAL`` old and the kernel is idle."""
        loop = asyncio.get_running_loop()
        when, usage = self._gpu.get(kernel_id, (None, None))
        due = when is None or loop.time() - when >= GPU_REPORT_INTERVAL
        idle = self.execution_state(kernel_id) == "idle" and not self.agent_running(kernel_id)
        if due and idle and kernel_id not in self._gpu_tasks and kernel_id in self._watches:
            self._gpu_tasks[kernel_id] = asyncio.ensure_future(self._ask_gpu(kernel_id))
        return usage

    async def _ask_gpu(self, kernel_id: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            report = await self.run_agent(kernel_id, GPU, NoArgs())
            usage = GpuUsage(
                devices=[str(d)[:80] for d in report.get("devices", [])][:16],
                memory_bytes=max(0, int(report.get("memory_bytes") or 0)),
            )
        except Exception as e:  # no agent there, the kernel went away: not measured
            self.log.debug("jupyter_gpu_pause: no GPU report from %s: %s", kernel_id, e)
            usage = None
        finally:
            self._gpu_tasks.pop(kernel_id, None)
        if kernel_id in self._watches:
            self._gpu[kernel_id] = (loop.time(), usage)

    def subscribe_iopub(self, kernel_id: str, on_message) -> IopubWatch:
        """The monitor's activity watch of a remote kernel (its ``close()`` ends it)."""

        def seen(msg: dict) -> None:
            if msg.get("msg_type") == "status":
                state = (msg.get("content") or {}).get("execution_state")
                if state:
                    self._states[kernel_id] = state
            on_message(msg)

        def closed() -> None:
            self._watches.pop(kernel_id, None)
            self._states.pop(kernel_id, None)
            self._gpu.pop(kernel_id, None)  # a report in flight ends by itself (~50 ms)

        watch = self._watches[kernel_id] = IopubWatch(kernel_id, seen, self.log, closed)
        return watch

    def holds_capability(self, kernel_id: str, presented: str) -> bool:
        """The caller proved it is this remote kernel, with the key the server sent it for its
        id (``KernelKeys``)."""
        return self.is_running(kernel_id) and capability.matches(
            self._keys.key(kernel_id), kernel_id, presented
        )

    def language(self, kernel_name: str) -> str:
        return self._languages.get(kernel_name, "unknown")

    async def _gateway_specs(self) -> dict:
        specs = await self.ksm.get_all_specs()
        self._languages = {
            name: str((model.get("spec") or {}).get("language") or "unknown").lower()
            for name, model in specs.items()
        }
        return specs

    async def jupyter_sessions(self) -> list[dict]:
        loop = asyncio.get_running_loop()
        if self._listed is None or loop.time() - self._listed >= KERNEL_LIST_SECONDS:
            # the gateway's models: execution state, connections, kernels it culled
            self._listed = loop.time()
            try:
                await self.km.list_kernels()
            except Exception as e:
                self.log.warning("jupyter_gpu_pause: cannot list the gateway's kernels: %s", e)
        sessions = await super().jupyter_sessions()
        names = {js["kernel"]["name"] for js in sessions if js.get("kernel")}
        if names - set(self._languages):
            try:
                await self._gateway_specs()
            except Exception as e:  # the gateway is down: pauses wait until it answers
                self.log.warning("jupyter_gpu_pause: cannot list the gateway's kernelspecs: %s", e)
        return sessions

    # -- running the agent -------------------------------------------------------------------
    async def _open_client(self, kernel_id: str, request: Request, stdin: bool = False):
        client = GatewayChannels(kernel_id, request)  # (one websocket carries stdin too)
        try:
            await client.start_channels()
        except Exception as e:
            raise AgentFailed(
                f"cannot open the kernel's channels on the gateway ({type(e).__name__}: {e}); "
                "nothing was changed",
                "gateway-unreachable",
            ) from e
        return client

    async def _watch(self, kernel_id: str, pid: int | None, client) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if not self.is_running(kernel_id):
                raise KernelDied("the kernel was shut down")
            if client.died:
                raise KernelDied(client.died)
            if client.lost:
                raise AgentFailed(
                    f"{client.lost}; the kernel may still run with its state", "gateway-lost"
                )

    async def settle(self, kernel_id: str, dead_pid: int | None, timeout: float = 20.0) -> bool:
        """After a kernel died: True once a fresh process answers under its id on the gateway
        (its model's state may say ``restarting`` or ``starting`` until someone asks)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            if not self.is_running(kernel_id):
                return False
            try:
                model = await self.kernel(kernel_id).refresh_model()
            except Exception:
                model = None
            if model is None:
                return False  # the gateway no longer has it
            if await self._answers(kernel_id, max(0.1, min(2.0, end - loop.time()))):
                return True
            await asyncio.sleep(SETTLE_POLL)
        return self.is_running(kernel_id)

    async def _answers(self, kernel_id: str, timeout: float) -> bool:
        """The kernel answers a kernel_info request over the gateway within ``timeout``."""
        client = GatewayChannels(kernel_id)
        try:
            await client.start_channels()
            msg_id = client.kernel_info()
            while _parent(await client.get_shell_msg(timeout=timeout)) != msg_id:
                pass
            return True
        except Exception:  # no answer (queue.Empty) or no connection: not yet
            return False
        finally:
            await client.aclose()

    # -- starting ----------------------------------------------------------------------------
    async def start(self, kernel_name: str, cwd: str, path: str, name: str, env: dict) -> str:
        """Start a kernel of the gateway's kernelspec ``kernel_name``. Of ``env``, the gateway
        gets only ``KERNEL_*`` variables and ``GatewayClient.allowed_envs``."""
        try:
            specs = await self._gateway_specs()
        except Exception as e:
            raise WrongState(
                f"cannot list the gateway's kernelspecs ({type(e).__name__}: {e})",
                "gateway-unreachable",
            ) from e
        if kernel_name not in specs:
            raise WrongState(
                f"the gateway no longer offers the kernelspec '{kernel_name}'", "no-kernelspec"
            )
        try:
            return await self._start(kernel_name, cwd, path, name, env)
        finally:
            self._listed = None  # the gateway's list changed: the next look asks for it

    async def shutdown(self, kernel_id: str) -> None:
        try:
            await super().shutdown(kernel_id)
        finally:
            self._listed = None

    async def finish(self, kernel_id: str) -> str:
        """Always the graceful shutdown, without asking the agent: a gateway's kernel is
        stopped by its DELETE, which does not take ``now`` (the gateway decides how its
        process ends)."""
        await self.shutdown(kernel_id)
        return "graceful: the kernel runs behind a gateway, which stops it its own way"


class RedactSecrets(logging.Filter):
    """Keeps secrets out of the server's log.

    jupyter_server logs ``GatewayKernelManager started kernel: <id>, args: {...}`` at INFO,
    where ``args`` holds the whole environment of the server (tokens, cloud credentials) and
    the kernel's key. That part is replaced; in every message, any of ``secrets`` is masked, and
    so is any value written after a secret-looking name (``'KERNEL_GPU_PAUSE_KEY': '…'``,
    ``token=…``), which covers the per-kernel keys, too many to list.
    """

    _ARGS = re.compile(r"(GatewayKernelManager started kernel: \S+), args: .*", re.DOTALL)
    _NAMED = re.compile(
        r"""(\b\w*(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY)['"]?\s*[:=]\s*['"]?)"""
        r"""[^'"\s,;&}]{6,}""",
        re.IGNORECASE,
    )

    def __init__(self, secrets):
        super().__init__()
        self.secrets = [s for s in secrets if s and len(s) >= 6]

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:
            return True
        new = self._ARGS.sub(r"\1 (its arguments are not logged: they hold secrets)", text)
        new = self._NAMED.sub(r"\1[secret]", new)
        for secret in self.secrets:
            new = new.replace(secret, "[secret]")
        if new != text:
            record.msg, record.args = new, ()
        return True


def redact_log(log: logging.Logger, secrets) -> RedactSecrets:
    """Install ``RedactSecrets`` on the server's logger and its handlers (a filter on a logger
    sees only records made on that very logger; one on a handler sees every record it writes)."""
    redactor = RedactSecrets(secrets)
    log.addFilter(redactor)
    for handler in log.handlers:
        handler.addFilter(redactor)
    return redactor


class GatewayKernels(LoggingConfigurable):
    """Settings for kernels behind a gateway; used only when ``--GatewayClient.url`` is set."""

    server_url = Unicode(
        "",
        config=True,
        help="The URL at which kernels started through a gateway reach this server for "
        "gp.pause() and gp.session() (sent to them as KERNEL_GPU_PAUSE_URL). Default '': the "
        "server's own connection URL (e.g. http://127.0.0.1:8888/), right when the gateway "
        "runs kernels on this machine. Set it when they run elsewhere, e.g. "
        "'http://jupyter-alice.hub.svc:8888/user/alice/'. Ignored without a gateway.",
    )

    @validate("server_url")
    def _http_url(self, proposal):
        value = proposal["value"]
        if value and not re.match(r"https?://[^/\s]+", value):
            raise TraitError(
                f"GatewayKernels.server_url = {value!r}: is not an http:// or https:// URL"
            )
        return value


def build_bridge(app, answer_timeout: float) -> KernelBridge:
    """The bridge for the server's kernels: local ones, or a gateway's (then every kernel start
    carries the remote kernel's variables and the server's log loses its secrets)."""
    server = app.serverapp
    args = (server.kernel_manager, server.session_manager, server.kernel_spec_manager, app.log)
    if not gateway_enabled(server.kernel_manager):
        return KernelBridge(*args, answer_timeout=answer_timeout)
    settings = GatewayKernels(parent=app)
    keys = KernelKeys(settings.server_url or server.connection_url, app.log)
    issue_kernel_keys(server.kernel_manager, keys)
    gateway = GatewayClient.instance()
    hidden = [getattr(server.identity_provider, "token", ""), gateway.auth_token]
    hidden += [v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= 8]
    redact_log(server.log, hidden)
    app.log.info(
        "jupyter_gpu_pause: kernels run through the gateway at %s; warm kernels are off for them",
        gateway.url,
    )
    if "://" not in app.store_url or app.store_url.startswith("file://"):
        app.log.warning(
            "jupyter_gpu_pause: GpuPauseApp.store_url %s is a folder, but the kernels run "
            "behind a gateway and write their checkpoints themselves: unless the gateway runs "
            "them on this machine (or the folder is shared storage mounted at the same path), "
            "use a shared store such as s3://bucket/prefix (docs/gateway.md)",
            app.store_url,
        )
    return GatewayBridge(*args, answer_timeout=answer_timeout, kernel_keys=keys)
