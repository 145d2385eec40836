"""The explainer registry and the contract every registered method keeps.

The contract tests run over every row of the registry, so a method added through its module and
its row is checked here without touching this file.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from gem_core.data.config import DatasetSpec
from gem_core.explainers import (METHODS, REGISTRY, REPRODUCE_METHODS, Explainer, ExplainerContext,
                                 Explanation, NotFittedError, UnknownMethodError, check_method,
                                 method_spec, title)
from gem_core.data.instances import Instance, to_pairs
from gem_core.models.targets import GraphGCN, NodeGCN, TargetMetrics, TrainedTarget

torch.set_num_threads(1)
PROJECT = Path(__file__).resolve().parent.parent


def toy_instance(n: int, seed: int, node: bool) -> Instance:
    gen = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])  # connected backbone
    iu = torch.triu_indices(n, n, 1)
    chords = iu[:, torch.rand(iu.size(1), generator=gen) < 0.2]
    pairs, _ = to_pairs(torch.cat([ring, chords], dim=1), n)
    return Instance(x=torch.randn(n, 4, generator=gen), pairs=pairs,
                    y=int(torch.randint(2, (1,), generator=gen)),
                    target=0 if node else None, index=seed, dataset="toy")


class BondAwareNet(torch.nn.Module):
    """A graph-level target that reads edge features, like a bond-aware molecule model (GINE)."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GINEConv, global_max_pool

        self.pool = global_max_pool
        self.conv = GINEConv(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()),
                             edge_dim=3)
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x, edge_index, batch=None, num_graphs=None, edge_attr=None):
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        return self.lin(self.pool(self.conv(x, edge_index, edge_attr), batch, size=num_graphs))


def toy_context(task: str) -> tuple[ExplainerContext, list[Instance], list[Instance], list[Instance]]:
    torch.manual_seed(0)
    bonds = task == "graph-bonds"
    if bonds:
        model = BondAwareNet().eval()
        task = "graph"
    else:
        model = (NodeGCN if task == "node" else GraphGCN)(4, 2, hidden=8).eval()
    target = TrainedTarget(model, TargetMetrics(1.0, 1.0, 1.0, 0.0, 1), "toy", f"toy-{task}")
    spec = DatasetSpec(name="toy", title="Toy", task=task, num_classes=2, k_grid=(2, 3),
                       connected=True, gem={"training.lr": 0.01, "training.max_epochs": 5})
    insts = [toy_instance(6 + i % 4, 1000 + i, task == "node") for i in range(14)]
    if bonds:
        gen = torch.Generator().manual_seed(3)
        insts = [Instance(x=i.x, pairs=i.pairs, y=i.y, dataset=i.dataset, index=i.index,
                          edge_attr=torch.nn.functional.one_hot(
                              torch.randint(0, 3, (i.num_pairs,), generator=gen), 3).float())
                 for i in insts]
    return ExplainerContext(target, spec, torch.device("cpu")), insts[:8], insts[8:10], insts[10:]


@pytest.fixture(scope="module", params=["node", "graph", "graph-bonds"])
def toy(request):
    return toy_context(request.param)


# ----------------------------------------------------------------------------- the table

def test_rows_are_complete_and_lookups_are_clear():
    assert list(METHODS) == [row.name for row in REGISTRY.values()]
    assert set(REPRODUCE_METHODS) <= set(METHODS) and "gem" in REPRODUCE_METHODS
    for name, row in REGISTRY.items():
        assert row.name == name == name.lower() and row.title and row.description
        assert check_method(f"  {name.upper()} ") == name
        assert method_spec(name) is row and title(name) == row.title
    assert len({row.title for row in REGISTRY.values()}) == len(REGISTRY)
    with pytest.raises(UnknownMethodError, match="Unknown method 'nope'. Choose one of: gem"):
        check_method("nope")
    assert title("not-a-method") == "not-a-method"


