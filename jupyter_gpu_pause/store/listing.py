"""The store as maintenance sees it: every object with its size and the store's own timestamp.

Garbage collection and retention decide from listings, never from a cache: fsspec filesystems
(s3fs) cache directory listings, and a cached listing would hide a manifest or an intent another
process wrote a moment ago. Every listing here drops the cache first. Ages come from the store
(file mtime, S3 ``LastModified``), not from this host's clock.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .format import is_checkpoint_id
from .integrity import HASH_RE
from .io import Store, StoreError

BLOBS = "v1/blobs"
SESSIONS = "v1/sessions"
INTENTS = "v1/intents"
_TIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "mtime_ns")


@dataclass(frozen=True)
class Obj:
    """One stored object: its fsspec path, its path under the store root, size and mtime."""

    path: str
    rel: str
    size: int
    mtime: float  # seconds since the epoch, by the store's clock


def mtime_of(info: dict[str, Any], path: str) -> float:
    """The store's modification time of a listing entry, in seconds since the epoch."""
    for key in _TIME_KEYS:
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return float(value) / (1e9 if key == "mtime_ns" else 1)
    raise StoreError(
        f"the store does not say when {path} was written, so its age is unknown; garbage "
        "collection needs the store's timestamps"
    )


def store_path(store: Store, rel: str) -> str:
    """The fsspec path of ``rel`` (a path under the store root)."""
    return posixpath.join(store.root, rel) if store.root else rel


def rel_path(store: Store, path: str) -> str:
    """``path`` relative to the store root."""
    path = path.rstrip("/")
    root = store.root.rstrip("/")
    return path[len(root) + 1 :] if root and path.startswith(root + "/") else path.lstrip("/")


def list_objects(store: Store, rel: str) -> list[Obj]:
    """Every file under ``rel`` (recursively), fresh from the store; [] when there is none."""
    top = store_path(store, rel)
    try:
        store.fs.invalidate_cache()
        found = store.call("list", top, "find", top, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except StoreError:
        if store.local and not os.path.isdir(top):
            return []  # a file where the folder would be: nothing under it
        raise
    except Exception as e:
        raise StoreError(f"could not list {top}: {e}") from e
    out = []
    for path, info in found.items():
        if info.get("type", "file") != "file":
            continue
        out.append(
            Obj(path, rel_path(store, path), int(info.get("size") or 0), mtime_of(info, path))
        )
    return out


def blob_objects(store: Store) -> tuple[dict[str, Obj], list[Obj]]:
    """The blobs by hash, and the other files in the blob folder (an interrupted write's
    ``<hash>.tmp-<hex>``, a stray), which only garbage collection ever removes."""
    blobs: dict[str, Obj] = {}
    other: list[Obj] = []
    for o in list_objects(store, BLOBS):
        parts = o.rel.split("/")
        h = parts[-1]
        if len(parts) == 4 and HASH_RE.match(h) and parts[2] == h[:2]:
            blobs[h] = o
        else:
            other.append(o)
    return blobs, other


def manifest_objects(store: Store) -> tuple[dict[tuple[str, str], Obj], list[Obj]]:
    """Every manifest by (session id, checkpoint id), and the other files among them (an
    interrupted write's ``<id>.json.tmp-<hex>``, a stray)."""
    manifests: dict[tuple[str, str], Obj] = {}
    other: list[Obj] = []
    for o in list_objects(store, SESSIONS):
        parts = o.rel.split("/")
        cid = parts[-1][: -len(".json")] if parts[-1].endswith(".json") else ""
        if len(parts) == 4 and is_checkpoint_id(cid):
            manifests[(parts[2], cid)] = o
        else:
            other.append(o)
    return manifests, other


def read_json(store: Store, objs: list[Obj]) -> dict[str, object]:
    """The parsed JSON of each object by path; ``None`` for one that is not JSON. An object
    that vanished since it was listed is left out; any other failure is a StoreError (a
    reference nobody could read must never count as no reference)."""
    if not objs:
        return {}
    paths = [o.path for o in objs]
    try:
        got = store.call("read", store.url, "cat", paths, on_error="return")
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"could not read {len(paths)} objects under {store.url}: {e}") from e
    if not isinstance(got, dict):  # one path: some filesystems answer with the bytes alone
        got = {paths[0]: got}
    out: dict[str, object] = {}
    for path in paths:
        raw = got.get(path, got.get(posixpath.join("/", path.lstrip("/"))))
        if isinstance(raw, FileNotFoundError):
            continue
        if isinstance(raw, BaseException) or raw is None:
            raise StoreError(f"could not read {path}: {raw}")
        try:
            out[path] = json.loads(raw)
        except ValueError:
            out[path] = None
    return out


def referenced(doc: object) -> set[str]:
    """Every blob hash a manifest names (its ``blobs`` table and each reference into it)."""
    if not isinstance(doc, dict):
        return set()
    found: set[object] = set()
    blobs = doc.get("blobs")
    if isinstance(blobs, dict):
        found.update(blobs)
    for table in ("storages", "arrays"):
        items = doc.get(table)
        if isinstance(items, list):
            found.update(x.get("blob") for x in items if isinstance(x, dict))
    pickle = doc.get("pickle")
    if isinstance(pickle, dict):
        found.add(pickle.get("blob"))
    hashes = doc.get("hashes")  # an intent
    if isinstance(hashes, list):
        found.update(hashes)
    return {h for h in found if isinstance(h, str) and HASH_RE.match(h)}
