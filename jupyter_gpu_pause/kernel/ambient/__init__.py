"""Ambient state: the process around the namespace, carried by a checkpoint so that a resumed
notebook's next cells print what they would have printed.

A variable is in the namespace; a seeded generator, ``plt.rc(...)``, ``np.set_printoptions``,
a ``warnings`` filter, ``os.chdir``, a ``%load_ext`` or the execution counter are not: they live
in modules, in the interpreter and in IPython. Each such piece is kept by a *provider*: an
object with ``capture() -> state`` (any picklable value; ``None`` when there is nothing to
carry, e.g. its library was never imported or its settings were never changed) and
``restore(state)``. Providers are found through the entry point group
``jupyter_gpu_pause.ambient`` (name -> a class, instance or module with those functions), so a
library or an admin adds theirs (a JAX or TensorFlow config) without a change here; ours are
declared there too. Optional members:

- ``label``: words for the resume notification ("random state", "plotting settings");
- ``early``: restored before the namespace (import paths, environment variables, the working
  folder: unpickling a notebook's objects may import from them);
- ``order``: a number; lower restores first (default 50);
- ``baseline()``: called once, when the agent first sees the kernel, before the user's cells
  (what changed since then is what the user changed);
- ``not_carried() -> [(name, reason)]``: what cannot travel at all (a running thread), named
  by the check before a pause;
- ``left_out``: ``[(name, reason)]`` of what the last ``capture`` could not take (an output too
  big to copy), named like ``not_carried``;
- ``restore`` may return ``{"not_restored": [(name, reason)], "rerun": [names], "label": str}``
  for a partial restore, a re-run, or a label that counts ("2 extensions").

Each provider's state is pickled on its own, so one that cannot be pickled, or that fails to
load on the other side, costs only itself, and is named: before the pause by the check
(``not_carried``) and after the resume by the restore report (``not_restored``). The blob is
read only after its hash matched the signed manifest (``restore.load_blobs``), like every blob.
"""

from __future__ import annotations

import inspect
import pickle
import time
from typing import Any, Protocol

from .. import deps

GROUP = "jupyter_gpu_pause.ambient"
VERSION = 1
COUNTED = "_gpu_pause_counted"  # shell attribute: cells counted before this kernel (restored)
DEFAULT_ORDER = 50
# Random generators are set last: a re-run cell or an extension loaded after them (an import
# that draws) would move them on from where the notebook left them.
RANDOM_LAST = 100
MAX_REASON = 300  # characters of an exception's text kept as a reason

# What the resume being restored knows that a provider may need: ``no_rerun_ids`` (the
# notebook's cells tagged gp-no-rerun). Filled by ``Restoring``, read by our providers.
RESUME: dict = {}


class Provider(Protocol):
    """The two members every provider has (checked as it loads); the optional ones listed
    above are read with ``getattr``."""

    def capture(self) -> Any: ...

    def restore(self, state: Any, /) -> dict | None: ...


_providers: list[tuple[str, Provider]] | None = None
_baselined = False
# The baseline came after cells of the user's had run (a notebook run whole the moment it was
# opened, before the server's first request): what a provider would tell by comparing with it
# is then told by other means, or carried whole.
LATE = {"late": False}


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text[:MAX_REASON]


def _order(p) -> int:
    return (
        -1000 + getattr(p, "order", DEFAULT_ORDER)
        if getattr(p, "early", False)
        else getattr(p, "order", DEFAULT_ORDER)
    )


def providers() -> list[tuple[str, Provider]]:
    """The installed providers, (name, object) in restore order; looked up once per process
    (reading the installed packages' entry points costs a few milliseconds). A provider that
    fails to load is left out here and named by ``check_only`` (``_load_problems``)."""
    global _providers
    if _providers is None:
        found, problems, seen = [], [], set()
        for ep in _entry_points():
            if ep.name in seen:  # two installed copies of one package: the first wins
                continue
            seen.add(ep.name)
            try:
                obj = ep.load()
                if inspect.isclass(obj):
                    obj = obj()
            except Exception as e:
                problems.append((ep.name, f"its provider did not load: {_reason(e)}"))
                continue
            if not (
                callable(getattr(obj, "capture", None)) and callable(getattr(obj, "restore", None))
            ):
                problems.append((ep.name, "its provider has no capture() and restore()"))
                continue
            found.append((ep.name, obj))
        found.sort(key=lambda item: (_order(item[1]), item[0]))
        _providers = found
        _load_problems[:] = problems
    return _providers


