"""As if it never paused (issue #33): a resumed notebook's next cells print what they would have
printed, because the process state around the namespace travels with the checkpoint.

Every test runs real ``jupyter server`` processes and real ipykernel kernels: a *reference*
notebook that is never paused and a *subject* that runs the same cells, is paused and resumed
through the REST API, then runs the same later cells. What the later cells show (their text,
their rich output, their execution count) must be the same in both.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.servers import Server, nodes

CONFIG = "c.GpuPauseApp.shutdown_checkpoint = 'none'\nc.GpuPauseApp.policies = []\n"


class Shown:
    """What a notebook shows of one cell: its execution count, printed text and rich output."""

    def __init__(self):
        self.parts: list = []

    def __call__(self, msg: dict) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            self.parts.append(("stream", content["text"]))
        elif kind in ("execute_result", "display_data"):
            data = content["data"]
            keep = {k: data[k] for k in ("text/plain", "text/latex") if k in data}
            if "image/png" in data:  # the figure's size, not its bytes
                keep["image/png"] = content.get("metadata", {}).get("image/png") or "png"
            self.parts.append((kind, keep))
        elif kind == "error":
            self.parts.append(("error", content["ename"], content["evalue"]))


def cell(server: Server, kernel_id: str, code: str) -> tuple[int, list]:
    """Run ``code`` as a notebook cell (stored in the history, counted); (its count, shown)."""
    shown = Shown()
    reply = server.execute(kernel_id, textwrap.dedent(code), shown)
    return reply["content"]["execution_count"], shown.parts


# Cells of a notebook that changes the process around its namespace, as real notebooks do
SETUP = [
    """
    import os, random, sys, warnings
    import numpy as np, pandas as pd, torch
    import matplotlib
    import matplotlib.pyplot as plt
    import sklearn
    np.random.seed(42); random.seed(7); torch.manual_seed(3)
    first = (np.random.rand(), random.random(), torch.rand(1).item())
    """,
    """
    plt.rc("figure", figsize=(16, 8))
    np.set_printoptions(precision=3, suppress=True)
    pd.set_option("display.max_rows", 7)
    sklearn.set_config(print_changed_only=False)
    torch.set_default_dtype(torch.float64)
    torch.set_printoptions(precision=2)
    warnings.simplefilter("error", DeprecationWarning)
    os.makedirs("work", exist_ok=True); os.chdir("work")
    os.environ["MY_EXPERIMENT"] = "run-17"
    sys.path.append(os.path.abspath("lib"))
    """,
    "%load_ext autoreload",
    "%precision 3",
    "%config InteractiveShell.ast_node_interactivity = 'last_expr_or_assign'",
    """
    import sympy
    sympy.init_printing()
    x = sympy.Symbol("x")
    """,
    "3 * 7",
    "np.random.rand(2)",
    """
    import decimal, logging
    decimal.getcontext().prec = 6
    sys.setrecursionlimit(5000)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
    pd.set_option("display.float_format", lambda v: f"{v:.2f}")
    torch.set_num_threads(1)
    """,
]
LATER = [
    "print(np.random.rand(3), random.random(), torch.rand(2))",
    "print(plt.figure().get_size_inches()); plt.close('all')",
    "np.array([1.123456, 2.0, 3e-9])",
    "pd.DataFrame({'a': range(20)})",
    "from sklearn.linear_model import LogisticRegression; print(LogisticRegression())",
    "torch.tensor([1.0]).dtype",
    """
    try:
        warnings.warn("old", DeprecationWarning); print("warned quietly")
    except DeprecationWarning as e:
        print("raised", e)
    """,
    "print(os.path.basename(os.getcwd()), os.environ.get('MY_EXPERIMENT'), sys.path[-1][-3:])",
    "print('autoreload' in get_ipython().extension_manager.loaded)",
    "print(get_ipython().display_formatter.formatters['text/plain'].float_precision)",
    "y = 5",
    "x**2 + 1",
    "print(In[7], Out[7], _7, _)",
    "print(decimal.Decimal(1) / 7, sys.getrecursionlimit(), torch.get_num_threads())",
    "logging.getLogger('exp').info('step done')",
    "print(pd.DataFrame({'v': [1.23456]}))",
]


def _notebooks(server: Server, n: int) -> list[dict]:
    return [server.open_notebook(f"nb{i}.ipynb") for i in range(n)]


def _run_all(server: Server, kernel_id: str, cells: list[str]) -> list:
    return [cell(server, kernel_id, code) for code in cells]


# A package of someone else's that carries its own process state, installed as pip installs
# one (a dist-info with its entry points) on the kernel's path; and one whose provider is broken.
ACME = """
SETTINGS = {"level": 1}


