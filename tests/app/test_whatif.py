"""The "What if…" sections of the Molecule and Explore pages: every number is the engine's.

4-nitrotoluene (atoms C0 c1 c2 c3 c4 N5 O6 O7 c8 c9, then hydrogens; the nitro group's C–N bond
is 4-5) on the Molecule page, and a BA-shapes house node on the Explore page.
"""
from __future__ import annotations

import random
import re

import pytest
import torch

from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.data.ranking import topk_mask
from gem_core.service.whatif import Edit, evaluate_edits

from .conftest import block_paths, make_app, networks, no_exception, texts

NITROTOLUENE = "Cc1ccc([N+](=O)[O-])cc1"



#: the what-if's plain name for Δ loss (issue 27 item 6: the precise term is in its tooltip)
WORSE = "How much worse the model does"

def _widget(widgets, prefix: str):
    found = [w for w in widgets if (w.key or "").startswith(prefix)]
    assert len(found) == 1, [w.key for w in widgets]
    return found[0]


def _arrow_metrics(at) -> dict[str, str]:
    """The What-if section's before → after numbers (metric label -> shown value)."""
    return {m.label: m.value for m in at.metric
            if "→" in str(m.value) or m.label == WORSE}


def _snapshot(at) -> tuple:
    """Everything the page says in numbers and words (to compare before an edit and after undo;
    the main area: the sidebar's debug expander shows each run's own server time)."""
    page = at.main
    return (texts(page.metric), [m.label for m in page.metric], texts(page.markdown),
            texts(page.caption), texts(page.warning), texts(page.info))


def _molecule(methods=("gem", "random")):
    at = make_app(methods=methods)
    at.switch_page("views/molecule.py").run()
    at.text_input(key="mol_smiles").input(NITROTOLUENE)
    at.button(key="mol_explain").click().run()
    no_exception(at)
    return at


# ----------------------------------------------------------------------------- molecule page

def test_deleting_the_nitro_bond_shows_the_engines_numbers_and_undo_restores(
        needs_mutagenicity_model):
    from gem_core.service.molecules import molecule_model

    at = _molecule()
    before = _snapshot(at)
    p_page = next(m.value for m in at.metric if m.label == "P(mutagen)")
    mol = smiles_to_instance(NITROTOLUENE)
    j = mol.pairs.index((4, 5))
    bonds = _widget(at.multiselect, "mol_whatif_edges_")
    assert "C4–N5 (aromatic nitro)" in bonds.options  # the bond as a chemist reads it
    bonds.set_value([j]).run()
    no_exception(at)
    assert bonds.value == [j]

    original, (cut,) = evaluate_edits(molecule_model("cpu"), mol.instance, [Edit.of([(4, 5)])])
    assert cut.error is None
    shown = _arrow_metrics(at)
    expected = f"{original.probabilities[0]:.3f} → {cut.probabilities[0]:.3f}"
    assert shown["P(mutagen)"] == expected, (shown, expected)
    assert expected.split(" → ")[0] == p_page  # the same original as the page's prediction
    assert expected.split(" → ")[0] != expected.split(" → ")[1]  # the edit changes it
    assert shown[WORSE] == f"{cut.delta_loss:+.3f}"
    names = {0: "mutagen", 1: "non-mutagen"}
    # the page's own prediction stays; the section's says what the edited molecule is
    assert [m.value for m in at.metric if m.label == "Prediction"][-1] == names[cut.label]
    flipped = cut.label != original.label
    sentence = [m for m in texts(at.markdown) if m.startswith("P(mutagen) 0")]
    assert len(sentence) == 1 and ("flips" in sentence[0]) == flipped
    # each fast explainer re-explains the edited molecule (Gem and Random: fitted / fit-free)
    k = at.slider(key="mol_k").value
    assert {f"**Gem**, top {k} after the edit", f"**Random**, top {k} after the edit"} <= set(
        texts(at.markdown))

    _widget(at.button, "mol_whatif_undo_").click().run()
    no_exception(at)
    assert _widget(at.multiselect, "mol_whatif_edges_").value == []
    assert not _arrow_metrics(at)
    assert _snapshot(at) == before  # exactly the original's numbers and words


