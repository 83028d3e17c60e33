"""Garbage collection of the store, and the protocol that keeps it from robbing a writer.

Against real stores only: a local folder and moto's S3 server in its own process. Checkpoints
are real captures (``make_plan`` / ``write_plan``) signed and written as a pause writes them;
"old" blobs on a local disk are aged with ``os.utime`` (S3 keeps its own LastModified, so the
S3 cases use grace 0, or fresh blobs under a long grace). Interleavings with a writer are made
deterministic with ``gc``'s ``phase`` callback, never with sleeps.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
from jupyter_gpu_pause.store import (
    GcBusy,
    Signer,
    Store,
    StoreError,
    declare_intent,
    drop_intents,
    gc,
    new_checkpoint_id,
    verify,
)
from jupyter_gpu_pause.store.format import blob_path, build_manifest
from jupyter_gpu_pause.store.lease import LOCK, acquire, read_lock, release, write_new
from jupyter_gpu_pause.store.listing import (
    INTENTS,
    blob_objects,
    list_objects,
    manifest_objects,
    read_json,
    referenced,
    store_path,
)
from tests.moto import BUCKET, PREFIX
from tests.servers import Server

KEY = b"k" * 32
HOUR = 3600.0


# -- stores ------------------------------------------------------------------------------------
@pytest.fixture(params=["local", "s3"])
def kind(request) -> str:
    return request.param


@pytest.fixture
def store(kind, request, store_dir) -> Store:
    if kind == "local":
        return Store(str(store_dir))
    s3 = request.getfixturevalue("s3")
    return s3_store(s3)


def s3_store(s3) -> Store:
    """A second client of the bucket each call: as another process (a kernel) would be."""
    return Store(
        f"s3://{BUCKET}/{PREFIX}",
        {"endpoint_url": s3.endpoint, "skip_instance_cache": True},
        timeout=10,
    )


def other_client(store: Store, request) -> Store:
    """Another client of the same store (a kernel's, or another server's)."""
    if store.local:
        return Store(store.url)
    return s3_store(request.getfixturevalue("s3"))


def age(store: Store, rel: str, seconds: float) -> None:
    """Make a local object look ``seconds`` old (S3 keeps its own timestamps)."""
    path = store_path(store, rel)
    then = time.time() - seconds
    os.utime(path, (then, then))


def local_only(store: Store) -> None:
    if not store.local:
        pytest.skip("S3 objects cannot be aged: LastModified is the server's")


# -- writing checkpoints as a pause does ---------------------------------------------------------
def array(seed: int, n: int = 300_000) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def capture(store: Store, cid: str, ns: dict, intents: bool = True) -> dict:
    """The kernel's half: blobs written, intents declared before any reuse decision."""
    ns = {"__name__": "__main__", **ns}
    plan = make_plan(ns, {}, registered=sorted(k for k in ns if k != "__name__"), mode="namespace")
    hook = (lambda hashes: declare_intent(store, cid, hashes)) if intents else None
    return write_plan(plan, store, before_reuse=hook)


def commit(store: Store, session: str, cid: str, result: dict, key: bytes = KEY) -> dict:
    """The server's half: the signed manifest, then the intents dropped."""
    doc = Signer(key).sign(
        build_manifest(
            session_id=session,
            checkpoint_id=cid,
            parent=None,
            kernel={"python": "3.11"},
            origin={"host": "h", "gpu": None},
            capture=result,
        )
    )
    store.write_manifest(doc)
    drop_intents(store, cid)
    return doc


def checkpoint(store: Store, session: str, ns: dict, key: bytes = KEY) -> dict:
    cid = new_checkpoint_id()
    return commit(store, session, cid, capture(store, cid, ns), key)


def orphan(store: Store, seed: int) -> str:
    """A blob no manifest names (its checkpoint was deleted, or its pause failed)."""
    h, _ = store.put_blob(array(seed, 10_000).tobytes())
    return h


def hashes_of(doc: dict) -> set[str]:
    return set(doc["blobs"])


def stored(store: Store) -> dict[str, int]:
    return {h: o.size for h, o in blob_objects(store)[0].items()}


