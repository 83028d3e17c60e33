"""Is the server that holds a queue row still alive? Asked without waiting for its lease.

A server that dies (SIGKILL, a crash) stops renewing its lease, and the queue drops its rows
once the lease ends (30 s by default). Until then its claims kept the sessions it ran from
being resumed anywhere, its place in line and its GPU holdings counted. On one machine there is
no need to wait: the server's row says which process it is, and a process that is gone is gone.

A process is named by its pid *and* its start time, so a pid the kernel has since given to
another process does not count as alive. Pids mean something only in the pid namespace they
come from: the row also carries a ``pid_space`` (host name, boot time and the pid namespace),
and only a row of our own ``pid_space`` is judged by its pid. Rows from other machines, other
containers, or servers of versions that did not record it, keep the lease as their rule.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psutil

# Two reads of one process's start time agree to far better than this; a new process given
# the same pid starts later than that (the dead one had to end first).
_SAME_START = 0.5


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:  # not Linux: no pid namespaces to tell apart
        return ""


@dataclass(frozen=True)
class ProcessId:
    """This process as a queue row records it."""

    host: str
    pid_space: str
    pid: int
    started: float

    @classmethod
    def current(cls) -> ProcessId:
        host = socket.gethostname()
        space = f"{host}|{int(psutil.boot_time())}|{_pid_namespace()}"
        return cls(host, space, os.getpid(), psutil.Process().create_time())


def process_gone(pid: int | None, started: float | None) -> bool:
    """True when no process ``pid`` that started at ``started`` runs here (in our pid space:
    the caller checks that). Unknown values are never called gone."""
    if pid is None or started is None:
        return False
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - started) > _SAME_START:
            return True  # the pid was given to another process since
        return p.status() == psutil.STATUS_ZOMBIE  # ended, its parent has not reaped it yet
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # e.g. access denied: it exists, whoever runs it
        return False
