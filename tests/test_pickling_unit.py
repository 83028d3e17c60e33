"""How a notebook's objects are pickled and rebuilt, without a kernel or a server.

A resume is only useful if the variables come back as they were *to each other*: the optimizer
still drives the model it was built on, two names for one tensor are still one tensor, a view
still looks into its base, and a function defined in the notebook still reads the notebook's
globals. Bulk data must never be copied through pickle, and one variable that cannot be saved
(an open file, a generator) must cost only that variable. These tests check each promise on
the real pickling code (``kernel/pickling.py``) and, for whole captures, through a real store.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from jupyter_gpu_pause.kernel.capture import CaptureError, make_plan, write_plan
from jupyter_gpu_pause.kernel.pickling import (
    ARRAY_BLOB_MIN_BYTES,
    RefTable,
    SegmentPickler,
    StreamUnpickler,
)
from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
from jupyter_gpu_pause.store import Signer, Store
from jupyter_gpu_pause.store.format import build_manifest, new_checkpoint_id, parse_manifest

MB = 1024 * 1024


class Segments:
    """Variables pickled one segment each on one shared memo, as a capture pickles them."""

    def __init__(self, user_ns: dict):
        self.user_ns = user_ns
        self.refs = RefTable()
        self.pickler = SegmentPickler(self.refs, user_ns)

    @property
    def data(self) -> list[bytes]:
        return self.pickler.segments()

    def dump(self, obj) -> bytes:
        self.pickler.dump(obj)
        return self.data[-1]

    def load(self, user_ns: dict, segments: list[bytes] | None = None) -> list:
        """Unpickle segments in order on one memo into ``user_ns``.

        Storages and arrays come back as copies (as they would from the store), so nothing
        restored shares memory with the originals.
        """
        storages: dict = {}
        arrays: dict = {}

        def resolve(pid):
            if pid[0] == "ns":
                return user_ns
            if pid[0] == "storage":
                if pid[1] not in storages:
                    storages[pid[1]] = self.refs.storages[pid[1]].clone()
                if pid[2] is None:
                    return storages[pid[1]]
                dtype = getattr(torch, pid[2].split(".", 1)[1])
                return torch.storage.TypedStorage(
                    wrap_storage=storages[pid[1]], dtype=dtype, _internal=True
                )
            if pid[0] == "array":
                if pid[1] not in arrays:
                    arrays[pid[1]] = self.refs.arrays[pid[1]].copy(order="K")
                return arrays[pid[1]]
            raise AssertionError(f"unexpected persistent id {pid!r}")

        segments = self.data if segments is None else segments
        unpickler = StreamUnpickler(b"".join(segments), resolve)
        starts = [sum(len(d) for d in segments[:i]) for i in range(len(segments))]
        return [unpickler.load_at(start) for start in starts]


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# -- shared references -------------------------------------------------------------------------


def make_sgd(params):
    return torch.optim.SGD(params, lr=0.5, momentum=0.9)


def make_adam(params):
    return torch.optim.Adam(params, lr=0.01)


def train_step(model, opt, x):
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


@pytest.mark.parametrize("make_optimizer", [make_sgd, make_adam], ids=["sgd", "adam"])
def test_optimizer_still_drives_its_model_after_restore(make_optimizer):
    # Given a model and an optimizer over its parameters, after one training step
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = make_optimizer(model.parameters())
    x = torch.randn(8, 4)
    train_step(model, opt, x)
    # When they are pickled as two variables on one memo and rebuilt
    seg = Segments({"__name__": "__main__"})
    seg.dump(model)
    seg.dump(opt)
    model2, opt2 = seg.load({})
    # Then the optimizer holds the restored model's own parameters and state, not copies
    assert opt2.param_groups[0]["params"][0] is model2.weight
    assert opt2.param_groups[0]["params"][1] is model2.bias
    assert all(any(p is q for q in model2.parameters()) for p in opt2.state)
    assert not shares_memory(model2.weight, model.weight)
    # And a step of the restored optimizer changes the restored model's weights exactly as the
    # original step changes the original's
    before = model2.weight.detach().clone()
    train_step(model2, opt2, x)
    train_step(model, opt, x)
    assert not torch.equal(model2.weight, before)
    assert torch.equal(model2.weight, model.weight)
    assert torch.equal(model2.bias, model.bias)


def test_two_names_for_one_tensor_come_back_as_one():
    # Given one tensor under two names
    t = torch.randn(1000)
    seg = Segments({})
    # When each name is pickled as its own segment
    seg.dump(t)
    second = seg.dump(t)
    a, b = seg.load({})
    # Then they are one object again, and the second segment is only a reference to the first
    assert a is b
    assert torch.equal(a, t)
    assert len(seg.refs.storages) == 1
    assert len(second) < 20


@pytest.mark.parametrize("view_first", [False, True], ids=["base-first", "view-first"])
def test_a_view_still_shares_storage_with_its_base(view_first):
    # Given a tensor and a view into it, under two names
    base = torch.arange(100, dtype=torch.float32)
    view = base[10:20]
    seg = Segments({})
    # When both are pickled and rebuilt (in either order)
    for obj in (view, base) if view_first else (base, view):
        seg.dump(obj)
    out = seg.load({})
    view2, base2 = out if view_first else out[::-1]
    # Then the view still looks into its base: a write through one shows in the other
    assert len(seg.refs.storages) == 1
    assert shares_memory(view2, base2) and not shares_memory(base2, base)
    assert view2.storage_offset() == 10 and torch.equal(view2, base[10:20])
    base2[10] = -1.0
    assert view2[0].item() == -1.0
    assert base[10].item() == 10.0


# -- bulk bytes --------------------------------------------------------------------------------


def test_bulk_bytes_never_go_through_pickle():
    # Given a 1 MB tensor and a 1 MB numpy array
    t = torch.randn(MB // 4)
    a = np.random.default_rng(0).random(MB // 8)
    seg = Segments({})
    # When they are pickled
    data = seg.dump(t) + seg.dump(a)
    # Then the pickle holds only references; the bytes are left to the blobs
    assert len(data) < 10_000
    assert len(seg.refs.storages) == 1 and seg.refs.storages[0].nbytes() == MB
    assert len(seg.refs.arrays) == 1 and seg.refs.arrays[0] is a
    t2, a2 = seg.load({})
    assert torch.equal(t2, t) and np.array_equal(a2, a)


@pytest.mark.parametrize(
    ("make", "as_blob"),
    [
        pytest.param(lambda: np.arange(100, dtype=np.float64), False, id="small"),
        pytest.param(lambda: np.ones(ARRAY_BLOB_MIN_BYTES - 1, np.uint8), False, id="one-short"),
        pytest.param(lambda: np.ones(ARRAY_BLOB_MIN_BYTES, np.uint8), True, id="at-threshold"),
        pytest.param(lambda: np.ones((400, 400), order="F"), True, id="fortran-order"),
        pytest.param(lambda: np.ones((400, 800))[:, ::2], False, id="strided-view"),
        pytest.param(lambda: np.array([{"k": i} for i in range(5000)]), False, id="objects"),
    ],
)
def test_which_arrays_become_blobs(make, as_blob):
    # Given a numpy array
    a = make()
    seg = Segments({})
    # When it is pickled
    data = seg.dump(a)
    # Then only a large plain array becomes a blob; a small one, one that is not one run of
    # memory, or one of Python objects is pickled inline; either way it comes back equal
    assert len(seg.refs.arrays) == (1 if as_blob else 0)
    if as_blob:
        assert len(data) < 1000
    elif a.dtype != object:
        assert len(data) > a.nbytes
    (a2,) = seg.load({})
    assert a2.dtype == a.dtype and a2.shape == a.shape
    assert np.array_equal(a2, a) if a.dtype != object else list(a2) == list(a)


# -- what cannot be pickled --------------------------------------------------------------------


@pytest.mark.parametrize("file_mode", ["r", "rb", "ab", "r+b"])
def test_an_open_file_cannot_be_pickled(tmp_path, file_mode):
    # Given an open file, inside a dict as a notebook might keep it
    path = tmp_path / "data.txt"
    path.write_text("hello")
    with open(path, file_mode) as f:
        # When it is pickled
        # Then pickling fails with an error that names the file
        with pytest.raises(TypeError, match=f"open file '{path}' cannot be saved"):
            SegmentPickler(RefTable(), {}).dump({"log": f})


def test_an_empty_namespace_plans_no_segment():
    # Given a notebook with nothing defined yet, when its pause is planned
    plan = make_plan({"__name__": "__main__"}, {}, [], "namespace")
    # Then there is nothing to pickle, and nothing fails
    assert plan.segments == [] and plan.objects == [] and plan.packages == []


def test_a_failed_segment_is_forgotten_and_the_next_one_still_works(tmp_path):
    # Given a list already pickled, and a variable holding bulk data, that list and an open file
    shared = [1, 2, 3]
    seg = Segments({})
    first = seg.dump(shared)
    with open(tmp_path / "data.txt", "w") as f:
        bad = {"t": torch.ones(1000), "a": np.ones(10_000), "shared": shared, "f": f}
        # When that variable fails to pickle
        with pytest.raises(TypeError, match="open file"):
            seg.dump(bad)
    # Then none of its bulk data is kept, and the stream is the one before it
    assert seg.refs.storages == [] and seg.refs.arrays == []
    assert seg.data == [first]
    # And the next variable pickles on that memo, and restores pointing at the same list
    u = torch.arange(10)
    seg.dump({"shared": shared, "u": u})
    assert len(seg.refs.storages) == 1 and seg.refs.storages[0].nbytes() == u.nbytes
    shared2, third = seg.load({})
    assert third["shared"] is shared2 and shared2 == [1, 2, 3]
    assert torch.equal(third["u"], u)


# -- functions defined in the notebook ----------------------------------------------------------

NOTEBOOK_CELL = """
K = 2

