"""Server side of the store: sign, write and verify manifests; find checkpoints to resume from.

The server holds the signing key and writes the manifest, always after the agent has written
and read back every blob; the manifest is then read back and checked before the kernel is
touched. All store calls run in a thread pool (fsspec and disk I/O block).

The key is created on first use, but never in place of a lost one: when ``secret_file`` is
missing while the store holds signed checkpoints, nothing is signed or verified (a new key would
make every old checkpoint unverifiable for good) until the file is back. It is looked for again
at every pause and resume, so putting it back needs no restart.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from ...store import IntegrityError, Signer, Store, StoreError
from ...store.format import Manifest, build_manifest, parse_manifest
from ...store.keyfile import create_secret, load_secret
from .errors import KeyMissing
from .model import CheckpointBrief

# A prefetch reads for as long as its blobs take (GiBs from a cold disk: many seconds): they get
# threads of their own, so twenty resumes at once never fill the default executor, where the
# next resume's manifest is verified, kernelspecs are found (kernels.start) and GPUs sampled.
_PREFETCHES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpu-pause-prefetch")


class Checkpoints:
    def __init__(self, store: Store, secret_file: str):
        self.store = store
        self.secret_file = secret_file
        self.signer: Signer | None = None
        self.key_problem: str | None = None

    # -- the signing key -------------------------------------------------------------------
    def _load_key(self) -> str | None:
        key = load_secret(self.secret_file)
        if key is None:
            if self.store.has_checkpoints():
                return (
                    f"the signing key {self.secret_file} is missing; the checkpoints in the "
                    f"store ({self.store.url}) were signed with it and cannot be verified. "
                    "Nothing can be paused or resumed until it is back: restore the file (or "
                    "point GpuPauseApp.secret_file at it). jupyter_gpu_pause never makes a new "
                    "key in its place, since old checkpoints could then never be resumed"
                )
            key = create_secret(self.secret_file)
        self.signer = Signer(key)
        return None

    async def prepare_key(self) -> str | None:
        """Load (or, for an empty store, create) the key; the problem in words when it cannot."""
        if self.signer is None:
            try:
                self.key_problem = await self._io(self._load_key)
            except Exception as e:  # an unreachable store, an unreadable key file
                self.key_problem = f"the signing key could not be loaded: {e}"
        return self.key_problem

    async def require_key(self) -> None:
        """Raise KeyMissing (503) unless manifests can be signed and verified."""
        problem = await self.prepare_key()
        if problem:
            raise KeyMissing(problem)

    async def _io(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    # -- writing ---------------------------------------------------------------------------
    def _commit(self, session_id, checkpoint_id, parent, kernel, origin, capture) -> Manifest:
        assert self.signer is not None  # require_key() ran at admission
        doc = self.signer.sign(
            build_manifest(
                session_id=session_id,
                checkpoint_id=checkpoint_id,
                parent=parent,
                kernel=kernel,
                origin=origin,
                capture=capture,
            )
        )
        written = self.store.write_manifest(doc)
        try:
            # What the store gives back must be, byte for byte, what was signed and written; the
            # content was checked by build_manifest, so the manifest is the doc itself.
            if self.store.read_manifest_bytes(session_id, checkpoint_id) != written:
                raise IntegrityError(
                    f"checkpoint {checkpoint_id}: the manifest read back from the store is not "
                    "the one written",
                    "manifest",
                )
            m = Manifest(doc)
            self._check_blobs(m, deep=False)
            return m
        except StoreError:
            # The store stopped answering: deleting would only wait out a second bound. The
            # manifest, if it landed, names blobs the agent wrote and read back; the pause
            # fails (kernel untouched) and the checkpoint, complete, is listed like any other.
            raise
        except Exception:
            self.store.delete_manifest(session_id, checkpoint_id)
            raise

    async def commit(self, session_id, checkpoint_id, parent, kernel, origin, capture) -> Manifest:
        """Sign and write the manifest, then read it back and check it and its blobs.

        Raises (and removes the manifest) if the read-back fails, so no half-trusted checkpoint
        is ever left for a resume to find.
        """
        await self.require_key()
        return await self._io(
            self._commit, session_id, checkpoint_id, parent, kernel, origin, capture
        )

    # -- reading ---------------------------------------------------------------------------
    def _verify(self, session_id: str, checkpoint_id: str, deep: bool) -> Manifest:
        doc = self.store.read_manifest(session_id, checkpoint_id)
        assert self.signer is not None  # prepare_key() ran in verify
        self.signer.verify(doc)
        try:
            m = parse_manifest(doc)
        except ValueError as e:
            raise IntegrityError(f"checkpoint {checkpoint_id}: {e}", "format") from e
        if m.session_id != session_id or m.id != checkpoint_id:
            raise IntegrityError(
                f"checkpoint {checkpoint_id} is filed under the wrong session", "identity"
            )
        self._check_blobs(m, deep)
        return m

    def _check_blobs(self, m: Manifest, deep: bool) -> None:
        """Every blob present with its size (``deep``: re-hashed too)."""
        for h, meta in m.blobs.items():
            if deep:
                self.store.verify_blob(h, int(meta["bytes"]))
                continue
            size = self.store.blob_size(h)
            if size is None:
                raise IntegrityError(f"blob {h} is missing from the store", "blob-missing")
            if size != int(meta["bytes"]):
                raise IntegrityError(
                    f"blob {h} has {size} bytes, expected {meta['bytes']}", "blob-size"
                )

    async def verify(self, session_id: str, checkpoint_id: str, deep: bool = False) -> Manifest:
        """Signature, format and blob presence (``deep`` also re-hashes every blob)."""
        problem = await self.prepare_key()
        if problem:
            raise IntegrityError(problem, "key-missing")
        return await self._io(self._verify, session_id, checkpoint_id, deep)

    async def ids(self, session_id: str) -> list[str]:
        """Checkpoint ids of a session, newest first."""
        return list(reversed(await self._io(self.store.list_checkpoints, session_id)))

    async def session_ids(self) -> list[str]:
        """Every session with a folder in the store, this server's or not."""
        return await self._io(self.store.session_ids)

    async def summaries(self, session_id: str) -> list[dict]:
        """The REST Checkpoint objects, newest first, each with ``valid`` and the problem."""
        out = []
        for cid in await self.ids(session_id):
            try:
                out.append((await self.verify(session_id, cid)).summary(valid=True))
            except (IntegrityError, OSError) as e:
                out.append(
                    {
                        "id": cid,
                        "created": None,
                        "bytes": None,
                        "new_bytes": None,
                        "objects": [],
                        "skipped": [],
                        "valid": False,
                        "problem": str(e),
                    }
                )
        return out

    def prefetch(self, manifest: Manifest) -> Prefetch:
        """Start warming the page cache with ``manifest``'s blobs (see ``Prefetch``)."""
        return Prefetch(self, manifest)

    async def delete(self, session_id: str, checkpoint_id: str) -> None:
        await self._io(self.store.delete_manifest, session_id, checkpoint_id)


