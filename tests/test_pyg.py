"""Tests of gem_core.pyg: Gem as a torch_geometric.explain ExplainerAlgorithm, model-agnostic.

Tiny synthetic graphs and few epochs throughout; the targets are GCN, GIN, GraphSAGE and GAT
models (node and graph level), fitted and explained through PyG's own ``Explainer``.
"""
from __future__ import annotations

from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.explain import Explainer, Explanation
from torch_geometric.explain.config import MaskType, ModelMode, ModelReturnType
from torch_geometric.explain.metric import fidelity
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv, global_add_pool
from torch_geometric.utils import k_hop_subgraph, to_undirected

from gem_core.data.instances import node_instance
from gem_core.gem.settings import GemSettings
from gem_core.pyg import (GemExplainer, NotFittedError, PyGBlackBox, count_hops, distinct_scores,
                          topk_config)
from gem_core.pyg.black_box import _logits  # the return-type conversion itself
from gem_core.pyg.computation_graphs import graph_computation_graphs, node_computation_graphs

torch.set_num_threads(1)

ARCHS = ("gcn", "gin", "sage", "gat")
NODE_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")
GRAPH_CONFIG = dict(mode="multiclass_classification", task_level="graph", return_type="raw")


# ----------------------------------------------------------------------------- data and models

def conv(arch: str, a: int, b: int) -> nn.Module:
    if arch == "gcn":
        return GCNConv(a, b)
    if arch == "gin":
        return GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)))
    if arch == "sage":
        return SAGEConv(a, b)
    if arch == "gat":
        return GATConv(a, b, heads=2, concat=False)
    raise ValueError(arch)


class NodeNet(nn.Module):
    def __init__(self, arch: str, in_channels: int, num_classes: int, hidden: int = 16, layers: int = 3):
        super().__init__()
        dims = [in_channels] + [hidden] * layers
        self.convs = nn.ModuleList(conv(arch, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, edge_index):
        for c in self.convs:
            x = c(x, edge_index).relu()
        return self.head(x)


class GraphNet(NodeNet):
    """The same convolution stack, summed over each graph before the head."""

    def __init__(self, arch: str, in_channels: int, num_classes: int, hidden: int = 16, layers: int = 2):
        super().__init__(arch, in_channels, num_classes, hidden, layers)

    def forward(self, x, edge_index, batch=None):
        for c in self.convs:
            x = c(x, edge_index).relu()
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        return self.head(global_add_pool(x, batch))


def house_graph_data(seed: int = 0, base: int = 30, houses: int = 6) -> Data:
    """A small BA-shapes-like graph: a BA base with house motifs, labels 0 base / 1-3 house roles."""
    import numpy as np
    from torch_geometric.datasets import ExplainerDataset
    from torch_geometric.datasets.graph_generator import BAGraph
    from torch_geometric.datasets.motif_generator import HouseMotif

    state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)
        raw = ExplainerDataset(BAGraph(base, 2), HouseMotif(), houses)[0]
        x = torch.randn(raw.num_nodes, 4)
    np.random.set_state(state)
    ei = to_undirected(raw.edge_index, num_nodes=raw.num_nodes)
    return Data(x=x, edge_index=ei, y=raw.y.long(), num_nodes=raw.num_nodes)


def graph_list(n: int = 16, seed: int = 0) -> list[Data]:
    """Small random graphs; label 1 when a 4-cycle was planted."""
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(n):
        size = 6 + int(torch.randint(0, 5, (1,), generator=gen))
        src = torch.arange(1, size)
        dst = torch.tensor([int(torch.randint(0, int(j), (1,), generator=gen)) for j in range(1, size)])
        edges = [torch.stack([src, dst])]
        label = i % 2
        if label:
            a = size
            edges.append(torch.tensor([[a, a + 1, a + 2, a + 3, a], [a + 1, a + 2, a + 3, a, 0]]))
            size += 4
        ei = to_undirected(torch.cat(edges, dim=1), num_nodes=size)
        graphs.append(Data(x=torch.randn(size, 3, generator=gen), edge_index=ei,
                           y=torch.tensor([label])))
    return graphs


def node_explainer(model, k=4, explanation_type="model", config=None, **kw) -> Explainer:
    kw.setdefault("epochs", 8)
    return Explainer(model, algorithm=GemExplainer(k=k, **kw), explanation_type=explanation_type,
                     model_config=config or NODE_CONFIG, edge_mask_type="object")


def graph_explainer(model, k=4, explanation_type="model", config=None, **kw) -> Explainer:
    kw.setdefault("epochs", 8)
    return Explainer(model, algorithm=GemExplainer(k=k, **kw), explanation_type=explanation_type,
                     model_config=config or GRAPH_CONFIG, edge_mask_type="object")


def check_explanation(explanation: Explanation, node_mask_type: Optional[MaskType],
                      edge_mask_type: Optional[MaskType]) -> None:
    """PyG's test-suite check: mask shapes and value ranges per config."""
    if node_mask_type is None:
        assert "node_mask" not in explanation
    if edge_mask_type == MaskType.object:
        assert explanation.edge_mask.size() == (explanation.num_edges,)
        assert float(explanation.edge_mask.min()) >= 0.0
        assert float(explanation.edge_mask.max()) <= 1.0
    elif edge_mask_type is None:
        assert "edge_mask" not in explanation
    assert explanation.validate_masks()


