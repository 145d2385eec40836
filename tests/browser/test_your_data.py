"""Your data in a real browser, as a chemist: upload a table → read summary → train a small model →
ask it why → screen the file; another browser session does not see the model."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tools.browser import IDLE, MAIN

from ..assay_tables import analogue_csv
from .conftest import PROJECT, assert_no_errors, open_app, screenshot

pytestmark = pytest.mark.browser

ASK = "O=[N+]([O-])c1ccc(CCC)cc1"


def _table(tmp_path) -> str:
    data = analogue_csv(["C1CC(,active,broken", "OC(=O)c1ccccc1.[Na],inactive,salt"])
    path = tmp_path / "assay.csv"
    path.write_bytes(data)
    return str(path)


def _idle(page) -> None:
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE)


def _upload(page, path: str) -> str:
    """Upload a table on the page; the summary's text."""
    page.locator(".st-key-yd_upload input[type=file]").set_input_files(path)
    page.locator(".st-key-yd_summary").wait_for()
    _idle(page)
    return page.locator(".st-key-yd_summary").inner_text()


def _train_small(page, name: str, shot: str = "") -> None:
    """Name a model, train the small recipe, wait for Gem's fit, close the message."""
    page.locator(".st-key-yd_name input").fill(name)
    page.locator(".st-key-yd_name input").press("Enter")
    _idle(page)
    page.locator(".st-key-yd_recipe label").filter(has_text="small").click()
    _idle(page)
    page.locator(".st-key-yd_train button").click()
    page.locator(".st-key-yd_job").wait_for()
    page.get_by_text("is trained and Gem fitted").wait_for(timeout=300_000)
    if shot:
        screenshot(page, shot)
    page.locator(".st-key-yd_job_ok button").click()
    _idle(page)


def _ask(page, smiles: str):
    """Type a SMILES into Ask why; the answer's container once drawn."""
    box = page.locator(".st-key-yd_ask input")
    box.fill(smiles)
    box.press("Enter")
    answer = page.locator(".st-key-yd_answer")
    answer.wait_for()
    _idle(page)
    return answer


def test_upload_train_ask_why_and_screen(app_server, page, chromium, tmp_path):
    open_app(page, app_server, "/your-data")
    summary = _upload(page, _table(tmp_path))
    assert "62" in summary and "60" in summary, summary  # rows, valid molecules
    assert "Rows refused" in summary, summary  # the grid itself is drawn on a canvas
    screenshot(page, "your-data-summary")
    _train_small(page, "browser_assay", "your-data-trained")
    page.locator(".st-key-yd_metrics").wait_for()
    assert_no_errors(page)

    answer = _ask(page, ASK)
    img = answer.locator("img").first
    img.wait_for()
    assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    # the page says what the CLI says with the same saved model
    env = {**os.environ, "GEM_CACHE_DIR": str(app_server.cache_dir)}
    out = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--model", "browser_assay",
                          "--smiles", ASK, "--json", "-"], cwd=PROJECT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)["prediction"]
    text = answer.inner_text()
    assert f"predicts {cli['label']}" in text and f"{cli['probability']:.3f}" in text, text
    screenshot(page, "your-data-ask-why")

    page.locator(".st-key-yd_screen_go button").click()
    page.locator(".st-key-yd_screen").wait_for(timeout=300_000)
    _idle(page)
    assert "60 molecules" in page.locator(".st-key-yd_screen").inner_text()
    assert page.locator(".st-key-yd_screen [data-testid=stDataFrame]").count() == 1
    assert_no_errors(page)
    screenshot(page, "your-data-screen")

    # a second browser session (another student) does not see it
    other = chromium.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    try:
        other.goto(app_server.url + "/your-data")
        other.wait_for_selector(f"{MAIN} [data-testid=stHeading]")
        other.wait_for_selector(IDLE)
        assert other.locator(".st-key-yd_model").count() == 0
        assert "No model yet" in other.locator(MAIN).inner_text()
    finally:
        other.context.close()


def test_a_table_of_numbers_trains_a_regressor_in_the_browser(app_server, page, tmp_path):
    """As a chemist with measured logP values: the summary reads numbers, the figures are a
    regressor's, Ask why gives the value the CLI gives, the file is screened."""
    from ..test_user_regression import logp_table

    path = tmp_path / "logp.csv"
    path.write_text(logp_table(0, 80))
    open_app(page, app_server, "/your-data")
    assert "a number: the model will be a regressor" in _upload(page, str(path))
    _train_small(page, "browser_logp")
    metrics = page.locator(".st-key-yd_metrics")
    metrics.wait_for()
    assert "Test R²" in metrics.inner_text() and "Test RMSE" in metrics.inner_text()
    assert_no_errors(page)
    screenshot(page, "your-data-regression-trained")

    ask = "CCCCCCCCO"
    answer = _ask(page, ask)
    env = {**os.environ, "GEM_CACHE_DIR": str(app_server.cache_dir)}
    out = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--model", "browser_logp",
                          "--smiles", ask, "--json", "-"], cwd=PROJECT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    value = json.loads(out.stdout)["prediction"]["value"]
    assert f"predicts logp = {value:.4g}" in answer.inner_text(), answer.inner_text()
    screenshot(page, "your-data-regression-ask-why")
    page.locator(".st-key-yd_screen_go button").click()
    page.locator(".st-key-yd_screen").wait_for(timeout=300_000)
    _idle(page)
    assert "mean absolute error" in page.locator(".st-key-yd_screen").inner_text()
    assert_no_errors(page)
    screenshot(page, "your-data-regression-screen")
