"""Sphinx configuration of the jupyter_gpu_pause documentation (``make docs``).

Pages are Markdown (MyST). The reference pages are generated from the code at each build
(``_ext/gpupause_reference.py``); ``make docs`` builds with warnings as errors and nitpicky
references, so a broken link or reference fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

from jupyter_gpu_pause.version import __version__  # noqa: E402

project = "jupyter_gpu_pause"
author = "jupyter_gpu_pause contributors"
copyright = "jupyter_gpu_pause contributors"  # noqa: A001 (Sphinx's name)
version = release = __version__
html_title = f"jupyter_gpu_pause {__version__}"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "gpupause_reference",  # writes reference/_generated/*.md at builder-inited
]
# No sphinx.ext.intersphinx: builds run offline (CI has no network).

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "reference/_generated",  # included by the reference pages, not pages themselves
    "examples",  # example code, shown with literalinclude
    "screenshots",
]

# Options (--wait) and Python literals ('s3://…') must read as typed: no en dashes, no curly
# quotes.
smartquotes = False

# -- MyST ---------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
# Heading anchors for links such as cli.md#which-server (GitHub's slugs, as on the repository).
myst_heading_anchors = 4

# -- autodoc ------------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}

# -- nitpicky references (-n) -------------------------------------------------------------------
# Without intersphinx (builds run offline), Sphinx cannot resolve the standard library's
# collections.abc types in the client's signatures; ignore exactly those, so that a broken
# reference to anything of ours still fails the build.
nitpick_ignore_regex = [(r"py:class", r"collections\.abc\.\w+")]

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    # the four sections of index.md's toctree; each lists its pages in the left sidebar
    "header_links_before_dropdown": 4,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_show_sourcelink = False
