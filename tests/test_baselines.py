"""Tests of the baselines (gem_core.explainers): random, GNNExplainer, PGExplainer on node and graph instances."""
from __future__ import annotations

import pytest
import torch

from gem_core.explainers._pyg import directed_to_pairs
from gem_core.explainers.gnnexplainer import GNNExplainerBaseline
from gem_core.explainers.pgexplainer import PGExplainerBaseline
from gem_core.explainers.random_scores import RandomExplainer
from gem_core.evaluation.metrics import evaluate_explainer
from gem_core.data.instances import Instance, to_pairs
from gem_core.models.targets import GNNBlackBox, GraphGCN, NodeGCN

torch.set_num_threads(1)


def random_instance(n: int, p: float, seed: int, node: bool) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    iu = torch.triu_indices(n, n, 1)
    pairs, _ = to_pairs(iu[:, torch.rand(iu.size(1), generator=gen) < p], n)
    return Instance(x=torch.randn(n, 4, generator=gen), pairs=pairs,
                    y=int(torch.randint(2, (1,), generator=gen)),
                    target=0 if node else None, index=seed, dataset="toy")


@pytest.fixture(scope="module")
def node_case():
    torch.manual_seed(0)
    model = NodeGCN(4, 3, hidden=8).eval()
    insts = [random_instance(6 + i % 5, 0.4, i, node=True) for i in range(10)]
    return model, insts


@pytest.fixture(scope="module")
def graph_case():
    torch.manual_seed(1)
    model = GraphGCN(4, 2, hidden=8).eval()
    insts = [random_instance(8 + i % 6, 0.3, 50 + i, node=False) for i in range(16)]
    return model, insts


def check_scores(scores, insts):
    assert len(scores) == len(insts)
    for s, inst in zip(scores, insts):
        assert isinstance(s, torch.Tensor) and s.shape == (inst.num_pairs,)
        assert torch.isfinite(s).all()


def test_directed_to_pairs():
    m = torch.tensor([0.1, 0.9, 0.4, 0.3, 0.2, 0.8])  # pairs 0..2, then their reverses
    assert directed_to_pairs(m, 3).tolist() == pytest.approx([0.3, 0.9, 0.8])
    assert directed_to_pairs(m, 3, "mean").tolist() == pytest.approx([0.2, 0.55, 0.6])
    with pytest.raises(ValueError):
        directed_to_pairs(m, 2)


def test_random_is_deterministic_per_seed(node_case):
    _, insts = node_case
    a = RandomExplainer(3).explain(insts)
    b = RandomExplainer(3).explain(insts)
    c = RandomExplainer(4).explain(insts)
    check_scores(a, insts)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(x, y) for x, y in zip(a, c) if x.numel())
    # the scores of an instance do not depend on its position in the list
    rev = RandomExplainer(3).explain(insts[::-1])[::-1]
    assert all(torch.equal(x, y) for x, y in zip(a, rev))


@pytest.mark.parametrize("case,task", [("node_case", "node"), ("graph_case", "graph")])
def test_gnnexplainer_shapes_and_reproducible(case, task, request):
    model, insts = request.getfixturevalue(case)
    insts = insts[:4]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ex = GNNExplainerBaseline(model, task, epochs=15)
    s1 = ex.explain(insts)
    check_scores(s1, insts)
    assert all(((s >= 0) & (s <= 1)).all() for s in s1)
    s2 = GNNExplainerBaseline(model, task, epochs=15).explain(insts[::-1])[::-1]
    assert all(torch.allclose(a, b) for a, b in zip(s1, s2))
    assert ex.fit().fit_seconds_ == 0.0 and ex.explain_seconds_ > 0
    # the original model is untouched (the baseline works on a frozen copy)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("case,task", [("node_case", "node"), ("graph_case", "graph")])
def test_pgexplainer_fit_and_explain(case, task, request, tmp_path):
    from torch_geometric.explain import PGExplainer

    model, insts = request.getfixturevalue(case)
    class_coeffs = dict(PGExplainer.coeffs)
    train, test = insts[: len(insts) // 2], insts[len(insts) // 2:]
    ex = PGExplainerBaseline(model, task, epochs=3, batch_size=4, edge_size=0.123)
    with pytest.raises(RuntimeError):
        ex.explain(test)
    assert ex.fit(train) is ex
    assert ex.fit_seconds_ > 0 and len(ex.losses_) == 3
    assert ex.explainer_.algorithm.coeffs["edge_size"] == 0.123
    assert PGExplainer.coeffs == class_coeffs  # PyG's class-level dict is left alone
    batched = ex.explain(test)  # MLP logits, one batched pass
    check_scores(batched, test)
    reference = ex.explain_reference(test)  # PyG's Explainer, one call per instance
    for a, b in zip(batched, reference):
        kept = b > 0  # PyG zeroes edges beyond the target's L hops; they rank lowest here
        assert torch.allclose(a[kept].sigmoid().float(), b[kept], atol=1e-6)
        if (~kept).any() and kept.any():
            assert a[~kept].max() < a[kept].min()
    assert task == "graph" or any((b == 0).any() for b in reference)  # hard mask exercised
    ex.score = "prob"
    probs = ex.explain(test)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(probs, reference))
    ex.score = "logit"
    # same seed, same training: same scores
    again = PGExplainerBaseline(model, task, epochs=3, batch_size=4, edge_size=0.123).fit(train)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(batched, again.explain(test)))
    # a saved fit (weights_only file) explains exactly as the fit it was saved from, PyG's own
    # per-instance path included; another explainer's file is refused
    from gem_core.runtime.store import ArtifactError, load_torch, save_torch

    path = tmp_path / "pg.pt"
    save_torch(ex.to_state(), path)
    loaded = PGExplainerBaseline(model, task, epochs=3, batch_size=4, edge_size=0.123)
    loaded.load_state(load_torch(path, kind=loaded.state_kind))
    assert loaded.is_fitted and loaded.losses_ == ex.losses_
    assert all(torch.equal(a, b) for a, b in zip(batched, loaded.explain(test)))
    assert all(torch.equal(a, b) for a, b in zip(reference, loaded.explain_reference(test)))
    save_torch({"kind": "gem-explainer"}, tmp_path / "other.pt")
    with pytest.raises(ArtifactError):
        load_torch(tmp_path / "other.pt", kind=loaded.state_kind)


def test_baselines_plug_into_evaluation(graph_case):
    model, insts = graph_case
    bb = GNNBlackBox(model, "graph", 2, "cpu")
    ex = PGExplainerBaseline(model, "graph", epochs=2).fit(insts[:8])
    res, scores = evaluate_explainer(ex, bb, insts[8:], [2, 4])
    d = res.to_dict()
    assert set(d["accuracy_at_k"]) == {"2", "4"} and d["fit_seconds"] == ex.fit_seconds_
    check_scores(scores, insts[8:])


def test_task_mismatch_raises(node_case):
    model, insts = node_case
    with pytest.raises(ValueError):
        GNNExplainerBaseline(model, "edge")
    with pytest.raises(ValueError):
        GNNExplainerBaseline(model, "graph").explain(insts[:1])
