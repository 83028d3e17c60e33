"""Arrays exactly as they left (issue #33): whatever a plan lists as saved comes back, of the
same type, dtype (its byte order too), shape and values, and a view still looks into the array
it looked into.

Generated cases (hypothesis' numpy strategies) go through the real pipeline, without a kernel:
``make_plan`` -> ``write_plan`` into a local store -> ``load_blobs`` -> ``restore_objects``
into a fresh namespace. The restore runs as a new kernel would: with cloudpickle's record of
the classes it pickled by value emptied (``classes_by_value_forgotten``); in the process that
pickled them it hands back the live class, and so hid ``np.recarray``'s failure ("type object
'recarray' has no attribute 'field'"), in these tests as in the fork of the test-restore.

Values are compared by their bytes (NaN payloads, ``-0.0``, a padding byte), object arrays by
the ``repr`` of their elements (a restored NaN is another float object, which ``==`` on lists
would call different).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpu_pause.kernel.capture import make_plan, write_plan
from jupyter_gpu_pause.kernel.pickling import ARRAY_BLOB_MIN_BYTES, classes_by_value_forgotten
from jupyter_gpu_pause.kernel.restore import load_blobs, restore_objects
from jupyter_gpu_pause.kernel.trial import verified_plan
from jupyter_gpu_pause.store import Store
from jupyter_gpu_pause.store.format import build_manifest, new_checkpoint_id

# Generated values: np.matrix warns that it is not recommended, a masked array's fill value or
# a cast of an extreme value overflows. Neither is what these tests look at.
pytestmark = [
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

# -- the pipeline -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder for the whole module, memory-backed where the machine has one: each
    checkpoint fsyncs its files, ~5 ms on this disk, and the module makes 11 000 of them."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="gp-arrays-") as d:
            yield Path(d)
    else:
        yield tmp_path_factory.mktemp("arrays")


@pytest.fixture(scope="module")
def store(folder):
    """One store for every example (blobs are deduplicated by content, as across pauses)."""
    return Store(str(folder / "store"))


def round_trip(store: Store, ns: dict):
    """Capture ``ns``, write it, read it back and restore it into a new namespace, as a new
    kernel would; every name the plan lists as saved must come back."""
    plan = make_plan(ns, {}, [], "namespace")
    doc = build_manifest(
        session_id="s1",
        checkpoint_id=new_checkpoint_id(),
        parent=None,
        kernel={},
        origin={},
        capture=write_plan(plan, store),
    )
    back: dict = {}
    with classes_by_value_forgotten():
        report = restore_objects(doc, load_blobs(doc, store), back, "cpu")
    assert plan.skipped == [], plan.skipped
    assert report["failed"] == [], report["failed"]
    assert report["restored"] == [o["name"] for o in plan.objects] == list(ns)
    return back, plan


# -- comparing --------------------------------------------------------------------------------


def same_dtype(got: np.dtype, want: np.dtype) -> None:
    # ``descr`` names each field's byte order; ``type`` tells numpy.record from numpy.void
    assert got == want and got.descr == want.descr and got.type is want.type, (got, want)


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.hasobject:
        assert repr(got.tolist()) == repr(want.tolist())
    else:
        assert got.tobytes() == want.tobytes()


def same_array(got, want) -> None:
    """Type, dtype, shape, values, and the memory order where the original had one."""
    assert type(got) is type(want), (type(got), type(want))
    same_dtype(got.dtype, want.dtype)
    assert got.shape == want.shape
    same_values(got, want)
    assert got.flags.c_contiguous or not want.flags.c_contiguous
    assert got.flags.f_contiguous or not want.flags.f_contiguous


def offset(view: np.ndarray, root: np.ndarray) -> int:
    return view.__array_interface__["data"][0] - root.__array_interface__["data"][0]


def steps(a: np.ndarray) -> tuple:
    """The strides that matter: those of the axes longer than one (numpy takes any stride
    along an axis of one element as contiguous, and its pickling writes its own there)."""
    return tuple(s for n, s in zip(a.shape, a.strides, strict=True) if n > 1)


def storage_bytes(t: torch.Tensor) -> bytes:
    """The whole storage under a strided tensor, as bytes."""
    us = t.untyped_storage()
    flat = torch.empty(0, dtype=torch.uint8).set_(us, 0, (us.nbytes(),), (1,))
    return flat.numpy().tobytes()


def same_tensor(got: torch.Tensor, want: torch.Tensor) -> None:
    assert type(got) is type(want), (type(got), type(want))
    assert (got.dtype, got.layout, got.shape) == (want.dtype, want.layout, want.shape)
    assert got.requires_grad == want.requires_grad
    if want.layout == torch.sparse_coo:
        assert got.is_coalesced() == want.is_coalesced()
        same_tensor(got._indices(), want._indices())
        same_tensor(got._values().detach(), want._values().detach())
    else:
        assert (got.stride(), got.storage_offset()) == (want.stride(), want.storage_offset())
        assert storage_bytes(got) == storage_bytes(want)


# -- strategies (hypothesis' own; only combined here) -----------------------------------------

# every scalar dtype, in the machine's byte order and in the other one
SCALAR_DTYPES = st.one_of(hnp.scalar_dtypes(), hnp.scalar_dtypes().map(lambda d: d.newbyteorder()))
# (sizes kept small: drawing the values, field by field, is most of this module's time)
STRUCTURED_DTYPES = st.one_of(
    hnp.array_dtypes(subtype_strategy=SCALAR_DTYPES, max_size=3, allow_subarrays=True),
    hnp.nested_dtypes(subtype_strategy=SCALAR_DTYPES, max_leaves=4),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
OBJECTS = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=4), st.tuples(st.integers())
)
# a quarter of the examples: an array past ARRAY_BLOB_MIN_BYTES, which is a blob of its own
# (only plain ndarrays are: a big array of another kind goes through pickle as a small one,
# tested once in test_pickling_unit, not a thousand times here)
BIG = st.sampled_from([False, False, False, True])


def grown(arr: np.ndarray) -> np.ndarray:
    """``arr``'s values repeated into a 2-D array past ARRAY_BLOB_MIN_BYTES (same dtype)."""
    if arr.size == 0 or arr.itemsize == 0:
        return arr
    rows = -(-ARRAY_BLOB_MIN_BYTES // (arr.itemsize * 4)) + 1
    return np.resize(arr, (rows, 4))


@st.composite
def numpy_arrays(draw, dtypes=SCALAR_DTYPES, shapes=SHAPES, big=BIG):
    """An ndarray: generated dtype, shape and values, in C or Fortran order, sometimes big."""
    arr = draw(hnp.arrays(draw(dtypes), draw(shapes)))
    if draw(big):
        arr = grown(arr)
    return np.asfortranarray(arr) if draw(st.booleans()) else arr


# -- numpy ------------------------------------------------------------------------------------


@settings(max_examples=1000, deadline=None)
@given(arr=numpy_arrays())
def test_plain_arrays_come_back_exactly(store, arr):
    # Given an ndarray of any scalar dtype and byte order, shape and order, small or a blob
    ns = {"arr": arr}
    # When it is paused and resumed
    back, plan = round_trip(store, ns)
    # Then it is the same array, and a big one went to a blob of its own (not through pickle)
    same_array(back["arr"], arr)
    assert len(plan.refs.arrays) == (arr.nbytes >= ARRAY_BLOB_MIN_BYTES)


@st.composite
def views(draw):
    """An array the notebook holds and a view of it (basic indexing: strided, reversed,
    zero-size, with new axes), maybe transposed, maybe of a big or Fortran-ordered array."""
    root = draw(numpy_arrays(shapes=hnp.array_shapes(min_dims=1, max_dims=3, max_side=6)))
    view = root[draw(hnp.basic_indices(root.shape, allow_newaxis=True))]
    if isinstance(view, np.ndarray) and draw(st.booleans()):
        view = view.T
    return root, view


@settings(max_examples=1000, deadline=None)
@given(case=views(), view_first=st.booleans())
def test_views_still_look_into_their_array(store, case, view_first):
    # Given an array and a view of it, saved in either order
    root, view = case
    ns = {"view": view, "root": root} if view_first else {"root": root, "view": view}
    # When they are paused and resumed
    back, _ = round_trip(store, ns)
    # Then both come back exactly
    same_array(back["root"], root)
    if not isinstance(view, np.ndarray):  # an element: a numpy scalar
        assert type(back["view"]) is type(view)
        same_values(np.asarray(back["view"]), np.asarray(view))
        return
    same_array(back["view"], view)
    # and a view that showed part of the array still shows that part of it: same place,
    # same strides, so a write through one is seen through the other
    if view.size and np.shares_memory(view, root):
        assert np.shares_memory(back["view"], back["root"])
        assert steps(back["view"]) == steps(view)
        assert offset(back["view"], back["root"]) == offset(view, root)


@settings(max_examples=1000, deadline=None)
@given(
    arr=st.one_of(
        numpy_arrays(dtypes=STRUCTURED_DTYPES, big=st.just(False)),
        hnp.arrays(np.dtype(object), SHAPES, elements=OBJECTS),
    )
)
def test_structured_and_object_arrays_come_back_exactly(store, arr):
    # Given an array of a structured (nested, sub-array, either byte order) or object dtype
    # When it is paused and resumed
    back, _ = round_trip(store, {"arr": arr})
    # Then it is the same array
    same_array(back["arr"], arr)


def recarray(draw, folder):
    data = draw(
        numpy_arrays(dtypes=st.one_of(STRUCTURED_DTYPES, SCALAR_DTYPES), big=st.just(False))
    )
    # the notebook of the issue: a record view of an array it also holds
    return {"data": data, "data_rec": data.view(np.recarray)}


def matrix(draw, folder):
    shapes = hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=5)
    return {"m": np.matrix(draw(numpy_arrays(shapes=shapes, big=st.just(False))))}