def reverse_index(edge_index: torch.Tensor) -> torch.Tensor:
    """Position of the reverse of every directed edge (the edge index is symmetric)."""
    n = int(edge_index.max()) + 1
    key = edge_index[0] * n + edge_index[1]
    rkey = edge_index[1] * n + edge_index[0]
    order = torch.argsort(key)
    return order[torch.searchsorted(key[order], rkey)]


@pytest.fixture(scope="module")
def house():
    return house_graph_data()


@pytest.fixture(scope="module")
def train_nodes(house):
    return torch.arange(0, house.num_nodes, 3)


@pytest.fixture(scope="module")
def fitted_gin(house, train_nodes):
    torch.manual_seed(0)
    model = NodeNet("gin", 4, 4).eval()
    explainer = node_explainer(model)
    explainer.algorithm.fit(model, house, index=train_nodes)
    return model, explainer


# ----------------------------------------------------------------------------- configuration

def test_supports_node_objects_not_attributes_nor_edge_level_and_takes_regression():
    model = NodeNet("gcn", 4, 3)
    objects = Explainer(model, GemExplainer(), "model", NODE_CONFIG, node_mask_type="object",
                        edge_mask_type="object")
    assert objects.algorithm.supports()
    regression = Explainer(model, GemExplainer(), "model",
                           dict(mode="regression", task_level="node", return_type="raw"),
                           edge_mask_type="object")
    assert regression.algorithm.supports() and regression.algorithm.regression
    with pytest.raises(ValueError, match="node_mask_type='attributes' is not supported.*Gem supports"):
        Explainer(model, GemExplainer(), "model", NODE_CONFIG, node_mask_type="attributes")
    with pytest.raises(ValueError, match="task_level='edge'"):
        Explainer(model, GemExplainer(), "model",
                  dict(mode="multiclass_classification", task_level="edge", return_type="raw"),
                  edge_mask_type="object")
    algo = Explainer(model, GemExplainer(), "phenomenon", NODE_CONFIG, edge_mask_type="object").algorithm
    assert algo.supports()


def test_forward_before_fit_is_a_clear_error(house):
    explainer = node_explainer(NodeNet("gcn", 4, 4).eval())
    with pytest.raises(NotFittedError, match=r"not fitted yet.*algorithm\.fit\(model, data"):
        explainer(house.x, house.edge_index, index=0)


def test_fit_needs_an_explainer_first(house):
    with pytest.raises(ValueError, match="not connected to an Explainer"):
        GemExplainer().fit(NodeNet("gcn", 4, 4), house, index=[0, 1])


def test_fit_checks_task_level_against_the_data(house):
    model = NodeNet("gcn", 4, 4).eval()
    with pytest.raises(ValueError, match="task_level='node': fit expects one Data"):
        node_explainer(model).algorithm.fit(model, [house, house])
    gmodel = GraphNet("gcn", 3, 2).eval()
    with pytest.raises(ValueError, match="task_level='graph': fit expects a list or Dataset"):
        graph_explainer(gmodel).algorithm.fit(gmodel, graph_list(2)[0])
    with pytest.raises(ValueError, match="at least one graph"):
        graph_explainer(gmodel).algorithm.fit(gmodel, [])
    with pytest.raises(ValueError, match="takes no `batch` argument"):
        nodemodel = NodeNet("gcn", 3, 2).eval()
        graph_explainer(nodemodel).algorithm.fit(nodemodel, graph_list(2))
    with pytest.raises(ValueError, match="takes no index"):
        graph_explainer(gmodel).algorithm.fit(gmodel, graph_list(2), index=[0])
    with pytest.raises(ValueError, match="at least one training node"):
        node_explainer(model).algorithm.fit(model, house, index=torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="tensor inputs"):
        node_explainer(model).algorithm.fit(model, house, index=[0], edge_weight=torch.ones(3))


def test_phenomenon_needs_labels(house):
    model = NodeNet("gcn", 4, 4).eval()
    unlabeled = Data(x=house.x, edge_index=house.edge_index)
    with pytest.raises(ValueError, match="fitted against labels"):
        node_explainer(model, explanation_type="phenomenon").algorithm.fit(
            model, unlabeled, index=[0, 1])


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="k must be"):
        GemExplainer(k=0)
    with pytest.raises(ValueError, match="k must be"):
        GemExplainer(k=[])
    with pytest.raises(ValueError, match="num_hops"):
        GemExplainer(num_hops=0)
    with pytest.raises(ValueError, match="teacher.kind"):
        GemExplainer(settings={"teacher.kind": "nope"})
    with pytest.raises(ValueError, match="val_fraction"):
        GemExplainer(settings={"training.val_fraction": 1.0})
    with pytest.raises(ValueError, match="unknown Gem preset 'fast'"):
        GemExplainer(preset="fast")
    with pytest.raises(ValueError, match="not both"):
        GemExplainer(preset="paper", settings=GemSettings())
    assert topk_config(3) == dict(threshold_type="topk", value=6)
    with pytest.raises(ValueError):
        topk_config(0)


# ----------------------------------------------------------------------------- hops

