"""The kernel's credential for its own session: derived from the key the kernel already holds.

A kernel runs arbitrary user code, so it must never hold the server's token. What it does hold is
the HMAC key of its own ZMQ connection (Jupyter gives each kernel one; whoever has it can already
run code in that kernel). From that key and the kernel id, both sides compute the same capability:
the server recomputes it from the kernel manager's copy of the key and, when it matches, lets the
caller read and pause that one kernel's session — nothing else on the server. A new kernel (a
resume) has a new key, so the capability rotates with the kernel.

A kernel behind a gateway has a connection key only the gateway knows; the server gives it a key
of its own instead, derived from the kernel's id (``derived_key``), so that it too holds nothing
that opens another kernel's session.
"""

from __future__ import annotations

import hashlib
import hmac

SCHEME = "jupyter-gpu-pause-kernel"
_PURPOSE = b"jupyter-gpu-pause/kernel-capability/1\n"  # never a valid ZMQ message signature
_KEY_PURPOSE = b"jupyter-gpu-pause/gateway-kernel-key/1\n"


def capability(key: bytes, kernel_id: str) -> str:
    """The hex capability of ``kernel_id``, keyed by its connection key."""
    return hmac.new(key, _PURPOSE + kernel_id.encode(), hashlib.sha256).hexdigest()


def authorization(key: bytes, kernel_id: str) -> str:
    """The ``Authorization`` header value a kernel sends: ``<scheme> <kernel id>:<capability>``."""
    return f"{SCHEME} {kernel_id}:{capability(key, kernel_id)}"


def parse_authorization(header: str) -> tuple[str, str] | None:
    """``(kernel_id, capability)`` from a header value, or None when it is not ours."""
    scheme, _, rest = (header or "").strip().partition(" ")
    kernel_id, sep, cap = rest.strip().partition(":")
    if scheme.lower() != SCHEME or not sep or not kernel_id or not cap:
        return None
    return kernel_id, cap


def matches(key: bytes, kernel_id: str, presented: str) -> bool:
    """Constant-time check of a presented capability; an empty key never matches."""
    return bool(key) and hmac.compare_digest(capability(key, kernel_id), presented)


def derived_key(secret: bytes, kernel_id: str) -> bytes:
    """The key of one remote kernel: an HMAC of its id under a secret only the server holds.

    The server sends it to the kernel it starts under that id and recomputes it to check the
    kernel's capability; knowing it tells nothing about the key of any other id.
    """
    return hmac.new(secret, _KEY_PURPOSE + kernel_id.encode(), hashlib.sha256).digest()
