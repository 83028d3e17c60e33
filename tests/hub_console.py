"""A real JupyterHub with several users on one PostgreSQL capacity queue, and the Hub console
(``jupyter gpu-pause hub-service``) run by the Hub as a managed service, configured with the
lines docs/hub-console.md gives an admin.

Users: ``alice`` and ``bob`` run GPU notebooks (the quota provider standing in for GPUs: one GPU
session fits, every python3 kernel is one); ``ada`` is a Hub admin; ``carol`` holds the custom
scope ``custom:gpu-pause:admin`` through a role; ``dave`` is a user with no rights to the
console. The servers and the console read one shared config file (the queue and the budget).

Used by tests/test_hub_console.py, and run as a script by the UI test
(labextension/ui-tests/tests/hub-console.spec.ts): ``python -m tests.hub_console DIR`` starts it
all, writes ``DIR/stage.json`` and stops everything when its stdin closes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.http import request
from tests.hubs import BIN, Hub, _hub_config
from tests.servers import _free_port

USERS = ("alice", "bob")
ADMIN, SCOPED, NOBODY = "ada", "carol", "dave"
LEASE = 3.0  # c.CapacityQueue.lease_seconds: a heartbeat every second
BUDGET = {"name": "lab", "gpu_hours": 50, "period": "month"}
SCOPE = "custom:gpu-pause:admin"


def shared_config(tmp: Path, pg_url: str) -> str:
    """What the users' servers and the console share (docs/hub-console.md)."""
    return f"""
c.GpuPauseApp.capacity_queue_url = {pg_url!r}
c.GpuPauseApp.budgets = [{BUDGET!r}]
c.CapacityQueue.lease_seconds = {LEASE}
"""


def singleuser_config(tmp: Path, shared: Path) -> str:
    return f"""
import os
load_subconfig({str(shared)!r})
user = os.environ["JUPYTERHUB_USER"]
c.ServerApp.jpserver_extensions = {{"jupyter_gpu_pause": True}}
c.GpuPauseApp.stop_server_when_paused = user == "bob"  # bob: paused with the server stopped
c.GpuPauseApp.gpu_kernelspecs = ["python3*"]
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 1
c.GpuPauseApp.policies = []
c.GpuPauseApp.poll_interval = 0.5
c.GpuPauseApp.warm_kernels = False
c.GpuPauseApp.store_url = {str(tmp / "store")!r} + "/" + user
c.GpuPauseApp.db_path = {str(tmp / "records")!r} + "-" + user + ".sqlite"
c.GpuPauseApp.secret_file = {str(tmp / "secret")!r} + "-" + user
"""


def console_hub_config(hub: ConsoleHub) -> str:
    """The Hub's lines for the console, as docs/hub-console.md gives them, and the test's
    users, admin-script service and groups."""
    everyone = {*USERS, ADMIN, SCOPED, NOBODY}
    command = [str(BIN / "jupyter"), "gpu-pause", "hub-service", f"--config={hub.console_config}"]
    return f"""
c.Authenticator.allowed_users = {everyone!r}
c.Authenticator.admin_users = {{{ADMIN!r}}}
c.JupyterHub.load_groups = {{"vision": {{"users": ["alice"]}}, "nlp": {{"users": ["bob"]}}}}
c.JupyterHub.custom_scopes = {{
    {SCOPE!r}: {{"description": "See every user's GPU sessions; pause them, grant budgets"}},
}}
c.JupyterHub.services = [
    {{"name": "admin-script", "api_token": {hub.token!r}}},
    {{
        "name": "gpu-pause",
        "url": "http://127.0.0.1:{hub.console_port}",
        "command": {command!r},
        "oauth_client_allowed_scopes": [{SCOPE!r}],
        "oauth_no_confirm": True,
    }},
]
c.JupyterHub.load_roles = [
    {{
        "name": "admin-script",
        "scopes": ["admin:users", "admin:servers", "access:servers", "tokens"],
        "services": ["admin-script"],
    }},
    {{
        "name": "gpu-pause",
        "scopes": ["list:users", "read:users", "access:servers"],
        "services": ["gpu-pause"],
    }},
    {{
        "name": "gpu-pause-admins",
        "scopes": [{SCOPE!r}, "access:services!service=gpu-pause"],
        "users": [{SCOPED!r}],
    }},
]
"""


