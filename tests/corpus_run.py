"""Run corpus cases (``corpus_cases.py``) through a real ``jupyter server`` and classify each.

Shared by ``tests/test_corpus.py`` (the fast subset) and ``benchmarks/bench_corpus.py`` (all of
it). Two notebooks of one server run the same cells: a *reference* kernel that is never paused,
and the *subject*, which is checked (``POST check``), paused, resumed and modified again. Every
case lives in both kernels at once under its own variable names, so one pause and one resume
cover the whole corpus, as a notebook full of objects would be paused.

A case's probe prints its fingerprint. It runs in both kernels at the same moments (before the
pause, after the resume, after the modify cell), so even a probe that advances its object (a
generator's ``next``) sees the same history in both. A case is

- ``equal``: the subject's probe matches the reference's after the resume and after the modify;
- ``named``: one of its variables was listed by the check as *cannot be saved* before the
  pause, every name so listed is absent after the resume, and nothing else of it was lost;
- ``rebuilt``: named, then brought back by ``rebuild_missing`` and probing as the reference;
- ``silent-loss``: anything else (missing, raising, or different, without being named);
- ``unstable``: its probe differs between the two kernels before any pause (a corpus bug:
  such a probe cannot tell anything), ``setup-failed`` and ``skipped`` (library missing).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.corpus_cases import Case

EQUAL, NAMED, REBUILT, SILENT = "equal", "named", "rebuilt", "silent-loss"
UNSTABLE, SETUP_FAILED, SKIPPED = "unstable", "setup-failed", "skipped"

# Runs each case's code in the notebook's globals, one case failing alone, and prints one JSON
# line {case: {"out": stdout} | {"error": "Type: message"}}; leaves no variable behind.
_HARNESS = """
def __corpus_each(codes):
    import contextlib as _c, io as _io, json as _j
    out = {}
    for name, code in codes:
        buf = _io.StringIO()
        try:
            with _c.redirect_stdout(buf):
                exec(code, globals())
            out[name] = {"out": buf.getvalue()}
        except BaseException as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    print("\\n" + _j.dumps(out))
__corpus_each(%r)
del __corpus_each
"""

# The notebook's own variables: not IPython's history (``_5``, ``_i5``, ``In``, ``Out``)
_NAMES = (
    "import json as __j; print(__j.dumps(sorted(k for k in globals() if not k.startswith('_')"
    " and k not in ('In', 'Out', 'exit', 'quit', 'get_ipython')))); del __j"
)


@dataclass
class Outcome:
    """One case's classification, with what a reader needs to see why."""

    case: Case
    verdict: str
    reason: str = ""
    named: dict[str, str] = field(default_factory=dict)  # name -> the check's reason

    def row(self) -> str:
        why = self.reason or "; ".join(f"{n}: {r}" for n, r in self.named.items())
        return f"{self.case.name:<12} {self.case.library:<12} {self.verdict:<13} {why[:150]}"


def rebuild_missing(server, session_id: str, names: list[str]) -> list[str]:
    """The names brought back after the resume by re-running the cells that made them, as a
    user does it: ``POST sessions/{id}/rebuild`` for those of ``names`` the resume offers, and
    once more with ``confirm`` when the rebuild asks first (the Lab's "Re-run anyway")."""
    offer = (server.session(session_id).get("restore") or {}).get("rebuild") or {}
    wanted = sorted(set(names) & set(offer.get("names") or []))
    if not wanted:
        return []
    for confirm in (False, True):
        seen = len(server.events(session_id))
        path = f"gpu-pause/api/sessions/{session_id}/rebuild"
        server.ok("POST", path, {"names": wanted, "confirm": confirm}, expect=202)

        def outcome(seen=seen):
            new = server.events(session_id)[seen:]
            return next((e for e in new if e["type"] in ("rebuilt", "rebuild_failed")), None)

        event = server.until(outcome, "a rebuild's outcome", timeout=300)
        if event["type"] == "rebuilt":
            return list(event["detail"]["names"])
        if event["detail"].get("error_reason") != "needs-confirm":
            return []
    return []