_load_problems: list[tuple[str, str]] = []


def _entry_points() -> list:
    """The group's entry points. Where the server brought this agent (``deps.py``), this
    package's own come from what it brought (``_brought.AMBIENT``: the agent is not installed
    here, and a copy of another version that is would name its own), other packages' from
    the environment."""
    import importlib
    from importlib.metadata import EntryPoint, entry_points

    try:
        installed = list(entry_points(group=GROUP))
    except TypeError:  # Python 3.9: one dict of every group
        installed = list(entry_points().get(GROUP, []))
    try:
        ours = importlib.import_module(deps.BROUGHT.rpartition(".")[0]).AMBIENT
    except ImportError:
        return installed
    package = deps.BROUGHT.partition(".")[0] + "."
    return [EntryPoint(n, v, GROUP) for n, v in ours] + [
        ep for ep in installed if not ep.value.startswith(package)
    ]


def watch() -> None:
    """Take every provider's baseline, once per kernel: the agent calls this at its first
    request, which the server sends as soon as it sees a new kernel (before the user's cells,
    in the usual case)."""
    global _baselined
    if _baselined:
        return
    _baselined = True
    try:
        from IPython import get_ipython

        shell = get_ipython()
        LATE["late"] = shell is not None and shell.execution_count > 1
    except Exception:
        pass
    for _name, p in providers():
        fn = getattr(p, "baseline", None)
        if fn is not None:
            try:
                fn()
            except Exception:  # no baseline: that provider carries all it sees, not only changes
                pass


def _dumps(state) -> bytes:
    """A provider's state as bytes: cloudpickle, so that a setting holding a function the
    notebook made (``pd.set_option("display.float_format", lambda x: …)``) travels too."""
    from ..deps import cloudpickle

    return cloudpickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def given(environ: dict) -> None:
    """The server set ``environ`` in this kernel for its resume: no provider takes them for
    the user's changes."""
    for _name, p in providers():
        fn = getattr(p, "given", None)
        if fn is not None:
            fn(environ)


def capture() -> tuple[bytes, dict]:
    """The ambient blob and what it carries: ``{"carried": [names], "not_carried": [{"name",
    "reason"}], "seconds"}``. Never raises: a provider that fails is named in ``not_carried``."""
    started = time.perf_counter()
    states: dict[str, bytes] = {}
    report = check_only()
    for name, p in providers():
        try:
            state = p.capture()
            _left_out(p, report)
            if state is None:
                continue
            states[name] = _dumps(state)
        except Exception as e:
            report["not_carried"].append({"name": name, "reason": f"not captured: {_reason(e)}"})
            continue
        report["carried"].append(name)
    blob = pickle.dumps({"version": VERSION, "states": states}, protocol=pickle.HIGHEST_PROTOCOL)
    report["seconds"] = round(time.perf_counter() - started, 6)
    return blob, report


def _left_out(p, report: dict) -> None:
    """What the provider's last capture left out of its state (``left_out``), named."""
    for what, why in getattr(p, "left_out", None) or ():
        report["not_carried"].append({"name": str(what), "reason": str(why)})


def check_only() -> dict:
    """What cannot travel, from every provider's ``not_carried``: the part of the check that
    writes nothing and pickles nothing."""
    report: dict = {"carried": [], "not_carried": []}
    for name, reason in _load_problems:
        report["not_carried"].append({"name": name, "reason": reason})
    for name, p in providers():
        fn = getattr(p, "not_carried", None)
        if fn is None:
            continue
        try:
            for what, why in fn():
                report["not_carried"].append({"name": str(what), "reason": str(why)})
        except Exception as e:
            report["not_carried"].append({"name": name, "reason": f"not checked: {_reason(e)}"})
    return report


def describe() -> dict:
    """The check's ``ambient``: what a pause would carry and what it cannot (a capture whose
    blob is dropped: the same providers, the same verdicts)."""
    _blob, report = capture()
    report.pop("seconds")
    return report