def test_hops_are_counted_from_the_model_or_given(house, train_nodes):
    torch.manual_seed(0)
    model = NodeNet("sage", 4, 4, layers=2).eval()
    assert count_hops(model) == 2
    explainer = node_explainer(model, epochs=2)
    explainer.algorithm.fit(model, house, index=train_nodes)
    assert explainer.algorithm.num_hops_ == 2
    override = node_explainer(model, epochs=2, num_hops=1)
    override.algorithm.fit(model, house, index=train_nodes)
    assert override.algorithm.num_hops_ == 1
    node = 5
    mask = override(house.x, house.edge_index, index=node).edge_mask
    _, _, _, inside = k_hop_subgraph(node, 1, house.edge_index, num_nodes=house.num_nodes)
    assert bool((mask[~inside] == 0).all())
    assert bool((mask[inside & (house.edge_index[0] != house.edge_index[1])] > 0).all())
    # the 1-hop explanation covers fewer edges than the 2-hop one
    mask2 = explainer(house.x, house.edge_index, index=node).edge_mask
    assert int((mask2 > 0).sum()) > int((mask > 0).sum())


class Opaque(nn.Module):
    """A model whose only visible side is its output: no parameters, no submodules, no state."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        object.__setattr__(self, "_fn", inner)  # not registered as a submodule

    def parameters(self, recurse: bool = True):
        raise AssertionError("Gem must not read the model's weights")

    def named_parameters(self, *args, **kwargs):
        raise AssertionError("Gem must not read the model's weights")

    def state_dict(self, *args, **kwargs):
        raise AssertionError("Gem must not read the model's weights")

    def forward(self, x, edge_index):
        return self._fn(x, edge_index)


def test_only_the_outputs_of_the_model_are_used(house, train_nodes):
    torch.manual_seed(0)
    opaque = Opaque(NodeNet("gat", 4, 4).eval())
    with pytest.raises(ValueError, match="num_hops"):
        node_explainer(opaque).algorithm.fit(opaque, house, index=train_nodes)
    explainer = node_explainer(opaque, num_hops=3)
    explainer.algorithm.fit(opaque, house, index=train_nodes)
    explanation = explainer(house.x, house.edge_index, index=3)
    check_explanation(explanation, None, MaskType.object)
    assert float(explanation.edge_mask.max()) > 0


# ----------------------------------------------------------------------------- fit / explain any model

@pytest.mark.parametrize("arch", ARCHS)
def test_node_level_any_architecture(arch, house, train_nodes):
    torch.manual_seed(1)
    model = NodeNet(arch, 4, 4).eval()
    explainer = node_explainer(model)
    explainer.algorithm.fit(model, house, index=train_nodes)
    algo = explainer.algorithm
    assert algo.num_hops_ == 3 and algo.num_classes_ == 4
    assert len(algo.distillation_) == train_nodes.numel()
    with torch.no_grad():
        pred = model(house.x, house.edge_index).argmax(-1)
    # "model" explanations are distilled against the model's own prediction (on the 3-hop
    # computation graph, which for these models is the prediction on the whole graph but GCN's)
    if arch != "gcn":
        assert torch.equal(algo.distillation_.labels, pred[train_nodes])
    for node in (0, int(house.num_nodes) - 1):
        explanation = explainer(house.x, house.edge_index, index=node)
        check_explanation(explanation, None, MaskType.object)
        mask = explanation.edge_mask
        _, _, _, inside = k_hop_subgraph(node, 3, house.edge_index, num_nodes=house.num_nodes)
        assert bool((mask[~inside] == 0).all())
        assert bool((mask[inside] > 0).all())
        assert torch.equal(mask, mask[reverse_index(house.edge_index)])  # one score per pair


@pytest.mark.parametrize("arch", ARCHS)
def test_graph_level_any_architecture(arch):
    torch.manual_seed(2)
    graphs = graph_list(16)
    model = GraphNet(arch, 3, 2).eval()
    explainer = graph_explainer(model)
    explainer.algorithm.fit(model, graphs)
    algo = explainer.algorithm
    assert algo.task_level_ == "graph" and algo.num_classes_ == 2
    assert len(algo.distillation_) == len(graphs)
    with torch.no_grad():
        pred = torch.cat([model(g.x, g.edge_index).argmax(-1) for g in graphs])
    assert torch.equal(algo.distillation_.labels, pred)
    g = graphs[3]
    explanation = explainer(g.x, g.edge_index, batch=torch.zeros(g.num_nodes, dtype=torch.long))
    check_explanation(explanation, None, MaskType.object)
    assert bool((explanation.edge_mask > 0).all())
    assert torch.equal(explanation.edge_mask, explanation.edge_mask[reverse_index(g.edge_index)])


def test_graph_level_fit_on_a_pyg_dataset():
    from torch_geometric.datasets import FakeDataset

    torch.manual_seed(9)
    dataset = FakeDataset(num_graphs=10, avg_num_nodes=10, avg_degree=3, num_channels=3,
                          num_classes=2)
    model = GraphNet("gin", 3, 2).eval()
    explainer = graph_explainer(model, explanation_type="phenomenon")
    explainer.algorithm.fit(model, dataset)
    labels = torch.tensor([int(g.y) for g in dataset])
    assert torch.equal(explainer.algorithm.distillation_.labels, labels)
    g = dataset[0]
    batch = torch.zeros(g.num_nodes, dtype=torch.long)
    explanation = explainer(g.x, g.edge_index, target=g.y, batch=batch)
    check_explanation(explanation, None, MaskType.object)


def test_a_batch_of_graphs_is_explained_in_one_pass(monkeypatch):
    torch.manual_seed(3)
    graphs = graph_list(16)
    model = GraphNet("gin", 3, 2).eval()
    explainer = graph_explainer(model)
    explainer.algorithm.fit(model, graphs)
    gem = explainer.algorithm.gem_
    calls = []
    original = gem.score_pairs

    def spy(prepared):
        calls.append(prepared.num_instances)
        return original(prepared)

    monkeypatch.setattr(gem, "score_pairs", spy)
    batch = Batch.from_data_list(graphs[:5])
    joint = explainer(batch.x, batch.edge_index, batch=batch.batch).edge_mask
    assert calls == [5]
    singles = [explainer(g.x, g.edge_index, batch=torch.zeros(g.num_nodes, dtype=torch.long)).edge_mask
               for g in graphs[:5]]
    # the same scores as one graph at a time (up to the few-ulp tie nudge)
    assert torch.allclose(joint, torch.cat(singles), atol=1e-6, rtol=0)
    # index selects graphs of the batch: the others get 0
    part = explainer(batch.x, batch.edge_index, batch=batch.batch, index=torch.tensor([1])).edge_mask
    in_graph1 = batch.batch[batch.edge_index[0]] == 1
    assert bool((part[~in_graph1] == 0).all()) and bool((part[in_graph1] > 0).all())


def test_several_nodes_in_one_call(fitted_gin, house):
    _, explainer = fitted_gin
    nodes = torch.tensor([2, 17, 40])
    explanation = explainer(house.x, house.edge_index, index=nodes)
    assert explanation.edge_masks.shape == (3, house.num_edges)
    assert explanation.edge_masks.is_sparse
    singles = torch.stack([explainer(house.x, house.edge_index, index=int(v)).edge_mask for v in nodes])
    assert torch.allclose(explanation.edge_masks.to_dense(), singles, atol=1e-6, rtol=0)
    assert torch.allclose(explanation.edge_mask, singles.max(0).values, atol=1e-6, rtol=0)
    check_explanation(explanation, None, MaskType.object)


def test_seeded_fits_are_reproducible(house, train_nodes):
    masks = []
    for _ in range(2):
        model = NodeNet("gin", 4, 4)
        torch.manual_seed(5)
        model = NodeNet("gin", 4, 4).eval()
        explainer = node_explainer(model, seed=7)
        explainer.algorithm.fit(model, house, index=train_nodes)
        masks.append(explainer(house.x, house.edge_index, index=11).edge_mask)
    assert torch.equal(masks[0], masks[1])


def test_progress_goes_through_the_engine_callback(house, train_nodes):
    torch.manual_seed(0)
    model = NodeNet("sage", 4, 4).eval()
    seen = []
    node_explainer(model, epochs=3).algorithm.fit(
        model, house, index=train_nodes, progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] == 0.0
    text = " ".join(m for _, m in seen)
    assert "distilling" in text and "training Gem" in text and "epoch" in text


# ----------------------------------------------------------------------------- labels and return types

def test_phenomenon_is_distilled_against_the_given_labels(house, train_nodes):
    torch.manual_seed(0)
    model = NodeNet("gin", 4, 4).eval()
    explainer = node_explainer(model, explanation_type="phenomenon")
    explainer.algorithm.fit(model, house, index=train_nodes)
    assert torch.equal(explainer.algorithm.distillation_.labels, house.y[train_nodes])
    other = (house.y + 1) % 4
    explainer.algorithm.fit(model, house, index=train_nodes, target=other)
    assert torch.equal(explainer.algorithm.distillation_.labels, other[train_nodes])
    explanation = explainer(house.x, house.edge_index, target=house.y, index=4)
    check_explanation(explanation, None, MaskType.object)


class Returns(nn.Module):
    """Wraps a logit model to return raw / log_probs / probs, or one binary column."""

    def __init__(self, inner: nn.Module, kind: str):
        super().__init__()
        self.inner, self.kind = inner, kind

    def forward(self, x, edge_index):
        z = self.inner(x, edge_index)
        if self.kind == "log_probs":
            return z.log_softmax(-1)
        if self.kind == "probs":
            return z.softmax(-1)
        if self.kind == "binary_raw":
            return z[:, 1:2] - z[:, 0:1]
        if self.kind == "binary_probs":
            return torch.sigmoid(z[:, 1:2] - z[:, 0:1])
        return z


def test_logit_conversion():
    z = torch.randn(5, 3)
    mc = ModelMode.multiclass_classification
    for out, rt in ((z, "raw"), (z.log_softmax(-1), "log_probs"), (z.softmax(-1), "probs")):
        got = _logits(out, mc, ModelReturnType(rt))
        assert torch.allclose(got.softmax(-1), z.softmax(-1), atol=1e-5)
    b = torch.randn(5, 1)
    bc = ModelMode.binary_classification
    for out, rt in ((b, "raw"), (b.sigmoid(), "probs")):
        got = _logits(out, bc, ModelReturnType(rt))
        assert got.shape == (5, 2)
        assert torch.allclose(got.softmax(-1)[:, 1], b.sigmoid().view(-1), atol=1e-5)
    with pytest.raises(ValueError, match="one output column"):
        _logits(torch.randn(5, 2), bc, ModelReturnType.raw)


def test_return_types_give_the_same_explanations(house, train_nodes):
    torch.manual_seed(4)
    inner = NodeNet("sage", 4, 2).eval()
    masks, deltas = {}, {}
    kinds = {"raw": ("multiclass_classification", "raw"),
             "log_probs": ("multiclass_classification", "log_probs"),
             "probs": ("multiclass_classification", "probs"),
             "binary_raw": ("binary_classification", "raw"),
             "binary_probs": ("binary_classification", "probs")}
    for kind, (mode, rt) in kinds.items():
        model = Returns(inner, kind).eval()
        explainer = node_explainer(model, config=dict(mode=mode, task_level="node", return_type=rt))
        explainer.algorithm.fit(model, house, index=train_nodes)
        assert explainer.algorithm.num_classes_ == 2
        deltas[kind] = explainer.algorithm.distillation_.delta
        masks[kind] = explainer(house.x, house.edge_index, index=9).edge_mask
    for kind in kinds:
        assert torch.allclose(deltas[kind], deltas["raw"], atol=1e-4), kind
        assert torch.allclose(masks[kind], masks["raw"], atol=1e-3), kind


def test_graph_level_binary_phenomenon():
    torch.manual_seed(6)
    graphs = graph_list(12)

    class Binary(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = GraphNet("gcn", 3, 1)

        def forward(self, x, edge_index, batch=None):
            return self.net(x, edge_index, batch)

    model = Binary().eval()
    explainer = graph_explainer(model, explanation_type="phenomenon",
                                config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explainer.algorithm.fit(model, graphs)
    labels = torch.tensor([int(g.y) for g in graphs])
    assert torch.equal(explainer.algorithm.distillation_.labels, labels)
    g = graphs[1]
    batch = torch.zeros(g.num_nodes, dtype=torch.long)
    explanation = explainer(g.x, g.edge_index, target=g.y.float(), batch=batch)
    check_explanation(explanation, None, MaskType.object)


# ----------------------------------------------------------------------------- top-K and PyG metrics

def test_distinct_scores_break_ties_by_position():
    s = torch.tensor([0.5, 0.5, 0.2, 0.5, 0.0, 1.0, 1.0])
    out = distinct_scores(s)
    assert out.unique().numel() == s.numel()
    assert bool((out > 0).all())
    # ranking: by score, ties by lower position first
    assert torch.argsort(out, descending=True).tolist() == [5, 6, 0, 1, 3, 2, 4]
    assert torch.allclose(out, s.clamp_min(1e-30), atol=1e-6)
    seg = distinct_scores(s, torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    assert float(seg[3]) == 0.5  # the first 0.5 of segment 1 is left alone


@pytest.mark.parametrize("k", [1, 3, 6, 1000])
def test_topk_threshold_keeps_exactly_k_undirected_edges(fitted_gin, house, k):
    model, fitted = fitted_gin
    explainer = Explainer(model, algorithm=fitted.algorithm, explanation_type="model",
                          model_config=NODE_CONFIG, edge_mask_type="object",
                          threshold_config=topk_config(k))
    rev = reverse_index(house.edge_index)
    for node in (0, 7, 31):
        mask = explainer(house.x, house.edge_index, index=node).edge_mask
        _, _, _, inside = k_hop_subgraph(node, 3, house.edge_index, num_nodes=house.num_nodes)
        pairs_in_graph = int(inside.sum()) // 2
        kept = mask > 0
        assert int(kept.sum()) == 2 * min(k, pairs_in_graph)
        assert torch.equal(kept, kept[rev])  # both directions of every kept pair
        if k < pairs_in_graph:  # the kept pairs are Gem's K best
            full = fitted(house.x, house.edge_index, index=node).edge_mask
            assert float(full[kept].min()) > float(full[inside & ~kept].max())


def test_topk_is_exact_on_tied_scores():
    # a ring with identical features: every pair of the ring gets the same Gem score
    n = 8
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    ei = to_undirected(ring)
    data = Data(x=torch.ones(n, 2), edge_index=ei)
    torch.manual_seed(0)
    model = NodeNet("gin", 2, 2).eval()
    explainer = node_explainer(model, k=2)
    explainer.algorithm.fit(model, data, index=torch.arange(n))
    raw = explainer.algorithm.gem_.explain(node_computation_graphs(data.x, ei, [0], 3).instances)[0]
    assert raw.unique().numel() < raw.numel()  # there are ties to break
    thresholded = Explainer(model, algorithm=explainer.algorithm, explanation_type="model",
                            model_config=NODE_CONFIG, edge_mask_type="object",
                            threshold_config=topk_config(3))
    mask = thresholded(data.x, ei, index=0).edge_mask
    assert int((mask > 0).sum()) == 6
    assert torch.equal(mask > 0, (mask > 0)[reverse_index(ei)])


def test_pyg_fidelity_on_gem_explanations(fitted_gin, house):
    model, fitted = fitted_gin
    explainer = Explainer(model, algorithm=fitted.algorithm, explanation_type="model",
                          model_config=NODE_CONFIG, edge_mask_type="object",
                          threshold_config=dict(threshold_type="topk_hard", value=2 * 4))
    nodes = torch.arange(0, house.num_nodes, 5)
    explanation = explainer(house.x, house.edge_index, index=nodes)
    pos, neg = fidelity(explainer, explanation)
    assert 0.0 <= pos <= 1.0 and 0.0 <= neg <= 1.0
    # every edge of the explained computation graphs scores > 0 and every other edge 0, so the
    # "any score" explanation keeps exactly what the (GIN) predictions depend on: fidelity- is 0
    any_score = Explainer(model, algorithm=fitted.algorithm, explanation_type="model",
                          model_config=NODE_CONFIG, edge_mask_type="object",
                          threshold_config=dict(threshold_type="hard", value=0.0))
    few = torch.tensor([house.num_nodes - 1, house.num_nodes - 6])  # nodes of the last two houses
    everything = any_score(house.x, house.edge_index, index=few)
    assert 0 < int(everything.edge_mask.sum()) < house.num_edges
    assert fidelity(any_score, everything)[1] == 0.0


def test_graph_level_fidelity():
    torch.manual_seed(8)
    graphs = graph_list(12)
    model = GraphNet("sage", 3, 2).eval()
    explainer = graph_explainer(model)
    explainer.algorithm.fit(model, graphs)
    thresholded = Explainer(model, algorithm=explainer.algorithm, explanation_type="model",
                            model_config=GRAPH_CONFIG, edge_mask_type="object",
                            threshold_config=topk_config(3))
    batch = Batch.from_data_list(graphs[:4])
    explanation = thresholded(batch.x, batch.edge_index, batch=batch.batch)
    check_explanation(explanation, None, MaskType.object)
    pos, neg = fidelity(thresholded, explanation)
    assert 0.0 <= pos <= 1.0 and 0.0 <= neg <= 1.0


# ----------------------------------------------------------------------------- computation graphs

def test_node_computation_graphs_match_the_engine_instances(house):
    nodes = [0, 5, 12, int(house.num_nodes) - 1]
    graphs = node_computation_graphs(house.x, house.edge_index, nodes, 3)
    ptr = graphs.pair_ptr.tolist()
    for i, (v, inst) in enumerate(zip(nodes, graphs.instances)):
        ids = graphs.pair_ids[ptr[i]:ptr[i + 1]]
        ref = node_instance(house, v, 3)
        assert torch.equal(inst.pairs, ref.pairs) and inst.target == ref.target
        assert torch.equal(inst.node_ids, ref.node_ids) and torch.equal(inst.x, ref.x)
        # pair ids point back at the right undirected edges of the user's graph
        glob = inst.node_ids[inst.pairs]
        edge_ids = torch.nonzero(torch.isin(graphs.edge_pair, ids)).view(-1)
        ends = house.edge_index[:, edge_ids].sort(dim=0).values
        assert set(map(tuple, ends.t().tolist())) == set(map(tuple, glob.t().tolist()))


def test_graph_computation_graphs_split_a_batch():
    graphs = graph_list(4)
    batch = Batch.from_data_list(graphs)
    cg = graph_computation_graphs(batch.x, batch.edge_index, batch.batch)
    assert len(cg.instances) == 4
    for g, inst in zip(graphs, cg.instances):
        assert inst.num_nodes == g.num_nodes and inst.num_pairs == g.num_edges // 2
        assert torch.equal(inst.x, g.x)
    with pytest.raises(ValueError, match="different graphs"):
        bad = batch.edge_index.clone()
        bad[1, 0] = batch.num_nodes - 1
        graph_computation_graphs(batch.x, bad, batch.batch)


def test_black_box_checks_output_rows(house):
    from gem_core.data.instances import collate

    inst = node_instance(house, 0, 2)
    bb = PyGBlackBox(lambda x, ei: torch.zeros(1, 3), "node", "multiclass_classification", "raw")
    with pytest.raises(ValueError, match="one row per node"):
        bb(collate([inst]))


def test_fast_path_matches_the_engine(fitted_gin, house):
    from gem_core.gem.labeling import hop_columns

    _, explainer = fitted_gin
    algo = explainer.algorithm
    gem = algo.gem_
    cg = node_computation_graphs(house.x, house.edge_index, [0, 9, 30], 3)
    # hop labels from the BFS that cut the graphs == the engine's own labelling
    assert torch.equal(hop_columns(cg.hops, gem.num_hops).unsqueeze(1), gem._label_columns(cg.packed()))
    # scores of the packed fast path == the engine's explain on the instances (unchecked)
    algo.check = "off"
    try:
        raw = algo._scores(cg)
    finally:
        algo.check = None
    assert torch.allclose(raw, torch.cat(gem.explain(cg.instances)), atol=1e-6)


def test_the_adapters_check_is_the_engines(fitted_gin, house):
    """The adapter's default node-level check (``repair`` of 3 after the lead, up to max(k)) is
    the engine's :func:`checked_scores` on the same scores; turning it off needs no refit."""
    from gem_core.gem.checked_ranking import checked_scores
    from gem_core.gem.explain import predict_packed

    model, explainer = fitted_gin
    algo = explainer.algorithm
    cg = node_computation_graphs(house.x, house.edge_index, [0, 9, 30], 3)
    packed = cg.packed()
    black_box = algo._black_box(model, {}, house.x.device)
    predicted = predict_packed(black_box, packed)
    algo.check = "off"
    try:
        raw = algo._scores(cg, model)
    finally:
        algo.check = None
    lead = algo.settings_.teacher.necessity_lead
    expected = checked_scores(black_box, packed, raw, predicted, start=lead,
                              stop=max(algo.k_grid), width=3, rule="repair")
    assert torch.equal(algo._scores(cg, model), expected)
    assert sorted(expected.tolist()) == pytest.approx(sorted(raw.tolist()))


