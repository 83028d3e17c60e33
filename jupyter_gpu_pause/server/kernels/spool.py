"""The server's side of a kernel's blobs that go through it (``store/spool.py``).

A kernel whose agent the server brought writes the store through the server: its environment
may have no fsspec, no s3fs and no xxhash, and the server has all three. Each pause and each
resume of such a kernel gets a folder of its own under the spool root, private to the server's
user (the kernel runs as that user, on this machine):

- a pause: the kernel writes its blobs there under provisional names; ``take`` names each by
  its xxh3-128, checks its size against the kernel's description, declares the names to the
  store's garbage collection, and moves every blob the store lacks into it (a rename on the
  same file system: no copy; an upload otherwise), then rewrites the kernel's description with
  the real names. Hashing the spooled file is the read-back: the bytes are the same inode's.
- a resume: ``stage`` puts every blob the restore may read there, each checked against its
  name (a hard link on the same file system, else a download) and names those that failed
  (``damaged``), so a damaged object falls back as it would reading the store itself.

The root is ``spool/`` in a local store's folder (one file system with its blobs), else a
folder next to the server's records. A folder is removed when its operation ends; ``sweep``
removes what a server that died mid-operation left behind.
"""

from __future__ import annotations

import base64
import contextlib
import json
import mmap
import os
import secrets
import shutil
import time
from typing import Any

from ...kernel.protocol import ErrorBody, Spool, SpoolProbe
from ...store import IntegrityError, Store, declare_intent
from ...store import local as local_files
from ...store.format import blob_path
from ...store.integrity import check_blob_hash
from ...store.private import private_makedirs
from ...store.sources import BufferSource
from ...store.spool import PART

STALE_SECONDS = 24 * 3600  # a folder untouched this long belongs to no running operation
PROBE = "probe"