def masked(draw, folder):
    dtypes = st.one_of(SCALAR_DTYPES, STRUCTURED_DTYPES)
    data = draw(numpy_arrays(dtypes=dtypes, big=st.just(False)))
    mask = draw(st.one_of(st.just(np.ma.nomask), hnp.arrays(np.bool_, data.shape)))
    fill = None
    if data.dtype.names is None and draw(st.booleans()):
        fill = draw(hnp.from_dtype(data.dtype))
    return {"ma": np.ma.MaskedArray(data, mask=mask, fill_value=fill)}


def memmap(draw, folder):
    shapes = hnp.array_shapes(min_dims=1, max_dims=3, max_side=5)
    values = draw(numpy_arrays(shapes=shapes, big=st.just(False)))
    fd, path = tempfile.mkstemp(dir=folder)
    os.close(fd)
    mm = np.memmap(path, dtype=values.dtype, mode="w+", shape=values.shape)
    mm[...] = values
    return {"mm": mm, "part": mm[::2]}


@pytest.mark.parametrize("make", [recarray, matrix, masked, memmap])
@settings(max_examples=1000, deadline=None)
@given(data=st.data())
def test_numpy_subclasses_come_back_as_themselves(store, folder, make, data):
    # Given arrays of a numpy subclass (record array, matrix, masked array, memory map)
    ns = make(data.draw, folder)
    # When they are paused and resumed
    back, plan = round_trip(store, ns)
    # Then each is of its class, with its dtype, values, and a masked array's mask and
    # fill value
    for name, want in ns.items():
        got = back[name]
        same_array(got, want)
        if isinstance(want, np.ma.MaskedArray):
            assert np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))
            fills = [np.array(a.fill_value, dtype=want.dtype) for a in (got, want)]
            assert fills[0].tobytes() == fills[1].tobytes()
    # and no segment holding one is called plain: the test-restore loads each before a pause
    subclassed = [type(v) is not np.ndarray for v in ns.values()]
    assert [not p for p in plan.plain] == subclassed


