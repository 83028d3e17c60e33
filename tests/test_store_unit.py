"""The checkpoint store on its own, with real files and no Jupyter server.

Everything a resume trusts goes through ``jupyter_gpu_pause.store``: blobs are named by the hash
of their bytes, manifests list them and are signed, the signing key lives in one private file.
These tests pin down the promises a user relies on without ever starting a kernel: a damaged
blob is refused before anything is unpickled, a hash can never name a path outside the store,
what the kernel reports is checked field by field before it is signed, checkpoint files and the
key are private to their owner, and two servers starting at once agree on one key.
"""

from __future__ import annotations

import copy
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import xxhash

from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
from jupyter_gpu_pause.store import IntegrityError, Signer, Store, StoreError
from jupyter_gpu_pause.store.format import (
    FORMAT,
    blob_path,
    build_manifest,
    check_checkpoint_id,
    new_checkpoint_id,
    parse_manifest,
)
from jupyter_gpu_pause.store.keyfile import KeyFileError, create_secret, load_secret
from jupyter_gpu_pause.store.private import private_file
from jupyter_gpu_pause.store.schema import MAX_TEXT, ManifestError

KEY = b"k" * 32
SESSION = "s1"
T0 = datetime(2026, 12, 2, 10, 15, tzinfo=timezone.utc)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def leftovers(root) -> list[str]:
    """Temporary files of interrupted writes (``<name>.tmp-<hex>``) anywhere under root."""
    return [str(p) for p in root.rglob("*.tmp-*")]


