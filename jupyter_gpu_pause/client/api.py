"""``GpuPauseClient``: every operation of the REST API as a method, for scripts, schedulers and
the ``jupyter gpu-pause`` CLI (which is built on it).

Answers are the REST JSON as plain dicts (a Session, a Checkpoint, an Event, as the REST
reference describes them), so a field the server adds reaches the caller without a release of
this client. Refusals are typed errors (``errors.py``); lost requests are retried safely
(``transport.py``).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from .discovery import Target, find_server
from .errors import OperationFailed, WaitTimeout
from .states import error_text, going, succeeded
from .transport import DEFAULT_RETRY, Retry, Transport
from .types import Budget, Budgets, Checkpoint, Event, Session

# a session by id, or a Session as an earlier call returned it
SessionRef = str | Mapping[str, Any]
Progress = Callable[[Session], object]

POLL = 0.5  # seconds between two looks at a session being waited for
EVENTS_POLL = 1.0  # seconds between two looks for new events when following


def session_id(session: SessionRef) -> str:
    return session if isinstance(session, str) else str(session["id"])


def session_path(session: SessionRef, action: str = "") -> str:
    """``sessions/{id}[/action]``, the id quoted (a name typed by a user may hold anything)."""
    p = f"sessions/{urllib.parse.quote(session_id(session), safe='')}"
    return f"{p}/{action}" if action else p


def on_behalf(message: str | None, by: str | None) -> dict[str, str]:
    """The body of a pause or a cancel: only the fields given (an older server refuses any
    field it does not know, and knows no field here)."""
    return {k: v for k, v in (("message", message), ("by", by)) if v is not None}


def event_key(e: Mapping[str, Any]) -> str:
    """One event told apart from every other (the records expose no sequence number)."""
    detail = sorted((e.get("detail") or {}).items())
    return f"{e['time']}|{e['session_id']}|{e['type']}|{e['reason']}|{detail}"


class GpuPauseClient:
    """The REST API of one Jupyter server running jupyter_gpu_pause.

    With no ``url``, the server is found as the CLI finds it: ``$JUPYTER_GPU_PAUSE_URL`` (with
    ``$JUPYTER_GPU_PAUSE_CLI_TOKEN``), else the most recently started server of
    ``jupyter server list``. With a ``url`` and no ``token``, the token comes from that
    server's entry in the runtime dir. ``timeout``: seconds per HTTP try; ``retry``: how lost
    requests are retried (``Retry``; ``NO_RETRY`` turns it off).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        runtime_dir: str | None = None,
        timeout: float = 30.0,
        retry: Retry = DEFAULT_RETRY,
        target: Target | None = None,
        warn: Callable[[str], object] | None = None,
    ):
        if target is None:
            target = find_server(url, token, runtime_dir, warn=warn, given_as="url=")
        self.http = Transport(target, timeout, retry)

    @property
    def target(self) -> Target:
        """The server this client talks to, and how it was found."""
        return self.http.target

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Any call under ``gpu-pause/api/`` (``path`` relative to it), with the same retries
        and typed errors as the methods below."""
        return self.http.request(method, path, body, query, idempotency_key)

    # -- sessions ------------------------------------------------------------------------------
    def sessions(self, path: str | None = None, kernel_id: str | None = None) -> list[Session]:
        """The sessions the server tracks, optionally only a notebook's or a kernel's."""
        answer = self.request("GET", "sessions", query={"path": path, "kernel_id": kernel_id})
        return cast(list[Session], answer["sessions"])

    def session(self, session: SessionRef) -> Session:
        return cast(Session, self.request("GET", session_path(session)))

    def pause(
        self,
        session: SessionRef,
        *,
        wait: bool = False,
        timeout: float | None = None,
        progress: Progress | None = None,
        idempotency_key: str | None = None,
        message: str | None = None,
        by: str | None = None,
    ) -> Session:
        """Start a pause (the answer: the Session, ``pausing``). With ``wait``, follow it to
        its end and return the final Session; OperationFailed if it did not pause.

        ``message`` (an admin pausing someone else's session, at most 500 characters) is told
        to its user; ``by`` names the admin a JupyterHub service acts for (anyone else sending
        it is refused, 403 ``not-on-behalf``)."""
        s = cast(
            Session,
            self.request(
                "POST",
                session_path(session, "pause"),
                on_behalf(message, by),
                idempotency_key=idempotency_key,
            ),
        )
        return self.follow(s, "pause", timeout, progress) if wait else s

    def resume(
        self,
        session: SessionRef,
        *,
        checkpoint_id: str | None = None,
        device: str | None = None,
        into_kernel: str | None = None,
        wait: bool = False,
        timeout: float | None = None,
        progress: Progress | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """Start a resume (``device``: "gpu", "cpu" or "any"; ``into_kernel``: restore into
        that running kernel). With ``wait``, follow it to its end, waiting for a GPU included;
        OperationFailed if it did not come back."""
        body = {"checkpoint_id": checkpoint_id, "device": device, "into_kernel": into_kernel}
        body = {k: v for k, v in body.items() if v is not None}
        s = cast(
            Session,
            self.request(
                "POST", session_path(session, "resume"), body, idempotency_key=idempotency_key
            ),
        )
        return self.follow(s, "resume", timeout, progress) if wait else s

    def cancel(
        self,
        session: SessionRef,
        *,
        idempotency_key: str | None = None,
        message: str | None = None,
        by: str | None = None,
    ) -> Session:
        """Cancel a pause in progress (the kernel goes on) or a resume waiting for a GPU;
        ``message`` and ``by`` as for ``pause``."""
        return cast(
            Session,
            self.request(
                "POST",
                session_path(session, "cancel"),
                on_behalf(message, by),
                idempotency_key=idempotency_key,
            ),
        )

    def keepalive(
        self, session: SessionRef, seconds: int, *, idempotency_key: str | None = None
    ) -> Session:
        """Keep a session from being auto-paused for ``seconds`` (up to the policy's max)."""
        body = {"seconds": int(seconds)}
        return cast(
            Session,
            self.request(
                "POST", session_path(session, "keepalive"), body, idempotency_key=idempotency_key
            ),
        )

    def check(self, session: SessionRef) -> dict[str, Any]:
        """Dry run of a pause: what would be saved and what could not be; changes nothing."""
        return cast(dict[str, Any], self.request("POST", session_path(session, "check"), {}))

    def rebuild(
        self,
        session: SessionRef,
        names: Iterable[str] | None = None,
        *,
        confirm: bool = False,
        idempotency_key: str | None = None,
    ) -> Session:
        """Re-run the recorded cells that make what the last resume did not bring back."""
        body: dict[str, Any] = {"confirm": confirm} if confirm else {}
        if names is not None:
            body["names"] = list(names)
        return cast(
            Session,
            self.request(
                "POST", session_path(session, "rebuild"), body, idempotency_key=idempotency_key
            ),
        )

    def delete(
        self,
        session: SessionRef,
        *,
        delete_checkpoints: bool = False,
        idempotency_key: str | None = None,
    ) -> None:
        """Forget a session that is not running; its checkpoints too if asked."""
        flag = "true" if delete_checkpoints else "false"
        self.request(
            "DELETE",
            session_path(session),
            query={"delete_checkpoints": flag},
            idempotency_key=idempotency_key,
        )

    # -- following -----------------------------------------------------------------------------
    def wait(
        self,
        session: SessionRef,
        states: str | Iterable[str],
        timeout: float | None = None,
        progress: Progress | None = None,
        poll: float = POLL,
    ) -> Session:
        """The Session once its state is one of ``states``; ``progress(session)`` hears every
        look. WaitTimeout after ``timeout`` seconds (None: no limit); the server goes on."""
        wanted = {states} if isinstance(states, str) else set(states)
        return self._until(session, lambda s: s["state"] in wanted, timeout, progress, poll)

    def follow(
        self,
        session: SessionRef,
        kind: str,
        timeout: float | None = None,
        progress: Progress | None = None,
    ) -> Session:
        """Follow a ``kind`` ("pause" or "resume") already started to its end: the final
        Session, or OperationFailed when it ended otherwise than asked (a pause is over once a
        suspended kernel's checkpoint is written, docs/suspend.md). ``session``: the Session
        the start answered (looked at first) or an id."""
        first = None if isinstance(session, str) else cast(Session, dict(session))
        s = self._until(session, lambda x: not going(kind, x), timeout, progress, POLL, first)
        if not succeeded(kind, s):
            raise OperationFailed(f"{s['path']}: the {kind} failed: {error_text(s)}", s)
        return s

    def _until(
        self,
        session: SessionRef,
        done: Callable[[Session], bool],
        timeout: float | None,
        progress: Progress | None,
        poll: float,
        first: Session | None = None,
    ) -> Session:
        end = None if timeout is None else time.monotonic() + timeout
        s = first if first is not None else self.session(session)
        while True:
            if progress is not None:
                progress(s)
            if done(s):
                return s
            if end is not None and time.monotonic() > end:
                raise WaitTimeout(f"{s['path']}: still {s['state']} after {timeout} s", s)
            time.sleep(poll)
            s = self.session(s)

    # -- what the server holds and saw ---------------------------------------------------------
    def checkpoints(self, session: SessionRef) -> list[Checkpoint]:
        """A session's checkpoints in the store, newest first, with their validity."""
        answer = self.request("GET", session_path(session, "checkpoints"))
        return cast(list[Checkpoint], answer["checkpoints"])

    def iter_checkpoints(self, session: SessionRef) -> Iterator[Checkpoint]:
        yield from self.checkpoints(session)

    def events(self, since: str | None = None, session: SessionRef | None = None) -> list[Event]:
        """Lifecycle events, oldest first: the latest 1000, or those since ``since`` (ISO)."""
        sid = session_id(session) if session is not None else None
        answer = self.request("GET", "events", query={"since": since, "session_id": sid})
        return cast(list[Event], answer["events"])

    def iter_events(
        self,
        since: str | None = None,
        session: SessionRef | None = None,
        follow: bool = False,
        poll: float = EVENTS_POLL,
    ) -> Iterator[Event]:
        """The events, oldest first, each once; with ``follow``, then each new one as it
        happens, for as long as the caller iterates."""
        seen: set[str] = set()
        while True:
            events = self.events(since, session)
            for e in events:
                if event_key(e) not in seen:
                    seen.add(event_key(e))
                    yield e
            if not follow:
                return
            since = events[-1]["time"] if events else since
            time.sleep(poll)

    def capacity(self) -> dict[str, Any]:
        """GPUs, the capacity queue, the tier in force and why."""
        return cast(dict[str, Any], self.request("GET", "capacity"))

    def policies(self) -> dict[str, Any]:
        """The effective policies (after validation) and the monitor's state."""
        return cast(dict[str, Any], self.request("GET", "policies"))

    def report(self, since: str | None = None) -> dict[str, Any]:
        """GPU-hours held, idle and reclaimed since ``since`` (ISO 8601 or 7d, 24h; 30d)."""
        return cast(dict[str, Any], self.request("GET", "report", query={"since": since}))

    def gc(self, dry_run: bool, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Garbage-collect the store (administrators): ``dry_run`` only counts."""
        return cast(
            dict[str, Any],
            self.request("POST", "store/gc", {"dry_run": dry_run}, idempotency_key=idempotency_key),
        )

    # -- GPU-hour budgets (docs/budgets.md) ----------------------------------------------------
    def budget(self) -> Budgets:
        """``{"admin", "configured", "user", "budgets": [...]}``: the user's own budget, or
        every user's when the server's user is a budget admin."""
        return cast(Budgets, self.request("GET", "budget"))

    def grant_budget(
        self, user: str, hours: float, *, idempotency_key: str | None = None
    ) -> Budget:
        """Budget admins: ``hours`` more GPU-hours for ``user`` this period (a hold lifts at
        once); the user's budget after it."""
        answer = self.request(
            "POST",
            "budget/grant",
            {"user": user, "hours": hours},
            idempotency_key=idempotency_key,
        )
        return cast(Budget, answer["budget"])

    def reset_budget(self, user: str, *, idempotency_key: str | None = None) -> Budget:
        """Budget admins: ``user``'s period starts over now (usage and grants so far no longer
        count); the user's budget after it."""
        answer = self.request(
            "POST", "budget/reset", {"user": user}, idempotency_key=idempotency_key
        )
        return cast(Budget, answer["budget"])
