"""The guard of a kernel suspended in place: its cells do not run until it is resumed.

While the CUDA driver holds a kernel's GPU state in host memory (the server's suspend tier), a
cell that touches the GPU would block until the resume, and one that does not would change
variables after the checkpoint was taken, changes the kernel's stop would then lose. So from the
moment the agent has its host copies until the resume in place, every cell a person runs
(and any queued behind the pause) fails at once, saying why and what to do, without running.
The server's own requests (the agent's) pass. The guard is an IPython input transformer: it
replaces the cell's code, so nothing of it runs and the namespace is not touched.
"""

from __future__ import annotations

from .protocol import REQUEST_KEY

_ATTR = "_jupyter_gpu_pause_guard"
MESSAGE = (
    "This kernel is suspended in place: its GPU was released and its variables are kept, "
    "untouched, until it is resumed. Resume it (the GPU sessions panel, the notebook toolbar, "
    "or `jupyter gpu-pause resume`), then run the cell again."
)


def _transform(lines: list[str]) -> list[str]:
    from IPython import get_ipython

    shell = get_ipython()
    try:
        ours = REQUEST_KEY in shell.kernel.get_parent()["metadata"]
    except Exception:
        ours = False
    if ours:
        return lines
    return [f"raise RuntimeError({MESSAGE!r}) from None\n"]


def install(shell) -> None:
    if not getattr(shell, _ATTR, False):
        shell.input_transformers_post.append(_transform)
        setattr(shell, _ATTR, True)


def remove(shell) -> None:
    if getattr(shell, _ATTR, False):
        shell.input_transformers_post.remove(_transform)
        setattr(shell, _ATTR, False)


def installed(shell) -> bool:
    return bool(getattr(shell, _ATTR, False))
