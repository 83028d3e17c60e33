"""The store is the source of truth; the records are a cache of it.

At start, after the records are loaded, the store is read once in the background:

- a session with signed checkpoints in the store that the records do not know (a lost or
  wiped ``db_path``, a new pod) comes back ``paused`` with its newest valid checkpoint, if its
  manifest says it belongs to this server: same owner and same root folder (manifests written
  before those were recorded: its working folder lies under this server's root). Sessions a
  user discarded while keeping their checkpoints stay discarded (a ``discarded`` event says
  so; it lives in the records, so it is lost with them);
- a paused session whose checkpoints have all gone from the store (deleted by hand) is shown
  ``failed`` with an error saying so, instead of failing later at resume time;
- a paused session with a newer checkpoint than the records know (resumed and paused again
  on another server sharing the store) shows that newest checkpoint.

With ``store_rescan_interval``, the same pass runs again every so often: servers that share a
store (several nodes, one user) list each other's paused sessions without a restart.

Nothing here writes to the store. A store that cannot be read is logged and changes nothing.
"""

from __future__ import annotations

import os
import posixpath

from ...store import IntegrityError, StoreError
from ..state.checkpoints import checkpoint_brief
from ..state.event_types import EventType
from ..state.model import Session, SessionState
from .context import RecoveryContext


def belongs_here(kernel: dict, owner: str, root_dir: str) -> bool:
    """Whether a manifest's ``kernel`` section names this server's user and root folder."""
    if "owner" in kernel or "root_dir" in kernel:
        return kernel.get("owner") == owner and kernel.get("root_dir") == root_dir
    cwd = kernel.get("cwd") or ""  # older manifests: the kernel ran inside this root
    return bool(cwd) and os.path.commonpath([os.path.abspath(cwd), root_dir]) == root_dir


def session_from_manifest(manifest) -> Session:
    """A paused session rebuilt from its newest valid checkpoint."""
    kernel = manifest.doc["kernel"]
    path = kernel.get("path") or ""
    return Session(
        id=manifest.session_id,
        path=path,
        name=kernel.get("name") or posixpath.basename(path),
        type=kernel.get("session_type") or "notebook",
        kernel_name=kernel.get("kernelspec") or "python3",
        cwd=posixpath.dirname(path),
        state=SessionState.PAUSED,
        checkpoint=checkpoint_brief(manifest),
        message=(
            f"Found in the store: paused, checkpoint {manifest.id} (the server's records "
            "did not know this session)"
        ),
    )


class Recovery:
    """One pass over the store: bring back lost sessions, flag those whose checkpoints went."""

    def __init__(self, ctx: RecoveryContext, again: bool = False):
        self.ctx, self.again = ctx, again  # again: a rescan, logged only when it changed something
        self.brought_back = 0
        self.not_ours = 0
        self.newer = 0

    async def run(self) -> None:
        ctx = self.ctx
        if await ctx.checkpoints.prepare_key():
            return  # nothing can be verified; the key problem is already reported
        try:
            stored = await ctx.checkpoints.session_ids()
            discarded = await ctx.records.discarded()
            known = set(ctx.table.sessions)
            for sid in stored:
                if sid not in known and sid not in discarded:
                    await self._bring_back(sid)
            for s in list(ctx.table):
                if s.state == SessionState.PAUSED and s.id not in ctx.ops:
                    await self._check_paused(s)
        except StoreError as e:
            ctx.log.warning("jupyter_gpu_pause: could not read the store: %s", e)
            return
        if self.again and not (self.brought_back or self.newer):
            return
        ctx.log.info(
            "jupyter_gpu_pause: store read: %d session(s) brought back from it, %d of other "
            "servers left alone, %d paused with a newer checkpoint (written by another server)",
            self.brought_back,
            self.not_ours,
            self.newer,
        )

    async def _bring_back(self, sid: str) -> None:
        ctx = self.ctx
        settings = ctx.settings
        for cid in await ctx.checkpoints.ids(sid):
            try:
                manifest = await ctx.checkpoints.verify(sid, cid)
            except (IntegrityError, StoreError) as e:
                ctx.log.warning("jupyter_gpu_pause: store session %s: %s", sid, e)
                continue
            if not belongs_here(manifest.doc["kernel"], settings.owner, settings.root_dir):
                self.not_ours += 1
                return
            if sid in ctx.table.sessions:  # a new kernel under that id meanwhile: keep it
                return
            s = session_from_manifest(manifest)
            ctx.table.sessions[s.id] = s
            self.brought_back += 1
            await ctx.table.persist(s)
            await ctx.table.record_event(
                s, EventType.RECOVERED, "store", checkpoint_id=manifest.id, message=s.message
            )
            return

    async def _check_paused(self, s: Session) -> None:
        ids = await self.ctx.checkpoints.ids(s.id)
        if s.state != SessionState.PAUSED or s.id in self.ctx.ops:
            return  # a resume began while the store was listed
        if not ids:
            await self._gone(s)
        elif s.checkpoint and ids[0] != s.checkpoint.get("id"):
            await self._newer(s, ids[0])

    async def _newer(self, s: Session, cid: str) -> None:
        """A newer checkpoint than the records know: another server resumed and paused it."""
        ctx = self.ctx
        try:
            manifest = await ctx.checkpoints.verify(s.id, cid)
        except (IntegrityError, StoreError):
            return  # a resume falls back past it and says why
        if s.state != SessionState.PAUSED or s.id in ctx.ops:
            return
        s.checkpoint = checkpoint_brief(manifest)
        s.message = f"Paused, checkpoint {manifest.id} (written by another server)"
        self.newer += 1
        await ctx.table.persist(s)

    async def _gone(self, s: Session) -> None:
        cid = s.checkpoint["id"] if s.checkpoint else None
        s.checkpoint = None  # nothing to offer a Resume for
        await self.ctx.table.fail(
            s,
            EventType.CHECKPOINTS_GONE,
            "store",
            reason="checkpoints-gone",
            text=f"the checkpoints of this session (the last one {cid}) are no longer in "
            f"the store ({self.ctx.checkpoints.store.url}); they were deleted outside "
            "jupyter_gpu_pause. Its saved variables cannot be restored: discard the session",
            intact=False,
            checkpoint_id=cid,
        )
