"""The console's page and its JSON under ``api/``, behind the Hub's OAuth.

Who may use it: the Hub's admins, and whoever holds the service's admin scope
(``custom:gpu-pause:admin`` by default, a JupyterHub 5 custom scope an admin grants to users,
groups or services through a role). Everyone else gets 403, on the page and on the API. A
browser logs in through the Hub (OAuth, a cookie of this service); a script sends a Hub token
(``Authorization: token …``). A POST with the cookie must carry the page's XSRF token, which
JupyterHub's auth checks before it accepts the cookie.
"""

from __future__ import annotations

import functools
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import web
from tornado.log import app_log

from ..server.state.errors import GpuPauseError
from ..server.web.bodies import json_body
from ..version import __version__
from .console import Admin

if TYPE_CHECKING:
    from .console import Console

HERE = Path(__file__).parent
TEMPLATE = HERE / "templates" / "console.html"


@functools.cache
def _template() -> str:
    """The page's template, read once (not from disk on the event loop at every request)."""
    return TEMPLATE.read_text()


class ConsoleHandler(HubOAuthenticated, web.RequestHandler):
    """Allows the Hub's admins and holders of ``admin_scope``; the rest get 403."""

    def initialize(self, console: Console, admin_scope: str, **_):
        self.console, self.admin_scope = console, admin_scope

    @property
    def hub_scopes(self):
        return None  # the decision is check_hub_user's, below: admin or the admin scope

    def check_hub_user(self, model):
        model.setdefault("kind", "user")
        if model.get("admin") or self.admin_scope in (model.get("scopes") or []):
            return model
        app_log.warning(
            "jupyter_gpu_pause hub service: %s %s is not a Hub admin and lacks %s",
            model["kind"], model.get("name"), self.admin_scope,
        )  # fmt: skip
        raise UserNotAllowed(model)

    @property
    def admin(self) -> Admin:
        user = self.current_user
        assert user is not None, "called under @web.authenticated"
        return Admin(user["name"], "admin" if user.get("admin") else "scope")


class ApiHandler(ConsoleHandler):
    """JSON in and out; errors are ``{"message", "reason"}``."""

    def get_login_url(self):
        """No redirect for a script: 403 saying why (not allowed, or not logged in)."""
        model = getattr(self, "_cached_hub_user", None)
        if model:
            raise web.HTTPError(
                403,
                f"{model.get('kind', 'user')} {model.get('name')} is neither a Hub admin nor "
                f"granted {self.admin_scope}; ask a Hub admin for access",
            )
        raise web.HTTPError(
            403, "log in through the Hub's page first, or send a Hub token with this request"
        )

    def body(self, allowed: dict) -> dict:
        return json_body(self.request.body, allowed)

    def send(self, obj, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(obj))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, GpuPauseError):
            self.send({"message": e.message, "reason": e.reason, **e.detail}, e.status)
            return
        super()._handle_request_exception(e)

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            message = "internal error; see the service's log"
        reasons = {403: "forbidden", 404: "not-found", 405: "method-not-allowed"}
        self.set_header("Content-Type", "application/json")
        self.finish(
            json.dumps({"message": message, "reason": reasons.get(status_code, "internal")})
        )


class PageHandler(ConsoleHandler):
    @web.authenticated
    async def get(self):
        values = {
            "prefix": self.settings["console_prefix"],
            "xsrf": self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes)
            else self.xsrf_token,
            "user": self.admin.name,
            "version": __version__,
        }  # fmt: skip
        page = _template().format_map({k: html.escape(v) for k, v in values.items()})
        self.set_header("Cache-Control", "no-store")
        self.finish(page)

    def write_error(self, status_code: int, **kwargs) -> None:
        if status_code == 403:
            message = (
                "This page is for the Hub's admins and for users granted the "
                f"{self.admin_scope} scope. Ask a Hub admin for access."
            )
        else:
            message = "Something went wrong; see the service's log."
        self.finish(
            "<!doctype html><html><head><title>GPU pause console</title></head><body>"
            f"<h1>{status_code}</h1><p>{html.escape(message)}</p></body></html>"
        )


class MeHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        a = self.admin
        self.send({"name": a.name, "admin": a.granted_by == "admin", "granted_by": a.granted_by})


class SessionsHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        self.send(await self.console.sessions())


class LineHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        self.send(await self.console.line())


class UsageHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        period = self.get_query_argument("period", "month")
        by = self.get_query_argument("by", "user")
        self.send(await self.console.usage(period, by))


class UsageCsvHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        period = self.get_query_argument("period", "month")
        by = self.get_query_argument("by", "user")
        text = await self.console.usage_csv(period, by)
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        name = f"gpu-usage-{period}-by-{by}.csv".replace("/", "-")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        self.finish(text)


class ActionsHandler(ApiHandler):
    @web.authenticated
    async def get(self):
        self.send(await self.console.actions())


class SessionActionHandler(ApiHandler):
    @web.authenticated
    async def post(self, user: str, session_id: str, action: str):
        b = self.body({"message": str})
        answer = await self.console.act(self.admin, action, user, session_id, b.get("message"))
        self.send(answer, 202 if action == "pause" else 200)


class BudgetHandler(ApiHandler):
    @web.authenticated
    async def post(self, kind: str):
        b = self.body({"user": str, "hours": (int, float)} if kind == "grant" else {"user": str})
        self.send(await self.console.adjust(self.admin, kind, b.get("user"), b.get("hours")))


class NotFoundHandler(ApiHandler):
    def prepare(self):
        raise web.HTTPError(404, "no such path in the console's API")


def routes(prefix: str, console: Console, admin_scope: str) -> list:
    """The service's handlers under ``prefix`` (``/services/gpu-pause/``)."""
    kw = {"console": console, "admin_scope": admin_scope}
    api = f"{prefix}api/"
    user, sid = r"(?P<user>[^/]+)", r"(?P<session_id>[0-9a-zA-Z_-]+)"
    return [
        (prefix, PageHandler, kw),
        (f"{prefix}oauth_callback", HubOAuthCallbackHandler),
        (rf"{prefix}static/(.*)", web.StaticFileHandler, {"path": str(HERE / "static")}),
        (f"{api}me", MeHandler, kw),
        (f"{api}sessions", SessionsHandler, kw),
        (rf"{api}sessions/{user}/{sid}/(?P<action>pause|cancel)", SessionActionHandler, kw),
        (f"{api}line", LineHandler, kw),
        (f"{api}usage", UsageHandler, kw),
        (f"{api}usage.csv", UsageCsvHandler, kw),
        (f"{api}actions", ActionsHandler, kw),
        (rf"{api}budget/(?P<kind>grant|reset)", BudgetHandler, kw),
        (f"{api}.*", NotFoundHandler, kw),
    ]
