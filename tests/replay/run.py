"""Replay real notebooks through a real ``jupyter server``, paused twice mid-way (issue #33).

Shared by ``tests/test_replay.py`` (the fast subset) and ``benchmarks/bench_replay.py`` (the whole
corpus). For each notebook three kernels of one server run its code cells in order, each in a
copy of the notebook's own folder (its data files beside it), as "Run All" does:

- two *references*, never paused. A cell whose outputs differ between them (unseeded draws,
  timings the masks do not catch) cannot tell anything: it is left out of the comparison and
  counted. Where the subject differs in a cell the two agree on, up to two more plain runs
  confirm the cell is stable before it counts;
- the *subject*, checked (``POST check``), paused and resumed through the REST API after a
  third of its cells and again after two thirds, accepting the rebuild a resume offers
  (``restore.rebuild``) as a user clicking it would, then run to the end.

Every cell the subject ran after its first pause is compared with the first reference: outputs
as ``outputs.py`` reduces them, and the execution count the cell got. A notebook is

- ``identical``: every compared cell printed what the reference printed, at the same count;
- ``named``: every differing cell is explained by what a check listed before a pause as not
  carried: a variable it could not save (``skipped``, rebuilt or not) or ambient state
  (``ambient.not_carried``) the cell uses, directly or through a variable a cell made from it
  after the pause;
- ``differs``: a silent divergence: some cell differs and nothing told the user beforehand;
- ``failed``: a run could not go to the end (a reference, or the subject's pause or resume).
"""

from __future__ import annotations

import ast
import json
import math
import queue
import re
import shutil
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from jupyter_client import BlockingKernelClient

from benchmarks.server_process import RUNNING, JupyterServer, ServerError
from tests.corpus_run import rebuild_missing
from tests.replay.corpus import Notebook
from tests.replay.outputs import CellOutputs, CellRun, Masks, first_change

IDENTICAL, NAMED, DIFFERS, FAILED = "identical", "named", "differs", "failed"
REFERENCES = 4  # plain runs at most: two, and up to two more where the subject differed
CONNECT_TRIES = 4  # clients tried on one kernel, each asking ~1 min at most
CELL_TIMEOUT = 300.0  # seconds one cell may run: the slowest corpus cell takes ~30 s alone
PAUSE_TIMEOUT = 300.0

# A config for the replay's server: no checkpoint on shutdown, no warm kernel competing for the
# two cores with the notebooks; what the tree does about ambient state is left at its default.
CONFIG = 'c.GpuPauseApp.shutdown_checkpoint = "none"\nc.GpuPauseApp.warm_kernels = False\n'
# The server's kernels, resumed ones included, get one string hash seed. The order in which a
# set of strings iterates is fixed by it when the interpreter starts (a resume carries it only
# by starting its kernel with the same seed), and with a seed per kernel a notebook that prints
# such an order, or draws in it (statsmodels' ``mixture_rvs``), differs between plain runs by
# chance, sometimes too rarely for two or four of them to show. ``None`` leaves each kernel a
# seed of its own, as a server started by hand does.
HASH_SEED = "0"


def pin_hash_seed(server: JupyterServer, seed: str | None = HASH_SEED) -> None:
    """Before ``server.start()``: its kernels' ``PYTHONHASHSEED`` (None: a random one each)."""
    if seed is None:
        server.env.pop("PYTHONHASHSEED", None)
    else:
        server.env["PYTHONHASHSEED"] = seed


@dataclass
class PauseRecord:
    """One pause and resume of the subject, as the API told it."""

    after_cell: int  # the pause came after this many code cells
    skipped: dict[str, str] = field(default_factory=dict)  # check: name -> reason
    not_carried: list = field(default_factory=list)  # check: ambient.not_carried, as sent
    failed: dict[str, str] = field(default_factory=dict)  # restore: name -> reason
    ambient: dict | None = None  # restore.ambient, as sent (None: the tree has none)
    offered: list[str] = field(default_factory=list)  # restore.rebuild names
    rebuilt: list[str] = field(default_factory=list)
    pause_seconds: float = 0.0
    resume_seconds: float = 0.0
    # 409s to POST resume while GET said ``paused`` (the pause still held the session)
    resume_refused: list[str] = field(default_factory=list)


