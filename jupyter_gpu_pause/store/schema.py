"""What a manifest may contain, checked field by field before the server signs it.

The capture report comes from the kernel, which runs arbitrary user code: a package could
replace our agent and report anything. Whatever the server signs is later trusted by a resume,
so every hash, size, name and offset is checked here first: a hash names a path in the store, an
offset cuts the pickle stream, a name becomes a variable. The same checks run again when a
signed manifest is read, so a checkpoint that predates them is held to the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NoReturn

from .integrity import HASH_RE

BLOB_KINDS = ("tensor", "buffer", "pickle", "cells", "ambient")
OBJECT_KINDS = ("pickle", "module", "hooks")
HOOKS_OBJECT = "__jupyter_gpu_pause_hooks__"
MAX_TEXT = 2000  # longest name, reason or dtype we accept (a reason is one sentence)
MAX_ITEMS = 1_000_000

_DEVICE = re.compile(r"^[a-z][a-z0-9_]*(:\d{1,4})?\Z")


class ManifestError(ValueError):
    """A capture report or a manifest breaks a rule; the message names the field."""


def _fail(where: str, why: str) -> NoReturn:
    raise ManifestError(f"{where} {why}")


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(where, f"must be a whole number of bytes >= 0, not {value!r}")
    return value


def is_variable_name(name: object) -> bool:
    """A name the notebook namespace can hold as a variable (Unicode identifiers included)."""
    return isinstance(name, str) and name.isidentifier()


def _is_module_name(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def _text(
    value: object,
    where: str,
    pattern: re.Pattern[str] | Callable[[str], bool] | None = None,
) -> str:
    """A text of bounded length; ``pattern`` is a compiled regex or a predicate."""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        _fail(where, f"must be a text of at most {MAX_TEXT} characters, not {value!r:.80}")
    ok = pattern(value) if callable(pattern) else pattern is None or pattern.match(value)
    if not ok:
        _fail(where, f"has an invalid value {value!r:.80}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        _fail(where, "must be a list")
    return value


def _dict(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(where, "must be an object")
    return value


def _blobs(raw: object) -> dict[str, dict[str, Any]]:
    blobs: dict[str, dict[str, Any]] = _dict(raw, "blobs")
    for h, meta in blobs.items():
        if not isinstance(h, str) or not HASH_RE.match(h):
            _fail("blobs", f"names {h!r:.80}, which is not a blob hash")
        where = f"blob {h}"
        _dict(meta, where)
        _count(meta.get("bytes"), f"{where} bytes")
        if meta.get("kind") not in BLOB_KINDS:
            _fail(where, f"has unknown kind {meta.get('kind')!r:.40}")
        if "dtype" in meta:
            _text(meta["dtype"], f"{where} dtype")
        if "device" in meta:
            _text(meta["device"], f"{where} device", _DEVICE)
    return blobs


def _ref(h: object, blobs: dict[str, dict[str, Any]], where: str, used: set[str]) -> dict[str, Any]:
    if not isinstance(h, str) or h not in blobs:
        _fail(where, f"refers to blob {h!r:.80}, which the manifest does not list")
    used.add(h)
    return blobs[h]


def _objects(raw: object, stream_bytes: int) -> None:
    names: set[str] = set()
    for i, o in enumerate(_list(raw, "objects")):
        where = f"object #{i + 1}"
        _dict(o, where)
        name = _text(o.get("name"), f"{where} name")
        if name != HOOKS_OBJECT and not is_variable_name(name):
            _fail(where, f"has a name that is not a variable name: {name!r:.80}")
        if name in names:
            _fail(where, f"repeats the name {name!r}")
        names.add(name)
        kind = o.get("kind")
        if kind not in OBJECT_KINDS or (kind == "hooks") != (name == HOOKS_OBJECT):
            _fail(where, f"({name}) has an invalid kind {kind!r:.40}")
        _count(o.get("bytes", 0), f"{where} ({name}) bytes")
        if not isinstance(o.get("required", False), bool):
            _fail(where, f"({name}) required must be true or false")
        if kind == "module":
            _text(o.get("module"), f"{where} ({name}) module", _is_module_name)
            continue
        offset = _count(o.get("offset"), f"{where} ({name}) offset")
        length = _count(o.get("length"), f"{where} ({name}) length")
        if offset + length > stream_bytes:
            _fail(where, f"({name}) lies outside the pickle stream of {stream_bytes} bytes")


def _skipped(raw: object, where: str = "skipped") -> None:
    for i, x in enumerate(_list(raw, where)):
        _dict(x, f"{where} #{i + 1}")
        _text(x.get("name"), f"{where} #{i + 1} name")
        _text(x.get("reason"), f"{where} #{i + 1} reason")


def check_content(doc: dict[str, Any]) -> None:
    """The rules shared by a capture report and a manifest: blobs, references, objects."""
    _dict(doc, "the capture report")
    blobs = _blobs(doc.get("blobs"))
    used: set[str] = set()
    for i, st in enumerate(_list(doc.get("storages"), "storages")):
        where = f"storage #{i + 1}"
        _dict(st, where)
        meta = _ref(st.get("blob"), blobs, where, used)
        if _count(st.get("nbytes"), f"{where} nbytes") != meta["bytes"]:
            _fail(where, f"claims {st['nbytes']} bytes but its blob has {meta['bytes']}")
        _text(st.get("device"), f"{where} device", _DEVICE)
    for i, a in enumerate(_list(doc.get("arrays"), "arrays")):
        where = f"array #{i + 1}"
        _dict(a, where)
        _ref(a.get("blob"), blobs, where, used)
        _text(a.get("dtype"), f"{where} dtype")
        for n in _list(a.get("shape"), f"{where} shape"):
            _count(n, f"{where} shape")
        if a.get("order") not in ("C", "F"):
            _fail(where, f"has an invalid order {a.get('order')!r:.20}")
    if doc.get("cells") is not None:  # the cell log, JSON (kernel/cells.py)
        cells = _dict(doc["cells"], "cells")
        meta = _ref(cells.get("blob"), blobs, "cells", used)
        if _count(cells.get("bytes"), "cells bytes") != meta["bytes"] or meta["kind"] != "cells":
            _fail("cells", "does not match its blob")
    if doc.get("ambient") is not None:  # the process state around the namespace (ambient/)
        around = _dict(doc["ambient"], "ambient")
        meta = _ref(around.get("blob"), blobs, "ambient", used)
        if (
            _count(around.get("bytes"), "ambient bytes") != meta["bytes"]
            or meta["kind"] != "ambient"
        ):
            _fail("ambient", "does not match its blob")
        for name in _list(around.get("carried", []), "ambient carried"):
            _text(name, "ambient carried name")
        _skipped(around.get("not_carried", []), "ambient not_carried")
    pickle = _dict(doc.get("pickle"), "pickle")
    meta = _ref(pickle.get("blob"), blobs, "pickle", used)
    stream = _count(pickle.get("bytes"), "pickle bytes")
    if stream != meta["bytes"]:
        _fail("pickle", f"claims {stream} bytes but its blob has {meta['bytes']}")
    if set(blobs) - used:
        _fail("blobs", f"lists {len(set(blobs) - used)} blob(s) nothing refers to")
    _objects(doc.get("objects"), stream)
    _skipped(doc.get("skipped"))
    for name in _list(doc.get("registered", []), "registered"):
        _text(name, "registered name", is_variable_name)


def check_environment(kernel: object, origin: object) -> None:
    """What the manifest records about the kernel and its machine: flat texts only."""
    for part, values in (("kernel", kernel), ("origin", origin)):
        for key, value in _dict(values, part).items():
            _text(key, f"{part} key")
            if value is not None:
                _text(value, f"{part} {key}")


def check_capture(report: dict[str, Any]) -> None:
    """A capture report from the agent, before the server uses it: its counts and environment.
    Its content (blobs, references, objects) is checked once, by ``build_manifest``, before
    anything is signed."""
    _dict(report, "the capture report")
    _count(report.get("new_bytes", 0), "new_bytes")
    check_environment(report.get("kernel"), report.get("origin"))
