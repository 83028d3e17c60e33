"""The GC lease and the writers' intents: how garbage collection and pauses share a store.

A pause reuses blobs already in the store (dedup), so a blob no manifest references may be
about to be referenced again. The protocol (docs/store-maintenance.md has the argument):

- A writer records an *intent* (``v1/intents/{checkpoint_id}/{n}.json``: every blob hash its
  checkpoint will reference) before it looks at which blobs exist, then waits while a garbage
  collection holds the lease (bounded), and drops its intents once the manifest is written or
  the pause failed.
- Garbage collection holds a *lease lock* (``v1/gc/lock``), made create-if-absent (``O_EXCL``
  + a hard link on a local disk, a conditional PUT ``If-None-Match: *`` on S3), so at most one
  runs against a store. A crashed collector's lock expires after its lease, measured by the
  store's own clock, and the next collector breaks it.

Nothing here imports the server: the kernel's agent calls ``declare_intent`` itself.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .format import check_checkpoint_id, iso, utcnow
from .integrity import check_blob_hash
from .io import Store, StoreError
from .listing import INTENTS, Obj, list_objects, mtime_of, store_path
from .private import private_makedirs

LOCK = "v1/gc/lock"
BROKEN = "v1/gc/broken"  # one marker per broken lock: two collectors never both break one
CLOCK = "v1/gc/clock"  # short-lived objects whose timestamp tells the store's time
DEFAULT_LEASE = 300.0  # seconds a collector's lock is valid; it deletes only in the first half
DEFAULT_MAX_WAIT = 600.0  # longest a writer waits for a collector before giving up
RESOLUTION = 1.0  # seconds: S3 timestamps are whole seconds, so every age is counted 1 s short
_IDENT = re.compile(r"^[0-9a-f]{8,64}\Z")


class GcBusy(StoreError):
    """Another garbage collection holds the store's lease; try again once it is done."""


@dataclass(frozen=True)
class LockInfo:
    """The lock as found in the store: who holds it, for how long, written when (store time)."""

    token: str
    holder: str
    lease_seconds: float
    mtime: float

    @property
    def ident(self) -> str:
        """A name for this holding of the lock, safe in a path."""
        return self.token if _IDENT.match(self.token) else f"t{int(self.mtime * 1000)}"


@dataclass
class Lease:
    """A lock this process holds. ``now`` is the store's time when it was made (its mtime);
    ``started`` the monotonic time just before it was asked for, so the holder's view of its
    lease runs out no later than anyone else's."""

    token: str
    lease_seconds: float
    now: float
    started: float

    def spent(self) -> float:
        return time.monotonic() - self.started

    def may_delete(self) -> bool:
        """Deleting is allowed in the first half of the lease only: a writer stops waiting,
        and another collector may break the lock, once the whole lease has passed."""
        return self.spent() < self.lease_seconds / 2


# -- primitive writes -------------------------------------------------------------------------


def _local_tmp(path: str, data: bytes) -> str:
    private_makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def _link_new(path: str, data: bytes) -> bool:
    tmp = _local_tmp(path, data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    # No hard links here (some FUSE and network mounts): O_EXCL alone. A reader may then see
    # the lock before its content; an unreadable lock counts as held, with the default lease.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def write_new(store: Store, rel: str, data: bytes) -> bool:
    """Create ``rel`` holding ``data`` unless it exists (then False), atomically: whoever sees
    the object sees all of it. Locally a hard link of a complete temporary file (``link``
    fails when the name exists, like ``O_EXCL``); on object stores a conditional PUT."""
    path = store_path(store, rel)
    try:
        if store.local:
            return _link_new(path, data)
        with store.fs.open(path, "xb") as f:
            f.write(data)
        return True
    except FileExistsError:
        return False
    except Exception as e:
        raise StoreError(
            f"could not create {path} exclusively ({type(e).__name__}: {e}); garbage "
            "collection needs a store that can create an object only if it is absent"
        ) from e


def write_plain(store: Store, rel: str, data: bytes) -> None:
    """Write ``rel`` whole (a temporary name and a rename locally; one PUT elsewhere)."""
    path = store_path(store, rel)
    try:
        if store.local:
            tmp = _local_tmp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        else:
            store.call("write", path, "pipe_file", path, data)
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"could not write {path}: {e}") from e


def remove(store: Store, rel: str) -> None:
    """Delete ``rel``; one already gone is fine."""
    path = store_path(store, rel)
    try:
        store.call("delete", path, "rm_file", path)
    except FileNotFoundError:
        pass


def stat(store: Store, rel: str) -> Obj | None:
    """The object at ``rel`` fresh from the store (no listing cache), or None."""
    path = store_path(store, rel)
    try:
        store.fs.invalidate_cache(path)
        info = store.call("stat", path, "info", path)
    except FileNotFoundError:
        return None
    return Obj(path, rel, int(info.get("size") or 0), mtime_of(info, path))


def store_now(store: Store) -> float:
    """The store's own time: the timestamp it gives a tiny object written now (then removed)."""
    rel = f"{CLOCK}/{secrets.token_hex(8)}"
    write_plain(store, rel, b"")
    try:
        obj = stat(store, rel)
    finally:
        remove(store, rel)
    if obj is None:
        raise StoreError(f"{store_path(store, rel)} vanished right after it was written")
    return obj.mtime


# -- the lock ---------------------------------------------------------------------------------


def read_lock(store: Store) -> LockInfo | None:
    """The collector's lock, or None when no collection runs."""
    obj = stat(store, LOCK)
    if obj is None:
        return None
    try:
        doc = json.loads(store.call("read", obj.path, "cat_file", obj.path))
    except FileNotFoundError:
        return None
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    lease = doc.get("lease_seconds")
    return LockInfo(
        token=str(doc.get("token", "")),
        holder=str(doc.get("holder", "unknown")),
        lease_seconds=float(lease) if isinstance(lease, (int, float)) else DEFAULT_LEASE,
        mtime=obj.mtime,
    )


