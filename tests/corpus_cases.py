"""The corpus: real library objects as notebooks declare them, each with a probe that shows it
is equal *and* usable, and a cell that goes on modifying it (issue #25, "Nothing lost").

Each case's variables start with its name and an underscore (``skpipe_model``): that is how a
name the check lists as *cannot be saved* is traced to its case. Imports bind shared names
(``np``, ``pd``); a probe prints a deterministic fingerprint (values, shapes, sizes — never a
``repr`` that shows a memory address or a time). ``fast`` cases are the CI subset
(``tests/test_corpus.py``); ``benchmarks/bench_corpus.py`` runs them all.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """``library``: the module the kernel must import, or the case is skipped."""

    name: str
    library: str
    setup: str
    probe: str
    modify: str
    fast: bool = False

    @property
    def prefix(self) -> str:
        return self.name + "_"


def _case(name, library, setup, probe, modify, fast=False) -> Case:
    assert "_" not in name, name
    d = textwrap.dedent
    return Case(name, library, d(setup).strip(), d(probe).strip(), d(modify).strip(), fast)


CASES = [
    # -- the objects of issue #25 -----------------------------------------------------------------
    _case(
        "skpipe",
        "sklearn",
        """
        import numpy as np
        from sklearn.datasets import make_classification
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        skpipe_X, skpipe_y = make_classification(n_samples=200, n_features=6, random_state=0)
        skpipe_model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0))
        skpipe_model.fit(skpipe_X, skpipe_y)
        """,
        """
        print(np.round(skpipe_model.predict_proba(skpipe_X[:4]), 8).tolist())
        print(skpipe_model.score(skpipe_X, skpipe_y), list(skpipe_model.named_steps))
        """,
        "skpipe_model.set_params(logisticregression__C=0.1).fit(skpipe_X[:150], skpipe_y[:150])",
        fast=True,
    ),
    _case(
        "smols",
        "statsmodels",
        """
        import numpy as np
        import statsmodels.api as sm
        smols_rng = np.random.default_rng(1)
        smols_X = sm.add_constant(smols_rng.normal(size=(100, 2)))
        smols_y = smols_X @ [1.0, 2.0, -0.5] + smols_rng.normal(scale=0.1, size=100)
        smols_res = sm.OLS(smols_y, smols_X).fit()
        """,
        """
        print(np.round(smols_res.params, 10).tolist(), round(smols_res.rsquared, 10))
        print(np.round(smols_res.predict(smols_X[:3]), 10).tolist())
        print(np.round(smols_res.conf_int(), 8).tolist())
        """,
        "smols_res = smols_res.get_robustcov_results('HC1')",
        fast=True,
    ),
    _case(
        "mplfig",
        "matplotlib",
        """
        import numpy as np
        from matplotlib.figure import Figure
        mplfig_fig = Figure(figsize=(4, 3), dpi=50)
        mplfig_ax = mplfig_fig.subplots()
        mplfig_ax.plot(np.arange(10), np.arange(10) ** 2, label="squares")
        mplfig_ax.set_title("corpus")
        mplfig_ax.legend()
        """,
        """
        import hashlib, io
        mplfig_buf = io.BytesIO()
        mplfig_fig.savefig(mplfig_buf, format="png", metadata={"Software": None})
        print(mplfig_fig.get_size_inches().tolist(), mplfig_fig.dpi, len(mplfig_fig.axes))
        print([(l.get_label(), l.get_ydata().tolist()) for l in mplfig_ax.get_lines()])
        print(mplfig_ax.get_title(), mplfig_ax is mplfig_fig.axes[0])
        print(hashlib.sha256(mplfig_buf.getvalue()).hexdigest())
        """,
        """
        mplfig_ax.plot([0, 9], [80, 0], label="down")
        mplfig_ax.set_title("modified")
        """,
        fast=True,
    ),
    _case(
        "gen",
        "itertools",
        "gen_squares = (i * i for i in range(100))\nnext(gen_squares)",
        "print(next(gen_squares))",
        "next(gen_squares)",
        fast=True,
    ),
    _case(
        "file",
        "tempfile",
        """
        import os, tempfile
        file_path = os.path.join(tempfile.mkdtemp(), "notes.txt")
        file_f = open(file_path, "w+")
        file_f.write("line one\\n")
        file_f.flush()
        """,
        "print(file_f.tell(), file_f.closed, open(file_path).read())",
        "file_f.write('line two\\n'); file_f.flush()",
        fast=True,
    ),
    _case(
        "sql",
        "sqlite3",
        """
        import sqlite3
        sql_con = sqlite3.connect(":memory:")
        sql_con.execute("create table t (k integer, v text)")
        sql_con.executemany("insert into t values (?, ?)", [(1, "a"), (2, "b")])
        """,
        "print(sql_con.execute('select k, v from t order by k').fetchall())",
        "sql_con.execute(\"insert into t values (3, 'c')\")",
        fast=True,
    ),
    _case(
        "lamdf",
        "pandas",
        """
        import pandas as pd
        lamdf_df = pd.DataFrame({"a": range(10), "b": [x * 1.5 for x in range(10)]})
        lamdf_above = (lambda df: lambda k: df[df.a > k].b.sum())(lamdf_df)
        """,
        "print(lamdf_above(3), lamdf_above(7))",
        # the closure's DataFrame is the notebook's: a change to one shows in the other
        "lamdf_df.loc[9, 'b'] = 100.0",
        fast=True,
    ),
    _case(
        "bkfig",
        "bokeh",
        """
        from bokeh.plotting import figure
        bkfig_p = figure(title="corpus", width=300, height=200)
        bkfig_r = bkfig_p.line([1, 2, 3], [4, 6, 5], line_width=2)
        """,
        """
        print(bkfig_p.title.text, bkfig_p.width, len(bkfig_p.renderers))
        print(list(bkfig_r.data_source.data["y"]))
        """,
        "bkfig_p.title.text = 'modified'",
        fast=True,
    ),
    _case(
        "widget",
        "ipywidgets",
        """
        import ipywidgets
        widget_slider = ipywidgets.IntSlider(value=3, min=0, max=10, description="n")
        """,
        "print(widget_slider.value, widget_slider.max, widget_slider.description)",
        "widget_slider.value = 7",
        fast=True,
    ),
    _case(
        "sha",
        "hashlib",
        """
        import hashlib
        sha_h = hashlib.sha256(b"first part;")
        """,
        "print(sha_h.copy().hexdigest())",
        "sha_h.update(b'second part')",
        fast=True,
    ),
    _case(
        "wcs",
        "astropy",
        """
        import numpy as np
        from astropy.io import fits
        from astropy.wcs import WCS
        wcs_header = fits.Header()
        for wcs_k, wcs_v in dict(
            NAXIS=2, NAXIS1=100, NAXIS2=80, CTYPE1="RA---TAN", CTYPE2="DEC--TAN",
            CRVAL1=150.1, CRVAL2=2.2, CRPIX1=50.5, CRPIX2=40.5, CD1_1=-2.7e-4, CD1_2=1e-6,
            CD2_1=1e-6, CD2_2=2.7e-4, RADESYS="ICRS", EQUINOX=2000.0,
            **{"DATE-OBS": "2020-01-01T00:00:00", "MJD-OBS": 58849.0},
        ).items():
            wcs_header[wcs_k] = wcs_v
        wcs_w = WCS(wcs_header)
        wcs_grid = np.mgrid[0:100:7, 0:80:9].reshape(2, -1).astype(float)
        """,
        # usable: the same world coordinates on a grid, both ways (docs/failures.md: the
        # repr and the pickle change with astropy's own round trip, not these)
        """
        import hashlib
        wcs_world = np.array(wcs_w.pixel_to_world_values(*wcs_grid))
        print(hashlib.sha256(wcs_world.tobytes()).hexdigest(), wcs_w.pixel_shape)
        print(np.round(wcs_w.world_to_pixel_values(*wcs_world)[0][:5], 9).tolist())
        print(wcs_w.wcs.ctype, wcs_w.wcs.radesys, wcs_w.wcs.mjdobs)
        """,
        "wcs_w.wcs.crval = [151.0, 2.5]; wcs_w.wcs.set()",
        fast=True,
    ),
    _case(
        "celprm",
        "astropy",
        """
        from astropy.wcs import Celprm
        celprm_c = Celprm()
        celprm_c.ref = [150.0, 2.0]
        celprm_c.prj.code = "TAN"
        celprm_c.set()
        """,
        "print(list(celprm_c.ref), celprm_c.prj.code, celprm_c.euler.round(9).tolist())",
        "celprm_c.ref = [10.0, 20.0]; celprm_c.set()",
        fast=True,
    ),
    _case(
        "torch",
        "torch",
        """
        import torch
        torch.manual_seed(0)
        torch_model = torch.nn.Sequential(
            torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1)
        )
        torch_opt = torch.optim.Adam(torch_model.parameters(), lr=0.01)
        torch_x = torch.linspace(-1, 1, 20).reshape(5, 4)
        torch_model(torch_x).sum().backward()
        torch_opt.step()
        """,
        """
        print(torch_model(torch_x).detach().numpy().round(6).tolist())
        print(torch_opt.param_groups[0]["params"][0] is torch_model[0].weight)
        print([float(s["step"]) for s in torch_opt.state.values()])
        """,
        """
        torch_opt.zero_grad(); torch_model(torch_x).pow(2).sum().backward(); torch_opt.step()
        """,
        fast=True,
    ),
    # -- more of the fast subset --------------------------------------------------------------
    _case(
        "skkm",
        "sklearn",
        """
        import numpy as np
        from sklearn.cluster import KMeans
        skkm_centres = np.repeat([[0, 0], [5, 5], [0, 5]], 20, 0)
        skkm_X = np.random.default_rng(2).normal(size=(60, 2)) + skkm_centres
        skkm_model = KMeans(n_clusters=3, n_init=3, random_state=0).fit(skkm_X)
        """,
        """
        print(np.round(skkm_model.cluster_centers_, 8).tolist(), round(skkm_model.inertia_, 8))
        print(skkm_model.predict([[0, 0], [5, 5], [0, 5]]).tolist())
        """,
        "skkm_model = skkm_model.set_params(n_clusters=2).fit(skkm_X)",
        fast=True,
    ),
    _case(
        "skrf",
        "sklearn",
        """
        from sklearn.datasets import make_classification
        from sklearn.ensemble import RandomForestClassifier
        skrf_X, skrf_y = make_classification(n_samples=120, n_features=5, random_state=3)
        skrf_model = RandomForestClassifier(n_estimators=8, random_state=0, warm_start=True)
        skrf_model.fit(skrf_X, skrf_y)
        """,
        """
        print(skrf_model.predict_proba(skrf_X[:5]).round(8).tolist(), len(skrf_model.estimators_))
        print(skrf_model.feature_importances_.round(8).tolist())
        """,
        "skrf_model.set_params(n_estimators=12).fit(skrf_X, skrf_y)",
        fast=True,
    ),
    _case(
        "smformula",
        "statsmodels",
        """
        import numpy as np
        import pandas as pd
        import statsmodels.formula.api as smf
        smformula_df = pd.DataFrame({
            "x": np.linspace(0, 1, 40), "g": list("abcd") * 10,
            "y": np.sin(np.arange(40)) + np.arange(40) * 0.1,
        })
        smformula_res = smf.ols("y ~ x + C(g)", data=smformula_df).fit()
        """,
        """
        print(smformula_res.params.round(10).to_dict())
        print(smformula_res.predict(smformula_df.head(3)).round(10).tolist())
        """,
        "smformula_res = smf.ols('y ~ x * C(g)', data=smformula_df).fit()",
        fast=True,
    ),
    _case(
        "pdframe",
        "pandas",
        """
        import pandas as pd
        pdframe_df = pd.DataFrame({
            "when": pd.date_range("2024-01-01", periods=6, freq="D", tz="Europe/Paris"),
            "kind": pd.Categorical(list("abcabc")),
            "v": [1.5, 2.5, None, 4.0, 5.0, 6.5],
        }).set_index(["kind", "when"])
        pdframe_groups = pdframe_df.groupby(level="kind", observed=True)
        """,
        """
        print(pdframe_df.to_csv())
        print(pdframe_df.dtypes.to_dict(), pdframe_groups.v.sum().to_dict())
        """,
        "pdframe_df.loc[('c', pdframe_df.index[-1][1]), 'v'] = 99.0",
        fast=True,
    ),
    _case(
        "pdseries",
        "pandas",
        """
        import pandas as pd
        pdseries_s = pd.Series(range(12), index=pd.period_range("2024-01", periods=12, freq="M"))
        pdseries_roll = pdseries_s.rolling(3)
        pdseries_iv = pd.interval_range(0, 5)
        """,
        "print(pdseries_roll.mean().tolist(), pdseries_s.index.tolist()[:2], list(pdseries_iv))",
        "pdseries_s.iloc[0] = 100",
        fast=True,
    ),
    _case(
        "npobj",
        "numpy",
        """
        import numpy as np
        npobj_rng = np.random.default_rng(42)
        npobj_rs = np.random.RandomState(7)
        npobj_dtype = [("i", "i4"), ("f", "f8"), ("s", "S1")]
        npobj_rec = np.array([(1, 2.5, b"x"), (2, 3.5, b"y")], dtype=npobj_dtype)
        npobj_masked = np.ma.masked_array([1, 2, 3, 4], mask=[0, 1, 0, 1])
        npobj_big = np.arange(300_000, dtype=np.float64).reshape(600, 500)  # a blob of its own
        npobj_view = npobj_big[::2, 10:20]
        npobj_poly = np.poly1d([1, -2, 3])
        """,
        """
        print(npobj_rng.integers(0, 1000, 5).tolist(), npobj_rs.randint(0, 1000, 3).tolist())
        print(npobj_rec.tolist(), npobj_masked.sum(), npobj_masked.mask.tolist())
        print(float(npobj_big.sum()), npobj_view.base is npobj_big, npobj_poly(3))
        """,
        "npobj_big[0, 10] = -1.0; npobj_masked[1] = 10",
        fast=True,
    ),
    _case(
        "scisparse",
        "scipy",
        """
        import numpy as np
        import scipy.sparse
        scisparse_m = scipy.sparse.random(50, 40, density=0.1, format="csr", random_state=4)
        """,
        """
        print(round(scisparse_m.sum(), 10), scisparse_m.nnz)
        print((scisparse_m @ np.arange(40)).round(8)[:5].tolist())
        """,
        """
        scisparse_m = scisparse_m.tolil()
        scisparse_m[0, 0] = 5.0
        scisparse_m = scisparse_m.tocsr()
        """,
        fast=True,
    ),
    _case(
        "scistats",
        "scipy",
        """
        import numpy as np
        from scipy import interpolate, stats
        scistats_dist = stats.norm(loc=2, scale=3)
        scistats_kde = stats.gaussian_kde(np.random.default_rng(5).normal(size=200))
        scistats_spline = interpolate.CubicSpline(np.arange(6), [0, 1, 0, 2, 1, 3])
        """,
        """
        print(scistats_dist.cdf([0, 2, 4]).round(12).tolist())
        print(scistats_kde([0, 1]).round(12).tolist())
        print(scistats_spline(np.linspace(0, 5, 7)).round(12).tolist())
        """,
        "scistats_kde.set_bandwidth(0.5)",
        fast=True,
    ),
    _case(
        "aptable",
        "astropy",
        """
        import astropy.units as u
        from astropy.coordinates import SkyCoord
        from astropy.table import Table
        aptable_t = Table({"name": ["a", "b"], "flux": [1.5, 2.5] * u.Jy})
        aptable_c = SkyCoord(ra=[10.0, 11.0] * u.deg, dec=[-5.0, 5.0] * u.deg, frame="icrs")
        aptable_q = (3 * u.km / u.s).to(u.m / u.s)
        """,
        """
        print(aptable_t["flux"].sum(), aptable_t.colnames, aptable_q)
        print(aptable_c.galactic.l.deg.round(9).tolist(), aptable_c[0].separation(aptable_c[1]).deg)
        """,
        "aptable_t.add_row(['c', 3.5 * u.Jy])",
        fast=True,
    ),
    _case(
        "py",
        "collections",
        """
        import collections, dataclasses, datetime, decimal, enum, fractions, functools, re
        @dataclasses.dataclass
        class py_Point:
            x: int
            y: int = 0
        class py_Color(enum.Enum):
            RED = 1
            BLUE = 2
        def py_counter():
            n = 0
            def bump():
                nonlocal n
                n += 1
                return n
            return bump
        py_bump = py_counter()
        py_bump()
        py_partial = functools.partial(int, base=2)
        py_dd = collections.defaultdict(list, {"a": [1]})
        py_deque = collections.deque([1, 2, 3], maxlen=3)
        py_when = datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc)
        py_things = [py_Point(1, 2), py_Color.BLUE, decimal.Decimal("1.10"),
                     fractions.Fraction(1, 3), py_when, re.compile(r"a+b")]
        """,
        """
        print(py_bump(), py_partial("101"), dict(py_dd), list(py_deque), py_things[0])
        print(py_things[1] is py_Color.BLUE, py_things[2:5], bool(py_things[5].match("aab")))
        """,
        "py_dd['b'].append(2); py_deque.append(4)",
        fast=True,
    ),
    # -- the full benchmark only ----------------------------------------------------------------
    _case(
        "skgrid",
        "sklearn",
        """
        import numpy as np
        import pandas as pd
        from sklearn.compose import ColumnTransformer
        from sklearn.model_selection import GridSearchCV
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler
        from sklearn.tree import DecisionTreeRegressor
        skgrid_df = pd.DataFrame({"c": list("xyz") * 20, "n": np.arange(60.0)})
        skgrid_y = np.arange(60.0) % 7
        skgrid_pipe = Pipeline([
            ("cols", ColumnTransformer(
                [("oh", OneHotEncoder(), ["c"]), ("sc", StandardScaler(), ["n"])]
            )),
            ("tree", DecisionTreeRegressor(random_state=0)),
        ])
        skgrid_search = GridSearchCV(skgrid_pipe, {"tree__max_depth": [2, 4]}, cv=3)
        skgrid_search.fit(skgrid_df, skgrid_y)
        """,
        """
        print(skgrid_search.best_params_)
        print(skgrid_search.predict(skgrid_df.head(4)).round(10).tolist())
        """,
        "skgrid_search.set_params(param_grid={'tree__max_depth': [3]}).fit(skgrid_df, skgrid_y)",
    ),
    _case(
        "sktext",
        "sklearn",
        """
        from sklearn.decomposition import PCA
        from sklearn.feature_extraction.text import TfidfVectorizer
        sktext_vec = TfidfVectorizer().fit(["the cat sat", "the dog ran", "a cat ran"])
        sktext_docs = ["the cat sat", "the dog ran", "a cat ran"]
        sktext_pca = PCA(n_components=2).fit(sktext_vec.transform(sktext_docs).toarray())
        """,
        """
        print(sorted(sktext_vec.vocabulary_.items()))
        sktext_t = sktext_pca.transform(sktext_vec.transform(["a dog sat"]).toarray())
        print(abs(sktext_t).round(10).tolist())
        """,
        "sktext_vec.set_params(lowercase=False).fit(['Cats and Dogs'])",
    ),
    _case(
        "smarima",
        "statsmodels",
        """
        import numpy as np
        from statsmodels.tsa.arima.model import ARIMA
        smarima_y = np.cumsum(np.random.default_rng(8).normal(size=80))
        smarima_res = ARIMA(smarima_y, order=(1, 1, 0)).fit()
        """,
        """
        print(np.round(smarima_res.params, 6).tolist())
        print(np.round(smarima_res.forecast(3), 6).tolist())
        """,
        "smarima_res = smarima_res.append(smarima_y[:5])",
    ),
    _case(
        "smlogit",
        "statsmodels",
        """
        import numpy as np
        import statsmodels.api as sm
        smlogit_X = sm.add_constant(np.linspace(-2, 2, 50))
        smlogit_y = (np.sin(np.arange(50)) + smlogit_X[:, 1] > 0).astype(float)
        smlogit_res = sm.Logit(smlogit_y, smlogit_X).fit(disp=0)
        """,
        """
        print(np.round(smlogit_res.params, 8).tolist())
        print(np.round(smlogit_res.predict(smlogit_X[:3]), 8).tolist())
        """,
        "smlogit_res = sm.Probit(smlogit_y, smlogit_X).fit(disp=0)",
    ),
    _case(
        "mplgrid",
        "matplotlib",
        """
        import numpy as np
        import matplotlib.pyplot as plt
        mplgrid_fig, mplgrid_axes = plt.subplots(1, 2, figsize=(4, 2), dpi=40)
        mplgrid_im = mplgrid_axes[0].imshow(np.arange(16).reshape(4, 4))
        mplgrid_fig.colorbar(mplgrid_im, ax=mplgrid_axes[0])
        mplgrid_axes[1].scatter([1, 2, 3], [3, 1, 2])
        """,
        """
        import hashlib, io
        mplgrid_buf = io.BytesIO()
        mplgrid_fig.savefig(mplgrid_buf, format="png", metadata={"Software": None})
        print(len(mplgrid_fig.axes), mplgrid_im.get_array().tolist())
        print(mplgrid_im.axes is mplgrid_axes[0])
        print(hashlib.sha256(mplgrid_buf.getvalue()).hexdigest())
        """,
        "mplgrid_im.set_cmap('gray'); mplgrid_axes[1].set_xlim(0, 4)",
    ),
    _case(
        "bksource",
        "bokeh",
        """
        from bokeh.models import ColumnDataSource
        bksource_src = ColumnDataSource({"x": [1, 2, 3], "y": [3, 2, 1]})
        """,
        "print(dict(bksource_src.data))",
        "bksource_src.data = {'x': [1], 'y': [2]}",
    ),
    _case(
        "widgetbox",
        "ipywidgets",
        """
        import ipywidgets
        widgetbox_b = ipywidgets.VBox([ipywidgets.Text("hi"), ipywidgets.Checkbox(True)])
        """,
        "print([type(c).__name__ for c in widgetbox_b.children], widgetbox_b.children[0].value)",
        "widgetbox_b.children[0].value = 'bye'",
    ),
    _case(
        "torchsched",
        "torch",
        """
        import torch
        torch.manual_seed(1)
        torchsched_net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        torchsched_opt = torch.optim.SGD(torchsched_net.parameters(), lr=0.1, momentum=0.9)
        torchsched_sched = torch.optim.lr_scheduler.StepLR(torchsched_opt, step_size=1, gamma=0.5)
        torchsched_gen = torch.Generator().manual_seed(3)
        torchsched_x = torch.arange(12.0).reshape(4, 3)
        torchsched_net(torchsched_x).sum().backward()
        torchsched_opt.step()
        torchsched_sched.step()
        """,
        """
        print(torchsched_net[1].running_mean.tolist(), torchsched_sched.get_last_lr())
        print(torchsched_opt.param_groups[0]["params"][0] is torchsched_net[0].weight)
        print(torch.rand(2, generator=torchsched_gen).tolist())
        """,
        """
        torchsched_opt.zero_grad(); torchsched_net(torchsched_x).sum().backward()
        torchsched_opt.step(); torchsched_sched.step()
        """,
    ),
    _case(
        "torchdata",
        "torch",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        torchdata_ds = TensorDataset(torch.arange(10.0), torch.arange(10) % 2)
        torchdata_dl = DataLoader(torchdata_ds, batch_size=4)
        """,
        "print([b[0].tolist() for b in torchdata_dl])",
        "torchdata_ds.tensors[0][0] = 42.0",
    ),
    _case(
        "polars",
        "polars",
        """
        import polars as pl
        polars_df = pl.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]})
        polars_lazy = polars_df.lazy().group_by("k").agg(pl.col("v").sum()).sort("k")
        """,
        "print(polars_df.to_dicts(), polars_lazy.collect().to_dicts())",
        "polars_df = polars_df.with_columns(pl.col('v') * 10)",
    ),
    _case(
        "dask",
        "dask",
        """
        import dask.array as da
        dask_x = da.arange(100, chunks=10).reshape(10, 10)
        dask_y = (dask_x + dask_x.T).sum(axis=0)
        """,
        "print(dask_y.compute(scheduler='sync').tolist(), dask_y.chunks)",
        "dask_y = dask_y * 2",
    ),
    _case(
        "optuna",
        "optuna",
        """
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        optuna_study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
        optuna_study.optimize(lambda t: (t.suggest_float("x", -5, 5) - 2) ** 2, n_trials=8)
        """,
        """
        print(len(optuna_study.trials), round(optuna_study.best_value, 10))
        print(optuna_study.best_params)
        """,
        "optuna_study.optimize(lambda t: (t.suggest_float('x', -5, 5) - 2) ** 2, n_trials=2)",
    ),
    _case(
        "nx",
        "networkx",
        """
        import networkx as nx
        nx_g = nx.karate_club_graph()
        nx_d = nx.DiGraph([(1, 2), (2, 3)])
        """,
        """
        print(nx_g.number_of_edges(), sorted(nx.pagerank(nx_g).items())[:3])
        print(nx.shortest_path(nx_d, 1, 3), dict(nx_g.nodes[0]))
        """,
        "nx_g.add_edge(0, 100, weight=2.0); nx_d.add_edge(3, 1)",
    ),
    _case(
        "xarray",
        "xarray",
        """
        import numpy as np
        import xarray as xr
        xarray_ds = xr.Dataset(
            {"t": (("x", "y"), np.arange(6.0).reshape(2, 3))},
            coords={"x": [10, 20], "y": ["a", "b", "c"]}, attrs={"source": "corpus"},
        )
        """,
        "print(xarray_ds.t.sel(x=20).values.tolist(), xarray_ds.attrs, float(xarray_ds.t.mean()))",
        "xarray_ds['u'] = xarray_ds.t * 2",
    ),
    _case(
        "sympy",
        "sympy",
        """
        import sympy
        sympy_x = sympy.Symbol("x")
        sympy_expr = sympy.sin(sympy_x) ** 2 + sympy.cos(sympy_x) ** 2
        sympy_f = sympy.lambdify(sympy_x, sympy_x ** 3 - sympy_x)
        """,
        "print(sympy.simplify(sympy_expr), sympy_f(2), sympy.diff(sympy_x ** 3, sympy_x))",
        "sympy_expr = sympy_expr + sympy_x",
    ),
    _case(
        "scioptim",
        "scipy",
        """
        import numpy as np
        from scipy import optimize, signal, spatial
        scioptim_res = optimize.minimize(lambda v: ((v - 1.5) ** 2).sum(), np.zeros(2))
        scioptim_tree = spatial.KDTree(np.arange(20.0).reshape(10, 2))
        scioptim_sos = signal.butter(3, 0.2, output="sos")
        """,
        """
        print(np.round(scioptim_res.x, 6).tolist(), scioptim_tree.query([3.1, 4.2])[1])
        print(np.round(scioptim_sos, 10).tolist())
        """,
        "scioptim_tree = spatial.KDTree(scioptim_tree.data[:5])",
    ),
    _case(
        "stdlib",
        "logging",
        """
        import io, logging, random, threading, types, weakref
        stdlib_log = logging.getLogger("corpus.case")
        stdlib_random = random.Random(11)
        stdlib_ns = types.SimpleNamespace(a=1, b=[2])
        stdlib_text = io.StringIO("some text")
        stdlib_bytes = io.BytesIO(b"some bytes")
        stdlib_lock = threading.Lock()
        """,
        """
        print(stdlib_log.name, stdlib_random.random(), stdlib_ns)
        print(stdlib_text.getvalue(), stdlib_bytes.getvalue(), stdlib_lock.locked())
        """,
        "stdlib_ns.b.append(3); stdlib_text.write('more')",
    ),
    _case(
        "cache",
        "functools",
        """
        import functools
        @functools.lru_cache(maxsize=None)
        def cache_fib(n):
            return n if n < 2 else cache_fib(n - 1) + cache_fib(n - 2)
        cache_fib(30)
        """,
        "print(cache_fib(31), cache_fib.cache_info().maxsize)",
        "cache_fib.cache_clear()",
    ),
    _case(
        "slots",
        "abc",
        """
        class slots_Vec:
            __slots__ = ("x", "y")
            def __init__(self, x, y):
                self.x, self.y = x, y
            def norm2(self):
                return self.x ** 2 + self.y ** 2
        slots_v = slots_Vec(3, 4)
        slots_shared = [slots_v, slots_v]
        """,
        "print(slots_v.norm2(), slots_shared[0] is slots_shared[1] is slots_v)",
        "slots_v.x = 6",
    ),
]


def fast_cases() -> list[Case]:
    return [c for c in CASES if c.fast]