def scale(x):
    return x * K

def double_scale(x):
    return 2 * scale(x)
"""


def test_notebook_functions_read_the_live_namespace_after_restore():
    # Given functions defined in a notebook cell that read a notebook global
    ns = {"__name__": "__main__"}
    exec(NOTEBOOK_CELL, ns)
    seg = Segments(ns)
    seg.dump(ns["scale"])
    seg.dump(ns["double_scale"])
    # When they are rebuilt into a fresh notebook namespace
    ns2 = {"__name__": "__main__"}
    scale2, double2 = seg.load(ns2)
    ns2["scale"], ns2["double_scale"] = scale2, double2
    # Then they are bound to that namespace and see what it holds now, not a frozen copy
    assert scale2.__globals__ is ns2 and double2.__globals__ is ns2
    assert (scale2(3), double2(3)) == (6, 12)
    ns2["K"] = 10
    assert (scale2(3), double2(3)) == (30, 60)
    ns2["scale"] = lambda x: -x
    assert double2(3) == -6
    # And the original notebook is untouched
    assert ns["K"] == 2 and ns["scale"](3) == 6


# -- a whole capture through a real store ------------------------------------------------------


@pytest.fixture
def notebook(tmp_path) -> dict:
    """A notebook namespace with the kinds of values people keep in one."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ns = {
        "__name__": "__main__",
        "np": np,
        "model": model,
        "opt": opt,
        "arr": np.asfortranarray(np.random.default_rng(1).random((64, 300), dtype=np.float32)),
        "counts": np.arange(20_000, dtype=np.int16),
        "frozen": torch.randn(50, 20).t(),  # not contiguous: strides (1, 20)
        "w": torch.randn(10, requires_grad=True),
        "half": torch.randn(6, 7).to(torch.bfloat16),
        "z1": torch.zeros(1000),
        "z2": torch.zeros(1000),  # same bytes as z1: one blob, two tensors
        "cfg": {"lr": 0.1, "layers": [8, 4, 2], "name": "run-1", "tags": ("a", "b")},
        "gen": (i for i in range(3)),
    }
    ns["not a name"] = 1  # set through globals(): it cannot come back as a variable
    return ns


