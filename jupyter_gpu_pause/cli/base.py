"""What every subcommand shares: ``--url``/``--token``/``--json``, positional arguments,
turning every outcome into an exit code and one line on stderr (never a traceback)."""

from __future__ import annotations

from argparse import ArgumentError
from typing import overload

from jupyter_core.application import JupyterApp, base_aliases, base_flags
from traitlets import Bool, TraitError, Unicode

from ..units import duration_seconds
from .client import GpuPauseClient, GpuPauseError, cli_error, find_server
from .errors import INTERRUPTED, OK, USAGE, CliError
from .output import Output

COMMON_ALIASES = {
    **base_aliases,
    "url": "Command.url",
    "token": "Command.token",
}
COMMON_FLAGS = {
    **base_flags,
    "json": ({"Command": {"as_json": True}}, "Print one JSON document (docs/cli.md)."),
}


def seconds(text: str, what: str) -> float:
    """``3600``, ``90m``, ``2h``, ``1d`` as seconds; CliError(2) otherwise."""
    value = duration_seconds(text)
    if value is None:
        raise CliError(
            f"{what} must be seconds or a duration such as 90m, 2h, 7d; not {text!r}", USAGE
        )
    return value


class Command(JupyterApp):
    """One ``jupyter gpu-pause`` subcommand: ``run`` does it and returns an exit code."""

    name = "jupyter-gpu-pause"
    args = ""  # the positional arguments, for the usage line ("NAME [SECONDS]")

    url = Unicode(
        "",
        config=True,
        help="Base URL of the Jupyter server, e.g. http://127.0.0.1:8888/ (with its base_url). "
        "Default: $JUPYTER_GPU_PAUSE_URL, else the most recently started running server "
        "of `jupyter server list`.",
    )
    token = Unicode(
        None,
        allow_none=True,
        config=True,
        help="The server's token. Default: $JUPYTER_GPU_PAUSE_CLI_TOKEN, else the token the "
        "server wrote in the Jupyter runtime dir.",
    )
    as_json = Bool(False, config=True, help="Print one JSON document on stdout (docs/cli.md).")

    aliases = COMMON_ALIASES
    flags = COMMON_FLAGS

    def _find_subcommand(self, name: str) -> str:
        return ""  # no `jupyter-gpu-pause-*` executables: the first argument is ours

    def initialize(self, argv=None):
        """Parse the command line; a bad option is a usage error (exit 2), said in one line."""
        try:
            # catch_config_error's functools.wraps keeps the plain method; traitlets types
            # the decorated one as the same callable, without __wrapped__
            JupyterApp.initialize.__wrapped__(self, argv)  # type: ignore[attr-defined]
        except (TraitError, ArgumentError) as e:
            Output().error(f"{e}; see: jupyter gpu-pause {self.subcommand_name} --help")
            self.exit(USAGE)

    @property
    def subcommand_name(self) -> str:
        return self.name.removeprefix("jupyter-gpu-pause").strip("-") or ""

    def start(self):
        out = Output(self.as_json)
        try:
            code = self.run(out)
        except (CliError, GpuPauseError) as e:
            if isinstance(e, GpuPauseError):
                e = cli_error(e)
            out.error(e.message, e.details)
            code = e.code
        except KeyboardInterrupt:
            code = INTERRUPTED
        self.exit(OK if code is None else code)

    def run(self, out: Output) -> int | None:
        raise NotImplementedError

    # -- helpers for subcommands -------------------------------------------------------------
    @overload
    def positional(self, least: int) -> list[str]: ...

    @overload
    def positional(self, least: int, most: int) -> list[str | None]: ...

    def positional(self, least: int, most: int | None = None) -> list[str] | list[str | None]:
        """The positional arguments, ``least`` to ``most`` of them (None for each one not
        given); CliError(2) otherwise."""
        most = least if most is None else most
        got = list(self.extra_args)
        if not least <= len(got) <= most:
            raise CliError(
                f"usage: jupyter gpu-pause {self.subcommand_name} {self.args}".rstrip()
                + f" (got {len(got)} argument{'s' if len(got) != 1 else ''})",
                USAGE,
            )
        return got + [None] * (most - len(got))

    def client(self, out: Output) -> GpuPauseClient:
        """The server's client, found by ``--url``/``--token``, the environment or the
        runtime dir (jupyter_gpu_pause.client.find_server); its errors end the command."""
        target = find_server(self.url, self.token, self.runtime_dir, warn=out.note)
        return GpuPauseClient(target=target)