def test_graph_structure_cache_follows_in_place_edits(fitted_gin, house):
    _, explainer = fitted_gin
    ei = house.edge_index.clone()
    first = explainer(house.x, ei, index=3).edge_mask
    assert torch.equal(first, explainer(house.x, ei, index=3).edge_mask)  # cached structure
    ei[:, [0, 1]] = ei[:, [1, 0]]  # reorder two directed edges in place
    again = explainer(house.x, ei, index=3).edge_mask
    fresh = explainer(house.x, ei.clone(), index=3).edge_mask
    assert torch.equal(again, fresh)
    assert torch.equal(again[[0, 1]], first[[1, 0]])


def test_directed_graphs_are_flagged(house):
    torch.manual_seed(0)
    model = NodeNet("gin", 4, 4).eval()
    one_way = house.edge_index[:, house.edge_index[0] < house.edge_index[1]]
    data = Data(x=house.x, edge_index=one_way, y=house.y)
    with pytest.warns(UserWarning, match="not symmetric"):
        node_explainer(model, epochs=1).algorithm.fit(model, data, index=[0, 1, 2])


class SharedWeights(nn.Module):
    """One GraphConv applied three times: one MessagePassing module, a 3-hop receptive field."""

    def __init__(self, features: int, classes: int):
        super().__init__()
        from torch_geometric.nn import GraphConv

        self.lin = nn.Linear(features, 16)
        self.conv = GraphConv(16, 16)
        self.head = nn.Linear(16, classes)

    def forward(self, x, edge_index):
        h = self.lin(x)
        for _ in range(3):
            h = self.conv(h, edge_index).relu()
        return self.head(h)


