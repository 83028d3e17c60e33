"""Whether a session's kernel can be paused at all, declared once.

A kernel that cannot be paused (not Python, a Python too old or without IPython, one whose
agent cannot run) would fail every pause the same way: the session says so once it is known
(``Session.pausable``, one ``unpausable`` event) and the idle monitor stops trying, doing what
the policy's ``unpausable`` key says instead (``monitor/monitor.py``).

Known from the kernelspec's language, from the agent's first request in a new kernel (the cell
log's ``track``), and from any check or pause that fails with one of ``UNPAUSABLE_REASONS``.
Other failures (a kernel that did not answer, a store that failed) say nothing of it: the next
pause may succeed.
"""

from __future__ import annotations

from ..state.model import Pausable, Session

# The failure reasons that mean no pause of this kernel can ever succeed: the same word is the
# ``reason`` of its ``pausable`` record, of its ``unpausable`` event and of the error that
# taught it.
UNPAUSABLE_REASONS = frozenset(
    {
        "unsupported-kernel",  # not a Python kernel: no agent can run in it
        "python-too-old",  # Python < 3.9
        "no-ipython",  # a Python kernel without IPython (the agent runs through it)
        "agent-refused",  # the kernel refused the agent the server brings
        "agent-missing",  # no agent in the kernel, and the server does not bring it
        "agent-version",  # the kernel's own agent is another version than the server's
    }
)


PAUSABLE: Pausable = {"ok": True}


def unpausable(reason: str, message: str) -> Pausable:
    return {"ok": False, "reason": reason, "message": message}


def language_says(language: str | None) -> Pausable | None:
    """What a kernelspec's language tells: a kernel that is not Python is never pausable;
    a Python one is pausable only once its agent answers (None: not known yet, as for a
    kernelspec whose language cannot be read now: a gateway's, before its list arrives)."""
    if language in (None, "python", "unknown"):
        return None
    return unpausable("unsupported-kernel", f"pause is not supported for {language} kernels")


def known_unpausable(s: Session) -> bool:
    """The session's kernel is known not to be pausable."""
    return s.pausable is not None and not s.pausable.get("ok")


def what_is_lost(language: str | None) -> str:
    """What shutting an unpausable kernel down loses, in plain words for a warning."""
    if language == "python":
        return (
            "every variable, import and object in its memory (no checkpoint can be made of "
            "this kernel)"
        )
    return (
        f"the whole in-memory state of this {language} kernel: its variables, functions and "
        "anything else it holds (no checkpoint can be made of it)"
    )
