"""The one library the agent needs that a kernel's environment may lack: cloudpickle.

Where the server brought the agent (``server/kernels/bundle.py``: the kernel's environment has
no jupyter_gpu_pause, or another version), it brought cloudpickle too, under a private name
inside this package, ``jupyter_gpu_pause._brought.cloudpickle``: the user's own
``import cloudpickle`` never gets ours, and theirs is never upgraded. Elsewhere it is the
environment's own.

A pickle names the module of every function it references, so a checkpoint written by one kind
of agent names ``cloudpickle.cloudpickle`` and by the other the private copy; ``local_module``
maps either to the cloudpickle this process uses, and every unpickling of ours goes through it
(``loads`` here, ``pickling.StreamUnpickler``): a checkpoint resumes in either kind of kernel.
"""

from __future__ import annotations

import importlib
import io
import pickle
from typing import TYPE_CHECKING, Any

PUBLIC = "cloudpickle"
BROUGHT = f"{__name__.rpartition('.kernel.')[0]}._brought.cloudpickle"


def _cloudpickle() -> Any:
    try:
        return importlib.import_module(BROUGHT)
    except ImportError:  # the agent is the environment's own: so is its cloudpickle
        return importlib.import_module(PUBLIC)


if TYPE_CHECKING:
    import cloudpickle
else:
    cloudpickle = _cloudpickle()

IN_USE: str = cloudpickle.__name__


def local_module(module: str) -> str:
    """``module`` as a pickle names it, with either cloudpickle's name replaced by the one this
    process uses."""
    for name in (PUBLIC, BROUGHT):
        if module == name or module.startswith(name + "."):
            return IN_USE + module[len(name) :]
    return module


class Unpickler(pickle.Unpickler):
    """pickle's own unpickler, finding cloudpickle's functions under either name."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(local_module(module), name)


def loads(data: bytes) -> Any:
    """``pickle.loads`` of what cloudpickle wrote, in a kernel of either kind."""
    return Unpickler(io.BytesIO(data)).load()
