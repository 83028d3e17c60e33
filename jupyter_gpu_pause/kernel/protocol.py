"""The agent protocol: what the server asks of the agent in a kernel, and what the agent answers.

One module both sides import, and nothing else of ours (the server imports it without the
kernel's capture and restore machinery; the agent without the server). The server sends one
silent ``execute_request`` whose code is ``CODE``; the request (``Request``: the protocol, the
request's name and its args) rides in that message's metadata under ``REQUEST_KEY``. The agent
publishes progress (``Progress``) and exactly one reply (``Reply``) as ``display_data`` on
IOPub, under ``MIME_PROGRESS`` and ``MIME_RESULT``.

Each request has its args and its reply declared here as ``TypedDict``s: plain dicts on the
wire, checked by a type checker where they are built. Args the agent has a default for are
optional; the defaults are declared once, below, for the agent and the server's settings alike.
A reply comes from a kernel that runs user code: the server reads it through its own checks
(``store.schema``, ``server/kernels/replies.py``) before it relies on the shape declared here.

``PROTOCOL`` is bumped whenever a request or a reply changes shape. Each side refuses the
other's protocol when they differ, saying which versions met.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypedDict, TypeVar

PROTOCOL: Final = 7
REQUEST_KEY: Final = "jupyter_gpu_pause_request"  # the execute_request's metadata key
# The code of the agent's execute_request: one short line (a request in the code itself would
# go through IPython's input transformers, ~60 ms per MB of a resume's manifest).
CODE: Final = "__import__('jupyter_gpu_pause.kernel.agent', fromlist=['_']).call_parent()"
# The code that brings the agent into a kernel whose environment lacks it (``bootstrap.py``,
# whose text rides in the request's params as ``boot``): run in a namespace of its own.
BOOT_CODE: Final = (
    f"exec(__import__('IPython').get_ipython().kernel.get_parent()['metadata']"
    f"[{REQUEST_KEY!r}]['params']['boot'], "
    f"{{'__name__': '_jupyter_gpu_pause_bring', 'KEY': {REQUEST_KEY!r}}})"
)
MIME_PROGRESS: Final = "application/vnd.jupyter-gpu-pause.progress+json"
MIME_RESULT: Final = "application/vnd.jupyter-gpu-pause.result+json"

CaptureMode = Literal["namespace", "registered"]
Device = Literal["gpu", "cpu", "any"]
RebuildMode = Literal["ask", "auto", "never"]

# -- defaults: what the agent does with an arg the server left out, and the server's settings'
# defaults (``PauseSettings``) -----------------------------------------------------------------
DEFAULT_STORE_TIMEOUT: Final = 30.0  # seconds one store request may take
DEFAULT_CAPTURE: Final[CaptureMode] = "namespace"  # every variable, registered ones required
DEFAULT_MAX_BYTES: Final = 0  # the largest checkpoint, in bytes; 0: no limit
DEFAULT_VERIFY: Final = True  # read every new blob back before the reply
DEFAULT_TEST_RESTORE: Final = True  # load the plan back in a forked copy before the reply
DEFAULT_AMBIENT: Final = True  # carry the process state around the namespace
DEFAULT_DEVICE: Final[Device] = "any"  # a visible GPU for saved GPU tensors, else the CPU
DEFAULT_REBUILD: Final[RebuildMode] = "ask"  # what a resume does with names it did not bring


# -- the envelope --------------------------------------------------------------------------------
RequestName = Literal[
    "capture",
    "restore",
    "check",
    "warm",
    "gpu",
    "usage",
    "track",
    "rebuild",
    "finish",
    "unguard",
    "bring",
]


class Request(TypedDict):
    """The metadata ``REQUEST_KEY`` of the agent's execute_request."""

    protocol: int
    func: str
    params: dict[str, object]


class Progress(TypedDict, total=False):
    """A progress update (``MIME_PROGRESS``). ``phase``, ``done_bytes`` and ``total_bytes``
    are always there; the rest only where the phase has them."""

    phase: str  # "capturing", "writing", "staged", "reading", "rebuilding", …
    done_bytes: int
    total_bytes: int | None
    unit: Literal["cells"]  # a rebuild counts cells, not bytes
    host_bytes: int  # "staged": what the agent copied to host memory
    packages: list[str]  # a capture's first update: what a warm kernel should import


class ErrorBody(TypedDict):
    message: str
    reason: str  # a short code: "too-large", "integrity", "store", "agent-error", …
    check: str | None  # an integrity failure's check, else None