# -- torch ------------------------------------------------------------------------------------

# torch dtype -> the numpy dtype its generated values start from
TORCH_DTYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint16: np.uint16,
    torch.uint32: np.uint32,
    torch.uint64: np.uint64,
    torch.float16: np.float16,
    torch.bfloat16: np.float32,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
    torch.float8_e4m3fn: np.float32,
    torch.float8_e5m2: np.float32,
}
GRAD_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
GRAD_DTYPES |= {torch.complex64, torch.complex128}


@st.composite
def tensors(draw, shapes=SHAPES):
    dtype = draw(st.sampled_from(list(TORCH_DTYPES)))
    values = draw(hnp.arrays(TORCH_DTYPES[dtype], draw(shapes)))
    return torch.from_numpy(values).to(dtype)


@settings(max_examples=1000, deadline=None)
@given(t=tensors(), requires_grad=st.booleans())
def test_tensors_come_back_with_dtype_strides_and_requires_grad(store, t, requires_grad):
    # Given a tensor of any dtype (float8, uint16, bfloat16 among them), requiring grad where
    # its dtype can
    t.requires_grad_(requires_grad and t.dtype in GRAD_DTYPES)
    # When it is paused and resumed
    back, _ = round_trip(store, {"t": t})
    # Then it is the same tensor, to the bits of its storage
    same_tensor(back["t"], t)


