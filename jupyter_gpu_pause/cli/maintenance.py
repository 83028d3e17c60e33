"""Store maintenance: ``verify`` and ``gc``, which also work without any server.

``verify`` always reads the store itself, from this machine (no REST endpoint verifies): it
needs read access to the store and the signing key (``GpuPauseApp.secret_file``). ``gc`` asks
the running server (``POST store/gc``: its store, grace period and lease) unless a STORE is
given or no server is found; then it collects the store itself, taking the same lock a server
takes, so running it beside servers is safe.

Offline, the settings come from the same configuration the server reads (``GpuPauseApp.*`` and
``StoreMaintenance.*`` in jupyter_server_config.py/.json, or on the command line), through a
``GpuPauseApp(parent=self)`` that is never started.
"""

from __future__ import annotations

import json
import os

import fsspec
from jupyter_core.application import JupyterApp
from traitlets import Bool, Unicode

from ..client import GpuPauseClient, ServerUnreachable, find_server
from ..server.app import GpuPauseApp
from ..server.integrations.maintenance import StoreMaintenance
from ..store import GcBusy, Store, StoreError, gc, verify
from ..store.keyfile import KeyFileError, load_secret
from ..units import count_text, size_text
from .base import COMMON_ALIASES, COMMON_FLAGS, Command
from .errors import FAILED, NOT_FOUND, USAGE, WRONG_STATE, CliError
from .output import Output

STORE_ALIASES = {
    **COMMON_ALIASES,
    "store-options": "_StoreCommand.store_options",
    "secret-file": "GpuPauseApp.secret_file",
}


class _StoreCommand(Command):
    """A command that may open the store itself, with the server's configuration."""

    args = "[STORE]"
    classes = [GpuPauseApp, StoreMaintenance]
    store_options = Unicode(
        None,
        allow_none=True,
        config=True,
        help='fsspec options for STORE as JSON, e.g. \'{"endpoint_url": "http://…"}\'. '
        "Default: GpuPauseApp.store_options when STORE has the same protocol as "
        "GpuPauseApp.store_url, else {}. Credentials come from the environment, as for "
        "the server.",
    )

    # JupyterApp's signature, which departs from Application's (jupyter_core ignores it too)
    def load_config_file(self, suppress_errors: bool = True) -> None:  # type: ignore[override]
        """This command's own config, and the server's (where GpuPauseApp.* settings live)."""
        JupyterApp.load_config_file(self, suppress_errors)
        try:
            super(JupyterApp, self).load_config_file(
                "jupyter_server_config", path=self.config_file_paths
            )
        except Exception as e:  # a config file that fails to run: say so, use the defaults
            Output().note(f"could not read the server's configuration: {e}")

    def settings(self) -> GpuPauseApp:
        return GpuPauseApp(parent=self)

    def open_store(self, url: str, app: GpuPauseApp) -> Store:
        protocol = fsspec.core.split_protocol(url)[0] or "file"
        if self.store_options is not None:
            try:
                options = json.loads(self.store_options)
            except ValueError as e:
                raise CliError(f"--store-options is not JSON: {e}", USAGE) from None
        elif protocol == (fsspec.core.split_protocol(app.store_url)[0] or "file"):
            options = dict(app.store_options)
        else:
            options = {}
        if protocol == "file":
            path = url.removeprefix("file://")
            if not os.path.isdir(path):
                raise CliError(f"there is no store at {path} (no such folder)", NOT_FOUND)
        try:
            return Store(url, options, timeout=app.store_timeout)
        except Exception as e:
            raise CliError(f"cannot open the store {url}: {type(e).__name__}: {e}") from None


