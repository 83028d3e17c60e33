"""The end-to-end benchmark suite (``benchmarks/run.py``) runs through, as its users run it: a
subprocess with a real server and real kernels, ``--smoke`` sizes. Only the shape of its JSON is
checked, never a timing: the numbers of a smoke run on a shared VM mean nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


def numbers(d: dict, keys) -> list[str]:
    """The keys of ``keys`` whose value in ``d`` is not a number."""
    return [k for k in keys if not isinstance(d.get(k), (int, float)) or isinstance(d[k], bool)]


def test_smoke_run_writes_every_section_with_numbers(tmp_path):
    # Given: the suite at smoke size, its store and files under tmp_path
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(RUN), "--smoke", "--json", str(out), "--dir", str(tmp_path)]

    # When: it runs to the end
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)

    # Then: exit status 0, a table on stdout, and the JSON has every section with numbers
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "[ratios]" in done.stdout
    result = json.loads(out.read_text())
    assert result["meta"]["warm_reads"] is True  # --smoke never drops the page cache
    state = result["states"]["8M"]
    assert len(state["runs"]) == 1
    assert not numbers(
        state["median"],
        ["bytes", "pause_s", "pause.capture", "pause.write", "pause.commit",
         "pause.gpu_released_s", "pause.peak_extra_mib", "resume_s", "resume.start",
         "resume.read", "resume.unpickle", "repause_same_s", "repause_same.new_bytes",
         "resume_warm_s", "repause_tenth_s", "repause_tenth.new_bytes", "raw_write_s",
         "raw_read_s", "torch_save_s", "torch_load_s", "kernel_torch_load_s",
         "resume.peak_extra_mib"],
    )  # fmt: skip
    small = result["small_objects"]
    assert "layout" in small
    assert not numbers(
        small["median"],
        ["pause_s", "pause.capture", "resume_s", "resume.read", "resume.unpickle",
         "pickle_dump_write_s", "pickle_read_loads_s", "pickle_cell_dump_write_s",
         "pickle_cell_read_loads_s", "repause_same_s"],
    )  # fmt: skip
    assert not numbers(
        result["fixed"]["median"],
        ["bare_start_s", "tiny_pause_s", "tiny_pause.gpu_released_s", "tiny_resume_s"],
    )
    ratios = result["ratios"]
    assert set(ratios) >= {
        "resume_vs_floor[8M]", "torch_load_kernel_vs_resume[8M]", "tiny_gpu_released_s",
        "tiny_resume_minus_bare_s", "small_pause_vs_pickle", "small_resume_vs_pickle",
        "small_pause_vs_pickle_cell", "small_resume_vs_pickle_cell",
    }  # fmt: skip
    assert not [k for k, r in ratios.items() if numbers(r, ["median", "min", "max"])]
    assert all(isinstance(r["met"], bool) for r in ratios.values() if r["target"])
    assert "skipped" in result["storm"]  # a smoke run leaves the storm out unless asked


def test_refuses_sizes_the_folder_cannot_hold(tmp_path):
    # Given: a state far larger than any disk here
    cmd = [sys.executable, str(RUN), "--sizes", "64T", "--dir", str(tmp_path),
           "--json", str(tmp_path / "r.json")]  # fmt: skip

    # When / Then: it refuses at once, saying how much it needs, and writes nothing
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refusing to run" in done.stderr and "need" in done.stderr
    assert not (tmp_path / "r.json").exists()
