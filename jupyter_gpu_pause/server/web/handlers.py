"""REST handlers under ``{base_url}gpu-pause/api/``: parse, call one service method, serialize.

Every verb is authenticated and authorized against the resource ``gpu_pause``; domain errors
become ``{"message", "reason"}`` with their status in one place (``_maps_errors``), and every
other error under the prefix (403, 404 for an unknown path, 405) is the same JSON shape. The
verbs that change something honour ``Idempotency-Key`` (``@idempotent``, idempotency.py).

The two ``kernel/`` routes are the exception: a kernel calls them for its own session
(``gp.session()``, ``gp.pause()``) with the capability of ``kernel/capability.py`` instead of a
user's token, and they can do nothing else.
"""

from __future__ import annotations

import functools
import json
from http.client import responses
from typing import TYPE_CHECKING

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from ...kernel.capability import parse_authorization
from ...store.format import iso, parse_iso
from ..state.asker import Asker
from ..state.errors import BadRequest, Forbidden, GpuPauseError, NotFound
from ..state.event_types import ADMIN_REASON
from .bodies import json_body
from .idempotency import error_document, idempotent
from .on_behalf import asker_of

if TYPE_CHECKING:  # the services above this room, as the app publishes them in its settings
    from ..budgets.service import Budgets
    from ..integrations.maintenance import StoreMaintenance
    from ..lifecycle.lifecycle import Lifecycle
    from ..monitor.monitor import Monitor

AUTH_RESOURCE = "gpu_pause"
# The body of a pause or a cancel: an admin's word to the user, and (a Hub service) for whom
ON_BEHALF = {"message": str, "by": str}
# Any segment: an id that is not a session's answers 404 unknown-session, in JSON.
SID = r"(?P<session_id>[^/]+)"
# The reason code of an error the server raised itself, by status.
_REASONS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    503: "not-started",
}


class _ApiError(web.HTTPError):
    """An HTTPError that keeps the domain message verbatim (tornado escapes ``%`` otherwise)."""

    def __init__(self, error: GpuPauseError):
        super().__init__(error.status, "%s", error.message, reason=error.reason)
        self.message = error.message
        self.document = error_document(error)


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

    # jupyter_server declares it a class attribute but only reads it: per request, a property
    @property
    def _track_activity(self) -> bool:  # type: ignore[override]
        # The Lab panel polls these GETs; they must not keep an idle server awake
        # (shutdown_no_activity_timeout). Actions (POST, DELETE) are activity.
        return self.request.method != "GET"

    # -- the services a handler calls (built and published by the app, server/app.py) ---------
    @property
    def monitor(self) -> Monitor:
        return self.settings["gpu_pause_monitor"]

    @property
    def lifecycle(self) -> Lifecycle:
        return self.settings["gpu_pause"]

    @property
    def budget_service(self) -> Budgets | None:
        """None: no GPU-hour budget is configured."""
        return self.settings.get("gpu_pause_budgets")

    @property
    def maintenance(self) -> StoreMaintenance:
        return self.settings["gpu_pause_maintenance"]

    def log_exception(self, typ, value, tb):
        """A refusal of ours below 500 (a 409 ``resumed-elsewhere``, a 404) is an answer, not a
        fault: jupyter_server's request line (``409 POST …``, a warning) is its one line in the
        log; its words go to DEBUG, not into tornado's second warning for the same request."""
        if isinstance(value, _ApiError) and value.status_code < 500:
            self.log.debug(
                "%d %s: %s (%s)", value.status_code, self._request_summary(), value.message,
                value.reason,
            )  # fmt: skip
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code, **kwargs):
        """Every error is ``{"message", "reason"}``: ours verbatim (with their detail fields,
        such as ``where``), Jupyter's and Tornado's
        (403 unauthenticated, 405) with a reason code, anything unexpected as ``internal``."""
        exc = (kwargs.get("exc_info") or (None, None))[1]
        if isinstance(exc, _ApiError):
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(exc.document))
            return
        if isinstance(exc, web.HTTPError):
            message = exc.log_message or responses.get(status_code, "error")
            if exc.args[1:]:
                message = message % exc.args[1:]
            reason = _REASONS.get(status_code, "error")
        else:
            message = (
                "an unexpected error in jupyter_gpu_pause"
                + (f" ({type(exc).__name__})" if exc else "")
                + "; the server log has the details"
            )
            reason = "internal"
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message, "reason": reason}))

    def body(self, allowed: dict) -> dict:
        """The JSON object body, checked against ``allowed`` = {field: type(s)}."""
        return json_body(self.request.body, allowed)

    def asker(self, body: dict) -> Asker | None:
        """The admin this request acts for (on_behalf.py), from the Hub's word on the caller;
        None when the server's own user asks."""
        caller = getattr(self.current_user, "hub_user", None)
        return asker_of(
            caller if isinstance(caller, dict) else None,
            self.lifecycle.settings.owner,
            body.get("by"),
            body.get("message"),
        )

    def send(self, obj, status: int = 200) -> None:
        """Answer ``obj`` as JSON (nothing for 204); ``sent`` keeps the bytes for a replay."""
        self.set_status(status)
        self.sent = b"" if status == 204 else json.dumps(obj).encode()
        self.finish(self.sent or None)


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
        self.send(await self.lifecycle.session(session_id))

    @api
    @idempotent
    async def delete(self, session_id):
        flag = self.get_query_argument("delete_checkpoints", "false").lower()
        if flag not in ("true", "false", "1", "0"):
            raise BadRequest(f"delete_checkpoints must be true or false, not {flag!r}", "bad-query")
        await self.lifecycle.delete(session_id, delete_checkpoints=flag in ("true", "1"))
        self.send(None, 204)


