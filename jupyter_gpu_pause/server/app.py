"""The server extension: configuration traits and the wiring of the services.

Services are built in ``initialize_settings`` and published as ``settings["gpu_pause"]``; the
start hook loads the records once the event loop runs, and ``stop_extension`` cancels what is
still in flight.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import uuid
from urllib.parse import urlsplit

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    Int,
    List,
    TraitError,
    Type,
    Unicode,
    default,
    validate,
)

from ..store.keyfile import KeyFileError
from ..store.retention import DEFAULT_RETENTION, parse_retention
from .capacity import (
    AutoCapacity,
    CapacityProvider,
    CapacityQueue,
    FolderQueue,
    NvmlCapacity,
    PostgresQueue,
    ProviderClass,
    QuotaCapacity,
    build_provider,
    is_postgres_url,
)
from .capacity.probes import GpuProbe, NvmlProbe
from .capacity.where import check_queue_url
from .config.checks import (
    ConfigError,
    check_db_path,
    check_known_keys,
    check_secret_file,
    check_store,
)
from .config.traits import not_negative
from .integrations.hub import StopWhenPaused, hub_server
from .integrations.maintenance import StoreMaintenance
from .integrations.preemption import PreemptionPoller
from .integrations.shutdown import EmergencyCheckpoint, SigintStop
from .kernels.gateway import GatewayKernels, build_bridge
from .lifecycle.lifecycle import Lifecycle
from .lifecycle.operations import PauseSettings
from .monitor.activity import ActivityTracker
from .monitor.monitor import Monitor
from .monitor.policy import DEFAULT_POLICIES, PolicyError, parse_policies
from .state.bus import EventBus
from .state.checkpoints import Checkpoints
from .state.records import Records
from .telemetry.metrics import attach as attach_metrics
from .telemetry.webhooks import WebhookSender, signing_key
from .web.handlers import handlers


def _data(*parts: str) -> str:
    return os.path.join(jupyter_data_dir(), "gpu_pause", *parts)


class GpuPauseApp(ExtensionApp):
    """Pause idle GPU kernels to durable storage and resume them with their state."""

    name = "jupyter_gpu_pause"
    load_other_extensions = True

    store_url = Unicode(
        help="Where checkpoints are stored: a local folder or an fsspec URL such as "
        "'s3://bucket/prefix'. Default: {jupyter_data_dir}/gpu_pause/store."
    ).tag(config=True)

    @default("store_url")
    def _store_url_default(self):
        return _data("store")

    store_options = Dict(
        help="fsspec storage options for store_url, e.g. {'endpoint_url': 'http://…'}: only "
        "options that filesystem takes, and no credentials (the options are sent to every "
        "kernel, which runs user code; a key, secret, token or password here stops the "
        "server). Credentials come from the filesystem's own chain in the server's "
        "environment (for S3: AWS_* variables, AWS_PROFILE, an instance or pod role). "
        "Default: {}."
    ).tag(config=True)

    db_path = Unicode(
        help="SQLite file for session records and events. "
        "Default: {jupyter_data_dir}/gpu_pause/gpu_pause.sqlite."
    ).tag(config=True)

    @default("db_path")
    def _db_path_default(self):
        return _data("gpu_pause.sqlite")

    secret_file = Unicode(
        help="HMAC key that signs checkpoint manifests. Created (mode 0600) when missing and "
        "the store holds no checkpoint; a key readable by others stops the server. When it "
        "is missing while the store holds signed checkpoints, no new key is made: nothing is "
        "paused or resumed, and every affected session says so, until the file is restored. "
        "Default: {jupyter_data_dir}/gpu_pause/secret."
    ).tag(config=True)

    @default("secret_file")
    def _secret_file_default(self):
        return _data("secret")

    poll_interval = Float(
        10.0, help="Seconds between two idle-monitor passes. Default: 10. Must be > 0."
    ).tag(config=True)

    capture = Enum(
        ["namespace", "registered"],
        default_value="namespace",
        help="'namespace' (default): registered names are required and every other user "
        "variable is saved best effort; 'registered': only registered names are saved.",
    ).tag(config=True)

    policies = List(
        Dict(),
        default_value=DEFAULT_POLICIES,
        help="Idle policies, first match wins; a session matching none is never acted on. "
        "Each: {'name', 'match': {'kernel_name': glob, 'uses_gpu': bool, 'user': glob on the "
        "server's owner ($JUPYTERHUB_USER under JupyterHub, else the OS user)}, "
        "'idle_timeout': s, 'warn_before': s, 'action': 'pause'|'cull'|'warn'|'none', "
        "'gpu_idle_below': %, 'count_connected': bool, 'max_keepalive': s}. Default: "
        "GPU-holding kernels pause after 3600 s idle, warned 300 s before. [] turns it off.",
    ).tag(config=True)

    gpu_probe_class = Type(
        default_value=NvmlProbe,
        klass=GpuProbe,
        help="Measures the GPU memory and utilisation of kernel processes. Default: NvmlProbe "
        "(reports nothing where NVML or a GPU is missing).",
    ).tag(config=True)

    gpu_hold_alarm_hours = Float(
        0.0,
        help="Raise a gpu_hold_alarm event once per this many hours for a session holding "
        "a GPU, whatever its activity. Default: 0 (off). Example: 12.",
    ).tag(config=True)

    capacity_provider_class = ProviderClass(
        default_value=AutoCapacity,
        klass=CapacityProvider,
        help="Decides whether and on which GPU a resumed GPU session may run: 'auto' "
        "(default: 'nvml' where NVML sees a GPU, else 'unlimited'), 'nvml' (real GPUs and "
        "their free memory, best fit, the kernel pinned with CUDA_VISIBLE_DEVICES), 'quota' "
        "(c.QuotaCapacity.max_sessions / max_gpu_bytes, no GPU needed), 'unlimited' (resume "
        "at once), or an importable CapacityProvider subclass.",
    ).tag(config=True)

    gpu_kernelspecs = List(
        Unicode(),
        default_value=[],
        help="Globs of kernelspec names whose sessions count as GPU sessions even when NVML "
        "cannot tell (no GPU visible yet, a container): they resume through the capacity "
        "queue. Default: []. Example: ['python3-gpu*'].",
    ).tag(config=True)

    capacity_queue_url = Unicode(
        help="Where the resume queue and GPU usage shared by every Jupyter server pointing "
        "at it live: a folder on this machine's local disk (the servers of one machine, one "
        "per user under JupyterHub: give them all one folder, group-writable, mode 2770; not "
        "on NFS), or a postgresql:// URL (the servers of a cluster; tables in the schema "
        "gpu_pause; see docs/capacity.md). Default: {jupyter_data_dir}/gpu_pause/ (this "
        "server only).",
    ).tag(config=True)

    @default("capacity_queue_url")
    def _capacity_queue_url_default(self):
        return _data()

    store_rescan_interval = Float(
        60.0,
        help="Seconds between two reads of the store for sessions this server does not know "
        "(paused by another server of the same user and root folder sharing the store: "
        "another node) and paused sessions with a newer checkpoint (resumed and paused again "
        "there). Each read lists the store's sessions and each paused session's checkpoints. "
        "Default: 60. 0 = only once, at start.",
    ).tag(config=True)

    resume_timeout = Float(
        1800.0,
        help="Longest a resume waits in line for a GPU before it fails, the checkpoint "
        "intact (Resume tries again). Default: 1800 (30 min). 0 = wait forever.",
    ).tag(config=True)

    store_timeout = Float(
        30.0,
        help="Seconds one store request (a blob part, a manifest, a listing) may take before "
        "it is retried; a few retries with backoff follow, then the pause or resume fails "
        "with the store's error, the kernel untouched. Bounds how long an unreachable store "
        "can hold a pause (see docs/storage.md). Default: 30. Must be > 0.",
    ).tag(config=True)

    retention = Dict(
        default_value=DEFAULT_RETENTION,
        help="Which checkpoints are kept, applied after every pause and every hour: "
        "'keep_last' (newest N per session), 'max_age_days', 'max_total_bytes' (per "
        "session) and 'max_store_bytes' (the whole store); 0 turns a rule off. Manifests are "
        "deleted oldest first, never the newest valid checkpoint of a paused session nor one "
        "a resume is reading. Missing keys keep their defaults. Default: "
        "{'keep_last': 3, 'max_age_days': 30, 'max_total_bytes': 0, 'max_store_bytes': 0}.",
    ).tag(config=True)

    gc_grace_seconds = Float(
        86400.0,
        help="Blobs no manifest references are deleted by garbage collection only once they "
        "are older than this (by the store's own timestamps), so a pause still writing is "
        "never robbed. Default: 86400 (one day). Must be >= 0.",
    ).tag(config=True)

    max_checkpoint_bytes = Int(
        0,
        help="Refuse checkpoints larger than this many bytes, with a clear message. "
        "Default: 0 (no limit). Example: 50_000_000_000.",
    ).tag(config=True)

    kernel_answer_timeout = Float(
        30.0,
        help="Seconds a kernel that is not running a cell may take to answer before a pause, "
        "a dry run or a restore gives up on it (the kernel is stuck: a stopped process, a "
        "deadlock), leaving it untouched. A kernel running a cell is waited for as long as "
        "the cell runs. Default: 30. Must be > 0.",
    ).tag(config=True)

    verify_blobs = Bool(
        True,
        help="Re-read each newly written blob and check its hash before the kernel is "
        "shut down. Default: True.",
    ).tag(config=True)

    max_concurrent_restores = Int(
        0,
        help="Resumes that start a kernel and restore into it at the same time; the others "
        "wait their turn (first come, first served), their session saying so. Starting a "
        "kernel and restoring take CPU seconds each: many more at once than there are CPUs "
        "only slow the server's own answers (and each other) down. 0: twice the CPUs this "
        "server may use (its CPU affinity). Example: 4. Default: 0.",
    ).tag(config=True)

    warm_kernels = Bool(
        True,
        help="Keep one kernel started, per kernelspec that has a paused session, with the "
        "agent and the packages of the paused checkpoints' objects (torch, pandas, ...) "
        "already imported, and resume into it: a resume then skips starting a kernel and "
        "its imports (seconds). It holds "
        "no GPU (CUDA is not initialised until the restore) but host memory (~0.4 GB with "
        "torch), and Jupyter lists it among its kernels (with no notebook). It takes on the "
        "resumed notebook's environment (JPY_SESSION_NAME, the capacity grant's variables) "
        "and folder before restoring. False: every resume starts a new kernel. Default: True.",
    ).tag(config=True)

    webhook_urls = List(
        Unicode(),
        default_value=[],
        help="URLs (http or https) each lifecycle event is POSTed to as JSON, in the background "
        "(never delaying a pause or resume), from an outbox in the records database "
        "(db_path): an event not delivered when the server stops is sent after its next "
        "start, under the same webhook-id. Retried with exponential backoff and jitter; a "
        "receiver answering 410 Gone is not sent to again until the server restarts. "
        "Timeouts, attempts and outbox size: c.WebhookSender.*. See docs/webhooks.md. "
        "Default: [].",
    ).tag(config=True)

    webhook_secret = Unicode(
        None,
        allow_none=True,
        help="Shared secret that signs each webhook POST, Standard Webhooks style "
        "('webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>'); a 'whsec_' "
        "prefix marks a base64 key, anything else is used as UTF-8 bytes. Default: None "
        "(posts are not signed).",
    ).tag(config=True)

    shutdown_checkpoint = Enum(
        ["gpu", "all", "none"],
        default_value="gpu",
        help="On SIGTERM (or SIGINT without a terminal) or server stop, before Jupyter shuts "
        "the kernels down, checkpoint "
        "in parallel: 'gpu' (default) the running sessions holding a GPU or matching "
        "gpu_kernelspecs, 'all' every running session (Python kernels), 'none' nothing. "
        "Each goes through the normal pause (a running cell is waited for); they are "
        "paused after the next start. See docs/shutdown.md.",
    ).tag(config=True)

    shutdown_grace_seconds = Float(
        25.0,
        help="Time budget, in seconds, of the checkpoints taken at shutdown, all together; "
        "one not done by then is abandoned (its kernel shut down by Jupyter, the session's "
        "last checkpoint kept) and the session recorded 'failed' with reason "
        "'shutdown-timeout'. Keep it at least 15 s below the platform's own grace period "
        "(Kubernetes terminationGracePeriodSeconds). Default: 25. Must be > 0.",
    ).tag(config=True)

    preemption_notice_url = Unicode(
        "",
        help="A cloud preemption notice URL polled every preemption_poll_seconds (e.g. "
        "'http://169.254.169.254/latest/meta-data/spot/instance-action' on AWS, "
        "'http://metadata.google.internal/computeMetadata/v1/instance/preempted' on GCP): "
        "a notice (AWS: 200 with a body, IMDSv2 token fetched when asked; GCP: body 'TRUE', "
        "header 'Metadata-Flavor: Google' sent) checkpoints the sessions "
        "shutdown_checkpoint names, once, reason 'preemption', while the server keeps "
        "running. Unreachable: logged once. Default: '' (off).",
    ).tag(config=True)

    preemption_poll_seconds = Float(
        5.0,
        help="Seconds between two reads of preemption_notice_url. Default: 5. Must be > 0.",
    ).tag(config=True)

    stop_server_when_paused = Bool(
        False,
        help="Under JupyterHub: once a pause leaves every GPU session of this server paused "
        "(none running, no pause or resume in flight), pause the other idle notebooks too and "
        "ask the Hub to stop this server, so that its pod and GPU go back to the cluster "
        "(KubeSpawner); the next start lists the paused sessions. A cell running, or a kernel "
        "that cannot be paused, keeps the server up. Needs the 'delete:servers!server' scope "
        "in c.Spawner.server_token_scopes; outside JupyterHub, True stops the server at "
        "start. See docs/deploy/jupyterhub-kubespawner.md. Default: False.",
    ).tag(config=True)

    @validate(
        "poll_interval",
        "kernel_answer_timeout",
        "store_timeout",
        "shutdown_grace_seconds",
        "preemption_poll_seconds",
    )
    def _positive(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(
                f"GpuPauseApp.{proposal['trait'].name} = {proposal['value']!r}: must be more "
                "than 0 seconds"
            )
        return proposal["value"]

    @validate(
        "gpu_hold_alarm_hours", "max_checkpoint_bytes", "resume_timeout", "store_rescan_interval"
    )
    def _not_negative(self, proposal):
        return not_negative(self, proposal, " (0 turns it off)")

    @validate("max_concurrent_restores")
    def _restore_slots(self, proposal):
        return not_negative(self, proposal, " (0: twice the CPUs this server may use)")

    @validate("webhook_urls")
    def _webhook_urls(self, proposal):
        for url in proposal["value"]:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise TraitError(
                    f"GpuPauseApp.webhook_urls: {url!r} is not an http:// or https:// URL"
                )
        return proposal["value"]

    @validate("webhook_secret")
    def _webhook_secret(self, proposal):
        if proposal["value"]:
            try:
                signing_key(proposal["value"])
            except ValueError as e:
                raise TraitError(str(e)) from None
        return proposal["value"]

    @validate("preemption_notice_url")
    def _notice_url(self, proposal):
        url = proposal["value"]
        parts = urlsplit(url)
        if url and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise TraitError(
                f"GpuPauseApp.preemption_notice_url = {url!r}: not an http:// or https:// URL"
            )
        return url

    @validate("gc_grace_seconds")
    def _grace(self, proposal):
        return not_negative(self, proposal)

    # The services, built by initialize_settings; None until then (or if building failed).
    lifecycle = None
    maintenance = None
    monitor = None
    records = None
    emergency = None  # EmergencyCheckpoint, once the records are loaded
    preemption = None  # PreemptionPoller, when preemption_notice_url is set
    _store = None
    _policies = None
    _retention = None
    webhooks = None  # WebhookSender, with the records
    _hub = None  # hub.HubServer, when stop_server_when_paused is set
    hub_stop = None  # hub.StopWhenPaused, its listener

    # -- configuration, checked before Jupyter serves anything ------------------------------
    def _link_jupyter_server_extension(self, serverapp):
        """Link, then check every setting; a bad one stops the server, naming it.

        jupyter_server logs an extension that fails to link and goes on, loading it later
        with none of the admin's settings; so no error may escape this method as a plain
        exception: it becomes SystemExit, which jupyter_server does not catch.
        """
        try:
            super()._link_jupyter_server_extension(serverapp)
            self._check_configuration()
        except ConfigError as e:
            self._refuse(str(e))
        except TraitError as e:
            self._refuse(self._trait_error(e))
        except (PolicyError, KeyFileError) as e:
            self._refuse(str(e))
        except Exception as e:
            self._refuse(f"{type(e).__name__}: {e}")

    def _refuse(self, problem: str):
        message = f"jupyter_gpu_pause: bad configuration: {problem}"
        self.log.critical(message)
        raise SystemExit(message)

    def _trait_error(self, e: TraitError) -> str:
        """Traitlets' message, led by ``<Class>.<trait> = <value>`` when it names one (this
        app's traits, or those of a class it configures: QuotaCapacity, StoreMaintenance…)."""
        text = str(e)
        m = re.search(r"The '(\w+)' trait of .*?(\w+)(?: object at 0x[0-9a-f]+>)? instance ", text)
        if m is None:
            return text
        name, owner = m.group(1), m.group(2)
        value = ""
        for config in (self.config, getattr(self.serverapp, "config", None) or {}):
            section = config.get(owner, {})
            if name in section:
                raw = section[name]
                raw = str(raw) if isinstance(raw, str) else raw  # a command-line value is deferred
                value = f" = {raw!r}"
                break
        return f"{owner}.{name}{value}: {text[m.end() :]}"

    def _check_configuration(self) -> None:
        check_known_keys(
            self.config.get(type(self).__name__, {}),
            set(self.trait_names(config=True)),
            type(self).__name__,
        )
        try:
            self._policies = parse_policies(self.policies)
        except PolicyError as e:
            raise ConfigError(f"GpuPauseApp.policies: {e}") from None
        self._store = check_store(self.store_url, self.store_options, self.store_timeout)
        try:
            self._retention = parse_retention(self.retention)
        except ValueError as e:
            raise ConfigError(f"GpuPauseApp.retention: {e}") from None
        check_secret_file(self.secret_file)
        check_db_path(self.db_path)
        self._queue_where = check_queue_url(self.capacity_queue_url)
        self._hub = hub_server(self.stop_server_when_paused)
        # The provider's and the queue's own settings (c.QuotaCapacity.max_sessions…): checked
        # here, by building them once, so a bad value stops the server before it serves.
        classes = {self.capacity_provider_class, QuotaCapacity, NvmlCapacity}
        classes |= {CapacityQueue, FolderQueue, PostgresQueue}
        for cls in classes | {StoreMaintenance, WebhookSender, GatewayKernels}:
            check_known_keys(
                self.config.get(cls.__name__, {}),
                set(cls.class_trait_names(config=True)),
                cls.__name__,
            )
        self.capacity_provider_class(parent=self)
        StoreMaintenance(parent=self)
        GatewayKernels(parent=self)  # c.GatewayKernels.server_url
        WebhookSender([], None, "", "", parent=self)  # its c.WebhookSender.* values
        self._queue("").close_now()
        if os.environ.get("JUPYTER_TOKEN"):
            self.log.warning(
                "jupyter_gpu_pause: JUPYTER_TOKEN is set in the server's environment, and "
                "jupyter_server passes its environment to every kernel and terminal: any code "
                "a notebook runs can read the server's token. Use JUPYTER_TOKEN_FILE or "
                "c.IdentityProvider.token instead."
            )

    def _queue(self, label: str) -> CapacityQueue:
        """The queue ``capacity_queue_url`` names: a folder's, or PostgreSQL's."""
        cls = PostgresQueue if is_postgres_url(self._queue_where) else FolderQueue
        return cls(self._queue_where, uuid.uuid4().hex, server_user(), label, parent=self)

    # -- services -------------------------------------------------------------------------------
    def initialize_settings(self):
        try:
            self._build_services()
        except Exception as e:
            self.log.critical("jupyter_gpu_pause could not start", exc_info=True)
            raise SystemExit(f"jupyter_gpu_pause could not start: {type(e).__name__}: {e}") from e

    def _build_services(self) -> None:
        server = self.serverapp
        # Kernels inherit this, so gp.pause() in a notebook can reach this server; the kernel
        # proves who it is with a capability of its own (kernel/capability.py), never with a
        # token of the server's. (Versions before 0.2 also put the token here: drop it.)
        os.environ["JUPYTER_GPU_PAUSE_URL"] = server.connection_url
        os.environ.pop("JUPYTER_GPU_PAUSE_TOKEN", None)
        self.records = Records(self.db_path)
        probe = self.gpu_probe_class(parent=self)
        provider = build_provider(self.capacity_provider_class, self, probe)
        for note in provider.notes():  # what NVML cannot see here (MIG, a container)
            self.log.warning("jupyter_gpu_pause: capacity provider %s: %s", provider.name, note)
        queue = self._queue(f"{server_user()}@{socket.gethostname()}:{server.port}")
        bridge = build_bridge(self, self.kernel_answer_timeout)  # local or a gateway's
        # what people do in which kernel: the monitor's, and the lifecycle's (a kernel that
        # ran nothing on a paused notebook is restored into without asking)
        tracker = ActivityTracker(
            bridge.km,
            bridge.agent_sessions,
            subscribe=getattr(bridge, "subscribe_iopub", None),  # a gateway's kernels
        )
        self.lifecycle = Lifecycle(
            bridge=bridge,
            records=self.records,
            checkpoints=Checkpoints(self._store, self.secret_file),
            provider=provider,
            queue=queue,
            gpu_kernelspecs=tuple(self.gpu_kernelspecs),
            resume_timeout=self.resume_timeout,
            configured_provider=self._provider_short_name(),
            restore_slots=self.max_concurrent_restores,
            rescan_interval=self.store_rescan_interval,
            settings=PauseSettings(
                store_url=self._store.url,
                store_options=dict(self.store_options),
                store_timeout=self.store_timeout,
                owner=server_user(),
                root_dir=os.path.abspath(server.root_dir),
                capture=self.capture,
                max_checkpoint_bytes=self.max_checkpoint_bytes,
                verify=self.verify_blobs,
            ),
            log=self.log,
            kernel_use=tracker,
            warm_kernels=self.warm_kernels,
            # retention after pauses, GC intents
            upkeep=lambda ctx: StoreMaintenance(
                ctx, self._store, self._retention, self.gc_grace_seconds, parent=self
            ),
        )
        self.maintenance = self.lifecycle.maintenance
        self.monitor = Monitor(
            lifecycle=self.lifecycle,
            tracker=tracker,
            policies=self._policies,
            probe=probe,
            poll_interval=self.poll_interval,
            gpu_hold_alarm_hours=self.gpu_hold_alarm_hours,
            capture=self.capture,
            user=server_user(),
            log=self.log,
            event_logger=server.event_logger,
        )
        # Listeners of every lifecycle event (table.listeners): event bus, webhooks, metrics.
        # (telemetry wiring: one short block per listener below this line)
        # metrics on jupyter_server's /metrics: events, sessions by state, GPU-seconds
        attach_metrics(self.lifecycle.table, self.monitor.ledger, self.lifecycle.capacity)
        # jupyter_events bus and signed webhooks (docs/webhooks.md); webhooks stop last
        self.lifecycle.table.listeners.append(EventBus(server.event_logger, self.log))
        # (built with no URL too: its start drops what the outbox holds for removed URLs)
        self.webhooks = WebhookSender(
            self.webhook_urls,
            self.webhook_secret,
            user=server_user(),
            server=server.connection_url,
            records=self.records,
            parent=self,
        )
        self.lifecycle.table.outbox = self.webhooks  # events and their deliveries, together
        if self._hub is not None:  # under JupyterHub: stop this server once all is paused
            self.hub_stop = StopWhenPaused(self.lifecycle, self._hub, self.log)
            self.lifecycle.table.listeners.append(self.hub_stop)
        self.settings.update(
            {
                "gpu_pause": self.lifecycle,
                "gpu_pause_monitor": self.monitor,
                "gpu_pause_maintenance": self.maintenance,
            }
        )

    def _provider_short_name(self) -> str:
        cls = self.capacity_provider_class
        return "auto" if cls is AutoCapacity else getattr(cls, "name", cls.__name__)

    def initialize_handlers(self):
        self.handlers.extend(handlers())

    async def _start_jupyter_server_extension(self, serverapp):
        if self.lifecycle is None:  # never built: the server is stopping with SystemExit
            return
        # without a terminal, SIGINT (JupyterHub's local spawners) stops as SIGTERM does
        SigintStop.install(serverapp, self.shutdown_grace_seconds, self.log)
        try:
            await self.lifecycle.start()
        except Exception:
            # Jupyter itself keeps serving notebooks; our API answers 503 saying why, and
            # nothing is paused automatically on records we could not read.
            self.log.critical(
                "jupyter_gpu_pause: could not load the records at %s; its API is unavailable "
                "and no idle policy runs until this is fixed",
                self.db_path,
                exc_info=True,
            )
            return
        self.webhooks.start()  # first what the outbox kept (a previous run's events), then new
        self.monitor.start()
        self.maintenance.start()
        if self.hub_stop is not None:
            self.hub_stop.start()
        self.emergency = EmergencyCheckpoint(
            self.lifecycle, self.shutdown_checkpoint, self.shutdown_grace_seconds, self.log
        )
        if self.preemption_notice_url:
            self.preemption = PreemptionPoller(
                self.preemption_notice_url,
                self.preemption_poll_seconds,
                lambda _notice: self.emergency.run("preemption", bounded=False),
                self.log,
            )
            self.preemption.start()

    async def stop_extension(self):
        """Stop what was built, tolerating what never was: stopping must always finish, or
        jupyter_server never gets to shut the kernels down and exit."""
        # (shutdown checkpoint: runs here, first, before anything below stops)
        # jupyter_server shuts the kernels down only after this returns (ServerApp._cleanup:
        # cleanup_extensions, then cleanup_kernels): every kernel still holds its state here.
        if self.hub_stop is not None:  # first: the shutdown's own pauses must not stop it
            await self.hub_stop.stop()
        if self.preemption is not None:
            await self.preemption.stop()
        if self.emergency is not None:
            try:
                await self.emergency.run("shutdown")
            except Exception:
                self.log.exception("jupyter_gpu_pause: the shutdown checkpoint failed")
        for step, what in (
            (self.lifecycle and self.lifecycle.stop_warm_kernels, "warm kernels"),
            (self.maintenance and self.maintenance.stop, "store maintenance"),
            (self.monitor and self.monitor.stop, "the idle monitor"),
            (self.lifecycle and self.lifecycle.stop, "running operations"),
            (self.webhooks and self.webhooks.stop, "webhook deliveries"),
        ):
            if step:
                try:
                    await step()
                except Exception:
                    self.log.exception("jupyter_gpu_pause: could not stop %s", what)
        if self.records is not None:
            try:
                self.records.close()
            except Exception:
                self.log.exception("jupyter_gpu_pause: could not close the records")


def server_user() -> str:
    """Whose server this is, as policies' ``match.user`` sees it: the JupyterHub user when
    JupyterHub started the server, else the operating-system user running it."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
