"""Every answer the tests get under ``gpu-pause/api/``, checked against the REST API's OpenAPI
document (``jupyter_gpu_pause/server/web/api.yaml``).

A field the server sends that the document does not describe, a field it describes as always
there that the server left out, a status it does not list, a wrong type: each fails the test
that saw the answer, naming the request, the status and the schema's words. The hooks are the
places tests make REST calls: ``tests/http.py`` (scripts' urllib), the in-process test server's
HTTP client and the Python client's transport (``tests/conftest.py``).

A path that is not a route answers the catch-all's 404 ``unknown-endpoint`` and a method a route
lacks 405 ``method-not-allowed``; the document describes both answers
(``components/responses``), and any other answer to them fails too.
"""

from __future__ import annotations

import copy
import functools
import json
import urllib.parse
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from openapi_core import OpenAPI
from openapi_core.exceptions import OpenAPIError
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.templating.responses.exceptions import ResponseNotFound
from openapi_core.testing import MockRequest, MockResponse

import jupyter_gpu_pause

PREFIX = "/gpu-pause/api"
SPEC_PATH = Path(jupyter_gpu_pause.__file__).parent / "server" / "web" / "api.yaml"
MAX_BODY = 2000  # characters of an answer quoted in a failure


class SpecMismatch(AssertionError):
    """An answer under gpu-pause/api/ that the OpenAPI document does not describe."""


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document, as parsed YAML."""
    return yaml.safe_load(SPEC_PATH.read_text())


@functools.cache
def _openapi() -> OpenAPI:
    # The document's server is "{base_url}gpu-pause/api"; ``api_path`` has already taken the
    # base_url (a Hub's /user/NAME/ included) away, so match against the bare prefix.
    doc = copy.deepcopy(document())
    doc["servers"] = [{"url": PREFIX}]
    return OpenAPI.from_dict(doc)


@functools.cache
def _error_validator() -> Draft202012Validator:
    return Draft202012Validator(document()["components"]["schemas"]["Error"])


def api_path(url: str) -> str | None:
    """``/gpu-pause/api/...`` of a URL (or a path), whatever base_url precedes it; None when it
    is not under the prefix (Jupyter's own API, ``/metrics``, the Hub)."""
    path = urllib.parse.urlsplit(url).path
    if path.startswith("/services/"):  # the Hub console's own API (hubservice/), not this one
        return None
    at = path.find(PREFIX + "/")
    if at >= 0:
        return path[at:]
    return PREFIX if path.endswith(PREFIX) else None


def _text(body: bytes | str | None) -> str:
    if body is None:
        return ""
    return body.decode(errors="replace") if isinstance(body, bytes) else body


def _fail(method: str, path: str, status: int, body: bytes | str | None, why: str) -> None:
    quoted = _text(body)
    if len(quoted) > MAX_BODY:
        quoted = quoted[:MAX_BODY] + "…"
    raise SpecMismatch(
        f"{method} {path} answered {status}, which api.yaml does not describe:\n{why}\n"
        f"answer: {quoted or '(empty)'}"
    )


def _schema_errors(e: BaseException) -> str:
    """The schema errors of an openapi-core failure, one line each with where in the body."""
    lines = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for err in getattr(e, "schema_errors", None) or ():
            lines += _lines(err)
        e = e.__cause__ or e.__context__
    return "\n".join(lines)


def _lines(err, depth: int = 1) -> list[str]:
    """An error and, under an ``anyOf`` (a record or null), why the record did not match."""
    where = "".join(f"[{p!r}]" for p in err.absolute_path) or "(the body)"
    out = [f"{'  ' * depth}at {where}: {err.message}"]
    for sub in err.context or ():
        if not (sub.validator == "type" and sub.validator_value == "null"):
            out += _lines(sub, depth + 1)
    return out


# The answers of the catch-all (an unknown path) and of a route asked a verb it lacks: the
# refusals of authentication and of loading come first, as on every route.
_CATCH_ALL = {
    404: {404: "UnknownEndpoint", 403: "Forbidden", 503: "Unavailable"},
    405: {405: "MethodNotAllowed"},
}


def _catch_all(method: str, path: str, status: int, body: bytes | str | None, want: int) -> None:
    """An answer to a path or a verb the document has no operation for."""
    what = "an unknown path" if want == 404 else f"a verb {path} does not have"
    described = document()["components"]["responses"]
    answers = _CATCH_ALL[want]
    if status not in answers or answers[status] not in described:
        _fail(method, path, status, body, f"{what} must be answered {want} (an Error)")
    try:
        doc = json.loads(_text(body))
    except ValueError:
        _fail(method, path, status, body, f"{what}: the answer is not JSON")
    problems = [f"  at (the body): {e.message}" for e in _error_validator().iter_errors(doc)]
    if problems:
        _fail(method, path, status, body, f"{what}: not an Error\n" + "\n".join(problems))


def check(
    method: str,
    url: str,
    status: int,
    body: bytes | str | None,
    content_type: str | None = "application/json",
) -> None:
    """Fail (``SpecMismatch``) when this answer to ``method url`` is not what api.yaml says.
    A URL outside ``{base_url}gpu-pause/api`` is not checked."""
    path = api_path(url)
    if path is None:
        return
    method = method.upper()
    mime = (content_type or "application/json").split(";")[0].strip()
    request = MockRequest("http://localhost", method.lower(), path)
    data = body.encode() if isinstance(body, str) else (body or b"")
    response = MockResponse(data, status_code=status, content_type=mime)
    try:
        _openapi().validate_response(request, response)
    except PathNotFound:
        _catch_all(method, path, status, body, 404)
    except OperationNotFound:
        _catch_all(method, path, status, body, 405)
    except ResponseNotFound:
        _fail(method, path, status, body, "the operation does not list this status")
    except (OpenAPIError, ValueError) as e:  # a schema's "no", or a body that does not parse
        _fail(method, path, status, body, _schema_errors(e) or f"{type(e).__name__}: {e}")