@pytest.fixture
def permissive_umask():
    """A umask that takes nothing away: private modes must come from the code, not the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def store(store_dir) -> Store:
    return Store(str(store_dir))


def stored(store_dir, h: str):
    return store_dir / blob_path(h)


# -- blobs ---------------------------------------------------------------------------------------

PAYLOAD = np.arange(50_000, dtype=np.float32)

BUFFERS = [
    pytest.param(lambda: PAYLOAD.tobytes(), id="bytes"),
    pytest.param(lambda: bytearray(PAYLOAD.tobytes()), id="bytearray"),
    pytest.param(lambda: PAYLOAD.copy(), id="numpy-1d"),
    pytest.param(lambda: PAYLOAD.reshape(250, 200).copy(), id="numpy-2d"),
    pytest.param(lambda: memoryview(PAYLOAD.copy()), id="memoryview"),
    pytest.param(lambda: memoryview(PAYLOAD.tobytes())[:], id="memoryview-of-bytes"),
]


@pytest.mark.parametrize("make", BUFFERS)
def test_put_blob_stores_bytes_under_their_xxh3_128(store, store_dir, make):
    # Given the same 200 kB as some kind of buffer
    data = make()
    # When it is stored
    h, written = store.put_blob(data)
    # Then its name is the xxh3-128 of its bytes, whatever the buffer type, and the file holds them
    assert h == xxhash.xxh3_128_hexdigest(PAYLOAD.tobytes())
    assert written is True
    assert stored(store_dir, h).read_bytes() == PAYLOAD.tobytes()
    assert store.blob_size(h) == PAYLOAD.nbytes


def test_put_blob_twice_keeps_the_first_copy(store, store_dir):
    # Given a blob stored from bytes
    h, first = store.put_blob(PAYLOAD.tobytes())
    before = os.stat(stored(store_dir, h))
    # When the same content is stored again, from a numpy array and from a memoryview
    again = [store.put_blob(PAYLOAD.copy()), store.put_blob(memoryview(PAYLOAD.copy()))]
    # Then it is recognised as already there: same name, nothing written, one file
    assert first is True
    assert again == [(h, False), (h, False)]
    after = os.stat(stored(store_dir, h))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in (store_dir / "v1" / "blobs").rglob("*") if p.is_file()] == [h]


def test_put_blob_replaces_a_short_copy(store, store_dir):
    # Given a stored blob that lost its tail
    h, _ = store.put_blob(PAYLOAD.tobytes())
    with open(stored(store_dir, h), "r+b") as f:
        f.truncate(100)
    # When the same content is stored again
    result = store.put_blob(PAYLOAD.tobytes())
    # Then it is written again, and reads back whole
    assert result == (h, True)
    out = np.empty(PAYLOAD.nbytes, dtype=np.uint8)
    store.read_blob_into(h, out)
    assert out.tobytes() == PAYLOAD.tobytes()


@pytest.mark.parametrize(
    "make_out",
    [
        pytest.param(lambda n: np.empty(n, dtype=np.uint8), id="numpy"),
        pytest.param(lambda n: bytearray(n), id="bytearray"),
        pytest.param(lambda n: np.empty(n // 4, dtype=np.float32), id="numpy-float32"),
    ],
)
def test_read_blob_into_fills_the_buffer(store, make_out):
    # Given a stored blob
    h, _ = store.put_blob(PAYLOAD)
    out = make_out(PAYLOAD.nbytes)
    # When it is read into a buffer of its size
    store.read_blob_into(h, out)
    # Then the buffer holds exactly the stored bytes
    assert bytes(memoryview(out).cast("B")) == PAYLOAD.tobytes()


def flip_one_byte(path):
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)


def append_one_byte(path):
    with open(path, "ab") as f:
        f.write(b"\0")


def delete(path):
    path.unlink()


DAMAGE = [
    pytest.param(flip_one_byte, "blob-hash", id="one-byte-flipped"),
    pytest.param(truncate, "blob-size", id="truncated"),
    pytest.param(append_one_byte, "blob-size", id="one-byte-longer"),
    pytest.param(delete, "blob-missing", id="deleted"),
]

READERS = [
    pytest.param(
        lambda store, h, n: store.read_blob_into(h, np.empty(n, dtype=np.uint8)),
        id="read_blob_into",
    ),
    pytest.param(lambda store, h, n: store.verify_blob(h, n), id="verify_blob"),
]


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize(("damage", "check"), DAMAGE)
def test_damaged_blob_is_refused(store, store_dir, read, damage, check):
    # Given a stored blob that reads back fine
    h, _ = store.put_blob(PAYLOAD)
    read(store, h, PAYLOAD.nbytes)
    # When its file is damaged on disk
    damage(stored(store_dir, h))
    # Then reading or verifying it fails, naming the check that caught it and the blob
    with pytest.raises(IntegrityError, match=h) as e:
        read(store, h, PAYLOAD.nbytes)
    assert e.value.check == check


def test_read_blob_into_a_buffer_of_the_wrong_size_is_refused(store):
    # Given a stored blob
    h, _ = store.put_blob(PAYLOAD)
    # When it is read into a buffer one byte too short
    # Then the size check fails rather than returning a cut blob
    with pytest.raises(IntegrityError) as e:
        store.read_blob_into(h, bytearray(PAYLOAD.nbytes - 1))
    assert e.value.check == "blob-size"


def test_writes_leave_no_temporary_files(store, store_dir):
    # Given a store that received blobs and manifests
    for i in range(5):
        store.put_blob(np.full(1000, i, dtype=np.int64))
        store.write_manifest(
            {"session_id": SESSION, "checkpoint_id": new_checkpoint_id(T0 + timedelta(i))}
        )
    # When a write fails half-way (a buffer that cannot be written as one run of bytes)
    strided = np.arange(10_000, dtype=np.int64)[::2]
    with pytest.raises(StoreError, match="could not write"):
        store.put_blob(strided, h="0" * 32)
    # Then neither the finished writes nor the failed one left a temporary file, and the failed
    # blob does not exist under its name
    assert leftovers(store_dir) == []
    assert store.blob_size("0" * 32) is None
    assert len(store.list_checkpoints(SESSION)) == 5


def test_a_failed_rename_leaves_no_temporary_file(store, store_dir):
    # Given a folder squatting the name a blob is about to be written under
    h = xxhash.xxh3_128_hexdigest(b"x" * 100)
    stored(store_dir, h).mkdir(parents=True)
    # When the blob is written, and the final rename fails
    with pytest.raises(StoreError, match="could not write"):
        store.put_blob(b"x" * 100)
    # Then no temporary file is left behind
    assert leftovers(store_dir) == []


def test_store_files_and_folders_are_private(store, store_dir, permissive_umask):
    # Given a store folder that does not exist yet, and a umask that would allow anything
    assert not store_dir.exists()
    # When a blob and a manifest are written
    store.put_blob(PAYLOAD)
    store.write_manifest({"session_id": SESSION, "checkpoint_id": new_checkpoint_id()})
    # Then every folder the store created is 0700 and every file 0600
    folders = [store_dir, *(p for p in store_dir.rglob("*") if p.is_dir())]
    files = [p for p in store_dir.rglob("*") if p.is_file()]
    assert len(folders) >= 6 and len(files) == 2
    assert {str(p): oct(mode(p)) for p in folders} == {str(p): "0o700" for p in folders}
    assert {str(p): oct(mode(p)) for p in files} == {str(p): "0o600" for p in files}


# -- a hash names a path ---------------------------------------------------------------------

NOT_HASHES = [
    "../../etc/passwd",
    "AB" * 16,
    "",
    "0" * 31,
    "0" * 33,
    "g" * 32,
    "/" + "0" * 31,
    "00/" + "0" * 29,
    None,
    0,
    pytest.param(
        "0" * 32 + "\n",
        id="trailing-newline",
    ),
]


@pytest.mark.parametrize("h", NOT_HASHES)
def test_blob_path_refuses_what_is_not_a_hash(h):
    # Given something that is not 32 lowercase hex digits
    # When it is turned into a store path
    # Then it is refused: a hash must never reach outside the blob folder
    with pytest.raises(ValueError, match="is not a blob hash"):
        blob_path(h)


def test_blob_path_of_a_hash():
    # Given a real hash
    h = xxhash.xxh3_128_hexdigest(b"hello")
    # When it is turned into a store path
    # Then the path is under the blob folder, fanned out by its first two digits
    assert blob_path(h) == f"v1/blobs/{h[:2]}/{h}"


def test_store_refuses_a_path_given_as_hash(store, tmp_path, store_dir):
    # Given a name that climbs out of the store
    evil = "../../escaped"
    # When the store is asked to write, read or verify a blob by that name
    # Then every call is refused and nothing is written anywhere
    with pytest.raises(ValueError):
        store.put_blob(b"data", h=evil)
    with pytest.raises(ValueError):
        store.read_blob_into(evil, bytearray(4))
    with pytest.raises(ValueError):
        store.verify_blob(evil, 4)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# -- listing checkpoints -----------------------------------------------------------------------


def write_strays(store_dir, cid: str) -> None:
    """Files that are in a session folder but are not checkpoints."""
    folder = store_dir / "v1" / "sessions" / SESSION
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.json").write_text("{}")
    (folder / f"{cid}.json.bak").write_text("{}")
    (folder / f"{cid}.json.tmp-0123456789ab").write_text("{")  # an interrupted write
    (folder / "20261202T101500Z-1a2b3c4d").mkdir()


def test_list_checkpoints_oldest_first_without_strays(store, store_dir):
    # Given three checkpoints written out of order, and stray files next to them
    ids = [new_checkpoint_id(T0 + timedelta(minutes=m)) for m in (5, 0, 10)]
    for cid in ids:
        store.write_manifest({"session_id": SESSION, "checkpoint_id": cid})
    write_strays(store_dir, new_checkpoint_id(T0 + timedelta(minutes=20)))
    # When the session's checkpoints are listed
    listed = store.list_checkpoints(SESSION)
    # Then only the three checkpoints come back, oldest first
    assert listed == [ids[1], ids[0], ids[2]]


def test_checkpoints_made_within_one_second_list_in_the_order_they_were_made(store):
    # Given a session paused, resumed and paused again within the same second, many times over
    for _ in range(50):
        ids = [new_checkpoint_id(T0 + timedelta(microseconds=us)) for us in (3, 480_000, 999_999)]
        # Then each id still passes the id check, and they sort as they were made
        assert [check_checkpoint_id(i) for i in ids] == sorted(ids)
    for cid in reversed(ids):
        store.write_manifest({"session_id": SESSION, "checkpoint_id": cid})
    # And the store lists them oldest first, the order retention and the fallback rely on
    assert store.list_checkpoints(SESSION) == ids


def test_list_checkpoints_of_an_unknown_session_is_empty(store):
    # Given an empty store
    # When a session it never saw is listed
    # Then there is nothing, and no error
    assert store.list_checkpoints("nobody") == []


def test_has_checkpoints(store, store_dir):
    # Given an empty store
    # Then it has no checkpoints
    assert store.has_checkpoints() is False
    # When a session folder holds only files that are not checkpoints
    write_strays(store_dir, new_checkpoint_id(T0))
    (store_dir / "v1" / "sessions" / "notes.json").write_text("{}")
    # Then it still has none
    assert store.has_checkpoints() is False
    # When a manifest is written
    store.write_manifest({"session_id": "s2", "checkpoint_id": new_checkpoint_id(T0)})
    # Then it has one
    assert store.has_checkpoints() is True


def test_has_checkpoints_ignores_an_id_with_another_extension(store, store_dir):
    # Given a session folder with only an editor's backup named after a checkpoint
    folder = store_dir / "v1" / "sessions" / SESSION
    folder.mkdir(parents=True)
    (folder / "20261202T101500Z-1a2b3c4d.orig").write_text("{}")
    # When the store is asked whether it has checkpoints
    # Then it agrees with list_checkpoints: none
    assert store.list_checkpoints(SESSION) == []
    assert store.has_checkpoints() is False


# -- manifests ---------------------------------------------------------------------------------


@pytest.fixture
def capture(store) -> dict:
    """What the kernel's agent reports after writing the blobs of a real capture."""
    ns = {
        "__name__": "__main__",
        "a": np.arange(300_000, dtype=np.float32),
        "d": {"x": 1},
    }
    plan = make_plan(ns, {}, registered=["a"], mode="namespace")
    return write_plan(plan, store)


