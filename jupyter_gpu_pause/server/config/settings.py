"""Every ``c.GpuPauseApp.*`` setting, in groups (docs/reference/settings.md shows them so).

``GpuPauseSettings`` is a ``HasTraits`` mixin, not a ``Configurable``: ``GpuPauseApp`` inherits
it, so each setting is read from the ``GpuPauseApp`` section only (traitlets builds an object's
sections from the ``Configurable`` classes of its MRO: ``c.GpuPauseSettings.x`` is nobody's),
is listed under ``GpuPauseApp`` in ``--help-all`` and in a generated config, and a bad value
raises the TraitError that names ``GpuPauseApp.<trait>`` when the server starts.

This room imports no other room of ``server/``, yet three settings belong to rooms above it:

- ``gpu_probe_class`` and ``capacity_provider_class`` name their classes by import string, the
  way traitlets' ``Type`` names a class it may not import yet; the string is resolved when
  ``GpuPauseApp`` is built, or a value given (``ProviderClass`` looks the short names up in
  capacity's ``PROVIDERS`` then, so the names stay where the providers are).
- ``webhook_secret``'s format is the webhook signer's (``telemetry.webhooks.signing_key``), and
  policies are parsed by ``monitor.policy``: the app checks both at start, before it serves,
  with the other checks that need a room (``GpuPauseApp._check_configuration``), each naming
  ``GpuPauseApp.<trait>``. Only checks that need nothing but the value stay here as validators.
"""

from __future__ import annotations

import getpass
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from jupyter_core.paths import jupyter_data_dir
from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    HasTraits,
    Int,
    List,
    TraitError,
    Type,
    Unicode,
    default,
    validate,
)
from traitlets.utils.importstring import import_item

from ...store.retention import DEFAULT_RETENTION
from .traits import not_negative

if TYPE_CHECKING:  # the agent protocol's vocabularies (the kernel room is not imported here)
    from ...kernel.protocol import CaptureMode, RebuildMode

# the values of GpuPauseSettings.capture and .rebuild, typed as the protocol's
_CAPTURE_MODES: list[CaptureMode] = ["namespace", "registered"]
_REBUILD_MODES: list[RebuildMode] = ["ask", "auto", "never"]

_CAPACITY = "jupyter_gpu_pause.server.capacity"
_SUSPEND = "jupyter_gpu_pause.server.suspend"

# What an idle policy is when none is configured (``monitor.policy`` parses and applies them).
DEFAULT_POLICIES = [
    {
        "name": "gpu-default",
        "match": {"uses_gpu": True},
        "idle_timeout": 3600,
        "warn_before": 300,
        "action": "pause",
    }
]


def server_user() -> str:
    """Whose server this is, as policies' ``match.user`` sees it: the JupyterHub user when
    JupyterHub started the server, else the operating-system user running it."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def _data(*parts: str) -> str:
    return os.path.join(jupyter_data_dir(), "gpu_pause", *parts)


class ProviderClass(Type):
    """A ``Type`` trait that also takes the capacity providers' short names ('quota'…), looked
    up in capacity's ``PROVIDERS`` when a value is given."""

    names = f"{_CAPACITY}.providers.PROVIDERS"

    def validate(self, obj, value):
        if isinstance(value, str) and "." not in value:
            providers = import_item(self.names)
            if value not in providers:
                raise TraitError(
                    f"The '{self.name}' trait of {type(obj).__name__} instance must be one of "
                    f"{', '.join(repr(p) for p in providers)} or an importable class "
                    "(package.module.Class), not a name nobody knows"
                )
            value = providers[value]
        return super().validate(obj, value)


