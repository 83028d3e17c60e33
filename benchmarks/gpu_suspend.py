"""gpu_device_check's ``suspend`` check (issue #26): suspend in place on a real GPU, through
real ``jupyter server`` processes, with ``bigstate``'s 6 GB fp16 model (``gpu_bigstate.py``).

It measures first, in the same run, the copies and the store's disk (``bigstate``'s probes).
Then three servers, one after the other (NVML's base is GPU 0 before each one's notebook):

A. ``suspend = "auto"``:
   1. ``GET capacity``'s ``tier``: its name, reason and the driver's version, i.e. whether the
      CUDA checkpoint API is there. Any tier but ``suspend``: it says so and runs only C.
   2. The pause: NVML (sampled every 50 ms) sees the kernel's memory gone <= 1.5 s after the
      click, next to the ``suspended`` event's ``gpu_released_seconds``; the session is
      ``suspended``, then ``paused`` (events ``suspended`` then ``paused``), and ``jupyter
      gpu-pause verify`` finds the checkpoint whole (signature, every blob's hash).
   4. The resume at once, from that checkpoint in the page cache: <= 3 s until a cell sees the
      model on cuda, with the same checksum (``bigstate``'s ``timed_resume``).
B. ``keep_suspended_seconds = 120``, the store on a tmpfs of its own (needs root):
   5. The store made read-only *before* the click. Deterministic: the agent reports
      ``staged`` and the server suspends before the first byte is written, so the same write
      fails after the same release; remounting once ``suspended`` shows would race a write
      already under way (and ``mount -o remount,ro`` is refused while a file is open for
      writing). The session stays ``suspended`` with "checkpoint not written"; resumed in
      place, the same kernel has every variable, the tensors on cuda with the same checksums.
   3. The store writable again: the pause writes its checkpoint and keeps the kernel
      (``suspended``, checkpoint ``written``); resumed in place <= 1 s from POST resume until
      the session runs and a probe cell answers with the model's checksum on cuda, unchanged.
C. ``suspend = "never"``:
   6. GPU released <= the checkpoint's bytes at the disk's measured write rate + 0.5 s.

A wrong state fails the run (exit 1), at once, except a pause that was not suspended: C runs
first. A missed speed target prints MISS and fails the run only with ``--strict-targets``.
``--cpu-rehearsal``: the model on the CPU, NVML skipped, the driver the declared fake
(``tests.fakes.FakeCudaCheckpoint``, the repository root on the servers' PYTHONPATH), every
``python3`` notebook a GPU session; its targets are printed, never enforced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import gpu_bigstate as big
import psutil
from gpu_device_check import GIB, MIB, Sampler, check, held_text, step
from server_process import RUNNING, JupyterServer

RELEASE_TARGET = 1.5  # seconds from the click until NVML sees the suspended kernel's memory gone
IN_PLACE_TARGET = 1.0  # seconds from POST resume until a probe cell answers, in place
NEVER_SLACK = 0.5  # seconds over the durable write at the disk's rate, without the tier
KEEP_SECONDS = 120
POLL = 0.025  # seconds between two looks at a session while it changes
REPO = Path(__file__).resolve().parents[1]

# gpu_kernelspecs: a GPU session whether or not NVML can see the kernel's pid (a container)
SERVER = (
    big.CONFIG
    + """
c.GpuPauseApp.suspend = {suspend!r}
c.GpuPauseApp.keep_suspended_seconds = {keep!r}
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
"""
)
FAKE_DRIVER = 'c.GpuPauseApp.cuda_checkpoint_class = "tests.fakes.FakeCudaCheckpoint"\n'

# Beside the model: a CUDA tensor and plain values, all of which must come back
OTHERS = """
note = "keep me"
steps = 12345
buf = torch.arange(1 << 20, dtype=torch.float32, device={device!r})
"""

# The notebook's variables and their values (the model's checksum is bigstate's PROBE)
VARIABLES = """
def _variables():
    import json, types
    hidden = get_ipython().user_ns_hidden
    names = sorted(k for k, v in globals().items() if not k.startswith("_") and k not in hidden
                   and not isinstance(v, types.ModuleType))
    return json.dumps({"names": names, "note": note, "steps": steps,
                       "buf": [str(buf.device), float(buf.sum(dtype=torch.float64))]})
