"""What a notebook registered: names a pause must save, and hooks around a pause and a restore.

One module-level registry, so that ``import jupyter_gpu_pause as gp`` in any cell sees the same
registrations; the registry itself is saved with the checkpoint and restored. Both the user's
API (``api.py``) and the server's agent (``agent.py``) use it, and it imports neither.
"""

from __future__ import annotations

from ..store.schema import is_variable_name


class _Registry:
    def __init__(self):
        self.names: list[str] = []
        self.on_pause: list = []
        self.on_restore: list = []
        self.last_restore: dict | None = None


REGISTRY = _Registry()


def register(*names: str) -> list[str]:
    """Mark variables as required: a pause fails (and changes nothing) if one cannot be saved.

    Names are looked up in the notebook namespace at pause time, so registering before the
    variable exists is fine.
    """
    for n in names:
        if not is_variable_name(n):
            raise ValueError(f"{n!r} is not a variable name")
    for n in names:
        if n not in REGISTRY.names:
            REGISTRY.names.append(n)
    return registered()


def unregister(*names: str) -> list[str]:
    """Stop requiring these names (they are still saved best effort in namespace mode)."""
    REGISTRY.names[:] = [n for n in REGISTRY.names if n not in names]
    return registered()


def registered() -> list[str]:
    return list(REGISTRY.names)


def on_pause(fn):
    """Call ``fn()`` before each capture (e.g. to flush a logger). Usable as a decorator."""
    if not callable(fn):
        raise TypeError("on_pause needs a callable")
    REGISTRY.on_pause.append(fn)
    return fn


def on_restore(fn):
    """Call ``fn()`` after each restore (e.g. to rebuild a DataLoader). Usable as a decorator."""
    if not callable(fn):
        raise TypeError("on_restore needs a callable")
    REGISTRY.on_restore.append(fn)
    return fn


def last_restore() -> dict | None:
    """The report of the restore that built this kernel: restored, failed and skipped names."""
    return REGISTRY.last_restore


def plan_args(mode: str) -> tuple[list[str], str, dict[str, list]]:
    """The registrations as a capture's plan takes them: ``(names, mode, hooks)``."""
    hooks = {"on_pause": list(REGISTRY.on_pause), "on_restore": list(REGISTRY.on_restore)}
    return list(REGISTRY.names), mode, hooks
