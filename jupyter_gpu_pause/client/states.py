"""When a pause or a resume has ended, and whether it did what was asked: the rules a script
(and the CLI's ``--wait``) needs to follow an operation by looking at its session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUNNING = ("active", "idle")
# the states in which each operation is still going on
GOING = {"pause": ("pausing",), "resume": ("waiting", "restoring")}


def suspended_checkpoint(s: Mapping[str, Any]) -> str | None:
    """A suspended session's checkpoint: ``writing``, ``written`` (kept) or ``failed``."""
    return (s.get("suspended") or {}).get("checkpoint") if s["state"] == "suspended" else None


def going(kind: str, s: Mapping[str, Any]) -> bool:
    """The operation goes on: a pause is not over while a suspended kernel's checkpoint is
    being written (docs/suspend.md)."""
    return s["state"] in GOING[kind] or (kind == "pause" and suspended_checkpoint(s) == "writing")


def succeeded(kind: str, s: Mapping[str, Any]) -> bool:
    """The ended operation did what was asked: paused (or suspended with its checkpoint
    written), or running again."""
    if kind == "pause":
        return s["state"] == "paused" or suspended_checkpoint(s) == "written"
    return s["state"] in RUNNING


def error_text(s: Mapping[str, Any]) -> str:
    err = s.get("error") or {}
    return err.get("message") or s.get("message") or f"the session is {s['state']}"