def test_deleting_atoms_and_every_bond_gets_the_engines_message(needs_mutagenicity_model):
    at = _molecule(methods=("random",))
    mol = smiles_to_instance(NITROTOLUENE)
    atoms = _widget(at.multiselect, "mol_whatif_nodes_")
    assert "N5 (aromatic nitro)" in atoms.options
    atoms.set_value([5]).run()  # the nitrogen: its three bonds go with it
    no_exception(at)
    from gem_core.service.molecules import molecule_model

    _, (out,) = evaluate_edits(molecule_model("cpu"), mol.instance, [Edit.of(nodes=[5])])
    assert _arrow_metrics(at)["P(mutagen)"].endswith(f"{out.probabilities[0]:.3f}")
    assert any("3 of 17 bonds deleted with 1 atom" in c for c in texts(at.caption))

    atoms.set_value(list(range(mol.instance.num_nodes))).run()  # every atom: nothing is left
    no_exception(at)
    assert any("leaves no bond" in w for w in texts(at.warning)), texts(at.warning)
    assert not _arrow_metrics(at) and not at.error
    at2 = _molecule(methods=("random",))
    _widget(at2.multiselect, "mol_whatif_edges_").set_value(
        list(range(mol.instance.num_pairs))).run()  # every bond
    no_exception(at2)
    assert any("This edit leaves no bond" in w for w in texts(at2.warning))
    assert not at2.error


def test_the_bond_search_finds_whole_atom_labels_and_one_click_picks_one_bond(
        needs_mutagenicity_model):
    """Issue 27, item 8: "C4" finds the bonds of atom C4 only (not "Select 4 matches"), the
    pickers offer no bulk selection and no fuzzy typing, and one pick deletes one bond."""
    at = _molecule(methods=("random",))
    mol = smiles_to_instance(NITROTOLUENE)
    bonds = _widget(at.multiselect, "mol_whatif_edges_")
    atoms = _widget(at.multiselect, "mol_whatif_nodes_")
    for picker in (bonds, atoms):
        assert not picker.proto.select_all  # no "Select all" / "Select N matches" entry
        # typing there does no fuzzy matching ("325" matched 3–25 and 31–258)
        assert picker.proto.filter_mode == picker.proto.DESCRIPTOR.fields_by_name[
            "filter_mode"].enum_type.values_by_name["FILTER_MODE_NONE"].number
    assert len(bonds.options) == mol.instance.num_pairs
    _widget(at.text_input, "mol_whatif_find_").input("C4").run()
    no_exception(at)
    bonds = _widget(at.multiselect, "mol_whatif_edges_")
    own = [j for j, p in enumerate(mol.pairs) if 4 in p]
    from gem_core.chemistry.labels import bond_labels

    edge_labels, node_labels = bond_labels(mol.mol, mol.pairs)
    assert sorted(bonds.options) == sorted(edge_labels[j] for j in own), bonds.options
    assert _widget(at.multiselect, "mol_whatif_nodes_").options == [node_labels[4]]
    assert any("finds 3 bonds and 1 atom" in c for c in texts(at.caption)), texts(at.caption)
    j = mol.pairs.index((4, 5))
    bonds.set_value([j]).run()
    no_exception(at)
    assert _widget(at.multiselect, "mol_whatif_edges_").value == [j]
    assert any("1 of 17 bonds deleted" in c for c in texts(at.caption))
    # the search changes, the pick stays
    _widget(at.text_input, "mol_whatif_find_").input("O6").run()
    no_exception(at)
    bonds = _widget(at.multiselect, "mol_whatif_edges_")
    assert bonds.value == [j] and edge_labels[j] in bonds.options
    assert set(bonds.options) == {edge_labels[j], *(edge_labels[i] for i, p in
                                                     enumerate(mol.pairs) if 6 in p)}