class Provider:
    label = "acme settings"

    def capture(self):
        return dict(SETTINGS) if SETTINGS != {"level": 1} else None

    def restore(self, state):
        SETTINGS.clear()
        SETTINGS.update(state)
"""
ENTRY_POINTS = """[jupyter_gpu_pause.ambient]
acme = acme_settings:Provider
broken = acme_settings:Missing
"""


def _install_acme(site) -> None:
    (site / "acme_settings.py").write_text(ACME)
    info = site / "acme_settings-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-settings\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("ambient"), CONFIG)
    site = tmp_path_factory.mktemp("site")
    _install_acme(site)
    s.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), s.env.get("PYTHONPATH")]))
    s.start()
    yield s
    s.stop()


def test_the_next_cells_print_what_they_would_have_printed(server):
    # Given a reference notebook and a subject that ran the same cells, each changing the
    # process around the namespace (seeds, settings, IPython's extensions, formatters, history)
    reference, subject = _notebooks(server, 2)
    assert _run_all(server, reference["kernel_id"], SETUP) == _run_all(
        server, subject["kernel_id"], SETUP
    )
    # When the subject is checked, paused and resumed
    code, checked = server.api("POST", f"gpu-pause/api/sessions/{subject['id']}/check", {})
    assert code == 200, checked
    carried = set(checked["ambient"]["carried"])
    assert {"numpy_random", "random", "torch_random", "matplotlib", "ipython_history"} <= carried
    paused = server.pause(subject["id"])
    back = server.resume(subject["id"])
    # Then the resume says what came back, in words
    around = back["restore"]["ambient"]
    assert around["not_restored"] == [], around
    assert {"numpy_random", "matplotlib", "pandas", "sklearn", "torch", "warnings"} <= set(
        around["restored"]
    )
    assert around["rerun"] == ["cell [6]"], around
    assert around["text"].startswith("Random state, "), around
    assert "1 extension" in around["text"] and around["text"] in back["message"], back
    assert paused["checkpoint"]["id"] == back["checkpoint"]["id"]
    # And every later cell shows what it shows in the notebook that never paused, under the
    # same execution count
    expected = _run_all(server, reference["kernel_id"], LATER)
    got = _run_all(server, back["kernel_id"], LATER)
    for code_, want, have in zip(LATER, expected, got, strict=True):
        assert have == want, code_
    assert got[0][0] == len(SETUP) + 1
    # (what the settings show, lest both sides show the defaults: %precision and %config,
    # sympy's LaTeX, the figure size of plt.rc)
    assert got[9][1] == [("stream", "3\n")], got[9]
    assert got[10][1][0][1]["text/plain"] == "5", got[10]
    assert got[13][1] == [("stream", "0.142857 5000 1\n")], got[13]
    assert got[14][1] == [("stream", "INFO:exp:step done\n")], got[14]
    assert got[15][1] == [("stream", "     v\n0 1.23\n")], got[15]
    assert "text/latex" in got[11][1][0][1], got[11]
    assert got[1][1] == [("stream", "[16.  8.]\n")], got[1]


def test_the_check_and_the_pause_name_what_cannot_travel(server):
    # Given a notebook with a running thread, a child process and a listening socket
    (nb,) = [server.open_notebook("loose.ipynb")]
    cell(
        server,
        nb["kernel_id"],
        """
        import socket, subprocess, sys, threading
        stop = threading.Event()
        worker = threading.Thread(target=stop.wait, name="feeder", daemon=True)
        worker.start()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen()
        from IPython.lib.backgroundjobs import BackgroundJobManager
        jobs = BackgroundJobManager(); job = jobs.new(stop.wait)  # the notebook's work
        """,
    )
    # and an output too big to copy (the variable it came from would travel; this has none)
    big, _shown = cell(server, nb["kernel_id"], "import numpy as np; np.zeros(300_000)")
    # When the check runs, then it names each of them with a reason, before any pause
    code, checked = server.api("POST", f"gpu-pause/api/sessions/{nb['id']}/check", {})
    assert code == 200, checked
    loose = {
        x["name"]: x["reason"]
        for x in checked["ambient"]["not_carried"]
        if x["name"] != "broken"  # the broken provider of the package installed above
    }
    assert "thread feeder" in loose
    assert sum(n.startswith("thread ") for n in loose) == 2, loose  # and the background job
    assert any(n.startswith("child process ") for n in loose), loose
    assert any(n.startswith("listening socket :") for n in loose), loose
    assert loose.pop(f"Out[{big}]").startswith("more than the 1048576 bytes"), loose
    assert all("cannot travel" in r for r in loose.values()), loose
    # And the pause says so too
    paused = server.pause(nb["id"])
    assert "will not continue after the resume: " in paused["message"], paused
    assert "thread feeder" in paused["message"]
    code, events = server.api("GET", f"gpu-pause/api/events?session_id={nb['id']}")
    (event,) = [e for e in events["events"] if e["type"] == "paused"]
    assert "thread feeder" in {x["name"] for x in event["detail"]["not_carried"]}


def test_seeded_draws_continue_on_another_server_of_the_same_store(tmp_path):
    # Given two servers sharing a store, a key and a queue folder, and a notebook on the first
    # that seeds numpy, random and torch and draws once
    shared = f"""
