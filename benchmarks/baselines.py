"""The ways to save and load a state without us, that a pause and a resume are compared with.

``raw_write``/``raw_read`` are the floor for durable bytes: one file per tensor, fsync'd, read
back with ``readinto``. ``bench_pause_resume.py`` calls them in its own process. The end-to-end
suite (``run.py``) calls the ``*_timed`` functions *inside the benchmark's kernel*, next to the
state, through ``suite_states.Lab.call``: same process, same bytes, same folder as the pause, so
the only difference left is the method. Each of those takes the kernel's namespace ``ns`` first
and returns a JSON-able dict of seconds, timed inside the kernel (a cell's round trip is not
part of a method's cost).

torch is imported here at the top: every caller has it loaded already.
"""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import torch

from jupyter_gpu_pause.store.local import fsync_dir  # the store's own: the same durability


def as_bytes(t):
    """A tensor's bytes as a flat uint8 numpy view (no copy when it is contiguous)."""
    return t.contiguous().view(-1).view(torch.uint8).numpy()


def raw_write(state: dict, d: str, sync_dir: bool = True) -> None:
    """Each tensor's bytes to a file of its own in ``d``, fsync per file and (``sync_dir``)
    of ``d``."""
    for name, t in state.items():
        view = memoryview(as_bytes(t))
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    if sync_dir:
        fsync_dir(d)


def raw_read(bufs: dict, d: str) -> None:
    """The files of ``raw_write`` into ``bufs`` (name → writable buffer of the right size)."""
    for name, buf in bufs.items():
        with open(os.path.join(d, name), "rb", buffering=0) as f:
            view, pos = memoryview(buf), 0
            while pos < len(view):
                n = f.readinto(view[pos:])
                if not n:
                    raise OSError(f"short read of {name}")
                pos += n


# -- inside the kernel: tensors ----------------------------------------------------------------
def raw_write_timed(ns: dict, d: str) -> dict:
    """``raw_write`` of ``model``'s tensors into a new folder ``d``."""
    state = ns["model"].state_dict()
    os.makedirs(d)
    t = time.perf_counter()
    raw_write(state, d)
    return {"raw_write_s": time.perf_counter() - t, "files": len(state)}


def raw_read_timed(ns: dict, d: str) -> dict:
    """``raw_read`` of ``raw_write_timed``'s files into buffers made before the timer but not
    yet touched (their page faults are paid inside, as by every reader); checked against
    ``model``, then the folder is removed."""
    state = ns["model"].state_dict()
    bufs = {k: as_bytes(torch.empty_like(v)) for k, v in state.items()}
    t = time.perf_counter()
    raw_read(bufs, d)
    took = time.perf_counter() - t
    if not all(np.array_equal(bufs[k], as_bytes(v)) for k, v in state.items()):
        raise AssertionError("the raw read differs from what was written")
    for name in state:
        os.remove(os.path.join(d, name))
    os.rmdir(d)
    return {"raw_read_s": took}


def torch_save_timed(ns: dict, path: str) -> dict:
    """``torch.save`` of ``model``'s state dict to one file, flushed and fsync'd."""
    t = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(ns["model"].state_dict(), f)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(os.path.dirname(path))
    return {"torch_save_s": time.perf_counter() - t}


def torch_load_timed(ns: dict, path: str) -> dict:
    """``torch.load`` of that file (the file stays, for a new kernel to load it too)."""
    t = time.perf_counter()
    loaded = torch.load(path)
    took = time.perf_counter() - t
    if len(loaded) != len(ns["model"].state_dict()):
        raise AssertionError("torch.load returned another number of tensors")
    return {"torch_load_s": took}


# -- inside the kernel: the small-objects namespace -----------------------------------------------
def pickle_write_timed(ns: dict, names: list[str], path: str) -> dict:
    """``pickle.dumps`` of the named variables as one dict, then written and fsync'd: what a
    careful notebook does by hand, compared with a pause's capture + write (+ verify)."""
    t = time.perf_counter()
    data = pickle.dumps({n: ns[n] for n in names}, protocol=pickle.HIGHEST_PROTOCOL)
    dumped = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(os.path.dirname(path))
    end = time.perf_counter()
    return {
        "pickle_dumps_s": dumped - t,
        "pickle_write_s": end - dumped,
        "pickle_dump_write_s": end - t,
        "pickle_bytes": len(data),
    }


def pickle_read_timed(ns: dict, path: str) -> dict:
    """That file read and ``pickle.loads``; compared with a resume's read + unpickle. The
    file is removed after."""
    t = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    read = time.perf_counter()
    back = pickle.loads(data)
    end = time.perf_counter()
    os.remove(path)
    if not isinstance(back, dict) or not back:
        raise AssertionError("pickle.loads returned no namespace")
    return {"pickle_read_s": read - t, "pickle_loads_s": end - read, "pickle_read_loads_s": end - t}
