"""The session commands: list, show, pause, resume, cancel, keepalive, checkpoints, discard.

Each resolves NAME (``names``), makes one REST call and prints the answer; ``--json`` prints
the REST answer itself (``discard``, a 204 there, prints a small object of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traitlets import Bool, Unicode

from ..client.types import CheckpointBrief, Session
from ..units import age_text, count_text, size_text
from .base import COMMON_ALIASES, COMMON_FLAGS, Command, seconds
from .errors import USAGE, CliError
from .follow import follow
from .names import resolve
from .output import Output


def _flag(section: str, trait: str, help_: str):
    return ({section: {trait: True}}, help_)


def _checkpoint_text(ck: CheckpointBrief | None) -> str:
    if not ck:
        return ""
    return f"{ck['id']} ({size_text(ck.get('bytes') or 0)})"


def _outcome(s: Session) -> str:
    """``path: what happened`` (the server's message already names the state)."""
    return f"{s['path']}: {s.get('message') or s['state']}"


class ListCommand(Command):
    """List the sessions this server tracks."""

    name = "jupyter-gpu-pause-list"
    description = "List the sessions: id, state, notebook, kernel, idle time, checkpoint."

    def run(self, out: Output):
        self.positional(0)
        doc = {"sessions": self.client(out).sessions()}
        if out.json:
            return out.document(doc)
        rows = []
        for s in doc["sessions"]:
            idle = s.get("idle_seconds")
            rows.append(
                [
                    s["id"][:8] if out.rich else s["id"],
                    s["state"],
                    s["path"],
                    s.get("kernel_name"),
                    age_text(idle) if idle is not None else "",
                    (s.get("checkpoint") or {}).get("id", ""),
                    s.get("message") or "",
                ]
            )
        if not rows and not out.json:
            out.note("no sessions")
        out.table(["ID", "STATE", "NOTEBOOK", "KERNEL", "IDLE", "CHECKPOINT", "MESSAGE"], rows)


class ShowCommand(Command):
    name = "jupyter-gpu-pause-show"
    description = "Show one session in full. NAME: its id, the start of its id, or its notebook."
    args = "NAME"

    def run(self, out: Output):
        (name,) = self.positional(1)
        client = self.client(out)
        s = client.session(resolve(client, name))
        if out.json:
            return out.document(s)
        # optional parts, each read field by field
        gpu: Mapping[str, Any] = s.get("gpu") or {}
        progress: Mapping[str, Any] = s.get("progress") or {}
        acc: Mapping[str, Any] = s.get("accounting") or {}
        out.fields(
            [
                ("id", s["id"]),
                ("notebook", s["path"]),
                ("state", s["state"]),
                ("message", s.get("message")),
                ("kernel", f"{s.get('kernel_name')} {s.get('kernel_id') or '(not running)'}"),
                ("idle", age_text(idle) if (idle := s.get("idle_seconds")) is not None else ""),
                ("pause at", s.get("pause_at") and f"{s['pause_at']} (policy {s.get('policy')})"),
                ("gpu", gpu.get("memory_bytes") and f"{size_text(gpu['memory_bytes'])} on "
                 f"{', '.join(gpu.get('devices') or []) or 'a GPU'}"),
                ("checkpoint", _checkpoint_text(s.get("checkpoint"))),
                ("progress", progress.get("phase")),
                ("queue", s.get("queue_position")),
                ("error", (s.get("error") or {}).get("message")),
                ("gpu-hours", acc and f"held {acc.get('gpu_seconds_held', 0) / 3600:.2f}, "
                 f"idle {acc.get('gpu_seconds_idle', 0) / 3600:.2f}, "
                 f"reclaimed {acc.get('gpu_seconds_reclaimed', 0) / 3600:.2f}"),
            ]
        )  # fmt: skip


class _Operation(Command):
    """pause / resume: start it, and with ``--wait`` follow it to the end."""

    wait = Bool(False, config=True, help="Follow the operation to its end (progress bar).")
    kind = ""
    args = "NAME"

    def body(self) -> dict:
        """The operation's options, as keyword arguments of the client's method."""
        return {}

    def run(self, out: Output):
        (name,) = self.positional(1)
        body = self.body()
        client = self.client(out)
        s = resolve(client, name)
        s = getattr(client, self.kind)(s, **body)
        if not self.wait:
            if out.json:
                return out.document(s)
            out.line(_outcome(s))
            return None
        s = follow(client, s, self.kind, out)  # OperationFailed (exit 1) after --json's document
        if out.json:
            return out.document(s)
        out.line(_outcome(s))
        return None


class PauseCommand(_Operation):
    name = "jupyter-gpu-pause-pause"
    description = (
        "Pause a session: checkpoint its kernel to the store, then stop it. With --wait, "
        "follow it to the end; exit 1 if it failed (the kernel then still runs, untouched)."
    )
    kind = "pause"
    flags = {**COMMON_FLAGS, "wait": _flag("_Operation", "wait", "Follow the pause to its end.")}


class ResumeCommand(_Operation):
    name = "jupyter-gpu-pause-resume"
    description = (
        "Resume a paused session into a new kernel with its variables. With --wait, follow "
        "it to the end (waiting for a GPU included); exit 1 if it failed."
    )
    kind = "resume"
    checkpoint = Unicode(
        None, allow_none=True, config=True, help="Resume from this checkpoint (default: newest)."
    )
    cpu = Bool(False, config=True, help="Resume on the CPU: no GPU, no queue.")
    any_device = Bool(
        False, config=True, help="Resume on a GPU if one is free now, else on the CPU."
    )
    into_kernel = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Restore into this running kernel of the notebook (its variables are overwritten).",
    )
    aliases = {
        **COMMON_ALIASES,
        "checkpoint": "ResumeCommand.checkpoint",
        "into-kernel": "ResumeCommand.into_kernel",
    }
    flags = {
        **COMMON_FLAGS,
        "wait": _flag("_Operation", "wait", "Follow the resume to its end."),
        "cpu": _flag("ResumeCommand", "cpu", "Resume on the CPU (no GPU, no queue)."),
        "any": _flag("ResumeCommand", "any_device", "A GPU if free now, else the CPU."),
    }

    def body(self) -> dict:
        if self.cpu and self.any_device:
            raise CliError("give --cpu or --any, not both", USAGE)
        return {
            "checkpoint_id": self.checkpoint or None,
            "device": ("cpu" if self.cpu else "any") if self.cpu or self.any_device else None,
            "into_kernel": self.into_kernel or None,
        }