def live(store: Store) -> dict[str, int]:
    """Every blob some manifest in the store names, with its size."""
    manifests, _ = manifest_objects(store)
    docs = read_json(store, list(manifests.values()))
    out = {}
    for doc in docs.values():
        if doc is None:
            continue  # not JSON: names nothing
        out.update({h: int(b["bytes"]) for h, b in doc["blobs"].items()})
    return out


def assert_every_manifest_verifies(store: Store, key: bytes = KEY) -> None:
    report = verify(store, key)
    assert report.ok, [(c.checkpoint_id, c.problems) for c in report.failed]
    assert report.checkpoints


# -- the table -----------------------------------------------------------------------------------
def orphan_fresh(store):
    checkpoint(store, "s1", {"w": array(1)})
    return {"orphan": orphan(store, 2)}


def orphans_by_age(store):
    local_only(store)
    checkpoint(store, "s1", {"w": array(1)})
    old, young = orphan(store, 2), orphan(store, 3)
    age(store, blob_path(old), 2 * HOUR + 60)
    age(store, blob_path(young), 2 * HOUR - 60)
    return {"old": old, "young": young}


def deleted_checkpoint(store):
    shared = array(9)
    gone = checkpoint(store, "s1", {"w": array(1), "shared": shared})
    kept = checkpoint(store, "s1", {"v": array(2), "shared": shared})
    store.delete_manifest("s1", gone["checkpoint_id"])  # as retention does
    only_gone = hashes_of(gone) - hashes_of(kept)
    return {"gone": only_gone, "shared": hashes_of(gone) & hashes_of(kept)}


def named_by_intent(store):
    checkpoint(store, "s1", {"w": array(1)})
    h = orphan(store, 2)
    declare_intent(store, new_checkpoint_id(), [h])  # a pause in progress that reuses it
    return {"intended": h}


def named_by_stale_intent(store):
    local_only(store)
    checkpoint(store, "s1", {"w": array(1)})
    h = orphan(store, 2)
    rel = declare_intent(store, new_checkpoint_id(), [h])  # a pause that crashed 7 h ago
    age(store, rel, 7 * HOUR)
    age(store, blob_path(h), 7 * HOUR)
    return {"orphan": h, "intent": rel}


def foreign_server(store):
    theirs = checkpoint(store, "s9", {"w": array(1)}, key=b"another server's key....")
    return {"theirs": hashes_of(theirs), "orphan": orphan(store, 2)}


def unreadable_manifest(store):
    checkpoint(store, "s1", {"w": array(1)})
    path = store_path(store, "v1/sessions/s2/20261202T101500Z-00000000.json")
    store.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    store.fs.pipe_file(path, b"{not json")
    return {"orphan": orphan(store, 2)}


# (id, setup, grace, dry_run, deleted names, kept names, extra report fields)
GC_CASES = [
    ("unreferenced-grace-0", orphan_fresh, 0, False, ["orphan"], [], {}),
    ("unreferenced-dry-run", orphan_fresh, 0, True, ["orphan"], [], {}),
    ("unreferenced-but-young", orphan_fresh, HOUR, False, [], ["orphan"], {"young_blobs": 1}),
    ("older-and-younger-than-grace", orphans_by_age, 2 * HOUR, False, ["old"], ["young"],
     {"young_blobs": 1}),
    ("manifest-deleted-shared-blob-kept", deleted_checkpoint, 0, False, ["gone"], ["shared"], {}),
    ("named-by-an-intent", named_by_intent, 0, False, [], ["intended"], {}),
    ("named-by-a-stale-intent", named_by_stale_intent, HOUR, False, ["orphan"], [],
     {"stale_intents": 1}),
    ("another-servers-checkpoint", foreign_server, 0, False, ["orphan"], ["theirs"], {}),
    ("an-unreadable-manifest-names-nothing", unreadable_manifest, 0, False, ["orphan"], [], {}),
]  # fmt: skip


def as_set(value) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


