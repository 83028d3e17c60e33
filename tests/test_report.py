"""GPU-hours accounting (``GET report``): held and idle while a kernel holds GPUs, reclaimed while
its session is paused, per session, in total and per UTC day, over a window given by ``since``.

A fake GPU probe says which kernel "holds" GPUs; the idle monitor, the pause, SQLite and the
report are the real ones."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from jupyter_gpu_pause.server.accounting import Ledger
from jupyter_gpu_pause.server.model import Session
from jupyter_gpu_pause.server.probes import GpuUsage
from jupyter_gpu_pause.server.records import MIGRATIONS, Records
from tests.fakes import FakeProbe
from tests.test_policies import wait_for

TICK = 0.2


def hours(held=0.0, idle=0.0, reclaimed=0.0) -> dict:
    return {"gpu_hours_held": held, "gpu_hours_idle": idle, "gpu_hours_reclaimed": reclaimed}


ZERO = hours()


@pytest.fixture
def gp_config(gp_config):
    FakeProbe.readings = {}
    gp_config.update(policies=[], poll_interval=TICK, gpu_probe_class="tests.fakes.FakeProbe")
    return gp_config


def today() -> str:
    return datetime.now(timezone.utc).date().isoformat()


async def report(lab, since=None) -> dict:
    code, body = await lab.api("GET", "report", params={"since": since} if since else None)
    assert code == 200, body
    return body


def only_session(body: dict, sid: str) -> dict:
    (row,) = body["sessions"]
    assert row["session_id"] == sid
    return row


def figures(row: dict) -> dict:
    return {k: row[k] for k in ZERO}


@pytest.mark.parametrize("devices", [1, 2])
async def test_gpu_hours_held_then_reclaimed_by_a_pause(lab, devices):
    # Given a notebook whose kernel holds `devices` GPUs, idle at 0 % (fake probe)
    s = await lab.open_notebook("exp/train.ipynb")
    await lab.run(s["kernel_id"], "w = list(range(1000))")
    FakeProbe.readings[s["id"]] = GpuUsage([f"GPU-{i}" for i in range(devices)], 2**31, 0.0)
    # When the idle monitor ticks for a few seconds
    await asyncio.sleep(2.5)
    body = await report(lab)
    # Then the session, the total and today's entry show GPU-hours held, all of them idle
    row = only_session(body, s["id"])
    assert row["path"] == "exp/train.ipynb"
    held = row["gpu_hours_held"] * 3600
    assert devices * 1.5 <= held <= devices * 3.5, held
    assert row["gpu_hours_idle"] == row["gpu_hours_held"]
    assert row["gpu_hours_reclaimed"] == 0
    assert body["total"] == figures(row)
    assert len(body["days"]) == 31 and body["days"][-1]["day"] == today()
    assert figures(body["days"][-1]) == figures(row)
    assert all(figures(d) == ZERO for d in body["days"][:-1])
    # And the session's own JSON counts the same GPU-seconds
    acc = (await lab.session(s["id"]))["accounting"]
    assert abs(acc["gpu_seconds_held"] - held) <= devices * 1.0 + 0.5

    # When the user pauses it
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    await lab.wait_state(s["id"], states=("paused",))
    await asyncio.sleep(3 * TICK)
    first = only_session(await report(lab), s["id"])
    await asyncio.sleep(2.0)
    later = only_session(await report(lab), s["id"])
    # Then it reclaims its GPUs while paused, per device, and holds none
    reclaimed = (later["gpu_hours_reclaimed"] - first["gpu_hours_reclaimed"]) * 3600
    assert devices * 1.4 <= reclaimed <= devices * 3.0, reclaimed
    assert later["gpu_hours_held"] == first["gpu_hours_held"]
    assert later["gpu_hours_idle"] == first["gpu_hours_idle"]
    acc = (await lab.session(s["id"]))["accounting"]
    assert acc["gpu_seconds_reclaimed"] >= later["gpu_hours_reclaimed"] * 3600 - 0.5


async def test_a_kernel_without_gpu_counts_nothing(lab):
    # Given a notebook whose kernel holds no GPU, paused after a while
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    await asyncio.sleep(1.0)
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    await lab.wait_state(s["id"], states=("paused",))
    await asyncio.sleep(1.0)
    # Then the report has no GPU-hours, and still a zero for every day of the window
    body = await report(lab, "7d")
    assert body["sessions"] == [] and body["total"] == ZERO
    assert [d["day"] for d in body["days"]][-1] == today() and len(body["days"]) == 8
    assert all(figures(d) == ZERO for d in body["days"])


# (since, how many days the series has; None: now minus 30 days)
WINDOWS = [
    pytest.param(None, 31, id="default-30-days"),
    pytest.param("7d", 8, id="7d"),
    pytest.param("24h", 2, id="24h"),
    pytest.param("90m", None, id="90m"),
    pytest.param("2000-01-01T00:00:00Z", 90, id="long-ago-capped-to-90-days"),
    pytest.param("2999-01-01T00:00:00Z", 0, id="future"),
    pytest.param("2999-01-01", 0, id="future-date-only"),
]


@pytest.mark.parametrize(("since", "days"), WINDOWS)
async def test_since_sets_the_window(lab, since, days):
    # Given a notebook holding a GPU for a moment
    s = await lab.open_notebook()
    FakeProbe.readings[s["id"]] = GpuUsage(["GPU-0"], 2**30, 0.0)
    await wait_for(lambda: _held(lab))
    # When the report is asked since `since`
    body = await report(lab, since)
    until = datetime.fromisoformat(body["until"].replace("Z", "+00:00"))
    start = datetime.fromisoformat(body["since"].replace("Z", "+00:00"))
    # Then it starts at the hour of `since`, ends now, and has one entry per day of the window
    assert start.minute == start.second == start.microsecond == 0
    if days is not None:
        assert len(body["days"]) == days
    if days:
        assert body["days"][-1]["day"] == until.date().isoformat()
    if start > until:  # a window that has not begun: zeros
        assert body["total"] == ZERO and body["sessions"] == [] and body["days"] == []
    else:
        assert body["total"]["gpu_hours_held"] > 0
        assert [r["session_id"] for r in body["sessions"]] == [s["id"]]


async def _held(lab):
    return (await report(lab))["total"]["gpu_hours_held"] > 0


BAD_SINCE = ["yesterday-ish", "7x", "-1d", "7 days ago", "2026-13-01", "99999999999d"]


@pytest.mark.parametrize("since", BAD_SINCE)
async def test_bad_since_is_400(lab, since):
    # When the report is asked since something that is neither a time nor a duration
    code, err = await lab.api("GET", "report", params={"since": since})
    # Then it answers 400 naming the value and both accepted forms
    assert code == 400, err
    assert err["reason"] == "bad-query"
    assert repr(since) in err["message"]
    assert "ISO 8601" in err["message"] and "7d" in err["message"]


async def test_days_split_at_midnight_and_count_each_device(tmp_path):
    # Given a ledger on real records, and a session holding 2 GPUs from 23:30 to 00:30 UTC
    records = Records(str(tmp_path / "records.sqlite"))
    ledger = Ledger(records)
    s = Session(path="nb.ipynb", kernel_name="python3")
    start = datetime(2026, 12, 1, 23, 30, tzinfo=timezone.utc)
    try:
        ledger.add(s, start, start + timedelta(hours=1), held=2, idle=2)
        # and paused from 00:30 to 02:00, having held 2 GPUs
        ledger.add(s, start + timedelta(hours=1), start + timedelta(hours=2.5), reclaimed=2)
        # When the report is asked on Dec 2 at 02:00 since 3 days
        now = datetime(2026, 12, 2, 2, 0, tzinfo=timezone.utc)
        body = await ledger.report("3d", {s.id: s}, now=now)
    finally:
        records.close()
    # Then each day has its half, per device, and the totals add up
    days = {d["day"]: figures(d) for d in body["days"]}
    assert list(days) == ["2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02"]
    assert days["2026-12-01"] == hours(held=1.0, idle=1.0)
    assert days["2026-12-02"] == hours(held=1.0, idle=1.0, reclaimed=3.0)
    assert body["total"] == hours(held=2.0, idle=2.0, reclaimed=3.0)
    assert body["sessions"] == [{"session_id": s.id, "path": "nb.ipynb", **body["total"]}]
    assert body["since"] == "2026-11-29T02:00:00.000000Z"
    assert (s.gpu_seconds_held, s.gpu_seconds_reclaimed) == (7200, 10800)


async def test_accounting_table_is_added_to_an_existing_database(tmp_path):
    # Given a database written before accounting existed, with a paused session in it
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version=1")
    old = Session(path="old.ipynb", kernel_name="python3", state="paused")
    record = old.to_record()
    for key in ("gpu_seconds_reclaimed", "gpu_devices_paused"):  # fields it did not have
        record.pop(key)
    db.execute(
        "INSERT INTO sessions (id, path, state, data) VALUES (?, ?, ?, ?)",
        (old.id, old.path, old.state, json.dumps(record)),
    )
    db.commit()
    db.close()
    # When the server opens it
    records = Records(str(path))
    try:
        (loaded,) = await records.load_sessions()
        await records.add_accounting([("2026-12-02T10", old.id, old.path, 60.0, 30.0, 0.0)])
        await records.add_accounting([("2026-12-02T10", old.id, old.path, 60.0, 0.0, 5.0)])
        data = await records.accounting("2026-12-01T00")
    finally:
        records.close()
    # Then the session is kept, and accounting rows add up in the new table
    assert loaded.id == old.id and loaded.state == "paused"
    assert loaded.gpu_seconds_reclaimed == 0 and loaded.gpu_devices_paused == 0
    assert data["sessions"] == [(old.id, "old.ipynb", 120.0, 30.0, 5.0)]
    assert data["days"] == [("2026-12-02", 120.0, 30.0, 5.0)]
