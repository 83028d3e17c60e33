"""Store maintenance in a running server: retention after every pause and on a schedule, and
garbage collection on the schedule and for ``POST store/gc``.

Retention deletes manifests only (``store.retention.plan_deletions`` decides which); garbage
collection (``store.gc``) later frees the blobs nobody references any more. This service adds
what only the server knows: which sessions are its own, which are paused, which have a pause or
resume in flight (left alone), and the event each deletion leaves in the session's history.

Store I/O runs in daemon threads: stopping the server never waits on a hung store. A collection
cut short that way leaves its lock, which expires after its lease.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from traitlets import Bool, Float, TraitError, validate
from traitlets.config import LoggingConfigurable

from ...store import GcBusy, GcReport, StoreError, gc
from ...store.format import parse_manifest, utcnow
from ...store.integrity import IntegrityError
from ...store.io import Store
from ...store.lease import DEFAULT_LEASE, drop_intents
from ...store.listing import blob_objects, manifest_objects, read_json
from ...store.retention import Deletion, Entry, Retention, checkpoint_time, plan_deletions
from ..config.traits import not_negative
from ..lifecycle.context import UpkeepContext
from ..state.errors import GpuPauseError, WrongState
from ..state.event_types import EventType
from ..state.model import RUNNING, Session
from ..telemetry.metrics import store_failed

FIRST_PASS = 60.0  # seconds after start of the first scheduled pass (at most ``interval``)
STOP_WAIT = 5.0  # seconds a stopping server gives a running collection to let go of its lock


class Stopping(Exception):
    """The server is stopping: a running collection ends at its next step, releasing its lock."""


class StoreMaintenance(LoggingConfigurable):
    """Keeps the store within the retention rules and frees what no checkpoint needs."""

    interval = Float(
        3600.0,
        help="Seconds between two scheduled passes of store maintenance (retention, then "
        "garbage collection); the first runs a minute after start. Retention also runs after "
        "every pause. Default: 3600. 0 = no schedule.",
    ).tag(config=True)

    collect_garbage = Bool(
        True,
        help="Whether scheduled passes also delete the blobs no checkpoint references "
        "(older than GpuPauseApp.gc_grace_seconds). Off, space is freed only by POST "
        "gpu-pause/api/store/gc. Default: True.",
    ).tag(config=True)

    lease_seconds = Float(
        DEFAULT_LEASE,
        help="Lease of the store's garbage-collection lock: a collection deletes only in the "
        "first half of it, and a pause waits at most this long for one. A crashed collection's "
        "lock is broken once it has passed. Default: 300. Must be > 0.",
    ).tag(config=True)

    @validate("interval")
    def _interval(self, proposal):
        return not_negative(self, proposal, " (0 turns the schedule off)")

    @validate("lease_seconds")
    def _lease(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(
                f"StoreMaintenance.lease_seconds = {proposal['value']!r}: must be more than 0 "
                "seconds"
            )
        return proposal["value"]

    def __init__(
        self,
        ctx: UpkeepContext | None = None,
        store: Store | None = None,
        retention: Retention | None = None,
        grace_seconds: float = 86400.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.ctx, self.store = ctx, store  # ctx: what it reads of the sessions
        self.retention = retention or Retention()
        self.grace_seconds = grace_seconds
        self._task: asyncio.Task | None = None
        self._pending: set[asyncio.Task] = set()
        self._retaining = asyncio.Lock()
        self._manifests: dict[str, tuple[bool, dict]] = {}  # path -> (signed and sound, blobs)
        self._stopping = threading.Event()
        self._collections: set[threading.Thread] = set()
        self.passes = 0

    @property
    def _ctx(self) -> UpkeepContext:
        """What it reads of the sessions: retention needs it, a collection alone does not."""
        if self.ctx is None:
            raise RuntimeError("this StoreMaintenance has no sessions' context")
        return self.ctx

    @property
    def _store(self) -> Store:
        if self.store is None:
            raise RuntimeError("this StoreMaintenance has no store: it only checks settings")
        return self.store

    # -- running ------------------------------------------------------------------------------
    def start(self) -> None:
        if self.interval:
            self._task = asyncio.ensure_future(self._schedule())

    async def stop(self) -> None:
        """Cancel the schedule and waiting passes. A collection in progress stops at its next
        step and releases the store's lock (other servers' pauses wait while it is held); it
        is given ``STOP_WAIT`` seconds, never more: a hung store does not hold up the exit."""
        self._stopping.set()
        tasks = [t for t in (self._task, *self._pending) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        end = asyncio.get_running_loop().time() + STOP_WAIT
        while any(t.is_alive() for t in self._collections):
            if asyncio.get_running_loop().time() > end:
                self.log.warning(
                    "jupyter_gpu_pause: a garbage collection is still running; its lock on the "
                    "store expires after %.0f s",
                    self.lease_seconds,
                )
                break
            await asyncio.sleep(0.05)

    async def _schedule(self) -> None:
        await asyncio.sleep(min(self.interval, FIRST_PASS))
        while True:
            await self.scheduled_pass()
            await asyncio.sleep(self.interval)

    async def scheduled_pass(self) -> None:
        """Retention, then (unless turned off) garbage collection; failures are logged."""
        try:
            await self.apply_retention()
        except Exception as e:
            store_failed("retention", e)
            self.log.exception("jupyter_gpu_pause: retention pass failed")
        if self.collect_garbage:
            try:
                report = await self.collect(dry_run=False)
                self.log.info(
                    "jupyter_gpu_pause: garbage collection freed %d bytes (%d blobs); %d kept",
                    report["freed_bytes"],
                    report["deleted_blobs"],
                    report["kept_blobs"],
                )
            except WrongState as e:
                self.log.info("jupyter_gpu_pause: garbage collection skipped: %s", e.message)
            except Exception:
                self.log.exception("jupyter_gpu_pause: garbage collection failed")
        self.passes += 1

    def after_pause(self, s: Session) -> None:
        """Apply retention once the pause of ``s`` has ended (call it from the pause itself)."""
        task = self._ctx.op_task(s.id)
        job = asyncio.ensure_future(self._after(task))
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def _after(self, op_task) -> None:
        if op_task is not None and op_task is not asyncio.current_task():
            await asyncio.wait([op_task])
        try:
            await self.apply_retention()
        except Exception as e:
            store_failed("retention", e)
            self.log.exception("jupyter_gpu_pause: retention after a pause failed")

    def drop_intents(self, checkpoint_id: str) -> None:
        """A pause's manifest is written (or never will be): its intents may go, in the
        background. The pause does not wait: against a store that stopped answering this
        takes a whole bound, and the session must show its outcome (and accept the next
        pause) at once. Intents left behind are ignored by collections once they are stale."""
        job = asyncio.ensure_future(self._drop_intents(checkpoint_id))
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def _drop_intents(self, checkpoint_id: str) -> None:
        try:
            await _in_thread(drop_intents, self._store, checkpoint_id)
        except Exception as e:
            store_failed("intents", e)
            self.log.warning(
                "jupyter_gpu_pause: could not remove the intents of checkpoint %s (%s); they "
                "expire by themselves",
                checkpoint_id,
                e,
            )

    # -- garbage collection -------------------------------------------------------------------
    async def collect(self, dry_run: bool) -> dict:
        """``store.gc`` with this server's store, grace period and lease, as the REST answer."""
        try:
            report: GcReport = await _in_thread(
                gc,
                self._store,
                dry_run=dry_run,
                grace_seconds=self.grace_seconds,
                lease_seconds=self.lease_seconds,
                phase=self._phase,
                _track=self._collections,
            )
        except GcBusy as e:
            raise WrongState(str(e), "gc-running") from None
        except StoreError as e:
            store_failed("gc", e)
            raise GpuPauseError(
                f"garbage collection failed; nothing more was deleted: {e}", "store"
            ) from e
        except Stopping:
            raise WrongState(
                "the server is stopping; nothing more was deleted", "stopping"
            ) from None
        return report.as_dict()

    def _phase(self, name: str) -> None:
        if self._stopping.is_set():
            raise Stopping(name)

    # -- retention ------------------------------------------------------------------------------
    async def apply_retention(self) -> list[Deletion]:
        """Delete the manifests the rules name; one ``checkpoint_deleted`` event each."""
        async with self._retaining:
            if await self._ctx.checkpoints.prepare_key():
                self.log.warning(
                    "jupyter_gpu_pause: retention skipped: without the signing key no "
                    "checkpoint can be told valid"
                )
                return []
            owned, paused, pinned = self._facts()
            entries = await _in_thread(self._entries, self._ctx.checkpoints.signer)
            plan = plan_deletions(
                self.retention, entries, owned=owned, paused=paused, pinned=pinned, now=utcnow()
            )
            done = []
            for d in plan:
                s = self._ctx.table.sessions.get(d.session_id)
                if s is None or not self._may_delete(s, d.checkpoint_id):
                    continue  # changed since the plan: a resume started, a pause ended
                await _in_thread(self._store.delete_manifest, d.session_id, d.checkpoint_id)
                await self._ctx.table.record_event(
                    s,
                    EventType.CHECKPOINT_DELETED,
                    "retention",
                    rule=d.rule,
                    checkpoint_id=d.checkpoint_id,
                    message=f"Checkpoint {d.checkpoint_id} deleted by retention ({d.rule}: "
                    f"{d.message}); its space is freed by the next garbage collection",
                )
                done.append(d)
            return done

    def _facts(self) -> tuple[set[str], set[str], set[tuple[str, str]]]:
        """Sessions this pass may act on, those paused, and the checkpoints records name."""
        owned, paused, pinned = set(), set(), set()
        busy = self._ctx.busy_sessions()
        for s in self._ctx.table:
            if s.checkpoint:
                pinned.add((s.id, s.checkpoint["id"]))
            if s.id in busy:
                continue  # a pause or resume in flight: none of its checkpoints this pass
            owned.add(s.id)
            if s.state not in RUNNING:
                paused.add(s.id)
        return owned, paused, pinned

    def _may_delete(self, s: Session, checkpoint_id: str) -> bool:
        if s.id in self._ctx.busy_sessions():
            return False
        return not (s.checkpoint and s.checkpoint["id"] == checkpoint_id)

    def _entries(self, signer) -> list[Entry]:
        """Every manifest of the store as retention sees it (runs in a thread)."""
        manifests, _ = manifest_objects(self._store)
        blobs, _ = blob_objects(self._store)
        new = [o for o in manifests.values() if o.path not in self._manifests]
        for path, doc in read_json(self._store, new).items():
            self._manifests[path] = _summary(doc, signer)  # manifests never change
        paths = {o.path for o in manifests.values()}
        for path in set(self._manifests) - paths:
            del self._manifests[path]
        out = []
        for (sid, cid), o in manifests.items():
            if o.path not in self._manifests:
                continue  # deleted between listing and reading
            sound, refs = self._manifests[o.path]
            present = all(h in blobs and blobs[h].size == n for h, n in refs.items())
            out.append(Entry(sid, cid, checkpoint_time(cid), refs, sound and present))
        return out


