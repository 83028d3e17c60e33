"""A request's JSON body checked against the fields an endpoint takes: the user server's REST
handlers and the Hub console's share it, so bad input gets the same 400 everywhere."""

from __future__ import annotations

import json

from ..state.errors import BadRequest


def json_body(raw: bytes | None, allowed: dict) -> dict:
    """The JSON object in ``raw`` (empty: ``{}``), checked against ``allowed`` = {field:
    type or tuple of types}; BadRequest ``bad-json``, ``unknown-field`` or ``bad-field``."""
    try:
        data = json.loads(raw or b"{}")
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
        kinds = allowed[key] if isinstance(allowed[key], tuple) else (allowed[key],)
        if value is not None and (
            not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        ):
            kind = "number" if float in kinds else " or ".join(k.__name__ for k in kinds)
            raise BadRequest(
                f"field {key!r} must be a {kind}, not {json.dumps(value)}", "bad-field"
            )
    return data
