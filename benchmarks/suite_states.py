"""One repetition of each section of the end-to-end suite: every number of one state, ours and
the baselines side by side, in one flat dict of seconds (``*_s``, phases as ``op.phase``), bytes
and MiB. ``run.py`` takes the median of each key over the repetitions, and of the ratios
between keys of one repetition.

Order within a repetition (the same every time: each step depends on the one before):
the baselines run first in the kernel that holds the state, then the pause, the cold resume, a
re-pause with nothing changed, a warm resume, and a re-pause with 10 % of the tensors changed.
A step marked cold runs right after ``PageCache.drop`` (when the suite may drop it).
"""

from __future__ import annotations

from suite_server import MIB, ServerError, SuiteServer, budget

SIZE_SUFFIX = {"K": 1024, "M": MIB, "G": 1024 * MIB, "T": 1024**2 * MIB}


def parse_size(text: str) -> int:
    """``256M``, ``1G``, ``4G``, ``8M`` (binary units) → bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    if t and t[-1] in SIZE_SUFFIX:
        return int(float(t[:-1]) * SIZE_SUFFIX[t[-1]])
    return int(t)


def fixed(server: SuiteServer, rep: int, fresh: dict) -> dict:
    """Fixed costs: a notebook holding one integer, paused and resumed (warm: there is no data
    to be cold); ``fresh``: this repetition's ``bare_kernel`` record, the floor they meet."""
    sid, kid = server.open(f"tiny-{rep}.ipynb")
    server.run(kid, "x = 1")
    pid = server.call(kid, "states", "memory")["pid"]
    out = dict(fresh)
    out.update(server.pause_timed(sid, pid, "tiny_pause"))
    rec, kid = server.resume_timed(sid, "tiny_resume")
    out.update(rec)
    if server.run(kid, "print(x)").strip() != "1":
        raise ServerError("the tiny notebook came back without x = 1")
    out.update(server.pause_timed(sid, server.call(kid, "states", "memory")["pid"], "tiny_repause"))
    server.forget(sid)
    return out


def tensors(server: SuiteServer, label: str, nbytes: int, rep: int, fresh: dict) -> dict:
    """One state of float32 tensors in an ``nn.Sequential``: baselines, pause, cold resume,
    re-pauses. ``fresh``: this repetition's ``bare_kernel`` record."""
    seed = 1000 + 10 * rep + len(label)  # fresh content per repetition and per size
    sid, kid = server.open(f"tensors-{label}-{rep}.ipynb")
    wait = budget(nbytes)
    info = server.call(kid, "states", "make_tensors", nbytes, seed, timeout=wait)
    size = info["bytes"]
    pid = server.call(kid, "states", "memory")["pid"]
    out = {"bytes": size, "tensors": info["tensors"]}

    # Baselines, in the kernel that holds the state.
    raw, pt = server.files / f"raw-{label}-{rep}", server.files / f"{label}-{rep}.pt"
    out.update(server.timed_call(kid, "baselines", "raw_write_timed", str(raw), timeout=wait))
    server.cache.drop()
    out.update(server.timed_call(kid, "baselines", "raw_read_timed", str(raw), timeout=wait))
    out.update(server.timed_call(kid, "baselines", "torch_save_timed", str(pt), timeout=wait))
    server.cache.drop()
    out.update(server.timed_call(kid, "baselines", "torch_load_timed", str(pt), timeout=wait))
    out.update(server.kernel_torch_load(pt, size))
    pt.unlink()

    # Ours.
    out.update(server.pause_timed(sid, pid, "pause", wait))
    server.cache.drop()
    rec, kid = server.resume_timed(sid, "resume", wait)
    out.update(rec)
    mem = server.call(kid, "states", "memory")
    out["resume.peak_extra_mib"] = (mem["hwm"] - size) / MIB - fresh["fresh_rss_mib"]
    same(server.call(kid, "states", "fingerprint", timeout=wait)["fingerprint"], info, label)
    out.update(server.pause_timed(sid, mem["pid"], "repause_same", wait))
    rec, kid = server.resume_timed(sid, "resume_warm", wait)
    out.update(rec)
    changed = server.call(kid, "states", "change_tenth", timeout=wait)
    out["changed_bytes"] = changed["changed_bytes"]
    pid = server.call(kid, "states", "memory")["pid"]
    out.update(server.pause_timed(sid, pid, "repause_tenth", wait))
    server.forget(sid)
    return out


def small(server: SuiteServer, objects: int, rep: int, fresh: dict) -> tuple[dict, str]:
    """The small-objects namespace: ``pickle`` in the kernel, pause, cold resume; the record
    and the layout in words."""
    sid, kid = server.open(f"small-{rep}.ipynb")
    info = server.call(kid, "states", "make_small", objects, 2000 + rep)
    before = server.call(kid, "states", "small_fingerprint", objects)
    names = server.call(kid, "states", "small_variables", objects)["names"]
    pid = server.call(kid, "states", "memory")["pid"]
    out = {"variables": info["variables"], "objects": info["objects"]}

    path = server.files / f"small-{rep}.pickle"
    out.update(server.timed_call(kid, "baselines", "pickle_write_timed", names, str(path)))
    server.cache.drop()
    out.update(server.timed_call(kid, "baselines", "pickle_read_timed", str(path)))
    # The same two steps as cells, timed from outside the kernel as a pause's phases are timed
    # in the server: each then carries one request to the kernel and its answer too.
    # (the names as a user's cell would have them: a list built in the kernel, not a literal
    # of 2 500 strings for IPython to parse)
    listed = f"__import__('states').small_variables(globals(), {objects})['names']"
    out["pickle_cell_dump_write_s"] = server.timed_cell(
        kid, f"__import__('baselines').pickle_write_timed(globals(), {listed}, {str(path)!r});"
    )
    server.cache.drop()
    out["pickle_cell_read_loads_s"] = server.timed_cell(
        kid, f"__import__('baselines').pickle_read_timed(globals(), {str(path)!r});"
    )

    out.update(server.pause_timed(sid, pid, "pause"))
    server.cache.drop()
    rec, kid = server.resume_timed(sid, "resume")
    out.update(rec)
    mem = server.call(kid, "states", "memory")
    # The namespace's size in memory is not known here: the peak is taken over the resumed
    # kernel's RSS right after the resume (what the restore held only while it ran).
    out["resume.peak_over_after_mib"] = (mem["hwm"] - mem["rss"]) / MIB
    back = server.call(kid, "states", "small_fingerprint", objects)
    same(back["fingerprint"], before, "the small-objects namespace")
    out.update(server.pause_timed(sid, mem["pid"], "repause_same"))
    server.forget(sid)
    return out, info["layout"]


def same(fingerprint: str, before: dict, what: str) -> None:
    if fingerprint != before["fingerprint"]:
        raise ServerError(f"{what}: the resumed state differs from the paused one")