c.GpuPauseApp.store_url = {str(tmp_path / "store")!r}
c.GpuPauseApp.secret_file = {str(tmp_path / "secret")!r}
c.GpuPauseApp.capacity_queue_url = {str(tmp_path / "queue")!r}
c.GpuPauseApp.store_rescan_interval = 1.0
{CONFIG}"""
    seed = (
        "import numpy as np, random, torch\nnp.random.seed(1); random.seed(2); torch.manual_seed(3)"
    )
    draw = "print(np.random.randint(0, 10**9, 4), random.getrandbits(48), torch.randint(9, (3,)))"
    with nodes(tmp_path, shared) as (n1, n2):
        reference, subject = n1.open_notebook("ref.ipynb"), n1.open_notebook("seeded.ipynb")
        for nb in (reference, subject):
            cell(n1, nb["kernel_id"], seed)
            cell(n1, nb["kernel_id"], draw)
        # When the subject is paused between two draws and resumed on the second server
        n1.pause(subject["id"])
        n2.wait_until(lambda: n2.sessions().get(subject["id"]), "the session on node 2")
        back = n2.resume(subject["id"])
        # Then its next draws are the very draws the unpaused notebook gets
        for _ in range(2):
            assert cell(n2, back["kernel_id"], draw)[1] == cell(n1, reference["kernel_id"], draw)[1]


def test_with_the_setting_off_only_the_namespace_travels(tmp_path):
    # Given a server with c.GpuPauseApp.ambient = False and a seeded notebook beside a reference
    s = Server(tmp_path, CONFIG + "c.GpuPauseApp.ambient = False\n")
    s.start()
    try:
        reference, subject = _notebooks(s, 2)
        for nb in (reference, subject):
            cell(s, nb["kernel_id"], "import numpy as np; np.random.seed(5); np.random.rand()")
        # When the subject is paused and resumed
        s.pause(subject["id"])
        back = s.resume(subject["id"])
        # Then nothing of the process came back: the draws and the counter start over
        assert back["restore"]["ambient"] is None
        draw = "print(np.random.rand())"
        count, shown = cell(s, back["kernel_id"], draw)
        assert count == 1 and shown != cell(s, reference["kernel_id"], draw)[1]
    finally:
        s.stop()


def test_a_package_carries_its_own_state_through_the_entry_point_group(server):
    # Given a notebook that changed the settings of a package with an ambient provider of its
    # own (entry point group jupyter_gpu_pause.ambient), beside a package whose provider is broken
    nb = server.open_notebook("acme.ipynb")
    cell(server, nb["kernel_id"], "import acme_settings; acme_settings.SETTINGS['level'] = 5")
    # When it is checked, then the package's state is carried and the broken one named
    code, checked = server.api("POST", f"gpu-pause/api/sessions/{nb['id']}/check", {})
    assert code == 200, checked
    assert "acme" in checked["ambient"]["carried"]
    (broken,) = [x for x in checked["ambient"]["not_carried"] if x["name"] == "broken"]
    assert "did not load" in broken["reason"], broken
    # When it is paused and resumed, then the package's settings are as the notebook left them
    server.pause(nb["id"])
    back = server.resume(nb["id"])
    assert "acme" in back["restore"]["ambient"]["restored"]
    assert "acme" in back["restore"]["ambient"]["restored"]
    assert cell(server, back["kernel_id"], "print(acme_settings.SETTINGS)")[1] == [
        ("stream", "{'level': 5}\n")
    ]


def test_formatter_cells_are_re_run_unless_marked_never_to_be(server):
    # Given a notebook that registered two display formatters, one in a cell marked no-rerun
    nb = server.open_notebook("formatters.ipynb")
    cell(server, nb["kernel_id"], "from fractions import Fraction; from decimal import Decimal")
    plain = 'get_ipython().display_formatter.formatters["text/plain"]'
    cell(server, nb["kernel_id"], f'{plain}.for_type(Fraction, lambda f, p, c: p.text(f"{{f}}!"))')
    cell(
        server,
        nb["kernel_id"],
        f'{plain}.for_type(Decimal, lambda d, p, c: p.text(f"{{d}}?"))  # gp: no-rerun',
    )
    # When it is paused and resumed
    server.pause(nb["id"])
    back = server.resume(nb["id"])
    # Then the first cell was re-run and its formatter shows, the marked one is named
    around = back["restore"]["ambient"]
    assert around["rerun"] == ["cell [2]"], around
    assert around["not_restored"] == [
        {"name": "display formatters of cell [3]", "reason": "the cell is marked no-rerun"}
    ], around
    shown = cell(server, back["kernel_id"], "Fraction(1, 3)")[1]
    assert shown == [("execute_result", {"text/plain": "1/3!"})], shown
    shown = cell(server, back["kernel_id"], "Decimal('1.5')")[1]
    assert shown == [("execute_result", {"text/plain": "Decimal('1.5')"})], shown


def test_a_recarray_called_saved_comes_back(server):
    # Given the notebook: a structured array, its recarray view, and other subclasses
    nb = server.open_notebook("recarray.ipynb")
    cell(
        server,
        nb["kernel_id"],
        """
        import numpy as np
        data = np.array([(1, 2.5), (2, 3.5)], dtype=[("id", "i4"), ("score", "f8")])
        data_rec = data.view(np.recarray)
        masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0], fill_value=-1.0)
        big_endian = np.arange(4, dtype=">i4")
        """,
    )
    # When the check lists them as saved, and the notebook is paused and resumed
    code, checked = server.api("POST", f"gpu-pause/api/sessions/{nb['id']}/check", {})
    assert code == 200 and checked["skipped"] == [], checked
    server.pause(nb["id"])
    back = server.resume(nb["id"])
    # Then every one is back, of its own type, with its values
    assert back["restore"]["failed"] == [], back["restore"]
    shown = cell(
        server,
        back["kernel_id"],
        "print(type(data_rec).__name__, data_rec.score.tolist(), masked.filled().tolist(),"
        " big_endian.dtype.str)",
    )[1]
    assert shown == [("stream", "recarray [2.5, 3.5] [1.0, -1.0, 3.0] >i4\n")], shown


def _late_notebook(server: Server, path: str, cells: list[str]) -> dict:
    """A notebook whose cells ran before the server saw its kernel: the kernel started on its
    own and attached to the notebook afterwards, so the agent's first request comes after the
    user's cells."""
    code, kernel = server.api("POST", "api/kernels", {"name": "python3"})
    assert code == 201, kernel
    for c in cells:
        cell(server, kernel["id"], c)
    body = {"path": path, "type": "notebook", "name": "", "kernel": {"id": kernel["id"]}}
    code, js = server.api("POST", "api/sessions", body)
    assert code == 201, js
    return server.wait_until(
        lambda: next((s for s in server.sessions().values() if s["path"] == path), None),
        f"the session of {path}",
    )