class PauseHandler(BaseHandler):
    @api
    @idempotent
    async def post(self, session_id):
        asker = self.asker(self.body(ON_BEHALF))
        reason = ADMIN_REASON if asker else "user"
        s = await self.lifecycle.pause(session_id, reason=reason, asker=asker)
        self.send(self.lifecycle.view(s), 202)


class ResumeHandler(BaseHandler):
    @api
    @idempotent
    async def post(self, session_id):
        b = self.body({"checkpoint_id": str, "device": str, "into_kernel": str})
        s = await self.lifecycle.resume(
            session_id,
            checkpoint_id=b.get("checkpoint_id"),
            device=b.get("device"),
            into_kernel=b.get("into_kernel"),
        )
        self.send(self.lifecycle.view(s), 202)


class RebuildHandler(BaseHandler):
    """Re-run the recorded cells that make what the last resume did not bring back."""

    @api
    @idempotent
    async def post(self, session_id):
        b = self.body({"names": list, "confirm": bool})
        s = await self.lifecycle.rebuild(
            session_id, names=b.get("names"), confirm=bool(b.get("confirm"))
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
    @idempotent
    async def post(self, session_id):
        s = await self.lifecycle.cancel(session_id, asker=self.asker(self.body(ON_BEHALF)))
        self.send(self.lifecycle.view(s))


class KeepaliveHandler(BaseHandler):
    @api
    @idempotent
    async def post(self, session_id):
        b = self.body({"seconds": int})
        if "seconds" not in b:
            raise BadRequest('give the keep-alive length: {"seconds": 3600}', "bad-seconds")
        await self.monitor.keepalive(session_id, b["seconds"])
        self.send(self.lifecycle.view(self.lifecycle.table.get(session_id)))


class PoliciesHandler(BaseHandler):
    @api
    async def get(self):
        self.send(
            {
                "policies": [p.to_json() for p in self.monitor.policies],
                "monitor": self.monitor.stats(),
            }
        )


class CheckpointsHandler(BaseHandler):
    @api
    async def get(self, session_id):
        self.send({"checkpoints": await self.lifecycle.list_checkpoints(session_id)})


class CapacityHandler(BaseHandler):
    @api
    async def get(self):
        self.send(await self.lifecycle.describe_capacity())


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


class StoreGcHandler(BaseHandler):
    """Garbage collection of the store, for administrators: ``{"dry_run": true}`` reports what
    would be freed, ``{"dry_run": false}`` frees it. No kernel capability reaches it."""

    @api
    @idempotent
    async def post(self):
        b = self.body({"dry_run": bool})
        if b.get("dry_run") is None:
            raise BadRequest(
                'say whether to delete: {"dry_run": true} reports what would be freed, '
                '{"dry_run": false} frees it',
                "bad-field",
            )
        self.send(await self.maintenance.collect(dry_run=b["dry_run"]))


class KernelHandler(BaseHandler):
    """Requests a kernel makes for its own session, proved by its capability header."""

    def check_xsrf_cookie(self):
        # XSRF protects cookie-authenticated browsers; these routes accept no cookie, only a
        # capability in a header, which a cross-site page cannot send.
        return None

    def kernel_id(self) -> str:
        presented = parse_authorization(self.request.headers.get("Authorization", ""))
        if presented is None:
            raise Forbidden(
                "this endpoint is for a kernel's own requests and needs its capability",
                "no-capability",
            )
        kernel_id, cap = presented
        if not self.lifecycle.bridge.holds_capability(kernel_id, cap):
            raise Forbidden("the kernel capability is not valid", "bad-capability")
        return kernel_id


def kernel_api(method):
    """No user login (the capability is the credential) → capability checked → errors mapped."""
    return allow_unauthenticated(_maps_errors(method))


class KernelSessionHandler(KernelHandler):
    @kernel_api
    async def get(self):
        s = await self.lifecycle.kernel_session(self.kernel_id())
        self.send(self.lifecycle.view(s))


class KernelPauseHandler(KernelHandler):
    @kernel_api
    async def post(self):
        kernel_id = self.kernel_id()
        self.body({})
        s = await self.lifecycle.kernel_session(kernel_id)
        s = await self.lifecycle.pause(s.id, reason="user")
        self.send(self.lifecycle.view(s), 202)


class KernelRebuiltHandler(KernelHandler):
    """``gp.rebuild()`` ran in a cell: the kernel tells its session what came back."""

    @kernel_api
    async def post(self):
        kernel_id = self.kernel_id()
        b = self.body({"result": dict})
        s = await self.lifecycle.kernel_session(kernel_id)
        await self.lifecycle.rebuilt_in_kernel(s, b.get("result") or {})
        self.send(self.lifecycle.view(s))


class UnknownHandler(BaseHandler):
    """Anything else under the prefix: a JSON 404 naming the path (after authentication)."""

    async def _unknown(self, *args):
        raise NotFound(
            f"there is no endpoint {self.request.method} {self.request.path}", "unknown-endpoint"
        )

    get = post = put = delete = patch = api(_unknown)
