"""``verify``: check every checkpoint in a store, as a resume would, without restoring any.

For an administrator (and the CLI's ``jupyter gpu-pause verify``): after a migration, a restore
from backup, or a disk error, which checkpoints can still be resumed, and what is wrong with the
others. It reads; it never changes the store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .format import parse_manifest
from .integrity import IntegrityError, Signer
from .io import Store
from .listing import Obj, blob_objects, manifest_objects, read_json


@dataclass
class CheckpointCheck:
    """One checkpoint: ``problems`` is empty when it can be resumed."""

    session_id: str
    checkpoint_id: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class VerifyReport:
    """Every checkpoint of the store, oldest first within each session."""

    checkpoints: list[CheckpointCheck]
    blobs_checked: int
    deep: bool

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checkpoints)

    @property
    def failed(self) -> list[CheckpointCheck]:
        return [c for c in self.checkpoints if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "deep": self.deep,
            "blobs_checked": self.blobs_checked,
            "checkpoints": [{**asdict(c), "ok": c.ok} for c in self.checkpoints],
        }


def verify(store: Store, signer_or_key: Signer | bytes, *, deep: bool = True) -> VerifyReport:
    """Check every manifest's signature and format and every blob it names: present with its
    size, and (``deep``, the default) its content hash, each distinct blob read once.

    ``signer_or_key``: the ``Signer`` or the key of ``GpuPauseApp.secret_file``; a manifest
    signed with another key is reported, not trusted. Raises StoreError when the store cannot
    be listed or read.
    """
    signer = signer_or_key if isinstance(signer_or_key, Signer) else Signer(signer_or_key)
    manifests, _ = manifest_objects(store)
    blobs, _ = blob_objects(store)
    docs = read_json(store, list(manifests.values()))
    hashed: dict[str, str | None] = {}  # hash -> problem (None: intact)
    out = []
    for (sid, cid), obj in sorted(manifests.items()):
        if obj.path not in docs:
            continue  # deleted since it was listed
        check = CheckpointCheck(sid, cid)
        out.append(check)
        doc = docs[obj.path]
        if not isinstance(doc, dict):
            check.problems.append("the manifest is not a JSON object")
            continue
        try:
            signer.verify(doc)
            m = parse_manifest(doc)
        except (IntegrityError, ValueError) as e:
            check.problems.append(str(e))
            continue
        if (m.session_id, m.id) != (sid, cid):
            check.problems.append(f"the manifest says it is {m.session_id}/{m.id}")
        for h, meta in sorted(m.blobs.items()):
            problem = _blob_problem(store, blobs, hashed, h, int(meta["bytes"]), deep)
            if problem:
                check.problems.append(problem)
    return VerifyReport(out, len(hashed), deep)


def _blob_problem(
    store: Store,
    blobs: dict[str, Obj],
    hashed: dict[str, str | None],
    h: str,
    size: int,
    deep: bool,
) -> str | None:
    if h not in hashed:
        found = blobs.get(h)
        if found is None:
            hashed[h] = f"blob {h} is missing from the store"
        elif found.size != size:
            hashed[h] = f"blob {h} has {found.size} bytes, expected {size}"
        elif deep:
            try:
                store.verify_blob(h, size)
                hashed[h] = None
            except IntegrityError as e:
                hashed[h] = str(e)
        else:
            hashed[h] = None
    return hashed[h]
