"""The SMILES flow end to end in a real browser: type, explain, see the RDKit picture; bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.browser import IDLE, MAIN

from .conftest import PROJECT, assert_no_errors, open_app, screenshot

pytestmark = pytest.mark.browser

NITROBENZENE = "O=[N+]([O-])c1ccccc1"


def _submit(page, smiles: str) -> None:
    box = page.locator(".st-key-mol_smiles input")
    box.fill(smiles)
    page.locator(".st-key-mol_explain button").click()
    page.wait_for_timeout(200)  # let the rerun start before waiting for it to end
    page.wait_for_selector(IDLE)


def _cli_explanation(smiles: str, k: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--smiles", smiles,
                          "--k", str(k), "--method", "gem", "--json", "-"],
                         cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_smiles_is_explained_and_drawn_by_rdkit(app_server, page):
    open_app(page, app_server, "/molecule")
    _submit(page, NITROBENZENE)
    assert_no_errors(page)
    panel = page.locator(".st-key-mol_panel_gem")
    panel.wait_for()
    img = panel.locator("img").first
    img.wait_for()
    # The RDKit SVG is loaded and painted at a real size.
    assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    src = img.get_attribute("src") or ""
    assert "svg" in src, src[:80]
    page.locator(".st-key-mol_prediction [data-testid=stMetric]").first.wait_for()
    prediction = page.locator(".st-key-mol_prediction").inner_text()
    k = int(page.locator(".st-key-mol_k input[type=range]").input_value())
    # The page says what the CLI says for the same molecule (same engine, same shipped model).
    cli = _cli_explanation(NITROBENZENE, k)
    label, p = cli["prediction"]["label"], cli["prediction"]["probability"]
    shown = {"mutagen": "mutagen", "nonmutagen": "non-mutagen"}[label]  # a chemist's wording
    assert shown in prediction, (prediction, cli["prediction"])
    p_mutagen = p if label == "mutagen" else 1.0 - p  # the page always gives P(mutagen)
    assert f"{p_mutagen:.3f}" in prediction, prediction
    assert f"on these {len(cli['explanation']['bonds'])} bonds alone" in panel.inner_text()
    screenshot(page, "molecule-nitrobenzene")


@pytest.mark.parametrize("smiles, message", [
    ("C1CC(", "SMILES"),
    ("C[Se]C", "Se"),
])
def test_bad_smiles_gets_a_message_not_a_traceback(app_server, page, smiles, message):
    open_app(page, app_server, "/molecule")
    _submit(page, smiles)
    alert = page.locator(f"{MAIN} [data-testid=stAlertContentError]")
    alert.first.wait_for()
    assert message in alert.first.inner_text()
    assert page.locator("[data-testid=stException]").count() == 0
    assert page.locator(".st-key-mol_prediction").count() == 0


def test_a_file_is_screened_and_a_clicked_row_is_drawn(app_server, page, tmp_path):
    """The "File of molecules" tab: upload, the table (flagged first), click a row's checkbox,
    and that molecule is drawn below with its explanation."""
    library = tmp_path / "library.smi"
    library.write_bytes(b"OC(=O)c1ccccc1 benzoic-acid\nC1CC( broken\n"
                        b"O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2 2-nitrofluorene\n")
    open_app(page, app_server, "/molecule")
    page.get_by_role("tab", name="File of molecules").click()
    page.locator(".st-key-mol_file input[type=file]").set_input_files(str(library))
    page.wait_for_timeout(200)
    page.wait_for_selector(IDLE)
    grid = page.locator(".st-key-mol_batch_table [data-testid=stDataFrame]")
    grid.wait_for()
    assert_no_errors(page)
    assert "2 of 3 rows screened" in page.locator(MAIN).inner_text()
    grid.scroll_into_view_if_needed()  # a click outside the viewport selects nothing
    page.wait_for_timeout(500)  # the grid's canvas is laid out
    box = grid.bounding_box()
    # the selection checkbox of the first data row (under a header row of ~35 px)
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)
    page.wait_for_timeout(200)
    page.wait_for_selector(IDLE)
    detail = page.locator(".st-key-mol_batch_detail")
    detail.wait_for()
    page.wait_for_selector(IDLE)
    # Streamlit loads its metric element's script on first use (Metric.js): in a fresh browser
    # the detail's metrics can be drawn a moment after the run ends
    detail.locator("[data-testid=stMetric]").first.wait_for()
    assert_no_errors(page)
    text = detail.inner_text()
    assert text.startswith("Row 3") and "2-nitrofluorene" in text, text[:200]  # flagged first
    assert "P(mutagen)" in text
    img = detail.locator("img").first
    img.wait_for()
    assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    screenshot(page, "molecule-batch-selected")
