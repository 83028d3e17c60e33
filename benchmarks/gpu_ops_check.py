"""What an operator sees of one GPU notebook through a real server: metrics and event timings.

Run it on a machine with an NVIDIA GPU (CI has none). One ``jupyter server`` with the extension,
the default NVML probe and capacity provider, ``poll_interval`` 1 s, no idle policy. A notebook's
kernel holds a CUDA tensor of seeded random floats (``--gib``, default 2). The check then:

1. waits until the session shows the GPU (``gpu.devices``, ``gpu.memory_bytes`` from NVML) and
   the monitor has accrued GPU-seconds held, and scrapes ``/metrics`` (token auth) before and
   after: ``gpu_held_seconds_total`` and ``gpu_idle_seconds_total`` grow;
2. pauses it through the REST API: NVML shows the kernel's memory given back; the ``paused``
   event's ``gpu_released_seconds``, ``timings`` and ``duration_seconds``; while it stays paused,
   ``gpu_reclaimed_seconds_total`` grows and held stops; the pause and GPU-release histograms
   count one more;
3. resumes it: the ``resumed`` event's timings, the kernel's ``CUDA_VISIBLE_DEVICES``, its tensor
   on cuda with the same values (compared with a tensor drawn again from the seed), and the
   time-to-usable histogram and resume counter move.

Every check prints one line; the numbers go to ``--json`` too. A failed check does not stop the
run where the next steps still mean something; the exit status is 1 when any check failed.
``--cpu-rehearsal`` runs the same steps with a CPU tensor and the NVML checks skipped, to try
the script where there is no GPU.

Usage: gpu_ops_check.py [--gib 2] [--json FILE] [--server-log FILE] [--cpu-rehearsal]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from server_process import RUNNING, TOKEN, JupyterServer  # noqa: E402

GIB, MIB = 2**30, 2**20
PREFIX = "jupyter_gpu_pause_"
SEED = 12

CONFIG = """
c.GpuPauseApp.policies = []
c.GpuPauseApp.poll_interval = 1.0
c.GpuPauseApp.shutdown_checkpoint = "none"
c.GpuPauseApp.resume_timeout = 300
"""

# The notebook's state: one tensor of seeded random floats (no other name left behind).
STATE = """
import torch
_g = torch.Generator(device={device!r})
_g.manual_seed({seed})
x = torch.randn({n}, generator=_g, device={device!r})
del _g
"""

# Where the tensor is, whether its values are the seed's (drawn again on its device), a checksum
# of its bits, and what the kernel sees; leaves no name behind and gives the memory back.
PROBE = """
def _probe():
    import json, os, torch
    g = torch.Generator(device=x.device)
    g.manual_seed({seed})
    same = bool(torch.equal(x, torch.randn(x.numel(), generator=g, device=x.device)))
    total = sum(int(c.sum(dtype=torch.int64)) for c in x.view(torch.int32).split(1 << 24))
    if x.is_cuda:
        torch.cuda.empty_cache()
    return json.dumps({{"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(x.device),
                       "pid": os.getpid(), "same": same, "sum": total, "bytes": x.nbytes}})