def test_a_cut_off_nitro_group_is_named_and_removed_in_one_click(needs_mutagenicity_model):
    """Issue 27, item 4: deleting the C–N bond of 4-nitrotoluene leaves the NO₂ in the graph;
    the page says so and "Remove the detached part" deletes N5, O6, O7 through the engine;
    "Remove the aromatic nitro group" does the same from the start."""
    from gem_core.service.molecules import molecule_model

    at = _molecule(methods=("random",))
    mol = smiles_to_instance(NITROTOLUENE)
    model = molecule_model("cpu")
    assert not [w for w in texts(at.warning) if "detached" in w]
    j = mol.pairs.index((4, 5))
    _widget(at.multiselect, "mol_whatif_edges_").set_value([j]).run()
    no_exception(at)
    cut = [w for w in texts(at.warning) if "detached fragment" in w]
    assert len(cut) == 1 and "N5, O6, O7 (3 atoms)" in cut[0], texts(at.warning)
    _widget(at.button, "mol_whatif_detached_").click().run()
    no_exception(at)
    assert _widget(at.multiselect, "mol_whatif_nodes_").value == [5, 6, 7]
    assert not [w for w in texts(at.warning) if "detached fragment" in w]
    original, (cut_off, gone) = evaluate_edits(
        model, mol.instance, [Edit.of([(4, 5)]), Edit.of([(4, 5)], [5, 6, 7])])
    assert cut_off.detached == (5, 6, 7) and gone.detached == ()
    shown = _arrow_metrics(at)["P(mutagen)"]
    assert shown == f"{original.probabilities[0]:.3f} → {gone.probabilities[0]:.3f}"
    assert any("3 of 17 bonds deleted with 3 atoms" in c for c in texts(at.caption))
    # the group in one click, from the unedited molecule
    at = _molecule(methods=("random",))
    group = _widget(at.button, "mol_whatif_group_5_6_7_")
    assert group.label == "Remove the aromatic nitro group (N5, O6, O7)"
    group.click().run()
    no_exception(at)
    assert _widget(at.multiselect, "mol_whatif_nodes_").value == [5, 6, 7]
    _, (only,) = evaluate_edits(model, mol.instance, [Edit.of(nodes=[5, 6, 7])])
    assert _arrow_metrics(at)["P(mutagen)"].endswith(f"{only.probabilities[0]:.3f}")
    assert not [w for w in texts(at.warning) if "detached fragment" in w]


def test_explanation_vs_random_bonds_side_by_side(needs_mutagenicity_model):
    from gem_core.service.molecules import explain_molecules, molecule_model

    at = _molecule(methods=("random",))
    k = at.slider(key="mol_k").value
    _widget(at.button, "mol_whatif_cmp_go_").click().run()
    no_exception(at)
    mol = smiles_to_instance(NITROTOLUENE)
    model = molecule_model("cpu")
    scores = explain_molecules([mol], ["random"], model=model)[0].scores["random"]
    mask = topk_mask(torch.as_tensor(scores), k)
    top = [mol.pairs[j] for j in range(len(mol.pairs)) if mask[j]]
    rand = [mol.pairs[j] for j in sorted(random.Random(0).sample(range(len(mol.pairs)), k))]
    original, (o_top, o_rand) = evaluate_edits(model, mol.instance,
                                               [Edit.of(top), Edit.of(rand)])
    lines = [m for m in texts(at.markdown) if m.startswith("P(mutagen) ") and WORSE in m]
    assert len(lines) == 2, texts(at.markdown)
    for line, out in zip(lines, (o_top, o_rand)):
        assert f"→ **{out.probabilities[0]:.3f}**" in line
        assert f"{WORSE}: **{out.delta_loss:+.3f}**" in line
    deleted = [c for c in texts(at.caption) if c.endswith(" deleted.")]
    # reproducible: the same seed draws the same bonds, another seed others
    _widget(at.button, "mol_whatif_cmp_go_").click().run()
    assert [c for c in texts(at.caption) if c.endswith(" deleted.")] == deleted
    _widget(at.number_input, "mol_whatif_cmp_seed_").set_value(7).run()
    no_exception(at)
    assert [c for c in texts(at.caption) if c.endswith(" deleted.")][1] != deleted[1]


def test_a_per_instance_explainer_waits_for_its_button_however_fast_it_was(
        needs_mutagenicity_model):
    """GNNExplainer explains one molecule at a time (~0.25 s here): its after-edit panel waits
    for a click, whatever time the page measured, so the panels an edit shows never depend on
    the machine's load (a time limit let the panel come and go)."""
    at = _molecule(methods=("gnnexplainer", "random"))
    mol = smiles_to_instance(NITROTOLUENE)
    _widget(at.multiselect, "mol_whatif_edges_").set_value([mol.pairs.index((4, 5))]).run()
    no_exception(at)
    assert sum("after the edit" in m for m in texts(at.markdown)) == 1  # Random only
    # the caption gives the time the page measured, not a guess
    took = next(c for c in texts(at.caption) if c.startswith("These explain one instance"))
    assert re.search(r"GNNExplainer took \d+\.\d s on this molecule", took), took
    _widget(at.button, "mol_whatif_slow_gnnexplainer_").click().run()
    no_exception(at)
    k = at.slider(key="mol_k").value
    assert f"**GNNExplainer**, top {k} after the edit" in texts(at.markdown)


