"""Everything the lifecycle asks of Jupyter: run the agent in a kernel, start and stop kernels,
and point the notebook's Jupyter session at a restored kernel.

The agent runs as one silent execute_request on our own client, so the user's history and
namespace gain nothing. While it runs, the kernel process is watched: if it dies, or Jupyter's
restarter replaces it, the call fails with KernelDied instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import queue
import shutil
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast, overload

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async

from ...kernel import capability
from ...kernel.cells import NO_RERUN_TAG
from ...kernel.protocol import (
    BOOT_CODE,
    CODE,
    FINISH,
    MIME_PROGRESS,
    MIME_RESULT,
    PROTOCOL,
    REQUEST_KEY,
    TRACK,
    BringArgs,
    BringReply,
    Call,
    NoArgs,
    Progress,
    Request,
    RequestName,
    request,
)
from ...store.spool import MARK as SPOOL_MARK
from ...version import __version__
from ..state.errors import AgentFailed, GpuPauseError, KernelDied, WrongState
from . import bundle
from .spool import SpoolFolder, SpoolRoot

WATCH_INTERVAL = 0.5
# Seconds after a shell reply by which its IOPub status arrives if the subscription is live:
# the first try is short (a new client's subscription is usually live within milliseconds, and
# every miss costs a whole grace), each retry doubles it, up to the last, for a loaded machine.
IOPUB_GRACE = (0.01, 0.5)
SHELL_POLL = 0.5  # seconds between two looks at a kernel that has not answered yet
CANCEL_GRACE = 8.0  # seconds a cancelled agent call may take to unwind after the interrupt
FINISH_TIMEOUT = 5.0  # seconds the agent may take to judge a kill before a graceful shutdown
KILL_WAIT = 5.0  # seconds a killed kernel's process may take to end (jupyter_client's, too)
KILL_POLL = 0.005  # seconds between two looks for that end, where no pidfd wakes us
MAX_MESSAGE = 2000  # characters of an agent's error message passed on to the user
MAX_PACKAGES = 100  # package names a capture's progress may name for a warm kernel

A = TypeVar("A")
R = TypeVar("R")
OnProgress = Callable[[Progress], None]


def _parent(msg: dict) -> str | None:
    return msg.get("parent_header", {}).get("msg_id")


async def _round_trip(client: AsyncKernelClient, busy: Callable[[], bool], patience: float):
    """Return once a kernel_info request was answered on shell *and* seen on IOPub.

    A new client's IOPub subscription reaches the kernel a moment after connecting; what the
    kernel publishes before then is dropped, and execute_interactive would wait forever for an
    idle status it never sees. Unlike jupyter_client's wait_for_ready, this sends a new request
    only after the previous one was answered: behind a running cell, requests do not pile up.

    Behind a running cell (``busy()``) it waits as long as the cell runs; a kernel that shows
    no cell running and still does not answer for ``patience`` seconds is stuck (a stopped
    process, a deadlock), and AgentFailed says so instead of waiting forever.
    """
    loop = asyncio.get_running_loop()
    grace, most = IOPUB_GRACE
    while True:
        msg_id = client.kernel_info()
        waiting_since = loop.time()
        while True:
            try:
                if _parent(await client.get_shell_msg(timeout=SHELL_POLL)) == msg_id:
                    break
            except queue.Empty:
                if busy():
                    waiting_since = loop.time()
                elif loop.time() - waiting_since > patience:
                    raise AgentFailed(
                        f"the kernel did not answer for {patience:g} s although it is not "
                        "running a cell; it may be stuck (a stopped process or a deadlock). "
                        "Nothing was changed",
                        "kernel-unresponsive",
                    ) from None
        try:
            while _parent(await client.get_iopub_msg(timeout=grace)) != msg_id:
                pass
            return
        except queue.Empty:
            grace = min(grace * 2, most)
            continue  # not subscribed yet: ask again


class _AgentClient(AsyncKernelClient):
    """A client whose execute requests carry the agent's request in the message's metadata.

    The code stays one short line (``agent.CODE``). A request in the code itself (a resume's
    manifest: ~0.5 MB for 2 500 variables) would go through IPython's input transformers,
    which take ~60 ms per MB before a line of ours runs.
    """

    agent_request: Request | None = None

    def execute(self, code, silent=False, store_history=True, user_expressions=None,
                allow_stdin=None, stop_on_error=True) -> str:  # fmt: skip
        content = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": user_expressions or {},
            "allow_stdin": bool(allow_stdin),
            "stop_on_error": stop_on_error,
        }
        msg = self.session.msg(
            "execute_request", content, metadata={REQUEST_KEY: self.agent_request}
        )
        self.shell_channel.send(msg)
        return msg["header"]["msg_id"]


def _agent_reply(result: dict, same_version: bool = False) -> dict[str, Any]:
    """The agent's result, after checking the reply is one this server understands.

    The kernel runs user code, which may have replaced our agent or installed another version
    of this package: anything unexpected becomes an AgentFailed saying what was wrong. With
    ``same_version`` (the server brings its agent where it differs), a reply from another
    version is ``agent-version`` too, not only one of another protocol.
    """
    reply = result.get("reply")
    if reply is None:
        error = result.get("error", "")
        if "No module named" in error and (same_version or "jupyter_gpu_pause" in error):
            raise AgentFailed(
                "jupyter_gpu_pause is not installed in this kernel's Python environment; "
                "install it there (pip install jupyter_gpu_pause) to pause this kernel",
                "agent-missing",
            )
        if "has no attribute 'call" in error:  # call (protocol < 3) or call_parent
            raise AgentFailed(
                "the kernel's environment has an older jupyter_gpu_pause than the server "
                f"({__version__}); install the server's version there",
                "agent-version",
            )
        raise AgentFailed(f"the agent did not answer ({error or 'no result'})", "agent-silent")
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise AgentFailed(
            "the kernel's agent sent a reply the server cannot read", "bad-agent-reply"
        )
    if reply.get("protocol") != PROTOCOL or (same_version and reply.get("version") != __version__):
        raise AgentFailed(
            f"the kernel's environment has jupyter_gpu_pause {str(reply.get('version'))[:40]} "
            f"(agent protocol {str(reply.get('protocol'))[:10]}) but the server has "
            f"{__version__} (protocol {PROTOCOL}); install the server's version there",
            "agent-version",
        )
    if not reply["ok"]:
        err = reply.get("error")
        if not isinstance(err, dict) or not isinstance(err.get("message"), str):
            raise AgentFailed("the kernel's agent failed without saying why", "bad-agent-reply")
        reason, check = err.get("reason"), err.get("check")
        raise AgentFailed(
            err["message"][:MAX_MESSAGE],
            reason if isinstance(reason, str) else "agent",
            check if isinstance(check, str) else None,
        )
    if not isinstance(reply.get("result"), dict):
        raise AgentFailed("the kernel's agent answered without a result", "bad-agent-reply")
    return reply["result"]


def _refused(result: dict) -> AgentFailed:
    """Why a kernel could not take the agent the server brought, from what its bootstrap
    raised: it has no IPython, its Python cannot parse the bootstrap, or anything else."""
    ename, evalue = result.get("ename", ""), result.get("evalue", "")
    if ename in ("ModuleNotFoundError", "ImportError") and "IPython" in evalue:
        return AgentFailed(
            "this kernel has no IPython: jupyter_gpu_pause's agent runs in IPython kernels "
            "(ipykernel 6 or newer)",
            "no-ipython",
        )
    if ename == "SyntaxError":
        return AgentFailed(
            "this kernel's Python is too old for jupyter_gpu_pause's agent (it needs 3.9 or newer)",
            "python-too-old",
        )
    if ename == "AttributeError" and "get_parent" in evalue:
        return AgentFailed(
            "this kernel's ipykernel is too old for jupyter_gpu_pause's agent (it needs "
            "ipykernel 6 or newer)",
            "agent-refused",
        )
    why = f"{ename}: {evalue}" if ename else (result.get("error") or "no answer")
    return AgentFailed(
        f"the kernel did not take jupyter_gpu_pause's agent ({why[:MAX_MESSAGE]})",
        "agent-refused",
    )


def _progress(data) -> Progress | None:
    """A progress message from the agent, or None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("phase"), str):
        return None
    done, total = data.get("done_bytes"), data.get("total_bytes")
    if not isinstance(done, int) or not (total is None or isinstance(total, int)):
        return None
    out: Progress = {"phase": data["phase"][:40], "done_bytes": done, "total_bytes": total}
    if data.get("unit") == "cells":  # a rebuild counts cells, not bytes
        out["unit"] = "cells"
    host = data.get("host_bytes")  # "staged": what the agent copied to host memory
    if isinstance(host, int) and host >= 0:
        out["host_bytes"] = host
    packages = data.get("packages")  # the capture's, for a warm kernel: top-level names only
    if isinstance(packages, list):
        out["packages"] = [
            p for p in packages[:MAX_PACKAGES] if isinstance(p, str) and p.isidentifier()
        ]
    return out


