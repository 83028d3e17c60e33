"""Checks that only a machine with an NVIDIA GPU can make (run it there; CI has no GPU).

1. NVML sees a real CUDA process: a child process holding a CUDA tensor counts as ``uses_gpu``,
   and while a background thread keeps the GPU busy it is *not* idle for a policy with
   ``gpu_idle_below: 5``; once the loop stops, it is.
2. CUDA tensors go through capture and restore: back on the GPU bit-identical, or on the CPU
   with device="cpu".

Prints one line per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

CHILD = r"""
import threading, time, torch
x = torch.randn(8192, 8192, device="cuda")
stop = time.time() + float(__import__("sys").argv[1])
def loop():
    while time.time() < stop:
        x @ x
    torch.cuda.synchronize()
threading.Thread(target=loop, daemon=True).start()
print("ready", flush=True)
time.sleep(float(__import__("sys").argv[1]) + 30)
"""


def check(label: str, ok: bool, detail: str = "") -> None:
    print(f"{'OK  ' if ok else 'FAIL'} {label} {detail}")
    if not ok:
        sys.exit(1)


def nvml_checks() -> None:
    from jupyter_gpu_pause.server.policy import first_match, parse_policies
    from jupyter_gpu_pause.server.probes import NvmlProbe, process_tree

    probe = NvmlProbe()
    check("NVML available", probe.available, str(probe.devices()))
    busy_for = 15
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(busy_for)], stdout=subprocess.PIPE, text=True
    )
    try:
        child.stdout.readline()
        time.sleep(3)
        usage = probe.sample({"s": process_tree(child.pid)}).get("s")
        check(
            "CUDA process counted as uses_gpu", bool(usage and usage.memory_bytes > 0), str(usage)
        )
        policy = first_match(
            parse_policies([{"name": "gpu", "match": {"uses_gpu": True}, "gpu_idle_below": 5}]),
            "python3",
            True,
            None,
        )
        check(
            "background GPU loop is not idle",
            usage.utilization >= policy.gpu_idle_below,
            f"{usage.utilization}%",
        )
        time.sleep(busy_for + 5)
        usage = probe.sample({"s": process_tree(child.pid)}).get("s")
        check(
            "after the loop the GPU counts as idle", usage.utilization < 5, f"{usage.utilization}%"
        )
    finally:
        child.kill()


def cuda_roundtrip() -> None:
    import torch

    from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
    from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
    from jupyter_gpu_pause.store import Store

    ns = {"__name__": "__main__"}
    model = torch.nn.Linear(1024, 1024).cuda()
    ns.update(
        model=model,
        opt=torch.optim.Adam(model.parameters()),
        t=torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16),
    )
    ns["view"] = ns["t"][10:20]
    store = Store(tempfile.mkdtemp())
    res = write_plan(make_plan(ns, {}, ["model", "opt", "t"], "namespace"), store)
    doc = {
        "checkpoint_id": "gpu",
        "totals": {"bytes": sum(b["bytes"] for b in res["blobs"].values())},
        **res,
    }
    for device in ("any", "cpu"):
        out = {"__name__": "__main__"}
        restore_objects(doc, load_blobs(doc, store), out, device)
        want = "cuda" if device == "any" else "cpu"
        check(f"restored on {want}", out["t"].device.type == want, str(out["t"].device))
        check(f"bit-identical on {want}", torch.equal(out["t"].cpu(), ns["t"].cpu()))
        check(
            f"view kept on {want}",
            out["view"].untyped_storage().data_ptr() == out["t"].untyped_storage().data_ptr(),
        )
        check(
            f"optimizer linked on {want}",
            out["opt"].param_groups[0]["params"][0] is out["model"].weight,
        )


if __name__ == "__main__":
    nvml_checks()
    cuda_roundtrip()
