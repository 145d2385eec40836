"""The What-if sections in a real browser: delete the nitro group's C–N bond of 4-nitrotoluene
and undo it (Molecule page), delete a house edge of a BA-shapes node (Explore page), and the
clear messages of the edits that leave nothing to predict on (no bond left; the explained node
cut off)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tools.browser import IDLE, MAIN, explanation_panels, pick_option, wait_panels_drawn

from .conftest import TIMEOUT_MS, assert_no_errors, open_app, screenshot

pytestmark = pytest.mark.browser

NITROTOLUENE = "Cc1ccc([N+](=O)[O-])cc1"  # atoms C0 c1 c2 c3 c4 N5 O6 O7 c8 c9, then H


def _rerun_done(page) -> None:
    page.wait_for_timeout(200)  # let the rerun start before waiting for it to end
    page.wait_for_selector(IDLE)


def _pick_until_shown(page, key_prefix: str, label: str, result_selector: str):
    """Pick ``label`` and wait for its result; pick again when a rerun still in flight (a
    panel reporting it was drawn) swallowed the first pick under a loaded machine."""
    result = page.locator(result_selector)
    for attempt in range(3):
        try:
            chosen = page.locator(f"{MAIN} [class*='st-key-{key_prefix}'] [data-tag]")
            if not any(label in t for t in chosen.all_inner_texts()):
                page.set_default_timeout(30_000)  # its option may vanish under a rerun
                try:
                    pick_option(page, key_prefix, label)
                finally:
                    page.set_default_timeout(TIMEOUT_MS)
            result.wait_for(timeout=40_000)
            return result
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")  # close a dropdown left open
            _rerun_done(page)
    return result


def test_nitro_bond_deleted_and_undone(app_server, page):
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import molecule_model
    from gem_core.service.whatif import Edit, evaluate_edits

    mol = smiles_to_instance(NITROTOLUENE)
    original, (cut,) = evaluate_edits(molecule_model("cpu"), mol.instance, [Edit.of([(4, 5)])])
    before, after = f"{original.probabilities[0]:.3f}", f"{cut.probabilities[0]:.3f}"
    assert before != after

    open_app(page, app_server, "/molecule")
    page.locator(".st-key-mol_smiles input").fill(NITROTOLUENE)
    page.locator(".st-key-mol_explain button").click()
    _rerun_done(page)
    assert_no_errors(page)
    page.locator(".st-key-mol_whatif_result_none").wait_for()
    # the metrics are drawn once Metric.js has loaded, which can lag the rest of the rerun
    expect(page.locator(".st-key-mol_prediction")).to_contain_text(before, timeout=TIMEOUT_MS)

    result = _pick_until_shown(page, "mol_whatif_edges_", "C4–N5 (aromatic nitro)",
                               f".st-key-mol_whatif_result_e{mol.pairs.index((4, 5))}")
    _rerun_done(page)
    result.locator("[data-testid=stMetric]").first.wait_for()  # Metric.js loads on first use
    assert_no_errors(page)
    text = result.inner_text()
    assert f"{before} → {after}" in text, text
    assert f"{cut.delta_loss:+.3f}" in text, text
    flipped = cut.label != original.label
    assert ("flipped (was mutagen)" in text) == flipped, text
    # the edited molecule and each fast explainer's new top-K, drawn by RDKit
    for panel in ("edited", "gem", "random"):
        img = page.locator(f".st-key-mol_whatif_panel_{panel} img").first
        img.wait_for()
        assert img.evaluate("i => i.complete && i.naturalWidth > 0"), panel
    page.locator(".st-key-mol_whatif").scroll_into_view_if_needed()
    screenshot(page, "whatif-molecule-nitro")

    page.locator("[class*='st-key-mol_whatif_undo_'] button").click()
    page.locator(".st-key-mol_whatif_result_none").wait_for()
    _rerun_done(page)
    assert_no_errors(page)
    shown = page.locator(".st-key-mol_whatif_result_none").inner_text()
    assert before in shown and "→" not in shown, shown
    assert page.locator(f"{MAIN} [class*='st-key-mol_whatif_result_e']").count() == 0
    assert page.locator(f"{MAIN} [class*='st-key-mol_whatif_edges_'] [data-tag]").count() == 0


def test_house_edge_deleted_on_explore(app_server, page):
    from gem_core.service.session import workbench
    from gem_core.service.whatif import Edit, evaluate_edits

    wb = workbench("ba_shapes", "cpu")
    inst = wb.instances("test")[0]
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    ids = inst.node_ids.tolist()
    t = int(inst.target)
    # a house edge of the explained node whose deletion flips the prediction (engine's word)
    own = [j for j, p in enumerate(pairs) if t in p and bool(inst.motif_mask[j])]
    original, outs = evaluate_edits(wb, inst, [Edit.of([pairs[j]]) for j in own])
    j, out = next((j, o) for j, o in zip(own, outs) if o.label != original.label)
    focus = wb.dataset.class_names[original.label]
    label = f"{ids[pairs[j][0]]}–{ids[pairs[j][1]]}"

    open_app(page, app_server, "/")
    wait_panels_drawn(page, explanation_panels(page))  # the page at rest before the edit
    result = _pick_until_shown(page, "ex_whatif_edges_", label, f".st-key-ex_whatif_result_e{j}")
    _rerun_done(page)
    result.locator("[data-testid=stMetric]").first.wait_for()  # Metric.js loads on first use
    assert_no_errors(page)
    text = result.inner_text()
    assert f"P({focus})" in text and (f"{original.probabilities[original.label]:.3f} → "
                                      f"{out.probabilities[original.label]:.3f}") in text, text
    wait_panels_drawn(page, ["ex_whatif_panel_edited"], timeout=60)
    frame = page.query_selector(".st-key-ex_whatif_panel_edited iframe").content_frame()
    dashed = frame.evaluate("() => edges.get().filter(e => e.dashes).map(e => [e.from, e.to])")
    assert dashed == [list(pairs[j])]
    page.locator(".st-key-ex_whatif").scroll_into_view_if_needed()
    screenshot(page, "whatif-explore-ba-shapes")


def _warning_saying(page, prefix: str, words: str) -> str:
    """Wait for the What-if section's warning that holds ``words``; return its text."""
    alert = page.locator(f".st-key-{prefix} [data-testid=stAlert]", has_text=words).first
    alert.wait_for(timeout=40_000)
    return alert.inner_text()


