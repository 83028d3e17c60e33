"""Libraries' process state: numpy's global generator and print/error options, torch's
generators and defaults, matplotlib's ``rcParams``, pandas options, scikit-learn's config.

A provider reads only a library the notebook imported (``sys.modules``): it never imports one
at a pause. At a resume it imports the library to set it, which the namespace's restore does
anyway for a notebook that used it. Settings are carried only where they differ from the
library's defaults, and random states only once drawn from or seeded since the baseline.
"""

from __future__ import annotations

import sys
import warnings

from . import RANDOM_LAST


def _loaded(name: str):
    return sys.modules.get(name)


class NumpyRandom:
    """numpy's legacy global ``RandomState`` (``np.random.seed``/``np.random.rand``), exactly,
    whenever numpy is imported: whether a cell seeded it cannot be told from a baseline taken
    after the cell ran. A ``Generator`` the notebook made (``default_rng``) is a variable: the
    namespace carries it with its state."""

    label = "random state"
    order = RANDOM_LAST

    def capture(self):
        np = _loaded("numpy")
        return None if np is None else np.random.get_state(legacy=False)

    def restore(self, state) -> None:
        import numpy as np

        np.random.set_state(state)


class NumpySettings:
    """``np.set_printoptions`` and ``np.seterr``, where they differ from numpy's defaults."""

    label = "numpy settings"
    PRINT_DEFAULTS = {
        "edgeitems": 3,
        "threshold": 1000,
        "floatmode": "maxprec",
        "precision": 8,
        "suppress": False,
        "linewidth": 75,
        "nanstr": "nan",
        "infstr": "inf",
        "sign": "-",
        "formatter": None,
        "legacy": False,
        "override_repr": None,
    }
    ERR_DEFAULTS = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}

    def capture(self):
        np = _loaded("numpy")
        if np is None:
            return None
        printing = {
            k: v
            for k, v in np.get_printoptions().items()
            if k in self.PRINT_DEFAULTS and v != self.PRINT_DEFAULTS[k]
        }
        errors = {k: v for k, v in np.geterr().items() if v != self.ERR_DEFAULTS.get(k)}
        return {"print": printing, "err": errors} if printing or errors else None

    def restore(self, state) -> None:
        import numpy as np

        printing = dict(state["print"])
        if printing.get("legacy") is False:  # numpy takes False only as "not legacy"
            printing.pop("legacy")
        np.set_printoptions(**printing)
        np.seterr(**state["err"])


class TorchRandom:
    """torch's CPU generator and, where CUDA was initialised, each device's generator, whenever
    torch is imported. On a resume without CUDA (``device="cpu"``), the CPU draws are exact and
    the CUDA states are named as not restored."""

    label = "random state"
    order = RANDOM_LAST

    def capture(self):
        torch = _loaded("torch")
        if torch is None:
            return None
        cpu = torch.get_rng_state()
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda = [s.cpu() for s in torch.cuda.get_rng_state_all()]
        return {"cpu": cpu, "cuda": cuda}

    def restore(self, state):
        import torch

        torch.set_rng_state(state["cpu"])
        cuda = state.get("cuda")
        if not cuda:
            return None
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for i, s in enumerate(cuda[:available]):  # lazily applied when CUDA initialises
            torch.cuda.set_rng_state(s, i)
        if available < len(cuda):
            where = "on the CPU" if available == 0 else f"with {available} GPU(s)"
            missing = ", ".join(f"cuda:{i}" for i in range(available, len(cuda)))
            return {
                "not_restored": [
                    (
                        f"torch CUDA random state ({missing})",
                        f"resumed {where}: those devices' generators have no device here; "
                        "the CPU generator is exact",
                    )
                ]
            }
        return None


