"""The replay corpus: real public notebooks, kept unchanged (outputs stripped) in ``notebooks/``.

Each notebook runs in its own folder, beside the data files it reads; ``notebooks/SOURCES.md``
says where each came from (repository, path, commit) and under which licence. ``library`` is
the one a reader would file it under; ``fast`` marks the CI subset (``tests/test_replay.py``),
chosen to cover what a pause lost before issue #33: seeded numpy draws, matplotlib rc
settings, sympy's ``init_printing``, numpy and pandas print options, a scikit-learn pipeline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


@dataclass(frozen=True)
class Notebook:
    """``path``: relative to ``NOTEBOOKS``; its folder is the notebook's working folder."""

    path: str
    library: str
    fast: bool = False

    @property
    def name(self) -> str:
        """The file's stem: unique in the corpus."""
        return Path(self.path).stem

    @property
    def file(self) -> str:
        return Path(self.path).name

    @property
    def folder(self) -> Path:
        return (NOTEBOOKS / self.path).parent

    def code_cells(self) -> list[str]:
        """The sources of its code cells, in order, as "Run All" sends them."""
        doc = json.loads((NOTEBOOKS / self.path).read_text(encoding="utf-8"))
        return [
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in doc["cells"]
            if c["cell_type"] == "code"
        ]


def _nbs(folder: str, library: str, stems: str, fast: str = "") -> list[Notebook]:
    quick = set(fast.split())
    return [Notebook(f"{folder}/{s}.ipynb", library, s in quick) for s in stems.split()]


CORPUS: list[Notebook] = [
    # statsmodels' example gallery: datasets shipped in the package, many seeded draws
    *_nbs(
        "statsmodels",
        "statsmodels",
        """ols glm wls gls count_hurdle deterministics kernel_density metaanalysis1
        pca_fertility_factors tsa_arma_0 predict ets plots_boxplots treatment_effect
        mediation_survival discrete_choice_example quantile_regression statespace_forecasting
        stats_rankcompare robust_models_0""",
        fast="ols",
    ),
    # J.R. Johansson's lectures: plain Python, matplotlib with rc settings, sympy printing
    Notebook(
        "scientific-python-lectures/Lecture-1-Introduction-to-Python-Programming.ipynb", "python"
    ),
    Notebook("scientific-python-lectures/Lecture-4-Matplotlib.ipynb", "matplotlib"),
    Notebook("scientific-python-lectures/Lecture-5-Sympy.ipynb", "sympy", fast=True),
    # Géron's Hands-On Machine Learning (3rd ed.): scikit-learn, rc settings, seeded draws
    *_nbs(
        "handson-ml3",
        "scikit-learn",
        "04_training_linear_models 06_decision_trees extra_gradient_descent_comparison",
        fast="04_training_linear_models",
    ),
    *_nbs("handson-ml3", "numpy", "tools_numpy math_linear_algebra"),
    *_nbs("handson-ml3", "matplotlib", "tools_matplotlib math_differential_calculus"),
    *_nbs("handson-ml3", "pandas", "tools_pandas"),
    # McKinney's Python for Data Analysis (3rd ed.): print options, rc settings, seeded draws
    *_nbs("pydata-book", "python", "ch02 ch03"),
    *_nbs("pydata-book", "numpy", "ch04 appa"),
    *_nbs("pydata-book", "pandas", "ch05 ch10", fast="ch05"),
    *_nbs("pydata-book", "scikit-learn", "ch12"),
]


def fast_corpus() -> list[Notebook]:
    return [nb for nb in CORPUS if nb.fast]
