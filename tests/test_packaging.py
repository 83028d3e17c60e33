"""What each side must install. A kernel's environment needs nothing of ours: the tests' project
venv (``tests/venvs.py``) holds ipykernel and numpy only, and its kernels cannot import what the
server has. A server needs psycopg only for a PostgreSQL queue (the ``postgres`` extra): without
it the package imports, and a PostgreSQL ``capacity_queue_url`` stops the server at start naming
the setting and the extra."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from packaging.requirements import Requirement

from tests.cells import CellOutput
from tests.servers import Server
from tests.venvs import pip_freeze, project_kernelspec, project_venv

ROOT = Path(__file__).resolve().parents[1]
OURS = {"jupyter-gpu-pause", "cloudpickle", "fsspec", "xxhash"}  # the server's, not the kernel's
PROJECT = {"ipykernel", "numpy"}
MODULES = ("jupyter_gpu_pause", "cloudpickle", "fsspec", "xxhash", "ipykernel", "numpy")


def _names(freeze: list[str]) -> set[str]:
    return {Requirement(line).name.lower().replace("_", "-") for line in freeze}


def _without_psycopg(tmp: Path) -> Path:
    """A folder that, first on PYTHONPATH, makes ``import psycopg`` fail as on a server
    installed without the postgres extra."""
    package = tmp / "no-psycopg" / "psycopg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    return package.parent


def test_the_project_venv_holds_ipykernel_and_numpy_and_nothing_of_ours():
    # Given the project venv (made by make project-venv, or here)
    venv = project_venv()
    # When pip lists it
    names = _names(pip_freeze(venv))
    # Then it has a kernel and numpy, and none of the server's packages
    assert PROJECT <= names, names
    assert not OURS & names, names


def test_a_project_kernel_cannot_import_the_servers_packages(tmp_path):
    # Given the project kernelspec, started with the tests' environment (PYTHONPATH names the
    # checkout, for the server's own kernels: conftest._kernel_sees_package)
    spec = project_kernelspec(tmp_path / "kernels")
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    km = KernelManager(kernel_name=spec.name, kernel_spec_manager=specs)
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        # When it looks for the server's modules and its own
        out = CellOutput()
        code = (
            "import importlib.util, sys\n"
            "print(sys.prefix)\n"
            f"print(sorted(m for m in {MODULES!r} if importlib.util.find_spec(m)))\n"
        )
        reply = kc.execute_interactive(code, output_hook=out, timeout=60)
        prefix, found = out.result(reply).splitlines()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    # Then it runs the project venv and finds only ipykernel and numpy
    assert Path(prefix) == project_venv(), prefix
    assert found == str(sorted(PROJECT)), found


def test_psycopg_comes_with_the_postgres_extra_only():
    # Given the package's requirements as installed
    reqs = [Requirement(r) for r in importlib.metadata.requires("jupyter_gpu_pause") or []]
    # Then psycopg is in no base requirement, and the postgres and test extras bring it
    psycopg = [r for r in reqs if r.name == "psycopg"]
    assert psycopg, reqs
    for extra in ("postgres", "test"):
        assert any(r.marker and r.marker.evaluate({"extra": extra}) for r in psycopg), extra
    assert not any(r.marker is None or r.marker.evaluate({"extra": ""}) for r in psycopg)


def test_every_module_imports_without_psycopg(tmp_path):
    # Given an environment where psycopg cannot be imported
    hidden = _without_psycopg(tmp_path)
    # When every module of the package is imported there
    code = (
        "import importlib, pkgutil, sys, jupyter_gpu_pause\n"
        "for m in pkgutil.walk_packages(jupyter_gpu_pause.__path__, 'jupyter_gpu_pause.'):\n"
        "    importlib.import_module(m.name)\n"
        "assert 'psycopg' not in sys.modules or sys.modules['psycopg'] is None\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{hidden}:{ROOT}"}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    # Then none fails
    assert run.returncode == 0, run.stderr[-3000:]


def test_a_postgres_queue_without_the_extra_stops_the_server_naming_it(tmp_path):
    # Given a server whose capacity queue is PostgreSQL, where psycopg cannot be imported
    url = "postgresql://gp:hunter2@127.0.0.1:1/cluster"
    server = Server(tmp_path, config=f"c.GpuPauseApp.capacity_queue_url = {url!r}\n")
    hidden = _without_psycopg(tmp_path)
    server.env["PYTHONPATH"] = f"{hidden}:{server.env.get('PYTHONPATH', '')}"
    # When it starts
    server.launch()
    # Then it exits before serving, naming the setting and the extra, never the password
    assert server.exit_status() == 1
    log = server.log_tail()
    assert "jupyter_gpu_pause: bad configuration: GpuPauseApp.capacity_queue_url" in log, log
    assert "pip install 'jupyter_gpu_pause[postgres]'" in log, log
    assert "hunter2" not in log, log