def no_reversed_slice(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(p, slice) and (p.step or 1) < 0 for p in parts)


@st.composite
def tensor_views(draw):
    """A tensor and views of it: basic indexing (torch's steps are positive), transposes."""
    base = draw(tensors(shapes=hnp.array_shapes(min_dims=1, max_dims=3, max_side=6)))
    index = hnp.basic_indices(tuple(base.shape), allow_newaxis=True).filter(no_reversed_slice)
    out = [base[draw(index)] for _ in range(2)]
    return base, [v.transpose(0, -1) if v.dim() and draw(st.booleans()) else v for v in out]


@settings(max_examples=1000, deadline=None)
@given(case=tensor_views())
def test_tensor_views_share_one_storage_after_restore(store, case):
    # Given a tensor and two strided views of it
    base, (first, second) = case
    ns = {"first": first, "base": base, "second": second}
    # When they are paused and resumed
    back, _ = round_trip(store, ns)
    # Then each is the same view, and all three look into one storage again
    for name, want in ns.items():
        same_tensor(back[name], want)
    pointers = {back[n].untyped_storage().data_ptr() for n in ns}
    assert len(pointers) == 1


@settings(max_examples=1000, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    bias=st.booleans(),
    frozen=st.booleans(),
    data=st.data(),
)
def test_parameters_of_a_module_stay_its_parameters(store, shape, bias, frozen, data):
    # Given a module whose weights are generated values (NaN and infinities among them), a
    # second name for its weight, and a parameter of its own, maybe frozen
    lin = torch.nn.Linear(shape[1], shape[0], bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(data.draw(hnp.arrays(np.float32, shape))))
    lin.weight.requires_grad_(not frozen)
    own = torch.nn.Parameter(data.draw(tensors()), requires_grad=False)
    ns = {"lin": lin, "w": lin.weight, "own": own}
    # When they are paused and resumed
    back, plan = round_trip(store, ns)
    # Then the second name is the module's weight again, a Parameter, as it was
    assert back["w"] is back["lin"].weight
    for name in ("w", "own"):
        same_tensor(back[name], ns[name])
    if bias:
        same_tensor(back["lin"].bias, lin.bias)
    # and no segment holding a Parameter is called plain
    assert plan.plain == [False, False, False]