def test_cells_run_before_the_server_watched_the_kernel_still_travel(server):
    # Given two notebooks whose cells ran before the server saw their kernels (one to pause,
    # one never paused), seeding generators, adding a warnings filter, loading an extension
    # and registering a display formatter
    setup = [
        "import numpy as np, random, warnings, fractions, matplotlib.pyplot as plt",
        "np.random.seed(12345); random.seed(9); warnings.simplefilter('error', UserWarning)",
        "plt.rc('figure', figsize=(7, 3))",
        "%load_ext autoreload",
        "get_ipython().display_formatter.formatters['text/plain']"
        ".for_type(fractions.Fraction, lambda f, p, c: p.text('frac'))",
    ]
    late = _late_notebook(server, "late.ipynb", setup)
    reference = _late_notebook(server, "late-reference.ipynb", setup)
    # When one is checked, paused and resumed
    code, checked = server.api("POST", f"gpu-pause/api/sessions/{late['id']}/check", {})
    assert code == 200, checked
    server.pause(late["id"])
    back = server.resume(late["id"])
    # Then its seeded draws, its warnings filter and its extension came back all the same
    later = (
        "print(np.random.rand(2), random.random(), warnings.filters[0][:3:2],"
        " sorted(get_ipython().extension_manager.loaded), plt.figure().get_size_inches(),"
        " plt.rcParams['figure.dpi'])"
    )
    got = cell(server, back["kernel_id"], later)[1]
    assert got == cell(server, reference["kernel_id"], later)[1]
    assert "IPython.extensions.autoreload" in got[0][1] and "UserWarning" in got[0][1], got
    # And the formatter its cell registered before anyone watched is named, before the pause
    names = {x["name"]: x["reason"] for x in checked["ambient"]["not_carried"]}
    assert "before the kernel was watched" in names["display formatters"], names
