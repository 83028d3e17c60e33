"""Hashes and signatures: the two checks a checkpoint must pass before anything is unpickled.

Blob names are the xxh3-128 of their content (fast enough to hash at memory bandwidth, so the
hash never becomes the bottleneck of a pause). Manifests carry an HMAC-SHA256 over their
canonical JSON, keyed by a per-installation secret, so a manifest edited by hand, or written by
someone without the key, is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

import xxhash


class IntegrityError(Exception):
    """A checkpoint failed a check; ``check`` names which one (signature, blob hash, size, …)."""

    def __init__(self, message: str, check: str):
        super().__init__(message)
        self.check = check


def blob_hash(data) -> str:
    """xxh3-128 hex digest of a bytes-like object (no copy for memoryviews and buffers)."""
    return xxhash.xxh3_128_hexdigest(data)


class StreamingHash:
    """Incremental xxh3-128 for data read in chunks."""

    def __init__(self):
        self._h = xxhash.xxh3_128()

    def update(self, data) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def canonical_json(doc: dict) -> bytes:
    """The exact bytes a signature covers: sorted keys, no whitespace, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def load_or_create_secret(path: str | os.PathLike) -> bytes:
    """Read the HMAC key, creating it (32 random bytes, mode 0600) on first use.

    Created with O_EXCL so two servers starting at once agree on one key.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = p.read_bytes().strip()
        if len(key) < 16:
            raise ValueError(
                f"secret file {p} is shorter than 16 bytes; delete it to make a new one"
            ) from None
        return key
    key = secrets.token_hex(32).encode()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())
    return key


class Signer:
    """Signs and verifies manifests with HMAC-SHA256 over their canonical JSON."""

    def __init__(self, key: bytes):
        self._key = key

    @classmethod
    def from_file(cls, path) -> Signer:
        return cls(load_or_create_secret(path))

    def signature(self, doc: dict) -> str:
        body = {k: v for k, v in doc.items() if k != "signature"}
        return hmac.new(self._key, canonical_json(body), hashlib.sha256).hexdigest()

    def sign(self, doc: dict) -> dict:
        signed = dict(doc)
        signed["signature"] = self.signature(doc)
        return signed

    def verify(self, doc: dict) -> None:
        """Raise IntegrityError unless the manifest's signature matches its content."""
        sig = doc.get("signature")
        if not isinstance(sig, str):
            raise IntegrityError("the manifest carries no signature", "signature")
        if not hmac.compare_digest(sig, self.signature(doc)):
            raise IntegrityError(
                "the manifest signature does not match its content (edited, or signed with "
                "another key)",
                "signature",
            )
