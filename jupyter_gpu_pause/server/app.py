"""The server extension: it wires the rooms of ``server/`` together. Its settings are
``config.settings``'; here the configuration is checked before Jupyter serves anything, the
services are built (``initialize_settings``) and published in ``settings``, the start hook
starts what runs in the background and ``stop_extension`` stops all that was built."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import uuid
from dataclasses import dataclass

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp
from traitlets import TraitError

from ..store.io import Store
from ..store.keyfile import KeyFileError
from ..store.retention import Retention
from .budgets import BudgetError, BudgetRule, Budgets, parse_budgets
from .capacity import (
    CapacityQueue,
    FolderQueue,
    NvmlCapacity,
    PostgresQueue,
    QuotaCapacity,
    build_provider,
    is_postgres_url,
)
from .capacity.board import Board, Origin
from .capacity.where import check_queue_url
from .config.checks import ConfigError
from .config.settings import GpuPauseSettings, server_user
from .config.startup import (
    check_sections,
    check_storage,
    trait_error_message,
    warn_of_a_server_token,
)
from .integrations.hub import HUB_ENV, HubClient, HubServer, StopWhenPaused, hub_server
from .integrations.maintenance import StoreMaintenance
from .integrations.preemption import PreemptionPoller
from .integrations.shutdown import EmergencyCheckpoint, SigintStop
from .kernels.gateway import GatewayKernels, build_bridge
from .kernels.spool import SpoolRoot
from .lifecycle.lifecycle import Lifecycle
from .lifecycle.operations import PauseSettings
from .monitor.activity import ActivityTracker
from .monitor.monitor import Monitor
from .monitor.policy import Policy, PolicyError, parse_policies
from .state.bus import EventBus
from .state.checkpoints import Checkpoints
from .state.migrations import NewerSchema
from .state.records import Records, refuse_newer_records
from .suspend.suspender import Suspender
from .suspend.tier import decide as decide_tier
from .telemetry.metrics import attach as attach_metrics
from .telemetry.webhooks import WebhookSender, signing_key
from .web.idempotency import IdempotencyKeys
from .web.routes import handlers

# Classes with settings of their own (c.QuotaCapacity.max_sessions…), checked at start too.
_CONFIGURED: tuple[type, ...] = (QuotaCapacity, NvmlCapacity, CapacityQueue, FolderQueue)
_CONFIGURED += (PostgresQueue, StoreMaintenance, WebhookSender, GatewayKernels)


@dataclass(frozen=True)
class CheckedConfig:
    """What the configuration check found, which the services are built from."""

    policies: list[Policy]
    budget_rules: list[BudgetRule]
    store: Store
    retention: Retention
    queue_where: str  # the queue's folder or PostgreSQL URL
    hub: HubServer | None  # when stop_server_when_paused is set


class GpuPauseApp(ExtensionApp, GpuPauseSettings):
    """Pause idle GPU kernels to durable storage and resume them with their state."""

    name = "jupyter_gpu_pause"
    load_other_extensions = True

    # The services, built by initialize_settings; None until then (or if building failed).
    lifecycle: Lifecycle | None = None
    maintenance: StoreMaintenance | None = None
    monitor: Monitor | None = None
    records: Records | None = None
    webhooks: WebhookSender | None = None  # with the records
    hub_stop: StopWhenPaused | None = None  # its listener, when stop_server_when_paused is set
    emergency: EmergencyCheckpoint | None = None  # once the records are loaded
    preemption: PreemptionPoller | None = None  # when preemption_notice_url is set
    _checked: CheckedConfig | None = None  # what the configuration check found
    _hub_groups: asyncio.Future[None] | None = None  # asking JupyterHub for the user's groups
    budget_service: Budgets | None = None  # when budgets are configured

    @property
    def _server(self) -> ServerApp:
        """The Jupyter server this extension is linked to (before anything is built)."""
        if self.serverapp is None:
            raise RuntimeError("jupyter_gpu_pause is not linked to a Jupyter server")
        return self.serverapp

    @property
    def _config_checked(self) -> CheckedConfig:
        """What the configuration check found (it runs at link, before anything is built)."""
        if self._checked is None:
            raise RuntimeError("jupyter_gpu_pause's configuration was not checked")
        return self._checked

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
        except (ConfigError, PolicyError, KeyFileError, NewerSchema) as e:
            self._refuse(str(e))
        except TraitError as e:
            configs = (self.config, getattr(self.serverapp, "config", None) or {})
            self._refuse(trait_error_message(e, configs))
        except Exception as e:
            self._refuse(f"{type(e).__name__}: {e}")

    def _refuse(self, problem: str):
        message = f"jupyter_gpu_pause: bad configuration: {problem}"
        self.log.critical(message)
        raise SystemExit(message)

    def _check_configuration(self) -> None:
        """What traitlets cannot check, and the checks that need a room above ``config``."""
        if self.webhook_secret:  # its format is the signer's (a traitlets check before)
            try:
                signing_key(self.webhook_secret)
            except ValueError as e:  # it names GpuPauseApp.webhook_secret
                raise ConfigError(str(e)) from None
        check_sections(self.config, [type(self)])
        try:
            policies = parse_policies(self.policies)
        except PolicyError as e:
            raise ConfigError(f"GpuPauseApp.policies: {e}") from None
        try:
            budget_rules = parse_budgets(self.budgets)
        except BudgetError as e:
            raise ConfigError(f"GpuPauseApp.budgets: {e}") from None
        store, retention = check_storage(self)
        refuse_newer_records(self.db_path)  # migrated by a newer version: NewerSchema
        queue_where = check_queue_url(self.capacity_queue_url)
        hub = hub_server(self.stop_server_when_paused)
        self._checked = CheckedConfig(policies, budget_rules, store, retention, queue_where, hub)
        # The other classes' own settings: checked by building each once, so a bad value
        # stops the server before it serves.
        check_sections(self.config, [self.capacity_provider_class, *_CONFIGURED])
        self.capacity_provider_class(parent=self)
        StoreMaintenance(parent=self)
        GatewayKernels(parent=self)  # c.GatewayKernels.server_url
        WebhookSender([], None, "", "", parent=self)  # its c.WebhookSender.* values
        self._build_queue(queue_where, "").close_now()
        warn_of_a_server_token(self.log)

    # -- services: built in dependency order, each in one place ------------------------------
    def initialize_settings(self):
        try:
            self._build_services()
        except Exception as e:
            self.log.critical("jupyter_gpu_pause could not start", exc_info=True)
            raise SystemExit(f"jupyter_gpu_pause could not start: {type(e).__name__}: {e}") from e

    def _build_services(self) -> None:
        server, user, checked = self._server, server_user(), self._config_checked
        # Kernels inherit this, so gp.pause() in a notebook can reach this server; the kernel
        # proves who it is with a capability of its own (kernel/capability.py), never with a
        # token of the server's.
        os.environ["JUPYTER_GPU_PAUSE_URL"] = server.connection_url
        self.records = records = Records(self.db_path)
        # (built with no URL too: its start drops what the outbox holds for removed URLs)
        self.webhooks = WebhookSender(
            self.webhook_urls,
            self.webhook_secret,
            user=user,
            server=server.connection_url,
            records=self.records,
            parent=self,
        )
        probe = self.gpu_probe_class(parent=self)
        bridge = build_bridge(self, self.kernel_answer_timeout)  # local or a gateway's
        bridge.bring_agent = self.bring_agent
        bridge.spool = SpoolRoot.for_store(
            checked.store, os.path.dirname(os.path.abspath(self.db_path))
        )
        bridge.spool.sweep()  # what a server that died mid-pause left behind
        # what people do in which kernel: the monitor's, and the lifecycle's (a kernel that
        # ran nothing on a paused notebook is restored into without asking)
        tracker = ActivityTracker(
            bridge.km,
            bridge.agent_sessions,
            subscribe=getattr(bridge, "subscribe_iopub", None),  # a gateway's kernels
        )
        self.lifecycle = lifecycle = self._build_lifecycle(records, bridge, tracker, probe, user)
        upkeep = lifecycle.maintenance  # retention after pauses, GC intents
        self.maintenance = upkeep if isinstance(upkeep, StoreMaintenance) else None
        self.budget_service = self._build_budgets(lifecycle, probe, user)
        self.monitor = monitor = Monitor(
            lifecycle=lifecycle,
            tracker=tracker,
            policies=checked.policies,
            probe=probe,
            poll_interval=self.poll_interval,
            gpu_hold_alarm_hours=self.gpu_hold_alarm_hours,
            capture=self.capture,
            user=user,
            log=self.log,
            event_logger=server.event_logger,
            budgets=self.budget_service,
            budget_warning_seconds=self.budget_pause_warning_seconds,
        )
        # under JupyterHub, with stop_server_when_paused: stop this server once all is paused
        self.hub_stop = StopWhenPaused(lifecycle, checked.hub, self.log) if checked.hub else None
        # Listeners of every lifecycle event (table.listeners): metrics on /metrics, the event
        # bus, the Hub (the webhooks record theirs with each event: the lifecycle's outbox).
        table = lifecycle.table
        attach_metrics(
            table, monitor.ledger, lifecycle.capacity, self.budget_service,
            self.budget_metric_users,
        )  # fmt: skip
        table.listeners.append(EventBus(server.event_logger, self.log))
        if self.hub_stop is not None:
            table.listeners.append(self.hub_stop)
        self._share_with_admins(lifecycle, monitor, user)
        self.settings.update(
            gpu_pause=lifecycle,
            gpu_pause_monitor=monitor,
            gpu_pause_maintenance=self.maintenance,
            gpu_pause_idempotency=IdempotencyKeys(records),
            gpu_pause_budgets=self.budget_service,
        )

    def _share_with_admins(self, lifecycle: Lifecycle, monitor: Monitor, user: str) -> None:
        """What the capacity queue shows the admin console (docs/capacity.md): this server's
        GPU sessions on the board, published again after every lifecycle event (the heartbeat
        brings idle times up to date), and its user's GPU-seconds per hour."""
        capacity, queue = lifecycle.capacity, lifecycle.capacity.queue
        if queue is None:
            return
        origin = Origin.from_env(user, queue.label, self.db_path, self._server.base_url)
        capacity.board = Board(origin, lambda: lifecycle.table.sessions.values(), lifecycle.view)
        lifecycle.table.listeners.append(lambda _event, _s: capacity.changed())
        monitor.ledger.shared = functools.partial(queue.add_hours, user)

    def _build_budgets(self, lifecycle: Lifecycle, probe, user: str) -> Budgets | None:
        """GPU-hour budgets, metered by this server's heartbeat in the capacity queue; a GPU
        resume over budget is refused before it starts."""
        rules = self._config_checked.budget_rules
        if not rules:
            return None
        budgets = Budgets(
            rules=rules,
            exempt=list(self.budget_exempt),
            admins=list(self.budget_admins),
            weights=dict(self.gpu_weights),
            user=user,
            queue=lifecycle.capacity.queue,
            gpu_names=lambda: {d.get("uuid"): d.get("name") for d in probe.devices()},
            log=self.log,
        )
        lifecycle.capacity.meter = budgets.meter
        lifecycle.resume_admission = budgets.admit  # under the lifecycle's admission lock
        return budgets

    def _build_queue(self, where: str, label: str) -> CapacityQueue:
        """The queue ``capacity_queue_url`` names (``where``, as checked): a folder's, or
        PostgreSQL's."""
        cls = PostgresQueue if is_postgres_url(where) else FolderQueue
        return cls(where, uuid.uuid4().hex, server_user(), label, parent=self)

    def _build_lifecycle(self, records: Records, bridge, tracker, probe, user: str) -> Lifecycle:
        """The lifecycle and its parts: capacity provider and queue, checkpoints, warm
        kernels, the store's upkeep."""
        server, checked = self._server, self._config_checked
        cls = self.capacity_provider_class
        provider = build_provider(cls, self, probe)
        for note in provider.notes():  # what NVML cannot see here (MIG, a container)
            self.log.warning("jupyter_gpu_pause: capacity provider %s: %s", provider.name, note)
        queue = self._build_queue(
            checked.queue_where, f"{user}@{socket.gethostname()}:{server.port}"
        )
        driver = self.cuda_checkpoint_class(parent=self)
        tier = decide_tier(self.suspend, driver, not bridge.local_processes)
        self.log.info("jupyter_gpu_pause: pause tier '%s': %s", tier.name, tier.reason)
        return Lifecycle(
            tier=tier,
            suspender=(
                Suspender(driver, tier, self.suspend_min_free_memory, self.log)
                if tier.suspends
                else None
            ),
            keep_suspended_seconds=self.keep_suspended_seconds,
            bridge=bridge,
            records=records,
            checkpoints=Checkpoints(checked.store, self.secret_file),
            provider=provider,
            queue=queue,
            gpu_kernelspecs=tuple(self.gpu_kernelspecs),
            resume_timeout=self.resume_timeout,
            configured_provider=getattr(cls, "name", cls.__name__),  # 'auto', 'quota'…
            restore_slots=self.max_concurrent_restores,
            rescan_interval=self.store_rescan_interval,
            settings=PauseSettings(
                store_url=checked.store.url,
                store_options=dict(self.store_options),
                store_timeout=self.store_timeout,
                owner=user,
                root_dir=os.path.abspath(server.root_dir),
                capture=self.capture,
                max_checkpoint_bytes=self.max_checkpoint_bytes,
                verify=self.verify_blobs,
                test_restore=self.test_restore,
                ambient=self.ambient,
                rebuild=self.rebuild,
                rebuild_auto_seconds=self.rebuild_auto_seconds,
            ),
            log=self.log,
            kernel_use=tracker,
            outbox=self.webhooks,  # an event and its deliveries, recorded together
            warm_kernels=self.warm_kernels,
            upkeep=lambda ctx: StoreMaintenance(
                ctx, checked.store, checked.retention, self.gc_grace_seconds, parent=self
            ),
        )

    def initialize_handlers(self):
        self.handlers.extend(handlers())

    # -- running ----------------------------------------------------------------------------
    async def _start_jupyter_server_extension(self, serverapp):
        lifecycle, webhooks, monitor = self.lifecycle, self.webhooks, self.monitor
        if lifecycle is None or webhooks is None or monitor is None:
            return  # never built: the server is stopping with SystemExit
        # without a terminal, SIGINT (JupyterHub's local spawners) stops as SIGTERM does
        SigintStop.install(serverapp, self.shutdown_grace_seconds, self.log)
        try:
            await lifecycle.start()
        except Exception:
            # Jupyter itself keeps serving notebooks; our API answers 503 saying why, and
            # nothing is paused automatically on records we could not read.
            self.log.critical(
                "jupyter_gpu_pause %s; its API is unavailable and no idle policy runs until "
                "this is fixed",
                lifecycle.start_error,
                exc_info=True,
            )
            return
        webhooks.start()  # first what the outbox kept (a previous run's events), then new
        if self.budget_service is not None and all(os.environ.get(k) for k in HUB_ENV):
            self._hub_groups = asyncio.ensure_future(self._learn_hub_groups(self.budget_service))
        monitor.start()
        if self.maintenance is not None:
            self.maintenance.start()
        if self.hub_stop is not None:
            self.hub_stop.start()
        self.emergency = emergency = EmergencyCheckpoint(
            lifecycle, self.shutdown_checkpoint, self.shutdown_grace_seconds, self.log
        )
        if self.preemption_notice_url:
            self.preemption = PreemptionPoller(
                self.preemption_notice_url,
                self.preemption_poll_seconds,
                lambda _notice: emergency.run("preemption", bounded=False),
                self.log,
            )
            self.preemption.start()

    async def _learn_hub_groups(self, budgets: Budgets) -> None:
        """Budgets may match JupyterHub groups: ask the Hub for the user's (the server's token
        needs ``read:users:groups!user``; without it, only Unix groups count)."""
        client = HubClient(HubServer.from_env())
        try:
            groups = await client.user_groups()
        except (OSError, ValueError) as e:
            self.log.warning("jupyter_gpu_pause: could not ask JupyterHub for groups: %s", e)
            return
        finally:
            client.close()
        if groups is None:
            self.log.warning(
                "jupyter_gpu_pause: JupyterHub did not say the user's groups; budgets match "
                "Unix groups only (add 'read:users:groups!user' to c.Spawner.server_token_scopes)"
            )
            return
        budgets.add_groups(groups)

    async def stop_extension(self):
        """Stop what was built, tolerating what never was: stopping must always finish, or
        jupyter_server never gets to shut the kernels down and exit."""
        # jupyter_server shuts the kernels down only after this returns (ServerApp._cleanup:
        # cleanup_extensions, then cleanup_kernels): every kernel still holds its state here.
        if self._hub_groups is not None:
            self._hub_groups.cancel()
        if self.hub_stop is not None:  # first: the shutdown's own pauses must not stop it
            await self.hub_stop.stop()
        if self.preemption is not None:
            await self.preemption.stop()
        if self.emergency is not None:  # the shutdown checkpoint, before anything below stops
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