@pytest.mark.parametrize(
    ("setup", "grace", "dry_run", "deleted", "kept", "fields"),
    [c[1:] for c in GC_CASES],
    ids=[c[0] for c in GC_CASES],
)
def test_gc(store, setup, grace, dry_run, deleted, kept, fields):
    # Given a store with live checkpoints and the blobs of the case
    named = setup(store)
    before = stored(store)
    gone = set().union(*(as_set(named[n]) for n in deleted)) if deleted else set()
    keep = set().union(*(as_set(named[n]) for n in kept)) if kept else set()
    # When garbage collection runs
    report = gc(store, dry_run=dry_run, grace_seconds=grace)
    # Then it reports exactly the case's blobs as freed, with their bytes
    assert report.deleted_blobs == len(gone), report
    assert report.freed_bytes == sum(before[h] for h in gone)
    for name, value in fields.items():
        assert getattr(report, name) == value, report
    after = stored(store)
    if dry_run:
        # And a dry run changes nothing
        assert after == before
        return
    # And those blobs are gone; the case's kept blobs and every live one are still there
    assert set(before) - set(after) == gone
    assert keep <= set(after) and set(live(store)) <= set(after)
    assert report.kept_blobs == len(after)
    # And every checkpoint signed with our key still verifies
    report = verify(store, KEY)
    assert all(c.ok for c in report.checkpoints if c.session_id == "s1"), report.failed


def test_after_gc_the_store_holds_exactly_the_live_blobs(store):
    # Given checkpoints sharing blobs, one of them deleted by retention, and strays
    deleted_checkpoint(store)
    orphan_fresh(store)
    # When a collection with no grace runs, no writer active
    report = gc(store, dry_run=False, grace_seconds=0)
    # Then the store's blob bytes are the live blobs' bytes
    assert stored(store) == live(store)
    assert report.kept_bytes == sum(live(store).values())
    assert_every_manifest_verifies(store)


def test_gc_never_deletes_a_blob_younger_than_the_grace_period(store):
    # Given unreferenced blobs written just now (and, locally, some nearly as old as the grace)
    fresh = {orphan(store, seed) for seed in range(3)}
    if store.local:
        for h in list(fresh)[:2]:
            age(store, blob_path(h), 3 * HOUR - 5)
    # When collections run with a grace of three hours
    for _ in range(2):
        report = gc(store, dry_run=False, grace_seconds=3 * HOUR)
        # Then none of them is deleted
        assert report.deleted_blobs == 0 and report.young_blobs == 3
    assert fresh <= set(stored(store))


def test_a_leftover_temporary_file_goes_once_it_is_old(store_dir):
    # Given a local store with an interrupted write's temporary file, and a fresh one
    store = Store(str(store_dir))
    h = orphan(store, 1)
    old = store_path(store, blob_path(h) + ".tmp-0123456789ab")
    new = store_path(store, blob_path(h) + ".tmp-ba9876543210")
    for p in (old, new):
        with open(p, "wb") as f:
            f.write(b"x" * 100)
    age(store, blob_path(h) + ".tmp-0123456789ab", 7 * HOUR)
    # When GC runs
    report = gc(store, dry_run=False, grace_seconds=HOUR)
    # Then only the old one is gone (a fresh one may be a write in progress)
    assert report.leftovers == 1
    assert not os.path.exists(old) and os.path.exists(new)


# -- a writer during GC --------------------------------------------------------------------------
class Writer(threading.Thread):
    """A pause in another process: capture (intents, reuse decisions, blobs), then commit."""

    def __init__(self, store: Store, ns: dict, intents: bool = True):
        super().__init__(daemon=True)
        self.store, self.ns, self.intents = store, ns, intents
        self.cid = new_checkpoint_id()
        self.doc = None
        self.error = None

    def run(self):
        try:
            self.doc = commit(self.store, "s2", self.cid, capture(self.store, self.cid, self.ns))
        except BaseException as e:
            self.error = e


def wait_until(condition, what: str, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"{what} not seen within {timeout:g} s")
        time.sleep(0.02)
    return value


def intent_of(store: Store, cid: str):
    """The writer's committed intents (locally, a write in flight is a ``.tmp-`` file first,
    which no collection counts: waiting on it would race the rename)."""
    return [o for o in list_objects(store, f"{INTENTS}/{cid}") if ".tmp-" not in o.rel]


def reused_blob_setup(store: Store) -> tuple[np.ndarray, str]:
    """An old checkpoint deleted by retention: its big array's blob is unreferenced but the
    notebook still holds the array, so the next pause will reuse the blob."""
    w = array(7, 400_000)
    old = checkpoint(store, "s1", {"w": w})
    checkpoint(store, "s1", {"other": array(8)})
    store.delete_manifest("s1", old["checkpoint_id"])
    (h,) = {b["blob"] for b in old["arrays"]}
    return w, h


