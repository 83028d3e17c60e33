"""What the end-to-end suite makes of its repetitions: medians, the ratios the issue targets
(each computed within one repetition, then the median), and the printed tables.

A ratio compares steps of the same repetition only: the machines drift 2-5x between minutes,
so a ratio of medians taken at different times would mostly measure the drift.
"""

from __future__ import annotations

import operator
import statistics

MIB = 1024 * 1024
OPS = {"<=": operator.le, ">=": operator.ge}

# (key, label, kind): "s" seconds with MiB/s of the state, "t" seconds, "b" bytes as MiB,
# "m" MiB. Indented labels are parts of the row above.
TENSOR_ROWS = (
    ("pause_s", "pause: click -> paused", "s"),
    *((f"pause.{p}", f"  {p}", "t") for p in ("wait", "capture", "write", "verify", "commit")),
    ("pause.shutdown", "  shutdown", "t"),
    ("pause.gpu_released_s", "  click -> GPU released (event)", "t"),
    ("resume_s", "resume (cold): click -> first cell", "s"),
    ("resume.running_s", "  click -> session running", "t"),
    *((f"resume.{p}", f"  {p}", "t") for p in ("verify", "capacity", "start", "read")),
    ("resume.unpickle", "  unpickle", "t"),
    ("resume.attach", "  attach", "t"),
    ("repause_same_s", "re-pause, nothing changed", "t"),
    ("repause_same.new_bytes", "  new bytes written", "b"),
    ("resume_warm_s", "resume (warm): click -> first cell", "s"),
    ("repause_tenth_s", "re-pause, 10 % of the tensors changed", "t"),
    ("repause_tenth.new_bytes", "  new bytes written", "b"),
    ("raw_write_s", "raw write + fsync, a file per tensor", "s"),
    ("raw_read_s", "raw read (cold)", "s"),
    ("torch_save_s", "torch.save + fsync", "s"),
    ("torch_load_s", "torch.load (cold)", "s"),
    ("kernel_torch_load_s", "new kernel + torch.load -> first cell (cold)", "s"),
    ("kernel_torch_load.peak_mib", "  that kernel's peak RSS", "M"),
    ("pause.peak_extra_mib", "kernel peak RSS over the state: pause", "m"),
    ("resume.peak_extra_mib", "  resume (over state + a fresh kernel)", "m"),
)
SMALL_ROWS = (
    ("pause_s", "pause: click -> paused", "t"),
    *((f"pause.{p}", f"  {p}", "t") for p in ("capture", "write", "verify", "commit")),
    ("pickle_dump_write_s", "pickle.dumps + write + fsync (in the kernel)", "t"),
    ("pickle_dumps_s", "  pickle.dumps", "t"),
    ("resume_s", "resume (cold): click -> first cell", "t"),
    *((f"resume.{p}", f"  {p}", "t") for p in ("start", "read", "unpickle")),
    ("pickle_read_loads_s", "read + pickle.loads (cold, in the kernel)", "t"),
    ("pickle_loads_s", "  pickle.loads", "t"),
    ("pickle_cell_dump_write_s", "pickle.dumps + write + fsync as a cell, timed outside", "t"),
    ("pickle_cell_read_loads_s", "read + pickle.loads (cold) as a cell, timed outside", "t"),
    ("repause_same_s", "re-pause, nothing changed", "t"),
    ("pickle_bytes", "pickle size", "b"),
    ("pause.peak_extra_mib", "kernel peak RSS over before: pause", "m"),
    ("resume.peak_over_after_mib", "  resume (over the RSS right after it)", "m"),
)
FIXED_ROWS = (
    ("bare_start_s", "bare kernel start -> first cell", "t"),
    ("tiny_pause_s", "one-integer notebook: pause click -> paused", "t"),
    ("tiny_pause.gpu_released_s", "  click -> GPU released (event)", "t"),
    ("tiny_resume_s", "  resume click -> first cell", "t"),
    ("tiny_resume.start", "    start", "t"),
    ("tiny_repause_s", "  re-pause", "t"),
)


