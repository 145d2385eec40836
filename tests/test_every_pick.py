"""Every instance a user can pick, explained by every method: the sweep that cannot miss a pick.

The app's Explore page offers every test instance of ``Workbench.browse_instances`` (the
explainer's instances, then on node tasks the split's other nodes) of every dataset and target
model, with every registry method and every K of the dataset's slider; the Molecule page takes
any SMILES. A feature is done when it works on all of them, not on the examples of its own
tests, so this module explains *all* of them:

* every pickable instance of every dataset and target with every method whose cost allows it,
  in one batched call per method, as the page's split cache does; SubgraphX (seconds per
  instance) on a seeded sample, the largest instance among it, and the distilled teachers on a
  sample of the contrast nodes (a second or more each, distilled when a user asks);
* each :class:`~gem_core.api.Explanation` is checked as the page reads it: finite scores, one
  per pair, the full ranking a permutation of the pairs, the top K, ranked pairs and ties at the
  cut defined for every K the slider allows, the target's probability on a sample of the top-K
  subgraphs, and the plain-language reading;
* one what-if edit (delete the best pair) on a seeded sample of instances per dataset;
* the Molecule flow over RDKit's ``Data/NCI/first_5K.smi`` (4,999 real SMILES, shipped with the
  rdkit wheel): every molecule is explained (Gem, PGExplainer and random on all; Gem + check,
  Random + check, GNNExplainer, Integrated Gradients and the distilled teacher, milliseconds to
  tens of milliseconds each, on a seeded sample holding the largest molecule) or refused with a named
  reason (4,674 explained; 180 unsupported elements, 137 salts or mixtures, 8 valence errors),
  never an exception of another kind.
"""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

from gem_core.chemistry.smiles import MoleculeError, smiles_to_instance
from gem_core.data.config import DATASETS, target_names
from gem_core.data.ranking import pair_order
from gem_core.explainers import METHODS, Explanation, method_spec
from gem_core.service.reading import read_explanation
from gem_core.service.session import workbench
from gem_core.service.whatif import Edit, evaluate_edits

from .conftest import tu_data_available

pytestmark = pytest.mark.slow

#: every (dataset, target) the Explore page's selectors reach
PICKS = [(name, target) for name, spec in DATASETS.items() for target in target_names(spec)]
#: methods explained on every pickable instance (SubgraphX, seconds each, on a sample)
SAMPLED = ("subgraphx",)
SUBGRAPHX_SAMPLE = 3
SUBGRAPHX_BUDGET_S = 1.0  # the tree search stops there (the app's is 10 s): same code path
WHATIF_SAMPLE = 4
READING_SAMPLE = 6
TEACHER_SAMPLE = 5  # contrast nodes the distilled teachers explain (their explained ones: all)


def _has_data(name: str) -> bool:
    source = DATASETS[name].source
    tu_name = getattr(source, "tu_name", None)
    return tu_name is None or tu_data_available(tu_name)


def check_explanation(explanation: Explanation, instances, ks) -> None:
    """The checks of one method's explanation of ``instances``, as the pages read it."""
    assert len(explanation) == len(instances)
    for i, inst in enumerate(instances):
        scores = torch.as_tensor(explanation[i])
        where = f"{explanation.method}, instance {i} ({inst.num_pairs} pairs)"
        assert scores.shape == (inst.num_pairs,), where
        assert bool(torch.isfinite(scores).all()), f"{where}: scores not finite"
        order = pair_order(scores)
        assert sorted(order) == list(range(inst.num_pairs)), where
        for k in ks:
            mask = explanation.topk_mask(i, k)
            want = min(k, inst.num_pairs)
            assert int(mask.sum()) == want, (where, k)
            ranked = explanation.ranked(i, k)
            assert ranked == order[:want], (where, k)
            assert bool(mask[ranked].all()), (where, k)
            tied = explanation.tied_at_cut(i, k)
            assert tied.shape == mask.shape, (where, k)


def _sample(n: int, size: int, seed: int, largest: int) -> list[int]:
    """A seeded sample of positions below ``n`` that holds position ``largest``."""
    rng = random.Random(seed)
    picks = set(rng.sample(range(n), min(size - 1, n))) | {largest}
    return sorted(picks)


