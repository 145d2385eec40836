"""The fidelity term (``training.fidelity``, :mod:`gem_core.gem.fidelity`): the relaxed top-K
against the hard one, soft edge weights against deleted edges, and the adjustment on small real
fits (its loss falls, the target stays untouched, the same seed gives the same generator)."""
from __future__ import annotations

import pytest
import torch

from gem_core.data.instances import collate
from gem_core.data.packed import PackedGraphs
from gem_core.data.ranking import topk_mask
from gem_core.gem.distill import distill
from gem_core.gem.fidelity import masked_logits, relaxed_topk
from gem_core.gem.pipeline import GemPipeline
from gem_core.gem.settings import GemSettings
from tests.test_distill import CLASSES, _black_box, _instances

KS = (1, 2, 3)


def _scores(counts: list[int], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(sum(counts), generator=gen) * 0.98 + 0.01


def test_relaxed_topk_at_a_low_temperature_is_the_hard_topk():
    counts = [5, 1, 0, 3, 7, 2]
    scores = _scores(counts)
    soft = relaxed_topk(scores, torch.tensor(counts), KS, temperature=1e-4)
    assert soft.shape == (len(KS), sum(counts))
    for row, k in zip(soft, KS):
        for part, s in zip(row.split(counts), scores.split(counts)):
            hard = topk_mask(s, k).float()  # all pairs when the instance has at most K
            assert torch.allclose(part, hard, atol=1e-3), (k, part, hard)


def test_relaxed_topk_ignores_a_common_shift_of_the_scores_and_passes_gradients():
    counts = [6, 4]
    scores = _scores(counts, seed=1).requires_grad_(True)
    soft = relaxed_topk(scores, torch.tensor(counts), KS, temperature=0.5)
    logit = torch.logit(scores.detach())
    shifted = relaxed_topk(torch.sigmoid(logit + 2.0), torch.tensor(counts), KS, temperature=0.5)
    assert torch.allclose(soft.detach(), shifted, atol=1e-5)
    # raising every score of an instance at once does not lower the term: its gradient along
    # that direction is zero (the thresholds move with the scores)
    (grad,) = torch.autograd.grad(soft[1, :6].sum(), scores)
    assert torch.isfinite(grad).all()
    dlogit = grad * scores.detach() * (1 - scores.detach())  # d/dlogit = d/ds · s(1 - s)
    assert abs(float(dlogit[:6].sum())) < 1e-4
    assert float(dlogit[:6].abs().sum()) > 1e-3  # but it does rank the pairs


@pytest.mark.parametrize("task", ["graph", "node"])
def test_hard_weights_through_the_target_equal_deleting_the_edges(task):
    black_box = _black_box(task)
    instances = [i for i in _instances(task) if i.num_pairs][:8]
    gen = torch.Generator().manual_seed(3)
    keep = [torch.rand(i.num_pairs, generator=gen) < 0.5 for i in instances]
    full = PackedGraphs.from_instances(instances).forward_batch()
    pair_mask = torch.cat(keep).float()
    soft = masked_logits(black_box, full, torch.cat([pair_mask, pair_mask]))
    deleted = black_box(collate(instances, keep))
    assert torch.allclose(soft, deleted, atol=1e-5)
    # the masks are cleared: the black box reads the whole graphs again
    assert torch.allclose(black_box(full), black_box(collate(instances)), atol=1e-6)
    assert not torch.allclose(black_box(full), deleted, atol=1e-4)


def _pipeline(task: str, fidelity: float, black_box=None, seed: int = 0) -> GemPipeline:
    black_box = black_box or _black_box(task)
    settings = GemSettings().with_overrides({
        "training.max_epochs": 5, "training.fidelity": fidelity, "seed": seed,
        "teacher.label_source": "predicted", "inputs.condition_on_prediction": True,
    })

    def distiller(instances, label_source, progress):
        return distill(instances, black_box, connected=True, label_source=label_source,
                       device="cpu")

    return GemPipeline(settings, KS, black_box, CLASSES, device="cpu", distiller=distiller)


def _train(task: str) -> list:
    return [i for s in range(4) for i in _instances(task, seed=s)]


@pytest.mark.parametrize("task", ["graph", "node"])
def test_the_adjustment_lowers_the_targets_loss_and_leaves_the_target_untouched(task):
    train = _train(task)
    pipe = _pipeline(task, 20.0)
    weights = [p.detach().clone() for p in pipe.black_box.model.parameters()]
    gem = pipe.fit(train)
    history = gem.history_["fidelity"]
    assert len(history) == 1 and len(history[0]["fidelity"]) == 10
    assert history[0]["fidelity"][-1] < history[0]["fidelity"][0]
    for before, after in zip(weights, pipe.black_box.model.parameters()):
        assert torch.equal(before, after) and after.grad is None
    # the adjustment moved the generator: the same fit without it scores otherwise
    plain = _pipeline(task, 0.0, pipe.black_box)
    plain_gem = plain.fit(train)
    assert "fidelity" not in plain_gem.history_
    ours, theirs = pipe.explain(gem, train), plain.explain(plain_gem, train)
    assert any(not torch.allclose(a, b) for a, b in zip(ours, theirs))
    # and the same seed gives the same generator
    again = _pipeline(task, 20.0, pipe.black_box).fit(train)
    for a, b in zip(ours, pipe.explain(again, train)):
        assert torch.equal(a, b)


def test_a_target_the_term_cannot_read_is_refused_before_the_fit():
    train = _train("graph")
    regressor = _black_box("graph")
    regressor.regression = True
    with pytest.raises(ValueError, match="applies to classifiers"):
        _pipeline("graph", 1.0, regressor).fit_autoencoder(train, [torch.zeros(i.num_pairs)
                                                                   for i in train])

    class OutputsOnly:  # a black box that is only a function: no PyG module to mask
        task, num_classes = "graph", CLASSES

        def __call__(self, batch):
            return torch.zeros(batch.num_instances, CLASSES)

    with pytest.raises(ValueError, match="PyTorch Geometric model"):
        _pipeline("graph", 1.0, OutputsOnly()).fit_autoencoder(train, [torch.zeros(i.num_pairs)
                                                                       for i in train])


def test_the_weight_is_a_checked_setting_and_part_of_a_fits_key():
    with pytest.raises(ValueError, match="training.fidelity"):
        GemSettings().with_overrides({"training.fidelity": -1.0})
    plain, adjusted = GemSettings(), GemSettings().with_overrides({"training.fidelity": 20.0})
    assert "fidelity" not in plain.key_parts()
    assert adjusted.key_parts()["fidelity"] == 20.0


@pytest.mark.parametrize("arch", ["gcn", "gin", "sage", "gat"])
def test_the_pyg_adapter_takes_the_term_on_any_architecture(arch):
    from gem_core.gem.fidelity import EPOCHS
    from tests.test_pyg import GraphNet, graph_explainer, graph_list

    torch.manual_seed(2)
    graphs = graph_list(16)
    model = GraphNet(arch, 3, 2).eval()
    weights = [p.detach().clone() for p in model.parameters()]
    explainer = graph_explainer(model, settings={"training.fidelity": 5.0})
    explainer.algorithm.fit(model, graphs)
    (history,) = explainer.algorithm.gem_.history_["fidelity"]
    assert len(history["fidelity"]) == EPOCHS
    assert all(torch.isfinite(torch.tensor(history["fidelity"])))
    for before, after in zip(weights, model.parameters()):
        assert torch.equal(before, after) and after.grad is None
    assert not model.training
    g = graphs[3]
    explanation = explainer(g.x, g.edge_index, batch=torch.zeros(g.num_nodes, dtype=torch.long))
    assert bool((explanation.edge_mask > 0).all())


def test_the_pyg_adapter_takes_the_term_at_node_level():
    from tests.test_pyg import NodeNet, house_graph_data, node_explainer

    house = house_graph_data()
    torch.manual_seed(0)
    model = NodeNet("gcn", 4, 4).eval()
    explainer = node_explainer(model, settings={"training.fidelity": 5.0})
    explainer.algorithm.fit(model, house, index=torch.arange(0, house.num_nodes, 3))
    (history,) = explainer.algorithm.gem_.history_["fidelity"]
    assert history["fidelity"][-1] < history["fidelity"][0]
    assert explainer(house.x, house.edge_index, index=11).edge_mask.max() > 0


def test_no_row_asks_a_regressor_for_the_term():
    """Every dataset and target row, and a user's models of both kinds: the term is on only where
    the target is a classifier (a regressor's row sets it to 0; else its fit would be refused)."""
    from gem_core.data.config import DATASETS, target_names, user_model_spec
    from gem_core.gem.presets import dataset_settings

    specs = [*DATASETS.values(),
             user_model_spec({"name": "logp", "kind": "number", "outcome_column": "logp"}),
             user_model_spec({"name": "ames", "classes": ["no", "yes"], "outcome_column": "ames"})]
    seen = {False: 0, True: 0}
    for spec in specs:
        for target in target_names(spec):
            on = dataset_settings(spec, target).training.fidelity > 0
            assert not (on and spec.regression), (spec.name, target)
            seen[on] += 1
    assert seen[True] and seen[False]  # both kinds of row exist: the sweep can fail