@st.composite
def sparse_tensors(draw):
    """A sparse COO tensor: from a generated dense one, or from generated indices (repeated
    ones among them: an uncoalesced tensor) and values."""
    if draw(st.booleans()):
        dense = draw(hnp.arrays(np.float64, SHAPES, fill=st.just(0.0)))
        return torch.from_numpy(dense).to_sparse()
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    nnz = draw(st.integers(0, 6))
    rows = [draw(hnp.arrays(np.int64, nnz, elements=st.integers(0, n - 1))) for n in shape]
    values = torch.from_numpy(draw(hnp.arrays(np.float32, nnz)))
    indices = torch.from_numpy(np.stack(rows)) if nnz else torch.zeros(len(shape), 0).long()
    return torch.sparse_coo_tensor(indices, values, shape, check_invariants=True)


@settings(max_examples=1000, deadline=None)
@given(sparse=sparse_tensors(), requires_grad=st.booleans())
def test_sparse_tensors_come_back_sparse(store, sparse, requires_grad):
    # Given a sparse COO tensor, coalesced or not, maybe requiring grad
    sparse.requires_grad_(requires_grad)
    # When it is paused and resumed
    back, _ = round_trip(store, {"sparse": sparse})
    # Then it is sparse again, with the same indices and values, to the bit
    same_tensor(back["sparse"], sparse)


def test_a_view_of_an_array_the_notebook_does_not_hold_saves_only_what_it_shows():
    # Given the first values of a big array that only IPython's output history holds
    big = np.arange(1_000_000.0)
    ns = {"_5": big, "head": big[:10]}
    # When a plan is made
    plan = make_plan(ns, {}, [], "namespace")
    # Then it saves the ten values, not the 8 MB behind them
    assert [o["name"] for o in plan.objects] == ["head"]
    assert plan.objects[0]["bytes"] < 10_000 and plan.refs.arrays == []


# -- the test-restore -------------------------------------------------------------------------


def test_a_plain_segment_holds_only_plain_arrays_and_tensors():
    # Given plain arrays and tensors beside arrays of their subclasses
    data = np.zeros(3, dtype=[("a", "f8"), ("b", "i4")])
    ns = {
        "data": data,
        "view": data[1:],
        "t": torch.arange(4.0),
        "u16": torch.ones(2, dtype=torch.uint16),
        "rec": data.view(np.recarray),
        "again": [data.view(np.recarray)],
        "ma": np.ma.array([1.0, 2.0], mask=[0, 1]),
        "m": np.matrix([[1, 2]]),
        "p": torch.nn.Parameter(torch.ones(2)),
    }
    # When a plan is made
    plan = make_plan(ns, {}, [], "namespace")
    # Then only the plain ones skip the test-restore (a subclass has its own reduce and state)
    plain = {o["name"] for o, p in zip(plan.objects, plan.plain, strict=True) if p}
    assert plain == {"data", "view", "t", "u16"}


class Lazy(np.ndarray):
    """An ndarray subclass that says it lives in a module nobody imported, as ``np.recarray``
    says ``numpy.rec``: cloudpickle pickles the class by value, and its methods as attributes
    of the class rebuilt from the stream, which a new kernel does not have yet."""

    def tag(self):
        return "lazy"


Lazy.__module__ = "gp_never_imported"


def test_the_test_restore_finds_what_a_new_kernel_would_not_rebuild():
    # Given an ndarray subclass whose class a new kernel cannot rebuild, and a plain array
    ns = {"__name__": "__main__", "lazy": np.arange(3).view(Lazy), "plain": np.arange(3)}
    # When the plan is test-restored (the fork still holds the live class, as the kernel)
    plan = verified_plan(ns, {}, [], "namespace")
    # Then it is not called saved, with the error the resume would have met
    assert [o["name"] for o in plan.objects] == ["plain"]
    (skip,) = plan.skipped
    assert skip["name"] == "lazy"
    assert "type object 'Lazy' has no attribute 'tag'" in skip["reason"]