print(_variables())
del _variables
"""


@dataclass
class Notebook:
    sid: str
    kernel_id: str
    ref: dict  # bigstate's PROBE's answer before the pause: device, pid, checksum
    variables: dict  # VARIABLES' answer before the pause
    base: int  # GPU 0's used bytes before the kernel held anything
    visible: bool  # NVML lists the kernel's pid (not in a PID namespace of its own)


class Tmpfs:
    """A tmpfs of its own at the store's folder, to make read-only under a running server
    (root; as tests/test_faults.py's fixture)."""

    def __init__(self, path: Path):
        self.path, self.mounted, self.why = path, False, ""

    def mount(self, size: int) -> bool:
        try:
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.path)],
                capture_output=True,
                text=True,
            )
            self.mounted, self.why = r.returncode == 0, r.stderr.strip()
        except OSError as e:
            self.why = str(e)
        return self.mounted

    def remount(self, mode: str) -> None:
        r = subprocess.run(
            ["mount", "-o", f"remount,{mode}", str(self.path)], capture_output=True, text=True
        )
        check(f"store remounted {mode}", r.returncode == 0, r.stderr.strip())

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


class SuspendCheck:
    def __init__(self, n: int, layers: int, nv, copies, disk, root: Path, rehearsal: bool):
        self.n, self.layers, self.nv, self.copies, self.disk = n, layers, nv, copies, disk
        self.root, self.rehearsal = root, rehearsal
        self.device = "cpu" if rehearsal else "cuda"
        self.fake = rehearsal and bool(FAKE_DRIVER)  # the driver is tests.fakes'
        self.probe = big.PROBE.replace("{device!r}", repr(self.device))
        self.slow = 120 + n / 50e6  # a pause or a resume: 50 MB/s at the very least
        self.met = True  # every speed target met
        self.failed = False  # a check failed that let the run go on (see must)

    # -- helpers -------------------------------------------------------------------------------
    def must(self, label: str, ok: bool, detail: str = "") -> bool:
        """A check whose failure still lets the parts that do not depend on it run (the
        device's minutes are few): FAIL is printed now, the exit status is 1 at the end."""
        print(f"{'OK  ' if ok else 'FAIL'} {label} {detail}", flush=True)
        self.failed = self.failed or not ok
        return ok

    def target(self, label: str, seconds: float | None, limit: float, detail: str) -> None:
        ok = seconds is not None and seconds <= limit
        self.met = self.met and ok
        shown = f"{seconds:.2f} s" if seconds is not None else "not measured"
        tail = " (rehearsal: not enforced)" if self.rehearsal else ""
        print(
            f"{'PASS' if ok else 'MISS'} {label}: {shown} (target <= {limit:.2f} s; {detail})"
            f"{tail}",
            flush=True,
        )

    def server(self, name: str, suspend: str, keep: float, store_url: str = ""):
        config = SERVER.format(suspend=suspend, keep=keep)
        if self.fake:
            config += FAKE_DRIVER
        server = JupyterServer(self.root / name, config, label=name, store_url=store_url)
        if self.rehearsal:  # tests.fakes, importable by the server
            server.env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            )
        server.start()
        return server

    def notebook(self, server, path: str) -> Notebook:
        base = self.nv.memory(0)[1] if self.nv else 0
        s = server.open_notebook(path)
        began = time.monotonic()
        code = big.MODEL.format(width=big.WIDTH, layers=self.layers, device=self.device)
        server.run(s["kernel_id"], code + OTHERS.format(device=self.device), timeout=self.slow)
        ref = json.loads(server.run(s["kernel_id"], self.probe, timeout=self.slow))
        check(
            f"{path}: the model is on {self.device}",
            ref["on_device"] and ref["params"] * 2 == self.n,
            f"{ref['params']} parameters in {time.monotonic() - began:.1f} s",
        )
        variables = json.loads(server.run(s["kernel_id"], VARIABLES))
        visible = False
        if self.nv:
            step(held_text(self.nv, ref["pid"], base)[1])
            visible = ref["pid"] in self.nv.procs(0)
        return Notebook(s["id"], s["kernel_id"], ref, variables, base, visible)

    def pause(self, server, nb: Notebook) -> tuple[dict, dict, float | None]:
        """POST pause; the session looked at every 25 ms until the pause has an outcome.
        Returns the session then, when each state was first seen (seconds from the click),
        and when NVML saw the kernel's memory gone (None without NVML)."""
        sampler = Sampler(self.nv) if self.nv else None
        if sampler:
            sampler.start()
        asked, began = time.time(), time.monotonic()
        seen: dict[str, float] = {}
        try:
            server.ok("POST", f"gpu-pause/api/sessions/{nb.sid}/pause", expect=202)
            while True:
                s = server.session(nb.sid)
                seen.setdefault(s["state"], round(time.monotonic() - began, 3))
                if _outcome(s):
                    break
                if time.monotonic() - began > self.slow:
                    check("the pause has an outcome", False, f"{s['state']}: {s['message']}")
                time.sleep(POLL)
        finally:
            if sampler:
                sampler.stop()
        step("states seen (s after the click): " + ", ".join(f"{k} {v}" for k, v in seen.items()))
        if sampler is None:
            return s, seen, None
        nvml_s = big.released_at(sampler.samples, asked, nb.base, nb.ref["pid"], nb.visible)
        check(
            "NVML: the kernel's GPU memory is released",
            nvml_s is not None,
            f"{nvml_s:.2f} s after the click" if nvml_s is not None else "never seen",
        )
        return s, seen, nvml_s

    def in_place(self, server, nb: Notebook, what: str) -> float:
        """Resume in place; seconds from POST resume until the session runs and the probe
        cell answers (the model's checksum on the device), then every variable checked. The
        probe goes through a connection opened before the resume, as the notebook's page
        stays connected to its kernel, which is the same one."""
        client = server.connect(nb.kernel_id)  # a suspended kernel answers: it runs on the CPU
        try:
            asked = time.monotonic()
            server.ask_resume(nb.sid)
            back = server.until(
                lambda: _back(server.session(nb.sid)), "an outcome of the resume", self.slow, POLL
            )
            running = time.monotonic() - asked
            check(
                f"{what}: resumed in place, the same kernel",
                back["state"] in RUNNING and back["kernel_id"] == nb.kernel_id,
                f"{back['state']}: {back['message']}",
            )
            got = json.loads(server.run(nb.kernel_id, self.probe, self.slow, client))
            ttu = time.monotonic() - asked
        finally:
            client.stop_channels()
        check(
            f"{what}: the model on {self.device}, the same process, the same weights",
            got["on_device"] and got["pid"] == nb.ref["pid"] and got["sum"] == nb.ref["sum"],
            f"{got['device']}, pid {got['pid']}, checksum {got['sum']} (was {nb.ref['sum']}) "
            f"{ttu:.2f} s after POST resume",
        )
        variables = json.loads(server.run(nb.kernel_id, VARIABLES))
        check(f"{what}: every variable back", variables == nb.variables, json.dumps(variables))
        ev = big.last_event(server, nb.sid, "resumed")
        check(f"{what}: the resumed event says in place", ev.get("in_place") is True)
        timings = json.dumps(ev.get("timings"))
        step(
            f"resumed in place: the session ran {running:.2f} s after POST resume, the probe "
            f"answered at {ttu:.2f} s; the event: duration {ev.get('duration_seconds')} s, "
            f"{timings}"
        )
        if self.nv:
            step(held_text(self.nv, got["pid"], nb.base)[1])
        return ttu

    def released(self, server, nb: Notebook, nvml_s: float | None) -> tuple[float, str]:
        """The release time to judge (NVML's, else the ``suspended`` event's) and the text
        that puts the other measures beside it."""
        (sus,) = _events(server, nb.sid, "suspended")[-1:] or [{"detail": {}}]
        event_s = sus["detail"].get("gpu_released_seconds")
        copies_s = self.n / self.copies["d2h_pageable"]
        text = (
            f"{'NVML' if nvml_s is not None else 'the suspended event'}; the event says "
            f"{event_s} s; the agent's host copies alone (pageable D2H) take {copies_s:.2f} s"
        )
        return (nvml_s if nvml_s is not None else event_s), text

    # -- the parts -----------------------------------------------------------------------------
    def tier_and_durable(self) -> bool:
        """A: the tier; a pause suspended, then paused and verified; the resume from it.
        False when nothing was suspended (the tier not in force, or the driver refused the
        kernel): then only C runs."""
        server = self.server("auto", "auto", 0)
        try:
            tier = server.capacity()["tier"]
            api = "yes" if tier["name"] == "suspend" else "no"
            fake = " (the declared fake, tests.fakes.FakeCudaCheckpoint)" if self.fake else ""
            step(f"driver {tier['driver_version']}{fake}; CUDA checkpoint API: {api}")
            step(f"tier {tier['name']}: {tier['reason']}")
            if tier["name"] != "suspend":
                print(
                    f"SKIP the suspend tier is not in force ({tier['reason']}): only the "
                    "checkpoint tier's release is checked",
                    flush=True,
                )
                return False
            nb = self.notebook(server, "auto.ipynb")
            final, seen, nvml_s = self.pause(server, nb)
            check("paused", final["state"] == "paused", f"{final['state']}: {final['message']}")
            types = [e["type"] for e in server.events(nb.sid)]
            paused = big.last_event(server, nb.sid, "paused")
            suspended = self.must(
                "suspended, then paused (events)",
                _before(types, "suspended", "paused") and paused["suspended"] is True,
                f"{types}; not_suspended: {paused.get('not_suspended')}",
            )
            if suspended:
                released, text = self.released(server, nb, nvml_s)
                self.target(
                    "GPU released after the click, suspend tier",
                    released,
                    RELEASE_TARGET,
                    f"{text}; the API showed suspended at {seen.get('suspended')} s",
                )
            big.print_phases("pause under the suspend tier", self.n, paused, self.copies, self.disk)
            self.verify(server, paused["checkpoint_id"])
            ttu = big.timed_resume(
                server, nb.sid, self.device, self.probe, nb.ref, self.slow, RUNNING
            )
            resumed = big.last_event(server, nb.sid, "resumed")
            big.print_phases("resume from the checkpoint", self.n, resumed, self.copies, self.disk)
            self.target(
                "time to usable from the durable checkpoint (page cache)",
                ttu,
                big.TTU_TARGET,
                "POST resume until a cell sees the model",
            )
            if not suspended:
                print("SKIP B: nothing was suspended here", flush=True)
            return suspended
        finally:
            server.stop()
            shutil.rmtree(server.tmp, ignore_errors=True)  # its checkpoint: room for C's

    def verify(self, server, checkpoint_id: str) -> None:
        began = time.monotonic()
        cli = [sys.executable, "-m", "jupyter_gpu_pause.cli.app", "verify", "--json"]
        secret = ["--secret-file", str(server.tmp / "secret")]
        out = subprocess.run(
            [*cli, server.store_url, *secret],
            **dict(cwd=server.tmp, env=server.env, capture_output=True, text=True),
            timeout=self.slow,
        )
        took = time.monotonic() - began
        try:
            doc = json.loads(out.stdout)
        except ValueError:
            doc = {}
        mine = [c for c in doc.get("checkpoints", []) if c["checkpoint_id"] == checkpoint_id]
        check(
            "jupyter gpu-pause verify: the checkpoint is whole (signature, every blob's hash)",
            out.returncode == 0 and doc.get("deep") and len(mine) == 1 and mine[0]["ok"],
            f"{doc.get('blobs_checked')} blobs hashed in {took:.1f} s"
            if out.returncode == 0
            else f"exit {out.returncode}: {out.stdout[-1000:]} {out.stderr[-2000:]}",
        )

    def fault_and_kept(self) -> None:
        """B: a read-only store after the release loses nothing; a kept kernel resumes in place."""
        from jupyter_gpu_pause.units import size_text

        store = self.root / "tmpfs-store"
        store.mkdir()
        fs = Tmpfs(store)
        size = int(self.n * 1.1) + 512 * MIB
        if not fs.mount(size):
            print(
                f"SKIP store made read-only: cannot mount a tmpfs here ({fs.why}); run as "
                "root. Its store is a plain folder",
                flush=True,
            )
        else:
            step(f"store on a tmpfs of {size_text(size)} at {store}")
        server = None
        try:
            server = self.server("kept", "auto", KEEP_SECONDS, str(store))
            nb = self.notebook(server, "kept.ipynb")
            if fs.mounted:
                fs.remount("ro")
                final, _, nvml_s = self.pause(server, nb)
                err = final.get("error") or {}
                check(
                    "read-only store: the session stays suspended, checkpoint not written",
                    final["state"] == "suspended"
                    and "checkpoint not written" in (final["message"] or "")
                    and err.get("state_intact") is True
                    and (final["suspended"] or {}).get("checkpoint") == "failed",
                    f"{final['state']}: {final['message']}",
                )
                types = [e["type"] for e in server.events(nb.sid)]
                check(
                    "the GPU was released before the write failed (events)",
                    _before(types, "suspended", "pause_failed"),
                    str(types),
                )
                released, text = self.released(server, nb, nvml_s)
                step(
                    f"GPU released {released:.2f} s after the click with the store read-only "
                    f"({text})"
                )
                ttu = self.in_place(server, nb, "after the failed write")
                step(f"resume in place after the failed write: {ttu:.2f} s to usable")
                fs.remount("rw")
            final, seen, nvml_s = self.pause(server, nb)
            check(
                "kept: suspended, its checkpoint written, the kernel kept",
                final["state"] == "suspended"
                and (final["suspended"] or {}).get("checkpoint") == "written"
                and not final["error"],
                f"{final['state']}: {final['message']}",
            )
            released, text = self.released(server, nb, nvml_s)
            step(f"GPU released {released:.2f} s after the click ({text})")
            ttu = self.in_place(server, nb, "kept kernel")
            self.target(
                "time to usable resuming in place",
                ttu,
                IN_PLACE_TARGET,
                "POST resume until the session runs and the probe answers",
            )
        finally:
            if server is not None:
                server.stop()
            fs.close()

    def without_tier(self) -> None:
        """C: ``suspend = "never"``: the GPU is released once the checkpoint is durable."""
        server = self.server("never", "never", 0)
        try:
            tier = server.capacity()["tier"]
            check(
                "suspend = never: the checkpoint tier", tier["name"] == "checkpoint", tier["reason"]
            )
            nb = self.notebook(server, "never.ipynb")
            final, _, nvml_s = self.pause(server, nb)
            check("paused", final["state"] == "paused", f"{final['state']}: {final['message']}")
            ev = big.last_event(server, nb.sid, "paused")
            check(
                "not suspended (the paused event, no suspended event)",
                ev["suspended"] is False and not _events(server, nb.sid, "suspended"),
                str(ev.get("not_suspended")),
            )
            nbytes = ev.get("new_bytes") or ev["bytes"]
            write_s = nbytes / self.disk["write"]
            released = nvml_s if nvml_s is not None else ev["gpu_released_seconds"]
            self.target(
                "GPU released after the click, without the tier",
                released,
                write_s + NEVER_SLACK,
                f"{'NVML' if nvml_s is not None else 'the paused event'}; the event says "
                f"{ev['gpu_released_seconds']} s; {nbytes / 1e9:.2f} GB at the disk's "
                f"{self.disk['write'] / 1e9:.2f} GB/s take {write_s:.2f} s, + {NEVER_SLACK:g} s",
            )
            big.print_phases("pause, checkpoint tier", self.n, ev, self.copies, self.disk)
        finally:
            server.stop()


