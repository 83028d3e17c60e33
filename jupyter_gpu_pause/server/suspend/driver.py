"""The CUDA driver's process-checkpoint API, the one boundary of the suspend tier.

Since r550 the driver can checkpoint a running process's GPU state in place, from another
process: ``cuCheckpointProcessLock`` (waits for submitted work, then blocks the process's CUDA
calls), ``cuCheckpointProcessCheckpoint`` (device memory copied to host memory, GPU memory and
contexts released; the process keeps running on the CPU), ``cuCheckpointProcessRestore`` (back
onto the GPU) and ``cuCheckpointProcessUnlock``, with ``cuCheckpointProcessGetState``.
NVIDIA's ``cuda-checkpoint`` utility is a thin wrapper around them; we call them ourselves, so
there is no binary to install. Unsupported by the driver: UVM, IPC memory (before r610), MIG.

``LibcudaCheckpoint`` is the real one. Every call blocks (a checkpoint copies the process's
GPU memory): ``suspender.Suspender`` makes them on one worker thread. An admin (or a test, with
a declared fake) swaps it with ``c.GpuPauseApp.cuda_checkpoint_class``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from traitlets.config import LoggingConfigurable

# CUprocessState
STATES = {0: "running", 1: "locked", 2: "checkpointed", 3: "failed"}
FUNCTIONS = (
    "cuCheckpointProcessGetState",
    "cuCheckpointProcessLock",
    "cuCheckpointProcessCheckpoint",
    "cuCheckpointProcessRestore",
    "cuCheckpointProcessUnlock",
)


class DriverError(Exception):
    """A driver call failed: ``code`` is its CUresult name (``CUDA_ERROR_ILLEGAL_STATE``)."""

    def __init__(self, call: str, code: str, pid: int | None = None):
        self.call, self.code, self.pid = call, code, pid
        on = f" for process {pid}" if pid is not None else ""
        super().__init__(f"{call}{on} returned {code}")


@dataclass(frozen=True)
class Availability:
    """Whether this machine's driver can suspend processes in place, and why (or why not)."""

    ok: bool
    reason: str
    driver_version: str | None = None


class CudaCheckpoint(LoggingConfigurable):
    """The boundary, with no driver behind it: nothing here can be suspended."""

    def probe(self) -> Availability:
        """Load and check the API once (at start): the tier in force follows from it."""
        return Availability(False, "no CUDA checkpoint driver is configured")

    def state(self, pid: int) -> str | None:
        """``running`` | ``locked`` | ``checkpointed`` | ``failed``; None: not a CUDA process."""
        return None

    def lock(self, pid: int, timeout_ms: int) -> None:
        raise DriverError("cuCheckpointProcessLock", "CUDA_ERROR_NOT_SUPPORTED", pid)

    def checkpoint(self, pid: int) -> None:
        raise DriverError("cuCheckpointProcessCheckpoint", "CUDA_ERROR_NOT_SUPPORTED", pid)

    def restore(self, pid: int) -> None:
        raise DriverError("cuCheckpointProcessRestore", "CUDA_ERROR_NOT_SUPPORTED", pid)

    def unlock(self, pid: int) -> None:
        raise DriverError("cuCheckpointProcessUnlock", "CUDA_ERROR_NOT_SUPPORTED", pid)


class _LockArgs(ctypes.Structure):  # CUcheckpointLockArgs
    _fields_ = [
        ("timeoutMs", ctypes.c_uint),
        ("reserved0", ctypes.c_uint),
        ("reserved1", ctypes.c_uint64 * 7),
    ]


class LibcudaCheckpoint(CudaCheckpoint):
    """The API in ``libcuda.so.1``, through ctypes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._cuda = None

    def probe(self) -> Availability:
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return Availability(False, "no CUDA driver on this machine (libcuda.so.1 not found)")
        version = self._version(cuda)
        missing = [f for f in FUNCTIONS if not hasattr(cuda, f)]
        if missing:
            return Availability(
                False,
                f"the CUDA driver {version} has no process checkpoint API (r550 or newer has; "
                f"missing {missing[0]})",
                version,
            )
        code = cuda.cuInit(0)
        if code != 0:
            return Availability(
                False, f"the CUDA driver {version} did not start: {_name(cuda, code)}", version
            )
        mig = _mig_devices()
        if mig:
            return Availability(
                False,
                f"MIG is on for GPU {', '.join(map(str, mig))}: the driver cannot checkpoint a "
                "process on a MIG instance",
                version,
            )
        self._cuda = cuda
        return Availability(True, f"the CUDA driver {version} has the checkpoint API", version)

    def _call(self, name: str, pid: int, *args) -> None:
        code = getattr(self._cuda, name)(ctypes.c_int(pid), *args)
        if code != 0:
            raise DriverError(name, _name(self._cuda, code), pid)

    def state(self, pid: int) -> str | None:
        out = ctypes.c_int(-1)
        try:
            self._call("cuCheckpointProcessGetState", pid, ctypes.byref(out))
        except DriverError:  # CUDA_ERROR_NOT_FOUND & co: the process has no CUDA context
            return None
        return STATES.get(out.value, "failed")

    def lock(self, pid: int, timeout_ms: int) -> None:
        args = _LockArgs(timeoutMs=timeout_ms)
        self._call("cuCheckpointProcessLock", pid, ctypes.byref(args))

    def checkpoint(self, pid: int) -> None:
        self._call("cuCheckpointProcessCheckpoint", pid, None)

    def restore(self, pid: int) -> None:
        self._call("cuCheckpointProcessRestore", pid, None)

    def unlock(self, pid: int) -> None:
        self._call("cuCheckpointProcessUnlock", pid, None)

    @staticmethod
    def _version(cuda) -> str:
        """The driver's release (NVML: ``570.86.15``), else its CUDA version (``CUDA 12.8``)."""
        try:
            import pynvml

            pynvml.nvmlInit()
            release = pynvml.nvmlSystemGetDriverVersion()
            return release.decode() if isinstance(release, bytes) else str(release)
        except Exception:
            pass
        v = ctypes.c_int(0)
        if cuda.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"CUDA {v.value // 1000}.{v.value % 1000 // 10}"
        return "of unknown version"


def _name(cuda, code: int) -> str:
    s = ctypes.c_char_p()
    if cuda.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
        return s.value.decode()
    return f"CUresult {code}"


def _mig_devices() -> list[int]:
    """Indices of the GPUs with MIG on (NVML), none where NVML cannot tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                current, _ = pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(i))
            except pynvml.NVMLError:  # not a MIG-capable GPU
                continue
            if current:
                out.append(i)
        return out
    except Exception:
        return []
