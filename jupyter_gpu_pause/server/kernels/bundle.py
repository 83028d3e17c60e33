"""The agent as the server brings it into a kernel whose environment lacks it.

The bundle is this installation's kernel side, read from its own files: the package's top
modules, ``kernel/`` and ``store/`` (never the server, the CLI or the client), and the
pure-Python libraries they need that a kernel's environment may lack (cloudpickle), placed
under ``jupyter_gpu_pause._brought`` (``kernel/deps.py``). It carries, as ``_brought.AMBIENT``,
the ambient providers this package declares as entry points: a brought agent is not an
installed distribution, so its own entry points are not in the kernel's metadata.

What the kernel cannot be given this way (compiled libraries: xxhash, fsspec's remote file
systems) it does without: its blobs go through the server (``spool.py``).

Built once per server process: ~0.2 MB compressed, sent once per kernel.
"""

from __future__ import annotations

import base64
import functools
import importlib
import importlib.util
import json
import marshal
import zlib
from importlib.metadata import entry_points
from pathlib import Path

from ...kernel import bootstrap
from ...kernel.ambient import GROUP
from ...kernel.deps import BROUGHT

PACKAGE = __name__.partition(".")[0]  # jupyter_gpu_pause
PARTS = ("kernel", "store")  # the subpackages a kernel runs
TOP = ("__init__", "version", "_version", "units")  # the package's modules a kernel imports
SKIP = {f"{PACKAGE}.kernel.bootstrap"}  # sent apart, as the code that installs the rest
LIBRARIES = ("cloudpickle",)  # pure Python, needed by the agent, maybe absent in a kernel


def _modules(folder: Path, prefix: str) -> dict[str, list]:
    """Every ``.py`` file under ``folder`` as ``{module name: [is_package, source]}``."""
    out: dict[str, list] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        name = ".".join([prefix, *parts])
        if name not in SKIP:
            out[name] = [package, path.read_text(encoding="utf-8")]
    return out


def _own_providers() -> list[tuple[str, str]]:
    """This package's ambient providers (entry point name, ``module:attr``)."""
    return sorted(
        (ep.name, ep.value)
        for ep in entry_points(group=GROUP)
        if ep.value.startswith(f"{PACKAGE}.")
    )


def files() -> dict[str, list]:
    """The bundle's modules: ``{module name: [is_package, source]}``."""
    root = Path(importlib.import_module(PACKAGE).__file__ or "").parent
    out: dict[str, list] = {}
    for name in TOP:
        path = root / f"{name}.py"
        if path.exists():
            key = PACKAGE if name == "__init__" else f"{PACKAGE}.{name}"
            out[key] = [name == "__init__", path.read_text(encoding="utf-8")]
    for part in PARTS:
        out.update(_modules(root / part, f"{PACKAGE}.{part}"))
    brought = BROUGHT.rpartition(".")[0]  # jupyter_gpu_pause._brought
    out[brought] = [
        True,
        '"""Libraries the server brought with the agent; private to this kernel."""\n'
        f"AMBIENT = {_own_providers()!r}\n",
    ]
    for lib in LIBRARIES:
        folder = Path(importlib.import_module(lib).__file__ or "").parent
        out.update(_modules(folder, f"{brought}.{lib}"))
    return out


MAGIC = importlib.util.MAGIC_NUMBER.hex()  # the server's bytecode version


@functools.cache
def bundle() -> str:
    """The bundle as it rides in the bring request: base64 of zlib of its JSON."""
    raw = json.dumps(files(), separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


@functools.cache
def compiled() -> str:
    """The bundle compiled by this Python, for a kernel whose Python has its bytecode version
    (``MAGIC``): base64 of zlib of marshal. A kernel then runs the code without compiling ~50
    modules' source (~60 ms on each resume of a brought kernel)."""
    code = {
        name: [package, None, compile(source, f"<jupyter_gpu_pause>/{name}", "exec")]
        for name, (package, source) in files().items()
    }
    return base64.b64encode(zlib.compress(marshal.dumps(code), 6)).decode("ascii")


@functools.cache
def boot() -> str:
    """The bootstrap's text (``kernel/bootstrap.py``), which installs the bundle."""
    return Path(bootstrap.__file__ or "").read_text(encoding="utf-8")