class Restoring:
    """A restore of one ambient blob in two steps: ``early`` before the namespace is unpickled
    (paths, environment, working folder), ``rest`` after it. ``report`` is the restore
    report's ``ambient``."""

    def __init__(self, blob: bytes | None, problem: str | None = None, **resume):
        self.report: dict = {
            "restored": [],
            "rerun": [],
            "not_restored": [],
            "text": None,
            "seconds": 0.0,
        }
        self._labels: list[str] = []
        RESUME.clear()
        RESUME.update(resume)
        self._states: dict[str, bytes] = {}
        if problem is not None:
            self.report["not_restored"].append({"name": "ambient state", "reason": problem})
            return
        if blob is None:
            return
        try:
            doc = deps.loads(blob)
            if not isinstance(doc, dict) or doc.get("version") != VERSION:
                raise ValueError(
                    f"version {doc.get('version') if isinstance(doc, dict) else doc!r:.40}"
                )
            self._states = dict(doc["states"])
        except Exception as e:
            self.report["not_restored"].append(
                {"name": "ambient state", "reason": f"cannot be read: {_reason(e)}"}
            )

    def early(self) -> None:
        self._run(lambda p: getattr(p, "early", False))

    def rest(self) -> dict:
        self._run(lambda p: not getattr(p, "early", False))
        known = {name for name, _ in providers()}
        for name in self._states:
            if name not in known:
                self.report["not_restored"].append(
                    {
                        "name": name,
                        "reason": "this kernel's environment has no ambient provider of that "
                        f"name (entry point group {GROUP})",
                    }
                )
        self._states = {}
        self.report["text"] = summary(self._labels, self.report)
        return self.report

    def _run(self, which) -> None:
        started = time.perf_counter()
        try:
            self._each(which)
        finally:
            self.report["seconds"] = round(
                self.report["seconds"] + time.perf_counter() - started, 6
            )

    def _each(self, which) -> None:
        for name, p in providers():
            if name not in self._states or not which(p):
                continue
            raw = self._states.pop(name)
            try:
                note = p.restore(deps.loads(raw)) or {}
            except Exception as e:
                self.report["not_restored"].append({"name": name, "reason": _reason(e)})
                continue
            for what, why in note.get("not_restored", ()):
                self.report["not_restored"].append({"name": str(what), "reason": str(why)})
            self.report["rerun"] += [str(n) for n in note.get("rerun", ())]
            if note.get("restored", True):
                self.report["restored"].append(name)
                self._labels.append(note.get("label") or getattr(p, "label", None) or name)


HEADLINES = ("random state", "plotting settings", "extension", "display formatters")


def _rank(label: str) -> int:
    for i, head in enumerate(HEADLINES):
        if label == head or (head == "extension" and label.endswith((" extension", " extensions"))):
            return i
    return len(HEADLINES)


def summary(labels: list[str], report: dict) -> str | None:
    """ "Random state, plotting settings, 2 extensions and 4 other settings restored; 1 cell
    re-run": what a user notices first named, the rest counted, so the sentence stays short."""
    seen = sorted(dict.fromkeys(labels), key=_rank)
    heads = [x for x in seen if _rank(x) < len(HEADLINES)]
    others = [x for x in seen if _rank(x) == len(HEADLINES)]
    if len(others) > 1:
        others = [f"{len(others)} other settings"]
    words = heads + others
    parts = []
    if words:
        text = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
        parts.append(f"{text[:1].upper()}{text[1:]} restored")
    if report["rerun"]:
        n = len(report["rerun"])
        parts.append(f"{n} cell{'s' if n != 1 else ''} re-run")
    if report["not_restored"]:
        n = len(report["not_restored"])
        parts.append(f"{n} part{'s' if n != 1 else ''} of the kernel's settings not restored")
    return "; ".join(parts) if parts else None


def reset_for_tests() -> None:
    """Forget the providers and the baseline (a test that installs a provider)."""
    global _providers, _baselined
    _providers, _baselined = None, False


__all__ = [
    "COUNTED",
    "GROUP",
    "Restoring",
    "capture",
    "check_only",
    "describe",
    "given",
    "providers",
    "watch",
]