class _ReplyBase(TypedDict):
    protocol: int
    version: str  # the kernel's jupyter_gpu_pause
    ok: bool


class Reply(_ReplyBase, total=False):
    """The agent's one answer (``MIME_RESULT``): ``result`` when ``ok``, else ``error``."""

    result: dict[str, Any]
    error: ErrorBody


def request(func: RequestName, params: Mapping[str, object]) -> Request:
    """The request as it rides in the execute_request's metadata."""
    return {"protocol": PROTOCOL, "func": func, "params": dict(params)}


# -- shapes shared by several replies ------------------------------------------------------------
class Named(TypedDict):
    """Something named that was left out, and why."""

    name: str
    reason: str


class Unverified(TypedDict):
    """Saved, but its test-restore could not judge these names (``kernel/trial.py``)."""

    reason: str
    names: list[str]


class AmbientPlan(TypedDict):
    """What of the process around the namespace a pause carries, and what cannot travel."""

    carried: list[str]
    not_carried: list[Named]


class AmbientRestored(TypedDict):
    """What a restore did with the checkpoint's ambient state."""

    restored: list[str]
    rerun: list[str]
    not_restored: list[Named]
    text: str | None
    seconds: float | None  # what restoring it cost in the kernel


class OfferCell(TypedDict):
    execution_count: int | None
    seconds: float | None
    code: str


class RebuildOffer(TypedDict):
    """A rebuild plan: the names the cells make again, the cells, their recorded run time."""

    names: list[str]
    cells: list[OfferCell]
    seconds: float | None
    unbuildable: list[Named]
    text: str | None
    problem: str | None


class Spool(TypedDict, total=False):
    """Where a kernel that cannot write the store itself writes and reads its blobs
    (``store/spool.py``): a folder of the server's on this machine."""

    folder: str
    damaged: dict[str, ErrorBody]  # a resume's blobs that failed the server's check
    channel: bool  # the kernel cannot see the folder: the blobs go over its own channel


# -- capture -------------------------------------------------------------------------------------
class _CaptureRequired(TypedDict):
    store_url: str
    checkpoint_id: str


class CaptureArgs(_CaptureRequired, total=False):
    """Write the namespace's blobs for checkpoint ``checkpoint_id``; the server commits them."""

    store_options: dict[str, Any]
    store_timeout: float
    capture: CaptureMode
    max_bytes: int
    verify: bool
    test_restore: bool
    ambient: bool
    # the server suspends this kernel in place once the agent reports "staged"
    suspend: bool
    spool: Spool  # the blobs go through the server


class _CaptureReplyBase(TypedDict):
    objects: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    storages: list[dict[str, Any]]
    arrays: list[dict[str, Any]]
    pickle: dict[str, Any]
    blobs: dict[str, dict[str, Any]]
    new_bytes: int
    kernel: dict[str, Any]  # the manifest's ``kernel`` (language, versions, cwd, packages)
    origin: dict[str, Any]  # the machine it ran on
    registered: list[str]
    unverified: Unverified | None


class CaptureReply(_CaptureReplyBase, total=False):
    """What the agent wrote: the manifest's content, before the server checks and signs it."""

    cells: dict[str, Any]
    ambient: dict[str, Any]
    ambient_seconds: float  # what capturing the process state cost


# -- restore -------------------------------------------------------------------------------------
class _RestoreRequired(TypedDict):
    manifest: dict[str, Any]  # the verified manifest's document
    store_url: str


class RestoreArgs(_RestoreRequired, total=False):
    """Check every blob, then rebuild the objects into this kernel's namespace."""

    store_options: dict[str, Any]
    store_timeout: float
    device: Device
    fallbacks: list[dict[str, Any]]  # older verified manifests, newest first
    # the kernel is the notebook's own, taken as one that ran nothing: refuse if it ran a cell
    only_if_unused: bool
    rebuild: RebuildMode
    ambient: bool
    no_rerun_ids: list[str]  # cells tagged gp-no-rerun
    # a warm kernel takes on the session's environment and folder first
    environ: dict[str, str]
    cwd: str
    spool: Spool  # the blobs come through the server


class Fallback(TypedDict):
    name: str
    checkpoint_id: str
    older_seconds: float | None


class RestoreReply(TypedDict):
    checkpoint_id: str
    restored: list[str]
    failed: list[Named]
    fallback: list[Fallback]
    skipped: list[dict[str, Any]]
    registered: list[str]
    device: str
    devices: dict[str, str]  # where each saved CUDA device's tensors went
    ambient: AmbientRestored | None
    rebuild: RebuildOffer | None