class CorpusRun:
    """The corpus procedure on one server: ``run(cases)`` returns an Outcome per case."""

    def __init__(self, server, log=print):
        self.server, self.log = server, log
        self.timings: dict[str, float] = {}
        self.unattributed: dict[str, str] = {}  # skipped names no case owns
        self.unverified: dict | None = None

    # -- cells ---------------------------------------------------------------------------------
    def _each(self, kernel_id: str, codes: list[tuple[str, str]]) -> dict[str, dict]:
        out = self.server.run(kernel_id, _HARNESS % (codes,), timeout=300)
        return json.loads(out.strip().splitlines()[-1])

    def _both(self, fn, *args):
        """``fn(kernel, *args)`` in the reference and the subject at once: their results."""
        with ThreadPoolExecutor(2) as pool:
            ref = pool.submit(fn, self.ref, *args)
            sub = pool.submit(fn, self.sub, *args)
            return ref.result(), sub.result()

    def _setup(self, kernel_id: str, cases: list[Case]) -> dict[str, str]:
        """Each case's setup as the notebook's cells; the cases whose cells failed -> why."""
        failed = {}
        for case in cases:
            try:
                self.server.run(kernel_id, case.setup, timeout=300)
            except Exception as e:  # noqa: BLE001 - one case's broken setup is that case's
                failed[case.name] = str(e).strip().splitlines()[-1][:300]
        return failed

    def _timed(self, what: str, fn, *args):
        start = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.timings[what] = time.monotonic() - start

    # -- the procedure -------------------------------------------------------------------------
    def run(self, cases: list[Case]) -> list[Outcome]:
        s = self.server
        ref = s.open_notebook("corpus-reference.ipynb")
        sub = s.open_notebook("corpus-subject.ipynb")
        self.ref, self.sub = ref["kernel_id"], sub["kernel_id"]
        outcomes: dict[str, Outcome] = {}

        # Given: every case whose library the kernels have, set up in both kernels
        have = self._each(self.sub, [(c.name, f"import {c.library}") for c in cases])
        for c in cases:
            if "error" in have[c.name]:
                outcomes[c.name] = Outcome(c, SKIPPED, f"no {c.library}: {have[c.name]['error']}")
        live = [c for c in cases if c.name not in outcomes]
        ref_failed, sub_failed = self._timed("setup", self._both, self._setup, live)
        for c in live:
            why = ref_failed.get(c.name) or sub_failed.get(c.name)
            if why:
                outcomes[c.name] = Outcome(c, SETUP_FAILED, why)
        live = [c for c in live if c.name not in outcomes]
        probes = [(c.name, c.probe) for c in live]
        before_ref, before_sub = self._both(self._each, probes)
        for c in live:
            if before_ref[c.name] != before_sub[c.name]:
                why = f"reference {before_ref[c.name]} vs subject {before_sub[c.name]}"
                outcomes[c.name] = Outcome(c, UNSTABLE, why)
        live = [c for c in live if c.name not in outcomes]
        owner = {c.prefix: c for c in live}
        had = set(json.loads(s.run(self.sub, _NAMES).strip().splitlines()[-1]))

        # When: the check names what cannot be saved, then the notebook is paused and resumed
        code, check = self._timed(
            "check", s.api, "POST", f"gpu-pause/api/sessions/{sub['id']}/check"
        )
        assert code == 200, check
        named: dict[str, dict[str, str]] = {}
        for item in check["skipped"]:
            c = _owner(owner, item["name"])
            if c is None:
                self.unattributed[item["name"]] = item["reason"]
            else:
                named.setdefault(c.name, {})[item["name"]] = item["reason"]
        self.unverified = check.get("unverified")
        paused = self._timed("pause", s.pause, sub["id"], 300)
        self.pause_skipped = {x["name"] for x in paused["checkpoint"]["skipped_objects"]}
        self.check_skipped = {x["name"] for x in check["skipped"]}
        s.ask_resume(sub["id"])
        back = self._timed("resume", s.settled, sub["id"], 300)
        assert back["state"] in ("active", "idle"), back
        self.sub = back["kernel_id"]
        self.restore = back.get("restore") or {}
        present = set(json.loads(s.run(self.sub, _NAMES).strip().splitlines()[-1]))
        lost: dict[str, list[str]] = {}  # case -> its variables gone without being named
        for n in sorted(had - present - self.check_skipped):
            c = _owner(owner, n)
            lost.setdefault(c.name if c else "", []).append(n)
        self.unattributed_lost = lost.pop("", [])
        after_ref, after_sub = self._both(self._each, probes)

        # Then: named ones are absent; the rest probe as the reference, and again after a modify
        missing = {n for names in named.values() for n in names if n not in present}
        brought = set(rebuild_missing(s, sub["id"], sorted(missing)))
        again = [c for c in live if set(named.get(c.name, {})) & brought]
        if again:  # only those: a probe may draw from an RNG, and the reference probed once
            after_sub.update(self._each(self.sub, [(c.name, c.probe) for c in again]))
        modify = [(c.name, c.modify + "\n" + c.probe) for c in live]
        mod_ref, mod_sub = self._both(self._each, modify)
        failed = {x["name"]: x["reason"] for x in self.restore.get("failed", [])}
        for c in live:
            outcomes[c.name] = self._classify(
                c,
                named.get(c.name, {}),
                lost.get(c.name, []),
                failed,
                present,
                brought,
                (after_ref[c.name], after_sub[c.name]),
                (mod_ref[c.name], mod_sub[c.name]),
            )
        return [outcomes[c.name] for c in cases]

    @staticmethod
    def _classify(
        c: Case,
        named: dict,
        lost: list,
        failed: dict,
        present: set,
        brought: set,
        after,
        modified,
    ) -> Outcome:
        if lost:
            why = "; ".join(f"{n}: {failed.get(n, 'gone')}" for n in lost)
            return Outcome(c, SILENT, f"missing after the resume, not named before: {why}", named)
        if named:
            still = sorted(n for n in named if n in present and n not in brought)
            if still:
                return Outcome(c, SILENT, f"named {still} yet present after the resume", named)
            if brought >= set(named) and after[0] == after[1] and modified[0] == modified[1]:
                return Outcome(c, REBUILT, "", named)
            return Outcome(c, NAMED, "", named)
        for when, (ref, sub) in (("after the resume", after), ("after the modify", modified)):
            if ref != sub:
                return Outcome(c, SILENT, f"{when}: reference {_show(ref)} vs resumed {_show(sub)}")
        return Outcome(c, EQUAL)


def _owner(owner: dict[str, Case], name: str) -> Case | None:
    """The case a variable belongs to: its name starts with the case's prefix."""
    return owner.get(name.partition("_")[0] + "_")


def _show(result: dict) -> str:
    return result.get("error") or repr(result.get("out", ""))[:120]


def summary(outcomes: list[Outcome]) -> str:
    """The line a reader quotes: how many came back equal, named, rebuilt, silently lost."""
    count = {v: sum(o.verdict == v for o in outcomes) for v in (EQUAL, NAMED, REBUILT, SILENT)}
    run = sum(count.values())
    return (
        f"{count[EQUAL]} of {run} equal and usable; {count[NAMED]} named before the pause; "
        f"{count[REBUILT]} rebuilt; {count[SILENT]} silent losses"
    )


def table(outcomes: list[Outcome]) -> str:
    head = f"{'case':<12} {'library':<12} {'verdict':<13} why"
    return "\n".join([head, "-" * len(head), *(o.row() for o in outcomes)])
