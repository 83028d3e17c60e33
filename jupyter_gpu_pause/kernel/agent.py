"""The entry point the server runs inside the kernel, and the channel back to it.

The server sends one silent ``execute_request`` whose code (``protocol.CODE``) calls
``call_parent``; the request (``protocol.Request``) is in that message's metadata, not in the
code, which IPython would run through its input transformers. Its ``func`` is one of
``protocol.RequestName``, its ``params`` that request's args (``protocol.CaptureArgs``, …);
every request first takes the kernel's exit baseline (``finish.py``) and installs the cell log
(``cells.py``) if this kernel has none yet.
Progress and the final result travel back as display_data messages with our own MIME types on
IOPub: frontends ignore them (the request is not theirs) and nothing is added to the user's
namespace or history. Every result carries the protocol and package version, so a kernel whose
environment has another version of this package is told apart from a broken one.
"""

from __future__ import annotations

import time

from ..store import IntegrityError, Store, StoreError, declare_intent
from ..store.schema import MAX_TEXT
from ..store.spool import ChannelStore, SpoolStore
from . import ambient, cells, guard, rerun
from .capture import CaptureError, environment, host_copies, make_plan, write_plan
from .dryrun import dry_run
from .dryrun import plan as verified
from .finish import prepare_exit
from .finish import watch as watch_exit
from .protocol import (  # noqa: F401  (PROTOCOL, the MIME types: this module's names too)
    DEFAULT_AMBIENT,
    DEFAULT_CAPTURE,
    DEFAULT_DEVICE,
    DEFAULT_MAX_BYTES,
    DEFAULT_REBUILD,
    DEFAULT_STORE_TIMEOUT,
    DEFAULT_TEST_RESTORE,
    DEFAULT_VERIFY,
    MIME_PROGRESS,
    MIME_RESULT,
    PROTOCOL,
    REQUEST_KEY,
    CaptureArgs,
    CheckArgs,
    NoArgs,
    RebuildArgs,
    RestoreArgs,
    WarmArgs,
)
from .registry import REGISTRY, plan_args, register, registered
from .restore import RestoreError, load_blobs, restore_objects
from .trial import start as start_trial


def _shell():
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("jupyter_gpu_pause's agent runs inside an IPython kernel")
    return shell


def _publish(mime: str, data: dict) -> None:
    from IPython.display import publish_display_data

    publish_display_data({mime: data})