class GpuPauseSettings(HasTraits):
    """The settings of ``GpuPauseApp``; see the module docstring for why a mixin."""

    # -- the store and the records ------------------------------------------------------------
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

    store_timeout = Float(
        30.0,
        help="Seconds one store request (a blob part, a manifest, a listing) may take before "
        "it is retried; a few retries with backoff follow, then the pause or resume fails "
        "with the store's error, the kernel untouched. Bounds how long an unreachable store "
        "can hold a pause (see docs/storage.md). Default: 30. Must be > 0.",
    ).tag(config=True)

    # -- what a pause saves, and how a resume restores it --------------------------------------
    capture = Enum(
        _CAPTURE_MODES,
        default_value="namespace",
        help="'namespace' (default): registered names are required and every other user "
        "variable is saved best effort; 'registered': only registered names are saved.",
    ).tag(config=True)

    rebuild = Enum(
        _REBUILD_MODES,
        default_value="ask",
        help="What a resume does with the variables its checkpoint did not bring back (they "
        "could not be saved, or did not restore) when the recorded cells that made them can "
        "be re-run: 'ask' (default) shows the plan (which cells, their recorded run time) in "
        "the resume report, the Lab notification and the 'resumed' event, and re-runs it when "
        "someone asks (Lab, gp.rebuild(), POST sessions/{id}/rebuild, jupyter gpu-pause "
        "rebuild); 'auto' also re-runs it at once, without asking, when its recorded run "
        "time is under rebuild_auto_seconds and it needs no confirmation; 'never' offers no "
        "plan and refuses a rebuild. Re-run cells never change what was restored. See "
        "docs/rebuild.md.",
    ).tag(config=True)

    rebuild_auto_seconds = Float(
        5.0,
        help="With rebuild = 'auto': the longest recorded run time, in seconds, of a plan "
        "re-run without asking (a plan with a cell of unknown run time always asks). "
        "Default: 5. Must be >= 0.",
    ).tag(config=True)

    max_checkpoint_bytes = Int(
        0,
        help="Refuse checkpoints larger than this many bytes, with a clear message. "
        "Default: 0 (no limit). Example: 50_000_000_000.",
    ).tag(config=True)

    verify_blobs = Bool(
        True,
        help="Re-read each newly written blob and check its hash before the kernel is "
        "shut down. Default: True.",
    ).tag(config=True)

    test_restore = Bool(
        True,
        help="Before a check answers or a pause commits, load the pickled objects back in a "
        "forked copy of the kernel (no effect on the notebook): an object that would not "
        "restore is listed as 'cannot be saved' before the pause instead of failing at the "
        "resume. Objects of only built-in types, numpy arrays and torch tensors are never "
        "test-restored. False skips it: pauses of namespaces with many library objects are a "
        "little faster (benchmarks/bench_test_restore.py measures by how much), and every "
        "such object is reported as saved but not test-restored. Default: True.",
    ).tag(config=True)

    ambient = Bool(
        True,
        help="Carry the process state around the namespace with each checkpoint, so that a "
        "resumed notebook's next cells print what they would have printed: random generators "
        "(random, numpy, torch), settings the notebook changed (matplotlib rcParams, numpy "
        "print and error options, pandas options, scikit-learn's config, torch's defaults, "
        "warnings filters, logging levels, the decimal context, the recursion limit, the "
        "working folder, environment variables and sys.path entries its "
        "cells set) and IPython's own (extensions, the %matplotlib backend, %config, "
        "%precision, the execution counter, In/Out/_, display formatters, whose cells are "
        "re-run). The check and the pause name what cannot travel (running threads, child "
        "processes, open connections). Packages add their own pieces through the entry point "
        "group 'jupyter_gpu_pause.ambient'. False: only the namespace travels, and a resume "
        "restores nothing of it even from a checkpoint that carries it. Default: True.",
    ).tag(config=True)

    bring_agent = Bool(
        True,
        help="Bring the agent into kernels whose environment lacks this version of "
        "jupyter_gpu_pause: at the kernel's first request the server sends its own kernel-side "
        "code (and cloudpickle) over the kernel's channel, importable in that kernel's process "
        "only, under private names; nothing is installed in or written to the environment, "
        "and none of its packages is shadowed or upgraded. Such a kernel's checkpoint blobs go "
        "through the server, which names, checks and stores them (a folder 'spool' in a local "
        "store, else next to db_path), so the environment needs no fsspec, s3fs or xxhash. A "
        "kernel needs Python 3.9 or newer and ipykernel 6 or newer. False: such a kernel "
        "cannot be paused ('agent-missing', or 'agent-version' where another version is "
        "installed there). Default: True.",
    ).tag(config=True)

    kernel_answer_timeout = Float(
        30.0,
        help="Seconds a kernel that is not running a cell may take to answer before a pause, "
        "a dry run or a restore gives up on it (the kernel is stuck: a stopped process, a "
        "deadlock), leaving it untouched. A kernel running a cell is waited for as long as "
        "the cell runs. Default: 30. Must be > 0.",
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

    # -- GPU capacity, and the other servers sharing it ----------------------------------------
    capacity_provider_class = ProviderClass(
        default_value=f"{_CAPACITY}.providers.AutoCapacity",
        klass=f"{_CAPACITY}.base.CapacityProvider",
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

    # -- idle policies -------------------------------------------------------------------------
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

    poll_interval = Float(
        10.0, help="Seconds between two idle-monitor passes. Default: 10. Must be > 0."
    ).tag(config=True)

    budgets = List(
        Dict(),
        default_value=[],
        help="GPU-hour budgets (docs/budgets.md), summed over every server sharing the "
        "capacity queue; the most specific entry matching the server's user wins (their "
        "name, a user glob, a group, the default). Each: {'name', 'match': {'user': glob} | "
        "{'group': Unix or JupyterHub group} | {} (default), 'gpu_hours': > 0 per period, "
        "'period': 'month'|'week'|'day'|'rolling_7d'|'rolling_30d' (default 'month'), "
        "'warn_at': 0.8, 'hold_at': 1.0, 'grace': 0.1}. Past warn_at: a warning; past "
        "hold_at: GPU resumes refused until the period renews (CPU resumes allowed); past "
        "hold_at + grace: running GPU sessions paused at their next idle moment. Default: [] "
        "(no budget).",
    ).tag(config=True)

    budget_exempt = List(
        Unicode(),
        default_value=[],
        help="Users no budget applies to: names or globs, and '@group' for a group's members. "
        "Default: [].",
    ).tag(config=True)

    budget_admins = List(
        Unicode(),
        default_value=[],
        help="Users (names or globs) whose server sees every user's budget (GET budget) and "
        "may grant hours or reset a budget (jupyter gpu-pause budget grant|reset). Default: "
        "[] (nobody).",
    ).tag(config=True)

    gpu_weights = Dict(
        value_trait=Float(),
        default_value={},
        help="GPU-hours one hour of a GPU model counts in budgets, by the model's name as NVML "
        "reports it: {'NVIDIA H200': 1.0, 'NVIDIA A100-SXM4-80GB MIG 1g.10gb': 0.14}. "
        "Unlisted models, and GPUs whose model is unknown, count 1.0. Default: {}.",
    ).tag(config=True)

    budget_pause_warning_seconds = Float(
        300.0,
        help="How long before pausing a running GPU session over its budget's hold_at + "
        "grace the 'warned' event comes; the pause then waits for the kernel's next idle "
        "moment (no cell running). Default: 300. Must be > 0.",
    ).tag(config=True)

    budget_metric_users = Bool(
        False,
        help="Label jupyter_gpu_pause_budget_used_ratio with the user's name too (off: only the "
        "budget's name, so /metrics names no user). Default: False.",
    ).tag(config=True)

    gpu_probe_class = Type(
        default_value=f"{_CAPACITY}.probes.NvmlProbe",
        klass=f"{_CAPACITY}.probes.GpuProbe",
        help="Measures the GPU memory and utilisation of kernel processes. Default: NvmlProbe "
        "(reports nothing where NVML or a GPU is missing).",
    ).tag(config=True)

    cuda_checkpoint_class = Type(
        default_value=f"{_SUSPEND}.driver.LibcudaCheckpoint",
        klass=f"{_SUSPEND}.driver.CudaCheckpoint",
        help="The CUDA driver's process checkpoint API, which the suspend tier calls. Default: "
        "LibcudaCheckpoint (ctypes on libcuda.so.1; where it or its checkpoint functions are "
        "missing, the checkpoint tier is in force and the start says why).",
    ).tag(config=True)

    suspend = Enum(
        ["auto", "never"],
        default_value="auto",
        help="Suspend in place: 'auto' (default) pauses a GPU session by having the CUDA "
        "driver copy its kernel's GPU state to host memory and release the GPU (about a "
        "second), then writes the checkpoint behind it, where the driver has the checkpoint "
        "API (r550+, not MIG, kernels on this machine); 'never' always writes the checkpoint "
        "first and stops the kernel after. GET capacity says which tier is in force and why. "
        "See docs/suspend.md.",
    ).tag(config=True)

    keep_suspended_seconds = Float(
        0.0,
        help="Keep a suspended kernel this many seconds after its checkpoint is written, so "
        "that a resume restores it in place (its memory copied back to the GPU) instead of "
        "starting a new kernel; let go earlier when the host's available memory falls under "
        "what it holds. Default: 0 (stopped once the checkpoint is written). Must be >= 0.",
    ).tag(config=True)

    suspend_min_free_memory = Float(
        1.5,
        help="Suspend a kernel in place only while the host's available memory is at least "
        "this many times the kernel's GPU memory (the driver's copy; the agent's copies of "
        "the tensors are counted on top before they are made); otherwise the pause writes "
        "the checkpoint first and says why. Default: 1.5. Must be >= 1.",
    ).tag(config=True)

    gpu_hold_alarm_hours = Float(
        0.0,
        help="Raise a gpu_hold_alarm event once per this many hours for a session holding "
        "a GPU, whatever its activity. Default: 0 (off). Example: 12.",
    ).tag(config=True)

    # -- store maintenance ---------------------------------------------------------------------
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

    # -- webhooks ------------------------------------------------------------------------------
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

    # -- shutdown and preemption ---------------------------------------------------------------
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

    # -- JupyterHub ----------------------------------------------------------------------------
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

    # -- the checks a value alone allows (the rest: see the module docstring) ------------------
    @validate("gpu_weights")
    def _weights(self, proposal):
        for name, weight in proposal["value"].items():
            if not weight >= 0:
                raise TraitError(
                    f"{type(self).__name__}.gpu_weights[{name!r}] = {weight!r}: must be >= 0"
                )
        return proposal["value"]

    @validate(
        "budget_pause_warning_seconds",
        "poll_interval",
        "kernel_answer_timeout",
        "store_timeout",
        "shutdown_grace_seconds",
        "preemption_poll_seconds",
    )
    def _positive(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(
                f"{type(self).__name__}.{proposal['trait'].name} = {proposal['value']!r}: must "
                "be more than 0 seconds"
            )
        return proposal["value"]

    @validate(
        "gpu_hold_alarm_hours",
        "max_checkpoint_bytes",
        "resume_timeout",
        "store_rescan_interval",
        "rebuild_auto_seconds",
    )
    def _not_negative(self, proposal):
        return not_negative(self, proposal, " (0 turns it off)")

    @validate("keep_suspended_seconds")
    def _keep(self, proposal):
        return not_negative(self, proposal, " (0: stopped once its checkpoint is written)")

    @validate("suspend_min_free_memory")
    def _min_free(self, proposal):
        if not proposal["value"] >= 1:
            raise TraitError(
                f"{type(self).__name__}.suspend_min_free_memory = {proposal['value']!r}: must "
                "be at least 1 (the driver copies all of the kernel's GPU memory to the host)"
            )
        return proposal["value"]

    @validate("max_concurrent_restores")
    def _restore_slots(self, proposal):
        return not_negative(self, proposal, " (0: twice the CPUs this server may use)")

    @validate("gc_grace_seconds")
    def _grace(self, proposal):
        return not_negative(self, proposal)

    @validate("webhook_urls")
    def _webhook_urls(self, proposal):
        for url in proposal["value"]:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise TraitError(
                    f"{type(self).__name__}.webhook_urls: {url!r} is not an http:// or https:// URL"
                )
        return proposal["value"]

    @validate("preemption_notice_url")
    def _notice_url(self, proposal):
        url = proposal["value"]
        parts = urlsplit(url)
        if url and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise TraitError(
                f"{type(self).__name__}.preemption_notice_url = {url!r}: not an http:// or "
                "https:// URL"
            )
        return url