def test_edits_that_leave_nothing_get_the_engines_message(app_server, page):
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.service.molecules import molecule_model
    from gem_core.service.session import workbench
    from gem_core.service.whatif import Edit, evaluate_edits

    # ethane: deleting both carbons takes every bond with them
    ethane = smiles_to_instance("CC")
    _, (none_left,) = evaluate_edits(molecule_model("cpu"), ethane.instance,
                                     [Edit.of(nodes=[0, 1])], edge="bond")
    assert none_left.error and "leaves no bond" in none_left.error
    open_app(page, app_server, "/molecule")
    page.locator(".st-key-mol_smiles input").fill("CC")
    page.locator(".st-key-mol_explain button").click()
    _rerun_done(page)
    page.locator(".st-key-mol_whatif_result_none").wait_for()
    for token, atom in (("n0", "C0"), ("n0_1", "C1")):  # each pick shown before the next
        _pick_until_shown(page, "mol_whatif_nodes_", atom, f".st-key-mol_whatif_result_{token}")
        _rerun_done(page)
    assert none_left.error in _warning_saying(page, "mol_whatif", "leaves no bond")
    assert_no_errors(page)
    screenshot(page, "whatif-molecule-no-bond-left")

    # BA-shapes: deleting every edge of the explained node cuts it off
    wb = workbench("ba_shapes", "cpu")
    inst = wb.instances("test")[0]
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    ids = inst.node_ids.tolist()
    own = [j for j, p in enumerate(pairs) if int(inst.target) in p]
    _, (cut_off,) = evaluate_edits(wb, inst, [Edit.of([pairs[j] for j in own])])
    assert cut_off.error and "disconnects the explained node" in cut_off.error
    open_app(page, app_server, "/")
    wait_panels_drawn(page, explanation_panels(page))
    for n, j in enumerate(own, start=1):  # each pick shown before the next
        token = "e" + "_".join(map(str, sorted(own[:n])))
        _pick_until_shown(page, "ex_whatif_edges_", f"{ids[pairs[j][0]]}–{ids[pairs[j][1]]}",
                          f".st-key-ex_whatif_result_{token}")
        _rerun_done(page)
    assert cut_off.error in _warning_saying(page, "ex_whatif", "disconnects the explained node")
    assert_no_errors(page)
    page.locator(".st-key-ex_whatif").scroll_into_view_if_needed()
    screenshot(page, "whatif-explore-disconnected")


