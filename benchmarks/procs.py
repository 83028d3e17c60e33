"""What the benchmarks read from and do to the operating system: a process's memory (current and
peak resident size from ``/proc/<pid>/status``) and the page cache (dropped before a cold read).

Shared by ``bench_s3.py`` and the end-to-end suite (``run.py``), so both measure peak memory
the same way: reset the kernel's high-water mark through ``clear_refs`` before the operation and
sample it until the operation ends (a paused kernel exits, and its last mark goes with it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

# Imported again right after the page cache is dropped, so that "cold" means the state's bytes
# are not cached while the libraries every kernel imports are, as on a machine in use: a resume
# and the baselines it is compared with all start kernels that import these.
LIBRARIES = (
    "import ipykernel.kernelapp, torch, xxhash, cloudpickle, jupyter_gpu_pause.kernel.agent\n"
    "try:\n    import pandas\nexcept ImportError:\n    pass\n"
)


def status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/<pid>/status`` field (``"VmRSS:"``, ``"VmHWM:"``) in bytes; None once the
    process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class PeakWatch:
    """The last VmHWM of a process seen before it ends (sampled every 5 ms in a thread)."""

    def __init__(self, pid: int):
        self.pid, self.peak = pid, 0
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        self.base = status_kib(pid, "VmRSS:") or 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            v = status_kib(self.pid, "VmHWM:")
            if v is None:
                return
            self.peak = max(self.peak, v)
            time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


class PageCache:
    """Drops the page cache before a cold read, when this process may (root, and a writable
    ``/proc/sys/vm/drop_caches``: not in most containers). ``why_not`` says why it cannot;
    then every read is warm and the suite says so. ``enabled=False`` never drops (a shared
    machine, or a smoke run: dropping slows every other process on the machine for a while)."""

    def __init__(self, enabled: bool = True):
        self.why_not: str | None = None
        if not enabled:
            self.why_not = "not asked (--warm or --smoke)"
        elif os.geteuid() != 0:
            self.why_not = "not root"
        else:
            self.why_not = self._drop()
        self.drops = 0

    @property
    def cold(self) -> bool:
        return self.why_not is None

    @staticmethod
    def _drop() -> str | None:
        os.sync()  # dirty pages cannot be dropped: write them first
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
        except OSError as e:
            return f"cannot write /proc/sys/vm/drop_caches ({e.strerror or e})"
        return None

    def drop(self) -> None:
        """Make the next read cold: drop everything, then read the libraries back (a child
        process imports them), so only the data is cold. A no-op when dropping is off."""
        if not self.cold:
            return
        why = self._drop()
        if why:
            raise RuntimeError(f"dropping the page cache stopped working: {why}")
        subprocess.run([sys.executable, "-c", LIBRARIES], check=True, capture_output=True)
        self.drops += 1
