"""Real ``jupyter server`` processes with the extension, started and stopped as an administrator
or a service manager does (the scenarios of jupyter_server's own ``test_serverapp.py`` that an
extension can break): a bad setting stops the server at start naming it, the server always stops
on SIGTERM with its kernels, ``jupyter server list/stop`` work, and two servers started at once
on an empty data dir both run with one signing key."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from traitlets.config import Config

from jupyter_gpu_pause.server.app import GpuPauseApp
from jupyter_gpu_pause.server.config.checks import ConfigError, check_store
from jupyter_gpu_pause.server.config.settings import GpuPauseSettings
from jupyter_gpu_pause.store.integrity import Signer
from tests.servers import READBACK, STATE, Server

# (id, jupyter_server_config.py, words the refusal must contain)
BAD_CONFIGS = [
    (
        "negative-restore-slots",
        "c.GpuPauseApp.max_concurrent_restores = -1",
        ["GpuPauseApp.max_concurrent_restores = -1", "must be >= 0"],
    ),
    (
        "rebuild-mode-unknown",
        "c.GpuPauseApp.rebuild = 'sometimes'",
        ["GpuPauseApp.rebuild", "sometimes"],
    ),
    (
        "negative-rebuild-auto-seconds",
        "c.GpuPauseApp.rebuild_auto_seconds = -1",
        ["GpuPauseApp.rebuild_auto_seconds = -1", "must be >= 0"],
    ),
    (
        "test-restore-not-a-bool",
        "c.GpuPauseApp.test_restore = 'maybe'",
        ["GpuPauseApp.test_restore", "maybe"],
    ),
    (
        "suspend-mode-unknown",
        "c.GpuPauseApp.suspend = 'always'",
        ["GpuPauseApp.suspend", "always"],
    ),
    (
        "negative-keep-suspended",
        "c.GpuPauseApp.keep_suspended_seconds = -5",
        ["GpuPauseApp.keep_suspended_seconds = -5", "must be >= 0"],
    ),
    (
        "suspend-free-memory-under-one",
        "c.GpuPauseApp.suspend_min_free_memory = 0.5",
        ["GpuPauseApp.suspend_min_free_memory = 0.5", "must be at least 1"],
    ),
    (
        "unimportable-cuda-checkpoint",
        "c.GpuPauseApp.cuda_checkpoint_class = 'no.such.Driver'",
        ["GpuPauseApp.cuda_checkpoint_class = 'no.such.Driver'", "could not be imported"],
    ),
    (
        "warm-kernels-not-a-bool",
        "c.GpuPauseApp.warm_kernels = 'sometimes'",
        ["GpuPauseApp.warm_kernels", "sometimes"],
    ),
    (
        "unimportable-provider",
        "c.GpuPauseApp.capacity_provider_class = 'no.such.Class'",
        ["GpuPauseApp.capacity_provider_class = 'no.such.Class'", "could not be imported"],
    ),
    (
        "unknown-provider-name",
        "c.GpuPauseApp.capacity_provider_class = 'quotas'",
        ["GpuPauseApp.capacity_provider_class = 'quotas'", "'auto', 'nvml', 'quota'"],
    ),
    (
        "negative-quota",
        "c.GpuPauseApp.capacity_provider_class = 'quota'\nc.QuotaCapacity.max_sessions = -1",
        ["QuotaCapacity.max_sessions = -1: must be >= 0"],
    ),
    (
        "misspelt-quota-setting",
        "c.QuotaCapacity.max_session = 2",
        ["QuotaCapacity.max_session is not a setting", "did you mean 'max_sessions'"],
    ),
    (
        "queue-folder-not-writable",
        "c.GpuPauseApp.capacity_queue_url = '/proc/self'",
        ["GpuPauseApp.capacity_queue_url = '/proc/self'", "cannot write to /proc/self"],
    ),
    (
        "queue-url-of-another-database",
        "c.GpuPauseApp.capacity_queue_url = 'mysql://hub@db/gpu'",
        ["GpuPauseApp.capacity_queue_url = 'mysql://hub@db/gpu'", "or a postgresql:// URL"],
    ),
    (
        "queue-postgres-url-malformed",
        "c.GpuPauseApp.capacity_queue_url = 'postgresql://hub:pw@db:54x/gpu'",
        ["GpuPauseApp.capacity_queue_url: not a valid PostgreSQL URL", "'54x' is not a number"],
    ),
    (
        "queue-lease-too-short",
        "c.CapacityQueue.lease_seconds = 0.5",
        ["CapacityQueue.lease_seconds = 0.5: must be >= 1"],
    ),
    (
        "negative-resume-timeout",
        "c.GpuPauseApp.resume_timeout = -5",
        ["GpuPauseApp.resume_timeout = -5", ">= 0"],
    ),
    (
        "unknown-protocol",
        "c.GpuPauseApp.store_url = 'nosuchproto://x/y'",
        ["GpuPauseApp.store_url = 'nosuchproto://x/y'", "nosuchproto"],
    ),
    (
        "process-local-store",
        "c.GpuPauseApp.store_url = 'memory://ckpts'",
        ["GpuPauseApp.store_url = 'memory://ckpts'", "inside one process"],
    ),
    (
        "secret-in-store-options",
        "c.GpuPauseApp.store_url = 's3://bucket/ckpts'\n"
        "c.GpuPauseApp.store_options = {'endpoint_url': 'http://127.0.0.1:1', 'secret': 'y'}",
        ["GpuPauseApp.store_options holds credentials (secret)", "AWS_ACCESS_KEY_ID"],
    ),
    (
        "nested-secret",
        "c.GpuPauseApp.store_url = 's3://bucket/ckpts'\n"
        "c.GpuPauseApp.store_options = {'client_kwargs': {'aws_secret_access_key': 'y'}}",
        ["credentials (client_kwargs.aws_secret_access_key)"],
    ),
    (
        "password-in-url",
        "c.GpuPauseApp.store_url = 'sftp://me:hunter2@host/ckpts'",
        ["GpuPauseApp.store_url", "holds a password"],
    ),
    (
        "misspelt-store-option",
        "c.GpuPauseApp.store_url = 's3://bucket/ckpts'\n"
        "c.GpuPauseApp.store_options = {'endpoint': 'http://127.0.0.1:1'}",
        ["GpuPauseApp.store_options", "'endpoint'", "did you mean 'endpoint_url'"],
    ),
    (
        "unbuilt-setting",  # docs/deploy/enterprise-gateway-kueue.md: a design, not built
        "c.GpuPauseApp.kueue_visibility_url = 'https://kubernetes.default.svc'",
        ["GpuPauseApp.kueue_visibility_url is not a setting"],
    ),
    (
        "unknown-shutdown-checkpoint",
        "c.GpuPauseApp.shutdown_checkpoint = 'gpus'",
        ["GpuPauseApp.shutdown_checkpoint = 'gpus'", "'gpu', 'all', 'none'"],
    ),
    (
        "webhook-not-http",
        "c.GpuPauseApp.webhook_urls = ['ftp://hooks.example.org/x']",
        ["GpuPauseApp.webhook_urls", "'ftp://hooks.example.org/x' is not an http:// or https://"],
    ),
    (
        "webhook-secret-not-base64",
        "c.GpuPauseApp.webhook_secret = 'whsec_not base64!'",
        ["GpuPauseApp.webhook_secret", "must continue with base64"],
    ),
    (
        "misspelt-webhook-setting",
        "c.WebhookSender.max_attempt = 3",
        ["WebhookSender.max_attempt is not a setting", "did you mean 'max_attempts'"],
    ),
    (
        "webhook-attempts-zero",
        "c.WebhookSender.max_attempts = 0",
        ["WebhookSender.max_attempts = 0: must be >= 1"],
    ),
    (
        "preemption-url-not-http",
        "c.GpuPauseApp.preemption_notice_url = '169.254.169.254/latest/meta-data'",
        ["GpuPauseApp.preemption_notice_url = '169.254.169.254/latest/meta-data'", "not an http"],
    ),
    (
        "zero-preemption-poll",
        "c.GpuPauseApp.preemption_poll_seconds = 0",
        ["GpuPauseApp.preemption_poll_seconds = 0", "more than 0 seconds"],
    ),
    (
        "zero-shutdown-grace",
        "c.GpuPauseApp.shutdown_grace_seconds = 0",
        ["GpuPauseApp.shutdown_grace_seconds = 0", "more than 0 seconds"],
    ),
    (
        "retention-unknown-key",
        "c.GpuPauseApp.retention = {'keep_lats': 3}",
        ["GpuPauseApp.retention", "unknown key(s) 'keep_lats'", "keep_last"],
    ),
    (
        "retention-negative",
        "c.GpuPauseApp.retention = {'keep_last': 2, 'max_age_days': -1}",
        ["GpuPauseApp.retention", "max_age_days = -1", ">= 0"],
    ),
    (
        "retention-fraction-of-a-checkpoint",
        "c.GpuPauseApp.retention = {'keep_last': 1.5}",
        ["GpuPauseApp.retention", "keep_last = 1.5", "whole number"],
    ),
    (
        "zero-store-timeout",
        "c.GpuPauseApp.store_timeout = 0",
        ["GpuPauseApp.store_timeout = 0", "more than 0"],
    ),
    (
        "negative-gc-grace",
        "c.GpuPauseApp.gc_grace_seconds = -5",
        ["GpuPauseApp.gc_grace_seconds = -5", ">= 0"],
    ),
    (
        "misspelt-setting",
        "c.GpuPauseApp.poll_intervall = 5",
        ["GpuPauseApp.poll_intervall is not a setting", "did you mean 'poll_interval'"],
    ),
    (
        "zero-poll-interval",
        "c.GpuPauseApp.poll_interval = 0",
        ["GpuPauseApp.poll_interval = 0", "more than 0"],
    ),
    (
        "bad-policy",
        "c.GpuPauseApp.policies = [{'name': 'nightly', 'idle_timout': 60}]",
        ["GpuPauseApp.policies", "policy 'nightly': unknown key 'idle_timout'"],
    ),
    (
        "bad-unpausable",
        "c.GpuPauseApp.policies = [{'name': 'nightly', 'unpausable': 'pause'}]",
        ["GpuPauseApp.policies", "policy 'nightly': 'unpausable' must be one of keep, cull"],
    ),
    (
        "budget-unknown-key",
        "c.GpuPauseApp.budgets = [{'name': 'lab', 'gpu_hours': 40, 'perid': 'month'}]",
        ["GpuPauseApp.budgets", "budget 'lab': unknown key 'perid'"],
    ),
    (
        "budget-bad-period",
        "c.GpuPauseApp.budgets = [{'name': 'lab', 'gpu_hours': 40, 'period': 'fortnight'}]",
        ["GpuPauseApp.budgets", "budget 'lab': unknown period 'fortnight'"],
    ),
    (
        "budget-no-hours",
        "c.GpuPauseApp.budgets = [{'name': 'lab', 'gpu_hours': 0}]",
        ["GpuPauseApp.budgets", "budget 'lab': 'gpu_hours' must be more than 0"],
    ),
    (
        "budget-warn-above-hold",
        "c.GpuPauseApp.budgets = [{'name': 'lab', 'gpu_hours': 4, 'warn_at': 1.2}]",
        ["GpuPauseApp.budgets", "'warn_at' (1.2) is above 'hold_at' (1)"],
    ),
    (
        "zero-budget-warning",
        "c.GpuPauseApp.budget_pause_warning_seconds = 0",
        ["GpuPauseApp.budget_pause_warning_seconds = 0", "more than 0"],
    ),
    (
        "negative-gpu-weight",
        "c.GpuPauseApp.gpu_weights = {'NVIDIA H200': -1}",
        ["GpuPauseApp.gpu_weights", "must be >= 0"],
    ),
    (
        "wrong-type",
        "c.GpuPauseApp.max_checkpoint_bytes = 'lots'",
        ["GpuPauseApp.max_checkpoint_bytes", "'lots'"],
    ),
]


@pytest.mark.parametrize(
    ("config", "words"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_setting_stops_the_server_at_start_naming_it(tmp_path, config, words):
    # Given a server configured with one bad setting
    server = Server(tmp_path, config=config, own_paths="store_url" not in config)
    # When it starts
    server.launch()
    # Then it exits with a failure status, before serving anything, naming setting and value
    assert server.exit_status() != 0
    log = server.log_tail()
    assert "jupyter_gpu_pause: bad configuration" in log, log
    for w in words:
        assert w in log, log


@pytest.mark.parametrize(
    ("arg", "words"),
    [
        ("--GpuPauseApp.capacity_provider_class=quotas", "capacity_provider_class = 'quotas'"),
        ("--GpuPauseApp.store_url=nosuchproto://x", "store_url = 'nosuchproto://x'"),
        ("--GpuPauseApp.kernel_answer_timeout=-1", "kernel_answer_timeout = -1.0"),
    ],
)
def test_a_bad_command_line_setting_stops_the_server_too(tmp_path, arg, words):
    server = Server(tmp_path, args=(arg,), own_paths="store_url" not in arg)
    server.launch()
    assert server.exit_status() != 0
    assert f"jupyter_gpu_pause: bad configuration: GpuPauseApp.{words}" in server.log_tail()


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_signing_key_others_can_read_stops_the_server(tmp_path, mode):
    # Given a signing key file readable by the group or by everyone
    key = tmp_path / "secret"
    key.write_text("k" * 64)
    key.chmod(mode)
    server = Server(tmp_path)
    # When the server starts, it refuses, naming the file and how to fix it
    server.launch()
    assert server.exit_status() != 0
    log = server.log_tail()
    assert "GpuPauseApp.secret_file" in log and "readable by others" in log
    assert f"chmod 600 {key}" in log


def test_a_records_path_that_is_a_folder_stops_the_server(tmp_path):
    (tmp_path / "db").mkdir()
    server = Server(tmp_path, args=(f"--GpuPauseApp.db_path={tmp_path / 'db'}",), own_paths=False)
    server.launch()
    assert server.exit_status() != 0
    assert "GpuPauseApp.db_path" in server.log_tail() and "is a folder" in server.log_tail()


def _gone(pids: list[int]) -> bool:
    _, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], 30)
    return not alive


def test_sigterm_stops_the_server_and_its_kernels(tmp_path):
    # Given a server with a notebook whose kernel holds state
    server = Server(tmp_path)
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    kernels = server.kernel_pids()
    assert kernels
    # When a service manager sends SIGTERM
    status = server.stop()
    # Then the server exits cleanly and its kernel processes are gone
    assert status == 0, server.log_tail()
    assert _gone(kernels)
    assert "Traceback" not in server.log_tail()


def test_a_server_whose_extension_failed_to_start_still_stops_with_its_kernels(tmp_path):
    # Given a server whose extension failed at start (records it cannot read), with a kernel
    (tmp_path / "records.sqlite").write_bytes(b"not a database\n" * 64)
    server = Server(tmp_path)
    server.start()
    assert server.api("GET", "gpu-pause/api/sessions")[0] == 503
    code, js = server.api(
        "POST",
        "api/sessions",
        {"path": "nb.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert code == 201, js
    kernels = server.kernel_pids()
    assert kernels
    # When it gets SIGTERM
    status = server.stop()
    # Then it exits and its kernels are shut down
    assert status == 0, server.log_tail()
    assert _gone(kernels)


def test_stop_extension_tolerates_an_extension_that_was_never_built():
    # Given the extension app as jupyter_server leaves it when loading failed part-way
    app = GpuPauseApp()
    # When jupyter_server stops it, nothing is raised (so SIGTERM goes on to the kernels)
    asyncio.run(app.stop_extension())


def _jupyter(server: Server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_server", *args],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_jupyter_server_list_and_stop(tmp_path):
    # Given a running server with the extension and a kernel
    server = Server(tmp_path)
    server.start()
    s = server.open_notebook("nb.ipynb")
    kernels = server.kernel_pids()
    # When an admin lists the running servers, it is there
    listed = _jupyter(server, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert server.port in [json.loads(line)["port"] for line in listed.stdout.splitlines()]
    # When the admin stops it by port
    stopped = _jupyter(server, "stop", str(server.port))
    assert stopped.returncode == 0, stopped.stderr
    # Then it exits and its kernel is gone
    assert server.exit_status() == 0, server.log_tail()
    assert _gone(kernels) and s["kernel_id"]


def test_two_servers_starting_at_once_share_one_key(tmp_path):
    # Given two servers started at the same moment on one empty data dir (default key path)
    data = tmp_path / "shared-data"
    a = Server(tmp_path / "a", own_paths=False, data=data)
    b = Server(tmp_path / "b", own_paths=False, data=data)
    a.launch()
    b.launch()
    try:
        a.wait_ready()
        b.wait_ready()
        # When each pauses a notebook
        paused = []
        for server in (a, b):
            s = server.open_notebook("nb.ipynb")
            server.run(s["kernel_id"], STATE)
            paused.append(server.pause(s["id"]))
    finally:
        a.stop()
        b.stop()
    # Then there is one key file, private, and both signed their checkpoint with it
    key = data / "gpu_pause" / "secret"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert [p.name for p in key.parent.iterdir() if p.name.startswith((".secret", "secret"))] == [
        "secret"
    ]
    signer = Signer(key.read_bytes().strip())
    store = data / "gpu_pause" / "store" / "v1" / "sessions"
    for s in paused:
        manifest = store / s["id"] / f"{s['checkpoint']['id']}.json"
        signer.verify(json.loads(manifest.read_text()))


def test_a_lost_key_is_said_loudly_and_never_replaced(tmp_path):
    # Given a paused notebook, and then its server's signing key lost (a wiped home)
    server = Server(tmp_path)
    server.start()
    s = server.open_notebook("nb.ipynb")
    server.run(s["kernel_id"], STATE)
    ck = server.pause(s["id"])["checkpoint"]["id"]
    assert server.stop() == 0
    key = tmp_path / "secret"
    original = key.read_bytes()
    key.unlink()
    # When the server starts again
    server.start()
    # Then the log says so loudly (once the records are loaded, which the API does not wait
    # for), no new key is made, and the session says what is wrong
    assert server.wait_log("signing key").startswith("[C "), server.log_tail()
    assert not key.exists()
    now = server.sessions()[s["id"]]
    assert now["state"] == "paused" and "signing key" in now["message"], now
    assert "cannot be verified" in now["message"]
    # And resume is refused with that reason, changing nothing
    code, err = server.api("POST", f"gpu-pause/api/sessions/{s['id']}/resume")
    assert code == 503 and err["reason"] == "key-missing", err
    code, body = server.api("GET", f"gpu-pause/api/sessions/{s['id']}/checkpoints")
    assert [c["valid"] for c in body["checkpoints"]] == [False]
    # When the admin puts the key back (no restart), the session resumes with its state
    key.write_bytes(original)
    key.chmod(0o600)
    back = server.resume(s["id"])
    assert back["checkpoint"]["id"] == ck
    assert server.run(back["kernel_id"], READBACK).strip() == "45.0 hi"
    assert server.stop() == 0


def test_a_key_with_no_checkpoints_yet_is_simply_created(tmp_path: Path):
    # Given a fresh install (no key, empty store): the first start creates the key, quietly
    server = Server(tmp_path)
    server.start()
    try:
        s = server.open_notebook("nb.ipynb")
        server.run(s["kernel_id"], STATE)
        server.pause(s["id"])
    finally:
        server.stop()
    assert stat.S_IMODE(os.stat(tmp_path / "secret").st_mode) == 0o600
    assert "signing key" not in server.log_tail()


# store_options an admin might write: which are refused as credentials (none reach a kernel)
STORE_OPTIONS = [
    ({"endpoint_url": "http://s3.local:9000"}, None),
    ({"anon": True}, None),
    ({"client_kwargs": {"region_name": "eu-west-1"}}, None),
    ({"s3_additional_kwargs": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k1"}}, None),
    ({"config_kwargs": {"retries": {"max_attempts": 3}}}, None),
    ({"key": "AKIA…"}, "key"),
    ({"secret": "…"}, "secret"),
    ({"token": "…"}, "token"),
    ({"username": "u", "password": "p"}, "password"),
    ({"client_kwargs": {"aws_access_key_id": "AKIA…"}}, "client_kwargs.aws_access_key_id"),
    ({"s3_additional_kwargs": {"SSECustomerKey": "…"}}, "s3_additional_kwargs.SSECustomerKey"),
]


@pytest.mark.parametrize(("options", "refused"), STORE_OPTIONS)
def test_which_store_options_count_as_credentials(tmp_path, options, refused):
    if refused is None:
        assert check_store("s3://bucket/ckpts", options).url == "s3://bucket/ckpts"
        return
    with pytest.raises(ConfigError) as e:
        check_store("s3://bucket/ckpts", options)
    assert f"credentials ({refused}" in str(e.value) and "AWS_ACCESS_KEY_ID" in str(e.value)


def test_the_settings_are_gpupauseapps_alone():
    # Given the settings declared on a mixin (config/settings.py) that GpuPauseApp inherits,
    # and a configuration that also names the mixin
    config = Config()
    config.GpuPauseSettings.poll_interval = 99.0
    config.GpuPauseApp.store_timeout = 7.0
    # When the app reads it
    app = GpuPauseApp(config=config)
    # Then only the GpuPauseApp section counts, and help lists every setting under GpuPauseApp
    assert (app.poll_interval, app.store_timeout) == (10.0, 7.0)
    assert "GpuPauseSettings" not in GpuPauseApp.section_names()
    help_text = GpuPauseApp.class_get_help()
    for name in GpuPauseSettings.class_trait_names(config=True):
        assert f"--GpuPauseApp.{name}=" in help_text
