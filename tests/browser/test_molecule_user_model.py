"""The Molecule page with a model of the user's own, in a real browser (issue 52, point 3): chosen
in the sidebar beside the Mutagenicity targets, it predicts with its own words, its explainers'
bonds are drawn, the What-if asks it again, the file tab screens with it; a model of a number
gives its value."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tools.browser import IDLE, MAIN

from ..assay_tables import analogue_csv
from .conftest import TIMEOUT_MS, assert_no_errors, open_app, screenshot
from .test_whatif import _pick_until_shown

pytestmark = pytest.mark.browser

OWNER = "browsermolowner1"
CLASSIFIER = "browser_mol_assay"
REGRESSOR = "browser_mol_logp"
NITRO = "O=[N+]([O-])c1ccc(CCC)cc1"  # 4-propylnitrobenzene: O0 N1 O2 c3 …, the C–N bond 1-3


def _idle(page) -> None:
    page.wait_for_timeout(300)  # let the rerun start before waiting for it to end
    page.wait_for_selector(IDLE)


def _train(cache_dir) -> None:
    """Both models, saved for :data:`OWNER` in the server's cache (Gem not fitted: minutes)."""
    from gem_core.chemistry.tables import read_molecules, read_table
    from gem_core.service.user_models import train_user_model

    from ..test_user_regression import logp_table

    if not (cache_dir / "user_models" / CLASSIFIER).exists():
        reading = read_molecules(read_table(analogue_csv(), "assay.csv"), "smiles", "activity")
        train_user_model(reading, CLASSIFIER, recipe="small", time_budget_s=5, device="cpu",
                         owner=OWNER)
    if not (cache_dir / "user_models" / REGRESSOR).exists():
        reading = read_molecules(read_table(logp_table(0, 80).encode(), "logp.csv"), "smiles",
                                 "logp")
        train_user_model(reading, REGRESSOR, recipe="small", time_budget_s=5, device="cpu",
                         owner=OWNER)


def _choose_model(page, title: str) -> None:
    page.locator(".st-key-sb_target_molecule input").first.click()
    page.get_by_role("option", name=title, exact=True).click()
    _idle(page)


def _submit(page, smiles: str) -> None:
    page.locator(".st-key-mol_smiles input").fill(smiles)
    page.locator(".st-key-mol_explain button").click()
    _idle(page)


def test_a_model_of_your_own_on_the_molecule_page(app_server, page, monkeypatch, tmp_path):
    from gem_core.chemistry.labels import bond_labels
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import explain_molecules, molecule_model
    from gem_core.service.whatif import Edit, evaluate_edits

    monkeypatch.setenv("GEM_CACHE_DIR", str(app_server.cache_dir))
    _train(app_server.cache_dir)
    wb = molecule_model("cpu", model=CLASSIFIER)
    mol = smiles_to_instance(NITRO)
    res = explain_molecules([mol], [], model=wb)[0]
    j = mol.pairs.index((1, 3))
    original, (cut,) = evaluate_edits(wb, mol.instance, [Edit.of([(1, 3)])])

    # a session's token travels in its link (?owner=): the models it trained are offered
    open_app(page, app_server, f"/molecule?owner={OWNER}")
    _choose_model(page, f"{CLASSIFIER} (yours)")
    sidebar = page.locator("[data-testid=stSidebar]").inner_text()
    assert f"Model: {CLASSIFIER}" in sidebar, sidebar
    _submit(page, NITRO)
    assert_no_errors(page)
    prediction = page.locator(".st-key-mol_prediction")
    expect(prediction).to_contain_text(f"{res.probabilities[0]:.3f}", timeout=TIMEOUT_MS)
    text = prediction.inner_text()
    assert "P(active)" in text and res.label_name in text and "mutagen" not in text, text
    # the explainers' bonds are drawn (Random: nothing to fit); Gem is offered its fit
    img = page.locator(".st-key-mol_panel_random img").first
    img.wait_for()
    assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    assert page.locator(".st-key-mol_fit_gem button").count() == 1
    assert "P(mutagen)" not in page.locator(MAIN).inner_text()
    screenshot(page, "molecule-user-classifier")

    # What if the nitro group's C–N bond were gone: the model asked again
    label = bond_labels(mol.mol, [(1, 3)])[0][0]
    result = _pick_until_shown(page, "mol_whatif_edges_", label,
                               f".st-key-mol_whatif_result_e{j}")
    _idle(page)
    result.locator("[data-testid=stMetric]").first.wait_for()
    assert_no_errors(page)
    shown = result.inner_text()
    assert f"{original.probabilities[0]:.3f} → {cut.probabilities[0]:.3f}" in shown, shown
    assert "P(active)" in shown, shown
    page.locator(".st-key-mol_whatif").scroll_into_view_if_needed()
    screenshot(page, "molecule-user-classifier-whatif")

    # the file tab screens with the same model
    library = tmp_path / "library.smi"
    library.write_bytes(b"OC(=O)c1ccc(CC)cc1 acid\nC1CC( broken\n" + NITRO.encode() + b" nitro\n")
    page.get_by_role("tab", name="File of molecules").click()
    page.locator(".st-key-mol_file input[type=file]").set_input_files(str(library))
    _idle(page)
    page.locator(".st-key-mol_batch_table [data-testid=stDataFrame]").wait_for()
    _idle(page)
    assert_no_errors(page)
    main = page.locator(MAIN).inner_text()
    assert f"2 of 3 rows screened** by {CLASSIFIER}".replace("**", "") in main, main[-2000:]
    assert f"--model {CLASSIFIER}" in main
    screenshot(page, "molecule-user-classifier-file")

    # a model of a number: its value, no class probability
    page.get_by_role("tab", name="One molecule").click()
    _choose_model(page, f"{REGRESSOR} (yours)")
    value = explain_molecules([mol], [], model=molecule_model("cpu", model=REGRESSOR))[0].value
    prediction = page.locator(".st-key-mol_prediction")
    expect(prediction).to_contain_text(f"{value:.4g}", timeout=TIMEOUT_MS)
    assert "Predicted logp" in prediction.inner_text()
    assert_no_errors(page)
    page.locator(".st-key-mol_panel_random img").first.wait_for()
    assert "P(" not in prediction.inner_text()
    # the sidebar's GNNExplainer reads class probabilities: named as left out, not an error
    assert "left out for this model, which predicts a number" in page.locator(MAIN).inner_text()
    screenshot(page, "molecule-user-regressor")