@pytest.fixture
def restored(notebook, tmp_path) -> tuple[dict, dict, dict]:
    """Capture the notebook to a store, check the manifest as the server does, restore it."""
    store = Store(str(tmp_path / "store"))
    plan = make_plan(notebook, {}, registered=["model"], mode="namespace")
    capture = write_plan(plan, store)
    signer = Signer(b"k" * 32)
    cid = new_checkpoint_id()
    store.write_manifest(
        signer.sign(
            build_manifest(
                session_id="s1",
                checkpoint_id=cid,
                parent=None,
                kernel={"python": "3.11"},
                origin={"host": "h", "gpu": None},
                capture=capture,
            )
        )
    )
    doc = store.read_manifest("s1", cid)
    signer.verify(doc)
    doc = parse_manifest(doc).doc
    ns2 = {"__name__": "__main__"}
    report = restore_objects(doc, load_blobs(doc, store), ns2, device="cpu")
    return ns2, report, doc


SAVED = {"np", "model", "opt", "arr", "counts", "frozen", "w", "half", "z1", "z2", "cfg"}


def test_round_trip_reports_what_it_skipped(restored):
    # Given a notebook with a generator and a name that is not a variable name
    # When it is captured and restored
    ns2, report, doc = restored
    # Then both are reported as skipped with a reason, and everything else comes back
    skipped = {x["name"]: x["reason"] for x in report["skipped"]}
    assert skipped.keys() == {"gen", "'not a name'"}
    assert "generator" in skipped["gen"]
    assert skipped["'not a name'"] == "not a variable name"
    assert report["failed"] == []
    assert set(report["restored"]) == SAVED
    assert report["registered"] == ["model"]
    assert set(ns2) == SAVED | {"__name__"}
    assert {x["name"] for x in doc["skipped"]} == {"gen", "'not a name'"}