@pytest.fixture
def manifest_args(capture) -> dict:
    return {
        "session_id": SESSION,
        "checkpoint_id": new_checkpoint_id(T0),
        "parent": None,
        "kernel": {"python": "3.11"},
        "origin": {"host": "h", "gpu": None},
        "capture": capture,
    }


def test_signed_manifest_round_trips_through_the_store(store, capture, manifest_args):
    # Given a manifest built from a real capture and signed
    doc = Signer(KEY).sign(build_manifest(**manifest_args))
    # When it is written and read back
    store.write_manifest(doc)
    back = store.read_manifest(SESSION, manifest_args["checkpoint_id"])
    # Then its signature verifies, it parses, and it describes the capture
    Signer(KEY).verify(back)
    m = parse_manifest(back)
    assert back == doc
    assert (m.session_id, m.id, back["format"]) == (SESSION, manifest_args["checkpoint_id"], FORMAT)
    assert m.blobs == capture["blobs"]
    assert m.total_bytes == 300_000 * 4 + capture["pickle"]["bytes"]
    assert [o["name"] for o in m.summary()["objects"]] == ["a", "d"]
    assert store.list_checkpoints(SESSION) == [manifest_args["checkpoint_id"]]
    for h, meta in m.blobs.items():
        store.verify_blob(h, meta["bytes"])