def medians(runs: list[dict]) -> dict:
    """The median of every numeric key over the repetitions (None where none has a value)."""
    keys = dict.fromkeys(k for r in runs for k in r)
    out = {}
    for k in keys:
        vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    return out


def _pause_work(r: dict) -> float:
    """The pause's own work on the namespace: what pickling and writing it compares with."""
    return r["pause.capture"] + r["pause.write"] + r["pause.verify"]


def _resume_work(r: dict) -> float:
    """The resume's own work: what reading the pickle and loading it compares with."""
    return r["resume.read"] + r["resume.unpickle"]


def small_pause(r: dict, f: dict) -> float:
    return _pause_work(r) / r["pickle_dump_write_s"]


def small_resume(r: dict, f: dict) -> float:
    return _resume_work(r) / r["pickle_read_loads_s"]


def small_pause_cell(r: dict, f: dict) -> float:
    """Against the pickling run as a cell and timed from outside the kernel: like the pause's
    phases, it carries one request to the kernel and its answer (no target: the issue's is
    against the kernel's own timing)."""
    return _pause_work(r) / r["pickle_cell_dump_write_s"]


def small_resume_cell(r: dict, f: dict) -> float:
    return _resume_work(r) / r["pickle_cell_read_loads_s"]


def ratio_specs(labels: list[str]) -> list[tuple]:
    """(key, label, section, size label or None, function of one repetition, op, target)."""

    def floor(r, f):  # the resume target: the slower of the two floors + 0.5 s
        return r["resume_s"] / (max(f["bare_start_s"], r["raw_read_s"]) + 0.5)

    specs = []
    for lab in labels:
        specs += [
            (f"resume_vs_floor[{lab}]", f"resume {lab} / (max(bare start, raw read) + 0.5 s)",
             "states", lab, floor, "<=", 1.0),
            (f"torch_load_kernel_vs_resume[{lab}]", f"new kernel + torch.load / resume {lab}",
             "states", lab, lambda r, f: r["kernel_torch_load_s"] / r["resume_s"], ">=", 2.0),
            (f"pause_vs_raw_write[{lab}]", f"pause {lab} / raw write",
             "states", lab, lambda r, f: r["pause_s"] / r["raw_write_s"], None, None),
            (f"resume_read_vs_raw_read[{lab}]", f"resume read phase {lab} / raw read",
             "states", lab, lambda r, f: r["resume.read"] / r["raw_read_s"], None, None),
            (f"pause_vs_torch_save[{lab}]", f"pause {lab} / torch.save",
             "states", lab, lambda r, f: r["pause_s"] / r["torch_save_s"], None, None),
        ]  # fmt: skip
    return specs + [
        ("tiny_gpu_released_s", "one integer: click -> GPU released (s)", "fixed", None,
         lambda r, f: r["tiny_pause.gpu_released_s"], "<=", 0.5),
        ("tiny_resume_minus_bare_s", "one integer: resume - bare kernel start (s)", "fixed",
         None, lambda r, f: r["tiny_resume_s"] - r["bare_start_s"], "<=", 0.3),
        ("small_pause_vs_pickle", "small objects: capture+write+verify / pickle dump+write",
         "small_objects", None, small_pause, "<=", 2.0),
        ("small_resume_vs_pickle", "small objects: read+unpickle / pickle read+loads",
         "small_objects", None, small_resume, "<=", 2.0),
        ("small_pause_vs_pickle_cell", "small objects: capture+write+verify / the pickle cell",
         "small_objects", None, small_pause_cell, None, None),
        ("small_resume_vs_pickle_cell", "small objects: read+unpickle / the loads cell",
         "small_objects", None, small_resume_cell, None, None),
    ]  # fmt: skip