async def _ended(process, timeout: float) -> None:
    """Return once the child ``process`` (a ``Popen``) has ended and is reaped, or after
    ``timeout`` seconds: woken by the kernel's pidfd where Linux has one, else by looking every
    few milliseconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the process is gone already
        fd = None
    if fd is not None:
        gone = loop.create_future()

        def woken() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(fd, woken)
        try:
            await asyncio.wait_for(gone, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    while process.poll() is None and loop.time() < end:
        await asyncio.sleep(KILL_POLL)


def _pid(kernel) -> int | None:
    prov = getattr(kernel, "provisioner", None)
    proc = getattr(prov, "process", None)
    return getattr(proc, "pid", None)


class KernelBridge:
    supports_warm_kernels = True  # see gateway.py: a gateway's kernels have no warm spares
    local_processes = True  # a kernel's process runs on this machine (its CUDA driver's reach)

    def __init__(
        self, kernel_manager, session_manager, kernel_spec_manager, log, answer_timeout: float
    ):
        self.km = kernel_manager
        self.sm = session_manager
        self.ksm = kernel_spec_manager
        self.log = log
        self.answer_timeout = answer_timeout
        # Session ids of our own clients: their requests are not user activity.
        self.agent_sessions: set[str] = set()
        self._agent_calls: dict[str, int] = {}  # kernel id -> our requests in flight
        self.bring_agent = True  # GpuPauseApp.bring_agent
        self.spool: SpoolRoot | None = None  # where brought agents' blobs go (spool.py)
        self._brought: dict[str, bool] = {}  # kernel id -> it sees the spool folder
        # kernelspec -> its kernels' bytecode version, learned at a bring: the kernelspec's
        # kernels lack the agent (their first request brings it) and take compiled bundles
        self._magic: dict[str, str] = {}
        self._answered: set[str] = set()  # kernels whose agent answered once

    # -- facts -----------------------------------------------------------------------------
    def is_running(self, kernel_id: str | None) -> bool:
        return bool(kernel_id) and kernel_id in self.km

    def kernel(self, kernel_id: str):
        return self.km.get_kernel(kernel_id)

    def pid(self, kernel_id: str) -> int | None:
        return _pid(self.kernel(kernel_id)) if self.is_running(kernel_id) else None

    def gpu_usage(self, kernel_id: str):
        """A kernel's own report of its GPU use, where NVML cannot see its process (gateway.py);
        None here: a local kernel is measured by the probe."""
        return None

    def connections(self, kernel_id: str) -> int:
        """Open browser (websocket) connections to the kernel, as jupyter_server counts them."""
        if not self.is_running(kernel_id):
            return 0
        return int(self.km.kernel_model(kernel_id).get("connections") or 0)

    def holds_capability(self, kernel_id: str, presented: str) -> bool:
        """The caller proved it is this running kernel (see ``kernel/capability.py``)."""
        if not self.is_running(kernel_id):
            return False
        key = getattr(getattr(self.kernel(kernel_id), "session", None), "key", b"")
        return capability.matches(key or b"", kernel_id, presented)

    def execution_state(self, kernel_id: str) -> str | None:
        return getattr(self.kernel(kernel_id), "execution_state", None)

    def agent_running(self, kernel_id: str) -> bool:
        """One of our own requests runs in the kernel (it shows busy, but not for a person)."""
        return self._agent_calls.get(kernel_id, 0) > 0

    def kernel_name(self, kernel_id: str) -> str:
        """The kernelspec a running kernel was started from ('' when it is gone)."""
        try:
            return str(self.kernel(kernel_id).kernel_name)
        except Exception:
            return ""

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
    async def wait_idle(self, kernel_id: str, interval: float = 0.02) -> None:
        """Return once the kernel has finished its running cell (the only thing that waits).

        It reads the state jupyter_server keeps from the kernel's IOPub status messages, an
        attribute: looking every 20 ms costs nothing, and the pause starts within 20 ms of
        the cell's end (it was 200: a tenth of a second, on average, on every pause behind a
        cell)."""
        while self.execution_state(kernel_id) == "busy":
            if not self.is_running(kernel_id):
                raise KernelDied("the kernel stopped while the pause waited for its cell")
            await asyncio.sleep(interval)

    async def _open_client(self, kernel_id: str, request: Request, stdin: bool = False):
        """Our own client of the kernel, sending ``request`` with its execute requests (and
        answering its input requests, with ``stdin``)."""
        kernel = self.kernel(kernel_id)
        # the server's own zmq context: one made per call would be destroyed on the loop
        client = _AgentClient(context=self.km.context)
        client.agent_request = request
        client.load_connection_info(kernel.get_connection_info(session=False))
        # shell and IOPub only: the heartbeat is a thread that start waits for and stop joins,
        # on the loop (the kernel's life is _watch's job); stdin and control are not used
        client.start_channels(stdin=stdin, hb=False, control=False)
        return client

    async def _watch(self, kernel_id: str, pid: int | None, client) -> None:
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

    @overload
    async def run_agent(
        self,
        kernel_id: str,
        func: Call[A, R],
        params: A,
        on_progress: OnProgress | None = None,
        on_sent: Callable[[], None] | None = None,
        on_input: Callable[[str], str] | None = None,
    ) -> R: ...

    @overload
    async def run_agent(
        self,
        kernel_id: str,
        func: RequestName,
        params: Mapping[str, object],
        on_progress: OnProgress | None = None,
        on_sent: Callable[[], None] | None = None,
        on_input: Callable[[str], str] | None = None,
    ) -> dict[str, Any]: ...

    async def run_agent(
        self, kernel_id, func, params, on_progress=None, on_sent=None, on_input=None
    ):
        """Run the agent's request ``func`` with ``params`` in the kernel and return its
        result: ``run_agent(kid, protocol.CAPTURE, protocol.CaptureArgs(...))`` is typed as a
        ``CaptureReply``; a request named by its string is typed as a plain dict. The reply's
        shape is the agent's word: ``replies.py`` checks what the server relies on.

        A kernel whose environment lacks this version of the agent gets it first (``bring``),
        unless ``bring_agent`` is off; then the request runs again, once.

        ``on_sent`` is called once the kernel has answered and the request goes to it (a new
        kernel has finished booting: the resume's timings split there). ``on_input`` answers
        the agent's input requests (a blob's parts over the kernel's channel: ``spool.py``), on
        a thread. Raises AgentFailed with the agent's message, or KernelDied.
        """
        name = func.name if isinstance(func, Call) else func
        if self._lacks_agent(kernel_id):
            await self.bring(kernel_id)
        try:
            result = await self._execute(
                kernel_id, CODE, request(name, params), on_progress, on_sent, on_input
            )
            reply = _agent_reply(result, same_version=self.bring_agent)
        except AgentFailed as e:
            if not (self.bring_agent and e.reason in ("agent-missing", "agent-version")):
                raise
            await self.bring(kernel_id)
            result = await self._execute(
                kernel_id, CODE, request(name, params), on_progress, None, on_input
            )
            reply = _agent_reply(result, same_version=True)
        if kernel_id not in self._answered:
            self._answered = {k for k in self._answered if self.is_running(k)} | {kernel_id}
        return reply

    # -- bringing the agent ----------------------------------------------------------------
    async def bring(self, kernel_id: str) -> None:
        """Install this server's agent in the kernel, for its process only
        (``kernel/bootstrap.py``, ``bundle.py``); AgentFailed with a reason that says why the
        kernel cannot take it (``python-too-old``, ``no-ipython``, ``agent-refused``)."""
        spec = self.kernel_name(kernel_id)
        args = BringArgs(
            boot=bundle.boot(), version=__version__, protocol=PROTOCOL, mime=MIME_RESULT
        )
        # (each built once per process, reading and compressing files: not on the loop)
        if self._magic.get(spec) == bundle.MAGIC:  # its Python runs the server's bytecode
            args["compiled"] = await asyncio.to_thread(bundle.compiled)
            args["magic"] = bundle.MAGIC
        else:
            args["bundle"] = await asyncio.to_thread(bundle.bundle)
        if self.spool is not None:
            args["spool_probe"] = await asyncio.to_thread(self.spool.probe)
        result = await self._execute(kernel_id, BOOT_CODE, request("bring", args))
        if result.get("reply") is None:
            raise _refused(result)
        try:
            reply = cast(BringReply, _agent_reply(result))
        except AgentFailed as e:
            if e.reason != "bundle-python" or "compiled" not in args:
                raise
            self._magic.pop(spec, None)  # its Python changed: the source, then
            return await self.bring(kernel_id)
        self._magic[spec] = str(reply.get("magic"))
        self._brought = {k: v for k, v in self._brought.items() if self.is_running(k)}
        self._brought[kernel_id] = bool(reply.get("sees_spool"))
        self.log.info(
            "jupyter_gpu_pause: brought the agent (%s modules) into kernel %s, whose "
            "environment lacks the agent of jupyter_gpu_pause %s",
            reply.get("modules"),
            kernel_id,
            __version__,
        )

    def _lacks_agent(self, kernel_id: str) -> bool:
        """A kernel never asked yet, of a kernelspec whose kernels needed the agent brought:
        it is brought at once, without a first request that would fail."""
        return (
            self.bring_agent
            and kernel_id not in self._answered
            and kernel_id not in self._brought
            and self.kernel_name(kernel_id) in self._magic
        )

    async def spool_for(self, kernel_id: str, what: str) -> SpoolFolder | None:
        """A spool folder for one operation on a kernel whose blobs go through the server,
        else None (its agent writes the store itself). A kernel never asked yet is asked
        first (``TRACK``), which brings the agent where it must."""
        if self._lacks_agent(kernel_id):
            await self.bring(kernel_id)
        elif kernel_id not in self._answered and kernel_id not in self._brought:
            await self.run_agent(kernel_id, TRACK, NoArgs())
        if kernel_id not in self._brought:
            return None
        if self.spool is None:
            raise AgentFailed("the server has no spool folder for this kernel's blobs", "store")
        # a kernel that cannot see the folder (another machine) reaches it over its channel
        return self.spool.folder(what, channel=not self._brought[kernel_id])

    async def _execute(
        self, kernel_id, code, req: Request, on_progress=None, on_sent=None, on_input=None
    ):
        """Run ``code`` with ``req`` in its metadata; what the kernel published and raised."""
        pid = self.pid(kernel_id)
        client = await self._open_client(kernel_id, req, stdin=on_input is not None)
        self.agent_sessions.add(client.session.session)
        result: dict = {}

        def hook(msg):
            if msg["msg_type"] == "error" and not result:
                result["error"] = "\n".join(msg["content"].get("traceback", [])[-3:])
                result["ename"] = str(msg["content"].get("ename", ""))
                result["evalue"] = str(msg["content"].get("evalue", ""))[:MAX_MESSAGE]
            if msg["msg_type"] != "display_data":
                return
            data = msg["content"].get("data") or {}
            progress = _progress(data.get(MIME_PROGRESS))
            if progress and on_progress:
                on_progress(progress)
            if MIME_RESULT in data and "reply" not in result:
                result["reply"] = data[MIME_RESULT]

        sent = []  # the agent's request has gone to the kernel: it runs there

        async def answer(msg) -> None:
            """An input request of the agent's: answered by ``on_input``, on a thread (a
            blob's part is a file read or write); anything else gets an empty answer."""
            prompt = str((msg.get("content") or {}).get("prompt", ""))
            reply = ""
            if on_input is not None and prompt.startswith(SPOOL_MARK):
                reply = await asyncio.to_thread(on_input, prompt[len(SPOOL_MARK) :])
            client.input(reply)

        async def execute():
            # Behind a running cell, this waits for it, as the agent itself would have to.
            await _round_trip(
                client, lambda: self.execution_state(kernel_id) == "busy", self.answer_timeout
            )
            sent.append(True)
            if on_sent:
                on_sent()
            await client.execute_interactive(
                code,
                silent=True,
                store_history=False,
                allow_stdin=on_input is not None,
                output_hook=hook,
                stdin_hook=answer,
                timeout=None,
            )

        run = asyncio.ensure_future(execute())
        watch = asyncio.ensure_future(self._watch(kernel_id, pid, client))
        self._agent_calls[kernel_id] = self._agent_calls.get(kernel_id, 0) + 1
        try:
            try:
                done, _ = await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                if sent:
                    await self._stop_agent(kernel_id, run, watch)
                raise
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
        return result

    async def _stop_agent(self, kernel_id: str, run, watch) -> None:
        """The caller gave up on a running agent call (Cancel): interrupt the kernel and wait,
        briefly, for the agent to unwind, so the kernel is idle and usable when this returns.

        Only the agent's own request is interrupted: ``sent`` is set once the user's cell (if
        any) has finished, and the agent only reads the namespace, so nothing of the user's
        changes. A kernel that does not come back within ``CANCEL_GRACE`` is left running as
        it is; the call still ends.
        """
        try:
            await self.km.interrupt_kernel(kernel_id)
        except Exception as e:  # the kernel is gone or cannot be signalled: nothing to wait for
            self.log.warning("jupyter_gpu_pause: could not interrupt kernel %s: %s", kernel_id, e)
            return
        await asyncio.wait({run, watch}, timeout=CANCEL_GRACE, return_when=asyncio.FIRST_COMPLETED)
        if not run.done():
            self.log.warning(
                "jupyter_gpu_pause: kernel %s still runs the cancelled agent call after %g s",
                kernel_id,
                CANCEL_GRACE,
            )

    # -- starting, stopping, attaching -----------------------------------------------------
    async def start(self, kernel_name: str, cwd: str, path: str, name: str, env: dict) -> str:
        """Start a kernel as Jupyter starts one for a notebook, plus the capacity grant's env.

        The environment is jupyter_server's own for a session (``get_kernel_env``): a resumed
        kernel gets exactly what the notebook's first kernel got, and no credential of ours.
        """
        # find_kernel_specs walks the kernelspec folders on disk: keep it off the event loop
        loop = asyncio.get_running_loop()
        specs = await loop.run_in_executor(None, self.ksm.find_kernel_specs)
        if kernel_name not in specs:
            raise WrongState(
                f"the kernelspec '{kernel_name}' is no longer installed", "no-kernelspec"
            )
        # Checked before asking Jupyter: jupyter_client (8.x) keeps a kernel whose process
        # could not be launched among its pending kernels, and the server's shutdown then
        # fails on it. A program that is not there is the usual cause; say so plainly.
        spec = await loop.run_in_executor(None, self.ksm.get_kernel_spec, kernel_name)
        program = spec.argv[0] if spec.argv else ""
        if not program or shutil.which(program) is None:
            raise GpuPauseError(
                f"a kernel of '{kernel_name}' could not be started: its kernelspec runs "
                f"{program or 'nothing'!r}, which is not an executable program here",
                "kernel-start",
            )
        return await self._start(kernel_name, cwd, path, name, env)

    async def _start(self, kernel_name: str, cwd: str, path: str, name: str, env: dict) -> str:
        full_env = {**self.sm.get_kernel_env(path, name or None), **env}
        try:
            return await self.km.start_kernel(kernel_name=kernel_name, path=cwd, env=full_env)
        except Exception as e:  # a broken kernelspec, no free ports, a failing provisioner
            raise GpuPauseError(
                f"a kernel of '{kernel_name}' could not be started ({type(e).__name__}: {e})",
                "kernel-start",
            ) from e

    def session_environ(self, path: str, name: str, env: dict) -> dict:
        """What a kernel started for this notebook gets beyond the server's own environment:
        Jupyter's session variables and the capacity grant's (a warm kernel takes them on)."""
        full = {**self.sm.get_kernel_env(path, name or None), **env}
        return {k: v for k, v in full.items() if os.environ.get(k) != v}

    async def no_rerun_cells(self, path: str) -> list[str]:
        """Ids of the notebook's cells tagged ``gp-no-rerun`` as saved on disk, which a rebuild
        never re-runs; none when the file is not a notebook or cannot be read."""
        try:
            cm = self.sm.contents_manager
            model = await ensure_async(cm.get(path, content=True, type="notebook"))
            nb_cells = model["content"]["cells"]
        except Exception as e:  # a console, a deleted or unreadable file: no tags to honour
            self.log.debug("jupyter_gpu_pause: no cell tags read from %s: %r", path, e)
            return []
        return [
            str(c["id"])
            for c in nb_cells
            if c.get("id") and NO_RERUN_TAG in (c.get("metadata", {}).get("tags") or [])
        ]

    def os_folder(self, cwd: str) -> str:
        """The folder on disk a kernel started in ``cwd`` (an API path) would run in."""
        return self.km.cwd_for_path(cwd)

    async def shutdown(self, kernel_id: str) -> None:
        """Shut a kernel down; once asked, the shutdown runs to its end even if the caller is
        cancelled. (Cancelling jupyter_client half way leaves the kernel registered with a
        readiness future that never completes: the server's own shutdown_all then raises
        InvalidStateError and leaves the remaining kernels running.)"""
        if self.is_running(kernel_id):
            await asyncio.shield(self.km.shutdown_kernel(kernel_id))

    async def kill(self, kernel_id: str) -> str:
        """Kill a kernel's process without asking it (a kernel suspended in place cannot run
        its exit: its CUDA teardown would block until it is restored); shielded as
        ``shutdown`` is. Returns ``"killed"`` (as ``finish`` says it)."""
        if self.is_running(kernel_id):
            await asyncio.shield(self._kill(kernel_id))
        return "killed"

    async def _kill(self, kernel_id: str) -> None:
        """SIGKILL the kernel's process group and wait for the process's end, then let
        jupyter_client do its bookkeeping (``shutdown_kernel(now=True)``: restarter, connection
        file, the kernel's entry), which then finds the process gone. Its own kill looks for
        the end every 0.1 s: a kernel that was gone in 2 ms cost a pause 100."""
        kernel = self.kernel(kernel_id)
        provisioner = getattr(kernel, "provisioner", None)
        process = getattr(provisioner, "process", None)
        if provisioner is not None and process is not None and process.poll() is None:
            kernel.stop_restarter()  # it would take the death for a crash and start another
            try:
                await provisioner.kill()
                await _ended(process, KILL_WAIT)
            except Exception as e:  # jupyter_client's own kill below tries again
                self.log.debug("jupyter_gpu_pause: fast kill of %s: %r", kernel_id, e)
        await self.km.shutdown_kernel(kernel_id, now=True)

    async def finish(self, kernel_id: str) -> str:
        """Stop a kernel whose state is safe elsewhere (a committed checkpoint) the fast way
        when nothing its user relies on is lost by it: ``"killed"``, else a graceful shutdown,
        ``"graceful: <what a kill would lose>"``.

        The kernel's agent judges and, when a kill is safe, writes out what a graceful exit
        would have (``kernel/finish.py``); any failure or silence of it means graceful. The
        kill is jupyter_client's ``shutdown_kernel(now=True)``: the same bookkeeping as a
        graceful shutdown (restarter stopped first, so no auto-restart; activity watch,
        connection file and the kernel's entry dropped; Jupyter's session lapses with the
        kernel), only the shutdown request and its wait skipped. Once asked, it runs to its end
        even if the caller is cancelled, as ``shutdown``.
        """
        return await asyncio.shield(self._finish(kernel_id))

    async def _finish(self, kernel_id: str) -> str:
        try:
            answer = await asyncio.wait_for(
                self.run_agent(kernel_id, FINISH, NoArgs()), FINISH_TIMEOUT
            )
            why = None if answer.get("safe") is True else str(answer.get("why") or "unsafe")
        except asyncio.TimeoutError:
            why = f"the kernel did not say within {FINISH_TIMEOUT:g} s whether a kill is safe"
        except Exception as e:  # another agent, a kernel that died or was stopped meanwhile
            why = f"the kernel could not say whether a kill is safe ({e})"
        if why is None:
            await self.kill(kernel_id)
            return "killed"
        await self.shutdown(kernel_id)
        return f"graceful: {why[:MAX_MESSAGE]}"

    async def attach(self, path: str, name: str, type_: str, kernel_name: str, kernel_id: str):
        """Make the notebook's Jupyter session use ``kernel_id`` (creating the session if gone)."""
        try:
            await self._attach(path, name, type_, kernel_name, kernel_id)
        except Exception as e:
            raise GpuPauseError(
                f"the notebook could not be attached to the restored kernel "
                f"({type(e).__name__}: {e})",
                "attach",
            ) from e

    async def _attach(self, path, name, type_, kernel_name, kernel_id) -> None:
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
