"""Capacity: may a resumed kernel run now, on which GPU, and who is next in line?

``base`` (what a provider decides with), ``providers`` (quota, nvml, unlimited, auto),
``queue`` (the FIFO line shared by servers: in a folder on one machine, ``folder``, or in
PostgreSQL for a cluster, ``postgres``; ``liveness`` tells a dead server's rows), ``service``
(what resumes and the session table talk to), ``where`` (the queue's URL checked at start),
``probes`` (GPU memory and utilisation of processes, through NVML) and ``gpu_sessions`` (which
sessions are GPU sessions, what this server holds), ``slots`` (how many resumes restore at
once: the CPU's capacity).

Imports ``config`` and ``state``.
"""

from .base import CapacityProvider, Grant, Holder, Need, UnlimitedCapacity, Verdict
from .folder import FolderQueue, check_queue_folder
from .postgres import PostgresQueue, is_postgres_url, parse_postgres_url
from .providers import (
    PROVIDERS,
    AutoCapacity,
    NvmlCapacity,
    QuotaCapacity,
    build_provider,
)
from .queue import CapacityQueue, QueueError, QueueUnavailable, Turn
from .service import Capacity, CapacityUnavailable, NeverFits

__all__ = [
    "PROVIDERS",
    "AutoCapacity",
    "Capacity",
    "CapacityProvider",
    "CapacityQueue",
    "CapacityUnavailable",
    "FolderQueue",
    "Grant",
    "Holder",
    "Need",
    "NeverFits",
    "NvmlCapacity",
    "PostgresQueue",
    "QueueError",
    "QueueUnavailable",
    "QuotaCapacity",
    "Turn",
    "UnlimitedCapacity",
    "Verdict",
    "build_provider",
    "check_queue_folder",
    "is_postgres_url",
    "parse_postgres_url",
]
