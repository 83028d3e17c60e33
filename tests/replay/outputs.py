"""What a cell showed, reduced to what a reader of the notebook sees, so that two runs compare.

A cell's IOPub messages become a list of outputs, as a notebook stores them (consecutive stream
texts joined, ``clear_output`` honoured), and each output keeps only what a person reads: the
text of streams, ``text/plain``, ``text/latex`` and ``text/html`` of results and displays, an
error's name and message (not its traceback: that names temporary files), and an image's pixel
size rather than its bytes (a PNG's bytes change with the font cache and the backend's version;
its size changes with ``figure.figsize`` and ``figure.dpi``, which is what a pause can lose).

Masked in every text, because they differ between two plain runs for reasons no pause causes:
memory addresses, clock times and today's date, durations (``%time``, fit logs), the number of
loops ``%timeit`` chose (it picks as many as fill 0.2 s: a busier machine picks fewer), the run's
own folder, and the element ids scikit-learn's HTML repr numbers from a process-wide counter (an
id in a page's markup, never shown to the reader).
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
from dataclasses import dataclass, field

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_DURATION = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?(?:e-?\d+)?\s?(?:ns|µs|μs|us|ms|s|sec|secs|seconds|min)\b"
)
_TIMEIT_LOOPS = re.compile(r"\b\d[\d,]* loops? each\b")
_SK_IDS = re.compile(r"\bsk-(?:container|estimator)-id-\d+")
_TEXT_KINDS = ("text/plain", "text/latex", "text/html", "text/markdown")
_SHOWN_FIRST = {"text/plain": 0, "text/latex": 1, "text/html": 2, "image/png": 3}


def _today_patterns() -> re.Pattern:
    """Today's date as statsmodels' summaries and ``Timestamp.now()`` print it (a run may
    cross midnight: yesterday's as well)."""
    days = [_dt.date.today() - _dt.timedelta(days=d) for d in (0, 1)]
    forms = {d.strftime(f) for d in days for f in ("%a, %d %b %Y", "%Y-%m-%d", "%d %b %Y")}
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))


@dataclass
class Masks:
    """The masks of one run: ``folders`` are paths that name where the run happened."""

    folders: tuple[str, ...] = ()
    today: re.Pattern = field(default_factory=_today_patterns)

    def __call__(self, text: str) -> str:
        for folder in self.folders:
            text = text.replace(folder, "<folder>")
        text = _ADDRESS.sub("0x…", text)
        text = self.today.sub("<date>", text)
        text = _CLOCK.sub("<time>", text)
        text = _DURATION.sub("<duration>", text)
        text = _TIMEIT_LOOPS.sub("<n> loops each", text)
        return _SK_IDS.sub("sk-id", text)


def png_size(data: str) -> str:
    """``"640x480"``: a base64 PNG's pixel size, from its IHDR chunk."""
    head = base64.b64decode(data[:44])
    if head[:8] != b"\x89PNG\r\n\x1a\n" or len(head) < 24:
        return "png(unreadable)"
    return f"{int.from_bytes(head[16:20], 'big')}x{int.from_bytes(head[20:24], 'big')}"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _bundle(data: dict, mask: Masks) -> dict:
    """A mime bundle as compared: texts masked, PNGs by pixel size, other kinds by name."""
    out = {}
    for kind, value in sorted(data.items()):
        if kind in _TEXT_KINDS:
            out[kind] = mask(_text(value))
        elif kind == "image/png":
            out[kind] = png_size(_text(value))
        else:  # jpeg, svg, json, widget views: present, content not compared
            out[kind] = "…"
    return out