def ratios(result: dict, fresh: list[dict], labels: list[str]) -> dict:
    """Every ratio whose section ran: per repetition, then median, min, max, and the target."""
    out = {}
    for key, label, section, lab, fn, op, target in ratio_specs(labels):
        where = result.get(section, {})
        runs = (where.get(lab, {}) if lab else where).get("runs")
        if not runs:
            continue
        try:
            per = [fn(r, f) for r, f in zip(runs, fresh, strict=True)]
        except (KeyError, TypeError, ZeroDivisionError):
            per = []
        per = [p for p in per if p is not None]
        med = statistics.median(per) if per else None
        out[key] = {
            "label": label,
            "median": med,
            "min": min(per) if per else None,
            "max": max(per) if per else None,
            "per_rep": per,
            "target": f"{op} {target:g}" if op else None,
            "met": bool(OPS[op](med, target)) if op and med is not None else None,
        }
    return out


def fmt(v, kind: str, size: int | None = None) -> tuple[str, str]:
    """(value, MiB/s) cells of a table row."""
    if v is None:
        return "-", ""
    if kind == "b":
        return f"{v / MIB:.1f} MiB", ""
    if kind in "mM":
        return (f"{v:+.0f} MiB" if kind == "m" else f"{v:.0f} MiB"), ""
    speed = f"{size / MIB / v:.0f}" if kind == "s" and size and v > 0 else ""
    return f"{v:.3f}", speed


def table(title: str, rows: tuple, section: dict, size: int | None, warm: bool) -> list[str]:
    """One section's rows: the median, MiB/s where a row moves the state, each repetition."""
    med, runs = section["median"], section["runs"]
    lines = [f"\n{title}", f"  {'':48}{'median s':>11}{'MiB/s':>7}   per repetition"]
    for key, label, kind in rows:
        if key not in med:
            continue
        v, speed = fmt(med[key], kind, size)
        label = label.replace("(cold", "(WARM") if warm else label
        reps = " ".join(fmt(r.get(key), kind, size)[0] for r in runs) if len(runs) > 1 else ""
        lines.append(f"  {label:<48}{v:>11}{speed:>7}   {reps}")
    return lines


def report(result: dict) -> str:
    """The tables of a finished run, as text."""
    meta = result["meta"]
    warm = meta["warm_reads"]
    lines = [
        f"end-to-end suite: {meta['repeat']} repetition(s), store in {meta['dir']}, "
        f"{meta['cpus']} CPUs, {meta['memory_gib']:.0f} GiB RAM",
        f"cold reads: {meta['cold_note']}",
    ]
    for lab, sec in result.get("states", {}).items():
        if isinstance(sec, dict) and "runs" in sec:
            size = sec["median"]["bytes"]
            title = f"[{lab}] {size / MIB:.0f} MiB of float32 in nn.Sequential, 40 tensors"
            lines += table(title, TENSOR_ROWS, sec, int(size), warm)
    small = result.get("small_objects", {})
    if "runs" in small:
        lines += table(f"[small objects] {small['layout']}", SMALL_ROWS, small, None, warm)
    if "runs" in result.get("fixed", {}):
        lines += table("[fixed costs]", FIXED_ROWS, result["fixed"], None, warm)
    head = "[ratios] per repetition, then median"
    lines += [f"\n{head:<62}{'median':>8}  {'min..max':<18}target"]
    for r in result["ratios"].values():
        med = "-" if r["median"] is None else f"{r['median']:.2f}"
        spread = f"{r['min']:.2f}..{r['max']:.2f}" if r["per_rep"] else ""
        spread = spread if len(spread) < 18 else f"{r['min']:.3g}..{r['max']:.3g}"
        met = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        target = f"{r['target']} {met}" if r["target"] else ""
        lines.append(f"  {r['label']:<60}{med:>8}  {spread:<18}{target}")
    storm = result.get("storm", {})
    if "p99_ms" in storm:
        lines.append(
            f"\n[storm] {storm['sessions']} notebooks of {storm['mib']} MiB resumed at once: "
            f"sessions GET median {storm['median_ms']:.1f} ms, p99 {storm['p99_ms']:.1f} ms, "
            f"max {storm['max_ms']:.1f} ms over {storm['requests']} requests; all running "
            f"after {storm['resume_seconds']:.1f} s"
        )
    elif storm:
        lines.append(f"\n[storm] {storm.get('skipped') or storm.get('error')}")
    return "\n".join(lines)