# -- check (the dry run) -------------------------------------------------------------------------
class CheckArgs(TypedDict, total=False):
    capture: CaptureMode
    test_restore: bool
    ambient: bool


class CheckedObject(TypedDict):
    name: str
    bytes: int
    required: bool


class CheckReply(TypedDict):
    """What a pause would save and skip; ``error``: why it would fail, else None."""

    objects: list[CheckedObject]
    skipped: list[dict[str, Any]]
    bytes: int
    error: str | None
    unverified: Unverified | None
    ambient: AmbientPlan | None
    registered: list[str]


# -- rebuild -------------------------------------------------------------------------------------
class RebuildArgs(TypedDict, total=False):
    names: list[str]  # none: every name still missing
    confirm: bool
    no_rerun_ids: list[str]


class RebuildFailure(TypedDict):
    execution_count: int | None
    code: str
    error: str


class RebuildReply(TypedDict):
    ok: bool
    rebuilt: list[str]
    already: list[str]
    unknown: list[str]
    failed: RebuildFailure | None
    needs_confirm: bool
    shared: list[Named]
    copy_bytes: int
    seconds: float
    plan: RebuildOffer
    offer: RebuildOffer | None  # what is still missing after it


# -- the small requests --------------------------------------------------------------------------
class NoArgs(TypedDict):
    """usage, track, gpu, finish, unguard: no args."""


class WarmArgs(TypedDict, total=False):
    modules: list[str]  # top-level package names to import now


class WarmReply(TypedDict):
    imported: list[str]


class GpuReply(TypedDict):
    devices: list[str]  # the UUIDs (or cuda:N) of the GPUs torch holds memory on
    memory_bytes: int


class UsageReply(TypedDict):
    cells_run: int  # cells a person ran in this kernel


class TrackReply(TypedDict):
    cells: int  # cells in the log


class FinishReply(TypedDict):
    safe: bool  # a kill loses nothing a graceful exit would keep
    why: str | None
    flushed: list[str]


class UnguardReply(TypedDict):
    guarded: bool  # whether the guard was on


# -- bring: the agent, into a kernel whose environment lacks it (``bootstrap.py``) ---------------
class SpoolProbe(TypedDict):
    path: str  # a file the server wrote in its spool folder
    token: str  # what it holds: the kernel sees the folder when it reads this back


class _BringRequired(TypedDict):
    boot: str  # bootstrap.py's text
    version: str  # the server's jupyter_gpu_pause
    protocol: int
    mime: str  # MIME_RESULT: the bootstrap imports nothing of ours to learn it


class BringArgs(_BringRequired, total=False):
    """The bundle as source, or compiled for the kernel's Python (its ``magic``: the bytecode
    version ``importlib.util.MAGIC_NUMBER``, which the kernel reported at an earlier bring)."""

    bundle: str  # base64 of zlib of JSON {module name: [is_package, source]}
    compiled: str  # base64 of zlib of marshal {module name: [is_package, None, code]}
    magic: str
    spool_probe: SpoolProbe


class BringReply(TypedDict):
    modules: int
    sees_spool: bool  # the kernel can read and write the server's spool folder
    magic: str  # the kernel's bytecode version: its kernelspec's next brings are compiled


# -- typed handles: ``run_agent(kernel_id, CAPTURE, CaptureArgs(...))`` returns a CaptureReply ---
A = TypeVar("A")
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[A, R]):
    """One request of the protocol, carrying its args' and reply's types for a type checker."""

    name: RequestName


CAPTURE: Final = Call[CaptureArgs, CaptureReply]("capture")
RESTORE: Final = Call[RestoreArgs, RestoreReply]("restore")
CHECK: Final = Call[CheckArgs, CheckReply]("check")
REBUILD: Final = Call[RebuildArgs, RebuildReply]("rebuild")
WARM: Final = Call[WarmArgs, WarmReply]("warm")
GPU: Final = Call[NoArgs, GpuReply]("gpu")
USAGE: Final = Call[NoArgs, UsageReply]("usage")
TRACK: Final = Call[NoArgs, TrackReply]("track")
FINISH: Final = Call[NoArgs, FinishReply]("finish")
UNGUARD: Final = Call[NoArgs, UnguardReply]("unguard")
BRING: Final = Call[BringArgs, BringReply]("bring")
