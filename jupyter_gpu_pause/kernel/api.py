"""The kernel API users call from a notebook: register names, dry-run, hooks, ask for a pause.

The registrations live in ``registry.py`` (shared with the server's agent); this module adds
what a person asks of the server or of the agent's dry run.
"""

from __future__ import annotations

import json
import os
import re

from ..store.schema import is_variable_name
from .capability import authorization
from .registry import (  # noqa: F401  (the registrations are this API's too)
    REGISTRY,
    last_restore,
    on_pause,
    on_restore,
    register,
    registered,
    unregister,
)


class RebuildResult(dict):
    """The answer of ``gp.rebuild()``: a dict that prints as one readable paragraph."""

    def __repr__(self) -> str:
        from .rerun import result_text

        return result_text(self)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def rebuild(*names: str, confirm: bool = False) -> RebuildResult:
    """Re-run the recorded cells that make the variables the last resume did not bring back
    (``gp.last_restore()["rebuild"]`` says which, and which cells): all of them, or ``names``.

    The cells run against copies of the restored values they read, and only the rebuilt names
    are written back: the restored objects are never changed. A plan that would have to share
    a restored object instead of copying it, or copy a lot, asks first: pass ``confirm=True``.
    Cells marked ``# gp: no-rerun`` (or tagged ``gp-no-rerun``) are never re-run.
    """
    from IPython import get_ipython

    from .rerun import run

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("gp.rebuild() works inside an IPython kernel only")
    for n in names:
        if not is_variable_name(n):
            raise ValueError(f"{n!r} is not a variable name")
    result = run(shell, list(names) or None, confirm)
    if REGISTRY.last_restore is not None:
        REGISTRY.last_restore["rebuild"] = result["offer"]
        try:  # the session (the Lab, the events) learns what came back
            _server_call("POST", "rebuilt", {"result": result})
        except RuntimeError:
            pass  # no server to tell (a plain IPython, or it is unreachable): nothing to fix
    return RebuildResult(result)


def check():
    """Dry run: what a pause would save, the sizes, and what cannot be saved and why."""
    from IPython import get_ipython

    from .dryrun import dry_run  # here: the dry run imports the capture, which most never use

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("gp.check() works inside an IPython kernel only")
    return dry_run(shell)


# A kernel behind a gateway (Enterprise Gateway) gets only KERNEL_* variables from the server:
# the server's URL, its id (KERNEL_ID, chosen by the server) and a key the server derived from
# that id, to derive its capability from (its own connection key is known to the gateway only).
# See server/kernels/gateway.py.
GATEWAY_URL_VARIABLE = "KERNEL_GPU_PAUSE_URL"
GATEWAY_KEY_VARIABLE = "KERNEL_GPU_PAUSE_KEY"


def _gateway_key() -> bytes | None:
    value = os.environ.get(GATEWAY_KEY_VARIABLE)
    try:
        return bytes.fromhex(value) if value else None
    except ValueError:
        raise RuntimeError(f"{GATEWAY_KEY_VARIABLE} is not the key the server sent") from None


def _kernel_id() -> str:
    from ipykernel.connect import get_connection_file

    if _gateway_key() and os.environ.get("KERNEL_ID"):  # set by the gateway for its kernels
        return os.environ["KERNEL_ID"]

    name = os.path.basename(get_connection_file())
    m = re.match(r"kernel-(.+)\.json$", name)
    if not m:
        raise RuntimeError(f"cannot tell this kernel's id from its connection file {name}")
    return m.group(1)


def _kernel_key() -> bytes:
    """The HMAC key of this kernel's own connection (what the capability is derived from), or
    for a kernel behind a gateway the key the server sent it for its id."""
    from IPython import get_ipython

    gateway_key = _gateway_key()
    if gateway_key:
        return gateway_key

    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        raise RuntimeError("gp.pause() and gp.session() work inside a Jupyter kernel only")
    key = kernel.session.key
    if not key:
        raise RuntimeError(
            "this kernel's connection has no signing key, so it cannot prove which kernel it is"
        )
    return key


def _server_call(method: str, path: str, body: dict | None = None) -> dict:
    """Call this kernel's own endpoints (``gpu-pause/api/kernel/…``) with its capability.

    The kernel holds no server token: the capability lets it read and pause its own session
    and nothing else (see ``capability.py``).
    """
    if _gateway_key():
        base = os.environ.get(GATEWAY_URL_VARIABLE)
    else:
        base = os.environ.get("JUPYTER_GPU_PAUSE_URL")
    if not base:
        raise RuntimeError(
            "this kernel was not started by a Jupyter server with jupyter_gpu_pause enabled"
        )
    # imported here: http.client and email take ~6 ms, which every kernel's first pause (the
    # agent imports this module) would pay for a call most notebooks never make
    import urllib.error
    import urllib.request

    kernel_id = _kernel_id()
    req = urllib.request.Request(
        base.rstrip("/") + "/gpu-pause/api/kernel/" + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": authorization(_kernel_key(), kernel_id),
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("message")
        except ValueError:
            message = None
        raise RuntimeError(message or f"the server answered {e.code}") from None
    except urllib.error.URLError as e:
        raise RuntimeError(f"cannot reach the Jupyter server at {base}: {e.reason}") from None


def session() -> dict:
    """This kernel's session as the server sees it (state, checkpoint, message)."""
    return _server_call("GET", "session")


def pause() -> dict:
    """Ask the server to pause this kernel's session once the running cell has finished."""
    return _server_call("POST", "pause", {})
