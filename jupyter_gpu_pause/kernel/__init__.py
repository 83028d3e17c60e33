"""Runs inside the kernel: registration API, magics, capture and restore.

Imports nothing from the server or Tornado.
"""

from .api import (
    check,
    last_restore,
    on_pause,
    on_restore,
    pause,
    rebuild,
    register,
    registered,
    session,
    unregister,
)

__all__ = [
    "check",
    "last_restore",
    "on_pause",
    "on_restore",
    "pause",
    "rebuild",
    "register",
    "registered",
    "session",
    "unregister",
]
