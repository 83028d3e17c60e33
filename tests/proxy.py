"""A real TCP proxy on 127.0.0.1 that loses answers.

Between a client and a real server, it forwards every request; for the requests its ``drop``
picks, it reads the server's whole answer and then closes the client's connection having sent
none of it (``"whole"``) or only its first half (``"cut"``): the server acted, the client
cannot know. Our clients make one connection per request (urllib sends ``Connection: close``),
so the proxy sees each request's first line before it decides.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Callable

# None: forward the answer; "whole": drop it; "cut": send half of it; "busy": answer 503 with
# Retry-After and forward nothing
Decision = str | None


def _pump(src: socket.socket, dst: socket.socket | None) -> bytes:
    """Copy ``src`` to ``dst`` (or only read it when ``dst`` is None) until ``src`` ends; what
    was read. Either side closing ends the copy."""
    seen = bytearray()
    try:
        while chunk := src.recv(65536):
            seen += chunk
            if dst is not None:
                dst.sendall(chunk)
    except OSError:
        pass
    if dst is not None:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    return bytes(seen)


class EveryThird:
    """Loses every third answer of each kind of request (method and last path segment), the
    whole answer and a cut one in turn: deterministic whatever the timing of the polls."""

    def __init__(self):
        self.seen: Counter = Counter()
        self.lost: Counter = Counter()

    def __call__(self, line: bytes) -> Decision:
        method, path = (line.split(b" ") + [b"", b""])[:2]
        kind = (method, path.split(b"?")[0].rstrip(b"/").rsplit(b"/", 1)[-1])
        self.seen[kind] += 1
        if self.seen[kind] % 3:
            return None
        self.lost[kind] += 1
        return "whole" if self.lost[kind] % 2 else "cut"


class DroppingProxy:
    def __init__(
        self,
        upstream_port: int,
        drop: Callable[[bytes], Decision],
        before_losing: Callable[[bytes], object] | None = None,
        retry_after: str = "1",
    ):
        """``before_losing(request_line)`` runs before an answer is lost: a test makes the
        client's retry come only once the server's operation has ended (as a client timing
        out on a hung connection would)."""
        self.upstream_port = upstream_port
        self.drop = drop
        self.before_losing = before_losing
        self.retry_after = retry_after
        self.dropped: list[bytes] = []  # the request line of each answer lost
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0]
            with self._lock:
                decision = self.drop(line)
            if decision == "busy":  # as a load balancer in front of a busy server answers
                client.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: "
                    + self.retry_after.encode()
                    + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                return
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
                upstream.sendall(head)
                self._forward(client, upstream, line, decision)

    def _forward(self, client, upstream, line: bytes, decision: Decision) -> None:
        sender = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
        sender.start()
        if decision is None:
            _pump(upstream, client)
        else:
            answer = _pump(upstream, None)  # the server's whole answer: it has acted
            if self.before_losing is not None:
                self.before_losing(line)
            if decision == "cut":
                client.sendall(answer[: len(answer) // 2])
            with self._lock:
                self.dropped.append(line)
            client.shutdown(socket.SHUT_RDWR)
        sender.join(timeout=5)

    def close(self) -> None:
        self._listener.close()
