"""GPU-hours accounting (``GET report``): held and idle while a kernel holds GPUs, reclaimed while
its session is paused, per session, in total and per UTC day, over a window given by ``since``.

A fake GPU probe says which kernel "holds" GPUs; the idle monitor, the pause, SQLite and the
report are the real ones."""

from __future__ import annotations

import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

import pytest

from jupyter_gpu_pause.server.capacity.probes import GpuUsage
from jupyter_gpu_pause.server.monitor.accounting import Ledger
from jupyter_gpu_pause.server.state.migrations import migrate_sqlite
from jupyter_gpu_pause.server.state.model import Session
from jupyter_gpu_pause.server.state.records import MIGRATIONS, Records
from jupyter_gpu_pause.store.format import parse_iso
from tests.fakes import FakeProbe
from tests.waiting import wait_for

TICK = 0.2
# The report gives GPU-hours to 0.0001 h (0.36 s): half of that either way, and the session's
# own GPU-seconds to 0.1 s.
ROUNDING = 0.25


def hours(held=0.0, idle=0.0, reclaimed=0.0, unpausable=0.0) -> dict:
    return {
        "gpu_hours_held": held,
        "gpu_hours_idle": idle,
        "gpu_hours_reclaimed": reclaimed,
        "gpu_hours_unpausable": unpausable,
    }


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


class Snapshot(NamedTuple):
    body: dict  # the report
    looked: datetime  # the idle monitor's last pass before it: counted in it
    asked: datetime  # when it came back: nothing later is counted in it


async def looked_then_report(lab) -> Snapshot:
    looked = parse_iso((await lab.monitor())["last_pass"])
    body = await report(lab)
    return Snapshot(body, looked, datetime.now(timezone.utc))


def seconds(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds()


@pytest.mark.parametrize("devices", [1, 2])
async def test_gpu_hours_held_then_reclaimed_by_a_pause(lab, devices):
    # Given a notebook whose kernel holds `devices` GPUs, idle at 0 % (fake probe), from a
    # moment after the idle monitor's pass at `before` and before its pass at `seen`
    s = await lab.open_notebook("exp/train.ipynb")
    await lab.run(s["kernel_id"], "w = list(range(1000))")
    before = parse_iso((await lab.monitor_passes())["last_pass"])
    FakeProbe.readings[s["id"]] = GpuUsage([f"GPU-{i}" for i in range(devices)], 2**31, 0.0)
    seen = parse_iso((await lab.monitor_passes())["last_pass"])

    # When the idle monitor ticks until the report shows the GPUs held for a while
    async def held_for_a_while():
        snap = await looked_then_report(lab)
        rows = snap.body["sessions"]
        return snap if rows and rows[0]["gpu_hours_held"] * 3600 >= devices * 1.5 else None

    body, looked, asked = await wait_for(held_for_a_while, what="GPU-seconds held")
    # Then the session, the total and today's entry show GPU-hours held, all of them idle
    row = only_session(body, s["id"])
    assert row["path"] == "exp/train.ipynb"
    assert row["gpu_hours_idle"] == row["gpu_hours_held"]
    assert row["gpu_hours_reclaimed"] == 0
    assert body["total"] == figures(row)
    assert len(body["days"]) == 31 and body["days"][-1]["day"] == today()
    assert figures(body["days"][-1]) == figures(row)
    assert all(figures(d) == ZERO for d in body["days"][:-1])
    # And they count per device the time the monitor saw the GPUs held: at least from its
    # pass at `seen` to the one at `looked`, at most from `before` to the report's answer
    held = row["gpu_hours_held"] * 3600
    assert held >= devices * seconds(seen, looked) - ROUNDING, (held, seen, looked)
    assert held <= devices * seconds(before, asked) + ROUNDING, (held, before, asked)
    # And the session's own JSON counts the same GPU-seconds, between this report and the next
    acc = (await lab.session(s["id"]))["accounting"]
    held_next = only_session(await report(lab), s["id"])["gpu_hours_held"] * 3600
    assert held - ROUNDING <= acc["gpu_seconds_held"] <= held_next + ROUNDING, (acc, held)

    # When the user pauses it, and the idle monitor has looked at it paused
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    await lab.wait_state(s["id"], states=("paused",))
    await lab.monitor_passes()
    first, looked1, asked1 = await looked_then_report(lab)
    first = only_session(first, s["id"])

    async def reclaimed_for_a_while():
        snap = await looked_then_report(lab)
        grown = only_session(snap.body, s["id"])["gpu_hours_reclaimed"]
        return snap if (grown - first["gpu_hours_reclaimed"]) * 3600 >= devices * 1.4 else None

    later, looked2, asked2 = await wait_for(reclaimed_for_a_while, what="GPU-seconds reclaimed")
    later = only_session(later, s["id"])
    # Then it reclaims its GPUs while paused, per device, over the time between the two
    # reports, and holds none
    reclaimed = (later["gpu_hours_reclaimed"] - first["gpu_hours_reclaimed"]) * 3600
    assert reclaimed >= devices * seconds(asked1, looked2) - ROUNDING, (reclaimed, asked1, looked2)
    assert reclaimed <= devices * seconds(looked1, asked2) + ROUNDING, (reclaimed, looked1, asked2)
    assert later["gpu_hours_held"] == first["gpu_hours_held"]
    assert later["gpu_hours_idle"] == first["gpu_hours_idle"]
    acc = (await lab.session(s["id"]))["accounting"]
    assert acc["gpu_seconds_reclaimed"] >= later["gpu_hours_reclaimed"] * 3600 - ROUNDING


async def test_a_kernel_without_gpu_counts_nothing(lab):
    # Given a notebook whose kernel holds no GPU, seen running by the idle monitor, then paused
    # and seen paused
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "x = 1")
    await lab.monitor_passes(passes=3)
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    await lab.wait_state(s["id"], states=("paused",))
    await lab.monitor_passes(passes=3)
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
    migrate_sqlite(db, MIGRATIONS, str(path), to=1)
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
        await records.add_accounting([("2026-12-02T10", old.id, old.path, 60.0, 30.0, 0.0, 0.0)])
        await records.add_accounting([("2026-12-02T10", old.id, old.path, 60.0, 0.0, 5.0, 0.0)])
        data = await records.accounting("2026-12-01T00")
    finally:
        records.close()
    # Then the session is kept, and accounting rows add up in the new table
    assert loaded.id == old.id and loaded.state == "paused"
    assert loaded.gpu_seconds_reclaimed == 0 and loaded.gpu_devices_paused == 0
    assert data["sessions"] == [(old.id, "old.ipynb", 120.0, 30.0, 5.0, 0.0)]
    assert data["days"] == [("2026-12-02", 120.0, 30.0, 5.0, 0.0)]


def test_servers_opening_one_new_records_database_at_once_all_get_it(tmp_path):
    # Given one new records file that several servers open at the same moment (one data dir)
    path = str(tmp_path / "records.sqlite")
    opened = [Records(path) for _ in range(8)]
    start = threading.Barrier(len(opened))

    def open_it(records):
        start.wait()
        return records._load_sessions()

    # When they all create the schema together
    with ThreadPoolExecutor(len(opened)) as pool:
        results = list(pool.map(open_it, opened))
    # Then every one of them opened it (none found a table created under its feet), once
    assert results == [[]] * len(opened)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS.latest
    for records in opened:
        records.close()