def test_batched_explainers_re_explain_on_every_edit(needs_mutagenicity_model):
    at = _molecule(methods=("gem", "random"))
    mol = smiles_to_instance(NITROTOLUENE)
    _widget(at.multiselect, "mol_whatif_edges_").set_value([mol.pairs.index((4, 5))]).run()
    no_exception(at)
    k = at.slider(key="mol_k").value
    shown = texts(at.markdown)
    assert f"**Gem**, top {k} after the edit" in shown, shown
    assert f"**Random**, top {k} after the edit" in shown, shown
    assert not [b for b in at.button if (b.key or "").startswith("mol_whatif_slow_")]


def test_the_molecule_panels_keep_their_place_through_edits(needs_mutagenicity_model):
    """What an edit adds or drops above the panels (the detached-part warning, a group button,
    the search's count) goes into fixed slots: the panels stay where they are, and the browser
    updates them in place instead of rebuilding them."""
    at = _molecule(methods=("gem", "random"))
    j = smiles_to_instance(NITROTOLUENE).pairs.index((4, 5))
    _widget(at.multiselect, "mol_whatif_edges_").set_value([j]).run()  # cuts the NO2 off
    assert [w for w in texts(at.warning) if "detached fragment" in w]
    paths = [block_paths(at, "mol_whatif_panel_")]
    _widget(at.button, "mol_whatif_detached_").click().run()  # no warning, no nitro button
    assert not [w for w in texts(at.warning) if "detached fragment" in w]
    paths.append(block_paths(at, "mol_whatif_panel_"))
    _widget(at.text_input, "mol_whatif_find_").input("C1").run()  # the search's count
    assert any("finds" in c for c in texts(at.caption))
    paths.append(block_paths(at, "mol_whatif_panel_"))
    no_exception(at)
    assert set(paths[0]) == {"edited", "gem", "random"}, paths[0]
    assert paths[0] == paths[1] == paths[2], paths


# ----------------------------------------------------------------------------- explore page

@pytest.fixture(scope="module")
def house():
    """BA-shapes test instance #0 (the app's first): a house node and one of its house edges."""
    from gem_core.service.session import workbench

    wb = workbench("ba_shapes", "cpu")
    inst = wb.instances("test")[0]
    assert inst.motif_mask is not None and bool(inst.motif_mask.any())
    return wb, inst


def test_deleting_a_house_edge_changes_the_prediction_as_the_engine_says(house):
    wb, inst = house
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    ids = inst.node_ids.tolist()
    t = int(inst.target)
    # the house edge of the explained node whose deletion the engine says flips the prediction
    house_edges = [j for j, (u, v) in enumerate(pairs) if bool(inst.motif_mask[j]) and t in (u, v)]
    original, outs = evaluate_edits(wb, inst, [Edit.of([pairs[j]]) for j in house_edges])
    j, out = next((j, o) for j, o in zip(house_edges, outs) if o.label != original.label)
    names = wb.dataset.class_names

    at = make_app(methods=("gem", "random"))
    no_exception(at)
    before = _snapshot(at)
    edges = _widget(at.multiselect, "ex_whatif_edges_")
    label = f"{ids[pairs[j][0]]}–{ids[pairs[j][1]]}"
    assert label in edges.options[:4]  # the explained node's own edges come first
    edges.set_value([j]).run()
    no_exception(at)
    focus = names[original.label]
    shown = _arrow_metrics(at)
    assert shown[f"P({focus})"] == (f"{original.probabilities[original.label]:.3f} → "
                                    f"{out.probabilities[original.label]:.3f}")
    assert shown[WORSE] == f"{out.delta_loss:+.3f}"
    assert any(m.label == "Prediction" and m.value == names[out.label] for m in at.metric)
    assert any("the prediction **flips**" in m for m in texts(at.markdown))
    # the edited graph and each fast explainer: the deleted edge drawn dashed, not explained
    views = networks(at)
    dashed = [v for v in views if any(e.get("dashes") for e in v["edges"])]
    assert len(dashed) == 3  # edited graph, Gem, Random
    for view in dashed:
        gone = [(e["from"], e["to"]) for e in view["edges"] if e.get("dashes")]
        assert gone == [pairs[j]]
    _widget(at.button, "ex_whatif_undo_").click().run()
    no_exception(at)
    assert _snapshot(at) == before