@pytest.mark.parametrize("when", ["between-the-looks", "after-the-second"])
def test_a_writer_reusing_an_old_blob_during_gc_is_never_robbed(store, request, when):
    # Given an unreferenced old blob that a notebook's next pause will reuse
    w, h = reused_blob_setup(store)
    writer = Writer(other_client(store, request), {"w": w, "extra": array(11)})

    def phase(name):
        if (name, when) in {
            ("marked", "between-the-looks"),
            ("rechecked", "after-the-second"),
        }:
            # When the writer records its intent at this point of the collection
            writer.start()
            wait_until(lambda: intent_of(store, writer.cid), "the writer's intent")
        if name == "swept":
            # (until the collection lets go of its lock, the writer waits to decide reuse)
            assert writer.is_alive() and writer.doc is None

    report = gc(store, dry_run=False, grace_seconds=0, phase=phase)
    writer.join(60)
    # Then the writer's checkpoint is complete: every blob it names is in the store
    assert writer.error is None and writer.doc is not None, writer.error
    assert h in hashes_of(writer.doc) and h in stored(store)
    assert_every_manifest_verifies(store)
    # And the blob was either kept by the second look or deleted and written again
    if when == "between-the-looks":
        assert report.rescued_blobs == 1 and report.deleted_blobs == 0
    else:
        assert report.deleted_blobs == 1 and writer.doc["totals"]["new_bytes"] >= 800_000
    # And the writer's intents are gone with its commit
    assert intent_of(store, writer.cid) == []


@pytest.mark.parametrize("intents", [True, False], ids=["with-intents", "without-intents"])
def test_gc_between_a_reuse_decision_and_the_manifest(store, intents):
    # Given an unreferenced old blob, and a pause that decided to reuse it (and wrote the rest)
    w, h = reused_blob_setup(store)
    cid = new_checkpoint_id()
    result = capture(store, cid, {"w": w}, intents=intents)
    assert result["new_bytes"] < 800_000  # the array's blob was reused, not written
    # When a collection with no grace runs before the manifest is written
    gc(store, dry_run=False, grace_seconds=0)
    commit(store, "s2", cid, result)
    report = verify(store, KEY)
    if intents:
        # Then, with the protocol, the checkpoint is whole
        assert report.ok, report.failed
    else:
        # (and without it, the collector would have robbed the writer: what the intent is for)
        (bad,) = report.failed
        assert bad.checkpoint_id == cid and f"blob {h} is missing" in bad.problems[0]


# -- the lock ------------------------------------------------------------------------------------
def test_one_collection_at_a_time(store, request):
    # Given a collection holding the store's lock
    lease = acquire(store, 300, holder="first")
    try:
        h = orphan(store, 1)
        # When another one starts (another server)
        with pytest.raises(GcBusy) as e:
            gc(other_client(store, request), dry_run=False, grace_seconds=0)
        # Then it is refused, naming the holder, and deletes nothing
        assert "first" in str(e.value) and h in stored(store)
    finally:
        assert release(store, lease)
    assert read_lock(store) is None
    assert gc(store, dry_run=False, grace_seconds=0).deleted_blobs == 1


def test_the_lock_is_created_only_if_absent(store):
    # The primitive the lock rests on: O_EXCL/link locally, If-None-Match: * on S3
    assert write_new(store, "v1/gc/probe", b"one")
    assert not write_new(store, "v1/gc/probe", b"two")
    assert store.fs.cat_file(store_path(store, "v1/gc/probe")) == b"one"


def test_a_crashed_collections_lock_expires_and_is_broken(store):
    # Given the lock of a collection that crashed (a short lease, run out)
    lease = acquire(store, 0.5 if not store.local else 300, holder="crashed")
    if store.local:
        age(store, LOCK, 400)
    h = orphan(store, 1)

    # When another collection runs once the lease has passed by the store's clock
    def collect():
        try:
            return gc(store, dry_run=False, grace_seconds=0)
        except GcBusy:
            return None

    report = wait_until(collect, "the expired lock broken", timeout=20)
    # Then it broke the lock, collected, and left no lock behind
    assert report.deleted_blobs == 1 and h not in stored(store)
    assert read_lock(store) is None
    assert not release(store, lease)  # the crashed holder's lock is not there to release


