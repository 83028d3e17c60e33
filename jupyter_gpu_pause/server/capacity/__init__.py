"""Capacity: may a resumed kernel run now, on which GPU, and who is next in line?

``base`` (what a provider decides with), ``providers`` (quota, nvml, unlimited, auto),
``queue`` (the node-wide FIFO line shared by every server on a machine) and ``service`` (what
resumes and the session table talk to).
"""

from .base import CapacityProvider, Grant, Holder, Need, UnlimitedCapacity, Verdict
from .providers import (
    PROVIDERS,
    AutoCapacity,
    NvmlCapacity,
    ProviderClass,
    QuotaCapacity,
    build_provider,
)
from .queue import FolderQueue, QueueError, Turn, check_queue_folder
from .service import Capacity, NeverFits

__all__ = [
    "PROVIDERS",
    "AutoCapacity",
    "Capacity",
    "CapacityProvider",
    "FolderQueue",
    "Grant",
    "Holder",
    "Need",
    "NeverFits",
    "NvmlCapacity",
    "ProviderClass",
    "QueueError",
    "QuotaCapacity",
    "Turn",
    "UnlimitedCapacity",
    "Verdict",
    "build_provider",
    "check_queue_folder",
]