def _outcome(s: dict) -> bool:
    """A pause has an outcome: paused, failed, running again, or suspended for good (its
    checkpoint written and the kernel kept, or not written)."""
    if s["state"] in ("paused", "failed", "active", "idle"):
        return True
    sus = s.get("suspended") or {}
    return s["state"] == "suspended" and bool(s["error"] or sus.get("checkpoint") == "written")


def _back(s: dict) -> dict | None:
    """A resume in place has an outcome: running, or back to suspended/paused with an error."""
    if s["state"] in ("active", "idle", "paused", "failed") or (
        s["state"] == "suspended" and s["error"]
    ):
        return s
    return None


def _events(server, sid: str, kind: str) -> list[dict]:
    return [e for e in server.events(sid) if e["type"] == kind]


def _before(types: list[str], first: str, then: str) -> bool:
    """Event ``first`` came before the last event ``then``."""
    return first in types and then in types and types.index(first) < _last(types, then)


def _last(types: list[str], kind: str) -> int:
    return len(types) - 1 - types[::-1].index(kind)


def run(params: float = big.PARAMS, strict: bool = False, rehearsal: bool = False) -> bool:
    """The check; False when a speed target was missed (never in a rehearsal)."""
    from jupyter_gpu_pause.units import size_text

    began = time.monotonic()
    layers = max(1, round(params / big.WIDTH**2))
    n = layers * big.WIDTH * big.WIDTH * 2  # bytes of fp16 weights
    root = Path(tempfile.mkdtemp(prefix="gpu-suspend-"))
    try:
        free, need = shutil.disk_usage(root).free, n + big.DISK_PROBE + 2 * GIB
        ram, ram_need = psutil.virtual_memory().available, int(3.6 * n) + 4 * GIB
        if free < need or ram < ram_need:
            print(
                f"REFUSED suspend: it needs {size_text(need)} free on the disk of {root} and "
                f"{size_text(ram_need)} of memory available (a {size_text(n)} checkpoint on a "
                f"tmpfs, a suspended kernel's two host copies) and has {size_text(free)} and "
                f"{size_text(ram)}. Set TMPDIR to a larger disk, or pass --bigstate-params "
                "with fewer parameters.",
                flush=True,
            )
            sys.exit(2)
        nv = None if rehearsal else big.nvml_with_room(n)
        step(
            f"model: {layers} fp16 layers {big.WIDTH}x{big.WIDTH}, {n / 1e9:.2f} GB on "
            f"{'cpu (rehearsal)' if rehearsal else 'cuda'}; work folder {root}"
        )
        copies = big.copy_bandwidth(rehearsal)
        disk = big.disk_bandwidth(root)
        step(
            f"measured: pageable D2H {copies['d2h_pageable'] / 1e9:.2f} GB/s, pinned D2H "
            f"{copies['d2h'] / 1e9:.2f} GB/s; disk fsync'd write {disk['write'] / 1e9:.2f} GB/s, "
            f"page-cache read {disk['read'] / 1e9:.2f} GB/s"
        )
        c = SuspendCheck(n, layers, nv, copies, disk, root, rehearsal)
        print("  - A: suspend = auto", flush=True)
        if c.tier_and_durable():
            print(
                f"  - B: keep_suspended_seconds = {KEEP_SECONDS}, the store on a tmpfs", flush=True
            )
            c.fault_and_kept()
        print("  - C: suspend = never", flush=True)
        c.without_tier()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    step(f"suspend: {time.monotonic() - began:.0f} s in all")
    if c.failed:
        print("FAIL suspend: a check failed (above)", flush=True)
        sys.exit(1)
    if strict and not c.met and not rehearsal:
        print("FAIL a target was missed (--strict-targets)", flush=True)
    return c.met or rehearsal
