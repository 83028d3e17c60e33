"""The dry run: what a pause would save and skip, without writing anything (``gp.check()``, and
the agent's ``check`` for the server), and the test-restored plan a capture falls back to."""

from __future__ import annotations

from ..units import count_text, size_text
from .ambient import describe as describe_ambient
from .capture import CaptureError
from .registry import plan_args
from .trial import verified_plan


def plan(shell, mode: str, exclude: dict | None = None, test_restore: bool = True):
    """The plan, test-restored in a forked copy of this kernel (``trial.py``): what would not
    load back is skipped now, ``exclude`` with it."""
    ns, hidden = shell.user_ns, shell.user_ns_hidden
    return verified_plan(ns, hidden, *plan_args(mode), exclude=exclude, enabled=test_restore)


class CheckReport(dict):
    """The answer of ``gp.check()``: a dict that prints as a readable table."""

    def __repr__(self) -> str:
        n = count_text(len(self["objects"]), "object")
        lines = [f"A pause would save {n}, {size_text(self['bytes'])}:"]
        for o in self["objects"]:
            flag = " (registered)" if o.get("required") else ""
            lines.append(f"  {o['name']:<24} {size_text(o['bytes']):>10}{flag}")
        if self["skipped"]:
            lines.append(f"Cannot be saved ({len(self['skipped'])}):")
            lines += [f"  {s['name']:<24} {s['reason']}" for s in self["skipped"]]
        if self.get("unverified"):
            u = self["unverified"]
            lines.append(f"Saved but not test-restored ({u['reason']}): {', '.join(u['names'])}")
        loose = (self.get("ambient") or {}).get("not_carried") or []
        if loose:
            lines.append(f"Will not continue after the resume ({len(loose)}):")
            lines += [f"  {x['name']:<24} {x['reason']}" for x in loose]
        if self.get("error"):
            lines.append(f"Pause would FAIL: {self['error']}")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def dry_run(
    shell, mode: str = "namespace", test_restore: bool = True, with_ambient: bool = True
) -> CheckReport:
    """What a pause would save and skip, without writing anything; with ``with_ambient``,
    what of the process around the namespace it would carry and what cannot travel."""
    # before the test-restore forks its child, which is no child of the user's
    around = describe_ambient() if with_ambient else None
    try:
        verified = plan(shell, mode, test_restore=test_restore)
    except CaptureError as e:
        return CheckReport(
            objects=[], skipped=[], bytes=0, error=str(e), unverified=None, ambient=around
        )
    objects = [
        {"name": o["name"], "bytes": o["bytes"], "required": o.get("required", False)}
        for o in verified.objects
        if o["kind"] != "hooks"
    ]
    return CheckReport(
        objects=objects,
        skipped=verified.skipped,
        bytes=verified.total_bytes,
        error=None,
        unverified=verified.unverified,
        ambient=around,
    )