class CancelCommand(Command):
    name = "jupyter-gpu-pause-cancel"
    description = (
        "Cancel a pause in progress (the kernel goes on, untouched) or a resume waiting "
        "for a GPU (the session stays paused)."
    )
    args = "NAME"

    def run(self, out: Output):
        (name,) = self.positional(1)
        client = self.client(out)
        s = client.cancel(resolve(client, name))
        if out.json:
            return out.document(s)
        out.line(_outcome(s))


class KeepaliveCommand(Command):
    name = "jupyter-gpu-pause-keepalive"
    description = (
        "Keep a session from being auto-paused for SECONDS (or 90m, 2h…), up to the "
        "policy's max_keepalive."
    )
    args = "NAME SECONDS"

    def run(self, out: Output):
        name, length = self.positional(2)
        n = seconds(length, "SECONDS")
        client = self.client(out)
        s = client.keepalive(resolve(client, name), int(n))
        if out.json:
            return out.document(s)
        out.line(f"{s['path']}: kept alive for {age_text(n)} — {s.get('message') or ''}")


class CheckpointsCommand(Command):
    name = "jupyter-gpu-pause-checkpoints"
    description = "List a session's checkpoints in the store, newest first, with their validity."
    args = "NAME"

    def run(self, out: Output):
        (name,) = self.positional(1)
        client = self.client(out)
        doc = {"checkpoints": client.checkpoints(resolve(client, name))}
        if out.json:
            return out.document(doc)
        rows = [
            [
                c["id"],
                c.get("created") or "",
                size_text(n) if (n := c.get("bytes")) is not None else "",
                size_text(new) if (new := c.get("new_bytes")) is not None else "",
                count_text(len(c.get("objects") or []), "object"),
                len(c.get("skipped") or []),
                "yes" if c.get("valid") else f"NO: {c.get('problem') or 'invalid'}",
            ]
            for c in doc["checkpoints"]
        ]
        if not rows:
            out.note("no checkpoints")
        out.table(["ID", "CREATED", "SIZE", "NEW", "OBJECTS", "SKIPPED", "VALID"], rows)


class DiscardCommand(Command):
    name = "jupyter-gpu-pause-discard"
    description = (
        "Forget a session that is not running (paused, failed). Its checkpoints stay in the "
        "store unless --delete-checkpoints is given."
    )
    args = "NAME"
    delete_checkpoints = Bool(False, config=True, help="Also delete its checkpoints.")
    flags = {
        **COMMON_FLAGS,
        "delete-checkpoints": _flag(
            "DiscardCommand", "delete_checkpoints", "Also delete the session's checkpoints."
        ),
    }

    def run(self, out: Output):
        (name,) = self.positional(1)
        client = self.client(out)
        s = resolve(client, name)
        client.delete(s, delete_checkpoints=self.delete_checkpoints)
        if out.json:
            return out.document(
                {
                    "session_id": s["id"],
                    "path": s["path"],
                    "discarded": True,
                    "checkpoints_deleted": self.delete_checkpoints,
                }
            )
        kept = "its checkpoints deleted" if self.delete_checkpoints else "its checkpoints kept"
        out.line(f"{s['path']}: discarded ({kept})")