@dataclass
class Divergence:
    """A compared cell that printed something else, or got another count, after the pauses."""

    cell: int  # index among the notebook's code cells, from 0
    what: list[str]  # "count" and/or "outputs"
    reference: str
    resumed: str
    named_by: str = ""  # what the check named that explains it; "" for a silent one
    source: str = ""  # the cell's first line


@dataclass
class Replay:
    """One notebook's outcome."""

    notebook: Notebook
    verdict: str
    cells: int = 0
    stops: tuple[int, int] = (0, 0)
    compared: int = 0
    unstable: int = 0  # later cells whose outputs differ between the plain runs: left out
    references: int = 2  # plain runs: more when the subject differed from the first two
    divergences: list[Divergence] = field(default_factory=list)
    pauses: list[PauseRecord] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0

    @property
    def silent(self) -> list[Divergence]:
        return [d for d in self.divergences if not d.named_by]

    @property
    def counts_continue(self) -> bool:
        """After each resume the next cell got the count it would have got."""
        return not any("count" in d.what for d in self.divergences)

    def first_difference(self) -> str:
        if self.reason:
            return self.reason
        shown = self.silent or self.divergences
        if not shown:
            return ""
        d = shown[0]
        named = f" (named: {d.named_by})" if d.named_by else ""
        return f"cell {d.cell} {'+'.join(d.what)}{named}: ref {d.reference} vs resumed {d.resumed}"

    def as_json(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "notebook"}
        return {
            "notebook": self.notebook.name,
            "library": self.notebook.library,
            "source": self.notebook.path,
            "counts_continue": self.counts_continue,
            "silent": len(self.silent),
            **out,
        }


class _Broken(Exception):
    """A run could not go on: its notebook's verdict is ``failed``, with this reason."""


