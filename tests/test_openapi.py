"""The REST API's OpenAPI document (``server/web/api.yaml``) against what it describes: a valid
OpenAPI 3.1 document, served as it is, with one path per route and the same verbs, the closed
vocabularies of the code, and the client's types. The answers themselves are checked against it
in every test that makes a REST call (tests/openapi.py)."""

from __future__ import annotations

import json
import re
import typing

import pytest
import yaml
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from jupyter_gpu_pause.client import types
from jupyter_gpu_pause.server.budgets.periods import PERIODS
from jupyter_gpu_pause.server.state.event_types import EventType
from jupyter_gpu_pause.server.state.model import STATES
from jupyter_gpu_pause.server.web.handlers import SID, UnknownHandler
from jupyter_gpu_pause.server.web.routes import handlers
from tests.openapi import PREFIX, SPEC_PATH, SpecMismatch, check, document

VERBS = ("get", "post", "put", "patch", "delete")


def schema(name: str) -> dict:
    return document()["components"]["schemas"][name]


def test_the_document_is_valid_openapi_3_1():
    # Given the document as the package ships it
    doc = document()
    # Then it is OpenAPI 3.1 and valid as such
    assert doc["openapi"].startswith("3.1.")
    validate(doc, cls=OpenAPIV31SpecValidator)


def _routes() -> dict[str, set[str]]:
    """``{path in the document's form: verbs}`` of every route, from the handlers' regexes."""
    out = {}
    for pattern, cls in handlers():
        if cls is UnknownHandler:
            continue
        path = pattern.removeprefix(PREFIX).replace(SID, "{session_id}")
        assert re.fullmatch(r"[\w/{}.-]+", path), f"a route the document cannot name: {pattern}"
        out[path] = {m for m in VERBS if m in vars(cls)}
    return out


def test_every_route_has_a_path_and_every_path_a_route():
    # Given the routes the server registers and the paths the document describes
    routes = _routes()
    paths = {p: {m for m in VERBS if m in item} for p, item in document()["paths"].items()}
    # Then they are the same, verb for verb
    assert sorted(routes) == sorted(paths)
    assert routes == paths


def test_the_catch_all_answers_are_described():
    # Given the catch-all route, which answers every other path under the prefix
    (catch_all,) = [p for p, cls in handlers() if cls is UnknownHandler]
    assert catch_all.startswith(PREFIX)
    # Then the document describes its 404 and the 405 of a verb a route lacks
    responses = document()["components"]["responses"]
    assert {"UnknownEndpoint", "MethodNotAllowed"} <= set(responses)


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("GET", "/gpu-pause/api/capacity", 200, b'{"provider": "unlimited"}'),
        ("GET", "/gpu-pause/api/no/such/endpoint", 200, b"{}"),
        ("GET", "/gpu-pause/api/no/such/endpoint", 404, b'{"message": "no"}'),
        ("PUT", "/gpu-pause/api/capacity", 200, b"{}"),
        ("GET", "/gpu-pause/api/capacity", 418, b'{"message": "m", "reason": "r"}'),
    ],
    ids=["missing fields", "unknown path 200", "404 not an Error", "unknown verb", "status"],
)
def test_an_answer_the_document_does_not_describe_fails(method, path, status, body):
    # When an answer the document does not describe is checked
    with pytest.raises(SpecMismatch) as e:
        check(method, f"http://127.0.0.1:1/base/{path.lstrip('/')}", status, body)
    # Then the failure names the request and the status
    assert f"{method} {path} answered {status}" in str(e.value)


def test_a_field_the_session_schema_lacks_fails():
    # Given a Session as the server builds it, with one field more
    session = {name: None for name in schema("Session")["properties"]}
    session.update(
        id="s",
        path="nb.ipynb",
        type="notebook",
        kernel_name="python3",
        state="idle",
        gpu_session=False,
        accounting={
            "gpu_seconds_held": 0,
            "gpu_seconds_idle": 0,
            "gpu_seconds_reclaimed": 0,
            "gpu_seconds_unpausable": 0,
        },
    )
    check("GET", "/gpu-pause/api/sessions/s", 200, json.dumps(session))
    session["pausable_since"] = None
    # Then it does not pass, and the message says which field
    with pytest.raises(SpecMismatch, match="'pausable_since' was unexpected"):
        check("GET", "/gpu-pause/api/sessions/s", 200, json.dumps(session))


def test_the_session_states_are_the_models():
    assert schema("SessionState")["enum"] == list(STATES)
    assert list(typing.get_args(types.SessionState)) == list(STATES)


def test_the_event_types_are_the_declared_ones():
    assert schema("EventType")["enum"] == [t.value for t in EventType]


def test_the_budget_periods_are_the_ones_a_rule_may_name():
    assert sorted(schema("Budget")["properties"]["period"]["enum"]) == sorted(PERIODS)


# TypedDict of the client -> the schema it mirrors
CLIENT_TYPES = {
    types.Session: "Session",
    types.GpuUsage: "GpuUsage",
    types.CheckpointBrief: "CheckpointBrief",
    types.Progress: "Progress",
    types.Waiting: "Waiting",
    types.Suspension: "Suspension",
    types.SessionError: "SessionError",
    types.RefusedCheckpoint: "RefusedCheckpoint",
    types.RestoreReport: "RestoreReport",
    types.Fallback: "Fallback",
    types.RebuildPlan: "RebuildPlan",
    types.AmbientRestore: "AmbientRestore",
    types.LastOperation: "LastOperation",
    types.SessionAccounting: "SessionAccounting",
    types.Pausable: "Pausable",
    types.NameReason: "NameReason",
    types.Checkpoint: "Checkpoint",
    types.Event: "Event",
    types.Error: "Error",
    types.Budget: "Budget",
    types.Budgets: "Budgets",
}


@pytest.mark.parametrize("typed", list(CLIENT_TYPES), ids=lambda t: t.__name__)
def test_the_client_types_are_the_schemas(typed):
    # Given a TypedDict of the client and the schema it mirrors
    spec = schema(CLIENT_TYPES[typed])
    # Then they have the same fields
    assert set(typed.__annotations__) == set(spec["properties"]), CLIENT_TYPES[typed]
    # And a field the type promises always is one the schema requires
    assert typed.__required_keys__ <= set(spec.get("required", ())), CLIENT_TYPES[typed]


def test_the_rebuild_cell_type_is_the_schemas():
    cells = schema("RebuildPlan")["properties"]["cells"]["items"]
    assert set(types.RebuildCell.__annotations__) == set(cells["properties"])
    objects = schema("Checkpoint")["properties"]["objects"]["items"]
    assert set(types.CheckpointObject.__annotations__) == set(objects["properties"])


async def test_the_document_is_served(lab, jp_fetch):
    # When a client asks for the document, with its token
    r = await lab.fetch("gpu-pause", "api", "spec.yaml")
    # Then it gets the file the package ships, as YAML
    assert r.code == 200
    assert r.headers["Content-Type"].startswith("application/yaml")
    assert r.body == SPEC_PATH.read_bytes()


async def test_the_document_needs_a_token(lab, jp_fetch):
    # When a client without a token asks for the document
    r = await jp_fetch(
        "gpu-pause",
        "api",
        "spec.yaml",
        headers={"Authorization": "token not-the-token"},
        raise_error=False,
    )
    # Then it is refused, in JSON, as every route under the prefix refuses
    assert r.code == 403
    assert set(yaml.safe_load(r.body)) == {"message", "reason"}
