"""Jupyter server configuration for the Galata UI tests (never use it in production).

Galata's helper turns off authentication and XSRF checks, serves a fresh temporary root
folder and loads JupyterLab's in-page test helpers. On top of that the server listens on
127.0.0.1 only, accepts root (CI runs as root), and our extension keeps its checkpoints,
SQLite records, signing key and capacity queue in ``ui-tests/.state/`` (gitignored), emptied
each time the server starts: every run starts from nothing, never touches the developer's own
``{jupyter_data_dir}/gpu_pause``, and tests can find the store to inspect or damage it.

Lab serves the checkout's prebuilt labextension (``jupyter_gpu_pause/labextension``, what
``jlpm build`` writes) ahead of the copy pip put into the virtual environment at install
time, so the tests exercise the frontend as last built, not as last installed.

The port comes from playwright.config.js (``--ServerApp.port``) so it is written once.
"""

import json
import os
import shutil
import sys
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 -- provided by the traitlets config loader

configure_jupyter_server(c)

c.ServerApp.allow_root = True
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.open_browser = False
c.IdentityProvider.token = ""
c.ServerApp.password = ""

state = Path(__file__).resolve().parent / ".state"
shutil.rmtree(state, ignore_errors=True)
state.mkdir()
c.GpuPauseApp.store_url = str(state / "store")
c.GpuPauseApp.db_path = str(state / "gpu_pause.sqlite")
c.GpuPauseApp.secret_file = str(state / "secret")

prebuilt = Path(__file__).resolve().parents[2] / "jupyter_gpu_pause" / "labextension"
if (prebuilt / "package.json").is_file():
    # Extra paths come first in Lab's search, so this copy shadows the installed one.
    shadow = state / "labextensions"
    shadow.mkdir()
    (shadow / "jupyter-gpu-pause").symlink_to(prebuilt, target_is_directory=True)
    galata = c.LabServerApp.extra_labextensions_path
    c.LabServerApp.extra_labextensions_path = [
        *([galata] if isinstance(galata, str) else galata),
        str(shadow),
    ]

# Kernelspecs of their own, the venv's Python under other names, so what the config below
# sets for one test never reaches the kernels of the others: the idle-policy test's
# `python3-short` (the short policy) and the waiting test's `python3-gpu` (GPU sessions).
kernels = state / "kernels"
for name, display in (
    ("python3-short", "Python 3 (short idle policy)"),
    ("python3-gpu", "Python 3 (GPU session, quota of 1)"),
):
    (kernels / name).mkdir(parents=True)
    (kernels / name / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": display,
                "language": "python",
            }
        )
    )
# A kernel that is not Python, for unpausable.spec.ts (bash_kernel, the [test] extra). Its
# display name sorts after the Python ones: Lab's kernel dialog offers the first one, which
# the other specs' new notebooks take.
(kernels / "bash").mkdir(parents=True)
(kernels / "bash" / "kernel.json").write_text(
    json.dumps(
        {
            "argv": [sys.executable, "-m", "bash_kernel", "-f", "{connection_file}"],
            "display_name": "Shell (bash)",
            "language": "bash",
        }
    )
)
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    [str(state), *filter(None, [os.environ.get("JUPYTER_PATH")])]
)

# The short policy: idle time counts from the last executed cell; the warning shows after
# 10 s idle (60 - 50), the pause after 60 s, and "Keep running" may postpone up to 10 min.
c.GpuPauseApp.policies = [
    {
        "name": "ui-test-short",
        "match": {"kernel_name": "python3-short"},
        "idle_timeout": 60,
        "warn_before": 50,
        "action": "pause",
        "max_keepalive": 600,
    }
]
c.GpuPauseApp.poll_interval = 1

# Waiting for a GPU without a GPU: the quota provider allows one GPU session at once, and only
# `python3-gpu` sessions are GPU sessions (the other tests' `python3` notebooks hold no GPU and
# resume at once, as before). The queue lives in .state too, emptied with it.
c.GpuPauseApp.capacity_provider_class = "quota"
c.QuotaCapacity.max_sessions = 1
c.GpuPauseApp.gpu_kernelspecs = ["python3-gpu"]
c.GpuPauseApp.capacity_queue_url = str(state / "queue")

# A GPU-hour budget no test comes near (budget.spec.ts reads its line in the panel; only
# `python3-gpu` sessions are metered, by the waiting test): never held, never warned.
c.GpuPauseApp.budgets = [{"name": "ui", "gpu_hours": 1000}]