def put(doc: dict, path: tuple, value) -> None:
    """Set ``doc[path[0]][path[1]]…`` to value (or to value(old) when it is callable)."""
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value(doc[path[-1]]) if callable(value) else value


def plus_one(n):
    return n + 1


# (where in build_manifest's arguments, what to put there, what the error must say);
# {A} is the array's blob, {S} the pickle stream's size.
TAMPERED = [
    pytest.param(
        ("capture", "blobs", "../x"),
        {"bytes": 1, "kind": "buffer"},
        "blobs names '../x', which is not a blob hash",
        id="blob-key-not-a-hash",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "bytes"),
        -1,
        "blob {A} bytes must be a whole number of bytes >= 0, not -1",
        id="negative-bytes",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "bytes"),
        True,
        "blob {A} bytes must be a whole number of bytes >= 0, not True",
        id="bool-as-bytes",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "bytes"),
        "400000",
        "blob {A} bytes must be a whole number of bytes >= 0, not '400000'",
        id="text-as-bytes",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "kind"),
        "script",
        "blob {A} has unknown kind 'script'",
        id="unknown-blob-kind",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "device"),
        "cuda:0; rm",
        "blob {A} device has an invalid value 'cuda:0; rm'",
        id="device-with-a-command",
    ),
    pytest.param(
        ("capture", "blobs", "{A}", "dtype"),
        "f" * (MAX_TEXT + 1),
        f"blob {{A}} dtype must be a text of at most {MAX_TEXT} characters",
        id="dtype-too-long",
    ),
    pytest.param(
        ("capture", "storages"),
        [{"blob": "e" * 32, "nbytes": 4, "device": "cpu"}],
        f"storage #1 refers to blob '{'e' * 32}', which the manifest does not list",
        id="storage-blob-not-listed",
    ),
    pytest.param(
        ("capture", "arrays", 0, "blob"),
        "f" * 32,
        f"array #1 refers to blob '{'f' * 32}', which the manifest does not list",
        id="array-blob-not-listed",
    ),
    pytest.param(
        ("capture", "arrays", 0, "blob"),
        ["f" * 32],
        "array #1 refers to blob ['fff",
        id="array-blob-a-list",
    ),
    pytest.param(
        ("capture", "pickle", "blob"),
        "d" * 32,
        f"pickle refers to blob '{'d' * 32}', which the manifest does not list",
        id="pickle-blob-not-listed",
    ),
    pytest.param(
        ("capture", "blobs", "c" * 32),
        {"bytes": 3, "kind": "buffer"},
        "blobs lists 1 blob(s) nothing refers to",
        id="blob-nothing-refers-to",
    ),
    pytest.param(
        ("capture", "pickle", "bytes"),
        plus_one,
        "pickle claims {S1} bytes but its blob has {S}",
        id="pickle-bytes-not-its-blob",
    ),
    pytest.param(
        ("capture", "objects", 1, "length"),
        plus_one,
        "object #2 (d) lies outside the pickle stream of {S} bytes",
        id="object-past-the-stream",
    ),
    pytest.param(
        ("capture", "objects", 0, "offset"),
        lambda _: 10**9,
        "object #1 (a) lies outside the pickle stream of {S} bytes",
        id="object-offset-far-away",
    ),
    pytest.param(
        ("capture", "objects", 1, "offset"),
        -1,
        "object #2 (d) offset must be a whole number of bytes >= 0, not -1",
        id="object-negative-offset",
    ),
    pytest.param(
        ("capture", "objects", 1, "name"),
        "a b",
        "object #2 has a name that is not a variable name: 'a b'",
        id="name-with-a-space",
    ),
    pytest.param(
        ("capture", "objects", 1, "name"),
        "x;import os",
        "object #2 has a name that is not a variable name: 'x;import os'",
        id="name-with-code",
    ),
    pytest.param(
        ("capture", "objects", 1, "name"),
        "",
        "object #2 has a name that is not a variable name: ''",
        id="empty-name",
    ),
    pytest.param(
        ("capture", "objects", 1, "name"),
        "a",
        "object #2 repeats the name 'a'",
        id="same-name-twice",
    ),
    pytest.param(
        ("capture", "objects", 1, "kind"),
        "exec",
        "object #2 (d) has an invalid kind 'exec'",
        id="unknown-object-kind",
    ),
    pytest.param(
        ("capture", "skipped"),
        [{"name": "g"}],
        "skipped #1 reason must be a text",
        id="skipped-without-reason",
    ),
    pytest.param(
        ("capture", "skipped"),
        [{"name": "g", "reason": "r" * (MAX_TEXT + 1)}],
        f"skipped #1 reason must be a text of at most {MAX_TEXT} characters",
        id="reason-too-long",
    ),
    pytest.param(
        ("capture", "registered"),
        ["a b"],
        "registered name has an invalid value 'a b'",
        id="registered-not-a-name",
    ),
    pytest.param(("kernel",), ["python", "3.11"], "kernel must be an object", id="kernel-a-list"),
    pytest.param(
        ("kernel", "python"),
        {"major": 3},
        "kernel python must be a text",
        id="kernel-value-not-text",
    ),
    pytest.param(
        ("origin", "host"),
        "h" * (MAX_TEXT + 1),
        f"origin host must be a text of at most {MAX_TEXT} characters",
        id="host-too-long",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), TAMPERED)