def test_round_trip_keeps_tensors(notebook, restored):
    # Given a notebook with tensors of several layouts and dtypes
    # When it is captured and restored
    ns2, _, _ = restored
    # Then each tensor is equal, with its dtype, shape, strides and requires_grad
    for name in ("frozen", "w", "half", "z1", "z2"):
        before, after = notebook[name], ns2[name]
        assert torch.equal(after, before), name
        assert (after.dtype, after.shape, after.stride()) == (
            before.dtype,
            before.shape,
            before.stride(),
        ), name
        assert after.requires_grad == before.requires_grad, name
    assert ns2["w"].is_leaf and ns2["w"].requires_grad
    # And two tensors that held equal bytes (stored once) do not share memory after restore
    assert not shares_memory(ns2["z1"], ns2["z2"])
    ns2["z2"][0] = 5.0
    assert ns2["z1"][0].item() == 0.0


def test_round_trip_keeps_the_model_and_its_optimizer(notebook, restored):
    # Given a notebook with a model and an optimizer over its parameters
    # When it is captured and restored
    ns2, _, _ = restored
    model2, opt2 = ns2["model"], ns2["opt"]
    # Then the weights are equal and the optimizer still drives the restored model
    for (k, v), (k2, v2) in zip(
        notebook["model"].state_dict().items(), model2.state_dict().items(), strict=True
    ):
        assert k == k2 and torch.equal(v, v2), k
    params = opt2.param_groups[0]["params"]
    assert all(p is q for p, q in zip(params, model2.parameters(), strict=True))
    before = model2[0].weight.detach().clone()
    opt2.zero_grad()
    model2(torch.randn(5, 8)).sum().backward()
    opt2.step()
    assert not torch.equal(model2[0].weight, before)


def test_round_trip_keeps_arrays_dicts_and_modules(notebook, restored):
    # Given a notebook with numpy arrays, a dict and an imported module
    # When it is captured and restored
    ns2, _, _ = restored
    # Then the arrays are equal with their dtype, shape, strides and memory order
    for name in ("arr", "counts"):
        before, after = notebook[name], ns2[name]
        assert np.array_equal(after, before), name
        assert (after.dtype, after.shape, after.strides) == (
            before.dtype,
            before.shape,
            before.strides,
        ), name
    assert ns2["arr"].flags.f_contiguous and not ns2["arr"].flags.c_contiguous
    # And the dict is equal, and the module is the module itself, imported again
    assert ns2["cfg"] == notebook["cfg"]
    assert ns2["np"] is np


def test_an_open_file_in_the_notebook_is_skipped_unless_registered(tmp_path):
    # Given a notebook holding an open file next to a number
    path = tmp_path / "data.txt"
    path.write_text("hello")
    with open(path) as f:
        ns = {"__name__": "__main__", "log": f, "y": 3}
        # When a pause plans what to save
        plan = make_plan(ns, {}, registered=[], mode="namespace")
        # Then the file is skipped with a reason naming it, and the number is saved
        assert [o["name"] for o in plan.objects] == ["y"]
        assert plan.skipped == [
            {"name": "log", "reason": f"TypeError: open file '{path}' cannot be saved"}
        ]
        # And when the file is registered as needed, the pause is refused before any write
        with pytest.raises(CaptureError, match="registered variable 'log' cannot be saved") as e:
            make_plan(ns, {}, registered=["log"], mode="namespace")
        assert e.value.reason == "registered-unsaveable"


def test_a_large_structured_array_survives_a_capture(tmp_path):
    # Given a notebook holding a structured array above the blob threshold
    rec = np.zeros(5000, dtype=[("x", "<f4"), ("y", "<i4")])
    rec["x"], rec["y"] = np.arange(5000) / 2, np.arange(5000)
    store = Store(str(tmp_path / "store"))
    # When it is captured, its manifest built as the server does, and restored
    capture = write_plan(make_plan({"rec": rec}, {}, registered=[], mode="namespace"), store)
    doc = build_manifest(
        session_id="s1",
        checkpoint_id=new_checkpoint_id(),
        parent=None,
        kernel={"python": "3.11"},
        origin={"host": "h", "gpu": None},
        capture=capture,
    )
    ns2: dict = {}
    report = restore_objects(doc, load_blobs(doc, store), ns2, device="cpu")
    # Then it comes back equal, fields and all
    assert report["failed"] == []
    assert ns2["rec"].dtype == rec.dtype and np.array_equal(ns2["rec"], rec)