def _available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes, or 0 where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Prefetch:
    """A resume reads its checkpoint's blobs while its new kernel starts.

    A kernel takes seconds to start and import torch before the agent reads a byte; on a local
    store a worker thread meanwhile reads the blobs into the page cache, so the agent's read
    (which still checks every hash) comes from memory instead of the disk. It reads at most
    half of the memory available, never evicting what it just read, and ``stop()`` ends it
    when the resume ends whatever its outcome.
    """

    def __init__(self, checkpoints: Checkpoints, manifest: Manifest):
        self._stopped = False
        hashes, store = list(manifest.blobs), checkpoints.store

        def warm() -> int:  # in the thread: /proc/meminfo is a read too
            return store.prefetch(hashes, _available_memory() // 2, lambda: self._stopped)

        self.task = asyncio.get_running_loop().run_in_executor(_PREFETCHES, warm)
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())  # best effort

    def stop(self) -> None:
        self._stopped = True


# -- what the server reads of a manifest --------------------------------------------------
def checkpoint_brief(m: Manifest) -> CheckpointBrief:
    """The ``checkpoint`` field of a Session, from a verified manifest."""
    return {
        "id": m.id,
        "created": m.doc["created"],
        "bytes": m.total_bytes,
        "objects": len(m.doc["objects"]),
        "skipped": len(m.doc["skipped"]),
        "skipped_objects": m.doc["skipped"],
        "gpu_bytes": gpu_bytes(m),
        "packages": packages(m),
    }


def packages(m) -> list[str]:
    """The packages a checkpoint's objects come from, which a warm kernel imports ahead of its
    restore (``spares.py``); ``torch`` for a checkpoint of tensors written before they were
    recorded."""
    kernel = m.doc.get("kernel") or {}
    names = [p for p in str(kernel.get("packages") or "").split(",") if p.isidentifier()]
    if not names and m.doc.get("storages"):
        names = ["torch"]
    return names


def gpu_bytes(m) -> int:
    """GPU memory a checkpoint needs back: the bytes of its CUDA tensors."""
    return sum(
        int(b["bytes"]) for b in m.blobs.values() if str(b.get("device", "cpu")).startswith("cuda")
    )


def gpu_bytes_per_device(m) -> list[int]:
    """GPU bytes of a checkpoint per saved CUDA device (the grant needs one GPU for each)."""
    per: dict[str, int] = {}
    for st in m.doc.get("storages", []):
        if str(st.get("device", "cpu")).startswith("cuda"):
            per[st["device"]] = per.get(st["device"], 0) + int(st.get("nbytes", 0))
    return list(per.values())
