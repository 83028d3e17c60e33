"""The signing key file: created once, private to its owner, never silently replaced.

The key signs every manifest; a manifest signed by someone else is refused before anything is
unpickled. So the file must be readable by its owner only, and a lost key must be noticed (the
server decides what to do about it: see ``Checkpoints``), never papered over with a new one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from jupyter_core.paths import secure_write

from .private import private_makedirs


class KeyFileError(Exception):
    """The signing key file cannot be trusted or read; the message says which file and why."""


MIN_KEY_BYTES = 16


def load_secret(path: str | os.PathLike[str]) -> bytes | None:
    """The HMAC key in ``path``, or None when the file does not exist.

    Refuses a key that others could read (group or world bits set): whoever reads the key can
    sign a manifest whose pickle runs code at resume. Refuses a file too short to be a key.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KeyFileError(f"cannot read the signing key {p}: {e.strerror}") from e
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"the signing key {p} is not a regular file")
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"the signing key {p} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"make it private with: chmod 600 {p}"
        )
    try:
        key = p.read_bytes().strip()
    except OSError as e:
        raise KeyFileError(f"cannot read the signing key {p}: {e.strerror}") from e
    if len(key) < MIN_KEY_BYTES:
        raise KeyFileError(
            f"the signing key {p} holds {len(key)} bytes, fewer than {MIN_KEY_BYTES}; it is "
            "damaged or not a key"
        )
    return key


def create_secret(path: str | os.PathLike[str]) -> bytes:
    """Create the HMAC key (32 random bytes as hex, mode 0600) unless it exists; return the key.

    The key is written in full to a private temporary file (``secure_write``) and then linked
    to its name, which fails when the name exists: two servers starting at once on an empty
    data dir never see a half-written key, and both end up with the one that was linked first.
    """
    p = Path(path)
    private_makedirs(str(p.parent))
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    try:
        with secure_write(str(tmp), binary=True) as f:
            f.write(secrets.token_hex(32).encode())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, p)
        except FileExistsError:
            pass  # another server won the race: use its key
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    key = load_secret(p)
    if key is None:  # deleted between link and read: refuse to guess
        raise KeyFileError(f"the signing key {p} vanished while it was being created")
    return key
