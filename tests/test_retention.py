"""Retention: which checkpoints the rules delete, and which ones they never may.

First the rule alone (``plan_deletions``), as a table of stores and expected survivors: every
rule, blobs shared between checkpoints counted once, another server's sessions, and the newest
valid checkpoint of a paused session surviving every rule. Then the rule inside a real server:
after a pause, on the schedule, never while a resume is in flight, each deletion an event.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.store import Signer, Store
from jupyter_gpu_pause.store.keyfile import load_secret
from jupyter_gpu_pause.store.retention import (
    Entry,
    Retention,
    checkpoint_time,
    distinct_bytes,
    plan_deletions,
)
from tests.waiting import wait_for

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)


def cid(days_ago: float) -> str:
    """A checkpoint id made ``days_ago`` days before NOW (ids sort by time)."""
    return (
        f"{(NOW - timedelta(days=days_ago)).strftime('%Y%m%dT%H%M%SZ')}-{int(days_ago * 100):08x}"
    )


def ck(session: str, days_ago: float, blobs=None, valid: bool = True) -> Entry:
    c = cid(days_ago)
    return Entry(session, c, checkpoint_time(c), blobs if blobs is not None else {}, valid)


# -- the rule alone --------------------------------------------------------------------------
# (id, rules, entries, owned, paused, pinned, expected deletions as (session, days_ago, rule))
CASES = [
    (
        "rules-off",
        Retention(keep_last=0, max_age_days=0),
        [ck("a", d) for d in (40, 20, 1)],
        {"a"}, set(), set(),
        [],
    ),
    (
        "keep-last-2",
        Retention(keep_last=2, max_age_days=0),
        [ck("a", d) for d in (4, 3, 2, 1)],
        {"a"}, set(), set(),
        [("a", 4, "keep_last"), ("a", 3, "keep_last")],
    ),
    (
        "keep-last-counts-valid-only",  # a damaged newest is no copy: the older valid stays
        Retention(keep_last=1, max_age_days=0),
        [ck("a", 3), ck("a", 2), ck("a", 1, valid=False)],
        {"a"}, set(), set(),
        [("a", 3, "keep_last")],
    ),
    (
        "max-age",
        Retention(keep_last=0, max_age_days=30),
        [ck("a", d) for d in (40, 31, 29, 1)],
        {"a"}, set(), set(),
        [("a", 40, "max_age_days"), ("a", 31, "max_age_days")],
    ),
    (
        "max-age-paused-keeps-its-only-copy",
        Retention(keep_last=0, max_age_days=30),
        [ck("a", 40), ck("a", 35)],
        {"a"}, {"a"}, set(),
        [("a", 40, "max_age_days")],
    ),
    (
        "paused-newest-valid-is-older-than-a-damaged-one",
        Retention(keep_last=0, max_age_days=30),
        [ck("a", 45), ck("a", 40), ck("a", 35, valid=False)],
        {"a"}, {"a"}, set(),
        [("a", 45, "max_age_days"), ("a", 35, "max_age_days")],
    ),
    (
        "max-total-bytes-counts-shared-blobs-once",
        # x is shared by the two oldest: deleting the oldest frees nothing, so the next goes too
        Retention(keep_last=0, max_age_days=0, max_total_bytes=150),
        [ck("a", 3, {"x": 100}), ck("a", 2, {"x": 100, "y": 50}), ck("a", 1, {"y": 50, "z": 50})],
        {"a"}, set(), set(),
        [("a", 3, "max_total_bytes"), ("a", 2, "max_total_bytes")],
    ),
    (
        "max-total-bytes-already-within",
        Retention(keep_last=0, max_age_days=0, max_total_bytes=200),
        [ck("a", 3, {"x": 100}), ck("a", 2, {"x": 100, "y": 50}), ck("a", 1, {"y": 50, "z": 50})],
        {"a"}, set(), set(),
        [],
    ),
    (
        "max-store-bytes-oldest-first-across-sessions",
        Retention(keep_last=0, max_age_days=0, max_store_bytes=150),
        [ck("a", 5, {"x": 100}), ck("b", 4, {"y": 100}), ck("a", 1, {"z": 100})],
        {"a", "b"}, set(), set(),
        [("a", 5, "max_store_bytes"), ("b", 4, "max_store_bytes")],
    ),
    (
        "max-store-bytes-never-touches-another-servers-sessions",
        # b is not this server's: it is never deleted, but its bytes count
        Retention(keep_last=0, max_age_days=0, max_store_bytes=150),
        [ck("b", 9, {"y": 100}), ck("a", 5, {"x": 100}), ck("a", 1, {"z": 100})],
        {"a"}, {"a"}, set(),
        [("a", 5, "max_store_bytes")],
    ),
    (
        "another-servers-sessions-keep-everything",
        Retention(keep_last=1, max_age_days=1),
        [ck("b", d) for d in (40, 20, 10)],
        set(), set(), set(),
        [],
    ),
    (
        "pinned-checkpoint-survives",  # the one the session's record names
        Retention(keep_last=1, max_age_days=0),
        [ck("a", 3), ck("a", 2), ck("a", 1)],
        {"a"}, set(), {("a", cid(3))},
        [("a", 2, "keep_last")],
    ),
    (
        "first-rule-that-fires-is-named",
        Retention(keep_last=2, max_age_days=30),
        [ck("a", d) for d in (50, 40, 3, 1)],
        {"a"}, set(), set(),
        [("a", 50, "keep_last"), ("a", 40, "keep_last")],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "entries", "owned", "paused", "pinned", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_retention_rules(rules, entries, owned, paused, pinned, expected):
    # Given a store's checkpoints and what the server knows about their sessions
    # When the rules are applied
    plan = plan_deletions(rules, entries, owned=owned, paused=paused, pinned=pinned, now=NOW)
    # Then exactly the expected manifests go, each with the rule that fired, oldest first
    assert [(d.session_id, d.checkpoint_id, d.rule) for d in plan] == [
        (s, cid(days), rule) for s, days, rule in expected
    ]
    assert all(d.message for d in plan)


HARSH = [
    pytest.param(Retention(keep_last=1, max_age_days=0), id="keep_last=1"),
    pytest.param(Retention(keep_last=0, max_age_days=0.001), id="max_age_days"),
    pytest.param(Retention(keep_last=0, max_age_days=0, max_total_bytes=1), id="max_total_bytes"),
    pytest.param(Retention(keep_last=0, max_age_days=0, max_store_bytes=1), id="max_store_bytes"),
    pytest.param(Retention(1, 0.001, 1, 1), id="all-at-once"),
]


@pytest.mark.parametrize("rules", HARSH)
@pytest.mark.parametrize("damaged_newest", [False, True], ids=["", "damaged-newest"])
def test_the_newest_valid_checkpoint_of_a_paused_session_survives_every_rule(rules, damaged_newest):
    # Given a paused session with four checkpoints (the newest maybe damaged), sharing a blob
    entries = [ck("a", d, {"shared": 10, f"own{d}": 100}) for d in (4, 3, 2)]
    entries.append(ck("a", 1, {"shared": 10, "own1": 100}, valid=not damaged_newest))
    newest_valid = cid(2) if damaged_newest else cid(1)
    # When any rule, however harsh, is applied
    plan = plan_deletions(rules, entries, owned={"a"}, paused={"a"}, now=NOW)
    # Then the newest valid checkpoint is still there
    assert newest_valid not in {d.checkpoint_id for d in plan}
    assert plan, "the rule deleted the others"


def test_distinct_bytes_counts_a_shared_blob_once():
    assert distinct_bytes([ck("a", 2, {"x": 100, "y": 5}), ck("b", 1, {"x": 100})]) == 105


# -- inside a real server ----------------------------------------------------------------------
@pytest.fixture
def maintenance_config() -> dict:
    """c.StoreMaintenance settings of the test's server (a test parametrizes this); by default
    no scheduled pass, so what a test sees is what it asked for."""
    return {"interval": 0}


@pytest.fixture
def jp_server_config(jp_server_config, request, maintenance_config):
    marker = request.node.get_closest_marker("quota")
    if marker:
        jp_server_config["QuotaCapacity"] = dict(marker.kwargs)
    if maintenance_config:
        jp_server_config["StoreMaintenance"] = maintenance_config
    return jp_server_config


def plant(store_dir, secret_file, session_id: str, model: dict, days_ago: float) -> str:
    """A valid, signed copy of ``model`` (a real manifest) dated ``days_ago`` days back."""
    when = datetime.now(timezone.utc) - timedelta(days=days_ago)
    c = f"{when:%Y%m%dT%H%M%SZ}-{int(days_ago):08x}"
    doc = {k: v for k, v in model.items() if k != "signature"}
    doc.update(session_id=session_id, checkpoint_id=c, parent=None)
    Store(str(store_dir)).write_manifest(Signer(load_secret(str(secret_file))).sign(doc))
    return c


def manifests(store_dir, session_id: str) -> list[str]:
    return sorted(p.stem for p in (store_dir / "v1" / "sessions" / session_id).glob("*.json"))


async def paused_session(lab, store_dir) -> tuple[dict, dict]:
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "import numpy as np; w = np.arange(250_000.0)")
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    path = store_dir / "v1" / "sessions" / s["id"] / f"{paused['checkpoint']['id']}.json"
    return paused, json.loads(path.read_text())


def maintenance(lab):
    return lab.app.web_app.settings["gpu_pause_maintenance"]


@pytest.mark.gp_config(retention={"keep_last": 1, "max_age_days": 10})
async def test_a_pass_deletes_by_rule_keeps_the_paused_copy_and_other_servers_sessions(
    lab, store_dir, gp_config
):
    # Given a paused session with older valid checkpoints (20 and 5 days old), and a session
    # of another server sharing the store, 30 days old
    paused, model = await paused_session(lab, store_dir)
    sid, newest = paused["id"], paused["checkpoint"]["id"]
    old = plant(store_dir, gp_config["secret_file"], sid, model, 20)
    mid = plant(store_dir, gp_config["secret_file"], sid, model, 5)
    foreign = plant(store_dir, gp_config["secret_file"], "someone-elses", model, 30)
    # When a retention pass runs
    done = await maintenance(lab).apply_retention()
    # Then only the paused session's older checkpoints are gone, oldest first, by the first
    # rule that fired; its newest and the other server's are kept
    assert [(d.checkpoint_id, d.rule) for d in done] == [(old, "keep_last"), (mid, "keep_last")]
    assert manifests(store_dir, sid) == [newest]
    assert manifests(store_dir, "someone-elses") == [foreign]
    # And each deletion is an event of the session naming the rule
    events = await lab.events(sid, "checkpoint_deleted")
    assert [(e["reason"], e["detail"]["rule"], e["detail"]["checkpoint_id"]) for e in events] == [
        ("retention", "keep_last", old),
        ("retention", "keep_last", mid),
    ]
    assert "next garbage collection" in events[0]["detail"]["message"]
    # And the session still resumes from its checkpoint
    assert (await lab.api("POST", f"sessions/{sid}/resume"))[0] == 202
    back = await lab.wait_state(sid)
    assert back["state"] in ("active", "idle") and back["checkpoint"]["id"] == newest


@pytest.mark.parametrize("maintenance_config", [{"interval": 0.5}])
@pytest.mark.gp_config(retention={"keep_last": 1, "max_age_days": 0})
async def test_the_schedule_applies_retention(lab, store_dir, gp_config):
    # Given a server whose maintenance runs every half second, and a paused session
    paused, model = await paused_session(lab, store_dir)
    # When it gets an older checkpoint (another pause of it, long ago)
    older = plant(store_dir, gp_config["secret_file"], paused["id"], model, 2)

    async def one_left():
        return manifests(store_dir, paused["id"]) == [paused["checkpoint"]["id"]]

    # Then a scheduled pass deletes it, with its event
    await wait_for(one_left, timeout=30, what="a scheduled retention pass")
    event = await lab.event(paused["id"], "checkpoint_deleted")
    assert event["detail"]["checkpoint_id"] == older and event["detail"]["rule"] == "keep_last"


@pytest.mark.gp_config(retention={"keep_last": 2, "max_age_days": 0})
async def test_retention_follows_every_pause(lab, store_dir):
    # Given keep_last = 2, and a notebook paused and resumed twice
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    ids = []
    for round_ in range(3):
        assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
        paused = await lab.wait_state(s["id"])
        assert paused["state"] == "paused", paused
        ids.append(paused["checkpoint"]["id"])
        if round_ < 2:
            assert (await lab.api("POST", f"sessions/{s['id']}/resume"))[0] == 202
            assert (await lab.wait_state(s["id"]))["state"] in ("active", "idle")

    # When the third pause has ended
    async def two_left():
        return manifests(store_dir, s["id"]) == sorted(ids[1:])

    # Then only the two newest checkpoints are left, the first deleted by keep_last
    await wait_for(two_left, timeout=30, what="retention after the pause")
    event = await lab.event(s["id"], "checkpoint_deleted")
    assert event["detail"]["checkpoint_id"] == ids[0] and event["detail"]["rule"] == "keep_last"


@pytest.mark.quota(max_sessions=1)
@pytest.mark.gp_config(
    retention={"keep_last": 1, "max_age_days": 0},
    gpu_kernelspecs=["python3"],
    capacity_provider_class="quota",
    policies=[],
)
async def test_a_resume_in_flight_keeps_every_checkpoint_it_may_read(lab, store_dir, gp_config):
    # Given a GPU session paused with an older checkpoint too, and a quota of one GPU session
    # held by another notebook, so that its resume waits in line
    paused, model = await paused_session(lab, store_dir)
    sid = paused["id"]
    older = plant(store_dir, gp_config["secret_file"], sid, model, 3)
    await lab.open_notebook("holder.ipynb")
    assert (await lab.api("POST", f"sessions/{sid}/resume"))[0] == 202
    assert (await lab.wait_state(sid, ("waiting",)))["state"] == "waiting"
    # When retention runs while the resume waits (it may fall back to the older checkpoint)
    done = await maintenance(lab).apply_retention()
    # Then nothing of that session is deleted
    assert done == []
    assert manifests(store_dir, sid) == sorted([older, paused["checkpoint"]["id"]])
    # And once the resume is cancelled, the next pass applies the rule
    assert (await lab.api("POST", f"sessions/{sid}/cancel"))[0] == 200
    assert (await lab.wait_state(sid, ("paused",)))["state"] == "paused"
    assert [d.checkpoint_id for d in await maintenance(lab).apply_retention()] == [older]


# (id, jupyter_server_config.py, words the refusal must contain)
BAD_MAINTENANCE = [
    (
        "negative-interval",
        "c.StoreMaintenance.interval = -1",
        ["StoreMaintenance.interval = -1", ">= 0"],
    ),
    (
        "zero-lease",
        "c.StoreMaintenance.lease_seconds = 0",
        ["StoreMaintenance.lease_seconds = 0", "more than 0"],
    ),
    (
        "misspelt-setting",
        "c.StoreMaintenance.intervall = 60",
        ["StoreMaintenance.intervall is not a setting", "did you mean 'interval'"],
    ),
    (
        "wrong-type",
        "c.StoreMaintenance.interval = 'hourly'",
        ["StoreMaintenance.interval = 'hourly'", "expected a float"],
    ),
]


@pytest.mark.parametrize(
    ("config", "words"), [c[1:] for c in BAD_MAINTENANCE], ids=[c[0] for c in BAD_MAINTENANCE]
)
def test_a_bad_maintenance_setting_stops_the_server_naming_it(tmp_path, config, words):
    from tests.servers import Server

    server = Server(tmp_path, config=config)
    server.launch()
    assert server.exit_status() != 0
    log = server.log_tail()
    assert "jupyter_gpu_pause: bad configuration" in log, log
    for w in words:
        assert w in log, log
