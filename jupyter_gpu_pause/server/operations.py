"""What a running pause or resume carries, and the summaries both write into a session."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

DEVICES = ("gpu", "cpu", "any")


@dataclass
class Op:
    kind: str  # "pause" | "resume"
    task: asyncio.Task | None = None
    committed: bool = False  # pause: manifest verified, cancel no longer possible
    kernel_id: str | None = None  # resume: the kernel being restored into


def checkpoint_brief(m) -> dict:
    """The ``checkpoint`` field of a Session, from a verified manifest."""
    return {
        "id": m.id,
        "created": m.doc["created"],
        "bytes": m.total_bytes,
        "objects": len(m.doc["objects"]),
        "skipped": len(m.doc["skipped"]),
        "skipped_objects": m.doc["skipped"],
    }


def gpu_bytes(m) -> int:
    """GPU memory a checkpoint needs back: the bytes of its CUDA tensors."""
    return sum(
        int(b["bytes"]) for b in m.blobs.values() if str(b.get("device", "cpu")).startswith("cuda")
    )
