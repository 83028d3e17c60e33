"""A kernel's channels on a gateway, as this server's own client: the agent's requests and the
idle monitor's IOPub watch (see ``gateway.py`` for why not jupyter_server's GatewayKernelClient).

The gateway relays the kernel's messages as JSON over one websocket (the ``channel`` field says
which); it signs what it passes to the kernel, so our messages carry no signature.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import queue

from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session as MessageFactory
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.utils import url_escape, url_path_join
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from ...kernel.protocol import REQUEST_KEY, Request
from .bridge import WATCH_INTERVAL, _parent

# Largest websocket message read from the gateway (tornado's default is 10 MiB): a resume
# report or a check of a namespace with many variables is a few MB at most.
MAX_WS_MESSAGE = 64 * 1024 * 1024
DEAD_STATES = ("restarting", "dead")  # what the gateway publishes when a kernel process ends


class GatewayChannels:
    """One kernel's channels on the gateway: a websocket with the gateway's auth headers.

    It speaks what ``_round_trip`` and ``KernelBridge.run_agent`` ask of a kernel client
    (``kernel_info``, ``execute``, ``get_shell_msg``, ``get_iopub_msg``,
    ``execute_interactive``, ``stop_channels``), reading IOPub itself instead of polling a ZMQ
    socket. ``lost`` says why the kernel can no longer answer, once it cannot.
    """

    def __init__(self, kernel_id: str, agent_request: Request | None = None):
        self.kernel_id = kernel_id
        self.agent_request: Request | dict = agent_request or {}
        self.session = MessageFactory()  # builds headers; the gateway signs for the kernel
        self._queues: dict[str, asyncio.Queue[dict]] = {
            "shell": asyncio.Queue(),
            "iopub": asyncio.Queue(),
        }
        self._ws: WebSocketClientConnection | None = None
        self._reader: asyncio.Task | None = None
        self.lost: str | None = None  # the connection failed or closed
        self.died: str | None = None  # the gateway reported the kernel process gone

    async def start_channels(self) -> None:
        gc = GatewayClient.instance()
        url = url_path_join(
            gc.ws_url or "", gc.kernels_endpoint, url_escape(self.kernel_id), "channels"
        )
        request = HTTPRequest(url, **gc.load_connection_args())
        self._ws = await websocket_connect(request, max_message_size=MAX_WS_MESSAGE)
        self._reader = asyncio.ensure_future(self._read(self._ws))

    async def _read(self, ws: WebSocketClientConnection) -> None:
        try:
            while True:
                raw = await ws.read_message()
                if raw is None:
                    self.lost = "the gateway closed the kernel's connection"
                    return
                if isinstance(raw, bytes):
                    continue  # a message with binary buffers: never one of the agent's
                msg = json.loads(raw)
                channel = msg.get("channel")
                if channel == "iopub" and msg.get("msg_type") == "status":
                    state = (msg.get("content") or {}).get("execution_state")
                    if state in DEAD_STATES:
                        self.died = f"the gateway reported the kernel {state}"
                if channel == "stdin":  # the agent's input requests: read with IOPub
                    channel = "iopub"
                if channel in self._queues:
                    self._queues[channel].put_nowait(msg)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.lost = f"the connection to the gateway failed ({type(e).__name__}: {e})"

    def _send(self, msg: dict, channel: str = "shell") -> str:
        if self._ws is None:
            raise RuntimeError(f"the channels of kernel {self.kernel_id} are not started")
        self._ws.write_message(json.dumps({**msg, "channel": channel}, default=json_default))
        return msg["header"]["msg_id"]

    def input(self, value: str) -> None:
        """Answer the kernel's input request, as jupyter_client's ``input`` does."""
        self._send(self.session.msg("input_reply", {"value": value}), "stdin")

    def kernel_info(self) -> str:
        return self._send(self.session.msg("kernel_info_request"))

    def execute(self, code: str, silent=False, store_history=True, allow_stdin=None) -> str:
        content = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": {},
            "allow_stdin": bool(allow_stdin),
            "stop_on_error": True,
        }
        return self._send(
            self.session.msg("execute_request", content, metadata={REQUEST_KEY: self.agent_request})
        )

    async def _get(self, channel: str, timeout: float | None) -> dict:
        try:
            return await asyncio.wait_for(self._queues[channel].get(), timeout)
        except asyncio.TimeoutError:
            raise queue.Empty from None

    async def get_shell_msg(self, timeout: float | None = None) -> dict:
        return await self._get("shell", timeout)

    async def get_iopub_msg(self, timeout: float | None = None) -> dict:
        return await self._get("iopub", timeout)

    async def execute_interactive(
        self,
        code,
        silent=False,
        store_history=True,
        allow_stdin=None,
        output_hook=None,
        stdin_hook=None,
        **_,
    ) -> dict:
        """Run ``code``, pass each of its IOPub messages to ``output_hook`` and each of its
        input requests to ``stdin_hook`` until the kernel is idle again, and return the shell
        reply (how jupyter_client's own method ends)."""
        msg_id = self.execute(code, silent, store_history, allow_stdin)
        while True:
            msg = await self.get_iopub_msg()
            if _parent(msg) != msg_id:
                continue
            if msg.get("channel") == "stdin":
                if stdin_hook is not None and msg["msg_type"] == "input_request":
                    answered = stdin_hook(msg)
                    if inspect.isawaitable(answered):
                        await answered
                continue
            if output_hook:
                output_hook(msg)
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                break
        while _parent(reply := await self.get_shell_msg()) != msg_id:
            pass
        return reply

    def stop_channels(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._ws is not None:
            self._ws.close()

    async def aclose(self) -> None:
        """``stop_channels``, returning once the reader has ended (a server that stops next
        would otherwise destroy it pending)."""
        self.stop_channels()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class IopubWatch:
    """A kernel's IOPub on the gateway, for the idle monitor: each message goes to
    ``on_message``; a lost connection is opened again (after 1 s, doubling up to a minute)."""

    def __init__(self, kernel_id: str, on_message, log, on_close=None):
        self.kernel_id = kernel_id
        self.on_message = on_message
        self.on_close = on_close
        self.log = log
        self.connected = False
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        delay = 1.0
        while True:
            client = GatewayChannels(self.kernel_id)
            try:
                await client.start_channels()
                self.connected, delay = True, 1.0
                while not client.lost:
                    try:
                        self.on_message(await client.get_iopub_msg(timeout=WATCH_INTERVAL * 4))
                    except queue.Empty:
                        pass
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.debug("jupyter_gpu_pause: IOPub of %s: %s", self.kernel_id, e)
            finally:
                self.connected = False
                await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)

    def close(self) -> None:
        self.task.cancel()
        if self.on_close:
            self.on_close()
