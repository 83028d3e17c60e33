"""The end-to-end suite's server: ``server_process.JupyterServer`` plus what the suite times
through it, each operation as a user meets it (a click, then until the session says so, or until a
cell answers) next to what the server's own event says about it.

* ``call`` runs one function of ``baselines.py`` or ``states.py`` inside a kernel and returns its
  dict, leaving nothing in the notebook's namespace but what the function put there.
* ``pause_timed``/``resume_timed``: POST, then the session polled every 20 ms; a resume ends when
  the cell ``1+1`` answers through the new kernel (the first cell runs). Their records carry the
  event's phase ``timings`` (docs/metrics.md; a phase that did not run is 0).
* ``bare_kernel``: a kernel of the same kernelspec started through ``api/kernels`` until ``1+1``
  answers: the floor of any resume, which must start a kernel too.
* ``kernel_torch_load``: the same, with ``torch.load`` of a file before the first cell: how a
  notebook comes back without us.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import time
from pathlib import Path

from jupyter_client import BlockingKernelClient
from procs import PageCache, PeakWatch
from server_process import RUNNING, SETTLED, WAIT, JupyterServer, ServerError

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1024 * 1024
GIB = 1024 * MIB
PAUSE_PHASES = ("wait", "capture", "write", "verify", "commit", "shutdown")
RESUME_PHASES = ("verify", "capacity", "start", "read", "unpickle", "attach")
MARK = "@@bench@@"
# gc_grace_seconds = 0: the suite deletes each notebook's checkpoints and collects their blobs at
# once, so the store never holds more than one state. No checkpoint when the server stops.
CONFIG = 'c.GpuPauseApp.gc_grace_seconds = 0\nc.GpuPauseApp.shutdown_checkpoint = "none"\n'
CALL = """
def _bench_call():
    import json, sys
    if {here!r} not in sys.path:
        sys.path.insert(0, {here!r})
    import {module}
    return json.dumps({module}.{fn}(globals(), *{args!r}))
