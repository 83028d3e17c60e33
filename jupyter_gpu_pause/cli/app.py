"""``jupyter gpu-pause``: the root application only dispatches to its subcommands."""

from __future__ import annotations

from argparse import ArgumentError

from jupyter_core.application import JupyterApp
from traitlets import TraitError

from .._version import __version__
from .errors import USAGE
from .output import Output

PACKAGE = "jupyter_gpu_pause."
# name -> (class, under jupyter_gpu_pause.cli unless named in full; help)
SUBCOMMANDS = {
    "list": ("sessions.ListCommand", "List the sessions: state, notebook, idle time, checkpoint."),
    "show": ("sessions.ShowCommand", "Show one session in full."),
    "pause": ("sessions.PauseCommand", "Pause a session to the store (--wait: to the end)."),
    "resume": (
        "sessions.ResumeCommand",
        "Resume a paused session [--checkpoint C] [--cpu|--any] [--wait].",
    ),
    "rebuild": (
        "rebuild.RebuildCommand",
        "Re-run the cells that make what a resume did not bring back [--names a,b] [--yes].",
    ),
    "cancel": ("sessions.CancelCommand", "Cancel a pause in progress or a resume waiting."),
    "keepalive": ("sessions.KeepaliveCommand", "Keep a session from auto-pausing for a while."),
    "checkpoints": ("sessions.CheckpointsCommand", "List a session's checkpoints."),
    "discard": (
        "sessions.DiscardCommand",
        "Forget a paused session [--delete-checkpoints].",
    ),
    "events": ("observe.EventsCommand", "Lifecycle events [--since] [--session] [--follow]."),
    "report": ("observe.ReportCommand", "GPU-hours held, idle and reclaimed [--since 30d]."),
    "capacity": ("observe.CapacityCommand", "GPUs, who holds them, and the resume queue."),
    "budget": (
        "budget.BudgetCommand",
        "GPU-hour budgets: show | grant USER HOURS | reset USER (admins).",
    ),
    "verify": ("maintenance.VerifyCommand", "Check every checkpoint of a store [STORE]."),
    "gc": ("maintenance.GcCommand", "Free the blobs no checkpoint references [--dry-run]."),
    "hub-service": (
        "jupyter_gpu_pause.hubservice.app.HubServiceApp",
        "Run the Hub console, a JupyterHub service for admins (docs/hub-console.md).",
    ),
}


class GpuPauseCli(JupyterApp):
    """Pause and resume Jupyter GPU sessions from a terminal or a script."""

    name = "jupyter-gpu-pause"
    version = __version__
    description = (
        "Pause idle GPU kernels to a checkpoint store and resume them, from a terminal or a "
        "script. Talks to the running Jupyter server (found like `jupyter server list`, or "
        "--url/--token); `verify` and `gc` also work offline on a store. Exit codes: 0 ok, "
        "1 failed, 2 usage or ambiguous name, 3 not found, 4 wrong state, 5 server "
        "unreachable. See docs/cli.md."
    )
    examples = """
jupyter gpu-pause list
jupyter gpu-pause pause exp/train.ipynb --wait
jupyter gpu-pause resume 3f2a --cpu --wait
jupyter gpu-pause rebuild exp/train.ipynb --names batches
jupyter gpu-pause report --since 7d --json
jupyter gpu-pause verify /srv/gpu-pause/store
"""
    subcommands = {
        k: (target if target.startswith(PACKAGE) else f"{PACKAGE}cli.{target}", help_)
        for k, (target, help_) in SUBCOMMANDS.items()
    }

    def _find_subcommand(self, name: str) -> str:
        return ""

    def initialize(self, argv=None):
        try:
            # skips catch_config_error, as Command.initialize does (see there)
            JupyterApp.initialize.__wrapped__(self, argv)  # type: ignore[attr-defined]
        except (TraitError, ArgumentError) as e:
            Output().error(f"{e}; see: jupyter gpu-pause --help")
            self.exit(USAGE)

    def start(self):
        super().start()  # runs the subcommand, which exits with its code
        if self.extra_args:
            Output().error(
                f"unknown command {self.extra_args[0]!r}; one of: {', '.join(SUBCOMMANDS)}"
            )
        else:
            self.print_subcommands()
            Output().error("give a command, e.g. jupyter gpu-pause list")
        self.exit(USAGE)


def main(argv=None) -> None:
    GpuPauseCli.launch_instance(argv)


if __name__ == "__main__":
    main()
