"""The server's rooms stay as ``jupyter_gpu_pause/server/__init__.py`` draws them: every module in
a room, each room importing only the rooms below it, none grown past what one person can read.

A maintainer changing the resume path reads ``lifecycle/`` and what it may import, nothing else;
these checks fail the build the day an import runs back up (say, the lifecycle importing
telemetry instead of telemetry listening to its events).
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
# modules that stay at the top: the wiring, and re-exports of moved public names (one release)
TOP = {"__init__.py", "app.py"}
SHIMS = {"bus.py": "state.bus", "probes.py": "capacity.probes"}
ROOM_LINES = 2500


def _modules():
    return sorted(p for p in SERVER.rglob("*.py") if "__pycache__" not in p.parts)


def _room(path: Path) -> str | None:
    rel = path.relative_to(SERVER)
    return rel.parts[0] if len(rel.parts) > 1 else None


def _imported_rooms(path: Path) -> set[tuple[str, int]]:
    """(room, line) for every import of another module of ``server/`` in ``path``."""
    package = ["jupyter_gpu_pause", "server", *path.relative_to(SERVER).parts[:-1]]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[list[str]] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                names.append(base + (node.module.split(".") if node.module else []))
            elif node.module:
                names.append(node.module.split("."))
        elif isinstance(node, ast.Import):
            names.extend(a.name.split(".") for a in node.names)
        for name in names:
            if name[:2] == ["jupyter_gpu_pause", "server"] and len(name) > 2:
                out.add((name[2], node.lineno))
    return out


def test_every_module_lives_in_a_room():
    loose = [
        p.name for p in _modules() if _room(p) is None and p.name not in TOP and p.name not in SHIMS
    ]
    assert loose == [], f"put these in a room of server/ (see its __init__): {loose}"
    for room in ALLOWED:
        init = SERVER / room / "__init__.py"
        assert init.is_file(), f"server/{room}/ has no __init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Imports" in doc, f"server/{room}/__init__.py does not say what it may import"
    rooms = {p.name for p in SERVER.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(ALLOWED), "a room was added or removed: update ALLOWED and the table"


def test_shims_only_re_export_their_new_module():
    for name, target in SHIMS.items():
        tree = ast.parse((SERVER / name).read_text())
        body = [n for n in tree.body if not isinstance(n, ast.Expr)]  # the docstring
        assert body and all(
            isinstance(n, ast.ImportFrom) and n.level == 1 and n.module == target for n in body
        ), f"server/{name} should only re-export .{target}"


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_a_room_imports_only_the_rooms_below_it(room):
    wrong = []
    for path in sorted((SERVER / room).rglob("*.py")):
        for other, line in sorted(_imported_rooms(path)):
            if other != room and other not in ALLOWED[room]:
                wrong.append(f"{path.relative_to(SERVER)}:{line} imports {other}")
    assert wrong == [], f"{room} may import only {sorted(ALLOWED[room])}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_a_room_stays_readable(room):
    lines = sum(len(p.read_text().splitlines()) for p in (SERVER / room).rglob("*.py"))
    assert lines <= ROOM_LINES, f"server/{room}/ has {lines} lines: split it into two rooms"


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
    "monitor.monitor.Monitor": "Lifecycle",
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