def _held_since(lock: LockInfo, now: float) -> str:
    held = max(0.0, now - lock.mtime)
    return f"{lock.holder}, for {held:.0f} s of its {lock.lease_seconds:.0f} s lease"


def acquire(store: Store, lease_seconds: float = DEFAULT_LEASE, holder: str | None = None) -> Lease:
    """Take the store's GC lock, breaking one whose lease has expired; GcBusy if it is held."""
    started = time.monotonic()
    token = secrets.token_hex(16)
    body = json.dumps(
        {
            "token": token,
            "holder": holder or f"{socket.gethostname()}:{os.getpid()}",
            "lease_seconds": float(lease_seconds),
            "created": iso(utcnow()),  # for people reading the file; nobody decides by it
        }
    ).encode()
    for _ in range(3):
        if write_new(store, LOCK, body):
            mine = read_lock(store)
            if mine is None or mine.token != token:
                raise GcBusy("another garbage collection took the store's lock at the same time")
            return Lease(token, float(lease_seconds), mine.mtime, started)
        held = read_lock(store)
        if held is None:
            continue  # released between our attempt and our look: try again
        if held.token == token:  # our PUT went through, and its retry found it there
            return Lease(token, float(lease_seconds), held.mtime, started)
        now = store_now(store)
        if now - held.mtime <= held.lease_seconds + RESOLUTION:
            raise GcBusy(
                f"another garbage collection holds the store's lock ({_held_since(held, now)}); "
                "try again when it is done"
            )
        _break(store, held, now)
    raise GcBusy("the store's GC lock kept changing hands; try again later")


def _break(store: Store, held: LockInfo, now: float) -> None:
    """Remove a lock whose lease expired. Each breaker first creates a marker for that very
    holding of the lock, so of two collectors that both saw it expire, one breaks it and the
    other backs off (it must not delete the lock the first one takes next). A breaker that died
    half-way leaves an old marker: the next generation of marker is tried after a lease."""
    for generation in range(1, 10):
        marker = f"{BROKEN}/{held.ident}.{generation}"
        if write_new(store, marker, held.holder.encode()[:200]):
            again = read_lock(store)
            if again is not None and again.token == held.token and again.mtime == held.mtime:
                remove(store, LOCK)
            return
        obj = stat(store, marker)
        if obj is None or now - obj.mtime <= held.lease_seconds + RESOLUTION:
            raise GcBusy("another garbage collection is taking over an expired lock")
    raise GcBusy(f"the expired GC lock of {held.holder} could not be broken")


def release(store: Store, lease: Lease) -> bool:
    """Remove our lock (only if it is still ours); False when it was not."""
    held = read_lock(store)
    if held is None or held.token != lease.token:
        return False
    remove(store, LOCK)
    return True


# -- writers ----------------------------------------------------------------------------------


def declare_intent(
    store: Store,
    checkpoint_id: str,
    hashes: Iterable[str],
    *,
    max_wait: float = DEFAULT_MAX_WAIT,
    poll: float = 0.25,
) -> str:
    """Record that checkpoint ``checkpoint_id`` will reference ``hashes``, then wait until no
    garbage collection that may have missed the record is running. Call it before deciding
    which blobs to reuse; returns the intent's path under the store.

    Waiting ends when the lock is gone or held by a later collection (which sees this intent),
    or once the lock's lease has passed (its holder deletes only in the first half). StoreError
    after ``max_wait`` seconds of waiting (the intent is then removed again).
    """
    check_checkpoint_id(checkpoint_id)
    wanted = sorted({check_blob_hash(h) for h in hashes})
    rel = f"{INTENTS}/{checkpoint_id}/{secrets.token_hex(8)}.json"
    doc = {
        "checkpoint_id": checkpoint_id,
        "hashes": wanted,
        "created": iso(utcnow()),
        "writer": f"{socket.gethostname()}:{os.getpid()}",
    }
    write_plain(store, rel, json.dumps(doc).encode())
    try:
        _wait_for_collector(store, max_wait, poll)
    except BaseException:
        with contextlib.suppress(Exception):
            remove(store, rel)
        raise
    return rel


def _wait_for_collector(store: Store, max_wait: float, poll: float) -> None:
    seen = read_lock(store)
    if seen is None:
        return
    start, delay = time.monotonic(), poll
    while True:
        waited = time.monotonic() - start
        if waited >= seen.lease_seconds:
            return  # expired: its holder stopped deleting at half its lease
        if waited >= max_wait:
            raise StoreError(
                f"a garbage collection of the store ({seen.holder}) has held its lock for more "
                f"than {max_wait:.0f} s; nothing was written, try again later"
            )
        time.sleep(min(delay, seen.lease_seconds - waited, max_wait - waited))
        delay = min(delay * 2, 2.0)
        now = read_lock(store)
        if now is None or now.token != seen.token or now.mtime != seen.mtime:
            return


def drop_intents(store: Store, checkpoint_id: str) -> int:
    """Remove every intent of ``checkpoint_id`` (its manifest is written, or it never will be);
    returns how many there were. StoreError when the store cannot be reached."""
    check_checkpoint_id(checkpoint_id)
    rel = f"{INTENTS}/{checkpoint_id}"
    found = list_objects(store, rel)
    for o in found:
        remove(store, o.rel)
    if store.local:
        with contextlib.suppress(OSError):
            os.rmdir(store_path(store, rel))
    return len(found)