print(_probe())
del _probe
"""

# Series whose moves the report gives: counters, and the count and sum of each histogram.
SERIES = (
    "gpu_held_seconds_total",
    "gpu_idle_seconds_total",
    "gpu_reclaimed_seconds_total",
    "pauses_total{reason=user,result=ok}",
    "resumes_total{reason=user,result=ok}",
    "pause_duration_seconds_count",
    "pause_duration_seconds_sum",
    "gpu_release_seconds_count",
    "gpu_release_seconds_sum",
    "time_to_usable_seconds_count",
    "time_to_usable_seconds_sum",
    "checkpoint_written_bytes_total",
)

failures: list[str] = []


def check(label: str, ok: bool, detail: str = "") -> bool:
    print(f"{'OK  ' if ok else 'FAIL'} {label} {detail}", flush=True)
    if not ok:
        failures.append(label)
    return ok


def step(text: str) -> None:
    print(f"     {text}", flush=True)


def scrape(server: JupyterServer) -> dict[str, float]:
    """``GET /metrics`` with the server's token, as a Prometheus job would: our series by name
    (``name{label=value,...}``, labels sorted)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/metrics", headers={"Authorization": f"token {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith(PREFIX) and not s.name.endswith("_created"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[s.name[len(PREFIX) :] + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def moves(before: dict, after: dict) -> dict[str, float]:
    return {k: round(after[k] - before[k], 3) for k in SERIES}


class Nvml:
    """NVML's view of one GPU: memory used and the compute processes on it (None: no NVML)."""

    def __init__(self, rehearsal: bool):
        self.n = None
        if rehearsal:
            return
        import pynvml

        pynvml.nvmlInit()
        self.n = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.uuid = pynvml.nvmlDeviceGetUUID(self.h)
        self.name = pynvml.nvmlDeviceGetName(self.h)

    def used(self) -> int:
        return int(self.n.nvmlDeviceGetMemoryInfo(self.h).used) if self.n else 0

    def procs(self) -> dict[int, int]:
        if not self.n:
            return {}
        try:
            got = self.n.nvmlDeviceGetComputeRunningProcesses(self.h)
        except self.n.NVMLError:
            return {}
        return {p.pid: int(p.usedGpuMemory or 0) for p in got}


def last_event(server: JupyterServer, sid: str, kind: str) -> dict:
    return [e for e in server.events(sid) if e["type"] == kind][-1]


def run_check(gib: float, rehearsal: bool, keep_log: Path | None) -> dict:
    from jupyter_gpu_pause.units import size_text

    nv = Nvml(rehearsal)
    device = "cpu" if rehearsal else "cuda"
    n = int(gib * GIB) // 4  # float32 values
    report: dict = {"tensor_bytes": n * 4, "device": device}
    if nv.n:
        report["gpu"] = {"name": nv.name, "uuid": nv.uuid}
        step(f"GPU 0: {nv.name} {nv.uuid}, {size_text(nv.used())} used before the server")
    root = Path(tempfile.mkdtemp(prefix="gpu-ops-"))
    server = JupyterServer(root / "server", CONFIG)
    slow = 120 + n * 4 / 50e6  # a pause or a resume: 50 MB/s at the very least
    try:
        server.start()
        base = nv.used()

        # Given a notebook whose kernel holds the tensor
        s = server.open_notebook("gpu.ipynb")
        sid = s["id"]
        began = time.monotonic()
        server.run(s["kernel_id"], STATE.format(device=device, seed=SEED, n=n), timeout=slow)
        ref = json.loads(server.run(s["kernel_id"], PROBE.format(seed=SEED), timeout=slow))
        report["state_seconds"] = round(time.monotonic() - began, 2)
        check("the tensor is made", ref["same"] and ref["bytes"] == n * 4, str(ref))

        # Then the session shows the GPU, as NVML measures the kernel
        if nv.n:
            try:
                shown = server.session_until(
                    sid,
                    lambda x: (x["gpu"] or {}).get("memory_bytes", 0) >= n * 4,
                    "showing the kernel's GPU memory",
                    timeout=30,
                )
                gpu = shown["gpu"]
            except Exception as e:  # record and go on: the pause must still be checked
                gpu = server.session(sid)["gpu"]
                step(f"{e}")
            report["session_gpu"] = gpu
            procs = nv.procs()
            step(
                f"NVML: GPU 0 used {size_text(nv.used())} ({size_text(nv.used() - base)} over "
                f"the base); kernel pid {ref['pid']} "
                + (f"holds {size_text(procs[ref['pid']])}" if ref["pid"] in procs else "not listed")
                + f"; processes {procs}"
            )
            check(
                "session shows the GPU (devices, memory)",
                bool(gpu and gpu["devices"] == [nv.uuid] and gpu["memory_bytes"] >= n * 4),
                json.dumps(gpu),
            )
        m0 = scrape(server)
        held0 = server.session(sid)["accounting"]["gpu_seconds_held"]

        # When the monitor has ticked with the kernel holding the GPU
        if nv.n:
            try:
                server.session_until(
                    sid,
                    lambda x: x["accounting"]["gpu_seconds_held"] >= held0 + 3,
                    "3 more GPU-seconds held",
                    timeout=20,
                )
            except Exception as e:
                step(f"{e}")
        else:
            time.sleep(3)  # rehearsal: nothing accrues without NVML; let ticks pass anyway
        m1 = scrape(server)
        held = moves(m0, m1)
        report["metrics_while_held"] = held
        step(f"metrics moved while held: {held}")
        if nv.n:
            check(
                "held and idle GPU-seconds grow, nothing reclaimed",
                held["gpu_held_seconds_total"] >= 2
                and held["gpu_idle_seconds_total"] > 0
                and held["gpu_reclaimed_seconds_total"] == 0,
            )

        # When it is paused through the REST API
        asked = time.monotonic()
        paused = server.pause(sid, timeout=slow)
        report["pause_wall_seconds"] = round(time.monotonic() - asked, 3)
        used_after = nv.used()
        procs_after = nv.procs()
        ev = last_event(server, sid, "paused")["detail"]
        report["paused_event"] = {
            k: ev.get(k)
            for k in ("duration_seconds", "gpu_released_seconds", "timings", "bytes", "new_bytes")
        }
        step(f"paused event: {json.dumps(report['paused_event'])}")
        step(f"checkpoint: {json.dumps(paused['checkpoint'])}")
        check(
            "paused event: GPU released before the end, phases within the duration",
            ev.get("gpu_released_seconds") is not None
            and ev["gpu_released_seconds"] <= ev["duration_seconds"]
            and sum(ev["timings"].values()) <= ev["duration_seconds"] + 1e-3,
        )
        if nv.n:
            report["nvml_after_pause"] = {
                "used_over_base": used_after - base,
                "kernel_listed": ref["pid"] in procs_after,
            }
            check(
                "NVML: the kernel's GPU memory is given back",
                used_after - base < 256 * MIB and ref["pid"] not in procs_after,
                f"GPU 0 used {size_text(used_after)} ({size_text(used_after - base)} over the "
                f"base); processes {procs_after}",
            )
            check(
                "checkpoint counts the GPU tensor",
                (paused["checkpoint"] or {}).get("gpu_bytes", 0) >= n * 4,
            )

        # Then, while it stays paused, the GPU-seconds it gave back are counted as reclaimed
        m2 = scrape(server)
        if nv.n:
            try:
                server.session_until(
                    sid,
                    lambda x: x["accounting"]["gpu_seconds_reclaimed"] >= 3,
                    "3 GPU-seconds reclaimed",
                    timeout=20,
                )
            except Exception as e:
                step(f"{e}")
        else:
            time.sleep(3)
        m3 = scrape(server)
        report["metrics_pause"] = moves(m1, m2)
        report["metrics_while_paused"] = moves(m2, m3)
        step(f"metrics moved by the pause: {report['metrics_pause']}")
        step(f"metrics moved while paused: {report['metrics_while_paused']}")
        p, w = report["metrics_pause"], report["metrics_while_paused"]
        check(
            "pause counted: pauses_total, pause and GPU-release histograms +1",
            p["pauses_total{reason=user,result=ok}"] == 1
            and p["pause_duration_seconds_count"] == 1
            and p["gpu_release_seconds_count"] == 1
            and abs(p["gpu_release_seconds_sum"] - ev["gpu_released_seconds"]) < 1e-3,
        )
        if nv.n:
            check(
                "while paused: reclaimed grows, held does not",
                w["gpu_reclaimed_seconds_total"] >= 2 and w["gpu_held_seconds_total"] == 0,
            )
        acc = server.session(sid)["accounting"]
        report["session_accounting_paused"] = acc
        check(
            "metrics agree with the session's accounting (one session, fresh process)",
            abs(m3["gpu_held_seconds_total"] - acc["gpu_seconds_held"]) <= 1.5
            and abs(m3["gpu_reclaimed_seconds_total"] - acc["gpu_seconds_reclaimed"]) <= 1.5,
            f"metrics held {m3['gpu_held_seconds_total']:.1f} reclaimed "
            f"{m3['gpu_reclaimed_seconds_total']:.1f}; session {acc}",
        )

        # When it is resumed
        asked = time.monotonic()
        server.ask_resume(sid)
        back = server.settled(sid, slow)
        report["resume_wall_seconds"] = round(time.monotonic() - asked, 3)
        check("resumed", back["state"] in RUNNING, back["message"] or "")
        ev = last_event(server, sid, "resumed")["detail"]
        report["resumed_event"] = {
            k: ev.get(k) for k in ("duration_seconds", "timings", "waited_seconds", "devices")
        }
        step(f"resumed event: {json.dumps(report['resumed_event'])}")
        m4 = scrape(server)
        r = moves(m3, m4)
        report["metrics_resume"] = r
        step(f"metrics moved by the resume: {r}")
        check(
            "resume counted: resumes_total and time-to-usable histogram +1",
            r["resumes_total{reason=user,result=ok}"] == 1
            and r["time_to_usable_seconds_count"] == 1,
        )

        # Then the tensor is back on its device with the same values
        got = json.loads(server.run(back["kernel_id"], PROBE.format(seed=SEED), timeout=slow))
        report["after_resume"] = got
        check(
            f"tensor on {device} with the same values",
            got["device"].startswith(device) and got["same"] and got["sum"] == ref["sum"],
            f"{got['device']}, checksum {got['sum']} (was {ref['sum']}), CUDA_VISIBLE_DEVICES "
            f"{got['cvd']}",
        )
        if nv.n:
            check("the resumed kernel is pinned to GPU 0", got["cvd"] == nv.uuid, str(got["cvd"]))
        report["metrics_total"] = {k: m4[k] for k in SERIES}
    finally:
        server.stop()
        if keep_log is not None and server.log.exists():
            shutil.copyfile(server.log, keep_log)
        shutil.rmtree(root, ignore_errors=True)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=2.0, help="GiB of the notebook's tensor")
    ap.add_argument("--json", type=Path, help="write the numbers to this file")
    ap.add_argument("--server-log", type=Path, help="copy the server's log to this file")
    ap.add_argument("--cpu-rehearsal", action="store_true", help="CPU tensor, NVML checks skipped")
    args = ap.parse_args(argv)
    report = run_check(args.gib, args.cpu_rehearsal, args.server_log)
    report["failed"] = failures
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print(f"{len(failures)} check(s) failed: {failures}" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