class CellOutputs:
    """An ``output_hook`` for ``execute_interactive`` collecting one cell's outputs as a
    notebook keeps them, already masked."""

    def __init__(self, mask: Masks):
        self.mask = mask
        self.outputs: list[dict] = []
        self._clear_on_next = False

    def __call__(self, msg: dict) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "clear_output":
            if content.get("wait"):
                self._clear_on_next = True
            else:
                self.outputs.clear()
            return
        if kind not in ("stream", "execute_result", "display_data", "error"):
            return  # status, execute_input, update_display_data, comm traffic
        if self._clear_on_next:
            self.outputs.clear()
            self._clear_on_next = False
        if kind == "stream":
            last = self.outputs[-1] if self.outputs else None
            if last and last.get("stream") == content["name"]:
                last["raw"] += content["text"]
            else:
                self.outputs.append({"stream": content["name"], "raw": content["text"]})
        elif kind == "error":
            self.outputs.append(
                {"error": content["ename"], "evalue": self.mask(content.get("evalue", ""))}
            )
        else:
            self.outputs.append({kind: _bundle(content.get("data", {}), self.mask)})

    def result(self) -> list[dict]:
        """The outputs, streams masked once whole (a time may straddle two messages)."""
        done = []
        for o in self.outputs:
            if "raw" in o:
                o = {"stream": o["stream"], "text": self.mask(o["raw"])}
            done.append(o)
        return done


@dataclass
class CellRun:
    """One cell as a run executed it: the execution count its reply gave, and its outputs.
    ``n`` is None when the cell did not run (the run stopped before it)."""

    n: int | None
    outputs: list[dict]

    def differences(self, other: CellRun) -> list[str]:
        """What differs from ``other``: ``"count"`` and/or ``"outputs"``."""
        what = []
        if self.n != other.n:
            what.append("count")
        if self.outputs != other.outputs:
            what.append("outputs")
        return what

    def show(self, limit: int = 160) -> str:
        """A short form for a table: the count and the first differing-looking outputs."""
        parts = []
        for o in self.outputs:
            if "stream" in o:
                parts.append(o["text"])
            elif "error" in o:
                parts.append(f"{o['error']}: {o['evalue']}")
            else:
                (kind, bundle), *_ = o.items()
                parts.append(
                    bundle.get("text/plain")
                    or bundle.get("image/png")
                    or next(iter(bundle.values()), kind)
                )
        text = " | ".join(p.strip() for p in parts).replace("\n", "⏎")
        text = text if len(text) <= limit else text[: limit - 1] + "…"
        return f"[{self.n}] {text}"


def first_change(a: CellRun, b: CellRun, width: int = 160) -> tuple[str, str]:
    """Both cells' outputs from their first differing output on, shortened, for a report."""
    if a.outputs == b.outputs:
        return f"[{a.n}]", f"[{b.n}]"
    i = next(
        (k for k, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=False)) if x != y),
        min(len(a.outputs), len(b.outputs)),
    )
    left = CellRun(a.n, a.outputs[i:])
    right = CellRun(b.n, b.outputs[i:])
    if i < len(a.outputs) and i < len(b.outputs):
        x, y = a.outputs[i], b.outputs[i]
        if "stream" in x and "stream" in y:  # long texts: from the first differing line on
            xl, yl = x["text"].splitlines(), y["text"].splitlines()
            pairs = enumerate(zip(xl, yl, strict=False))
            j = next((k for k, (p, q) in pairs if p != q), min(len(xl), len(yl)))
            left = CellRun(a.n, [{**x, "text": "\n".join(xl[j:])}])
            right = CellRun(b.n, [{**y, "text": "\n".join(yl[j:])}])
        elif x.keys() == y.keys() and all(isinstance(v, dict) for v in (*x.values(), *y.values())):
            (bx,), (by,) = x.values(), y.values()  # one result or display each: which kind
            kinds = sorted(set(bx) | set(by), key=lambda k: (_SHOWN_FIRST.get(k, 9), k))
            kind = next(k for k in kinds if bx.get(k) != by.get(k))
            return (
                _short(f"[{a.n}] {kind}: {bx.get(kind, '(none)')}", width),
                _short(f"[{b.n}] {kind}: {by.get(kind, '(none)')}", width),
            )
    return left.show(width), right.show(width)


def _short(text: str, width: int) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= width else text[: width - 1] + "…"
