"""Store format v1: paths, checkpoint ids and the manifest document.

A manifest lists the objects of one capture, the blobs they need (hash -> size and kind), and
what was skipped. Its presence in the store is what makes a checkpoint complete.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, overload

from .integrity import check_blob_hash
from .schema import ManifestError, check_content, check_environment

FORMAT = "jupyter-gpu-pause/1"
_ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}\Z")
_SESSION_RE = re.compile(r"^[0-9a-zA-Z_-]{1,64}\Z")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@overload
def iso(dt: datetime) -> str: ...
@overload
def iso(dt: None) -> None: ...


def iso(dt: datetime | None) -> str | None:
    """ISO 8601 UTC with a Z, the only time format in the public contract."""
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    """An ISO 8601 time as UTC (a trailing Z allowed, no zone means UTC); ValueError if not."""
    when = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", text.strip()))
    return when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)


def new_checkpoint_id(now: datetime | None = None) -> str:
    """Ids that sort by creation time: ``20261202T101500Z-1a2b3c4d``.

    The suffix's first five hex digits are the microseconds and the last three random, so two
    checkpoints of one session made within the same second (a quick pause, resume, pause)
    still sort in the order they were made: retention's ``keep_last`` and the resume's
    fallback to older checkpoints go by this order.
    """
    now = now or utcnow()
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{now.microsecond:05x}{secrets.randbelow(4096):03x}"


def check_checkpoint_id(checkpoint_id: str) -> str:
    if not isinstance(checkpoint_id, str) or not _ID_RE.match(checkpoint_id):
        raise ValueError(
            f"{checkpoint_id!r} is not a checkpoint id (like 20261202T101500Z-1a2b3c4d)"
        )
    return checkpoint_id


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not _SESSION_RE.match(session_id):
        raise ValueError(f"{session_id!r} is not a session id")
    return session_id


def is_checkpoint_id(name: str) -> bool:
    return bool(_ID_RE.match(name))


def is_session_id(name: str) -> bool:
    return bool(_SESSION_RE.match(name))


def blob_path(h: str) -> str:
    check_blob_hash(h)  # a hash names a path: never let one reach outside the blob folder
    return f"v1/blobs/{h[0:2]}/{h}"


def manifest_path(session_id: str, checkpoint_id: str) -> str:
    return f"v1/sessions/{check_session_id(session_id)}/{check_checkpoint_id(checkpoint_id)}.json"


def session_dir(session_id: str) -> str:
    return f"v1/sessions/{check_session_id(session_id)}"


@dataclass
class Manifest:
    """A parsed manifest; ``doc`` is the signed JSON document as stored."""

    doc: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.doc["checkpoint_id"])

    @property
    def session_id(self) -> str:
        return str(self.doc["session_id"])

    @property
    def blobs(self) -> dict[str, dict[str, Any]]:
        blobs: dict[str, dict[str, Any]] = self.doc["blobs"]
        return blobs

    @property
    def total_bytes(self) -> int:
        return int(self.doc["totals"]["bytes"])

    def summary(self, valid: bool | None = None) -> dict[str, Any]:
        """The Checkpoint object of the REST API."""
        return {
            "id": self.id,
            "created": self.doc["created"],
            "bytes": self.total_bytes,
            "new_bytes": int(self.doc["totals"].get("new_bytes", 0)),
            "objects": [
                {"name": o["name"], "bytes": o.get("bytes", 0)} for o in self.doc["objects"]
            ],
            "skipped": list(self.doc.get("skipped", [])),
            "valid": valid,
        }


def build_manifest(
    *,
    session_id: str,
    checkpoint_id: str,
    parent: str | None,
    kernel: dict[str, Any],
    origin: dict[str, Any],
    capture: dict[str, Any],
) -> dict[str, Any]:
    """Assemble the unsigned manifest from what the agent reported after writing its blobs.

    Raises ManifestError when the report breaks a rule (``schema``): nothing unchecked is signed.
    """
    check_content(capture)
    check_environment(kernel, origin)
    blobs = capture["blobs"]
    return {
        "format": FORMAT,
        "session_id": session_id,
        "checkpoint_id": checkpoint_id,
        "parent": parent,
        "created": iso(utcnow()),
        "kernel": kernel,
        "origin": origin,
        "objects": capture["objects"],
        "skipped": capture["skipped"],
        "storages": capture["storages"],
        "arrays": capture["arrays"],
        "registered": capture.get("registered", []),
        "pickle": capture["pickle"],
        **({"cells": capture["cells"]} if capture.get("cells") is not None else {}),
        **({"ambient": capture["ambient"]} if capture.get("ambient") is not None else {}),
        "blobs": blobs,
        "totals": {
            "bytes": sum(int(b["bytes"]) for b in blobs.values()),
            "new_bytes": int(capture.get("new_bytes", 0)),
            "objects": len(capture["objects"]),
            "skipped": len(capture["skipped"]),
        },
    }


def parse_manifest(doc: dict[str, Any]) -> Manifest:
    """Check a manifest (after its signature was verified); ManifestError names what is wrong."""
    if doc.get("format") != FORMAT:
        raise ManifestError(f"unknown checkpoint format {doc.get('format')!r}, expected {FORMAT}")
    for key in ("session_id", "checkpoint_id", "created", "totals"):
        if key not in doc:
            raise ManifestError(f"manifest misses {key!r}")
    try:
        check_session_id(doc["session_id"])
        check_checkpoint_id(doc["checkpoint_id"])
    except ValueError as e:
        raise ManifestError(str(e)) from None
    check_content(doc)
    totals = doc["totals"]
    if not isinstance(totals, dict) or totals.get("bytes") != sum(
        b["bytes"] for b in doc["blobs"].values()
    ):
        raise ManifestError("manifest totals do not add up to its blobs")
    return Manifest(doc)
