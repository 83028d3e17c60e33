"""One HTTP request to a Jupyter server, the Hub or ``/metrics``, with a token, as a script
would make it: the status and the body, whatever the status (errors are answers too)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def request(url: str, token: str, method: str = "GET", body=None, timeout: float = 30):
    """``(status, raw body)``; a POST sends ``body`` (or ``{}``) as JSON."""
    data = json.dumps(body if body is not None else {}).encode() if method == "POST" else None
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
