"""A researcher's project environment for the tests' kernels: a venv holding ipykernel and numpy
and nothing of ours (no jupyter_gpu_pause, no cloudpickle, fsspec or xxhash), the way a group
keeps one environment per project and registers it with ``python -m ipykernel install``.

The venv lives in ``.venv-project/`` at the repository root (``make project-venv`` makes it; so
does the first test that needs it, ~10 s with a warm pip cache). ``project_kernelspec`` writes a
kernelspec that runs it with nothing of the checkout on its path, so a kernel of it has our
agent only when the server brings it. It is a GPU session when the server's
``gpu_kernelspecs`` names it (the only way a kernelspec is marked as one): e.g.
``gp_config(gpu_kernelspecs=["project-py"])``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-project"
PACKAGES = ("ipykernel", "numpy")  # as the Makefile's project-venv target: nothing else


def _env() -> dict[str, str]:
    """This environment without the tests' PYTHONPATH (the checkout and the server's own
    library paths, which another Python cannot start with)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def find_python(version: str) -> str | None:
    """An interpreter of Python ``version`` ("3.9") on this machine that runs: pyenv's, or
    one on PATH (pyenv's shims there answer "command not found" for a version not selected)."""
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)  # the tests' HOME is a folder of theirs
    root = Path(os.environ.get("PYENV_ROOT") or home / ".pyenv")
    pyenv = sorted(root.glob(f"versions/{version}.*/bin/python{version}"))
    for candidate in [*map(str, pyenv[::-1]), shutil.which(f"python{version}")]:
        if (
            candidate
            and subprocess.run([candidate, "-c", ""], capture_output=True, env=_env()).returncode
            == 0
        ):
            return candidate
    return None


def python_venv(version: str, packages: tuple[str, ...] = PACKAGES, name: str = "") -> Path:
    """A project venv of Python ``version`` (``.venv-py39`` for "3.9", or ``.venv-py<name>``)
    holding ``packages`` (ipykernel and numpy, as the project venv). Skips when this machine
    has no such Python."""
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (python{version}, or pyenv's)")
    venv = ROOT / f".venv-py{name or version.replace('.', '')}"
    return project_venv(venv, python, packages)


def project_venv(
    venv: Path = VENV, python: str = sys.executable, packages: tuple[str, ...] = PACKAGES
) -> Path:
    """The project venv, made if missing (the same commands as ``make project-venv``).
    Skips when it cannot be made, unless under CI (``CI`` set), where that fails the test."""
    marker = venv / ".installed"
    if marker.exists():
        return venv
    try:
        subprocess.run(
            [python, "-m", "venv", str(venv)], check=True, capture_output=True, env=_env()
        )
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", *packages],
            check=True,
            capture_output=True,
            env=_env(),
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as e:
        why = getattr(e, "stderr", b"") or b""
        message = (
            f"cannot make the project venv {venv} ({e}): {why.decode(errors='replace')[-1000:]}"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    marker.touch()
    return venv


def pip_freeze(venv: Path) -> list[str]:
    """What ``venv`` holds, as ``pip list --format=freeze`` says (``name==version`` lines): the
    same before and after a pause proves nothing was installed or upgraded there."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    ).stdout
    return out.splitlines()


def hidden(folder: Path, argv: list[str]) -> list[str]:
    """``argv`` run where ``folder`` is an empty folder: a mount namespace of its own with a
    tmpfs over it, as a kernel on another machine sees none of this one's files. Skips where
    this machine cannot make one (``unshare`` needs root)."""
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode()[-300:]}")
    folder.mkdir(parents=True, exist_ok=True)
    mount = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(folder)] + argv


def project_kernelspec(
    dest_dir: Path,
    name: str = "project-py",
    venv: Path | None = None,
    hide: Path | None = None,
    metadata: dict | None = None,
) -> Path:
    """A kernelspec folder ``dest_dir/name`` running the project venv's Python; ``dest_dir`` is
    a ``kernels`` folder the server searches (e.g. ``$JUPYTER_DATA_DIR/kernels``).

    Its ``env`` empties PYTHONPATH: the tests put the checkout there for the server's own
    kernels (``conftest._kernel_sees_package``, ``tests/servers.py``), and a kernel inherits
    the server's environment. ``hide``: a folder the kernel does not see (``hidden``);
    ``metadata``: the kernelspec's (a gateway's process proxy)."""
    python = (venv or project_venv()) / "bin" / "python"
    spec = dest_dir / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {
        "argv": hidden(hide, argv) if hide is not None else argv,
        "display_name": f"Project venv ({name})",
        "language": "python",
        "env": {"PYTHONPATH": ""},
        **({"metadata": metadata} if metadata else {}),
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1))
    return spec
