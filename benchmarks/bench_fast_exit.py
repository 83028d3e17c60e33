"""What stopping a paused kernel costs: the graceful shutdown against the agent's ``finish`` and a
kill, side by side in one run.

Each repetition starts two kernels under jupyter_server's own kernel manager (the one a server
runs), each with torch imported and some state (a small model, an optimizer that stepped,
tensors; on the GPU when torch sees one), and checkpoints both with the agent's ``capture``
into a store in a temporary folder, as a pause does before its commit. Then, from that point
("checkpoint committed"), one kernel is stopped with ``KernelBridge.shutdown`` (jupyter_client's
graceful shutdown, what a pause did before) and the other with ``KernelBridge.finish`` (the
agent judges and flushes, then the kill), timed until the kernel's process is gone; the order
alternates. Prints each repetition, the medians and their ratio, and what ``finish`` answered
(it must be ``killed``: the exit status is 1 otherwise).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_fast_exit.py --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])

from jupyter_gpu_pause.server.kernels.bridge import KernelBridge  # noqa: E402
from jupyter_gpu_pause.store.format import new_checkpoint_id  # noqa: E402

STATE = """
import torch
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
model = model.to(dev)
optimizer = torch.optim.Adam(model.parameters())
x, y = torch.randn(64, 256, device=dev), torch.randint(0, 10, (64,), device=dev)
loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); optimizer.step()
buffers = [torch.randn(1 << 16, device=dev) for _ in range(8)]
"""


async def _cell(km, kernel_id: str, code: str) -> None:
    c = AsyncKernelClient()
    c.load_connection_info(km.get_kernel(kernel_id).get_connection_info(session=False))
    c.hb_channel.time_to_dead = 5.0
    c.start_channels()
    try:
        await c.wait_for_ready(timeout=60)
        reply = await c.execute_interactive(code, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        c.stop_channels()


async def _paused_kernel(km, bridge: KernelBridge, store: Path) -> tuple[str, int]:
    """A kernel with torch and some state whose checkpoint is written: the moment a pause's
    commit is done and the kernel is to stop. Its id and pid."""
    kid = await km.start_kernel(kernel_name="python3", path="")
    await bridge.run_agent(kid, "track", {})  # the server's first request, on discovery
    await _cell(km, kid, STATE)
    params = {"store_url": str(store), "checkpoint_id": new_checkpoint_id(), "verify": True}
    await bridge.run_agent(kid, "capture", params)
    return kid, bridge.pid(kid)


async def _stop(bridge: KernelBridge, kid: str, pid: int, how: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    if how == "graceful":
        await bridge.shutdown(kid)
        outcome = "graceful"
    else:
        outcome = await bridge.finish(kid)
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0, outcome


async def run(reps: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-fast-exit-"))
    log = logging.getLogger("bench_fast_exit")
    km = AsyncMappingKernelManager(root_dir=str(tmp))
    bridge = KernelBridge(km, None, km.kernel_spec_manager, log, answer_timeout=60)
    times: dict[str, list[float]] = {"graceful": [], "finish": []}
    outcomes: list[str] = []
    try:
        for rep in range(reps):
            order = ("graceful", "finish") if rep % 2 == 0 else ("finish", "graceful")
            kernels = {how: await _paused_kernel(km, bridge, tmp / "store") for how in order}
            for how in order:
                seconds, outcome = await _stop(bridge, *kernels[how], how)
                times[how].append(seconds)
                if how == "finish":
                    outcomes.append(outcome)
            print(
                f"rep {rep + 1}: graceful {times['graceful'][-1]:.3f} s, "
                f"finish {times['finish'][-1]:.3f} s ({outcomes[-1]})"
            )
    finally:
        await km.shutdown_all()
        shutil.rmtree(tmp, ignore_errors=True)
    graceful, finish = statistics.median(times["graceful"]), statistics.median(times["finish"])
    print(
        f"\ntorch kernel, checkpoint committed -> process gone, median of {reps}: graceful "
        f"{graceful:.3f} s, finish + kill {finish:.3f} s: x{finish / graceful:.2f} "
        f"({graceful - finish:.3f} s less)"
    )
    killed = all(o == "killed" for o in outcomes)
    if not killed:
        print("finish did not kill every kernel:", *sorted(set(outcomes)), sep="\n  ")
    return 0 if killed else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    return asyncio.run(run(ap.parse_args().reps))


if __name__ == "__main__":
    sys.exit(main())
