"""The event types are one closed list, declared once (``server/state/event_types.py``) and kept
the same in the three places that repeat it for readers who cannot import Python: the event
schema's ``enum``, the Lab's ``EventType`` union, and the table in docs/webhooks.md.

A type added in one place and forgotten in another fails here, naming the place; a type
recorded as a string literal instead of an ``EventType`` fails too, since the bus would refuse
it the day it is misspelt.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from jupyter_events.logger import EventLogger

from jupyter_gpu_pause.server.state.bus import SCHEMA_ID, SCHEMA_PATH, EventBus
from jupyter_gpu_pause.server.state.event_types import EventType
from jupyter_gpu_pause.server.state.model import Session

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "jupyter_gpu_pause" / "server"
TOKENS = ROOT / "labextension" / "src" / "tokens.ts"
DOCS = ROOT / "docs" / "webhooks.md"
OPERATIONS = ("pause", "resume", "cull")  # each has a ``<operation>_failed`` type


def schema_types() -> list[str]:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    return schema["properties"]["type"].get("enum", [])


def lab_types() -> list[str]:
    """The members of ``export type EventType = | 'a' | 'b' …;`` in tokens.ts."""
    found = re.search(r"export type EventType\s*=([^;]*);", TOKENS.read_text())
    assert found, f"{TOKENS.relative_to(ROOT)} has no `export type EventType = …;`"
    return re.findall(r"\|\s*'([a-z_]+)'", found.group(1))


def documented_types() -> list[str]:
    """The backticked names in the first column of the table under "Event types and their
    `detail`" (a row may name two, as "`culled`, `cull_failed`")."""
    text = DOCS.read_text()
    start = text.index("### Event types and their `detail`")
    table = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            table.append(line.split("|")[1])
    assert table[:2] == [" `type` ", "---"], "the table's header changed: update this parse"
    return [name for cell in table[2:] for name in re.findall(r"`([a-z_]+)`", cell)]


def test_every_list_of_types_is_the_same():
    # Given the types as Python declares them, and as each other place lists them
    declared = [str(t) for t in EventType]
    places = {
        "the schema's enum (server/state/events/lifecycle.yaml)": schema_types(),
        "the Lab's EventType (labextension/src/tokens.ts)": lab_types(),
        "the table of docs/webhooks.md": documented_types(),
    }
    # Then each place lists every type once, and no other
    wrong = []
    for place, types in places.items():
        if missing := [t for t in declared if t not in types]:
            wrong.append(f"{place} lacks {missing}")
        if unknown := sorted(set(types) - set(declared)):
            wrong.append(f"{place} has {unknown}, which server/state/event_types.py lacks")
        if twice := sorted({t for t in types if types.count(t) > 1}):
            wrong.append(f"{place} lists {twice} more than once")
    assert wrong == [], "the event types differ:\n" + "\n".join(wrong)


def test_every_operation_has_a_failure_type():
    # Given the operations whose failure is recorded as ``<operation>_failed``
    # Then each is a declared type, and anything else is refused rather than recorded
    assert [EventType.failed(op) for op in OPERATIONS] == [
        EventType.PAUSE_FAILED,
        EventType.RESUME_FAILED,
        EventType.CULL_FAILED,
    ]
    with pytest.raises(ValueError):
        EventType.failed("check")


def _type_argument(call: ast.Call) -> ast.expr | None:
    """The type an event is recorded with: ``record_event(s, TYPE, …)`` or
    ``fail(s, TYPE, …)``."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in ("record_event", "fail"):
        return None
    return call.args[1] if len(call.args) > 1 else None


def _is_declared(node: ast.expr) -> bool:
    """``EventType.NAME`` (a member that exists) or ``EventType.failed(…)``."""
    if isinstance(node, ast.Call):
        node = node.func
        return isinstance(node, ast.Attribute) and node.attr == "failed" and _is_enum(node.value)
    return (
        isinstance(node, ast.Attribute)
        and _is_enum(node.value)
        and node.attr in EventType.__members__
    )


def _is_enum(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "EventType"


def _calls_and_parameters(tree: ast.AST):
    """Every call, with the parameter names of the function it is in (an event type passed
    through, as ``SessionTable.fail`` passes its own on to ``record_event``)."""
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    yield node, params


def test_the_server_records_and_compares_only_declared_types():
    # Given every module of the server
    wrong, recorded = [], set()
    for path in sorted(SERVER.rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(SERVER)
        # Then every event is recorded with an EventType (or a parameter passing one on),
        # never a string
        for call, params in _calls_and_parameters(tree):
            arg = _type_argument(call)
            if arg is None or (rel, call.lineno) in recorded:
                continue
            recorded.add((rel, call.lineno))
            if not (_is_declared(arg) or isinstance(arg, ast.Name) and arg.id in params):
                wrong.append(f"{rel}:{call.lineno} records {ast.unparse(arg)}")
        # And no code compares an event's type with a string literal of one
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            text = ast.unparse(node)
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in set(EventType):
                    if "type" in text or "kind" in text:
                        wrong.append(f"{rel}:{node.lineno} compares with {side.value!r}")
    assert len(recorded) >= 20, "few record_event/fail calls found: is the scan still right?"
    assert wrong == [], "use server/state/event_types.EventType:\n" + "\n".join(wrong)


def _payload(event_type: str) -> tuple[dict, Session]:
    s = Session(path="exp.ipynb", kernel_name="python3", kernel_id="k-1")
    event = {
        "time": "2026-12-02T09:00:00Z",
        "session_id": s.id,
        "type": event_type,
        "reason": "user",
        "detail": {"message": "m"},
    }
    return event, s


def test_the_bus_carries_every_declared_type_and_refuses_any_other(caplog):
    # Given jupyter_events' logger with our schema, a subscriber, and the bus that emits on it
    heard: list[dict] = []

    async def scenario():
        logger = EventLogger()

        async def listener(logger, schema_id, data):
            heard.append(data)

        logger.add_listener(schema_id=SCHEMA_ID, listener=listener)
        bus = EventBus(logger, logging.getLogger("test_event_vocabulary"))
        # When an event of every declared type is recorded, then one of an unknown type
        for t in EventType:
            bus(*_payload(t))
        bus(*_payload("exploded"))  # never raises into the operation that recorded it
        await asyncio.sleep(0.05)  # the listeners run as tasks of their own
        return logger

    with caplog.at_level(logging.ERROR, logger="test_event_vocabulary"):
        logger = asyncio.run(scenario())

    # Then the subscriber heard every declared type, each as a plain str, valid by the schema
    assert [e["type"] for e in heard] == [str(t) for t in EventType]
    assert {type(e["type"]) for e in heard} == {str}
    for e in heard:
        logger.schemas.validate_event(SCHEMA_ID, e)
    # And the unknown type was refused by the schema's enum, and logged, not heard
    with pytest.raises(jsonschema.ValidationError):
        logger.schemas.validate_event(SCHEMA_ID, {**heard[0], "type": "exploded"})
    assert ["exploded" in r.getMessage() for r in caplog.records] == [True]
