"""The places where the extension meets jupyter_server, checked against the installed version.

Everything but one goes through public API: a kernel's open connections come from
``kernel_model()["connections"]``, a resumed kernel's environment from
``SessionManager.get_kernel_env``. The one exception is jupyter_server's own culler, which has
no way to exempt a kernel: ``Monitor`` wraps ``cull_kernel_if_idle`` on the kernel manager
instance (see its docstring). These tests fail loudly when jupyter_server changes any of it.
"""

from __future__ import annotations

import inspect
import json

from jupyter_server.services.kernels.kernelmanager import MappingKernelManager
from jupyter_server.services.sessions.sessionmanager import SessionManager


def test_jupyters_culler_still_culls_one_kernel_at_a_time_through_the_seam():
    # The wrapper only works while cull_kernels asks cull_kernel_if_idle about each kernel
    source = inspect.getsource(MappingKernelManager.cull_kernels)
    assert "self.cull_kernel_if_idle(kernel_id)" in source
    assert inspect.iscoroutinefunction(MappingKernelManager.cull_kernel_if_idle)
    assert list(inspect.signature(MappingKernelManager.cull_kernel_if_idle).parameters) == [
        "self",
        "kernel_id",
    ]


def test_the_public_calls_we_rely_on_are_there():
    assert "connections" in inspect.getsource(MappingKernelManager.kernel_model)
    params = list(inspect.signature(SessionManager.get_kernel_env).parameters)
    assert params[:3] == ["self", "path", "name"]


async def test_the_culler_is_wrapped_while_we_run_and_given_back_at_stop(lab):
    # Given a running server with our monitor started
    await lab.monitor()
    km = lab.app.kernel_manager
    monitor = lab.app.web_app.settings["gpu_pause_monitor"]
    # Then the instance carries our wrapper (a plain function), not the class's method
    assert "cull_kernel_if_idle" in vars(km)
    assert not inspect.ismethod(km.cull_kernel_if_idle)
    # When the monitor stops, jupyter_server's own method is back
    await monitor.stop()
    assert "cull_kernel_if_idle" not in vars(km)
    assert km.cull_kernel_if_idle.__func__ is type(km).cull_kernel_if_idle


async def test_jupyterlabs_temporary_session_name_never_renames_a_tracked_session(lab):
    # Given a tracked notebook session
    s = await lab.open_notebook("exp/train.ipynb")
    # When JupyterLab reattaches the notebook to that kernel as it does (sessioncontext.ts): a
    # second Jupyter session on the kernel, named by a bare UUID in the notebook's folder
    temp = "exp/0f8e4c1a-3b2d-4e5f-8a9b-0c1d2e3f4a5b"
    r = await lab.fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps(
            {"path": temp, "type": "notebook", "name": "", "kernel": {"id": s["kernel_id"]}}
        ),
    )
    temp_session = json.loads(r.body)
    # Then our session keeps the notebook's path, however often the table refreshes
    for _ in range(3):
        assert (await lab.session(s["id"]))["path"] == "exp/train.ipynb"
    # And once Lab renames its session and drops the old one, the path is still the notebook's
    await lab.fetch(
        "api",
        "sessions",
        temp_session["id"],
        method="PATCH",
        body=json.dumps({"path": "exp/train.ipynb"}),
    )
    assert (await lab.session(s["id"]))["path"] == "exp/train.ipynb"