@pytest.mark.parametrize("method", METHODS)
def test_every_method_keeps_the_contract(method, toy):
    """Built from its row, fitted when it must be, it explains a batch into an Explanation."""
    ctx, train, val, test = toy
    row = REGISTRY[method]
    exp = row.create(ctx)
    assert isinstance(exp, Explainer) and exp.name == method
    if row.needs_fit:
        assert not exp.is_fitted
        with pytest.raises(NotFittedError):
            exp.explain(test)
    assert exp.fit(train, val) is exp and exp.is_fitted
    assert exp.fit_seconds_ >= 0.0 and (exp.fit_seconds_ > 0.0) == row.needs_fit
    out = exp.explain(test)
    assert isinstance(out, Explanation) and out.method == method and len(out) == len(test)
    assert out.ms_per_instance > 0.0
    for scores, inst in zip(out, test):
        assert isinstance(scores, torch.Tensor) and scores.shape == (inst.num_pairs,)
        assert bool(torch.isfinite(scores).all())
    # deterministic: a second explainer built the same way gives the same scores
    again = row.create(ctx).fit(train, val).explain(test)
    assert all(torch.allclose(a.double(), b.double(), atol=1e-6) for a, b in zip(out, again))
    # an instance of the other task level is refused with a clear message
    other = toy_instance(7, 5, node=ctx.task == "graph")
    with pytest.raises(ValueError, match="level"):
        exp.explain([other])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("task", ["node", "graph-bonds"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_fits_and_explains_on_cuda(method, task):
    """The path the app takes when a GPU is present (PGExplainer's MLP was once left on the CPU)."""
    ctx, train, val, test = toy_context(task)
    ctx = dataclasses.replace(ctx, device=torch.device("cuda"))
    out = REGISTRY[method].create(ctx).fit(train, val).explain(test)
    assert len(out) == len(test)
    for scores, inst in zip(out, test):
        assert scores.shape == (inst.num_pairs,) and bool(torch.isfinite(scores).all())


def test_explanation_is_a_sequence_with_topk_helpers():
    scores = [torch.tensor([0.2, 0.9, 0.9, 0.1]), torch.tensor([0.5])]
    out = Explanation("random", scores, 1.5)
    assert len(out) == 2 and out[1] is scores[1] and list(out) == scores and out[:1] == scores[:1]
    # ties at the cut: the lower pair index wins; never more than K
    assert out.topk_mask(0, 2).tolist() == [False, True, True, False]
    assert out.ranked(0, 3) == [1, 2, 0]
    assert [m.tolist() for m in out.topk(1)] == [[False, True, False, False], [True]]
    with pytest.raises(ValueError, match="K must be at least 1"):
        out.topk_mask(0, 0)


def test_no_dispatch_on_method_names_outside_the_registry():
    """Method-specific behaviour lives in the method's module and its registry row."""
    names = "|".join(re.escape(m) for m in METHODS)
    chain = re.compile(rf"""(if|elif)\s+\w*(method|name)\w*\s*(==|!=|in)\s*\(?["']({names})["']""")
    offenders = []
    for folder in ("gem_core", "app"):
        for path in (PROJECT / folder).rglob("*.py"):
            if path.parent.name == "explainers" and path.name == "registry.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if chain.search(line):
                    offenders.append(f"{path.relative_to(PROJECT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_no_branch_on_dataset_target_or_architecture_names_outside_the_registries():
    """Per-dataset, per-target and per-architecture behaviour lives in the rows of
    ``gem_core.data.config`` (DATASETS, TARGETS) and ``gem_core.models.targets`` (ARCHITECTURES):
    no code compares a name with one of theirs. (``mode == "paper"`` in the distillation's top-K
    rules compares a top-K policy name, which only shares the word.)"""
    from gem_core.data.config import DATASETS, TARGETS
    from gem_core.models.targets import ARCHITECTURES

    names = "|".join(re.escape(n) for n in sorted({*DATASETS, *TARGETS, *ARCHITECTURES}))
    lit = rf"""["']({names})["']"""
    compare = re.compile(rf"""(?P<lhs>[\w.\]\[)(]+)\s*(?:==|!=)\s*{lit}|{lit}\s*(?:==|!=)"""
                         rf"""|(?P<member>[\w.\]\[)(]+)\s+(?:not\s+)?in\s*[(\[{{][^)\]}}]*{lit}""")
    offenders = []
    for folder in ("gem_core", "app"):
        for path in (PROJECT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                match = compare.search(line)
                if match and match.group("lhs") != "mode":
                    offenders.append(f"{path.relative_to(PROJECT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("task", ["node", "graph"])
def test_predicted_label_teacher_differs_exactly_where_the_target_is_wrong(task):
    from gem_core.models.predict import predict_proba

    ctx, train, val, test = toy_context(task)
    insts = train + val + test
    wrong = predict_proba(ctx.black_box, insts).argmax(-1) != torch.tensor([i.y for i in insts])
    assert bool(wrong.any()) and bool((~wrong).any())  # the toy target is right and wrong
    true_teacher = REGISTRY["distilled"].create(ctx)
    pred_teacher = REGISTRY["distilled_predicted"].create(ctx)
    true_scores, pred_scores = true_teacher.explain(insts), pred_teacher.explain(insts)
    assert pred_scores.method == "distilled_predicted" and true_scores.method == "distilled"
    true_delta = true_teacher.last_distillation_.deltas()
    pred_delta = pred_teacher.last_distillation_.deltas()
    for i, is_wrong in enumerate(wrong.tolist()):
        if is_wrong:  # another label, other losses: every Granger effect is measured differently
            assert not torch.equal(true_delta[i], pred_delta[i]), i
        else:  # the same label: the same distillation and the same ranking of the pairs
            # (survival scores are scaled by the batch's largest explanation, so compare ranks)
            assert torch.equal(true_delta[i], pred_delta[i]), i
            assert torch.equal(torch.argsort(true_scores[i], stable=True),
                               torch.argsort(pred_scores[i], stable=True)), i


def test_gem_conditioned_on_the_prediction_reads_the_predicted_class():
    """With condition_on_prediction, every node carries the target's predicted class (one-hot)."""
    from gem_core.models.predict import predict_proba

    ctx, train, val, test = toy_context("graph")
    gem = REGISTRY["gem"].create(
        ctx, settings={"inputs.condition_on_prediction": True, "teacher.label_source": "predicted"})
    gem.fit(train, val)
    assert gem.autoencoder_.in_features_ == test[0].x.size(1) + ctx.spec.num_classes
    predicted = predict_proba(ctx.black_box, test).argmax(-1)
    for inst, seen, cls in zip(test, gem.pipeline().inputs(test), predicted.tolist()):
        assert torch.equal(seen.x[:, :-2], inst.x)
        assert torch.equal(seen.x[:, -2:], torch.eye(2)[cls].expand(inst.num_nodes, 2))
    plain = REGISTRY["gem"].create(ctx)
    assert gem.state_key(ctx) != plain.state_key(ctx)  # a fit of one is never loaded as the other
    assert len(gem.explain(test)) == len(test)


def test_gem_uses_given_predictions_instead_of_running_the_target_again(monkeypatch):
    """``explain(…, predicted=…)``: a conditioned Gem reads the given classes (same scores when
    they are the target's, other scores when they are not, no target forward); an explainer that
    does not read the prediction ignores them; malformed predictions are refused."""
    from gem_core.models.predict import predict_proba

    ctx, train, val, test = toy_context("graph")
    gem = REGISTRY["gem"].create(
        ctx, settings={"inputs.condition_on_prediction": True, "teacher.label_source": "predicted"})
    gem.fit(train, val)
    assert gem.reads_prediction
    predicted = predict_proba(ctx.black_box, test).argmax(-1)
    own = gem.explain(test)
    calls = []  # forwards of the target model itself, however the engine reaches it
    hook = ctx.black_box.model.register_forward_hook(lambda *args: calls.append(1))
    try:
        gem.explain(test)
        assert calls == [1]  # without predictions Gem runs the target once
        given = gem.explain(test, predicted=predicted)
        assert calls == [1]  # with them, not at all
    finally:
        hook.remove()
    assert all(torch.equal(a, b) for a, b in zip(own, given))
    flipped = gem.explain(test, predicted=1 - predicted)
    assert any(not torch.equal(a, b) for a, b in zip(own, flipped))

    plain = REGISTRY["random"].create(ctx)
    assert not plain.reads_prediction
    assert all(torch.equal(a, b) for a, b in zip(plain.explain(test),
                                                 plain.explain(test, predicted=1 - predicted)))
    for bad, msg in ((predicted[:-1], "one class per instance"),
                     (predicted.float(), "integer class"),
                     (predicted - 5, "non-negative"),
                     (predicted + 2, "out of range")):
        with pytest.raises(ValueError, match=msg):
            gem.explain(test, predicted=bad)
