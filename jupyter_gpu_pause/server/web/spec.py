"""``GET spec.yaml``: the REST API described once, as an OpenAPI 3.1 document (``api.yaml``
beside this module), served as jupyter_server serves its own ``/api/spec.yaml``.

It reads nothing of the sessions, so it answers while the records still load; its refusals are
the JSON errors of every other route (``BaseHandler``).
"""

from __future__ import annotations

import functools
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from tornado import web

from .handlers import BaseHandler

SPEC = Path(__file__).with_name("api.yaml")


@functools.cache
def document() -> bytes:
    """The document's bytes, read once (it ships with the package and never changes)."""
    return SPEC.read_bytes()


class SpecHandler(BaseHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(document(), set_content_type="application/yaml; charset=UTF-8")