class _Progress:
    """Publishes progress at most four times a second, and always a new phase's first update
    and the last one (the server's phase clock starts and ends phases on them); ``first``
    goes with the first update only."""

    def __init__(self, first: dict | None = None):
        self._last = 0.0
        self._phase: str | None = None
        self._first = first or {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last >= 0.25 or done >= total or phase != self._phase:
            self._last, self._phase = now, phase
            body = {"phase": phase, "done_bytes": done, "total_bytes": total, **self._first}
            self._first = {}
            _publish(MIME_PROGRESS, body)


def _version() -> str:
    from ..version import __version__

    return __version__


def _reply(body: dict) -> None:
    _publish(MIME_RESULT, {"protocol": PROTOCOL, "version": _version(), **body})


def _ok(result: dict) -> None:
    _reply({"ok": True, "result": result})


def _fail(message: str, reason: str, check: str | None = None) -> None:
    _reply({"ok": False, "error": {"message": message, "reason": reason, "check": check}})


def _numpy_missing(e: BaseException) -> bool:
    """``e`` says this kernel has no usable numpy: torch's ``.numpy()`` raises "Numpy is not
    available" when torch was imported without it, ``import numpy`` an ImportError."""
    if isinstance(e, ImportError):
        return (e.name or "").partition(".")[0] == "numpy"
    return isinstance(e, RuntimeError) and "Numpy is not available" in str(e)


def _fail_numpy(what: str, safe: str) -> None:
    import sys

    _fail(
        f"the {what} needs numpy, which this kernel's Python ({sys.executable}) cannot use: "
        f"jupyter_gpu_pause writes and reads torch tensors through it. {safe} Install numpy "
        "in that environment (pip install numpy; installing jupyter_gpu_pause there brings "
        "it) and restart the kernel: torch looks for numpy once, when it is imported",
        "numpy-missing",
    )


def call_parent() -> None:
    """Run the request in the metadata of the execute_request running this; always publishes
    exactly one result."""
    try:
        request = _shell().kernel.get_parent()["metadata"][REQUEST_KEY]
        protocol, func, params = request["protocol"], request["func"], request["params"]
    except Exception as e:
        return _fail(f"the agent could not read the server's request ({e!r})", "agent-protocol")
    if protocol != PROTOCOL:
        return _fail(
            f"the kernel's environment has jupyter_gpu_pause {_version()} (agent protocol "
            f"{PROTOCOL}) but the server speaks protocol {protocol!r}; install the server's "
            "version of jupyter_gpu_pause in the kernel's environment",
            "agent-version",
        )
    entry = {
        "capture": capture,
        "restore": restore,
        "check": check,
        "warm": warm,
        "gpu": gpu,
        "usage": usage,
        "track": track,
        "rebuild": rebuild,
        "finish": finish,
        "unguard": unguard,
    }.get(func)
    if entry is None:
        return _fail(f"the agent has no function {func!r}", "agent-protocol")
    try:  # before any cell runs: what is registered to run at exit from now on is the user's
        watch_exit(_shell())
    except Exception:  # no baseline: finish then says a kill is not safe
        pass
    try:
        cells.install(_shell())  # from now on every cell a person runs is recorded
    except Exception:  # the log is a help for later; it never stands in a request's way
        pass
    try:  # what the user changes of the process from now on is what a checkpoint carries
        ambient.watch()
    except Exception:
        pass
    try:
        entry(params)
    except Exception as e:  # never leave the server waiting for an answer
        _fail(f"{func} failed: {type(e).__name__}: {e}", "agent-error")


def unguard(params: NoArgs) -> None:
    """The kernel runs again (resumed in place, or never suspended): cells run again."""
    shell = _shell()
    was = guard.installed(shell)
    guard.remove(shell)
    _ok({"guarded": was})


def _store(params: CaptureArgs | RestoreArgs) -> Store | SpoolStore:
    """The store the server named, with its per-request timeout; or, where this kernel cannot
    write the store itself, the server's spool folder (``store/spool.py``)."""
    spool = params.get("spool")
    if spool and spool.get("channel"):  # parts as answers to input requests, on this thread
        return ChannelStore(_shell().kernel.raw_input, spool.get("damaged"))  # type: ignore[arg-type]
    if spool:
        return SpoolStore(spool["folder"], spool.get("damaged"))  # type: ignore[arg-type]
    timeout = float(params.get("store_timeout") or DEFAULT_STORE_TIMEOUT)
    return Store(params["store_url"], params.get("store_options") or {}, timeout=timeout)


def capture(params: CaptureArgs) -> None:
    """Run on_pause hooks, plan, check the size limit, write blobs; publish the result.

    With ``suspend`` (the server suspends this kernel in place): every GPU tensor is copied to
    host memory and the test-restore's verdict awaited first; then the progress phase
    ``staged`` tells the server it may suspend the process's CUDA state, and the blobs are
    written from the host copies alone, with no CUDA call (they would block until resumed)."""
    try:
        for fn in list(REGISTRY.on_pause):
            fn()
        mode = params.get("capture", DEFAULT_CAPTURE)
        max_bytes = int(params.get("max_bytes") or DEFAULT_MAX_BYTES)
        shell = _shell()
        plan = make_plan(shell.user_ns, shell.user_ns_hidden, *plan_args(mode))
        plan.cells = rerun.log_bytes(shell)
        if params.get("ambient", DEFAULT_AMBIENT):
            plan.ambient, plan.ambient_report = ambient.capture()
        _check_size(plan, max_bytes)
        # the test-restore runs in its child while this process writes the blobs
        trial = start_trial(
            plan,
            shell.user_ns,
            shell.user_ns_hidden,
            enabled=params.get("test_restore", DEFAULT_TEST_RESTORE),
        )
        # the size is known before the first byte is written (GPU staging, hashing): say it
        progress = _Progress({"packages": plan.packages})
        progress("capturing", 0, plan.total_bytes)
        store = _store(params)
        cid = params["checkpoint_id"]

        def write(plan, host=None):
            return write_plan(
                plan,
                store,
                # the server starts a warm kernel importing these while this pause writes
                progress=progress,
                verify=params.get("verify", DEFAULT_VERIFY),
                # GC must not delete a blob this capture decides to reuse (store/lease.py);
                # a spool's blobs are the server's to declare, once it has named them
                before_reuse=None
                if isinstance(store, SpoolStore)
                else lambda hashes: declare_intent(store, cid, hashes),
                host=host,
            )

        def replan():  # rare: plan again without what does not restore
            again = verified(shell, mode, exclude=verdict.own_failures())
            again.cells = rerun.log_bytes(shell)
            again.ambient, again.ambient_report = plan.ambient, plan.ambient_report
            _check_size(again, max_bytes)
            return again

        if params.get("suspend"):
            try:
                host = host_copies(plan.refs.storages)
                verdict = trial.verdict()
            except BaseException:
                trial.abandon()
                raise
            if verdict.failed:
                plan = replan()
                host = host_copies(plan.refs.storages, host)
            else:
                plan.unverified = verdict.unverified
            host_bytes = sum(int(a.nbytes) for a in host.values())
            # from here the server may suspend the kernel: no cell of a person's runs until
            # the resume in place lifts the guard (``unguard``)
            guard.install(shell)
            _publish(
                MIME_PROGRESS,
                {
                    "phase": "staged",
                    "done_bytes": 0,
                    "total_bytes": plan.total_bytes,
                    "host_bytes": host_bytes,
                },
            )
            result = write(plan, host)
        else:
            try:
                result = write(plan)
            except BaseException:  # a store error, the server cancelling: no need of its answer
                trial.abandon()
                raise
            verdict = trial.verdict()
            if verdict.failed:  # write what restores
                plan = replan()
                result = write(plan)
            else:
                plan.unverified = verdict.unverified
        result["kernel"], result["origin"] = environment()
        # what a warm kernel imports before this checkpoint's restore (manifest texts are flat)
        result["kernel"]["packages"] = ",".join(plan.packages)[:MAX_TEXT]
        result["registered"] = registered()
        result["unverified"] = plan.unverified
        if plan.ambient_report is not None:  # what capturing the process state cost
            result["ambient_seconds"] = plan.ambient_report["seconds"]
    except CaptureError as e:
        _fail(str(e), e.reason)
    except StoreError as e:
        _fail(f"the store could not be written: {e}", "store")
    except Exception as e:  # a hook or an object misbehaved: report it, change nothing
        if _numpy_missing(e):
            return _fail_numpy("pause", "Nothing was changed: the kernel runs on as it was.")
        _fail(f"capture failed: {type(e).__name__}: {e}", "agent-error")
    else:
        _ok(result)


def _check_size(plan, limit: int) -> None:
    if limit and plan.total_bytes > limit:
        raise CaptureError(
            f"the checkpoint would be {plan.total_bytes} bytes, above the limit of {limit} "
            "bytes set by the administrator (max_checkpoint_bytes)",
            "too-large",
        )


def restore(params: RestoreArgs) -> None:
    """Check all blobs, rebuild objects into the namespace, run on_restore hooks; publish report."""
    doc = params["manifest"]
    cid = doc.get("checkpoint_id")
    if params.get("only_if_unused") and _cells_run():
        # the server took this kernel as one that had run nothing (JupyterLab's, opened on a
        # paused notebook); a cell ran since: its variables are the user's now
        return _fail(
            "code was run in the notebook's new kernel as the resume began; nothing was "
            "restored and that kernel's variables are untouched. Resume again to choose "
            "whether to restore into it",
            "kernel-used",
        )
    try:
        _become(params.get("environ") or {}, params.get("cwd"))
        store = _store(params)
        bad: dict = {}
        device = params.get("device", DEFAULT_DEVICE)  # GPU tensors go straight to the device
        blobs = load_blobs(doc, store, progress=_Progress(), bad=bad, device=device)
        if doc["pickle"]["blob"] in bad:  # no object can come from it: refuse it whole
            raise bad[doc["pickle"]["blob"]]
        around = _ambient(doc, blobs, bad, params)
        if around is not None:  # import paths, environment, folder: before any unpickling
            around.early()

        def fallbacks():
            """Older checkpoints, read only when an object needs one."""
            for older in params.get("fallbacks") or []:
                older_bad = {h: e for h, e in bad.items() if h in older["blobs"]}
                yield (
                    older,
                    load_blobs(older, store, bad=older_bad, have=blobs, device=device),
                    older_bad,
                )

        report = restore_objects(doc, blobs, _shell().user_ns, device, bad, fallbacks())
        # settings, random state and IPython's own, before any hook or cell of the user's runs
        report["ambient"] = around.rest() if around is not None else None
        older_log, log_problem = rerun.load_log(doc, blobs, bad)
    except IntegrityError as e:
        return _fail(f"checkpoint {cid} was refused: {e}", "integrity", e.check)
    except RestoreError as e:
        return _fail(str(e), e.reason)
    except StoreError as e:
        return _fail(f"the store could not be read: {e}", "store")
    except Exception as e:
        if _numpy_missing(e):
            return _fail_numpy("resume", "The checkpoint is safe.")
        return _fail(f"restore failed: {type(e).__name__}: {e}", "agent-error")
    hooks = report.pop("hooks") or {}
    register(*report["registered"])
    REGISTRY.on_pause[:] = hooks.get("on_pause", [])
    REGISTRY.on_restore[:] = hooks.get("on_restore", [])
    for fn in REGISTRY.on_restore:
        try:
            fn()
        except Exception as e:
            report["failed"].append(
                {"name": f"on_restore hook {getattr(fn, '__name__', fn)!s}", "reason": repr(e)}
            )
    shell = _shell()
    if params.get("rebuild", DEFAULT_REBUILD) == "never":
        missing = []  # the log is still joined, so a later pause keeps it
    else:
        missing = rerun.lost_names(report, shell.user_ns)
    no_rerun = params.get("no_rerun_ids") or []
    report["rebuild"] = rerun.offer(shell, missing, older_log, log_problem, no_rerun)
    REGISTRY.last_restore = report
    _ok(report)


def _ambient(doc: dict, blobs: dict, bad: dict, params: RestoreArgs) -> ambient.Restoring | None:
    """The checkpoint's ambient state, ready to restore; None when the setting is off or the
    checkpoint has none (written before it existed, or with the setting off)."""
    meta = doc.get("ambient")
    if not params.get("ambient", DEFAULT_AMBIENT) or not meta:
        return None
    no_rerun_ids = params.get("no_rerun_ids") or []
    if meta["blob"] in bad:
        problem = f"its blob failed its check: {bad[meta['blob']]}"
        return ambient.Restoring(None, problem, no_rerun_ids=no_rerun_ids)
    return ambient.Restoring(bytes(blobs[meta["blob"]]), no_rerun_ids=no_rerun_ids)


def track(params: NoArgs) -> None:
    """Start the cell log now (``call_parent`` installs it): the server asks as soon as it sees
    a new kernel, so each cell's run time is known from the first one on."""
    _ok({"cells": len(cells.install(_shell()).cells)})


def finish(params: NoArgs) -> None:
    """Just before the server kills this kernel (its checkpoint is committed): whether the kill
    loses anything a graceful exit would keep, and if not, what of that exit matters done now
    (``finish.py``)."""
    _ok(prepare_exit(_shell()))


def rebuild(params: RebuildArgs) -> None:
    """Re-run the cells that make the names the resume did not bring back (``rerun.run``),
    publishing progress per cell."""

    def progress(done: int, total: int) -> None:
        _publish(
            MIME_PROGRESS,
            {"phase": "rebuilding", "done_bytes": done, "total_bytes": total, "unit": "cells"},
        )

    shell = _shell()
    try:
        result = rerun.run(
            shell,
            params.get("names") or None,
            bool(params.get("confirm")),
            progress,
            params.get("no_rerun_ids"),
        )
    except Exception as e:
        return _fail(f"rebuild failed: {type(e).__name__}: {e}", "agent-error")
    if REGISTRY.last_restore is not None:
        REGISTRY.last_restore["rebuild"] = result["offer"]
    _ok(result)


def _cells_run() -> int:
    """Cells a person ran in this kernel: IPython counts every execution stored in history
    (a notebook's cells); the server's silent requests, ours included, are not counted, nor
    the cells of the kernel before a resume (whose counter the restore carried on)."""
    shell = _shell()
    return shell.execution_count - 1 - getattr(shell, ambient.COUNTED, 0)


def usage(params: NoArgs) -> None:
    """Whether this kernel has run code of a person's: a resume restores unasked only into a
    kernel that has run none."""
    _ok({"cells_run": _cells_run()})


def _become(environ: dict, cwd: str | None) -> None:
    """A warm kernel (``server/kernels/spares.py``) was started before anyone knew which
    session it would restore: take on that session's environment and folder before anything
    reads them (CUDA reads ``CUDA_VISIBLE_DEVICES`` when it initialises, which the restore does
    later)."""
    import os

    os.environ.update({str(k): str(v) for k, v in environ.items()})
    ambient.given(environ)
    if cwd:
        os.chdir(cwd)


def warm(params: WarmArgs) -> None:
    """Import what a restore will need (this module is imported already), so that a kernel
    kept warm restores without paying for its imports. A module that is not installed is
    skipped: the restore will say what it lacks."""
    import importlib

    imported = []
    for name in params.get("modules") or []:
        if not isinstance(name, str) or not name.isidentifier():
            continue  # top-level package names only
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        imported.append(name)
    # Importing torch or pandas leaves a full garbage collection due; run it now, while this
    # kernel waits for a resume, rather than in the middle of that resume's unpickling.
    import gc

    gc.collect()
    _ok({"imported": imported})


def check(params: CheckArgs) -> None:
    """The dry run, for the server: published as a result (idle warnings, the check endpoint)."""
    try:
        report = dict(
            dry_run(
                _shell(),
                params.get("capture", DEFAULT_CAPTURE),
                params.get("test_restore", DEFAULT_TEST_RESTORE),
                params.get("ambient", DEFAULT_AMBIENT),
            )
        )
        report["registered"] = registered()
    except Exception as e:
        return _fail(f"check failed: {type(e).__name__}: {e}", "agent-error")
    _ok(report)


def gpu(params: NoArgs) -> None:
    """What this kernel holds on its GPUs as torch sees it, for a server that cannot see the
    process through NVML (a kernel behind a gateway): bytes reserved by torch's caching
    allocator and the devices' UUIDs. Never imports torch or initialises CUDA."""
    import sys

    torch = sys.modules.get("torch")
    devices, reserved = [], 0
    if torch is not None and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            held = int(torch.cuda.memory_reserved(i))
            if held:
                reserved += held
                try:
                    devices.append(f"GPU-{torch.cuda.get_device_properties(i).uuid}")
                except Exception:  # an older torch: no uuid in the properties
                    devices.append(f"cuda:{i}")
    _ok({"devices": devices, "memory_bytes": reserved})