def test_a_writer_waits_for_a_live_collection_then_gives_up(store):
    # Given a collection holding the lock (a long lease)
    lease = acquire(store, 300, holder="slow")
    try:
        cid = new_checkpoint_id()
        # When a writer declares its intent, waiting at most half a second
        with pytest.raises(StoreError, match="garbage collection of the store .*slow"):
            declare_intent(store, cid, [orphan(store, 1)], max_wait=0.5)
        # Then it gave up without leaving its intent
        assert intent_of(store, cid) == []
    finally:
        release(store, lease)


def test_a_writer_does_not_wait_for_an_expired_lock(store):
    # Given the lock of a crashed collection whose half-second lease has passed
    lease = acquire(store, 0.5, holder="crashed")
    cid = new_checkpoint_id()
    h = orphan(store, 1)
    # When a writer declares its intent
    started = time.monotonic()
    rel = declare_intent(store, cid, [h], max_wait=30)
    # Then it went on once the lease had passed, its intent in place
    assert time.monotonic() - started < 10
    assert [o.rel for o in intent_of(store, cid)] == [rel]
    assert referenced(read_json(store, intent_of(store, cid))[store_path(store, rel)]) == {h}
    release(store, lease)


def test_drop_intents_removes_every_intent_of_a_checkpoint(store):
    cid = new_checkpoint_id()
    declare_intent(store, cid, [orphan(store, 1)])
    declare_intent(store, cid, [orphan(store, 2)])  # a second batch of the same pause
    other = new_checkpoint_id()
    declare_intent(store, other, [orphan(store, 3)])
    assert drop_intents(store, cid) == 2
    assert intent_of(store, cid) == [] and len(intent_of(store, other)) == 1


# -- verify ----------------------------------------------------------------------------------------
def flip_a_byte(store, doc):
    h = doc["arrays"][0]["blob"]
    path = store_path(store, blob_path(h))
    data = bytearray(store.fs.cat_file(path))
    data[len(data) // 2] ^= 1
    store.fs.pipe_file(path, bytes(data))
    return "does not match its checksum"


def delete_a_blob(store, doc):
    store.fs.rm_file(store_path(store, blob_path(doc["arrays"][0]["blob"])))
    return "is missing from the store"


def sign_with_another_key(store, doc):
    store.write_manifest(Signer(b"x" * 32).sign({k: v for k, v in doc.items() if k != "signature"}))
    return "signature does not match"


def edit_the_manifest(store, doc):
    store.write_manifest({**doc, "parent": "20261202T101500Z-00000000"})
    return "signature does not match"


@pytest.mark.parametrize(
    "damage",
    [None, flip_a_byte, delete_a_blob, sign_with_another_key, edit_the_manifest],
    ids=["intact", "flipped-byte", "missing-blob", "another-key", "edited"],
)
def test_verify_reports_each_problem_per_checkpoint(store, damage):
    # Given two checkpoints, the newest damaged in one way
    good = checkpoint(store, "s1", {"a": array(1)})
    bad = checkpoint(store, "s2", {"b": array(2)})
    words = damage(store, bad) if damage else None
    # When the store is verified
    report = verify(store, KEY)
    # Then the damaged checkpoint, and only it, is reported with what is wrong
    by_id = {c.checkpoint_id: c for c in report.checkpoints}
    assert by_id[good["checkpoint_id"]].ok
    if damage is None:
        assert report.ok and report.as_dict()["ok"] is True
        return
    assert not report.ok and [c.checkpoint_id for c in report.failed] == [bad["checkpoint_id"]]
    assert any(words in p for p in by_id[bad["checkpoint_id"]].problems), by_id


# -- POST gpu-pause/api/store/gc -------------------------------------------------------------------
@pytest.fixture
def jp_server_config(jp_server_config):
    # No scheduled pass: what each test sees is what its own requests did.
    jp_server_config["StoreMaintenance"] = {"interval": 0}
    return jp_server_config


async def paused_notebook(lab) -> dict:
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], "import numpy as np; w = np.arange(250_000.0); print(w.sum())")
    assert (await lab.api("POST", f"sessions/{s['id']}/pause"))[0] == 202
    paused = await lab.wait_state(s["id"])
    assert paused["state"] == "paused", paused
    return paused


@pytest.fixture
def backend() -> str:
    """Where the test server's store is: "local" (a folder), or "s3" (moto's server)."""
    return "local"


