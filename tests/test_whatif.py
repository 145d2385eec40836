"""What-if edits: the target and explainers on edited graphs, Δ as the distillation defines it."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.gem.distill import distill
from gem_core.service.molecules import explain_smiles_edited, molecule_model
from gem_core.service.session import workbench
from gem_core.service.whatif import Edit, EditError, evaluate_edits, parse_pair_list

PROJECT = Path(__file__).resolve().parent.parent
NITROTOLUENE = "Cc1ccc([N+](=O)[O-])cc1"  # atoms: C0 c1 c2 c3 c4 N5 O6 O7 c8 c9, then H


@pytest.fixture(scope="module")
def ba():
    wb = workbench("ba_shapes", "cpu")
    return wb, wb.instances("test")[0]


def test_single_edge_deletion_is_the_distillations_delta(ba):
    wb, inst = ba
    edits = [Edit.of([p]) for p in inst.pairs.t().tolist()]
    original, outcomes = evaluate_edits(wb, inst, edits)
    d = distill([inst], wb.black_box, connected=True, label_source="predicted", device="cpu")
    for o, delta in zip(outcomes, d.delta.tolist()):
        if o.error is None:
            assert o.delta_loss == pytest.approx(delta, abs=1e-9)
    assert original.loss == pytest.approx(float(d.full_loss[0]), abs=1e-9)


def test_molecule_delta_and_the_nitro_bond():
    mol = smiles_to_instance(NITROTOLUENE)
    # the paper's target: its P(mutagen) falls when the C–N bond goes (the strong target, the
    # molecule default, still reads the detached NO2 and rises: see the detached-part test)
    wb = molecule_model("cpu", target="paper")
    original, (cut,) = evaluate_edits(wb, mol.instance, [Edit.of([(4, 5)])], ["gem"], edge="bond")
    mask = torch.ones(mol.instance.num_pairs, dtype=torch.bool)
    mask[mol.pairs.index((4, 5))] = False
    expected = wb.predict_proba([mol.instance], [mask])[0]
    # the same graph, predicted in a batch of another size: float32 rounding only
    assert cut.probabilities == pytest.approx(expected.tolist(), abs=1e-6)
    assert cut.probabilities[0] < original.probabilities[0]  # the nitro group drives P(mutagen)
    j = mol.pairs.index((4, 5))
    assert math.isnan(cut.scores["gem"][j]) and not cut.scores["gem"][mask].isnan().any()


def test_the_empty_edit_gives_the_original_numbers_exactly(ba):
    wb, inst = ba
    original, (undo,) = evaluate_edits(wb, inst, [Edit()], ["gem"])
    assert undo.probabilities == original.probabilities and undo.delta_loss == 0.0
    assert torch.equal(undo.scores["gem"], original.scores["gem"])


def test_deleting_nodes_relabels_and_maps_scores_back(ba):
    wb, inst = ba
    other = next(n for n in range(inst.num_nodes) if n != inst.target
                 and int(((inst.pairs[0] == n) | (inst.pairs[1] == n)).sum()) == 1)
    _, (out,) = evaluate_edits(wb, inst, [Edit.of(nodes=[other])], ["random"])
    touching = (inst.pairs[0] == other) | (inst.pairs[1] == other)
    assert torch.equal(out.kept, ~touching) and out.error is None
    assert out.scores["random"][touching].isnan().all()
    assert not out.scores["random"][~touching].isnan().any()


def test_bad_edits_get_clear_messages(ba):
    wb, inst = ba
    t = inst.target
    own = [p for p in inst.pairs.t().tolist() if t in p]
    _, outs = evaluate_edits(wb, inst, [Edit.of(own), Edit.of(nodes=[t]),
                                        Edit.of(inst.pairs.t().tolist())])
    assert "disconnects the explained node" in outs[0].error
    assert "explained node itself" in outs[1].error
    assert "leaves no edge" in outs[2].error or "disconnects" in outs[2].error
    assert all(not o.probabilities for o in outs)
    with pytest.raises(EditError, match="No edge between"):
        evaluate_edits(wb, inst, [Edit.of([(0, inst.num_nodes + 5)])])
    with pytest.raises(EditError, match="No bond given"):
        parse_pair_list(" , ")
    with pytest.raises(EditError, match="Cannot read"):
        parse_pair_list("1-2,3")
    assert parse_pair_list("3-7; 9-4") == [(3, 7), (9, 4)]


def test_explain_remove_bonds_cli_matches_the_engine():
    proc = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--smiles", NITROTOLUENE,
                           "--k", "5", "--remove-bonds", "5-4", "--device", "cpu", "--json", "-"],
                          cwd=PROJECT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    ref = explain_smiles_edited(NITROTOLUENE, [(4, 5)], k=5, device="cpu")
    assert out["removed_bonds"] == [[4, 5]]
    assert out["detached_atoms"] == [5, 6, 7]  # the NO2, cut off but still read
    assert out["p_mutagen"] == pytest.approx(ref["p_mutagen"], abs=1e-12)
    assert out["explanation"]["bonds"] == ref["explanation"]["bonds"]
    assert [4, 5] not in out["explanation"]["bonds"] and len(out["explanation"]["bonds"]) == 5
    assert out["loss"]["delta"] == pytest.approx(out["loss"]["edited"] - out["loss"]["original"])
    bad = subprocess.run([sys.executable, "-m", "gem_core", "explain", "--smiles", "CCO",
                          "--remove-bonds", "0-2"], cwd=PROJECT, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "No bond between 0-2" in bad.stderr


def test_an_edit_names_the_part_it_cuts_off(ba):
    """Issue 27, item 4: deleting the C–N bond of 4-nitrotoluene cuts N5, O6, O7 off (still in
    the graph); deleting them too leaves nothing detached; a C–H bond cuts its H off; on a node
    task the explained node's part is the main one."""
    mol = smiles_to_instance(NITROTOLUENE)
    wb = molecule_model("cpu")
    h = next(p for p in mol.pairs if p[0] == 0 and p[1] >= 10)
    _, outs = evaluate_edits(wb, mol.instance, [Edit.of([(4, 5)]), Edit.of([(4, 5)], [5, 6, 7]),
                                                Edit.of([h]), Edit(), Edit.of(nodes=[5])],
                             edge="bond")
    assert [o.detached for o in outs] == [(5, 6, 7), (), (h[1],), (), (6, 7)]
    bwb, inst = ba
    t = int(inst.target)
    own = [tuple(p) for p in inst.pairs.t().tolist() if t in p]
    neighbour = next(v if u == t else u for u, v in own)
    others = [p for p in inst.pairs.t().tolist() if t not in p]
    # cut every edge but the target's own: its neighbours stay in its part, the rest is apart
    _, (o,) = evaluate_edits(bwb, inst, [Edit.of(others)])
    assert o.error is None and neighbour not in o.detached and t not in o.detached
    assert set(o.detached) == set(range(inst.num_nodes)) - {t, *(x for p in own for x in p)}
