"""Plain-language readings of explanations, against hand-checked instances."""
from __future__ import annotations

import pytest
import torch

from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.service.molecules import CLASS_NAMES, molecule_model
from gem_core.service.reading import read_explanation
from gem_core.service.session import workbench

BA_CLASSES = ("base", "top", "middle", "bottom")


@pytest.fixture(scope="module")
def ba():
    wb = workbench("ba_shapes", "cpu")
    inst = next(i for i in wb.instances("test") if int(i.motif_mask.sum()) == 6)
    return wb, inst


def test_motif_coverage_on_a_ba_shapes_house(ba):
    wb, inst = ba
    house = inst.motif_mask.float()  # the six house edges scored highest
    r = read_explanation(wb, inst, "random", house, 6, BA_CLASSES)
    assert r.facts["motif"] == {"covered": 6, "of": 6}
    assert "covers 6 of the 6 motif edges" in r.text
    other = 1.0 - house  # the base's edges first: none of the house
    r = read_explanation(wb, inst, "random", other, 3, BA_CLASSES)
    assert r.facts["motif"] == {"covered": 0, "of": 6} and "covers 0 of the 6" in r.text
    assert r.facts["prediction"]["label"] in BA_CLASSES and "The model predicts" in r.text
    assert r.facts["teacher"]["of"] == 3 and 0 <= r.facts["teacher"]["shared"] <= 3


def test_a_nitroarene_names_its_toxicophore():
    mol = smiles_to_instance("O=[N+]([O-])c1ccccc1")  # nitrobenzene: O0 N1 O2 c3 ...
    wb = molecule_model("cpu")
    nitro = {(0, 1), (1, 2), (1, 3)}
    scores = torch.tensor([1.0 if p in nitro else 0.0 for p in mol.pairs])
    r = read_explanation(wb, mol.instance, "random", scores, 3, CLASS_NAMES, mol=mol.mol,
                         edge="bond")
    assert r.facts["toxicophores"]["touched"] == [
        {"class": "aromatic_nitro", "title": "Aromatic nitro", "bonds_in_explanation": 3,
         "bonds": 3}]
    assert "the aromatic nitro toxicophore (3 of its 3 bonds)" in r.text
    ring_h = 1.0 - scores  # the ring and its hydrogens: no toxicophore bond
    r = read_explanation(wb, mol.instance, "random", ring_h, 3, CLASS_NAMES, mol=mol.mol,
                         edge="bond")
    assert r.facts["toxicophores"]["touched"] == []
    assert "none of the molecule's toxicophores (aromatic nitro)" in r.text


def test_survival_and_necessity_are_the_models_answers(ba):
    wb, inst = ba
    scores = wb.explain("gem", [inst])[0]
    r = read_explanation(wb, inst, "gem", scores, 6, BA_CLASSES)
    from gem_core.data.ranking import topk_mask

    mask = topk_mask(scores, 6)
    p = wb.predict_proba([inst, inst, inst], [torch.ones_like(mask), mask, ~mask])
    assert r.facts["on_explanation"]["survives"] == (int(p[1].argmax()) == int(p[0].argmax()))
    assert r.facts["without_explanation"]["changes"] == (int(p[2].argmax()) != int(p[0].argmax()))
    assert r.facts["on_explanation"]["probability"] == pytest.approx(float(p[1].max()))


def test_k_at_least_the_edges_says_so():
    mol = smiles_to_instance("CCO")
    wb = molecule_model("cpu")
    r = read_explanation(wb, mol.instance, "distilled_predicted", torch.rand(8), 25, CLASS_NAMES,
                         mol=mol.mol, edge="bond")
    assert "every bond" in r.text and "teacher" not in r.facts
    assert "none of the Kazius" in r.text


def test_one_bond_reads_in_the_singular():
    """Issue 27, item 17: K = 1 reads "On this one bond alone", "Without it", never "these 1
    bonds" or "1 of the same 1 bonds"."""
    mol = smiles_to_instance("O=[N+]([O-])c1ccccc1")
    wb = molecule_model("cpu")
    scores = torch.tensor([1.0 if p == (0, 1) else 0.0 for p in mol.pairs])
    r = read_explanation(wb, mol.instance, "random", scores, 1, CLASS_NAMES, mol=mol.mol,
                         edge="bond")
    assert "On this one bond alone" in r.text and "Without it it predicts" in r.text
    assert "these 1 bond" not in r.text and "1 bonds" not in r.text
    assert ("keeps this bond too." in r.text) == (r.facts["teacher"]["shared"] == 1)
    assert ("does not keep this bond." in r.text) == (r.facts["teacher"]["shared"] == 0)
