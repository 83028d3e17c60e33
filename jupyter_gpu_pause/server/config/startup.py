"""The configuration check at start, for what needs no room above ``config``: which sections
may hold which names, where things are kept, the message a traitlets error becomes, and a
warning about the environment. ``GpuPauseApp._check_configuration`` runs these beside the
checks that need the other rooms (a policy, the queue's URL, the Hub)."""

from __future__ import annotations

import os
import re

from traitlets import TraitError

from ...store import Store
from ...store.retention import Retention, parse_retention
from .checks import ConfigError, check_db_path, check_known_keys, check_secret_file, check_store
from .settings import GpuPauseSettings

_TRAIT = re.compile(r"The '(\w+)' trait of .*?(\w+)(?: object at 0x[0-9a-f]+>)? instance ")


def check_sections(config, classes) -> None:
    """``c.<Class>.<name>`` for a name that is not a setting of that class stops the server."""
    for cls in classes:
        known = set(cls.class_trait_names(config=True))
        check_known_keys(config.get(cls.__name__, {}), known, cls.__name__)


def check_storage(settings: GpuPauseSettings) -> tuple[Store, Retention]:
    """Where things are kept (``GpuPauseSettings``' first group) and which checkpoints are
    kept: the store and the parsed retention rules, or ConfigError naming the setting."""
    store = check_store(settings.store_url, settings.store_options, settings.store_timeout)
    try:
        retention = parse_retention(settings.retention)
    except ValueError as e:
        raise ConfigError(f"GpuPauseApp.retention: {e}") from None
    check_secret_file(settings.secret_file)
    check_db_path(settings.db_path)
    return store, retention


def trait_error_message(e: TraitError, configs) -> str:
    """Traitlets' message, led by ``<Class>.<trait> = <value>`` when it names one (the app's
    traits, or those of a class it configures: QuotaCapacity, StoreMaintenance…); the value
    is looked up in ``configs``, the first that has it."""
    text = str(e)
    m = _TRAIT.search(text)
    if m is None:
        return text
    name, owner = m.group(1), m.group(2)
    value = ""
    for config in configs:
        section = config.get(owner, {})
        if name in section:
            raw = section[name]
            raw = str(raw) if isinstance(raw, str) else raw  # a command-line value is deferred
            value = f" = {raw!r}"
            break
    return f"{owner}.{name}{value}: {text[m.end() :]}"


def warn_of_a_server_token(log) -> None:
    """jupyter_server passes its environment to every kernel: a token there is readable."""
    if os.environ.get("JUPYTER_TOKEN"):
        log.warning(
            "jupyter_gpu_pause: JUPYTER_TOKEN is set in the server's environment, and "
            "jupyter_server passes its environment to every kernel and terminal: any code "
            "a notebook runs can read the server's token. Use JUPYTER_TOKEN_FILE or "
            "c.IdentityProvider.token instead."
        )