def test_build_manifest_refuses_a_tampered_capture(manifest_args, path, value, message):
    # Given the report of a real capture, changed in one field as a rogue kernel could
    args = copy.deepcopy(manifest_args)
    c = args["capture"]
    names = {"A": c["arrays"][0]["blob"], "S": c["pickle"]["bytes"], "S1": c["pickle"]["bytes"] + 1}
    put(args, tuple(p.format(**names) if isinstance(p, str) else p for p in path), value)
    # When the server builds the manifest it would sign
    # Then it refuses, and the message names the field and what is wrong with it
    with pytest.raises(ManifestError, match=re.escape(message.format(**names))):
        build_manifest(**args)


@pytest.mark.parametrize("name", ["λ", "Δt", "données", "_x1"])
def test_unicode_variable_names_are_accepted(manifest_args, name):
    # Given a capture whose second variable has a Unicode name, as Python allows
    args = copy.deepcopy(manifest_args)
    args["capture"]["objects"][1]["name"] = name
    # When its manifest is built, signed and parsed back
    doc = Signer(KEY).sign(build_manifest(**args))
    m = parse_manifest(doc)
    # Then the name survives as it was
    assert [o["name"] for o in m.summary()["objects"]] == ["a", name]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(("totals", "bytes"), plus_one, "totals do not add up", id="totals-bytes"),
        pytest.param(
            ("format",),
            "jupyter-gpu-pause/2",
            "unknown checkpoint format 'jupyter-gpu-pause/2'",
            id="unknown-format",
        ),
        pytest.param(
            ("checkpoint_id",), "../../x", "'../../x' is not a checkpoint id", id="bad-id"
        ),
    ],
)
def test_parse_manifest_refuses_a_signed_but_wrong_manifest(manifest_args, path, value, message):
    # Given a manifest changed in one field and then signed with the right key
    doc = build_manifest(**manifest_args)
    put(doc, path, value)
    doc = Signer(KEY).sign(doc)
    Signer(KEY).verify(doc)
    # When it is parsed
    # Then the signature is not enough: the content is refused, saying what is wrong
    with pytest.raises(ManifestError, match=re.escape(message)):
        parse_manifest(doc)