class ConsoleHub(Hub):
    """``Hub`` with the users above, the console as a managed service, and a user's servers
    and tokens by name."""

    def __init__(self, tmp: Path, pg_url: str):
        shared = tmp / "gpu_pause_shared.py"
        shared.write_text(shared_config(tmp, pg_url))
        super().__init__(tmp, singleuser_config(tmp, shared))
        self.pg_url = pg_url
        self.console_port = _free_port()
        self.console_config = tmp / "jupyter_gpu_pause_hub_config.py"
        self.console_config.write_text(
            f"load_subconfig({str(shared)!r})\nc.HubServiceApp.proxy_url = {self.url!r}\n"
        )
        (tmp / "jupyterhub_config.py").write_text(_hub_config(self) + console_hub_config(self))
        self.tokens: dict[str, str] = {}

    @property
    def console(self) -> str:
        return f"{self.url}/services/gpu-pause/"

    def start(self) -> None:
        super().start()
        self.answering(self._console_answers, "the console service")

    def _console_answers(self) -> bool:
        try:
            code, _ = request(f"{self.console}api/me", self.token, timeout=2)
        except OSError:
            return False
        return code in (200, 403)

    # -- a user's servers and tokens ----------------------------------------------------------
    def token_of(self, user: str) -> str:
        """An API token of ``user`` (with all of the user's permissions)."""
        if user not in self.tokens:
            code, body = self.api("POST", f"hub/api/users/{user}/tokens", {"note": "test"})
            assert code == 201, body
            self.tokens[user] = body["token"]
        return self.tokens[user]

    def servers_of(self, user: str) -> dict:
        code, model = self.api("GET", f"hub/api/users/{user}")
        assert code == 200, model
        return model["servers"]

    def start_server_of(self, user: str) -> None:
        code, body = self.api("POST", f"hub/api/users/{user}/server")
        assert code in (201, 202, 400), body  # 400: already running
        self.wait_until(
            lambda: self.servers_of(user).get("", {}).get("ready"), f"{user}'s server ready"
        )

    def api_of(self, user: str, method: str, path: str, body=None):
        """``path`` of ``user``'s own server (``gpu-pause/api/…``), with the admin token."""
        return self.api(method, f"user/{user}/{path}", body)

    def open_notebook(self, user: str, path: str) -> dict:
        code, js = self.api_of(
            user,
            "POST",
            "api/sessions",
            {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}},
        )
        assert code == 201, js
        kid = js["kernel"]["id"]
        code, body = self.api_of(user, "GET", f"gpu-pause/api/sessions?kernel_id={kid}")
        assert code == 200, body
        (s,) = body["sessions"]
        return s

    def session_of(self, user: str, sid: str) -> dict:
        code, s = self.api_of(user, "GET", f"gpu-pause/api/sessions/{sid}")
        assert code == 200, s
        return s

    # -- the console, as a person or a script ----------------------------------------------------
    def console_api(self, path: str, user: str = ADMIN, method: str = "GET", body=None):
        code, raw = request(f"{self.console}api/{path}", self.token_of(user), method, body)
        try:
            return code, json.loads(raw) if raw else None
        except ValueError:
            return code, raw.decode(errors="replace")


def main(folder: str) -> None:
    """Start Postgres, the Hub and the console; write ``stage.json``; stop all when stdin
    closes (the UI test's process ends)."""
    from tests.postgres import Postgres

    tmp = Path(folder)
    tmp.mkdir(parents=True, exist_ok=True)
    pg = Postgres()
    pg.start()
    hub = ConsoleHub(tmp, pg.new_database())
    try:
        hub.start()
        for user in USERS:
            hub.start_server_of(user)
        stage = {
            "hub": hub.url,
            "console": hub.console,
            "admin": ADMIN,
            "nobody": NOBODY,
            "users": list(USERS),
            "admin_token": hub.token,
        }
        (tmp / "stage.json").write_text(json.dumps(stage))
        print("stage ready", flush=True)
        sys.stdin.read()  # until the UI test ends
    finally:
        hub.stop()
        pg.remove()


if __name__ == "__main__":
    main(sys.argv[1])
