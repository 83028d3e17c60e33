"""Server side of the store: sign, write and verify manifests; find checkpoints to resume from.

The server holds the signing key and writes the manifest, always after the agent has written
and read back every blob; the manifest is then read back and checked before the kernel is
touched. All store calls run in a thread pool (fsspec and disk I/O block).
"""

from __future__ import annotations

import asyncio
from functools import partial

from ..store import IntegrityError, Signer, Store
from ..store.format import Manifest, build_manifest, parse_manifest


class Checkpoints:
    def __init__(self, store: Store, signer: Signer):
        self.store = store
        self.signer = signer

    async def _io(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    # -- writing ---------------------------------------------------------------------------
    def _commit(self, session_id, checkpoint_id, parent, kernel, origin, capture) -> Manifest:
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
        self.store.write_manifest(doc)
        try:
            return self._verify(session_id, checkpoint_id, deep=False)
        except Exception:
            self.store.delete_manifest(session_id, checkpoint_id)
            raise

    async def commit(self, session_id, checkpoint_id, parent, kernel, origin, capture) -> Manifest:
        """Sign and write the manifest, then read it back and check it and its blobs.

        Raises (and removes the manifest) if the read-back fails, so no half-trusted checkpoint
        is ever left for a resume to find.
        """
        return await self._io(
            self._commit, session_id, checkpoint_id, parent, kernel, origin, capture
        )

    # -- reading ---------------------------------------------------------------------------
    def _verify(self, session_id: str, checkpoint_id: str, deep: bool) -> Manifest:
        doc = self.store.read_manifest(session_id, checkpoint_id)
        self.signer.verify(doc)
        try:
            m = parse_manifest(doc)
        except ValueError as e:
            raise IntegrityError(f"checkpoint {checkpoint_id}: {e}", "format") from e
        if m.session_id != session_id or m.id != checkpoint_id:
            raise IntegrityError(
                f"checkpoint {checkpoint_id} is filed under the wrong session", "identity"
            )
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
        return m

    async def verify(self, session_id: str, checkpoint_id: str, deep: bool = False) -> Manifest:
        """Signature, format and blob presence (``deep`` also re-hashes every blob)."""
        return await self._io(self._verify, session_id, checkpoint_id, deep)

    async def ids(self, session_id: str) -> list[str]:
        """Checkpoint ids of a session, newest first."""
        return list(reversed(await self._io(self.store.list_checkpoints, session_id)))

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

    async def delete(self, session_id: str, checkpoint_id: str) -> None:
        await self._io(self.store.delete_manifest, session_id, checkpoint_id)
