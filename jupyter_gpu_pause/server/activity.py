"""Who is using a kernel: one IOPub subscription per kernel, watching for what a person does.

Activity is a cell (``execute_request``) or a widget message. The UI's own polling
(``kernel_info``, ``comm_info``), the debugger and our agent's silent requests (sent from the
sessions in ``agent_sessions``) do not count.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from jupyter_client.session import Session as ZmqSession

from ..store.format import utcnow

USER_MESSAGES = ("execute_request", "comm_msg")


class ActivityTracker:
    """One IOPub subscription per kernel, recording when a person last made it do something."""

    def __init__(self, kernel_manager, agent_sessions: set[str], on_activity=None, subscribe=None):
        self.km = kernel_manager
        # subscribe(kernel_id, on_message) -> something with close(): a kernel's IOPub as
        # message dicts, for kernels without a ZMQ port here (gateway.py); None: ZMQ
        self.agent_sessions = agent_sessions
        self.on_activity = on_activity
        self.subscribe = subscribe
        self.last: dict[str, datetime] = {}
        self.busy: dict[str, bool] = {}
        self._streams: dict[str, object] = {}

    def sync(self, kernel_ids: set[str]) -> None:
        for kid in set(self._streams) - kernel_ids:
            self._streams.pop(kid).close()
            self.last.pop(kid, None)
            self.busy.pop(kid, None)
        for kid in kernel_ids - set(self._streams):
            self._watch(kid)

    def _watch(self, kid: str) -> None:
        kernel = self.km.get_kernel(kid)
        self.last[kid] = getattr(kernel, "last_activity", None) or utcnow()
        if self.subscribe is not None:
            self._streams[kid] = self.subscribe(kid, lambda msg: self._saw(kid, msg, msg))
            return
        session = ZmqSession(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()

        def on_message(msg_list):
            _idents, fed = session.feed_identities(msg_list)
            msg = session.deserialize(fed, content=False)
            self._saw(kid, msg, lambda: session.deserialize(fed))

        stream.on_recv(on_message)
        self._streams[kid] = stream

    def _saw(self, kid: str, msg: dict, full) -> None:
        """One IOPub message (``full``: the message with its content, or how to read it)."""
        parent = msg.get("parent_header") or {}
        if parent.get("session") in self.agent_sessions:
            return
        msg_type = msg["header"]["msg_type"]
        if parent.get("msg_type") in USER_MESSAGES or msg_type == "comm_msg":
            self.last[kid] = utcnow()
            if msg_type == "status":
                content = (full() if callable(full) else full)["content"]
                self.busy[kid] = content.get("execution_state") == "busy"
            if self.on_activity:
                self.on_activity(kid)

    def is_busy(self, kid: str) -> bool:
        """A person's cell is running (our own agent's requests do not count)."""
        return self.busy.get(kid, False)

    def touch(self, kid: str, when: datetime) -> None:
        self.last[kid] = when

    def close(self) -> None:
        self.sync(set())

    async def aclose(self) -> None:
        """``close``, then wait for the watches that end in a task of their own (a gateway's)."""
        ending = [t for w in self._streams.values() if (t := getattr(w, "task", None))]
        self.close()
        await asyncio.gather(*ending, return_exceptions=True)