# -- signatures --------------------------------------------------------------------------------


def rename_first_object(doc):
    doc["objects"][0]["name"] = "b"


def raise_the_total(doc):
    doc["totals"]["bytes"] += 1


def drop_the_signature(doc):
    del doc["signature"]


@pytest.mark.parametrize(
    ("verifier", "change"),
    [
        pytest.param(Signer(KEY), rename_first_object, id="renamed-after-signing"),
        pytest.param(Signer(KEY), raise_the_total, id="total-edited-after-signing"),
        pytest.param(Signer(KEY), drop_the_signature, id="signature-removed"),
        pytest.param(Signer(b"j" * 32), None, id="signed-with-another-key"),
    ],
)
def test_signature_refuses_an_edited_or_foreign_manifest(manifest_args, verifier, change):
    # Given a signed manifest, then edited (or checked with another installation's key)
    doc = Signer(KEY).sign(build_manifest(**manifest_args))
    Signer(KEY).verify(copy.deepcopy(doc))
    if change:
        change(doc)
    # When its signature is verified
    # Then it is refused by the signature check
    with pytest.raises(IntegrityError) as e:
        verifier.verify(doc)
    assert e.value.check == "signature"


# -- the signing key file ----------------------------------------------------------------------


def test_create_secret_makes_a_private_key_in_a_private_folder(tmp_path, permissive_umask):
    # Given a key path in folders that do not exist, and a umask that would allow anything
    path = tmp_path / "data" / "gpu_pause" / "secret"
    # When the key is created
    key = create_secret(path)
    # Then it is long enough, only its owner can read it, its new folders are private, and no
    # temporary file is left next to it
    assert len(key) >= 32
    assert mode(path) == 0o600
    assert mode(tmp_path / "data") == mode(tmp_path / "data" / "gpu_pause") == 0o700
    assert os.listdir(path.parent) == ["secret"]
    assert load_secret(path) == key


def test_create_secret_never_replaces_a_key(tmp_path):
    # Given a key that exists
    path = tmp_path / "secret"
    key = create_secret(path)
    raw = path.read_bytes()
    # When it is created again
    again = create_secret(path)
    # Then the existing key is returned and the file is untouched
    assert again == key
    assert path.read_bytes() == raw
    assert os.listdir(tmp_path) == ["secret"]


def test_create_secret_does_not_replace_a_readable_key(tmp_path):
    # Given a key file others can read
    path = tmp_path / "secret"
    path.write_bytes(b"a" * 64)
    path.chmod(0o644)
    # When the server tries to create its key
    # Then it refuses to use the exposed key, and does not replace it either
    with pytest.raises(KeyFileError, match="chmod 600"):
        create_secret(path)
    assert path.read_bytes() == b"a" * 64


