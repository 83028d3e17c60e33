"""Webhook receivers for the tests: real HTTP servers in a thread of the test, and the
documented example receiver's ``verify``, imported from its file as admins copy it."""

from __future__ import annotations

import base64
import importlib.util
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "webhook_receiver.py"
SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def _example():
    """The documented receiver, imported from its file: its ``verify`` is what admins copy."""
    spec = importlib.util.spec_from_file_location("webhook_receiver", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _example()


class Receiver:
    """A webhook receiver on a local port (a free one unless ``port``), in a thread.
    ``answers`` are the status codes of the first requests, then ``default`` (which a test may
    change); with ``hold``, every request waits (up to 30 s) for the test to ``release`` it
    before answering: a receiver that hangs."""

    def __init__(self, answers=(), hold: bool = False, default: int = 200, port: int = 0):
        self.posts: list[dict] = []  # {"headers", "body", "answered"}
        self.answers = list(answers)
        self.default = default
        self.release_event = threading.Event()
        if not hold:
            self.release_event.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                post = {"headers": self.headers, "body": body, "answered": None}
                receiver.posts.append(post)
                receiver.release_event.wait(30)
                code = receiver.answers.pop(0) if receiver.answers else receiver.default
                post["answered"] = code
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?token=t0ps3cret"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self) -> None:
        self.release_event.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict]:
        return [json.loads(p["body"]) for p in self.posts]

    def has(self, *types):
        async def check():
            return set(types) <= {e["type"] for e in self.events()}

        return check


def closed_port_url() -> str:
    """A URL nobody listens on: the connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/down"
