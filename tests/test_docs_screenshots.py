"""The screenshots the docs show are the ones the UI tests take (labextension/ui-tests: a spec's
``snap`` copies those named in ``DOC_SHOTS`` into docs/screenshots), so the docs never show a
UI that is gone; the one that needs a GPU to take is named here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "docs" / "screenshots"
HELPERS = ROOT / "labextension" / "ui-tests" / "tests" / "helpers.ts"
SPECS = ROOT / "labextension" / "ui-tests" / "tests"
# taken by hand on a machine with a GPU and the CUDA checkpoint driver (docs/suspend.md): the
# suspend tier cannot run in CI
NEEDS_A_GPU = {"suspended"}


def _doc_shots() -> dict[str, str]:
    """``DOC_SHOTS`` of helpers.ts: spec name -> docs name."""
    block = HELPERS.read_text().split("DOC_SHOTS", 1)[1].split("};", 1)[0]
    return dict(re.findall(r"'([^']+)':\s*'([^']+)'", block))


def _shown() -> set[str]:
    """Every image the README and the docs show, by its name under docs/screenshots."""
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    names = set()
    for page in pages:
        names |= set(re.findall(r"screenshots/([\w-]+)\.png", page.read_text()))
    return names


def test_every_screenshot_the_docs_show_is_taken_by_a_ui_spec():
    taken = set(_doc_shots().values())
    shown = _shown()
    assert shown, "the docs show no screenshot: the pattern no longer matches"
    assert shown - taken - NEEDS_A_GPU == set(), "shown, but no UI spec takes it"
    for name in shown:
        assert (SHOTS / f"{name}.png").exists(), name


def test_every_mapped_screenshot_is_taken_by_some_spec():
    specs = "\n".join(p.read_text() for p in SPECS.glob("*.spec.ts"))
    for spec_name in _doc_shots():
        assert f"'{spec_name}'" in specs, f"no spec saves {spec_name}"