print({mark!r} + _bench_call())
del _bench_call
"""


def budget(nbytes: int) -> float:
    """Seconds to wait for an operation on ``nbytes`` (generous: 2-core shared VMs)."""
    return WAIT + 60.0 * nbytes / GIB


class SuiteServer(JupyterServer):
    """One server for the whole suite; ``cache`` drops the page cache before cold steps."""

    def __init__(self, tmp: Path, cache: PageCache, quiet: float = 1.0):
        super().__init__(tmp, CONFIG, "suite")
        self.cache, self.quiet = cache, quiet
        self.files = tmp / "files"  # the baselines' files, beside the store (same file system)
        self.files.mkdir(parents=True, exist_ok=True)

    def warm_up(self) -> None:
        """One kernel that imports what kernels here import, so no measured step is the first
        to read the libraries from disk."""
        kid = self.ok("POST", "api/kernels", {"name": "python3"}, expect=201)["id"]
        self.call(kid, "states", "fresh_rss")
        self.ok("DELETE", f"api/kernels/{kid}", expect=204)

    def settle(self) -> None:
        """Wait until every kernel the server runs has been idle for ``quiet`` seconds (0: do
        not wait). Each timed step starts on a quiet machine: after a pause the server
        prepares a warm kernel for the next resume (``GpuPauseApp.warm_kernels``), which
        imports torch for a few seconds; a person coming back later finds it ready, and a
        step timed meanwhile would share the 2 cores with it."""
        if self.quiet <= 0:
            return
        since: list[float] = []

        def look():
            # jupyter_server answers 500 while a kernel is starting (its model has no
            # last_activity yet): not quiet either.
            code, kernels = self.api("GET", "api/kernels")
            if code != 200 or any(k.get("execution_state") != "idle" for k in kernels):
                since.clear()
                return False
            since[:] = since or [time.monotonic()]
            return time.monotonic() - since[0] >= self.quiet

        self.until(look, "quiet (every kernel idle)", WAIT)

    # -- cells ---------------------------------------------------------------------------------
    def timed_call(self, kid: str, module: str, fn: str, *args, timeout: float = WAIT) -> dict:
        """``call`` of a function that times itself, once the machine is quiet."""
        self.settle()
        return self.call(kid, module, fn, *args, timeout=timeout)

    def timed_cell(self, kid: str, code: str, timeout: float = WAIT) -> float:
        """Seconds from sending ``code`` as a cell until its reply, once the machine is quiet:
        a cell's work plus one trip to the kernel and back. The modules it uses should have
        been imported by an earlier ``call``, so that it times its own work only."""
        self.settle()
        t = time.perf_counter()
        self.answer(kid, code, timeout)
        return time.perf_counter() - t

    def call(self, kid: str, module: str, fn: str, *args, timeout: float = WAIT) -> dict:
        """``module.fn(namespace, *args)`` inside kernel ``kid``; its dict."""
        code = CALL.format(here=HERE, module=module, fn=fn, args=args, mark=MARK)
        out = self.run(kid, code, timeout=timeout)
        line = next((x for x in out.splitlines() if x.startswith(MARK)), None)
        if line is None:
            raise ServerError(f"{module}.{fn} printed no result: {out[-2000:]}")
        return json.loads(line[len(MARK) :])

    def answer(self, kid: str, code: str = "1+1", timeout: float = WAIT) -> None:
        """Run one cell and wait for its reply on the shell channel only, as a notebook that is
        already connected waits for it. ``run`` first waits for the kernel to answer
        ``kernel_info`` and for IOPub to connect (in 0.2 s polls), which would add its own
        fraction of a second to every "first cell" timed here."""
        c = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kid}.json"))
        c.load_connection_file()
        c.start_channels(iopub=False, stdin=False, hb=False, control=False)
        try:
            msg_id = c.execute(code, store_history=False)  # the requests queue until connected
            end = time.monotonic() + timeout
            while True:
                try:
                    reply = c.get_shell_msg(timeout=max(end - time.monotonic(), 0.01))
                except queue.Empty:
                    raise ServerError(
                        f"kernel {kid}: no reply to a cell in {timeout:g} s"
                    ) from None
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
        finally:
            c.stop_channels()
        if reply["content"]["status"] != "ok":
            raise ServerError(f"kernel {kid}: the cell failed: {reply['content']}")

    def open(self, path: str, kernel: str = "python3") -> tuple[str, str]:
        """A new notebook session with a kernel of ``kernel``; ``(session id, kernel id)``."""
        s = self.open_notebook(path, kernel)
        return s["id"], s["kernel_id"]

    # -- operations ----------------------------------------------------------------------------
    def reach(self, sid: str, goal: tuple, timeout: float) -> dict:
        """The session once its state is in ``goal``; another settled state is an error."""

        def look():
            s = self.session(sid)
            if s["state"] in goal:
                return s
            if s["state"] in SETTLED:
                raise ServerError(f"the session ended {s['state']}: {s.get('error') or s}")
            return None

        return self.until(look, f"{sid} {'/'.join(goal)}", timeout, every=0.02)

    def count(self, sid: str, kind: str) -> int:
        return sum(e["type"] == kind for e in self.events(sid))

    def event(self, sid: str, kind: str, before: int) -> dict:
        """The detail of the session's newest ``kind`` event, once there are more than
        ``before`` of them (the event is written just after the state changes)."""

        def look():
            evs = [e for e in self.events(sid) if e["type"] == kind]
            return evs[-1]["detail"] if len(evs) > before else None

        return self.until(look, f"a {kind} event of {sid}", 30)

    def pause_timed(self, sid: str, pid: int, prefix: str, timeout: float = WAIT) -> dict:
        """POST pause → ``paused``; the event's timings; the kernel's peak RSS over its RSS
        before the pause (sampled until the kernel exits)."""
        before = self.count(sid, "paused")
        self.settle()
        watch = PeakWatch(pid)
        t = time.perf_counter()
        self.ok("POST", f"gpu-pause/api/sessions/{sid}/pause", expect=202)
        self.reach(sid, ("paused",), timeout)
        took = time.perf_counter() - t
        peak = watch.stop()
        d = self.event(sid, "paused", before)
        out = {f"{prefix}_s": took, **phases(prefix, d, PAUSE_PHASES)}
        out[f"{prefix}.gpu_released_s"] = d.get("gpu_released_seconds")
        out[f"{prefix}.new_bytes"] = d.get("new_bytes")
        out[f"{prefix}.peak_extra_mib"] = (peak - watch.base) / MIB
        return out

    def resume_timed(self, sid: str, prefix: str, timeout: float = WAIT) -> tuple[dict, str]:
        """POST resume → running → the cell ``1+1`` answers; the record and the new kernel."""
        before = self.count(sid, "resumed")
        self.settle()
        t = time.perf_counter()
        self.ask_resume(sid)
        s = self.reach(sid, RUNNING, timeout)
        running = time.perf_counter() - t
        self.answer(s["kernel_id"], timeout=timeout)
        took = time.perf_counter() - t
        failed = (s.get("restore") or {}).get("failed")
        if failed:
            raise ServerError(f"the resume of {s['path']} lost objects: {failed}")
        d = self.event(sid, "resumed", before)
        out = {f"{prefix}_s": took, f"{prefix}.running_s": running}
        return {**out, **phases(prefix, d, RESUME_PHASES)}, s["kernel_id"]

    def forget(self, sid: str) -> None:
        """Delete the session and its checkpoints, then collect their blobs: the next state
        starts from an empty store."""
        self.ok("DELETE", f"gpu-pause/api/sessions/{sid}?delete_checkpoints=true", expect=204)
        self.ok("POST", "gpu-pause/api/store/gc", {"dry_run": False})

    # -- kernels without us --------------------------------------------------------------------
    def _kernel(self) -> str:
        return self.ok("POST", "api/kernels", {"name": "python3"}, expect=201)["id"]

    def bare_kernel(self) -> dict:
        """A kernel start until ``1+1`` answers; then (untimed) its RSS with the imports a
        resume makes, which a resumed kernel's peak is measured over."""
        self.settle()
        t = time.perf_counter()
        kid = self._kernel()
        self.answer(kid)
        took = time.perf_counter() - t
        mem = self.call(kid, "states", "fresh_rss")
        self.ok("DELETE", f"api/kernels/{kid}", expect=204)
        return {"bare_start_s": took, "fresh_rss_mib": mem["rss"] / MIB}

    def kernel_torch_load(self, path: Path, nbytes: int) -> dict:
        """Cold: a kernel start, ``torch.load`` of ``path`` in a cell, until the next cell
        answers; and that kernel's peak RSS."""
        self.cache.drop()
        self.settle()
        t = time.perf_counter()
        kid = self._kernel()
        self.answer(kid, f"import torch\nsd = torch.load({str(path)!r})", budget(nbytes))
        self.answer(kid)
        took = time.perf_counter() - t
        mem = self.call(kid, "states", "memory")
        self.ok("DELETE", f"api/kernels/{kid}", expect=204)
        return {"kernel_torch_load_s": took, "kernel_torch_load.peak_mib": mem["hwm"] / MIB}


def phases(prefix: str, detail: dict, names: tuple) -> dict:
    """``prefix.<phase>`` seconds of an event (0 for a phase that did not run), and its
    ``duration_seconds``."""
    timings = detail.get("timings") or {}
    out = {f"{prefix}.{k}": float(timings.get(k) or 0.0) for k in names}
    out[f"{prefix}.duration_s"] = detail.get("duration_seconds")
    return out


def server_with(setting: str, value) -> SuiteServer:
    """A started, warmed-up server of this tree with ``c.GpuPauseApp.<setting> = value`` (and
    no warm kernels), in a folder of its own: one side of a benchmark that compares a setting
    on and off."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{setting}-{value}-"))
    s = SuiteServer(tmp, PageCache(False))
    s.label = f"{setting}={value}"
    (tmp / "config" / "jupyter_server_config.py").write_text(
        CONFIG + f"c.GpuPauseApp.{setting} = {value!r}\nc.GpuPauseApp.warm_kernels = False\n"
    )
    s.start()
    s.warm_up()
    return s