def _click_edge(page, panel: str, u: int, v: int) -> None:
    """Click the middle of the drawn edge u–v (picture numbering) in a live network view."""
    frame_el = page.query_selector(f".st-key-{panel} iframe")
    frame_el.scroll_into_view_if_needed()
    box = frame_el.bounding_box()
    x, y = frame_el.content_frame().evaluate(
        """([u, v]) => { const p = network.getPositions([u, v]);
             const m = network.canvasToDOM({x: (p[u].x + p[v].x) / 2, y: (p[u].y + p[v].y) / 2});
             const r = document.getElementById('net').getBoundingClientRect();
             return [r.left + m.x, r.top + m.y]; }""", [u, v])
    page.mouse.move(1, 1)  # away first, then a plain press and release on the edge
    page.mouse.move(box["x"] + x, box["y"] + y, steps=5)
    page.wait_for_timeout(100)
    page.mouse.down()
    page.mouse.up()


def test_clicking_an_edge_in_the_drawing_deletes_and_restores_it(app_server, page):
    from gem_core.service.session import workbench

    wb = workbench("ba_shapes", "cpu")
    inst = wb.instances("test")[0]
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    ids = inst.node_ids.tolist()
    # a house edge of the explained node (13 nodes: no close-up, picture numbering = ours)
    j = next(j for j, p in enumerate(pairs) if int(inst.target) in p and bool(inst.motif_mask[j]))
    u, v = pairs[j]

    open_app(page, app_server, "/")
    wait_panels_drawn(page, [*explanation_panels(page), "ex_whatif_panel_edited"], timeout=60)
    assert "click an edge" in page.locator(".st-key-ex_whatif").inner_text()
    _click_edge(page, "ex_whatif_panel_edited", u, v)
    result = page.locator(f".st-key-ex_whatif_result_e{j}")
    result.wait_for(timeout=40_000)
    _rerun_done(page)
    assert_no_errors(page)
    chips = page.locator(f"{MAIN} [class*='st-key-ex_whatif_edges_'] [data-tag]").all_inner_texts()
    assert any(f"{ids[u]}–{ids[v]}" in c for c in chips), chips
    wait_panels_drawn(page, ["ex_whatif_panel_edited"], timeout=60)
    frame = page.query_selector(".st-key-ex_whatif_panel_edited iframe").content_frame()
    dashed = frame.evaluate("() => edges.get().filter(e => e.dashes).map(e => [e.from, e.to])")
    assert dashed == [[u, v]]
    screenshot(page, "whatif-explore-clicked")
    _click_edge(page, "ex_whatif_panel_edited", u, v)  # the dashed edge: restored
    page.locator(".st-key-ex_whatif_result_none").wait_for(timeout=40_000)
    _rerun_done(page)
    assert_no_errors(page)