def test_a_model_applying_one_layer_several_times_is_refused_with_the_hops_to_pass(house,
                                                                                  train_nodes):
    torch.manual_seed(0)
    model = SharedWeights(house.num_features, int(house.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(60):  # a trained model: its outputs depend on its whole receptive field
        opt.zero_grad()
        F.cross_entropy(model(house.x, house.edge_index), house.y).backward()
        opt.step()
    model.eval()
    assert count_hops(model) == 1
    with pytest.raises(ValueError, match=r"counted 1 MessagePassing module .* pass "
                                         r"GemExplainer\(num_hops=[23]\)"):
        node_explainer(model, epochs=2).algorithm.fit(model, house, index=train_nodes)
    explainer = node_explainer(model, epochs=2, num_hops=3)
    explainer.algorithm.fit(model, house, index=train_nodes)  # the true receptive field fits
    assert explainer.algorithm.num_hops_ == 3
    given = node_explainer(model, epochs=2, num_hops=1)
    with pytest.warns(UserWarning, match="num_hops=1 was given"):
        given.algorithm.fit(model, house, index=train_nodes)  # the user's choice: warned, used
    assert given.algorithm.num_hops_ == 1


# ----------------------------------------------------------------------------- one Gem: options

def test_adapter_takes_few_options_a_preset_and_setting_paths():
    import inspect

    params = [p for p in inspect.signature(GemExplainer.__init__).parameters if p != "self"]
    assert len(params) <= 8, params  # issue 53: PyG's explainers take a handful
    algo = GemExplainer(k=(5, 10), settings={
        "teacher.topk_policy": "refine", "teacher.protocol": "drop_isolated",
        "inputs.condition_on_prediction": False, "teacher.ks": (2, 4),
        "teacher.necessity_weight": 0.5, "teacher.necessity_lead": 3})
    s = algo.gem_settings("graph", 3, phenomenon=False)
    t = s.teacher
    assert (t.topk_policy, t.protocol, s.inputs.condition_on_prediction, t.ks,
            t.necessity_weight, t.necessity_lead) == ("refine", "drop_isolated", False, (2, 4), 0.5, 3)
    # the defaults picked on validation (the "graph" preset): sufficient explanations of the
    # predicted class over every budget up to the largest K; node level the "node" preset
    graph = GemExplainer(k=(5, 10)).gem_settings("graph", 3, phenomenon=False)
    g = graph.teacher
    assert (g.topk_policy, graph.inputs.condition_on_prediction, g.ks, g.necessity_weight,
            g.protocol) == ("sufficient", True, tuple(range(1, 11)), 1.0, "drop_isolated")
    # the generator alone unless the explain-time search is asked for (issue 50)
    assert (graph.check.rule.name, graph.asks_target) == ("off", False)
    assert GemExplainer(check="repair").gem_settings("graph", 3, False).check.width == 8
    assert GemExplainer().connects("graph") is False and GemExplainer().connects("node") is True
    assert GemExplainer(settings={"teacher.connected": True}).connects("graph") is True
    node = GemExplainer(k=6).gem_settings("node", 3, phenomenon=False)
    assert (node.teacher.topk_policy, node.teacher.kind, node.inputs.condition_on_prediction,
            node.teacher.necessity_weight) == ("nosplit", "mix", False, 0.0)
    assert not GemExplainer().gem_settings("graph", 3, True).inputs.condition_on_prediction
    with pytest.raises(ValueError, match="GemSettings.teacher.protocol: 'all' is not one of"):
        GemExplainer(settings={"teacher.protocol": "all"})
    with pytest.raises(ValueError, match="GemSettings.check.rule: 'often'"):
        GemExplainer(check="often")
    ens = GemExplainer(settings={"network.ensemble": 3}).gem_settings("graph", 3, False)
    assert ens.network.ensemble == 3 and graph.network.ensemble == 1
    with pytest.raises(ValueError, match="GemSettings.network.ensemble"):
        GemExplainer(settings={"network.ensemble": 0})
    assert (graph.network.decoder, node.network.decoder) == ("mlp", "inner")  # the presets
    # a named preset, or a whole GemSettings, replaces the level's preset
    paper = GemExplainer(preset="paper").gem_settings("graph", 3, phenomenon=False)
    assert paper.teacher.kind == "weights" and not paper.network.decoder_bias
    assert paper.teacher.label_source == "predicted"  # what the fit explains decides it
    mine = GemSettings().with_overrides({"network.ensemble": 2})
    own = GemExplainer(epochs=7, settings=mine).gem_settings("node", 2, phenomenon=True)
    assert own.network.ensemble == 2 and own.training.max_epochs == 7
    assert own.teacher.label_source == "true" and own.inputs.num_hops == 2


def test_graph_level_gem_reads_the_predicted_class_and_the_protocol():
    """With the graph-level defaults Gem reads the model's predicted class (one-hot, beside the
    features) at fit and explain time, and is taught for the protocol it is given."""
    torch.manual_seed(3)
    graphs = graph_list(24)
    model = GraphNet("gin", 3, 2).eval()
    fitted = {}
    for protocol in ("keep_nodes", "drop_isolated"):
        explainer = graph_explainer(model, k=(1, 2, 3), settings={"teacher.protocol": protocol},
                                    epochs=20)
        explainer.algorithm.fit(model, graphs)
        assert explainer.algorithm.settings_.inputs.condition_on_prediction
        assert explainer.algorithm.settings_.teacher.protocol == protocol
        fitted[protocol] = explainer
    g = graphs[5]
    batch = torch.zeros(g.num_nodes, dtype=torch.long)
    explanation = fitted["drop_isolated"](g.x, g.edge_index, batch=batch)
    check_explanation(explanation, None, MaskType.object)
    gems = [fitted[p].algorithm.gem_ for p in fitted]
    assert gems[0].in_features_ == gems[1].in_features_ == 3 + 2  # features + one-hot class


# ----------------------------------------------------------------------------- one explain path

@pytest.mark.parametrize("check", ["off", "repair"])
def test_the_adapter_and_the_registry_gem_share_one_explain_function(check, monkeypatch):
    """Issue 53: the adapter explains through gem_core.gem.explain.explain_packed, as the
    registry's Gem (GemPipeline.explain) does: the same fit and instances give equal scores,
    Gem alone and Gem + check."""
    import gem_core.gem.explain as explain_module
    import gem_core.gem.pipeline as pipeline_module
    import gem_core.pyg.explainer as adapter_module
    from gem_core.evaluation.outside import instances_of
    from gem_core.gem.pipeline import GemPipeline
    from gem_core.pyg.black_box import PyGBlackBox
    from gem_core.pyg.computation_graphs import graph_computation_graphs

    torch.manual_seed(0)
    model = GraphNet("gcn", 3, 2).eval()
    graphs = graph_list(12)
    explainer = graph_explainer(model, k=(2, 3), epochs=4, check=check)
    algo = explainer.algorithm
    algo.fit(model, graphs[:8])
    calls = []
    real = explain_module.explain_packed
    spy = lambda *a, **kw: calls.append(True) or real(*a, **kw)  # noqa: E731
    monkeypatch.setattr(adapter_module, "explain_packed", spy)
    monkeypatch.setattr(pipeline_module, "explain_packed", spy)
    batch = Batch.from_data_list(graphs[8:])
    cut = graph_computation_graphs(batch.x, batch.edge_index, batch.batch)
    ours = algo._scores(cut, model, {})
    box = PyGBlackBox(model, "graph", algo.model_config.mode, algo.model_config.return_type,
                      torch.device("cpu"), {}, None)
    pipeline = GemPipeline(algo._explain_settings(), algo.k_grid, box, algo.num_classes_)
    theirs = torch.cat(pipeline.explain(algo.gem_, instances_of(graphs[8:])))
    assert len(calls) == 2  # both went through the one function
    assert ours.shape == theirs.shape and torch.equal(ours, theirs)


def test_node_objects_are_each_nodes_best_edge_at_node_level(house, fitted_gin):
    model, explainer = fitted_gin
    nodes = Explainer(model, algorithm=explainer.algorithm, explanation_type="model",
                      model_config=NODE_CONFIG, edge_mask_type="object", node_mask_type="object")
    explanation = nodes(house.x, house.edge_index, index=torch.tensor([3, 20]))
    check_explanation(explanation, MaskType.object, MaskType.object)
    assert explanation.node_mask.shape == (house.num_nodes, 1)
    ends = torch.cat([house.edge_index[0], house.edge_index[1]])
    best = torch.zeros(house.num_nodes).scatter_reduce(
        0, ends, explanation.edge_mask.repeat(2), reduce="amax", include_self=True)
    assert torch.equal(explanation.node_mask.view(-1), best)
    assert float(explanation.node_mask.max()) > 0 and float(explanation.node_mask.min()) == 0.0
