"""``jupyter gpu-pause``, run as a user runs it (the console script, in its own process) against
one real ``jupyter server`` subprocess shared by the module: it finds the server in the runtime
dir, names sessions by id, prefix or notebook, follows pauses and resumes, and says what went
wrong with the documented exit code; ``verify`` and ``gc`` also work on a store with no server."""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_client import BlockingKernelClient

from tests.servers import TOKEN, WAIT, Server, _free_port

CLI = str(Path(sys.executable).with_name("jupyter-gpu-pause"))
RUNNING = ("active", "idle")
CONFIG = """
c.GpuPauseApp.warm_kernels = True
c.GpuPauseApp.poll_interval = 1
c.GpuPauseApp.policies = [{"name": "cli-test", "match": {"kernel_name": "python3*"},
                           "idle_timeout": 3600, "warn_before": 300, "action": "pause",
                           "max_keepalive": 7200}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("cli"), config=CONFIG)
    root = str(Path(__file__).resolve().parents[1])
    s.env["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    s.start()
    yield s
    s.stop()


def cli_env(runtime: Path, config: Path | None = None) -> dict:
    """A user's shell: Jupyter's runtime dir (where servers are found), no CLI env vars."""
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    if config is not None:
        env["JUPYTER_CONFIG_DIR"] = str(config)
    for var in ("JUPYTER_GPU_PAUSE_URL", "JUPYTER_GPU_PAUSE_CLI_TOKEN", "JUPYTER_TOKEN"):
        env.pop(var, None)
    return env


def run_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CLI, *args], env=env, capture_output=True, text=True, timeout=3 * WAIT, check=False
    )


@pytest.fixture
def cli(server):
    """``cli(*args)``: the CLI run against the module's server, found in its runtime dir."""
    env = {**cli_env(server.runtime), "JUPYTER_CONFIG_DIR": str(server.tmp / "config")}
    return lambda *args: run_cli(env, *args)


