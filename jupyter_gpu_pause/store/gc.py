"""Garbage collection: delete the blobs no manifest references, without robbing a writer.

The algorithm (docs/store-maintenance.md states it with its guarantees):

1. Take the store's lease lock (``lease.acquire``); its timestamp is the store's *now*.
2. First look: list every blob, manifest and intent. A blob is a candidate when no manifest and
   no live intent names it and the store says it is older than the grace period.
3. Second look: list manifests and intents again; a candidate named by anything that appeared
   meanwhile is kept.
4. Delete the remaining candidates, only in the first half of the lease, then release the lock.

A writer that records its intent after the second look waits for the lock to go before it
decides which blobs to reuse (``lease.declare_intent``), so it sees a deleted blob as missing
and writes it again. ``phase`` lets a test start such a writer between the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .io import Store, StoreError
from .lease import (
    BROKEN,
    CLOCK,
    DEFAULT_LEASE,
    RESOLUTION,
    Lease,
    acquire,
    release,
    store_now,
)
from .listing import (
    INTENTS,
    Obj,
    blob_objects,
    list_objects,
    manifest_objects,
    read_json,
    referenced,
)

INTENT_TTL_FLOOR = 6 * 3600.0  # an intent is honoured for the grace period, and at least this
_BATCH = 500  # deletions between two looks at the lease


@dataclass
class GcReport:
    """What a collection deleted (or, for a dry run, would delete) and what it kept.

    ``kept_blobs`` are the blobs left in the store; among them ``young_blobs`` are unreferenced
    but within the grace period and ``rescued_blobs`` were referenced only on the second look.
    ``complete`` is False when the sweep stopped early (its lease ran short, or an intent
    could not be read); ``note`` then says why.
    """

    dry_run: bool
    deleted_blobs: int = 0
    freed_bytes: int = 0
    kept_blobs: int = 0
    kept_bytes: int = 0
    young_blobs: int = 0
    rescued_blobs: int = 0
    stale_intents: int = 0
    leftovers: int = 0
    unreadable_manifests: list[str] = field(default_factory=list)
    complete: bool = True
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Look:
    """What one look at manifests and intents found: the referenced hashes, and the objects
    already read (manifests and intents never change once written, so a second look reads
    only what is new)."""

    def __init__(self) -> None:
        self.refs: set[str] = set()
        self.seen: set[str] = set()
        self.unreadable: list[str] = []
        self.stale_intents: list[Obj] = []
        self.unreadable_intent: str | None = None

    def read(self, store: Store, now: float, intent_ttl: float) -> None:
        manifests, _ = manifest_objects(store)
        fresh = [o for o in manifests.values() if o.path not in self.seen]
        intents = []
        self.stale_intents = []
        for o in list_objects(store, INTENTS):
            if now - o.mtime > intent_ttl + RESOLUTION:
                self.stale_intents.append(o)  # a writer that crashed long ago
            elif o.path not in self.seen and ".tmp-" not in o.rel:
                intents.append(o)
        for docs, kind in ((read_json(store, fresh), "manifest"), (read_json(store, intents), "")):
            for path, doc in docs.items():
                self.seen.add(path)
                if doc is None or not isinstance(doc, dict):
                    if kind:
                        self.unreadable.append(path)
                    else:
                        self.unreadable_intent = path
                    continue
                self.refs |= referenced(doc)


def gc(
    store: Store,
    dry_run: bool = True,
    grace_seconds: float = 86400.0,
    *,
    lease_seconds: float = DEFAULT_LEASE,
    holder: str | None = None,
    phase: Callable[[str], None] | None = None,
) -> GcReport:
    """Delete (``dry_run=False``) or count (the default) the blobs no manifest or live intent
    references and that are older than ``grace_seconds`` by the store's clock. ``0`` deletes
    unreferenced blobs of any age; intents are honoured for the grace period and at least
    ``INTENT_TTL_FLOOR``, so a writer following the protocol is never robbed.

    Raises ``GcBusy`` when another collection holds the lock and ``StoreError`` when the store
    cannot be listed or read (nothing is deleted on what could not be seen). A dry run takes no
    lock, so writers never wait for it; it writes and removes one tiny object to read the time.
    ``phase(name)`` is called at ``"locked"``, ``"marked"``, ``"rechecked"`` and ``"swept"``.
    """
    if grace_seconds < 0:
        raise ValueError(f"grace_seconds must be >= 0, not {grace_seconds!r}")
    step = phase or (lambda name: None)
    lease = None if dry_run else acquire(store, lease_seconds, holder)
    try:
        now = store_now(store) if lease is None else lease.now
        step("locked")
        report = _collect(store, dry_run, grace_seconds, now, lease, step)
    finally:
        if lease is not None:
            release(store, lease)
    return report


def _collect(
    store: Store,
    dry_run: bool,
    grace: float,
    now: float,
    lease: Lease | None,
    step: Callable[[str], None],
) -> GcReport:
    report = GcReport(dry_run=dry_run)
    intent_ttl = max(grace, INTENT_TTL_FLOOR)
    blobs, strays = blob_objects(store)
    strays += manifest_objects(store)[1]
    look = _Look()
    look.read(store, now, intent_ttl)
    unreferenced = {h: o for h, o in blobs.items() if h not in look.refs}
    candidates = {
        h: o for h, o in unreferenced.items() if grace == 0 or now - o.mtime > grace + RESOLUTION
    }
    report.young_blobs = len(unreferenced) - len(candidates)
    step("marked")
    look.read(store, now, intent_ttl)
    sweep = {h: o for h, o in candidates.items() if h not in look.refs}
    report.rescued_blobs = len(candidates) - len(sweep)
    report.unreadable_manifests = sorted(look.unreadable)
    if look.unreadable_intent:
        report.complete = False
        report.note = (
            f"intent {look.unreadable_intent} cannot be read, so what it protects is unknown; "
            "nothing was deleted (it is ignored once older than the grace period)"
        )
        sweep = {}
    step("rechecked")
    leftovers = [o for o in strays if ".tmp-" in o.rel and now - o.mtime > intent_ttl]
    deleted = _delete(store, list(sweep.values()), dry_run, lease, report)
    gone = {o.path for o in deleted}
    report.deleted_blobs = len(deleted)
    report.freed_bytes = sum(o.size for o in deleted)
    report.kept_blobs = len(blobs) - len(deleted)
    report.kept_bytes = sum(o.size for o in blobs.values() if o.path not in gone)
    if report.complete:
        report.stale_intents = len(_delete(store, look.stale_intents, dry_run, lease, report))
        report.leftovers = len(_delete(store, leftovers, dry_run, lease, report))
        report.freed_bytes += sum(o.size for o in leftovers[: report.leftovers])
        if not dry_run:
            _delete(store, _old_markers(store, now), dry_run, lease, report)
    step("swept")
    return report


def _old_markers(store: Store, now: float) -> list[Obj]:
    """Lock-break markers and clock objects nobody can still be acting on."""
    old = [o for o in list_objects(store, BROKEN) if now - o.mtime > 4 * DEFAULT_LEASE]
    return old + [o for o in list_objects(store, CLOCK) if now - o.mtime > DEFAULT_LEASE]


def _delete(
    store: Store, objs: list[Obj], dry_run: bool, lease: Lease | None, report: GcReport
) -> list[Obj]:
    """Delete ``objs`` in batches while the lease allows; returns those deleted (or, for a
    dry run, that would be)."""
    if dry_run:
        return objs
    assert lease is not None, "only a dry run goes without the lock"
    done: list[Obj] = []
    for i in range(0, len(objs), _BATCH):
        if not lease.may_delete():
            report.complete = False
            report.note = (
                f"stopped after {lease.spent():.0f} s, half of the {lease.lease_seconds:.0f} s "
                "lease; run it again (or with a longer lease) for the rest"
            )
            break
        batch = objs[i : i + _BATCH]
        try:
            if store.local:
                for o in batch:
                    try:
                        store.fs.rm_file(o.path)
                    except FileNotFoundError:
                        pass
            else:
                store.call("delete", store.url, "rm", [o.path for o in batch])
        except FileNotFoundError:
            pass
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"could not delete objects under {store.url}: {e}") from e
        done += batch
    return done
