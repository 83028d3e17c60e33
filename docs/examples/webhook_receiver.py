"""A small webhook receiver for jupyter_gpu_pause, standard library only.

It checks each POST's Standard Webhooks signature, drops duplicates (a retried delivery keeps
its ``webhook-id``) and reacts to the events admins care most about: ``gpu_hold_alarm`` and
every ``*_failed`` event. Replace ``react`` with what your team uses (a chat message, a ticket).

    WEBHOOK_SECRET=whsec_... python webhook_receiver.py --port 8765

and in the Jupyter server's config:

    c.GpuPauseApp.webhook_urls = ["http://receiver-host:8765/"]
    c.GpuPauseApp.webhook_secret = "whsec_..."   # the same secret

The secret comes from the environment, not the command line, where other users could read it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE = 300  # seconds: older or future-dated timestamps are refused (replayed requests)


class InvalidSignature(Exception):
    """The request was not signed with our secret, or too long ago."""


def signing_key(secret: str) -> bytes:
    """Standard Webhooks: 'whsec_' + base64 of the key; jupyter_gpu_pause also accepts a plain
    text secret, used as its UTF-8 bytes."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_") :])
    return secret.encode()


def verify(secret: str, headers, body: bytes, now: float | None = None) -> dict:
    """The event, once ``webhook-signature`` proves it came from the server; else raise
    InvalidSignature. ``headers``: any mapping with ``.get`` (case as sent, or an
    ``http.client.HTTPMessage``, which ignores case)."""
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        sent = int(timestamp)
    except ValueError:
        raise InvalidSignature(f"bad webhook-timestamp {timestamp!r}") from None
    if abs((now if now is not None else time.time()) - sent) > TOLERANCE:
        raise InvalidSignature(f"webhook-timestamp {sent} is more than {TOLERANCE} s away")
    mac = hmac.new(signing_key(secret), f"{msg_id}.{sent}.".encode() + body, hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    # The header may list several signatures ("v1,abc v1,def") while a secret is rotated.
    for candidate in signatures.split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature, expected):
            return json.loads(body)
    raise InvalidSignature("no signature matches")


def react(event: dict) -> None:
    """What to do with a verified event: here, one line on stdout per event worth a look."""
    kind, detail = event["type"], event.get("detail") or {}
    where = f"{event['path']} ({event['user']} on {event['server']})"
    if kind == "gpu_hold_alarm":
        print(f"ALERT gpu_hold_alarm {where}: {detail.get('message', '')}", flush=True)
    elif kind.endswith("_failed"):
        print(
            f"ALERT {kind} {where}: {detail.get('message', '')} "
            f"[{detail.get('error_reason', '?')}, session now {event['state']}]",
            flush=True,
        )
    else:
        print(f"event {kind} {where}: {event['state']}", flush=True)


class Receiver(BaseHTTPRequestHandler):
    secret = ""
    seen: OrderedDict = OrderedDict()  # recent webhook-ids, to drop redelivered events
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            event = verify(self.secret, self.headers, body)
        except (InvalidSignature, ValueError) as e:
            self.send_response(401)
            self.end_headers()
            print(f"refused a request: {e}", file=sys.stderr, flush=True)
            return
        self.send_response(204)  # answer first: the sender waits at most a few seconds
        self.end_headers()
        with self.lock:
            if self.headers["webhook-id"] in self.seen:
                return
            self.seen[self.headers["webhook-id"]] = True
            while len(self.seen) > 10_000:
                self.seen.popitem(last=False)
            react(event)

    def log_message(self, format, *args):  # one line per event is enough
        pass


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    args = parser.parse_args(argv)
    secret = os.environ.get("WEBHOOK_SECRET")
    if not secret:
        parser.error("set WEBHOOK_SECRET to the server's c.GpuPauseApp.webhook_secret")
    Receiver.secret = secret
    server = ThreadingHTTPServer((args.host, args.port), Receiver)
    print(f"listening on http://{args.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
