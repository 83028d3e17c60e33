"""Every route under ``{base_url}gpu-pause/api/``, in the order Tornado tries them: the
catch-all last, so an unknown path is a JSON 404 too."""

from __future__ import annotations

from .budget import budget_handlers
from .handlers import (
    SID,
    CancelHandler,
    CapacityHandler,
    CheckHandler,
    CheckpointsHandler,
    EventsHandler,
    KeepaliveHandler,
    KernelPauseHandler,
    KernelRebuiltHandler,
    KernelSessionHandler,
    PauseHandler,
    PoliciesHandler,
    RebuildHandler,
    ReportHandler,
    ResumeHandler,
    SessionHandler,
    SessionsHandler,
    StoreGcHandler,
    UnknownHandler,
)
from .spec import SpecHandler


def handlers() -> list[tuple[str, type]]:
    base = r"/gpu-pause/api"
    return [
        (rf"{base}/sessions", SessionsHandler),
        (rf"{base}/sessions/{SID}", SessionHandler),
        (rf"{base}/sessions/{SID}/pause", PauseHandler),
        (rf"{base}/sessions/{SID}/resume", ResumeHandler),
        (rf"{base}/sessions/{SID}/cancel", CancelHandler),
        (rf"{base}/sessions/{SID}/check", CheckHandler),
        (rf"{base}/sessions/{SID}/rebuild", RebuildHandler),
        (rf"{base}/sessions/{SID}/keepalive", KeepaliveHandler),
        (rf"{base}/sessions/{SID}/checkpoints", CheckpointsHandler),
        (rf"{base}/policies", PoliciesHandler),
        (rf"{base}/capacity", CapacityHandler),
        (rf"{base}/events", EventsHandler),
        (rf"{base}/report", ReportHandler),
        (rf"{base}/store/gc", StoreGcHandler),
        *budget_handlers(base),
        (rf"{base}/kernel/session", KernelSessionHandler),
        (rf"{base}/kernel/pause", KernelPauseHandler),
        (rf"{base}/kernel/rebuilt", KernelRebuiltHandler),
        (rf"{base}/spec.yaml", SpecHandler),
        (rf"{base}(?:/.*)?", UnknownHandler),
    ]
