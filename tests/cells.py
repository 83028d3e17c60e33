"""What a cell printed, collected from a kernel client's IOPub messages; shared by the tests that
run cells through pytest-jupyter's server and through a separate ``jupyter server`` process."""

from __future__ import annotations


class CellOutput:
    """An ``output_hook`` for ``execute_interactive`` that keeps stdout and tracebacks."""

    def __init__(self):
        self.out: list[str] = []
        self.err: list[str] = []

    def __call__(self, msg: dict) -> None:
        if msg["msg_type"] == "stream":
            self.out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            self.err.append("\n".join(msg["content"]["traceback"]))

    def result(self, reply: dict) -> str:
        """The cell's stdout; AssertionError with the traceback when the cell failed."""
        if reply["content"]["status"] != "ok":
            raise AssertionError(f"cell failed: {''.join(self.err)}")
        return "".join(self.out)
