"""Eight browser sessions exploring at once: no errors, the same pictures as one session alone.

The concurrent sessions run against their own fresh server (cold engine caches, so they really
compute side by side); the reference is one session on the shared test server, one step at a
time. Each pyvis panel is compared edge by edge (endpoints, colour, width).
"""
from __future__ import annotations

import json

import pytest

from tools.browser import (EDGES_JS, IDLE, MAIN, AppServer, explanation_panels, mark_panels_old,
                           panel_frame, selected_methods, set_instance, set_k, slider_value,
                           wait_panels_drawn)
from gem_core.explainers import METHODS
from gem_core.explainers import title as method_title

from .conftest import OUTPUT, VIEWPORT, assert_no_errors

pytestmark = pytest.mark.browser

SESSIONS = 8
DATASET = "ba_shapes"
POSITIONS = [1 + i % 4 for i in range(SESSIONS)]  # two sessions per instance
KEY_OF_TITLE = {method_title(key): key for key in METHODS}


def _drawn_edges(page, panels: list[str]) -> dict[str, list]:
    return {p: json.loads(panel_frame(page, p).evaluate(EDGES_JS)) for p in panels}


def _panels_after(page, pos: int, k: int, panels: list[str], redrawn: list[str]) -> None:
    selectors = [f".st-key-ex_svg_{DATASET}-{pos}-{p.removeprefix('panel_')}-k{k}"
                 for p in panels]
    wait_panels_drawn(page, redrawn, selectors, timeout=300)
    page.wait_for_selector(IDLE, timeout=300_000)


def _ready(page) -> list[str]:
    """Wait for the first page run with every default explainer drawn; their panel keys."""
    page.wait_for_selector(f"{MAIN} [data-testid=stHeading]")
    page.wait_for_selector(IDLE)
    page.locator(".st-key-sb_methods [data-tag]").first.wait_for()
    chosen = [KEY_OF_TITLE[t] for t in selected_methods(page)]
    assert chosen, "no explainer selected"
    # a default explainer that needs a one-off fit (PGExplainer) offers a button instead
    for key in chosen:
        page.wait_for_selector(f".st-key-panel_{key} iframe, .st-key-ex_fit_{key} button")
    panels = [f"panel_{key}" for key in chosen
              if page.query_selector(f".st-key-panel_{key} iframe")]
    assert panels, "no default explainer drew its panel"
    wait_panels_drawn(page, ["panel_original", *panels], timeout=300)
    assert sorted(explanation_panels(page)) == sorted(panels)
    return panels


def _explore(pages: list, positions: list[int]) -> list[dict]:
    """Drive every page through: pick its instance, then K one step up. Each step is started on
    all pages before any is waited for, so the server runs the sessions' scripts together."""
    panels = [_ready(page) for page in pages][0]
    k0 = slider_value(pages[0], DATASET)
    out: list[dict] = [{} for _ in pages]
    for page, pos in zip(pages, positions):
        mark_panels_old(page, ["panel_original", *panels])
        set_instance(page, DATASET, pos)
    for i, (page, pos) in enumerate(zip(pages, positions)):
        _panels_after(page, pos, k0, panels, ["panel_original", *panels])
        out[i][k0] = _drawn_edges(page, ["panel_original", *panels])
    for page in pages:  # K re-thresholds the explanations; the original stays as it is
        mark_panels_old(page, panels)
        set_k(page, DATASET, "ArrowRight")
    for i, (page, pos) in enumerate(zip(pages, positions)):
        _panels_after(page, pos, k0 + 1, panels, panels)
        out[i][k0 + 1] = _drawn_edges(page, ["panel_original", *panels])
        assert_no_errors(page)
    return out


def test_eight_concurrent_sessions_match_a_single_session(app_server, chromium, tmp_path):
    # Reference: one session alone, one instance after another.
    reference: dict[int, dict] = {}
    ctx = chromium.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(300_000)
    solo = ctx.new_page()
    solo.goto(app_server.url + "/")
    for pos in sorted(set(POSITIONS)):
        reference[pos] = _explore([solo], [pos])[0]
        solo.reload()
    ctx.close()

    with AppServer(cache_dir=tmp_path / "cache",
                   log_path=OUTPUT / "streamlit-load-test.log") as server:
        server.wait_healthy(timeout=180)
        contexts = [chromium.new_context(viewport=VIEWPORT) for _ in range(SESSIONS)]
        try:
            pages = []
            for ctx in contexts:
                ctx.set_default_timeout(300_000)
                page = ctx.new_page()
                page.goto(server.url + "/", wait_until="commit")
                pages.append(page)
            results = _explore(pages, POSITIONS)  # all eight first runs are under way
        finally:
            for ctx in contexts:
                ctx.close()

    for session, (pos, got) in enumerate(zip(POSITIONS, results)):
        assert got.keys() == reference[pos].keys()
        for k in got:
            for panel, edges in got[k].items():
                assert edges, (session, panel)
                assert edges == reference[pos][k][panel], (
                    f"session {session} (instance #{pos}, K={k}) drew {panel} differently")
