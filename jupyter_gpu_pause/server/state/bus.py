"""Every lifecycle event on jupyter_server's event bus, so other extensions and the Lab panel
hear of a pause or a resume the moment it happens instead of at their next poll.

The payload is a public contract (the schema in ``events/lifecycle.yaml``, documented in
docs/webhooks.md): the recorded event plus the session's path, state and kernel once it
happened. Webhooks send the same payload, so both are built here, in one place.
"""

from __future__ import annotations

import json
from pathlib import Path

from .model import Session

SCHEMA_ID = "https://jupyter-gpu-pause.dev/events/lifecycle"
SCHEMA_PATH = Path(__file__).parent / "events" / "lifecycle.yaml"


def lifecycle_payload(event: dict, s: Session) -> dict:
    """The schema's fields, exactly: ``time``, ``session_id``, ``type``, ``reason``,
    ``detail``, ``path``, ``state`` and ``kernel_id`` (the last three as they are now, just
    after the event)."""
    return {
        "time": event["time"],
        "session_id": event["session_id"],
        "type": str(event["type"]),  # a plain str, as the schema has it, not an EventType
        "reason": event["reason"] or "",
        "detail": json_snapshot(event.get("detail") or {}),
        "path": s.path,
        "state": s.state,
        "kernel_id": s.kernel_id,
    }


def json_snapshot(detail: dict) -> dict:
    """A copy of ``detail`` that only holds JSON values: the session may change it later, and
    a value JSON cannot carry (a datetime, a set) must not stop the event from going out."""
    return json.loads(json.dumps(detail, default=str))


class EventBus:
    """A ``SessionTable`` listener that emits each event on ``serverapp.event_logger``.

    ``emit`` validates the payload and schedules the subscribers as tasks of their own: it
    returns in well under a millisecond and never waits for a subscriber. Any error is
    logged, never raised into the operation that recorded the event.
    """

    def __init__(self, event_logger, log):
        self.event_logger, self.log = event_logger, log
        if SCHEMA_ID not in event_logger.schemas:  # (one logger, two apps: register once)
            event_logger.register_event_schema(SCHEMA_PATH)

    def __call__(self, event: dict, s: Session) -> None:
        try:
            self.event_logger.emit(schema_id=SCHEMA_ID, data=lifecycle_payload(event, s))
        except Exception:
            self.log.exception(
                "jupyter_gpu_pause: could not emit the %s event of %s on the event bus",
                event.get("type"),
                s.path,
            )
