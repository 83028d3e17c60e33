"""Honest configuration: every setting is checked when the server starts, and a bad one stops it
with a message naming the setting, its value and what to do.

Traitlets checks types; this module checks what types cannot say: that the store URL names a
filesystem fsspec has, that ``store_options`` holds no secret (the options travel into every
kernel, which runs user code) and only options that filesystem takes, that the signing key is
private, and that the records database can live where it is asked to.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
from urllib.parse import urlsplit

import fsspec

from ...store import Store
from ...store.keyfile import KeyFileError, load_secret
from ...store.private import private_makedirs


class ConfigError(ValueError):
    """A setting is wrong; the message starts with ``GpuPauseApp.<trait>``."""


# Option names that carry a credential, in any fsspec filesystem (s3fs, gcsfs, adlfs, sshfs…).
_SECRET_WORDS = ("secret", "password", "passwd", "token", "credential", "private", "api_key")
_SECRET_NAMES = {"key", "access_key", "account_key", "sas_token", "connection_string"}
# Values of gcsfs's ``token`` that name a method, not a credential.
_TOKEN_METHODS = {"anon", "google_default", "cloud", "cache", "browser"}
# Options every fsspec filesystem takes (handled by AbstractFileSystem and its metaclass).
_COMMON_OPTIONS = {
    "skip_instance_cache",
    "use_listings_cache",
    "listings_expiry_time",
    "max_paths",
    "asynchronous",
    "loop",
    "batch_size",
}
# In-process filesystems: the kernel writes blobs in its own process, the server reads them in
# another, so a store must be shared between processes.
_PROCESS_LOCAL = {"memory"}

_CREDENTIALS_HELP = (
    "put credentials where the filesystem's own credential chain finds them, in the server's "
    "environment (for S3: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE with "
    "~/.aws/credentials, or an instance or pod role); see docs/security.md, 'Store credentials'"
)


def _is_secret(name: str, value) -> bool:
    low = name.lower()
    if low == "token" and isinstance(value, str) and value in _TOKEN_METHODS:
        return False
    if low == "anon":
        return False
    return (
        low in _SECRET_NAMES
        or any(w in low for w in _SECRET_WORDS)
        or low.endswith("key")  # SSECustomerKey, account_key, api_key…
        or "access_key" in low  # aws_access_key_id: half of a credential pair
    )


def _secret_paths(options, prefix: str = "") -> list[str]:
    found = []
    if isinstance(options, dict):
        for k, v in options.items():
            path = f"{prefix}{k}"
            if isinstance(k, str) and _is_secret(k, v) and v not in (None, "", False):
                found.append(path)
            found += _secret_paths(v, path + ".")
    return found


def _known_options(fs_class) -> set[str]:
    names = set(_COMMON_OPTIONS)
    for klass in fs_class.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                names.add(p.name)
    return names


def check_store(url: str, options: dict, timeout: float = 30.0) -> Store:
    """The store the configuration names, or ConfigError saying why there is none."""
    label = f"GpuPauseApp.store_url = {url!r}"
    if not url:
        raise ConfigError(f"{label}: give a folder or an fsspec URL such as s3://bucket/prefix")
    parts = urlsplit(url)
    if parts.password:
        raise ConfigError(f"{label}: the URL holds a password; {_CREDENTIALS_HELP}")
    try:
        json.dumps(options)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"GpuPauseApp.store_options must hold plain JSON values (they are sent to every "
            f"kernel): {e}"
        ) from None
    secrets = _secret_paths(options)
    if secrets:
        raise ConfigError(
            f"GpuPauseApp.store_options holds credentials ({', '.join(secrets)}). The options "
            f"travel into every kernel, which runs user code; {_CREDENTIALS_HELP}"
        )
    protocol = fsspec.core.split_protocol(url.split("::")[-1])[0] or "file"
    if protocol in _PROCESS_LOCAL:
        raise ConfigError(
            f"{label}: a {protocol}:// store lives inside one process, but kernels write their "
            "blobs from their own process; use a folder or an object store"
        )
    try:
        fs_class = fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"{label}: {e}") from None
    if "::" not in url:  # chained URLs take options per protocol: fsspec sorts them out
        unknown = sorted(set(options) - _known_options(fs_class))
        if unknown:
            hints = {
                k: difflib.get_close_matches(k, _known_options(fs_class), n=1) for k in unknown
            }
            said = ", ".join(
                f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items()
            )
            raise ConfigError(
                f"GpuPauseApp.store_options has option(s) that {fs_class.__name__} does not "
                f"take: {said}"
            )
    try:
        store = Store(url, options, timeout=timeout)
    except Exception as e:
        raise ConfigError(f"{label}: {type(e).__name__}: {e}") from None
    if store.local:
        try:
            private_makedirs(store.root)
        except OSError as e:
            raise ConfigError(
                f"{label}: cannot create the folder {store.root}: {e.strerror}"
            ) from None
    return store


def check_secret_file(path: str) -> None:
    """An existing key must be private and readable; a missing one is created on first use."""
    if not path:
        raise ConfigError("GpuPauseApp.secret_file is empty; give the path of the signing key")
    try:
        load_secret(path)
    except KeyFileError as e:
        raise ConfigError(f"GpuPauseApp.secret_file = {path!r}: {e}") from None
    if os.path.exists(path):
        return
    try:
        private_makedirs(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise ConfigError(
            f"GpuPauseApp.secret_file = {path!r}: cannot create its folder: {e.strerror}"
        ) from None


def check_db_path(path: str) -> None:
    """The records database must be a file (or not exist yet) in a folder we can create."""
    label = f"GpuPauseApp.db_path = {path!r}"
    if not path:
        raise ConfigError("GpuPauseApp.db_path is empty; give the path of the records database")
    if os.path.isdir(path):
        raise ConfigError(f"{label}: this is a folder; give the path of a database file")
    try:
        private_makedirs(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        raise ConfigError(f"{label}: cannot create its folder: {e.strerror}") from None


def check_known_keys(section: dict, known: set[str], cls: str) -> None:
    """``c.GpuPauseApp.<name>`` for a name that is not a setting stops the server.

    Traitlets only warns; but a misspelt or not-yet-built setting the server ignores is a
    setting that silently does nothing.
    """
    for key in section:
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{cls}.{key} is not a setting of jupyter_gpu_pause{hint} "
            f"(settings: {', '.join(sorted(known))})"
        )


def twice(names) -> str | None:
    """The first name given twice (policies and budgets each need unique names), or None."""
    seen = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None
