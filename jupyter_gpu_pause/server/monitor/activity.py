"""Who is using a kernel: one IOPub subscription per kernel, watching for what a person does.

Activity is a cell (``execute_request``) or a widget message. The UI's own polling
(``kernel_info``, ``comm_info``), the debugger and our agent's silent requests (sent from the
sessions in ``agent_sessions``) do not count.

It also keeps which kernels have run a person's code (an ``execute_input`` on IOPub, published
for every cell that is not silent): a kernel that JupyterLab started on opening a paused
notebook and that has run nothing is not a session of its own (``sessions.py``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Protocol

from jupyter_client.session import Session as ZmqSession
from traitlets import TraitError

from ...store.format import utcnow

USER_MESSAGES = ("execute_request", "comm_msg")


class Watch(Protocol):
    """One kernel's IOPub subscription: a ZMQ stream, or what ``subscribe`` returned."""

    def close(self) -> None: ...


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
        self.ran: set[str] = set()  # kernels that ran a person's code while watched
        self._streams: dict[str, Watch] = {}

    def sync(self, kernel_ids: set[str]) -> None:
        for kid in set(self._streams) - kernel_ids:
            self._streams.pop(kid).close()
            self.last.pop(kid, None)
            self.busy.pop(kid, None)
        for kid in kernel_ids - set(self._streams):
            self._watch(kid)
        # kept while the kernel runs, watched or not: it may be a paused notebook's later
        self.ran = {kid for kid in self.ran if kid in self.km}

    def watch(self, kid: str) -> None:
        """Start watching a kernel now, not at the monitor's next pass: a kernel waiting for
        a paused notebook's restore is a session of its own from its first cell on."""
        if kid not in self._streams and kid in self.km:
            self._watch(kid)

    def ran_code(self, kid: str) -> bool:
        """The kernel ran a person's code since it was first watched (or ``saw_code``)."""
        return kid in self.ran

    def saw_code(self, kid: str) -> None:
        """What the tracker could not see itself: code run before the kernel was watched
        (the kernel's own count says so), or the kernel calling the server from a cell."""
        self.ran.add(kid)

    def _watch(self, kid: str) -> None:
        kernel = self.km.get_kernel(kid)
        try:
            started = getattr(kernel, "last_activity", None)
        except TraitError:  # watched from its start event: jupyter_server sets it just after
            started = None
        self.last[kid] = started or utcnow()
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
        if msg_type == "execute_input":
            self.ran.add(kid)
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
