"""Checkpoint store, format v1: content-addressed blobs plus one signed manifest per checkpoint.

Nothing here imports the server or Tornado: the kernel agent writes blobs through this package and
the server writes and verifies manifests through it.
"""

from .format import FORMAT, Manifest, new_checkpoint_id
from .integrity import IntegrityError, Signer, blob_hash
from .io import Store, StoreError

__all__ = [
    "FORMAT",
    "IntegrityError",
    "Manifest",
    "Signer",
    "Store",
    "StoreError",
    "blob_hash",
    "new_checkpoint_id",
]
