"""Who is using a kernel: one IOPub subscription per kernel, watching for what a person does.

Activity is a cell (``execute_request``) or a widget message. The UI's own polling
(``kernel_info``, ``comm_info``), the debugger and our agent's silent requests (sent from the
sessions in ``agent_sessions``) do not count.
"""

from __future__ import annotations

from datetime import datetime

from jupyter_client.session import Session as ZmqSession

from ..store.format import utcnow

USER_MESSAGES = ("execute_request", "comm_msg")


class ActivityTracker:
    """One IOPub subscription per kernel, recording when a person last made it do something."""

    def __init__(self, kernel_manager, agent_sessions: set[str], on_activity=None):
        self.km = kernel_manager
        self.agent_sessions = agent_sessions
        self.on_activity = on_activity
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
        session = ZmqSession(config=kernel.session.config, key=kernel.session.key)
        stream = kernel.connect_iopub()
        self.last[kid] = getattr(kernel, "last_activity", None) or utcnow()

        def on_message(msg_list):
            _idents, fed = session.feed_identities(msg_list)
            msg = session.deserialize(fed, content=False)
            parent = msg.get("parent_header") or {}
            if parent.get("session") in self.agent_sessions:
                return
            msg_type = msg["header"]["msg_type"]
            if parent.get("msg_type") in USER_MESSAGES or msg_type == "comm_msg":
                self.last[kid] = utcnow()
                if msg_type == "status":
                    content = session.deserialize(fed)["content"]
                    self.busy[kid] = content.get("execution_state") == "busy"
                if self.on_activity:
                    self.on_activity(kid)

        stream.on_recv(on_message)
        self._streams[kid] = stream

    def is_busy(self, kid: str) -> bool:
        """A person's cell is running (our own agent's requests do not count)."""
        return self.busy.get(kid, False)

    def touch(self, kid: str, when: datetime) -> None:
        self.last[kid] = when

    def close(self) -> None:
        self.sync(set())
