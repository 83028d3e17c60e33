"""The notebook states the end-to-end suite pauses and resumes, made inside the benchmark's kernel.

``run.py`` calls these in the kernel through ``suite_states.Lab.call`` (each takes the kernel's
namespace ``ns`` first and returns a JSON-able dict). They put into ``ns`` only what a notebook
would hold: the model, or the small variables, and the modules a notebook would import. They
never leave a helper behind, since the pause would capture it as well.

* ``make_tensors``: an ``nn.Sequential`` of 20 ``Linear(w, w)`` layers in float32, ``w`` chosen
  so the weights and biases add up to about the asked size. Its content is fresh per seed: a
  pause never finds its blobs already in the store. ``change_tenth`` changes 2 of the 20
  layers (4 of the 40 tensors, 10 % of the bytes), for a re-pause that writes only those.
* ``make_small``: ``n`` Python objects in ``n / 4`` variables, as a notebook that has explored
  data for a while holds them, plus one pandas DataFrame of ``n`` rows (left out, and said so,
  when pandas is not installed). ``SMALL_LAYOUT`` says the layout in words.
"""

from __future__ import annotations

import math
import os
import random
import string

LAYERS = 20
SMALL_LAYOUT = (
    "{variables} variables holding {objects} objects: {groups} dicts (an int id, a str "
    "name, a float, a list of 2 str: 7 objects each), {groups} lists of 6 ints (7 each), "
    "{groups} str and {groups} int; plus {frame}"
)


def memory(ns: dict) -> dict:
    """The kernel's pid, current and peak resident size (bytes)."""
    out = {"pid": os.getpid()}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[2:5].lower()] = int(line.split()[1]) * 1024
    return out


def fresh_rss(ns: dict) -> dict:
    """A fresh kernel's resident size once it has imported what a resume imports: what a
    resumed kernel's peak is measured over."""
    import cloudpickle  # noqa: F401
    import torch  # noqa: F401
    import xxhash  # noqa: F401

    import jupyter_gpu_pause.kernel.agent  # noqa: F401

    return memory(ns)


# -- tensors -----------------------------------------------------------------------------------
def width(nbytes: int) -> int:
    """The ``w`` of ``LAYERS`` float32 ``Linear(w, w)`` layers (with bias) of about ``nbytes``."""
    return max(8, int((math.sqrt(1 + 4 * nbytes / 4 / LAYERS) - 1) / 2))


def make_tensors(ns: dict, nbytes: int, seed: int) -> dict:
    """``model`` (and ``torch``, ``nn``) in the namespace; its size and fingerprint."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    w = width(nbytes)
    with torch.no_grad():
        model = nn.Sequential(*[nn.Linear(w, w) for _ in range(LAYERS)])
    ns.update(torch=torch, nn=nn, model=model)
    size = sum(p.nbytes for p in model.parameters())
    return {"bytes": size, "tensors": 2 * LAYERS, "width": w, **fingerprint(ns)}


def fingerprint(ns: dict) -> dict:
    """xxh3 of every byte of ``model``, in order: a resume must give the same."""
    import xxhash
    from baselines import as_bytes

    h = xxhash.xxh3_64()
    for t in ns["model"].state_dict().values():
        h.update(as_bytes(t))
    return {"fingerprint": h.hexdigest()}


def change_tenth(ns: dict) -> dict:
    """Add 1 to the first and the middle layer (weight and bias): 10 % of the tensors."""
    import torch

    model = ns["model"]
    with torch.no_grad():
        for i in (0, LAYERS // 2):
            model[i].weight.add_(1.0)
            model[i].bias.add_(1.0)
    changed = sum(model[i].weight.nbytes + model[i].bias.nbytes for i in (0, LAYERS // 2))
    return {"changed_bytes": changed, **fingerprint(ns)}


# -- small objects -----------------------------------------------------------------------------
def small_names(objects: int) -> list[str]:
    groups = max(1, objects // 16)
    kinds = ("cfg", "hist", "name", "count")
    return [f"{k}_{i}" for i in range(groups) for k in kinds] + ["df"]


def make_small(ns: dict, objects: int, seed: int) -> dict:
    """The small-objects namespace (see the module's docstring); its layout in words."""
    rng = random.Random(seed)

    def word(lo: int = 4, hi: int = 12) -> str:
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(lo, hi)))

    def big() -> int:  # not one of CPython's shared small ints
        return rng.randrange(10**9, 10**12)

    groups = max(1, objects // 16)
    for i in range(groups):
        ns[f"cfg_{i}"] = {"id": big(), "name": word(), "lr": rng.random(), "tags": [word(), word()]}
        ns[f"hist_{i}"] = [big() for _ in range(6)]
        ns[f"name_{i}"] = word(12, 40)
        ns[f"count_{i}"] = big()
    frame = make_frame(ns, objects, rng)
    layout = SMALL_LAYOUT.format(
        variables=4 * groups, objects=16 * groups, groups=groups, frame=frame
    )
    return {"variables": 4 * groups, "objects": 16 * groups, "layout": layout}


def make_frame(ns: dict, rows: int, rng: random.Random) -> str:
    """``df``, a DataFrame of ``rows`` rows (and ``pd``); says what it made, or why not."""
    try:
        import pandas as pd
    except ImportError:
        return "no DataFrame (pandas is not installed)"
    ns["pd"] = pd
    ns["df"] = pd.DataFrame(
        {
            "id": [rng.randrange(10**9) for _ in range(rows)],
            "score": [rng.random() for _ in range(rows)],
            "label": ["".join(rng.choices("abcdef", k=8)) for _ in range(rows)],
            "group": pd.Categorical([rng.choice("ABCD") for _ in range(rows)]),
        }
    )
    return f"one pandas DataFrame of {rows} rows x 4 columns (int, float, str, category)"


def small_fingerprint(ns: dict, objects: int) -> dict:
    """xxh3 over every small variable's ``repr`` (and the DataFrame's row hashes)."""
    import xxhash

    h = xxhash.xxh3_64()
    for name in small_names(objects):
        if name == "df":
            if "df" in ns:
                import pandas as pd

                h.update(pd.util.hash_pandas_object(ns["df"]).to_numpy().tobytes())
            continue
        h.update(f"{name}={ns[name]!r};".encode())
    return {"fingerprint": h.hexdigest()}


def small_variables(ns: dict, objects: int) -> dict:
    """The small variables the namespace holds (``df`` only when pandas made it)."""
    return {"names": [n for n in small_names(objects) if n in ns]}