class VerifyCommand(_StoreCommand):
    name = "jupyter-gpu-pause-verify"
    description = (
        "Check every checkpoint of a store as a resume would, without restoring any: "
        "signature, format, and every blob present, of the right size and (unless --quick) "
        "content hash. STORE: a folder or fsspec URL (default: GpuPauseApp.store_url). Reads "
        "the store directly; needs the signing key (--secret-file, default "
        "GpuPauseApp.secret_file). Exit 1 when a checkpoint is damaged. Changes nothing."
    )
    quick = Bool(False, config=True, help="Check blob sizes only, without reading their bytes.")
    aliases = STORE_ALIASES
    flags = {
        **COMMON_FLAGS,
        "quick": ({"VerifyCommand": {"quick": True}}, "Sizes only, no content hashes."),
    }

    def run(self, out: Output):
        (arg,) = self.positional(0, 1)
        app = self.settings()
        url = arg or app.store_url
        store = self.open_store(url, app)
        try:
            key = load_secret(app.secret_file)
        except KeyFileError as e:
            raise CliError(str(e)) from None
        if key is None:
            raise CliError(
                f"no signing key at {app.secret_file}; checkpoints are verified with the key "
                "that signed them: give it with --secret-file PATH (GpuPauseApp.secret_file)"
            )
        try:
            report = verify(store, key, deep=not self.quick)
        except StoreError as e:
            raise CliError(f"cannot read the store {url}: {e}") from None
        doc = {"store": store.url, **report.as_dict()}
        if out.json:
            out.document(doc)
        else:
            for c in report.checkpoints:
                where = f"{c.session_id}/{c.checkpoint_id}"
                out.line(f"ok\t{where}" if c.ok else f"DAMAGED\t{where}\t{'; '.join(c.problems)}")
            out.line(
                f"{count_text(len(report.checkpoints), 'checkpoint')} in {store.url}, "
                f"{len(report.failed)} damaged; {count_text(report.blobs_checked, 'blob')} "
                + ("hashed" if report.deep else "checked by size")
            )
        if not report.ok:
            raise CliError(
                f"{len(report.failed)} of {count_text(len(report.checkpoints), 'checkpoint')} "
                "cannot be resumed: "
                + "; ".join(f"{c.checkpoint_id}: {c.problems[0]}" for c in report.failed[:3])
                + (f"; and {len(report.failed) - 3} more" if len(report.failed) > 3 else ""),
                FAILED,
            )


class GcCommand(_StoreCommand):
    name = "jupyter-gpu-pause-gc"
    description = (
        "Garbage collection: delete the blobs no checkpoint references, older than "
        "GpuPauseApp.gc_grace_seconds. Without STORE, the running server does it (POST "
        "store/gc); with STORE, or when no server runs, this command does it on the store "
        "(default GpuPauseApp.store_url), under the same lock. --dry-run only counts."
    )
    dry_run = Bool(False, config=True, help="Count what would be freed; delete nothing.")
    aliases = {
        **STORE_ALIASES,
        "grace-seconds": "GpuPauseApp.gc_grace_seconds",
        "lease-seconds": "StoreMaintenance.lease_seconds",
    }
    flags = {
        **COMMON_FLAGS,
        "dry-run": ({"GcCommand": {"dry_run": True}}, "Count what would be freed only."),
    }

    def run(self, out: Output):
        (arg,) = self.positional(0, 1)
        if arg is None:
            try:
                target = find_server(self.url, self.token, self.runtime_dir, warn=out.note)
            except ServerUnreachable:
                target = None  # nothing running: collect the configured store directly
                out.note("no running Jupyter server found; collecting the configured store")
            if target is not None:
                doc = GpuPauseClient(target=target).gc(self.dry_run)
                return self._show(out, {"store": None, "server": target.url, **doc})
        app = self.settings()
        url = arg or app.store_url
        store = self.open_store(url, app)
        lease = StoreMaintenance(parent=self).lease_seconds
        try:
            report = gc(
                store,
                dry_run=self.dry_run,
                grace_seconds=app.gc_grace_seconds,
                lease_seconds=lease,
            )
        except GcBusy as e:
            raise CliError(str(e), WRONG_STATE) from None
        except StoreError as e:
            raise CliError(f"garbage collection failed; nothing more was deleted: {e}") from None
        return self._show(out, {"store": store.url, "server": None, **report.as_dict()})

    def _show(self, out: Output, doc: dict) -> None:
        if out.json:
            return out.document(doc)
        where = doc["store"] or f"the store of {doc['server']}"
        verb = "would delete" if doc["dry_run"] else "deleted"
        out.line(
            f"{where}: {verb} {count_text(doc['deleted_blobs'], 'blob')}, freeing "
            f"{size_text(doc['freed_bytes'])}; {count_text(doc['kept_blobs'], 'blob')} kept "
            f"({size_text(doc['kept_bytes'])}), of which {doc['young_blobs']} unreferenced but "
            "within the grace period"
        )
        if doc.get("unreadable_manifests"):
            out.note("unreadable manifests: " + ", ".join(doc["unreadable_manifests"]))
        if doc.get("note"):
            out.note(doc["note"])