def test_disconnecting_the_explained_node_gets_the_engines_message(house):
    wb, inst = house
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    own = [j for j, p in enumerate(pairs) if int(inst.target) in p]
    at = make_app(methods=("random",))
    _widget(at.multiselect, "ex_whatif_edges_").set_value(own).run()
    no_exception(at)
    _, (out,) = evaluate_edits(wb, inst, [Edit.of([pairs[j] for j in own])])
    assert out.error and "disconnects the explained node" in out.error
    assert out.error in texts(at.warning)
    assert not _arrow_metrics(at) and not at.error
    # the explained node itself
    _widget(at.multiselect, "ex_whatif_edges_").set_value([]).run()
    _widget(at.multiselect, "ex_whatif_nodes_").set_value([int(inst.target)]).run()
    no_exception(at)
    assert any("explained node itself cannot be deleted" in w for w in texts(at.warning))


@pytest.mark.parametrize("dataset", ["tree_cycles", "mutagenicity", "nci1"])
def test_explore_edits_on_every_dataset(dataset):
    """Tree-cycles nodes, Mutagenicity molecules (RDKit, bonds named by their atoms) and NCI1
    graphs: the first edge offered, deleted, shows the engine's probability."""
    from gem_core.service.session import workbench

    wb = workbench(dataset, "cpu")
    if not wb.has_data():
        pytest.skip(f"no {dataset} data (GEM_DATA_ROOT)")
    inst = wb.instances("test")[0]
    at = make_app(methods=("random",), sb_dataset=dataset,
                  **{f"ex_index_{dataset}": 0})  # test instance #0 (not the first view)
    no_exception(at)
    edges = _widget(at.multiselect, "ex_whatif_edges_")
    first = edges.options[0]
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    if dataset == "mutagenicity":  # bonds named by their atoms: "C0–C1", "N5=O6 (...)"
        assert first[0].isalpha() and any(s in first for s in "–=≡")
    edges.set_value([_option_value(at, edges, first, pairs, inst, wb)]).run()
    no_exception(at)
    j = edges.value[0]
    original, (out,) = evaluate_edits(wb, inst, [Edit.of([pairs[j]])])
    shown = _arrow_metrics(at)
    if out.error:
        assert out.error in texts(at.warning)
        return
    focus = wb.dataset.class_names[original.label]
    assert shown[f"P({focus})"] == (f"{original.probabilities[original.label]:.3f} → "
                                    f"{out.probabilities[original.label]:.3f}")
    assert shown[WORSE] == f"{out.delta_loss:+.3f}"
    if dataset == "mutagenicity":
        assert len([i for i in at.image]) >= 2  # the edited molecule and Random's, by RDKit
    else:
        assert sum(any(e.get("dashes") for e in v["edges"]) for v in networks(at)) == 2


def _option_value(at, widget, label, pairs, inst, wb) -> int:
    """The pair position behind an option label (the widget's values are positions)."""
    for j in range(len(pairs)):
        if widget.format_func(j) == label:
            return j
    raise AssertionError(label)


# ----------------------------------------------------------------------------- drawing helpers

def test_deleted_edges_and_nodes_are_drawn_dashed_everywhere():
    import xml.etree.ElementTree as ET

    from components import graph_pyvis, graph_static, graph_view

    pairs = [(0, 1), (1, 2), (2, 0), (2, 3)]
    base = graph_view.node_task_picture(pairs, [10, 11, 12, 13], [0, 1, 1, 2],
                                        ["a", "b", "c"], 1, graph_view.layout(4, pairs))
    pic = base.with_explanation([True, True, True, False], [0.9, 0.5, 0.1, 0.0], "#d62728")
    pic = pic.with_deletions([False, True, False, False], [False, False, False, True])
    assert pic.selected == [True, False, True, False]  # a deleted edge is never explained
    data = graph_pyvis.network_data(pic)
    assert [bool(e.get("dashes")) for e in data["edges"]] == [False, True, False, False]
    assert data["edges"][1]["color"] == graph_view.DELETED_EDGE
    assert "deleted" in data["edges"][1]["title"]
    assert data["nodes"][3]["color"]["background"] == graph_view.DELETED_NODE
    assert data["nodes"][3].get("shapeProperties", {}).get("borderDashes")
    assert ["deleted edge", graph_view.DELETED_EDGE, "deleted"] in data["legend"]
    svg = graph_static.to_svg(pic)
    ET.fromstring(svg)
    assert svg.count("stroke-dasharray") >= 2  # the edge and the node (and the legend)
    assert graph_static.to_png(pic)[:4] == b"\x89PNG"
    close = pic.restricted([0, 1, 2])
    assert close.removed == [False, True, False] and close.removed_nodes == [False] * 3
    plain = base.with_deletions([False] * 4)
    assert not any(e.get("dashes") for e in graph_pyvis.network_data(plain)["edges"])