@pytest.mark.parametrize("dataset,target", PICKS, ids=[f"{d}-{t}" for d, t in PICKS])
def test_every_pickable_instance_is_explained_by_every_method(dataset, target):
    if not _has_data(dataset):
        pytest.skip(f"{dataset}: raw data not found (set GEM_DATA_ROOT)")
    wb = workbench(dataset, "cpu", target)
    spec = wb.spec
    instances = wb.browse_instances("test")
    assert instances
    explained = len(wb.instances("test"))
    ks = range(min(spec.k_grid), max(spec.k_grid) + 1)  # the Explore page's K slider
    largest = max(range(len(instances)), key=lambda p: instances[p].num_pairs)
    explanations = {}
    for method in METHODS:
        if method in SAMPLED:
            picks = _sample(len(instances), SUBGRAPHX_SAMPLE, 0, largest)
            exp = method_spec(method).create(wb.context, time_budget_s=SUBGRAPHX_BUDGET_S)
            chosen = [instances[p] for p in picks]
            parts = [exp.explain([inst]) for inst in chosen]  # one by one, as the page does
            explanation = Explanation(method, [p[0] for p in parts], 0.0, chosen)
            check_explanation(explanation, chosen, ks)
            continue
        # the page's split cache: one batched call for the explained instances; the contrast
        # nodes (node tasks) one call for all of them, the distilled teachers' (a second or
        # more per 1,500-edge node, asked for one at a time on the page) on a sample of them
        chosen = list(instances)
        parts = [wb.explain(method, instances[:explained])]
        if len(instances) > explained:
            contrast = list(range(explained, len(instances)))
            if method_spec(method).distils:
                contrast = _sample(len(instances) - explained, TEACHER_SAMPLE, 4,
                                   largest - explained if largest >= explained else 0)
                contrast = [explained + p for p in contrast]
            chosen = instances[:explained] + [instances[p] for p in contrast]
            parts.append(wb.explain(method, [instances[p] for p in contrast]))
        explanation = Explanation(method, [s for p in parts for s in p], 0.0, chosen)
        check_explanation(explanation, chosen, ks)
        if len(chosen) == len(instances):
            explanations[method] = explanation
    # what a panel shows beside the picture: the target on the top K, and the reading
    readings = _sample(len(instances), READING_SAMPLE, 1, largest)
    k = spec.default_k
    for method, explanation in explanations.items():
        masks = [explanation.topk_mask(p, k) for p in readings]
        proba = wb.predict_proba([instances[p] for p in readings], masks)
        assert bool(torch.isfinite(proba).all()) and proba.shape[0] == len(readings), method
    for p in readings:  # the teacher distils the instance here where it was not explained above
        reading = read_explanation(wb, instances[p], "gem", explanations["gem"][p], k,
                                   spec.class_names)
        assert reading.text and reading.facts["teacher"]["of"] == min(k, instances[p].num_pairs)


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_a_what_if_edit_on_a_sample_of_pickable_instances(dataset):
    if not _has_data(dataset):
        pytest.skip(f"{dataset}: raw data not found (set GEM_DATA_ROOT)")
    wb = workbench(dataset, "cpu")
    instances = wb.browse_instances("test")
    largest = max(range(len(instances)), key=lambda p: instances[p].num_pairs)
    fast = [m for m in METHODS if method_spec(m).batched]
    for p in _sample(len(instances), WHATIF_SAMPLE, 2, largest):
        inst = instances[p]
        best = pair_order(wb.explain("gem", [inst])[0])[0]
        pair = tuple(int(v) for v in inst.pairs[:, best])
        original, (edited,) = evaluate_edits(wb, inst, [Edit.of([pair])], fast)
        if inst.num_pairs == 1:  # deleting the only edge leaves nothing to explain
            assert edited.error
            continue
        assert edited.error is None, edited.error
        assert math.isfinite(edited.delta_loss)
        for m in fast:
            kept = edited.explanations[m]
            assert kept[0].numel() == inst.num_pairs - 1 and bool(torch.isfinite(kept[0]).all())


# ----------------------------------------------------------------------------- the Molecule flow

def _nci_corpus() -> list[str]:
    from rdkit import RDConfig

    path = os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")
    with open(path, encoding="utf-8") as fh:
        return [line.split()[0] for line in fh if line.strip()]


def test_every_corpus_smiles_is_explained_or_refused_with_a_reason():
    """The Molecule page's flow over 4,999 real SMILES: each one explained or refused with one
    of :class:`MoleculeError`'s named reasons (the note of issue 49 gives the counts)."""
    from gem_core.service.molecules import (CLASS_NAMES, explain_molecules, molecule_model,
                                            suggested_k)

    corpus = _nci_corpus()
    assert len(corpus) > 4000
    molecules, refused = [], {}
    for smiles in corpus:
        try:
            molecules.append(smiles_to_instance(smiles))
        except MoleculeError as exc:  # anything else fails the test with its traceback
            assert str(exc) and exc.kind != "invalid", (smiles, exc)
            refused[exc.kind] = refused.get(exc.kind, 0) + 1
    print(f"{len(molecules)} explained, refused by reason: {refused}")
    assert len(molecules) > 0.8 * len(corpus)
    model = molecule_model("cpu")
    everyone = ("gem", "pgexplainer", "random")
    results = explain_molecules(molecules, everyone, model=model)
    largest = max(range(len(molecules)), key=lambda i: molecules[i].instance.num_pairs)
    sample = _sample(len(molecules), 150, 3, largest)
    # the methods of milliseconds per molecule: the searches that ask the target, the
    # per-molecule optimisers
    slow = explain_molecules([molecules[i] for i in sample],
                             ("gem_check", "random_check", "gnnexplainer", "integrated_gradients",
                              "distilled_predicted"), model=model)
    for res in [*results, *slow]:
        bonds = res.molecule.instance.num_pairs
        assert len(res.probabilities) == len(CLASS_NAMES) and not res.errors
        for method, explanation in res.explanations.items():
            # the page's K slider runs from 1 to the molecule's bonds
            check_explanation(explanation, [res.molecule.instance],
                              sorted({1, suggested_k(bonds), bonds}))
    for i, res in zip(sample[:25], slow):  # the reading and fragment a panel shows
        k = suggested_k(res.molecule.instance.num_pairs)
        reading = read_explanation(model, res.molecule.instance, "gem", results[i].scores["gem"],
                                   k, CLASS_NAMES, mol=res.molecule.mol, edge="bond",
                                   teacher_scores=res.scores["distilled_predicted"])
        assert reading.text
        assert results[i].fragment("gem", k)