def _summary(doc, signer) -> tuple[bool, dict]:
    """(signature and format sound, {hash: bytes}) of a manifest read from the store."""
    blobs = doc.get("blobs") if isinstance(doc, dict) else None
    refs = {}
    if isinstance(blobs, dict):
        for h, meta in blobs.items():
            n = meta.get("bytes") if isinstance(meta, dict) else None
            refs[h] = n if isinstance(n, int) and not isinstance(n, bool) else 0
    try:
        signer.verify(doc)
        parse_manifest(doc)
    except (IntegrityError, ValueError, AttributeError, TypeError):
        return False, refs
    return True, refs


async def _in_thread(fn, *args, _track: set | None = None, **kwargs):
    """Run blocking store I/O in a daemon thread: a hung store never holds up the server's
    exit (the default executor's threads are joined at exit). ``_track`` holds the thread
    while it runs."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def run() -> None:
        outcome: tuple[Any, BaseException | None]
        try:
            outcome = (fn(*args, **kwargs), None)
        except BaseException as e:  # handed to the awaiting task
            outcome = (None, e)
        finally:
            if _track is not None:
                _track.discard(threading.current_thread())
        try:
            loop.call_soon_threadsafe(_settle, done, *outcome)
        except RuntimeError:
            pass  # the loop is closed: the server has stopped, nobody waits for this

    thread = threading.Thread(target=run, name="gpu-pause-maintenance", daemon=True)
    if _track is not None:
        _track.add(thread)
    thread.start()
    return await done


def _settle(fut: asyncio.Future, result, error) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