@pytest.fixture
def gp_config(gp_config, backend, request):
    if backend == "s3":
        s3 = request.getfixturevalue("s3")
        gp_config["store_url"] = f"s3://{BUCKET}/{PREFIX}"
        gp_config["store_options"] = {"endpoint_url": s3.endpoint, "skip_instance_cache": True}
    return gp_config


@pytest.mark.parametrize("backend", ["local", "s3"])
@pytest.mark.gp_config(gc_grace_seconds=0)
async def test_the_endpoint_reports_on_a_dry_run_and_frees_on_a_real_one(lab, backend):
    # Given a paused session and two blobs nothing references
    paused = await paused_notebook(lab)
    store = lab.app.web_app.settings["gpu_pause_maintenance"].store  # the server's own store
    strays = {orphan(store, 1), orphan(store, 2)}
    before = stored(store)
    # When an admin asks for a dry run
    code, body = await lab.api("POST", "store/gc", {"dry_run": True})
    # Then it says what would be freed, and frees nothing
    assert code == 200, body
    assert (body["deleted_blobs"], body["freed_bytes"], body["kept_blobs"]) == (
        2,
        sum(before[h] for h in strays),
        len(before) - 2,
    )
    assert body["dry_run"] is True and stored(store) == before
    # When the admin runs it for real
    code, body = await lab.api("POST", "store/gc", {"dry_run": False})
    # Then exactly those bytes are freed: the store holds the live blobs and nothing else
    assert code == 200, body
    assert body["deleted_blobs"] == 2 and body["kept_blobs"] == len(before) - 2
    assert body["freed_bytes"] == sum(before[h] for h in strays)
    assert stored(store) == live(store)
    # And the paused session still resumes with its variables
    assert (await lab.api("POST", f"sessions/{paused['id']}/resume"))[0] == 202
    back = await lab.wait_state(paused["id"])
    assert back["state"] in ("active", "idle"), back
    assert (await lab.run(back["kernel_id"], "print(w.sum())")).strip() == "31249875000.0"


async def test_a_kernel_cannot_call_the_gc_endpoint(lab, store_dir):
    from tests.test_least_privilege import PROBE

    # Given a notebook's kernel, and a blob nothing references
    s = await lab.open_notebook()
    store = Store(str(store_dir))
    h = orphan(store, 1)
    # When code in the notebook calls store/gc with the kernel's capability, or passes it off
    # as a token
    cell = PROBE + (
        "\nbody = {'dry_run': False}"
        "\nprint(status('POST', '/gpu-pause/api/store/gc', mine, body),"
        " status('POST', '/gpu-pause/api/store/gc', 'token ' + mine.split(' ', 1)[1], body))"
    )
    out = await lab.run(s["kernel_id"], cell)
    # Then both are refused and nothing is deleted
    assert out.split() == ["403", "403"]
    assert h in stored(store)


BAD_BODIES = [
    ("not json", "bad-json", ["not valid JSON"]),
    ("[]", "bad-json", ["JSON object"]),
    ({}, "bad-field", ['{"dry_run": true}']),
    ({"dry_run": None}, "bad-field", ['{"dry_run": false}']),
    ({"dry_run": "yes"}, "bad-field", ["'dry_run'", '"yes"']),
    ({"dry_run": 1}, "bad-field", ["'dry_run'", "1"]),
    ({"dry_run": False, "grace": 0}, "unknown-field", ["'grace'"]),
]


@pytest.mark.gp_config(gc_grace_seconds=0)
@pytest.mark.parametrize(
    ("body", "reason", "words"), BAD_BODIES, ids=[repr(b[0]) for b in BAD_BODIES]
)
async def test_a_bad_gc_body_is_400_and_deletes_nothing(lab, store_dir, body, reason, words):
    store = Store(str(store_dir))
    h = orphan(store, 1)
    code, err = await lab.api("POST", "store/gc", body)
    assert code == 400 and err["reason"] == reason, err
    for w in words:
        assert w in err["message"], err["message"]
    assert h in stored(store)