def as_json(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The error a command printed: one line on stderr, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_list_json_shows_the_open_notebook(server, cli):
    # Given a notebook open on the server
    s = server.open_notebook("listed.ipynb")
    # When a user lists the sessions as JSON, the server found in the runtime dir
    doc = as_json(cli("list", "--json"))
    # Then the REST shape comes back, with that notebook and its kernel
    (mine,) = [x for x in doc["sessions"] if x["id"] == s["id"]]
    assert mine["path"] == "listed.ipynb" and mine["state"] in RUNNING
    assert mine["kernel_id"] == s["kernel_id"]


def test_pause_wait_then_resume_wait_brings_the_variable_back(server, cli):
    # Given a notebook whose kernel holds x = 42
    s = server.open_notebook("roundtrip.ipynb")
    server.run(s["kernel_id"], "x = 42")

    # When it is paused by notebook path, following the pause to its end
    paused = cli("pause", "roundtrip.ipynb", "--wait")

    # Then the command succeeds once the session is paused, its kernel gone
    assert paused.returncode == 0, paused.stderr
    assert "roundtrip.ipynb: Paused" in paused.stdout
    now = server.sessions()[s["id"]]
    assert now["state"] == "paused" and now["kernel_id"] is None and now["checkpoint"]
    # And `capacity` names the kernel kept warm for its resume, once that one is ready
    server.wait_until(
        lambda: any(w["ready"] for w in as_json(cli("capacity", "--json"))["warm_kernels"]),
        "a warm kernel, ready",
    )
    assert "warm kernels: python3 ready" in cli("capacity").stdout

    # When it is resumed by a prefix of its id, followed to the end, as JSON
    back = as_json(cli("resume", s["id"][:13], "--wait", "--json"))

    # Then the final Session is running in a new kernel that has x back
    assert back["id"] == s["id"] and back["state"] in RUNNING
    assert back["kernel_id"] not in (None, s["kernel_id"])
    assert server.run(back["kernel_id"], "print(x)").strip() == "42"

    # And the events of that session tell the story, oldest first
    events = as_json(cli("events", "--session", s["id"], "--json"))["events"]
    types = [e["type"] for e in events]
    assert types.index("paused") < types.index("resumed"), types


SUSPEND_CONFIG = """
c.GpuPauseApp.cuda_checkpoint_class = "tests.fakes.FakeCudaCheckpoint"
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.keep_suspended_seconds = 600
c.GpuPauseApp.policies = []
"""


def test_pause_wait_ends_once_a_suspended_kernels_checkpoint_is_written(tmp_path):
    # Given a server where pauses suspend in place and keep the kernel (the declared fake
    # driver), and a notebook whose kernel holds x = 42
    s = Server(tmp_path, config=SUSPEND_CONFIG)
    root = str(Path(__file__).resolve().parents[1])
    s.env["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    s.start()
    try:
        env = {**cli_env(s.runtime), "JUPYTER_CONFIG_DIR": str(s.tmp / "config")}
        nb = s.open_notebook("suspend.ipynb")
        s.run(nb["kernel_id"], "x = 42")
        assert "tier: suspend — the CUDA driver 570.86.15" in run_cli(env, "capacity").stdout
        # When it is paused, followed to its end
        paused = run_cli(env, "pause", "suspend.ipynb", "--wait")
        # Then the command succeeds once the checkpoint is written, the kernel kept suspended
        assert paused.returncode == 0, (paused.stdout, paused.stderr)
        assert "the kernel is kept for a fast resume until" in paused.stdout
        now = s.sessions()[nb["id"]]
        assert now["state"] == "suspended" and now["suspended"]["checkpoint"] == "written"
        # And `resume --wait` brings the same kernel back, x in it
        back = as_json(run_cli(env, "resume", "suspend.ipynb", "--wait", "--json"))
        assert back["kernel_id"] == nb["kernel_id"]
        assert s.run(back["kernel_id"], "print(x)").strip() == "42"
    finally:
        s.stop()


def test_a_pause_that_fails_under_wait_exits_1_and_the_kernel_keeps_its_state(server, cli):
    # Given a notebook that registered an object no checkpoint can hold (a generator)
    s = server.open_notebook("unsaveable.ipynb")
    server.run(
        s["kernel_id"],
        "import jupyter_gpu_pause as gp\ng = (i for i in range(3))\nx = 7\ngp.register('g')",
    )
    # When it is paused, following the pause to its end
    result = cli("pause", "unsaveable.ipynb", "--wait")
    # Then the command fails with exit 1, saying why in one line
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "'g'" in error_line(result)
    # And the session runs on in the same kernel, its variables intact
    now = server.sessions()[s["id"]]
    assert now["state"] in RUNNING and now["kernel_id"] == s["kernel_id"]
    assert server.run(s["kernel_id"], "print(x)").strip() == "7"


@pytest.mark.parametrize(
    "args",
    [("show", "no-such-session"), ("pause", "00000000-0000-0000-0000-000000000000", "--wait")],
)
def test_an_unknown_session_exits_3(cli, args):
    # When a user names a session that does not exist
    result = cli(*args)
    # Then exit 3, saying so in one line
    assert result.returncode == 3
    assert f"no session matches {args[1]!r}" in error_line(result)


def test_resuming_an_active_session_exits_4_with_the_servers_message(server, cli):
    # Given a running notebook
    s = server.open_notebook("running.ipynb")
    # When a user asks to resume it
    result = cli("resume", s["id"])
    # Then exit 4 (wrong state), with the server's own message
    assert result.returncode == 4
    assert "cannot resume: the session is" in error_line(result)


def test_no_server_exits_5(server, tmp_path):
    # Given a URL where nothing listens, and a runtime dir where no server runs
    dead = f"http://127.0.0.1:{_free_port()}/"
    env = cli_env(tmp_path / "empty-runtime")
    # When a user lists sessions from either
    by_url = run_cli(env, "list", "--url", dead, "--token", TOKEN)
    by_discovery = run_cli(env, "list", "--json")
    # Then both exit 5 and say where they looked
    assert by_url.returncode == 5
    assert f"cannot reach the Jupyter server at {dead}" in error_line(by_url)
    assert by_discovery.returncode == 5
    assert "no running Jupyter server found" in error_line(by_discovery)
    assert by_discovery.stdout == ""


def test_an_ambiguous_prefix_exits_2_listing_the_candidates(server, cli):
    # Given sessions until two of them share the first character of their id
    by_first: dict[str, list[str]] = {}
    for s in server.sessions().values():
        by_first.setdefault(s["id"][0], []).append(s["id"])
    n = 0
    while max(len(v) for v in by_first.values()) < 2:
        n += 1
        s = server.open_notebook(f"crowd-{n}.ipynb")
        by_first.setdefault(s["id"][0], []).append(s["id"])
    prefix, ids = next((k, v) for k, v in by_first.items() if len(v) >= 2)

    # When a user names a session by that one character
    result = cli("show", prefix)

    # Then exit 2, naming every candidate and touching none
    assert result.returncode == 2
    assert f"{prefix!r} matches {len(ids)} sessions" in result.stderr
    for sid in ids:
        assert sid in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_an_ambiguous_notebook_path_exits_2(server, cli):
    # Given a notebook paused, then opened again in a new kernel that ran a cell: two
    # sessions, one path
    first = server.open_notebook("twice.ipynb")
    server.pause(first["id"])
    kid = server.open_kernel("twice.ipynb")
    server.run(kid, "scratch = 1")
    second = server.wait_until(
        lambda: next((x for x in server.sessions().values() if x["kernel_id"] == kid), None),
        "the new kernel's own session",
    )
    # When a user pauses "twice.ipynb"
    result = cli("pause", "twice.ipynb")
    # Then exit 2 listing both, and nothing was paused
    assert result.returncode == 2
    assert first["id"] in result.stderr and second["id"] in result.stderr
    assert server.sessions()[second["id"]]["state"] in RUNNING


def test_keepalive_within_and_beyond_the_policys_limit(server, cli):
    # Given a running notebook once the idle policy has looked at it
    s = server.open_notebook("kept.ipynb")
    server.wait_until(lambda: server.sessions()[s["id"]]["policy"], "the policy applying")
    # When a user keeps it alive for an hour, within the policy's two-hour max_keepalive
    ok = as_json(cli("keepalive", "kept.ipynb", "1h", "--json"))
    # Then the session is answered and the keep-alive recorded as an event
    assert ok["id"] == s["id"]
    events = as_json(cli("events", "--session", s["id"], "--json"))["events"]
    assert [e["detail"]["seconds"] for e in events if e["type"] == "keepalive"] == [3600]
    # When a user asks for three hours: refused as bad input (exit 2), the policy named
    too_long = cli("keepalive", "kept.ipynb", "3h")
    assert too_long.returncode == 2
    assert "longer than the 7200 s that policy cli-test allows" in error_line(too_long)
    # And a duration that is not one is a usage error before anything is sent
    assert cli("keepalive", "kept.ipynb", "soon").returncode == 2


def test_checkpoints_then_discard(server, cli):
    # Given a paused notebook
    s = server.open_notebook("gone.ipynb")
    server.run(s["kernel_id"], "y = 'kept'")
    ck = server.pause(s["id"])["checkpoint"]
    # When a user lists its checkpoints
    doc = as_json(cli("checkpoints", s["id"], "--json"))
    # Then the one checkpoint is there and valid
    assert [(c["id"], c["valid"]) for c in doc["checkpoints"]] == [(ck["id"], True)]
    # When the user discards the session, keeping its checkpoints
    gone = as_json(cli("discard", "gone.ipynb", "--json"))
    # Then it is forgotten (exit 3 for it now), its manifest still in the store
    assert gone == {
        "session_id": s["id"],
        "path": "gone.ipynb",
        "discarded": True,
        "checkpoints_deleted": False,
    }
    assert cli("show", s["id"]).returncode == 3
    assert (server.tmp / "store" / "v1" / "sessions" / s["id"] / f"{ck['id']}.json").exists()


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        (("report", "--since", "7d"), {"since", "until", "total", "sessions", "days"}),
        (("capacity",), {"provider", "devices", "queue"}),
        (("events", "--since", "1h"), {"events"}),
        (("gc", "--dry-run"), {"server", "store", "dry_run", "deleted_blobs", "kept_blobs"}),
    ],
)
def test_read_only_commands_answer_their_documented_json(cli, server, args, keys):
    # When a user asks for a report, the capacity, recent events or a GC dry run as JSON
    doc = as_json(cli(*args, "--json"))
    # Then the documented keys are there (gc went through the running server: it found one)
    assert keys <= set(doc), doc
    if args[0] == "gc":
        assert doc["server"] == f"http://127.0.0.1:{server.port}/" and doc["dry_run"] is True