def test_load_secret_of_a_missing_file_is_none(tmp_path):
    # Given no key file
    # When it is loaded
    # Then there is no key, and no error
    assert load_secret(tmp_path / "secret") is None


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604, 0o660])
def test_load_secret_refuses_a_key_others_can_read(tmp_path, file_mode):
    # Given a valid key file whose mode lets others read it
    path = tmp_path / "secret"
    path.write_bytes(b"0123456789abcdef" * 4)
    path.chmod(file_mode)
    # When it is loaded
    # Then it is refused, naming the file and how to fix it
    with pytest.raises(KeyFileError, match=re.escape(f"chmod 600 {path}")):
        load_secret(path)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"0123456789abcde", id="15-bytes"),
        pytest.param(b"abc" + b"\n" * 40, id="3-bytes-and-blank-lines"),
    ],
)
def test_load_secret_refuses_a_short_key(tmp_path, content):
    # Given a private key file too short to be a key
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(0o600)
    # When it is loaded
    # Then it is refused as damaged, naming the file
    with pytest.raises(KeyFileError, match=re.escape(str(path))):
        load_secret(path)


def test_load_secret_refuses_a_folder(tmp_path):
    # Given a folder where the key should be
    path = tmp_path / "secret"
    path.mkdir(mode=0o700)
    # When it is loaded
    # Then it is refused
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_secret(path)


def test_servers_starting_at_once_agree_on_one_key(tmp_path):
    # Given many servers starting at the same moment on empty data folders, again and again
    threads, rounds = 16, 30
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for i in range(rounds):
            path = tmp_path / f"round{i}" / "data" / "secret"
            barrier = threading.Barrier(threads, timeout=60)

            def start(path=path, barrier=barrier):
                barrier.wait()
                return create_secret(path)

            # When each creates the signing key
            futures = [pool.submit(start) for _ in range(threads)]
            keys = [f.result() for f in futures]  # re-raises any error
            # Then all of them got the one key that is in the file, whole and private
            assert len(set(keys)) == 1, f"round {i}: {len(set(keys))} different keys"
            assert keys[0] == path.read_bytes().strip() and len(keys[0]) >= 32
            assert mode(path) == 0o600
            assert os.listdir(path.parent) == ["secret"]


# -- private files -----------------------------------------------------------------------------


def test_private_file_creates_a_private_file(tmp_path, permissive_umask):
    # Given a path in a folder that does not exist, and a umask that would allow anything
    path = tmp_path / "db" / "records.sqlite"
    # When the file is made private
    private_file(str(path))
    # Then it exists, empty, readable by its owner only, in a private folder
    assert path.read_bytes() == b""
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


@pytest.mark.parametrize("file_mode", [0o644, 0o666, 0o600])
def test_private_file_tightens_an_existing_file(tmp_path, file_mode):
    # Given a file left readable by an older version, holding data
    path = tmp_path / "records.sqlite"
    path.write_bytes(b"SQLite format 3\0")
    path.chmod(file_mode)
    # When the file is made private
    private_file(str(path))
    # Then only its owner can read it, and its content is kept
    assert mode(path) == 0o600
    assert path.read_bytes() == b"SQLite format 3\0"


# -- prefetch (a resume warms the page cache while its kernel starts) ----------------------------


def test_prefetch_reads_the_blobs_in_order_within_its_budget(store):
    # Given three stored blobs of 200 kB and a hash the store does not have
    hashes = [store.put_blob(PAYLOAD.tobytes() + bytes([i]))[0] for i in range(3)]
    missing = "0" * 32
    size = PAYLOAD.nbytes + 1
    # When a resume prefetches them all, the missing one among them
    # Then every stored byte is read, the missing blob left for the restore to report
    assert store.prefetch([hashes[0], missing, *hashes[1:]], 10 * size, lambda: False) == 3 * size
    # And a budget of half a blob stops after the first read (8 MiB at most), not at the next blob
    assert store.prefetch(hashes, size // 2, lambda: False) == size
    # And once stopped, nothing more is read
    assert store.prefetch(hashes, 10 * size, lambda: True) == 0


def test_prefetch_of_a_remote_store_reads_nothing(tmp_path):
    # Given a store that is not a local folder (fsspec's in-memory file system)
    store = Store("memory://prefetch-test")
    h, _ = store.put_blob(PAYLOAD.tobytes())
    # When a resume asks to prefetch it, then nothing is read: there is no cache of ours to warm
    assert store.prefetch([h], 1 << 30, lambda: False) == 0
