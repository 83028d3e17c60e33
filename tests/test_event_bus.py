"""Every lifecycle event on jupyter_server's event bus: what another extension (a listener on
``serverapp.event_logger``) and the Lab panel (the ``/api/events/subscribe`` websocket) get."""

from __future__ import annotations

import asyncio
import json
from importlib.resources import files

import jsonschema
import yaml

from jupyter_gpu_pause.server.state.bus import SCHEMA_ID
from tests.waiting import wait_for

FIELDS = {"time", "session_id", "type", "reason", "detail", "path", "state", "kernel_id"}


def shipped_schema() -> dict:
    """The schema as the installed package carries it (what pip puts in site-packages)."""
    text = files("jupyter_gpu_pause.server.state").joinpath("events", "lifecycle.yaml").read_text()
    return yaml.safe_load(text)


async def test_subscribers_hear_pause_and_resume(lab, jp_ws_fetch):
    # Given another extension listening to our schema, and the Lab panel's event socket
    heard: list[dict] = []

    async def listener(logger, schema_id, data):
        heard.append(data)

    lab.app.event_logger.add_listener(schema_id=SCHEMA_ID, listener=listener)
    socket = await jp_ws_fetch("api", "events", "subscribe")

    # When the user opens a notebook, pauses and resumes it
    s, paused, resumed = await lab.pause_and_resume("exp.ipynb")

    async def both():
        types = [e["type"] for e in heard]
        return "paused" in types and "resumed" in types

    await wait_for(both, what="the paused and resumed events on the bus")

    # Then the listener got both, with exactly the schema's fields, valid against it
    by_type = {e["type"]: e for e in heard}
    schema = shipped_schema()
    for event in by_type.values():
        assert set(event) == FIELDS, event
        jsonschema.Draft7Validator(schema).validate(event)
        lab.app.event_logger.schemas.validate_event(SCHEMA_ID, event)
    ev_paused, ev_resumed = by_type["paused"], by_type["resumed"]
    assert ev_paused["session_id"] == ev_resumed["session_id"] == s["id"]
    assert ev_paused["path"] == "exp.ipynb" and ev_paused["reason"] == "user"
    assert ev_paused["state"] == "paused" and ev_paused["kernel_id"] is None
    assert ev_paused["detail"]["checkpoint_id"] == paused["checkpoint"]["id"]
    assert ev_resumed["state"] == "active" and ev_resumed["kernel_id"] == resumed["kernel_id"]
    # And they are the very events the API's log holds (same time, type, detail)
    logged = {e["type"]: e for e in await lab.events(s["id"])}
    for kind in ("paused", "resumed"):
        assert {k: by_type[kind][k] for k in ("time", "reason", "detail")} == {
            k: logged[kind][k] for k in ("time", "reason", "detail")
        }

    # And the Lab panel's socket carried them too, tagged with the schema
    on_socket = []
    while {"paused", "resumed"} - {e.get("type") for e in on_socket}:
        message = await asyncio.wait_for(socket.read_message(), 30)
        assert message is not None, "the event socket closed"
        capsule = json.loads(message)
        if capsule["schema_id"] == SCHEMA_ID:
            on_socket.append(capsule)
    socket.close()
    assert {e["session_id"] for e in on_socket} == {s["id"]}


async def test_schema_is_shipped_and_registered(lab):
    # Given a server with the extension
    await lab.api("GET", "sessions")

    # Then our schema is registered with jupyter_server's event logger, from the package's file
    registered = lab.app.event_logger.schemas.get(SCHEMA_ID)
    schema = shipped_schema()
    assert schema["$id"] == SCHEMA_ID and registered.version == schema["version"] == "6"
    assert set(schema["required"]) == FIELDS == set(schema["properties"])
    # And a payload missing a field, carrying an unknown one or of an unknown type is refused
    good = {f: "x" for f in FIELDS} | {"type": "paused", "detail": {}, "kernel_id": None}
    lab.app.event_logger.schemas.validate_event(SCHEMA_ID, good)
    missing = {k: v for k, v in good.items() if k != "state"}
    for bad in (missing, {**good, "extra": 1}, {**good, "type": "x"}):
        try:
            lab.app.event_logger.schemas.validate_event(SCHEMA_ID, bad)
        except jsonschema.ValidationError:
            continue
        raise AssertionError(f"accepted {bad}")
