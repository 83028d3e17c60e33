"""The server's rooms stay as ``jupyter_gpu_pause/server/__init__.py`` draws them: every module in
a room, each room importing only the rooms below it; and no module of the package imports
itself back through others.

A maintainer changing the resume path reads ``lifecycle/`` and what it may import, nothing else;
these checks fail the build the day an import runs back up (say, the lifecycle importing
telemetry instead of telemetry listening to its events). Rooms are cut by what they are, not by
their length. An import under ``if TYPE_CHECKING:`` names a type for the checker and runs
nothing: a handler may name the service it calls that way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parent.parent / "jupyter_gpu_pause" / "server"

# room -> the rooms it may import (the table in server/__init__.py)
ALLOWED = {
    "config": set(),
    "state": {"config"},
    "capacity": {"config", "state"},
    "kernels": {"config", "state", "capacity"},
    "suspend": {"config", "state", "capacity"},
    "lifecycle": {"config", "state", "capacity", "kernels", "suspend"},
    "monitor": {"config", "state", "capacity", "kernels", "lifecycle", "suspend"},
    "telemetry": {"config", "state"},
    "budgets": {"config", "state"},
    "integrations": {
        "config",
        "state",
        "capacity",
        "kernels",
        "suspend",
        "lifecycle",
        "telemetry",
    },  # fmt: skip
    "web": {"config", "state"},
}
PACKAGE = SERVER.parent
# modules that stay at the top: the wiring
TOP = {"__init__.py", "app.py"}


def _modules():
    return sorted(p for p in SERVER.rglob("*.py") if "__pycache__" not in p.parts)


def _room(path: Path) -> str | None:
    rel = path.relative_to(SERVER)
    return rel.parts[0] if len(rel.parts) > 1 else None


def _for_the_checker(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``: imports that never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _imports(path: Path) -> list[tuple[list[str], list[str], int]]:
    """(module, names imported from it, line) for every import in ``path`` that runs, at
    module level or in a function; relative imports made absolute."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = list(rel if path.name == "__init__.py" else rel[:-1])
    if path.name == "__init__.py":
        package = package[:-1]
    tree = ast.parse(path.read_text())
    skip = _for_the_checker(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = (node.module or "").split(".")
            out.append((module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((a.name.split("."), [], node.lineno) for a in node.names)
    return out


def _imported_rooms(path: Path) -> set[tuple[str, int]]:
    """(room, line) for every import of another module of ``server/`` in ``path``."""
    return {
        (module[2], line)
        for module, _, line in _imports(path)
        if module[:2] == ["jupyter_gpu_pause", "server"] and len(module) > 2
    }


def test_every_module_lives_in_a_room():
    loose = [p.name for p in _modules() if _room(p) is None and p.name not in TOP]
    assert loose == [], f"put these in a room of server/ (see its __init__): {loose}"
    for room in ALLOWED:
        init = SERVER / room / "__init__.py"
        assert init.is_file(), f"server/{room}/ has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Imports" in doc, f"server/{room}/__init__.py does not say what it may import"
    rooms = {p.name for p in SERVER.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(ALLOWED), "a room was added or removed: update ALLOWED and the table"


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_a_room_imports_only_the_rooms_below_it(room):
    wrong = []
    for path in sorted((SERVER / room).rglob("*.py")):
        for other, line in sorted(_imported_rooms(path)):
            if other != room and other not in ALLOWED[room]:
                wrong.append(f"{path.relative_to(SERVER)}:{line} imports {other}")
    assert wrong == [], f"{room} may import only {sorted(ALLOWED[room])}:\n" + "\n".join(wrong)


def _module_graph() -> dict[str, set[str]]:
    """Every module of the package → the modules of the package it imports."""
    modules = {}
    for p in PACKAGE.rglob("*.py"):
        if "__pycache__" in p.parts or "labextension" in p.parts:
            continue
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module, names, _ in _imports(path):
            # ``from pkg import sub`` imports the module ``pkg.sub``; any other name, ``pkg``
            target = ".".join(module)
            subs = {f"{target}.{n}" for n in names} & modules.keys()
            wanted = subs if subs and len(subs) == len(names) else subs | {target}
            deps |= {m for m in wanted if m in modules and m != name}
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    graph = _module_graph()
    circles = _circles(graph)
    shown = [
        " → ".join(g) + "\n    " + "; ".join(f"{v} imports {sorted(graph[v] & set(g))}" for v in g)
        for g in circles
    ]
    assert circles == [], "import circles (move what they share into a module below):\n" + (
        "\n".join(shown)
    )


def test_the_circle_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# -- who may write a session's state -------------------------------------------------------------
# The operation in flight writes its session's states (Pause, Resume); the session table writes
# what happens outside an operation (a kernel gone, a restart) and every failure (``fail``).
STATE_WRITERS = {
    "lifecycle/pause.py",
    "lifecycle/resume.py",
    "lifecycle/inplace.py",
    "lifecycle/sessions.py",
    "suspend/session.py",  # the suspension's part of a pause and of a resume in place
}


def _state_writes(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            flat = target.elts if isinstance(target, ast.Tuple) else [target]
            if any(isinstance(t, ast.Attribute) and t.attr in ("state", "error") for t in flat):
                lines.append(node.lineno)
    return lines


def test_only_the_operations_and_the_session_table_write_a_state():
    wrong = [
        f"{rel}:{line}"
        for p in _modules()
        if (rel := str(p.relative_to(SERVER))) not in STATE_WRITERS
        for line in _state_writes(p)
    ]
    assert wrong == [], "a session's state or error written outside its owners:\n" + "\n".join(
        wrong
    )


def test_a_failure_is_told_one_way():
    """``SessionTable.fail`` (with ``errors.session_error``) is the only place that builds a
    session's error: each failure persists once and records its event with the same reason."""
    builders = [
        str(p.relative_to(SERVER))
        for p in _modules()
        if '"state_intact"' in p.read_text() and p.relative_to(SERVER) != Path("state/errors.py")
    ]
    assert builders == []


# -- what an operation may reach -------------------------------------------------------------------
OPERATIONS = {
    "lifecycle.pause.Pause": "PauseContext",
    "lifecycle.resume.Resume": "ResumeContext",
    "lifecycle.check.DryRun": "CheckContext",
    "lifecycle.recovery.Recovery": "RecoveryContext",
    "integrations.maintenance.StoreMaintenance": "UpkeepContext | None",
    "integrations.shutdown.EmergencyCheckpoint": "Lifecycle",
    "integrations.hub.StopWhenPaused": "Lifecycle",
    "monitor.monitor.Monitor": "Governed",  # monitor/governed.py: what it may use
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_an_operation_reaches_the_lifecycle_through_a_typed_handle(name):
    """Each operation names what it may use: a context built once (lifecycle/context.py), or
    for the services above the lifecycle, the Lifecycle itself, typed."""
    import importlib
    import inspect

    module, cls = name.rsplit(".", 1)
    init = getattr(importlib.import_module(f"jupyter_gpu_pause.server.{module}"), cls).__init__
    params = [p for p in inspect.signature(init).parameters.values() if p.name != "self"]
    assert params[0].annotation == OPERATIONS[name], f"{name}: {params[0]}"


# -- the public client stands alone ----------------------------------------------------------------
CLIENT = SERVER.parent / "client"


def test_the_client_imports_neither_the_server_nor_tornado():
    """A scheduler or a notebook uses ``jupyter_gpu_pause.client`` without the server's rooms,
    Tornado or jupyter_server; the CLI may import the server, never the other way round."""
    wrong = []
    for path in sorted(CLIENT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ("tornado", "jupyter_server") or "server" in name.split(
                    "."
                ):
                    wrong.append(f"client/{path.name}:{node.lineno} imports {name}")
    assert wrong == []
    assert (SERVER.parent / "py.typed").is_file(), "the package ships py.typed"


def _state_words(path: Path) -> list[int]:
    """Lines comparing or setting a session's state with a bare string, not ``SessionState``."""
    words = {"active", "idle", "pausing", "suspended", "paused", "waiting", "restoring", "failed"}

    def word(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return n.value in words
        return isinstance(n, ast.Tuple | ast.List | ast.Set) and any(word(e) for e in n.elts)

    def is_state(n: ast.AST) -> bool:
        return (isinstance(n, ast.Attribute) and n.attr == "state") or (
            isinstance(n, ast.Name) and n.id == "state"
        )

    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and is_state(node.left):
            if any(word(c) for c in node.comparators):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(is_state(t) for t in node.targets):
            if word(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == "state" and word(node.value):
            lines.append(node.value.lineno)
    return lines


def test_session_states_are_named_by_their_enum():
    """``SessionState`` is the one vocabulary: a misspelt word fails where it is written."""
    wrong = [f"{p.relative_to(SERVER)}:{n}" for p in _modules() for n in _state_words(p)]
    assert wrong == [], "use SessionState members, not bare strings:\n" + "\n".join(wrong)


KERNEL_SIDE = [
    *sorted((SERVER.parent / "kernel").rglob("*.py")),
    *sorted((SERVER.parent / "store").rglob("*.py")),
]


def _runtime_unions(tree: ast.AST) -> list[int]:
    """Lines where ``X | Y`` of types is evaluated: an isinstance/issubclass's second argument
    (annotations are never evaluated: every module has ``from __future__ import annotations``)."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
            and any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr)
                for n in ast.walk(node.args[1])
            )
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", KERNEL_SIDE, ids=lambda p: str(p.relative_to(SERVER.parent)))
def test_the_kernel_side_runs_on_python_39(path):
    # The server brings kernel/ and store/ into kernels of Python 3.9 (server/kernels/bundle.py):
    # 3.10's ``isinstance(x, A | B)`` raises TypeError there. (``make lint`` runs vermin for the
    # library; this is what it cannot see.)
    tree = ast.parse(path.read_text())
    assert _runtime_unions(tree) == [], f"{path}: use a tuple of types"
    annotated = any(
        isinstance(n, ast.AnnAssign)
        or (isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.returns is not None)
        or (isinstance(n, ast.arg) and n.annotation is not None)
        for n in ast.walk(tree)
    )
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)
    assert future or not annotated, (
        f"{path}: needs 'from __future__ import annotations' (3.9 evaluates annotations)"
    )
