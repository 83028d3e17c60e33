"""Checkpoint store, format v1: content-addressed blobs plus one signed manifest per checkpoint.

Nothing here imports the server or Tornado: the kernel agent writes blobs through this package and
the server writes and verifies manifests through it. Maintenance (``verify``, ``gc``, and the
writers' side of GC, ``declare_intent`` / ``drop_intents``) is here too, so the CLI can run it
offline on a store URL.
"""

from .format import FORMAT, Manifest, new_checkpoint_id
from .gc import GcReport, gc
from .integrity import IntegrityError, Signer, blob_hash
from .io import Store, StoreError
from .lease import GcBusy, declare_intent, drop_intents
from .verify import VerifyReport, verify

__all__ = [
    "FORMAT",
    "GcBusy",
    "GcReport",
    "IntegrityError",
    "Manifest",
    "Signer",
    "Store",
    "StoreError",
    "VerifyReport",
    "blob_hash",
    "declare_intent",
    "drop_intents",
    "gc",
    "new_checkpoint_id",
    "verify",
]