@pytest.mark.gp_config(gc_grace_seconds=0)
async def test_gc_while_another_runs_is_409_but_a_dry_run_still_answers(lab, store_dir):
    # Given another collection holding the store's lock (another server's)
    store = Store(str(store_dir))
    h = orphan(store, 1)
    lease = acquire(store, 300, holder="the other server")
    try:
        # When an admin asks this server to collect
        code, err = await lab.api("POST", "store/gc", {"dry_run": False})
        # Then it answers 409 saying who holds the lock, and deletes nothing
        assert code == 409 and err["reason"] == "gc-running", err
        assert "the other server" in err["message"] and h in stored(store)
        # And a dry run (which takes no lock) still reports
        code, body = await lab.api("POST", "store/gc", {"dry_run": True})
        assert code == 200 and body["deleted_blobs"] == 1
    finally:
        release(store, lease)


# -- two servers sharing one store ----------------------------------------------------------------
BIG = "import numpy as np; w = np.random.default_rng(5).standard_normal(12_000_000)"
DIGEST = "import hashlib; print(hashlib.sha256(w.tobytes()).hexdigest())"


def test_gc_on_one_server_while_another_pauses_reusing_old_blobs(tmp_path):
    # Given two servers sharing one store, each with its own records and key, collecting with
    # no grace period
    shared = tmp_path / "store"

    def server(name):
        d = tmp_path / name
        return Server(
            d,
            args=(
                f"--GpuPauseApp.store_url={shared}",
                f"--GpuPauseApp.db_path={d / 'records.sqlite'}",
                f"--GpuPauseApp.secret_file={d / 'secret'}",
                "--GpuPauseApp.gc_grace_seconds=0",
                "--StoreMaintenance.interval=0",
            ),
            own_paths=False,
        )

    a, b = server("a"), server("b")
    a.start()
    b.start()
    try:
        # And a notebook on b with a 96 MB array, paused once, resumed, and that checkpoint
        # deleted (as retention would): the array's blob is old and referenced by nothing
        s = b.open_notebook("big.ipynb")
        b.run(s["kernel_id"], BIG)
        first = b.pause(s["id"])
        back = b.resume(s["id"])
        digest = b.run(back["kernel_id"], DIGEST)
        (shared / "v1" / "sessions" / s["id"] / f"{first['checkpoint']['id']}.json").unlink()
        # And a notebook paused on a
        mine = a.open_notebook("mine.ipynb")
        a.run(mine["kernel_id"], "x = 42")
        a.pause(mine["id"])

        # When b pauses again (reusing the array's blob) while a collects, again and again
        code, body = b.api("POST", f"gpu-pause/api/sessions/{s['id']}/pause")
        assert code == 202, body
        reports = []
        while b.api("GET", f"gpu-pause/api/sessions/{s['id']}")[1]["state"] == "pausing":
            code, body = a.api("POST", "gpu-pause/api/store/gc", {"dry_run": False})
            assert code in (200, 409), body
            reports.append(code)
        paused = b.wait_state(s["id"])
        a.api("POST", "gpu-pause/api/store/gc", {"dry_run": False})

        # Then b's pause succeeded and its checkpoint verifies with every blob present
        assert paused["state"] == "paused", paused
        assert 200 in reports
        code, listed = b.api("GET", f"gpu-pause/api/sessions/{s['id']}/checkpoints")
        assert [c["valid"] for c in listed["checkpoints"]] == [True]
        assert verify(Store(str(shared)), (tmp_path / "b" / "secret").read_bytes()).checkpoints
        # And every session resumes with its state
        again = b.resume(s["id"])
        assert b.run(again["kernel_id"], DIGEST) == digest
        back_a = a.resume(mine["id"])
        assert a.run(back_a["kernel_id"], "print(x)").strip() == "42"
    finally:
        a.stop()
        b.stop()


async def test_stopping_the_server_never_leaves_its_gc_lock_behind(store_dir):
    from jupyter_gpu_pause.server.integrations.maintenance import StoreMaintenance

    # Given a server's maintenance collecting garbage in a store with many blobs
    store = Store(str(store_dir))
    for seed in range(40):
        orphan(store, seed)
    m = StoreMaintenance(store=store, grace_seconds=0)
    running = asyncio.ensure_future(m.collect(dry_run=False))
    await asyncio.sleep(0)  # the collection has started
    # When the server stops
    await asyncio.wait_for(m.stop(), 10)
    # Then the collection has ended (done, or stopped at its next step) and the lock is gone
    await asyncio.gather(running, return_exceptions=True)
    assert read_lock(store) is None