def test_the_edited_molecule_keeps_its_layout_and_marks_the_cut(needs_mutagenicity_model):
    from components import molecule_view

    mol = smiles_to_instance(NITROTOLUENE)
    svg = molecule_view.edited_molecule_svg(mol.mol, [(4, 5)], [], [(5, 6)], [1.0])
    pink = molecule_view.DELETED_HEX.lower()
    assert pink in svg.lower()  # the deleted bond is marked
    assert pink not in molecule_view.edited_molecule_svg(mol.mol).lower()
    hidden = molecule_view.edited_molecule_svg(mol.mol, [], [0], hide_hydrogens=True)
    assert pink in hidden.lower()


def test_topk_after_an_edit_skips_deleted_pairs_and_random_is_seeded():
    from components.whatif_view import edit_token, random_positions, ranked_after

    s = torch.tensor([0.9, float("nan"), 0.5, 0.7, 0.7])
    ranked, shown = ranked_after(s, 3)
    assert ranked == [0, 3, 4] and shown[1] == 0.0 and max(shown) == 1.0
    assert ranked_after(s, 10)[0] == [0, 3, 4, 2]  # never more than the kept pairs
    assert random_positions(20, 5, 3) == random_positions(20, 5, 3) != random_positions(20, 5, 4)
    assert len(set(random_positions(20, 5, 3))) == 5
    assert edit_token([3, 1], [2]) == "e1_3n2" and edit_token([], []) == "none"


def test_a_cut_off_part_of_a_computation_graph_is_named(house):
    """Issue 27, item 4 on a node task: an edge whose deletion cuts nodes off the explained
    node's part is named, and the page says the node's prediction no longer sees them."""
    wb, inst = house
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    _, outs = evaluate_edits(wb, inst, [Edit.of([p]) for p in pairs])
    j, out = next(((j, o) for j, o in enumerate(outs) if o.error is None and o.detached),
                  (None, None))
    if j is None:
        pytest.skip("no single edge of this computation graph cuts a part off")
    at = make_app(methods=("random",))
    _widget(at.multiselect, "ex_whatif_edges_").set_value([j]).run()
    no_exception(at)
    ids = inst.node_ids.tolist()
    cut = [w for w in texts(at.warning) if "detached fragment" in w]
    assert len(cut) == 1 and "no longer sees" in cut[0], texts(at.warning)
    assert all(str(ids[i]) in cut[0] for i in out.detached)


def test_the_explore_panels_keep_their_place_from_the_first_edit_on(house):
    """The edited graph is drawn before any edit (click to delete): it stays in place when the
    first edit comes, when a search narrows the pickers and when an edit cuts a part off."""
    wb, inst = house
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    _, outs = evaluate_edits(wb, inst, [Edit.of([p]) for p in pairs])
    plain = next(j for j, o in enumerate(outs) if o.error is None and not o.detached)
    at = make_app(methods=("gem", "random"))
    paths = [block_paths(at, "ex_whatif_panel_")]
    assert set(paths[0]) == {"edited"}
    _widget(at.multiselect, "ex_whatif_edges_").set_value([plain]).run()
    paths.append(block_paths(at, "ex_whatif_panel_"))
    cut = next((j for j, o in enumerate(outs) if o.error is None and o.detached), None)
    if cut is not None:
        _widget(at.multiselect, "ex_whatif_edges_").set_value([cut]).run()
        assert [w for w in texts(at.warning) if "detached fragment" in w]
        paths.append(block_paths(at, "ex_whatif_panel_"))
    _widget(at.text_input, "ex_whatif_find_").input(str(inst.node_ids[pairs[plain][0]].item())).run()
    assert any("finds" in c for c in texts(at.caption))
    paths.append(block_paths(at, "ex_whatif_panel_"))
    no_exception(at)
    assert set(paths[1]) == {"edited", "gem", "random"}, paths[1]
    assert all(p["edited"] == paths[0]["edited"] for p in paths), paths
    assert all(p == paths[1] for p in paths[1:]), paths

