"""What the kernel's own Python environment must hold, and what a pause says when it does not.

A kernelspec may run another Python than the server's (a gateway's kernel image, a conda env):
there, torch without numpy was a real first pause's failure ("Numpy is not available"). numpy is
a dependency of the package; a kernel that still lacks it is told what to install.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

# Run in a fresh kernel: its Python cannot import numpy, as in an environment where torch was
# installed alone (torch's wheels do not require numpy); torch warns at import, as it does there
NO_NUMPY = """
import sys, warnings
sys.modules["numpy"] = None
warnings.simplefilter("ignore")
import torch
w = torch.arange(4.0)
"""


def test_numpy_is_a_runtime_dependency():
    # Given the package's declared requirements, then numpy is among those pip always installs
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    runtime = pyproject["project"]["dependencies"]
    assert any(r.replace(" ", "").lower().startswith("numpy>=") for r in runtime), runtime


async def test_a_pause_without_numpy_names_what_to_install(lab):
    # Given a notebook whose kernel imported torch without numpy, holding a tensor
    s = await lab.open_notebook()
    await lab.run(s["kernel_id"], NO_NUMPY)

    # When it is paused
    code, body = await lab.api("POST", f"sessions/{s['id']}/pause")
    assert code == 202, body
    after = await lab.wait_state(s["id"], ("paused", "failed", "active", "idle"))

    # Then the pause fails saying numpy is missing from the kernel's Python, how to install it
    # and that a restart is needed, the kernel left as it was
    error = after["error"]
    assert error["reason"] == "numpy-missing", error
    assert "pip install numpy" in error["message"] and "restart the kernel" in error["message"]
    assert error["state_intact"] is True
    assert after["state"] in ("active", "idle") and after["kernel_id"] == s["kernel_id"]
    assert (await lab.run(s["kernel_id"], "print(w.sum().item())")).strip() == "6.0"
