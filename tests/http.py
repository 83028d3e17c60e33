"""One HTTP request to a Jupyter server, the Hub or ``/metrics``, with a token, as a script
would make it: the status and the body, whatever the status (errors are answers too).

An answer under ``gpu-pause/api/`` must be what the REST API's OpenAPI document says
(``tests/openapi.py``); one that is not fails the test here."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.openapi import check


def request(url: str, token: str, method: str = "GET", body=None, timeout: float = 30):
    """``(status, raw body)``; a POST or PATCH sends ``body`` (or ``{}``) as JSON."""
    data = (
        json.dumps(body if body is not None else {}).encode()
        if method in ("POST", "PATCH")
        else None
    )
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, headers, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers, e.read()
    check(method, url, status, raw, headers.get("Content-Type"))
    return status, raw
