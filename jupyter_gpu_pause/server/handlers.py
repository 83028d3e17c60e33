"""REST handlers under ``{base_url}gpu-pause/api/``: parse, call one service method, serialize.

Every verb is authenticated and authorized against the resource ``gpu_pause``; domain errors
become ``{"message", "reason"}`` with their status in one place (``_maps_errors``).
"""

from __future__ import annotations

import functools
import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from ..store.format import iso, parse_iso
from .errors import BadRequest, GpuPauseError

AUTH_RESOURCE = "gpu_pause"
SID = r"(?P<session_id>[0-9a-fA-F-]{1,64})"


class _ApiError(web.HTTPError):
    """An HTTPError that keeps the domain message verbatim (tornado escapes ``%`` otherwise)."""

    def __init__(self, error: GpuPauseError):
        super().__init__(error.status, "%s", error.message, reason=error.reason)
        self.message = error.message


def _maps_errors(method):
    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        try:
            await self.lifecycle.wait_started()
            return await method(self, *args, **kwargs)
        except GpuPauseError as e:
            raise _ApiError(e) from e

    return wrapper


def api(method):
    """authenticated → authorized(gpu_pause) → domain errors mapped."""
    return web.authenticated(authorized(_maps_errors(method)))


class BaseHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def _track_activity(self) -> bool:
        # The Lab panel polls these GETs; they must not keep an idle server awake
        # (shutdown_no_activity_timeout). Actions (POST, DELETE) are activity.
        return self.request.method != "GET"

    @property
    def monitor(self):
        return self.settings["gpu_pause_monitor"]

    @property
    def lifecycle(self):
        return self.settings["gpu_pause"]

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, _ApiError):
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"message": exc.message, "reason": exc.reason}))
            return
        super().write_error(status_code, **kwargs)

    def body(self, allowed: dict) -> dict:
        """The JSON object body, checked against ``allowed`` = {field: type(s)}."""
        raw = self.request.body or b"{}"
        try:
            data = json.loads(raw)
        except ValueError:
            raise BadRequest("the request body is not valid JSON", "bad-json") from None
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object", "bad-json")
        for key, value in data.items():
            if key not in allowed:
                raise BadRequest(
                    f"unknown field {key!r}; expected one of: {', '.join(allowed) or 'none'}",
                    "unknown-field",
                )
            if value is not None and not isinstance(value, allowed[key]):
                raise BadRequest(
                    f"field {key!r} must be a {allowed[key].__name__}, not {json.dumps(value)}",
                    "bad-field",
                )
        return data

    def send(self, obj, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(obj))


class SessionsHandler(BaseHandler):
    @api
    async def get(self):
        sessions = await self.lifecycle.list(
            path=self.get_query_argument("path", None),
            kernel_id=self.get_query_argument("kernel_id", None),
        )
        self.send({"sessions": sessions})


class SessionHandler(BaseHandler):
    @api
    async def get(self, session_id):
        await self.lifecycle.refresh()
        self.send(self.lifecycle.view(self.lifecycle.get(session_id)))

    @api
    async def delete(self, session_id):
        flag = self.get_query_argument("delete_checkpoints", "false").lower()
        if flag not in ("true", "false", "1", "0"):
            raise BadRequest(f"delete_checkpoints must be true or false, not {flag!r}", "bad-query")
        await self.lifecycle.delete(session_id, delete_checkpoints=flag in ("true", "1"))
        self.set_status(204)
        self.finish()


class PauseHandler(BaseHandler):
    @api
    async def post(self, session_id):
        self.body({})
        s = await self.lifecycle.pause(session_id, reason="user")
        self.send(self.lifecycle.view(s), 202)


class ResumeHandler(BaseHandler):
    @api
    async def post(self, session_id):
        b = self.body({"checkpoint_id": str, "device": str, "into_kernel": str})
        s = await self.lifecycle.resume(
            session_id,
            checkpoint_id=b.get("checkpoint_id"),
            device="any" if b.get("device") is None else b["device"],
            into_kernel=b.get("into_kernel"),
        )
        self.send(self.lifecycle.view(s), 202)


class CheckHandler(BaseHandler):
    """Dry run of a pause: what would be saved and what could not be, changing nothing."""

    @api
    async def post(self, session_id):
        self.body({})
        self.send(await self.lifecycle.check(session_id))


class CancelHandler(BaseHandler):
    @api
    async def post(self, session_id):
        self.body({})
        s = await self.lifecycle.cancel(session_id)
        self.send(self.lifecycle.view(s))


class KeepaliveHandler(BaseHandler):
    @api
    async def post(self, session_id):
        b = self.body({"seconds": int})
        if "seconds" not in b:
            raise BadRequest('give the keep-alive length: {"seconds": 3600}', "bad-seconds")
        await self.monitor.keepalive(session_id, b["seconds"])
        self.send(self.lifecycle.view(self.lifecycle.get(session_id)))


class PoliciesHandler(BaseHandler):
    @api
    async def get(self):
        self.send({"policies": [p.to_json() for p in self.monitor.policies]})


class CheckpointsHandler(BaseHandler):
    @api
    async def get(self, session_id):
        self.send({"checkpoints": await self.lifecycle.list_checkpoints(session_id)})


class CapacityHandler(BaseHandler):
    @api
    async def get(self):
        self.send(self.lifecycle.capacity.describe())


class EventsHandler(BaseHandler):
    @api
    async def get(self):
        since = self.get_query_argument("since", None)
        if since is not None:
            try:
                since = iso(parse_iso(since))
            except (ValueError, OverflowError):
                raise BadRequest(
                    f"since must be an ISO 8601 time such as 2026-12-02T10:15:00Z, not {since!r}",
                    "bad-query",
                ) from None
        events = await self.lifecycle.events(
            since=since, session_id=self.get_query_argument("session_id", None)
        )
        self.send({"events": events})


class ReportHandler(BaseHandler):
    """GPU-hours held, idle and reclaimed since ``?since=`` (ISO 8601 or 7d/24h; default 30d)."""

    @api
    async def get(self):
        self.send(await self.monitor.report(self.get_query_argument("since", None)))


def handlers() -> list[tuple[str, type]]:
    base = r"/gpu-pause/api"
    return [
        (rf"{base}/sessions", SessionsHandler),
        (rf"{base}/sessions/{SID}", SessionHandler),
        (rf"{base}/sessions/{SID}/pause", PauseHandler),
        (rf"{base}/sessions/{SID}/resume", ResumeHandler),
        (rf"{base}/sessions/{SID}/cancel", CancelHandler),
        (rf"{base}/sessions/{SID}/check", CheckHandler),
        (rf"{base}/sessions/{SID}/keepalive", KeepaliveHandler),
        (rf"{base}/sessions/{SID}/checkpoints", CheckpointsHandler),
        (rf"{base}/policies", PoliciesHandler),
        (rf"{base}/capacity", CapacityHandler),
        (rf"{base}/events", EventsHandler),
        (rf"{base}/report", ReportHandler),
    ]
