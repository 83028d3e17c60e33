"""The lifecycle event types, declared once: what ``SessionTable.record_event`` records, what
``GET gpu-pause/api/events`` lists, what the event bus and the webhooks carry.

The list is closed. The event schema (``events/lifecycle.yaml``) has ``type`` as an ``enum``
of exactly these values, so the bus refuses a type that is not here; the Lab's ``EventType``
(``labextension/src/tokens.ts``) and the table in docs/webhooks.md list them too, and
tests/test_event_vocabulary.py fails when any of the four differ. A new type goes into all
four, with the schema's ``version`` one higher: a reader holding the older schema would
refuse it.

Members are ``str``: ``EventType.PAUSED == "paused"``, and they serialise as the bare string.
"""

from __future__ import annotations

from enum import StrEnum

# An event's ``reason`` when someone other than the server's user asked for it on the user's
# behalf (an admin, or a JupyterHub service for one): its ``detail`` names them with ``by``,
# ``via`` and ``admin_message`` (``lifecycle/operations.Asker``, docs/webhooks.md).
ADMIN_REASON = "admin"


class EventType(StrEnum):
    """What happened to a session (docs/webhooks.md has each type's ``detail``)."""

    WARNED = "warned"  # a policy will pause or cull the kernel soon
    KEEPALIVE = "keepalive"  # a user postponed the policy
    PAUSED = "paused"  # the checkpoint is verified and the kernel stopped
    PAUSE_FAILED = "pause_failed"  # a pause failed or was refused
    RESUMED = "resumed"  # the state is back in a new kernel
    RESUME_FAILED = "resume_failed"  # a resume failed; the checkpoint is intact unless it says
    WAITING = "waiting"  # a resume waits for a GPU
    CANCELLED = "cancelled"  # a pause or a wait was cancelled
    CULLED = "culled"  # a policy shut a kernel down without a checkpoint
    CULL_FAILED = "cull_failed"  # a policy could not shut a kernel down
    GPU_HOLD_ALARM = "gpu_hold_alarm"  # a session has held a GPU for another alarm period
    CHECKPOINT_DELETED = "checkpoint_deleted"  # retention or a user deleted a checkpoint
    CHECKPOINTS_GONE = "checkpoints_gone"  # the store lost a paused session's checkpoints
    RECOVERED = "recovered"  # the store gave a paused session's checkpoints back
    DISCARDED = "discarded"  # a user discarded the session
    SERVER_STOP = "server_stop"  # every GPU session is paused: the server asks the Hub to stop it
    SERVER_STOP_FAILED = "server_stop_failed"  # the Hub did not stop the server
    REBUILT = "rebuilt"  # re-run cells made names the resume did not bring back
    REBUILD_FAILED = "rebuild_failed"  # a rebuild stopped (a cell raised) or asks to confirm
    SUSPENDED = "suspended"  # the GPU was released; the kernel lives on, its checkpoint written
    BUDGET_WARNED = "budget_warned"  # the user's GPU-hour budget passed warn_at this period
    BUDGET_HELD = "budget_held"  # it passed hold_at: GPU resumes are refused until it renews
    BUDGET_GRANTED = "budget_granted"  # an admin's grant lifted the hold
    UNPAUSABLE = "unpausable"  # the session's kernel is known not to be pausable

    @classmethod
    def failed(cls, operation: str) -> EventType:
        """The failure of ``operation`` (``pause``, ``resume``, ``cull``, ``rebuild``):
        ``pause_failed``…

        Raises ``ValueError`` for an operation without a failure type, rather than record a
        type the schema would refuse."""
        return cls(f"{operation}_failed")