class SpoolFolder:
    """One operation's folder; ``args`` is what the agent's request carries. With ``channel``
    (the kernel cannot see the folder) the kernel sends and asks for its blobs' parts over its
    own channel, and ``serve`` answers each request from the folder."""

    def __init__(self, path: str, channel: bool = False):
        self.path = path
        self.channel = channel
        self.damaged: dict[str, ErrorBody] = {}

    def args(self) -> Spool:
        out: Spool = {"folder": self.path}
        if self.damaged:
            out["damaged"] = dict(self.damaged)
        if self.channel:
            out["channel"] = True
        return out

    def serve(self, request: str) -> str:
        """One request of the kernel's (``store/spool.py`` ``ChannelStore``): a part of a blob
        to append, or one to read; the answer, or ``!`` and why not. The kernel runs user code:
        names are checked as hashes (they name files here) and parts must come in order."""
        try:
            req = json.loads(request)
            path = os.path.join(self.path, check_blob_hash(req["name"]))
            offset = int(req["offset"])
            if req["op"] == "put":
                data = base64.b64decode(req["data"], validate=True)
                size = os.path.getsize(path) if os.path.exists(path) else 0
                if offset != size or len(data) > PART:
                    return f"!part of {req['name']} at {offset}, but {size} bytes are there"
                with open(path, "ab") as f:
                    f.write(data)
                    if req.get("last"):
                        os.fsync(f.fileno())
                return "ok"
            if req["op"] == "get":
                n = int(req["n"])
                if not 0 < n <= PART or offset < 0:
                    return f"!a part of {n} bytes at {offset} cannot be asked for"
                with open(path, "rb") as f:
                    f.seek(offset)
                    return base64.b64encode(f.read(n)).decode("ascii")
            return f"!no such request: {req['op']!r}"
        except FileNotFoundError:
            return "!no such blob in the spool"
        except (KeyError, TypeError, ValueError, OSError) as e:
            return f"!{type(e).__name__}: {e}"[:500]

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class SpoolRoot:
    """The spool root of this server, for the store it writes."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._probe: SpoolProbe | None = None

    @classmethod
    def for_store(cls, store: Store, records_folder: str) -> SpoolRoot:
        if store.local:
            return cls(os.path.join(store.root, "spool"))
        return cls(os.path.join(records_folder, "spool"))

    def probe(self) -> SpoolProbe:
        """A file a kernel reads back to show it sees this folder (the same machine)."""
        if self._probe is None:
            private_makedirs(self.root)
            token = secrets.token_hex(16)
            path = os.path.join(self.root, PROBE)
            local_files.atomic_write(path, BufferSource(token.encode()))
            self._probe = {"path": path, "token": token}
        return self._probe

    def folder(self, what: str, channel: bool = False) -> SpoolFolder:
        """A new folder for one operation (``what``: its checkpoint id, for a person reading
        the spool root); ``channel``: its kernel reaches it over its own channel."""
        path = os.path.join(self.root, f"{what}-{secrets.token_hex(4)}")
        private_makedirs(path)
        return SpoolFolder(path, channel)

    def sweep(self, older_than: float = STALE_SECONDS) -> int:
        """Remove the folders no operation has touched for ``older_than`` seconds."""
        gone = 0
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if entry.is_dir(follow_symlinks=False):
                    if time.time() - entry.stat(follow_symlinks=False).st_mtime > older_than:
                        shutil.rmtree(entry.path, ignore_errors=True)
                        gone += 1
        return gone


def _same_device(a: str, b: str) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _file_source(path: str) -> BufferSource:
    """A file's bytes as a source, mapped rather than read: an upload of a spooled blob takes
    page-cache memory the kernel can give back, not a copy of its size."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return BufferSource(b"")
        return BufferSource(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def take(
    store: Store, folder: SpoolFolder, reply: dict[str, Any], checkpoint_id: str, verify: bool
) -> dict[str, Any]:
    """Move a pause's spooled blobs into the store; the capture reply with their real names."""
    described: dict[str, dict[str, Any]] = reply["blobs"]
    names: dict[str, str] = {}  # provisional -> hash
    for n, meta in described.items():
        path = os.path.join(folder.path, check_blob_hash(n))
        try:
            size, h = local_files.digest(path)
        except FileNotFoundError as e:
            missing = f"the kernel's blob {n} is not in the spool"
            raise IntegrityError(missing, "blob-missing") from e
        if size != meta["bytes"]:
            raise IntegrityError(
                f"the kernel's blob {n} has {size} bytes in the spool, it said {meta['bytes']}",
                "blob-size",
            )
        names[n] = h
    hashes = sorted(set(names.values()))
    declare_intent(store, checkpoint_id, hashes)  # GC keeps them from now on
    stored = store.blob_sizes(hashes)
    rename = store.local and _same_device(folder.path, store.root)
    dirs: set[str] = set()
    new_bytes = 0
    for n, h in names.items():
        size = described[n]["bytes"]
        if stored.get(h) == size:
            continue
        src = os.path.join(folder.path, n)
        if rename:
            dest = store._p(blob_path(h))
            made = private_makedirs(os.path.dirname(dest))
            dirs |= {os.path.dirname(dest), *(os.path.dirname(m) for m in made)}
            os.replace(src, dest)  # the kernel fsync'd it; the folders are, below
        else:
            store.write_blobs([(h, _file_source(src))], verify=verify)
        stored[h] = size
        new_bytes += size
    local_files.fsync_dirs(dirs)
    return rename_blobs(reply, names, new_bytes)


def rename_blobs(reply: dict[str, Any], names: dict[str, str], new_bytes: int) -> dict[str, Any]:
    """The capture reply with every provisional blob name replaced by its hash."""
    out = dict(reply)
    blobs: dict[str, dict[str, Any]] = {}
    for n, meta in reply["blobs"].items():
        blobs.setdefault(names[n], meta)  # two spooled blobs of the same bytes: one blob
    out["blobs"] = blobs
    out["storages"] = [{**e, "blob": names[e["blob"]]} for e in reply["storages"]]
    out["arrays"] = [{**e, "blob": names[e["blob"]]} for e in reply["arrays"]]
    out["pickle"] = {**reply["pickle"], "blob": names[reply["pickle"]["blob"]]}
    for key in ("cells", "ambient"):
        if reply.get(key):
            out[key] = {**reply[key], "blob": names[reply[key]["blob"]]}
    out["new_bytes"] = new_bytes
    return out


def stage(store: Store, folder: SpoolFolder, docs: list[dict[str, Any]]) -> None:
    """Put every blob of ``docs`` (a manifest and its fallbacks) in ``folder``, each checked
    against its name; the ones that fail are named in ``folder.damaged``."""
    wanted: dict[str, int] = {}
    for doc in docs:
        for h, meta in doc["blobs"].items():
            wanted[check_blob_hash(h)] = int(meta["bytes"])
    link = store.local and _same_device(folder.path, store.root)
    for h, size in wanted.items():
        dest = os.path.join(folder.path, h)
        try:
            if link:
                try:
                    os.link(store._p(blob_path(h)), dest)
                except FileNotFoundError:
                    raise IntegrityError(
                        f"blob {h} is missing from the store", "blob-missing"
                    ) from None
                store.verify_blob(h, size, at=dest)
            else:
                _download(store, h, size, dest)
        except IntegrityError as e:
            folder.damaged[h] = {"message": str(e), "reason": "integrity", "check": e.check}
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)


def _download(store: Store, h: str, size: int, dest: str) -> None:
    """Blob ``h`` into the file ``dest`` through a mapping of it: page-cache memory, not a
    buffer of the blob's size; its hash checked as it is read."""
    fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        if size:
            with mmap.mmap(fd, size) as out:
                store.read_blob_into(h, out)
    finally:
        os.close(fd)