def test_ctrl_c_during_wait_exits_130_and_the_pause_goes_on(server, cli):
    # Given a notebook running a long cell: a pause waits for the cell to end
    s = server.open_notebook("busy.ipynb")
    kc = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{s['kernel_id']}.json"))
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=WAIT)
        kc.execute("import time; time.sleep(120)")
        server.wait_until(
            lambda: (
                server.api("GET", f"api/kernels/{s['kernel_id']}")[1]["execution_state"] == "busy"
            ),
            "the server seeing the cell run",
        )
        env = {**cli_env(server.runtime), "JUPYTER_CONFIG_DIR": str(server.tmp / "config")}
        # When a user pauses it with --wait and presses Ctrl-C once it follows the pause
        proc = subprocess.Popen(
            [CLI, "pause", "busy.ipynb", "--wait"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a terminal's Ctrl-C: SIGINT not ignored (a background CI job inherits it ignored)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        first = proc.stdout.readline()
        assert first.startswith("busy.ipynb: pausing"), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT)
        # Then it exits 130 saying the pause goes on, and it does
        assert proc.returncode == 130, err
        assert "stopped following; the pause goes on in the server" in err
        assert "Traceback" not in err
        assert server.sessions()[s["id"]]["state"] == "pausing"
        # When the user cancels it from the CLI
        cancelled = as_json(cli("cancel", "busy.ipynb", "--json"))
        # Then the session is running again, its kernel the same
        assert cancelled["state"] in RUNNING + ("pausing",)
        final = server.wait_state(s["id"])
        assert final["state"] in RUNNING and final["kernel_id"] == s["kernel_id"]
    finally:
        server.api("POST", f"api/kernels/{s['kernel_id']}/interrupt")
        kc.stop_channels()


def test_tables_on_a_terminal_and_plain_lines_in_a_pipe(server, cli):
    # Given a running notebook
    s = server.open_notebook("shown.ipynb")
    env = {
        **cli_env(server.runtime),
        "JUPYTER_CONFIG_DIR": str(server.tmp / "config"),
        "COLUMNS": "160",
        "TERM": "xterm",
    }
    # When a user lists sessions in a 160-column terminal
    leader, follower = pty.openpty()
    proc = subprocess.Popen([CLI, "list"], env=env, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(WAIT) == 0
    screen = b"".join(chunks).decode()
    # Then a table with a header and short ids (a prefix names the session)
    assert "NOTEBOOK" in screen and "STATE" in screen
    assert s["id"][:8] in screen and s["id"] not in screen
    # When the same is piped: one tab-separated line per session, the full id, no header
    piped = cli("list")
    assert piped.returncode == 0
    (line,) = [x for x in piped.stdout.splitlines() if x.startswith(s["id"])]
    assert line.split("\t")[1:3] == [server.sessions()[s["id"]]["state"], "shown.ipynb"]
    assert "NOTEBOOK" not in piped.stdout


def _resumed(server: Server, path: str, cells: list[str]) -> dict:
    """A notebook that ran ``cells`` (each its own execution count), paused and resumed through
    the REST API: the resumed Session, whose restore report offers to rebuild what the
    checkpoint could not hold."""
    s = server.open_notebook(path)
    for code in cells:
        server.run(s["kernel_id"], code)
    server.pause(s["id"])
    return server.resume(s["id"])


def test_rebuild_shows_the_plan_reruns_its_cells_and_brings_a_hash_back(server, cli):
    # Given a notebook that made two hash objects (no checkpoint can hold one), resumed: the
    # module came back, the hashes did not
    s = _resumed(
        server,
        "hashes.ipynb",
        ["import hashlib", "h = hashlib.sha256(b'abc')", "m = hashlib.md5(b'x')"],
    )
    assert s["restore"]["rebuild"]["names"] == ["h", "m"]

    # When a user rebuilds only `h`, by notebook path
    one = cli("rebuild", "hashes.ipynb", "--names", "h")

    # Then it shows the plan (what it makes, each cell with its first line), the start, and
    # the outcome naming the cell it re-ran; exit 0, and `h` works in the kernel
    assert one.returncode == 0, one.stderr
    lines = one.stdout.splitlines()
    assert lines[0].startswith("hashes.ipynb: rebuild `h`, `m`: re-run cells [2], [3] — ")
    assert lines[1].startswith("  [2] h = hashlib.sha256(b'abc')  (")
    assert lines[2].startswith("  [3] m = hashlib.md5(b'x')  (")
    assert lines[3] == "  asked for h only: just the cells they need re-run"
    assert lines[4] == "hashes.ipynb: rebuilding: cell 1"
    assert lines[-1].startswith("hashes.ipynb: Rebuilt h by re-running cells [2] in ")
    assert server.run(s["kernel_id"], "print(h.hexdigest()[:8], 'm' in globals())") == (
        "ba7816bf False\n"
    )

    # When the user rebuilds the rest, as JSON
    doc = as_json(cli("rebuild", s["id"][:13], "--json"))

    # Then one document: the plan it ran, the `rebuilt` event, and the session offering nothing
    assert doc["plan"]["names"] == ["m"]
    assert (doc["event"]["type"], doc["event"]["detail"]["names"]) == ("rebuilt", ["m"])
    assert doc["event"]["detail"]["cells"][0]["execution_count"] == 3
    assert doc["session"]["id"] == s["id"] and doc["session"]["restore"]["rebuild"] is None
    assert server.run(s["kernel_id"], "print(m.hexdigest()[:6])") == "9dd4e4\n"

    # When the user asks again: exit 4 with the server's reason, and nothing on stdout
    again = cli("rebuild", "hashes.ipynb")
    assert again.returncode == 4 and again.stdout == ""
    assert error_line(again).endswith(
        "nothing to rebuild: the last resume brought every variable back"
    )


def test_rebuild_stopped_by_a_failing_cell_exits_1_naming_it_and_changes_nothing(server, cli):
    # Given a resumed notebook whose lost generator reads a file deleted since
    s = _resumed(
        server,
        "rows.ipynb",
        ["open('rows.txt', 'w').write('1\\n2\\n')", "rows = (x for x in open('rows.txt'))"],
    )
    server.run(s["kernel_id"], "import os; os.remove('rows.txt'); kept = 2")

    # When the user rebuilds it
    result = cli("rebuild", "rows.ipynb")

    # Then exit 1, one line naming the cell and the error; the plan was shown before
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert error_line(result).startswith(
        "jupyter gpu-pause: error: rows.ipynb: Rebuild stopped at cell [2] "
        "(rows = (x for x in open('rows.txt'))): FileNotFoundError"
    )
    assert "Nothing was changed" in result.stderr
    assert "  [2] rows = (x for x in open('rows.txt'))  (" in result.stdout
    # And nothing was written back: the kernel is as it was, and the plan is still offered
    assert server.run(s["kernel_id"], "print(kept, 'rows' in globals())") == "2 False\n"
    assert server.sessions()[s["id"]]["restore"]["rebuild"]["names"] == ["rows"]


def test_rebuild_that_would_share_a_restored_object_asks_for_yes(server, cli):
    # Given a resumed notebook whose lost hash is made from a restored object that refuses
    # to be copied (the re-run would have to use the restored object itself)
    s = _resumed(
        server,
        "shared.ipynb",
        [
            "import hashlib\nclass NoCopy:\n    def __deepcopy__(self, memo):\n"
            "        raise TypeError('no copies')",
            "src = NoCopy()",
            "h = hashlib.sha256(repr(type(src)).encode())",
        ],
    )

    # When the user rebuilds it without --yes
    asked = cli("rebuild", "shared.ipynb")

    # Then nothing ran: exit 1, saying which object and how to confirm
    assert asked.returncode == 1, (asked.stdout, asked.stderr)
    error, reason = asked.stderr.splitlines()
    assert "shared.ipynb: rebuild not run" in error
    assert error.endswith("to re-run anyway: jupyter gpu-pause rebuild shared.ipynb --yes")
    assert reason.startswith("  src: it cannot be copied")
    assert server.run(s["kernel_id"], "print('h' in globals())") == "False\n"

    # When the user confirms, not waiting for the outcome
    started = cli("rebuild", "shared.ipynb", "--yes", "--no-wait")

    # Then it returns once the server has started it, and `h` comes back
    assert started.returncode == 0, started.stderr
    assert "shared.ipynb: Active. Rebuilding: re-running cells [3]" in started.stdout
    server.wait_until(
        lambda: server.sessions()[s["id"]]["restore"]["rebuild"] is None, "the rebuild's end"
    )
    assert server.run(s["kernel_id"], "print(h.name)") == "sha256\n"


@pytest.mark.parametrize(
    ("paused", "options", "code", "error"),
    [
        (False, (), 4, "nothing to rebuild: the last resume brought every variable back"),
        (True, (), 4, "cannot rebuild: the session is paused"),
        (False, ("--names", "h,1x"), 2, "--names: not a variable name: 1x"),
    ],
)
def test_a_rebuild_refused_says_why_and_changes_nothing(server, cli, paused, options, code, error):
    # Given a notebook never resumed, or paused
    s = server.open_notebook(f"refused-{paused}-{len(options)}.ipynb")
    server.run(s["kernel_id"], "x = 1")
    if paused:
        server.pause(s["id"])
    # When the user asks for a rebuild
    result = cli("rebuild", s["id"], *options)
    # Then the documented exit code and the reason, in one line; the session is as it was
    assert result.returncode == code and result.stdout == ""
    assert error_line(result) == f"jupyter gpu-pause: error: {error}"
    assert (server.sessions()[s["id"]]["state"] == "paused") is paused


def _offline(tmp_path: Path, server: Server, cli) -> tuple[Path, dict]:
    """A copy of the server's store and signing key, and the shell of a user on a machine
    where no server runs, configured with that store the way the server is configured."""
    s = server.open_notebook("offline.ipynb")
    server.run(s["kernel_id"], "import numpy as np; a = np.arange(300_000.0); z = 'zz'")
    server.pause(s["id"])
    store = tmp_path / "store-copy"
    shutil.copytree(server.tmp / "store", store)
    secret = tmp_path / "secret"
    shutil.copy2(server.tmp / "secret", secret)
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.py").write_text(
        f"c.GpuPauseApp.store_url = {str(store)!r}\nc.GpuPauseApp.secret_file = {str(secret)!r}\n"
    )
    return store, cli_env(tmp_path / "no-server-runtime", config)


def test_verify_and_gc_dry_run_work_offline_and_verify_names_a_damaged_blob(server, cli, tmp_path):
    # Given a store with checkpoints, on a machine where no server runs
    store, env = _offline(tmp_path, server, cli)

    # When verify and a GC dry run run on the configured store
    verified = run_cli(env, "verify", "--json")
    dry = run_cli(env, "gc", "--dry-run", "--json")

    # Then every checkpoint is sound, every blob hashed, and GC would delete nothing
    doc = as_json(verified)
    assert doc["ok"] is True and doc["deep"] is True and doc["blobs_checked"] >= 1
    assert doc["store"] == str(store) and all(c["ok"] for c in doc["checkpoints"])
    gc = as_json(dry)
    assert gc["store"] == str(store) and gc["server"] is None and gc["dry_run"] is True
    assert gc["deleted_blobs"] == 0 and gc["kept_blobs"] >= 1
    assert "no running Jupyter server found" in dry.stderr

    # When one blob's bytes are overwritten (same size: only its hash can tell)
    blob = max((p for p in (store / "v1" / "blobs").rglob("*") if p.is_file()), key=os.path.getsize)
    data = bytearray(blob.read_bytes())
    data[:8] = bytes(b ^ 0xFF for b in data[:8])
    blob.write_bytes(bytes(data))

    # Then verify, given the store explicitly, exits 1 naming that blob
    damaged = run_cli(env, "verify", str(store))
    assert damaged.returncode == 1
    assert "DAMAGED" in damaged.stdout and blob.name in damaged.stdout
    assert blob.name in error_line(damaged)

    # And a store that does not exist is "not found"
    missing = run_cli(env, "verify", str(tmp_path / "nowhere"))
    assert missing.returncode == 3 and "there is no store at" in error_line(missing)
