"""jupyter_gpu_pause: give idle GPUs back without losing anyone's work.

In a kernel, ``import jupyter_gpu_pause as gp`` gives the agent API (``gp.register``, ``gp.check``,
…). For Jupyter, this module also declares the server extension and the prebuilt labextension;
the server side is imported lazily so a kernel never loads Tornado on our account.
"""

from . import kernel as _kernel
from .kernel import *  # noqa: F403  (the kernel API is the package's API)
from .version import __version__


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-gpu-pause"}]


def _jupyter_server_extension_points():
    from .server.app import GpuPauseApp

    return [{"module": "jupyter_gpu_pause", "app": GpuPauseApp}]


def load_ipython_extension(ipython):
    """``%load_ext jupyter_gpu_pause`` adds the ``%gpu_pause`` magic."""
    from .kernel.magics import load_ipython_extension as _load

    _load(ipython)


__all__ = ["__version__", *_kernel.__all__]
