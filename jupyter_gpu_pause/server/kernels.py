"""Everything the lifecycle asks of Jupyter: run the agent in a kernel, start and stop kernels,
and point the notebook's Jupyter session at a restored kernel.

The agent runs as one silent execute_request on our own client, so the user's history and
namespace gain nothing. While it runs, the kernel process is watched: if it dies, or Jupyter's
restarter replaces it, the call fails with KernelDied instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import posixpath
import queue
from collections.abc import Callable

from jupyter_client.asynchronous import AsyncKernelClient

from ..kernel.agent import MIME_PROGRESS, MIME_RESULT
from .errors import AgentFailed, KernelDied, WrongState

WATCH_INTERVAL = 0.5
IOPUB_GRACE = 0.5  # seconds after a shell reply by which its IOPub status arrives, if subscribed


def _parent(msg: dict) -> str | None:
    return msg.get("parent_header", {}).get("msg_id")


async def _round_trip(client: AsyncKernelClient) -> None:
    """Return once a kernel_info request was answered on shell *and* seen on IOPub.

    A new client's IOPub subscription reaches the kernel a moment after connecting; what the
    kernel publishes before then is dropped, and execute_interactive would wait forever for an
    idle status it never sees. Unlike jupyter_client's wait_for_ready, this sends a new request
    only after the previous one was answered: behind a running cell, requests do not pile up.
    """
    while True:
        msg_id = client.kernel_info()
        while _parent(await client.get_shell_msg()) != msg_id:
            pass
        try:
            while _parent(await client.get_iopub_msg(timeout=IOPUB_GRACE)) != msg_id:
                pass
            return
        except queue.Empty:
            continue  # not subscribed yet: ask again


def _pid(kernel) -> int | None:
    prov = getattr(kernel, "provisioner", None)
    proc = getattr(prov, "process", None)
    return getattr(proc, "pid", None)


class KernelBridge:
    def __init__(self, kernel_manager, session_manager, kernel_spec_manager, log):
        self.km = kernel_manager
        self.sm = session_manager
        self.ksm = kernel_spec_manager
        self.log = log
        # Session ids of our own clients: their requests are not user activity.
        self.agent_sessions: set[str] = set()
        self._agent_calls: dict[str, int] = {}  # kernel id -> our requests in flight

    # -- facts -----------------------------------------------------------------------------
    def is_running(self, kernel_id: str | None) -> bool:
        return bool(kernel_id) and kernel_id in self.km

    def kernel(self, kernel_id: str):
        return self.km.get_kernel(kernel_id)

    def pid(self, kernel_id: str) -> int | None:
        return _pid(self.kernel(kernel_id)) if self.is_running(kernel_id) else None

    def connections(self, kernel_id: str) -> int:
        """Open browser (websocket) connections to the kernel, as jupyter_server counts them."""
        return int(getattr(self.km, "_kernel_connections", {}).get(kernel_id, 0))

    def execution_state(self, kernel_id: str) -> str | None:
        return getattr(self.kernel(kernel_id), "execution_state", None)

    def agent_running(self, kernel_id: str) -> bool:
        """One of our own requests runs in the kernel (it shows busy, but not for a person)."""
        return self._agent_calls.get(kernel_id, 0) > 0

    def language(self, kernel_name: str) -> str:
        try:
            return (self.ksm.get_kernel_spec(kernel_name).language or "unknown").lower()
        except Exception:
            return "unknown"

    async def jupyter_sessions(self) -> list[dict]:
        return await self.sm.list_sessions()

    async def kernel_for_path(self, path: str) -> str | None:
        """The running kernel of the notebook's Jupyter session, if it has one."""
        for js in await self.sm.list_sessions():
            if js["path"] == path and js.get("kernel"):
                return js["kernel"]["id"]
        return None

    # -- running the agent -------------------------------------------------------------------
    async def wait_idle(self, kernel_id: str, interval: float = 0.2) -> None:
        """Return once the kernel has finished its running cell (the only thing that waits)."""
        while self.execution_state(kernel_id) == "busy":
            if not self.is_running(kernel_id):
                raise KernelDied("the kernel stopped while the pause waited for its cell")
            await asyncio.sleep(interval)

    async def _watch(self, kernel_id: str, pid: int | None) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if not self.is_running(kernel_id):
                raise KernelDied("the kernel was shut down", pid=pid)
            kernel = self.kernel(kernel_id)
            if _pid(kernel) != pid or not await kernel.is_alive():
                raise KernelDied("the kernel process died", pid=pid)

    async def settle(self, kernel_id: str, dead_pid: int | None, timeout: float = 20.0) -> bool:
        """After a kernel died, wait for Jupyter's restarter to finish (or give up).

        Returns True when a fresh process now runs under the same kernel id. Waiting matters:
        the restarter notices a death seconds after we do, and a resume started in between
        would see its kernel replaced under it.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            if not self.is_running(kernel_id):
                return False
            kernel = self.kernel(kernel_id)
            pid = _pid(kernel)
            if pid is not None and pid != dead_pid and await kernel.is_alive():
                return True
            await asyncio.sleep(0.2)
        return self.is_running(kernel_id)

    async def run_agent(
        self,
        kernel_id: str,
        func: str,
        params: dict,
        on_progress: Callable[[dict], None] | None = None,
    ) -> dict:
        """Run ``agent.<func>(params)`` in the kernel and return its result.

        Raises AgentFailed with the agent's message, or KernelDied.
        """
        kernel = self.kernel(kernel_id)
        pid = _pid(kernel)
        arg = base64.b64encode(json.dumps(params).encode()).decode()
        code = f"__import__('jupyter_gpu_pause.kernel.agent', fromlist=['_']).{func}('{arg}')"
        client = AsyncKernelClient()
        client.load_connection_info(kernel.get_connection_info(session=False))
        self.agent_sessions.add(client.session.session)
        client.start_channels()
        result: dict = {}

        def hook(msg):
            if msg["msg_type"] == "error" and not result:
                result["error"] = "\n".join(msg["content"].get("traceback", [])[-3:])
            if msg["msg_type"] != "display_data":
                return
            data = msg["content"]["data"]
            if MIME_PROGRESS in data and on_progress:
                on_progress(data[MIME_PROGRESS])
            if MIME_RESULT in data:
                result["reply"] = data[MIME_RESULT]

        async def execute():
            # Behind a running cell, this waits for it, as the agent itself would have to.
            await _round_trip(client)
            await client.execute_interactive(
                code,
                silent=True,
                store_history=False,
                allow_stdin=False,
                output_hook=hook,
                timeout=None,
            )

        run = asyncio.ensure_future(execute())
        watch = asyncio.ensure_future(self._watch(kernel_id, pid))
        self._agent_calls[kernel_id] = self._agent_calls.get(kernel_id, 0) + 1
        try:
            done, _ = await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done:
                watch.result()  # raises KernelDied
            run.result()
        finally:
            for t in (run, watch):
                t.cancel()
            client.stop_channels()
            left = self._agent_calls.pop(kernel_id, 1) - 1
            if left > 0:
                self._agent_calls[kernel_id] = left
        reply = result.get("reply")
        if reply is None:
            if "No module named" in result.get("error", ""):
                raise AgentFailed(
                    "jupyter_gpu_pause is not installed in this kernel's Python environment; "
                    "install it there (pip install jupyter_gpu_pause) to pause this kernel",
                    "agent-missing",
                )
            raise AgentFailed(f"the agent did not answer ({result.get('error') or 'no result'})")
        if not reply["ok"]:
            err = reply["error"]
            raise AgentFailed(err["message"], err.get("reason"), err.get("check"))
        return reply["result"]

    # -- starting, stopping, attaching -----------------------------------------------------
    async def start(self, kernel_name: str, cwd: str, path: str, env: dict) -> str:
        # find_kernel_specs walks the kernelspec folders on disk: keep it off the event loop
        specs = await asyncio.get_running_loop().run_in_executor(None, self.ksm.find_kernel_specs)
        if kernel_name not in specs:
            raise WrongState(
                f"the kernelspec '{kernel_name}' is no longer installed", "no-kernelspec"
            )
        full_env = {**os.environ, "JPY_SESSION_NAME": path, **env}
        return await self.km.start_kernel(kernel_name=kernel_name, path=cwd, env=full_env)

    async def shutdown(self, kernel_id: str) -> None:
        if self.is_running(kernel_id):
            await self.km.shutdown_kernel(kernel_id)

    async def attach(self, path: str, name: str, type_: str, kernel_name: str, kernel_id: str):
        """Make the notebook's Jupyter session use ``kernel_id`` (creating the session if gone)."""
        for js in await self.sm.list_sessions():
            if js["path"] == path:
                if js["kernel"]["id"] != kernel_id:
                    await self.sm.update_session(js["id"], kernel_id=kernel_id)
                return
        await self.sm.create_session(
            path=path,
            name=name or posixpath.basename(path),
            type=type_,
            kernel_name=kernel_name,
            kernel_id=kernel_id,
        )
