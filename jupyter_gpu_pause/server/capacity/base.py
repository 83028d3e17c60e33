"""What a capacity provider decides, and with what: a resume's need, the GPU sessions holding
the node, and the provider's verdict.

A provider only *decides*: given the need at the head of the node's queue and everything that
holds GPUs on the node now, grant (which devices) or wait (why, in words). Waiting in line,
leases and sharing between servers are the queue's job (``queue.py``); the provider is a pure
function of its inputs, so one rule serves every server on the machine the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traitlets import Float, Int, validate
from traitlets.config import LoggingConfigurable

from ...units import count_text, size_text
from ..config.traits import not_negative


@dataclass(frozen=True)
class Need:
    """What one resume asks for: GPU bytes per device it will use (headroom included)."""

    session_id: str
    per_device: tuple[int, ...] = (0,)  # largest first; one entry per saved CUDA device
    # the GPUs (UUIDs) it must be on: a kernel suspended in place goes back onto its own
    on: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.per_device)

    def text(self) -> str:
        """'needs 38.0 GB on one GPU', 'needs 20.0 GB + 20.0 GB on two GPUs'."""
        if len(self.per_device) == 1:
            return f"needs {size_text(self.per_device[0])} on one GPU"
        parts = " + ".join(size_text(b) for b in self.per_device)
        return f"needs {parts} on {len(self.per_device)} GPUs"


@dataclass(frozen=True)
class Holder:
    """A GPU session on the node (any server): a granted resume or a kernel holding a GPU."""

    session_id: str
    server_id: str
    bytes: int = 0
    devices: tuple[str, ...] = ()  # GPU UUIDs, when known
    reserved: bool = False  # granted, its memory maybe not allocated yet: count it as used


@dataclass
class Grant:
    """What the new kernel may use: GPU UUIDs and the environment that pins it to them."""

    devices: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    device: str = "gpu"  # "gpu": a GPU session; "cpu": no GPU visible; "none": not governed
    bytes: int = 0
    any: bool = False  # asked as "any": the kernel uses a GPU if it sees one, else the CPU

    @classmethod
    def cpu(cls) -> Grant:
        """No GPU at all: CUDA sees no device, CUDA storages are restored on the CPU."""
        return cls(env={"CUDA_VISIBLE_DEVICES": ""}, device="cpu")


@dataclass(frozen=True)
class Verdict:
    """The provider's answer: a grant, or why not (a code and a sentence)."""

    grant: Grant | None = None
    reason: str = ""  # quota-sessions | quota-bytes | gpu-memory
    message: str = ""
    never: bool = False  # the need exceeds what this node could ever give


class CapacityProvider(LoggingConfigurable):
    """Base class. ``queued`` providers make GPU resumes wait in the node's FIFO queue."""

    name = "base"
    queued = True

    headroom_fraction = Float(
        0.10,
        help="Extra GPU memory asked for on top of a checkpoint's tensors, as a fraction of "
        "them (allocator slack, activations of the first step). Default: 0.10.",
    ).tag(config=True)

    headroom_bytes = Int(
        512 * 2**20,
        help="Extra GPU memory asked for per device on top of the tensors (the CUDA context "
        "itself takes a few hundred MB). Default: 536870912 (512 MiB).",
    ).tag(config=True)

    @validate("headroom_fraction", "headroom_bytes")
    def _not_negative(self, proposal):
        return not_negative(self, proposal)

    def need(self, session_id: str, gpu_bytes_per_device: list[int], on=()) -> Need:
        """A resume's need: the checkpoint's GPU bytes per device, plus headroom; ``on``: the
        GPUs it must be placed on (a resume in place), any if empty."""
        sizes = sorted(gpu_bytes_per_device or [0], reverse=True)
        return Need(
            session_id,
            tuple(int(b * (1 + self.headroom_fraction)) + self.headroom_bytes for b in sizes),
            tuple(on),
        )

    def decide(self, need: Need, holders: list[Holder]) -> Verdict:
        """Grant ``need`` now, or say why not. Called by the queue for its head only."""
        raise NotImplementedError

    def devices(self, holders: list[Holder]) -> list[dict]:
        """The node's GPUs for ``GET capacity`` (none for providers that do not see them)."""
        return []

    def limits(self) -> dict:
        return {}

    def notes(self) -> list[str]:
        """What an admin should know about what this provider can see (``GET capacity``)."""
        return []


class UnlimitedCapacity(CapacityProvider):
    """No GPU accounting: every resume starts at once (CPU machines, single-user boxes)."""

    name = "unlimited"
    queued = False

    def decide(self, need, holders) -> Verdict:
        return Verdict(Grant(bytes=need.total))


def sessions_text(n: int) -> str:
    return count_text(n, "GPU session")
