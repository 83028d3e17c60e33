"""The server extension: configuration traits and the wiring of the services.

Services are built in ``initialize_settings`` and published as ``settings["gpu_pause"]``; the
start hook loads the records once the event loop runs, and ``stop_extension`` cancels what is
still in flight.
"""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Dict, Enum, Float, Int, List, Type, Unicode, default, validate

from ..store import Signer, Store
from .capacity import CapacityProvider, UnlimitedCapacity
from .checkpoints import Checkpoints
from .handlers import handlers
from .kernels import KernelBridge
from .lifecycle import Lifecycle
from .monitor import Monitor
from .policy import DEFAULT_POLICIES, PolicyError, parse_policies
from .probes import GpuProbe, NvmlProbe
from .records import Records


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
        help="fsspec storage options for store_url, e.g. {'endpoint_url': 'http://…'}. "
        "Default: {} (credentials from the environment)."
    ).tag(config=True)

    db_path = Unicode(
        help="SQLite file for session records and events. "
        "Default: {jupyter_data_dir}/gpu_pause/gpu_pause.sqlite."
    ).tag(config=True)

    @default("db_path")
    def _db_path_default(self):
        return _data("gpu_pause.sqlite")

    secret_file = Unicode(
        help="HMAC key that signs checkpoint manifests; created with mode 0600 when missing. "
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
        "Each: {'name', 'match': {'kernel_name': glob, 'uses_gpu': bool, 'user': glob}, "
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

    capacity_provider_class = Type(
        default_value=UnlimitedCapacity,
        klass=CapacityProvider,
        help="Decides whether and on which GPU a resumed kernel may run. "
        "Default: UnlimitedCapacity (resume at once).",
    ).tag(config=True)

    resume_timeout = Float(
        3600.0,
        help="Longest wait in seconds for capacity before a resume fails (state stays "
        "restorable). Default: 3600. 0 means wait forever.",
    ).tag(config=True)

    retention = Dict(
        default_value={"keep_last": 3, "max_age_days": 30, "max_total_bytes": 0},
        help="Checkpoints kept per session; 0 means no limit for that key.",
    ).tag(config=True)

    max_checkpoint_bytes = Int(
        0,
        help="Refuse checkpoints larger than this many bytes, with a clear message. "
        "Default: 0 (no limit). Example: 50_000_000_000.",
    ).tag(config=True)

    webhook_urls = List(Unicode(), help="POST each event as JSON to these URLs.").tag(config=True)

    verify_blobs = Bool(
        True,
        help="Re-read each newly written blob and check its hash before the kernel is "
        "shut down. Default: True.",
    ).tag(config=True)

    @validate("poll_interval", "resume_timeout", "gpu_hold_alarm_hours")
    def _non_negative(self, proposal):
        if proposal["value"] < 0 or (
            proposal["trait"].name == "poll_interval" and proposal["value"] == 0
        ):
            raise ValueError(
                f"GpuPauseApp.{proposal['trait'].name} must be positive, not {proposal['value']}"
            )
        return proposal["value"]

    @validate("max_checkpoint_bytes")
    def _max_bytes(self, proposal):
        if proposal["value"] < 0:
            raise ValueError("GpuPauseApp.max_checkpoint_bytes must be >= 0 (0 = no limit)")
        return proposal["value"]

    def initialize_settings(self):
        server = self.serverapp
        # Kernels inherit these, so gp.pause() in a notebook can reach this server.
        os.environ["JUPYTER_GPU_PAUSE_URL"] = server.connection_url
        os.environ["JUPYTER_GPU_PAUSE_TOKEN"] = server.identity_provider.token or ""
        try:
            policies = parse_policies(self.policies)
        except PolicyError as e:
            # Refuse to serve with a policy the admin did not mean: stop, naming it.
            self.log.critical("jupyter_gpu_pause: bad GpuPauseApp.policies: %s", e)
            raise SystemExit(f"jupyter_gpu_pause: bad GpuPauseApp.policies: {e}") from e
        store = Store(self.store_url, self.store_options)
        self.records = Records(self.db_path)
        self.lifecycle = Lifecycle(
            bridge=KernelBridge(
                server.kernel_manager, server.session_manager, server.kernel_spec_manager, self.log
            ),
            records=self.records,
            checkpoints=Checkpoints(store, Signer.from_file(self.secret_file)),
            capacity=self.capacity_provider_class(parent=self),
            settings={
                "store_options": self.store_options,
                "capture": self.capture,
                "max_checkpoint_bytes": self.max_checkpoint_bytes,
                "verify": self.verify_blobs,
            },
            log=self.log,
        )
        self.monitor = Monitor(
            lifecycle=self.lifecycle,
            policies=policies,
            probe=self.gpu_probe_class(parent=self),
            poll_interval=self.poll_interval,
            gpu_hold_alarm_hours=self.gpu_hold_alarm_hours,
            capture=self.capture,
            log=self.log,
        )
        self.settings.update({"gpu_pause": self.lifecycle, "gpu_pause_monitor": self.monitor})

    def initialize_handlers(self):
        self.handlers.extend(handlers())

    async def _start_jupyter_server_extension(self, serverapp):
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
        self.monitor.start()

    async def stop_extension(self):
        await self.monitor.stop()
        await self.lifecycle.stop()
        self.records.close()