class ReplayRun:
    """The replay procedure on one running server (``JupyterServer``)."""

    def __init__(self, server: JupyterServer, log=print, cell_timeout: float = CELL_TIMEOUT):
        self.server, self.log, self.cell_timeout = server, log, cell_timeout
        self.root = server.tmp / "root"

    def run(self, notebooks: list[Notebook], jobs: int = 1) -> list[Replay]:
        """Every notebook's outcome, in order; ``jobs`` notebooks at a time (3 kernels each)."""
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return list(pool.map(self.replay, notebooks))

    # -- one notebook --------------------------------------------------------------------------
    def replay(self, nb: Notebook) -> Replay:
        start = time.monotonic()
        sources = nb.code_cells()
        n = len(sources)
        stops = (math.ceil(n / 3), math.ceil(2 * n / 3))
        out = Replay(nb, FAILED, cells=n, stops=stops)
        try:
            with ThreadPoolExecutor(3) as pool:
                refs = [pool.submit(self._reference, nb, sources, r) for r in ("ref1", "ref2")]
                sub = pool.submit(self._subject, nb, sources, stops, out)
                plain = [self._outcome(f, "reference") for f in refs]
                resumed = self._outcome(sub, "resumed")
            self._compare(out, sources, plain, resumed)
            while any("outputs" in d.what for d in out.divergences) and len(plain) < REFERENCES:
                # Plain runs can agree by chance (a draw with few outcomes, a figure's width
                # that moves with them): more of them tell the notebook's noise from the pause's
                with ThreadPoolExecutor(1) as pool:
                    more = pool.submit(self._reference, nb, sources, f"ref{len(plain) + 1}")
                    plain.append(self._outcome(more, "reference"))
                self._compare(out, sources, plain, resumed)
            out.references = len(plain)
        except _Broken as e:
            out.verdict, out.reason = FAILED, str(e)
        out.seconds = time.monotonic() - start
        self.log(f"{nb.name:<34} {out.verdict:<9} {out.seconds:5.0f} s {out.first_difference()}")
        return out

    @staticmethod
    def _outcome(future, who: str):
        try:
            return future.result()
        except _Broken as e:
            raise _Broken(f"{who}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a harness or server fault fails this notebook
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            raise _Broken(f"{who}: {tb[:300]}") from None

    def _folder(self, nb: Notebook, role: str) -> tuple[str, Masks]:
        """A fresh copy of the notebook's folder for one run; its path relative to the server's
        root, and the masks that hide which copy it was."""
        name = f"{nb.name}-{role}"
        dest = self.root / name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(nb.folder, dest, ignore=shutil.ignore_patterns("*.md"))
        masks = Masks(folders=(str(dest.resolve()), str(dest), name))
        return f"{name}/{nb.file}", masks

    def _reference(self, nb: Notebook, sources: list[str], role: str) -> list[CellRun]:
        path, masks = self._folder(nb, role)
        session = self.server.open_notebook(path)
        try:
            return self._cells(session["kernel_id"], sources, masks)
        finally:
            self._close(session)

    def _subject(self, nb: Notebook, sources, stops, out: Replay) -> list[CellRun]:
        s = self.server
        path, masks = self._folder(nb, "subject")
        session = s.open_notebook(path)
        sid, kid = session["id"], session["kernel_id"]
        runs: list[CellRun] = []
        try:
            for begin, end in zip((0, *stops), (*stops, len(sources)), strict=True):
                if begin:  # a pause and a resume before this stretch of cells
                    record = self._pause_and_resume(sid, begin)
                    out.pauses.append(record)
                    kid = s.session(sid)["kernel_id"]
                runs += self._cells(kid, sources[begin:end], masks, first=begin)
            return runs
        finally:
            self._close(s.session(sid))

    def _pause_and_resume(self, sid: str, after: int) -> PauseRecord:
        s = self.server
        record = PauseRecord(after_cell=after)
        code, check = s.api("POST", f"gpu-pause/api/sessions/{sid}/check", timeout=120)
        if code != 200:
            raise _Broken(f"check before pause {after} answered {code}: {check}")
        record.skipped = {x["name"]: x.get("reason", "") for x in check.get("skipped", [])}
        record.not_carried = list((check.get("ambient") or {}).get("not_carried") or [])
        t = time.monotonic()
        try:
            s.pause(sid, PAUSE_TIMEOUT)
        except ServerError as e:
            raise _Broken(f"pause after cell {after}: {e}") from None
        record.pause_seconds = time.monotonic() - t
        t = time.monotonic()
        path = f"gpu-pause/api/sessions/{sid}/resume"

        def asked() -> bool:
            """The resume accepted; a refusal while the session shows ``paused`` is counted
            and asked again, as a user clicking Resume again would."""
            code, answer = s.api("POST", path, {})
            if code == 202:
                return True
            if code == 409 and s.session(sid)["state"] == "paused":
                record.resume_refused.append((answer or {}).get("message", ""))
                return False
            raise _Broken(f"resume after cell {after} answered {code}: {answer}")

        s.until(asked, "a resume accepted", timeout=60)
        back = s.settled(sid, PAUSE_TIMEOUT)
        record.resume_seconds = time.monotonic() - t
        if back["state"] not in RUNNING:
            raise _Broken(f"resume after cell {after} ended {back['state']}: {back.get('error')}")
        restore = back.get("restore") or {}
        record.failed = {x["name"]: x.get("reason", "") for x in restore.get("failed", [])}
        record.ambient = restore.get("ambient")
        record.offered = list((restore.get("rebuild") or {}).get("names") or [])
        if record.offered:  # the user accepts the offered rebuild
            record.rebuilt = rebuild_missing(s, sid, record.offered)
        return record

    def _close(self, session: dict) -> None:
        """Stop the run's kernel (a paused session has none)."""
        kid = session.get("kernel_id")
        if kid and session.get("state") in RUNNING:
            self.server.api("DELETE", f"api/kernels/{kid}")

    def _cells(self, kid: str, sources: list[str], masks: Masks, first: int = 0):
        """Run ``sources`` in order in kernel ``kid`` through one client, as a page that stays
        open does; a cell that raises is an output, a cell that does not end breaks the run.

        Each output goes to the cell whose request it answers (its parent header), also when
        it comes after that cell's ``idle``, as a stream flushed late does; a silent empty
        request after the last cell is the barrier behind which every earlier output has come.
        """
        client = self._connect(kid)
        hooks: dict[str, CellOutputs] = {}
        counts: dict[str, int | None] = {}
        order: list[str] = []
        try:
            for i, code in enumerate(sources, start=first):
                msg_id = client.execute(code, allow_stdin=False, stop_on_error=False)
                hooks[msg_id], order = CellOutputs(masks), [*order, msg_id]
                reply = self._until_idle(client, msg_id, hooks, f"cell {i}")
                counts[msg_id] = reply["content"].get("execution_count")
            barrier = client.execute("", silent=True, store_history=False, allow_stdin=False)
            self._until_idle(client, barrier, hooks, "the end of the cells")
        finally:
            client.stop_channels()
        return [CellRun(counts[m], hooks[m].result()) for m in order]

    def _connect(self, kid: str) -> BlockingKernelClient:
        """A client of kernel ``kid`` that the kernel answers and whose IOPub subscription
        is live (so a cell's first output is not lost), through the kernel's connection file.

        Not ``JupyterServer.connect``: its ``wait_for_ready`` sends ``kernel_info`` again and
        again, and once (2-core VM, load 8) a client's shell socket never connected: the sends
        filled the socket's queue and the next one blocked forever. Here a client sends a few,
        and a client that gets no answer is replaced by a new one."""
        for _ in range(CONNECT_TRIES):
            client = BlockingKernelClient(
                connection_file=str(self.server.runtime / f"kernel-{kid}.json")
            )
            client.load_connection_file()
            client.start_channels(hb=False)
            if self._answers(client):
                return client
            client.stop_channels()
        raise _Broken(f"kernel {kid} did not answer {CONNECT_TRIES} clients")

    @staticmethod
    def _answers(client: BlockingKernelClient, tries: int = 10) -> bool:
        """``kernel_info`` answered on the shell channel and its status seen on IOPub."""
        for _ in range(tries):
            msg_id = client.kernel_info()
            try:
                while client.get_shell_msg(timeout=5)["parent_header"].get("msg_id") != msg_id:
                    pass
                while client.get_iopub_msg(timeout=1)["parent_header"].get("msg_id") != msg_id:
                    pass
            except queue.Empty:
                continue  # not up yet, or IOPub not yet subscribed: ask again
            return True
        return False

    def _until_idle(self, client, msg_id: str, hooks: dict, what: str) -> dict:
        """Dispatch IOPub messages to their cells until ``msg_id``'s ``idle``; its reply."""
        end = time.monotonic() + self.cell_timeout
        while True:
            left = end - time.monotonic()
            try:
                if left <= 0:
                    raise queue.Empty
                msg = client.get_iopub_msg(timeout=left)
            except queue.Empty:
                raise _Broken(f"{what} did not end within {self.cell_timeout:g} s") from None
            parent = msg["parent_header"].get("msg_id")
            if parent in hooks:
                hooks[parent](msg)
            if (
                parent == msg_id
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
            ):
                break
        while True:
            reply = client.get_shell_msg(timeout=self.cell_timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    # -- judging -------------------------------------------------------------------------------
    def _compare(self, out: Replay, sources, plain: list[list[CellRun]], resumed) -> None:
        first, ref = out.stops[0], plain[0]
        out.compared, out.unstable, out.divergences = 0, 0, []
        named = {}  # what the checks named before a pause -> the reason given
        counter_named = ""
        for p in out.pauses:
            named.update({k: f"skipped {k}: {v}" for k, v in p.skipped.items()})
            for item in p.not_carried:
                label = _label(item)
                for token in re.findall(r"[A-Za-z_]\w{2,}", label):
                    named.setdefault(token, f"not carried: {label}")
                if re.search(r"execution|counter", label, re.I):
                    counter_named = f"not carried: {label}"
        modules = set().union(*(_imported(src) for src in sources))
        taint = dict(named)  # name -> why a cell using it may differ
        for i in range(first, out.cells):
            used, assigned = _names(sources[i], modules)
            why = next((taint[u] for u in sorted(used) if u in taint), "")
            if why:  # what this cell makes from a named thing is explained by it too
                taint.update({a: why for a in assigned if a not in taint})
            outputs_stable = all(r[i].outputs == ref[i].outputs for r in plain)
            count_stable = all(r[i].n == ref[i].n for r in plain)
            if not outputs_stable:
                out.unstable += 1
            else:
                out.compared += 1
            what = [
                w
                for w in ref[i].differences(resumed[i])
                if (w == "count" and count_stable) or (w == "outputs" and outputs_stable)
            ]
            if not what:
                continue
            reasons = []
            if "outputs" in what:
                reasons.append(why)
            if "count" in what:
                reasons.append(counter_named)
            left, right = first_change(ref[i], resumed[i])
            out.divergences.append(
                Divergence(
                    cell=i,
                    what=what,
                    reference=left,
                    resumed=right,
                    named_by="; ".join(r for r in reasons if r) if all(reasons) else "",
                    source=(sources[i].strip().splitlines() or [""])[0][:80],
                )
            )
        if not out.divergences:
            out.verdict = IDENTICAL
        else:
            out.verdict = DIFFERS if out.silent else NAMED


def _label(item) -> str:
    """An ``ambient.not_carried`` entry as text, whatever its shape (a string or an object)."""
    if isinstance(item, dict):
        keys = ("name", "what", "kind", "key", "names", "reason")
        return " ".join(str(item[k]) for k in keys if k in item) or json.dumps(item)
    return str(item)


def _python(source: str) -> ast.Module | None:
    """The cell as Python, magics and shell escapes turned into calls as IPython does."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return None


def _imported(source: str) -> set[str]:
    tree = _python(source)
    if tree is None:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def _names(source: str, modules: set[str]) -> tuple[set[str], set[str]]:
    """The names a cell reads, and those it binds or changes in place: assigned, defined, or an
    object whose method it calls (``model.fit(X)``), modules aside."""
    tree = _python(source)
    if tree is None:  # not Python: every word may be a name it uses, none it binds
        return set(re.findall(r"[A-Za-z_]\w*", source)), set()
    used, assigned = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (assigned if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            assigned.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            if isinstance(base, ast.Name) and base.id not in modules:
                assigned.add(base.id)
    return used, assigned


# -- reports ---------------------------------------------------------------------------------------
def summary(replays: list[Replay]) -> str:
    """The line a reader quotes."""
    count = {v: sum(r.verdict == v for r in replays) for v in (IDENTICAL, NAMED, DIFFERS, FAILED)}
    same, named, silent, failed = count[IDENTICAL], count[NAMED], count[DIFFERS], count[FAILED]
    return (
        f"{same} of {len(replays)} notebooks continue identically after two pauses; "
        f"{silent} silent divergences ({named} named before the pause, {failed} failed)"
    )


def table(replays: list[Replay], width: int = 110) -> str:
    head = (
        f"{'notebook':<34} {'library':<12} {'compared':>8} {'unstable':>8} {'verdict':<9} "
        "first difference"
    )
    rows = [head, "-" * len(head)]
    for r in replays:
        first = r.first_difference()
        first = first if len(first) <= width else first[: width - 1] + "…"
        rows.append(
            f"{r.notebook.name:<34} {r.notebook.library:<12} {r.compared:>8} {r.unstable:>8} "
            f"{r.verdict:<9} {first}"
        )
    return "\n".join(rows)


def details(replays: list[Replay], per_notebook: int = 3) -> str:
    """Each non-identical notebook's first differing cells, both sides, and what was named."""
    lines = []
    for r in replays:
        refused = sum(len(p.resume_refused) for p in r.pauses)
        if r.verdict == IDENTICAL:
            if refused:
                lines.append(
                    f"{r.notebook.name}: identical; resume refused {refused}x while paused"
                )
            continue
        lines.append(f"{r.notebook.name} ({r.verdict}): {len(r.divergences)} differing cells")
        if r.reason:
            lines.append(f"    {r.reason}")
        for d in r.divergences[:per_notebook]:
            lines.append(f"    cell {d.cell} `{d.source}` [{'+'.join(d.what)}]")
            lines.append(f"      reference: {d.reference}")
            lines.append(f"      resumed:   {d.resumed}")
            if d.named_by:
                lines.append(f"      named:     {d.named_by[:160]}")
        for p in r.pauses:
            said = {
                "skipped": sorted(p.skipped),
                "not carried": [_label(x) for x in p.not_carried],
                "restore failed": sorted(p.failed),
                "rebuilt": p.rebuilt,
                "resume refused while paused": len(p.resume_refused),
                "ambient not restored": [
                    _label(x) for x in (p.ambient or {}).get("not_restored", [])
                ],
            }
            said = {k: v for k, v in said.items() if v}
            if said:
                lines.append(f"    pause after cell {p.after_cell}: {said}")
    return "\n".join(lines)
