"""What a command prints: tables on a wide terminal, plain tab-separated lines otherwise (a
pipe, a narrow terminal), and with ``--json`` exactly one JSON document on stdout.

Errors and notes go to stderr, so stdout stays parseable whatever happens.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

WIDE = 80  # columns from which a terminal gets tables


class Output:
    def __init__(self, as_json: bool = False, stream=None, err=None):
        self.json = as_json
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.console = Console(file=self.stream, highlight=False, emoji=False)
        self.tty = self.console.is_terminal
        self.rich = self.tty and self.console.width >= WIDE and not as_json

    # -- data -----------------------------------------------------------------------------
    def document(self, obj) -> None:
        """The command's whole answer, as one JSON document (``--json``)."""
        self.stream.write(json.dumps(obj, indent=2) + "\n")
        self.stream.flush()

    def record(self, obj) -> None:
        """One JSON document on one line (``events --follow --json``: JSON Lines)."""
        self.stream.write(json.dumps(obj) + "\n")
        self.stream.flush()

    # -- text -----------------------------------------------------------------------------
    def line(self, text: str = "") -> None:
        if self.rich:
            self.console.print(Text(text), soft_wrap=True)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def table(self, columns: list[str], rows: list[list], title: str | None = None) -> None:
        """A table on a wide terminal; else one tab-separated line per row (with a header
        line only on a terminal: a pipe gets just the rows)."""
        cells = [["" if c is None else str(c) for c in row] for row in rows]
        if self.rich:
            t = Table(title=title, title_justify="left", header_style="bold", box=None)
            for c in columns:
                t.add_column(c, overflow="fold")
            for row in cells:
                t.add_row(*(Text(c) for c in row))
            self.console.print(t)
            return
        if title and self.tty:
            self.line(title)
        if self.tty:
            self.line("\t".join(columns))
        for row in cells:
            self.line("\t".join(row))

    def fields(self, pairs: list[tuple[str, object]]) -> None:
        """``key: value`` lines (``show``), values that do not apply left out."""
        shown = [(k, v) for k, v in pairs if v not in (None, "", [], {})]
        width = max((len(k) for k, _ in shown), default=0)
        for k, v in shown:
            self.line(f"{k + ':':<{width + 1}} {v}")

    # -- stderr ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.err.write(f"jupyter gpu-pause: {text}\n")
        self.err.flush()

    def error(self, text: str, details: list[str] | None = None) -> None:
        self.err.write(f"jupyter gpu-pause: error: {text}\n")
        for d in details or []:
            self.err.write(f"  {d}\n")
        self.err.flush()
