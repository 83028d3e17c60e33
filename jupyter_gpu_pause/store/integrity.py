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
import re
from typing import TYPE_CHECKING, Any, cast

try:
    import xxhash
except ImportError:  # a kernel whose environment lacks it: its blobs go through the server
    xxhash = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from typing import TypeAlias  # novm: for the type checker only

    import numpy as np
    from _typeshed import ReadableBuffer

    # Bytes in memory: any object with the buffer protocol. numpy's stubs give ndarray that
    # protocol only for Python >= 3.12, so arrays are named too.
    BytesLike: TypeAlias = ReadableBuffer | np.ndarray[Any, Any]

HASH_RE = re.compile(r"^[0-9a-f]{32}\Z")


class IntegrityError(Exception):
    """A checkpoint failed a check; ``check`` names which one (signature, blob hash, size, …)."""

    def __init__(self, message: str, check: str):
        super().__init__(message)
        self.check = check


def check_blob_hash(h: object) -> str:
    """``h`` if it is an xxh3-128 hex digest, else ValueError (a hash names a store path)."""
    if not isinstance(h, str) or not HASH_RE.match(h):
        raise ValueError(f"{h!r} is not a blob hash (32 lowercase hex digits)")
    return h


def _xxhash() -> Any:
    """The xxhash module, or ImportError saying why it is needed. A kernel whose environment
    lacks it writes and reads blobs through the server (``store/spool.py``), never hashing."""
    if xxhash is None:
        raise ImportError("jupyter_gpu_pause hashes blobs with xxhash, which is not installed")
    return xxhash


def blob_hash(data: BytesLike) -> str:
    """xxh3-128 hex digest of a bytes-like object (no copy for memoryviews and buffers)."""
    digest: str = _xxhash().xxh3_128_hexdigest(cast("ReadableBuffer", data))
    return digest


class StreamingHash:
    """Incremental xxh3-128 for data read in chunks."""

    def __init__(self) -> None:
        self._h = _xxhash().xxh3_128()

    def update(self, data: ReadableBuffer) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        digest: str = self._h.hexdigest()
        return digest


def canonical_json(doc: dict[str, Any]) -> bytes:
    """The exact bytes a signature covers: sorted keys, no whitespace, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Signer:
    """Signs and verifies manifests with HMAC-SHA256 over their canonical JSON."""

    def __init__(self, key: bytes):
        self._key = key

    def signature(self, doc: dict[str, Any]) -> str:
        body = {k: v for k, v in doc.items() if k != "signature"}
        return hmac.new(self._key, canonical_json(body), hashlib.sha256).hexdigest()

    def sign(self, doc: dict[str, Any]) -> dict[str, Any]:
        signed = dict(doc)
        signed["signature"] = self.signature(doc)
        return signed

    def verify(self, doc: dict[str, Any]) -> None:
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