class TorchSettings:
    """torch's defaults the user set: default dtype, deterministic algorithms, print options,
    cuDNN's ``deterministic``/``benchmark`` flags, and the number of CPU threads (set for
    reproducible float sums as often as for speed)."""

    label = "torch settings"

    def __init__(self):
        self._threads = None

    def baseline(self) -> None:
        torch = _loaded("torch")
        if torch is not None:
            self._threads = torch.get_num_threads()

    def capture(self):
        torch = _loaded("torch")
        if torch is None:
            return None
        state = {}
        threads = self._threads if self._threads is not None else _default_threads()
        if torch.get_num_threads() != threads:
            state["threads"] = torch.get_num_threads()
        if torch.get_default_dtype() is not torch.float32:
            state["dtype"] = str(torch.get_default_dtype()).removeprefix("torch.")
        if torch.are_deterministic_algorithms_enabled():
            state["deterministic"] = {
                "warn_only": torch.is_deterministic_algorithms_warn_only_enabled()
            }
        opts = vars(torch._tensor_str.PRINT_OPTS)
        defaults = {
            "precision": 4,
            "threshold": 1000,
            "edgeitems": 3,
            "linewidth": 80,
            "sci_mode": None,
        }
        printing = {k: v for k, v in opts.items() if k in defaults and v != defaults[k]}
        if printing:
            state["print"] = printing
        cudnn = torch.backends.cudnn
        flags = {"deterministic": cudnn.deterministic, "benchmark": cudnn.benchmark}
        flags = {k: v for k, v in flags.items() if v}
        if flags:
            state["cudnn"] = flags
        return state or None

    def restore(self, state) -> None:
        import torch

        if "dtype" in state:
            torch.set_default_dtype(getattr(torch, state["dtype"]))
        if "deterministic" in state:
            torch.use_deterministic_algorithms(True, **state["deterministic"])
        if "print" in state:
            torch.set_printoptions(**state["print"])
        for k, v in state.get("cudnn", {}).items():
            setattr(torch.backends.cudnn, k, v)
        if "threads" in state:
            torch.set_num_threads(state["threads"])


def _default_threads() -> int:
    """What torch chose at import, for a notebook that imported it before the baseline:
    ``OMP_NUM_THREADS``, else the physical cores this process may run on."""
    import os

    import psutil

    try:
        return int(os.environ["OMP_NUM_THREADS"])
    except (KeyError, ValueError):
        pass
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return max(
        1, min(cores, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores)
    )


class MatplotlibSettings:
    """What the notebook changed of ``matplotlib.rcParams`` (``plt.rc``, ``plt.style.use``,
    ``rcParams[...] = …``): the entries that differ from those matplotlib loaded at import. The
    backend is not one of them (``IPythonMatplotlib`` carries ``%matplotlib``)."""

    label = "plotting settings"
    SKIP = frozenset({"backend", "backend_fallback", "interactive"})

    def capture(self):
        mpl = _loaded("matplotlib")
        if mpl is None:
            return None
        orig = mpl.rcParamsOrig
        # dict's own methods: rcParams' item access resolves the backend (imports pyplot)
        changed = {
            k: v
            for k, v in dict.items(mpl.rcParams)
            if k not in self.SKIP and (k not in orig or v != dict.__getitem__(orig, k))
        }
        return changed or None

    def restore(self, state):
        import matplotlib as mpl

        bad = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a deprecated key warns as it did when it was set
            for k, v in state.items():
                try:
                    mpl.rcParams[k] = v
                except (KeyError, ValueError) as e:
                    bad.append((f"matplotlib rcParams[{k!r}]", f"not accepted here: {e}"))
        return {"not_restored": bad}


class PandasOptions:
    """pandas options (``pd.set_option``) that differ from their defaults."""

    label = "pandas options"

    def capture(self):
        pd = _loaded("pandas")
        if pd is None:
            return None
        from pandas._config import config

        changed = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key, option in config._registered_options.items():
                if key in config._deprecated_options:
                    continue
                value = pd.get_option(key)
                if value != option.defval:
                    changed[key] = value
        return changed or None

    def restore(self, state):
        import pandas as pd

        bad = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k, v in state.items():
                try:
                    pd.set_option(k, v)
                except (KeyError, ValueError, pd.errors.OptionError) as e:
                    bad.append((f"pandas option {k}", f"not accepted here: {e}"))
        return {"not_restored": bad}


class SklearnConfig:
    """scikit-learn's ``set_config``, where it differs from the defaults (in the thread that
    runs the notebook's cells, which is the one the agent's requests run in)."""

    label = "scikit-learn settings"

    def __init__(self):
        self._defaults = None

    def capture(self):
        sk = _loaded("sklearn")
        if sk is None:
            return None
        if self._defaults is None:  # set at import; set_config changes a per-thread copy
            from sklearn import _config

            self._defaults = dict(_config._global_config)
        config = sk.get_config()
        changed = {k: v for k, v in config.items() if self._defaults.get(k, v) != v}
        return changed or None

    def restore(self, state) -> None:
        import inspect

        import sklearn

        accepted = inspect.signature(sklearn.set_config).parameters
        sklearn.set_config(**{k: v for k, v in state.items() if k in accepted})
