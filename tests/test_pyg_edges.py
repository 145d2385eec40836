"""Models that read per-edge tensors (bond features, edge weights) through the PyG adapter: the
tensors follow the edges through the cut, the distillation's deletions, the check's copies and
the protocols, and Gem's auto-encoder reads them."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCNConv
from torch_geometric.utils import scatter, to_undirected

from gem_core.data.ranking import ranked_pairs
from gem_core.pyg import GemExplainer
from gem_core.pyg.computation_graphs import graph_computation_graphs
from gem_core.pyg.edge_inputs import EdgeInput, EdgeInputs, fit_edge_inputs
from tests.test_pyg import NODE_CONFIG, house_graph_data

torch.set_num_threads(1)
GRAPH_CONFIG = dict(mode="multiclass_classification", task_level="graph", return_type="raw")


def test_edge_inputs_keep_their_shape_and_dtype():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    bonds = torch.tensor([3, 3, 1, 1])  # integer bond types, one per directed edge
    weight = torch.tensor([0.5, 0.5, 2.0, 2.0])
    spec = EdgeInputs.of({"edge_attr": bonds, "edge_weight": weight, "batch": None}, 4)
    assert spec.inputs == (EdgeInput("edge_attr", (), torch.long),
                           EdgeInput("edge_weight", (), torch.float32))
    rows = spec.pair_rows({"edge_attr": bonds, "edge_weight": weight},
                          torch.tensor([0, 0, 1, 1]), 2)
    assert rows.tolist() == [[3.0, 0.5], [1.0, 2.0]]
    back = spec.model_kwargs(rows[torch.tensor([0, 1, 1, 0])], torch.device("cpu"))
    assert back["edge_attr"].dtype == torch.long and back["edge_attr"].tolist() == [3, 1, 1, 3]
    assert back["edge_weight"].shape == (4,) and back["edge_weight"].tolist() == [0.5, 2, 2, 0.5]
    with pytest.raises(ValueError, match="one row per edge"):
        EdgeInputs.of({"edge_attr": torch.zeros(3, 2)}, 4)
    with pytest.raises(ValueError, match="fitted on a model that reads edge_attr"):
        spec.check_same(None)
    with pytest.warns(UserWarning, match="different edge features"):
        spec.pair_rows({"edge_attr": torch.tensor([3, 2, 1, 1]), "edge_weight": weight},
                       torch.tensor([0, 0, 1, 1]), 2)


# ----------------------------------------------------------------------------- graph level

class DoubleBondNet(nn.Module):
    """Says class 1 exactly when the graph holds a double bond (edge_attr column 1): the
    prediction lives in the bond features alone, the node features say nothing."""

    def forward(self, x, edge_index, batch=None, edge_attr=None):
        if edge_attr is None:
            raise ValueError("DoubleBondNet reads edge_attr")
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long)
        num_graphs = int(batch.max()) + 1 if batch.numel() else 1
        per_edge = edge_attr[:, 1].float()
        has = scatter(per_edge, batch[edge_index[0]], dim=0, dim_size=num_graphs, reduce="max")
        return torch.stack([torch.zeros_like(has), 6.0 * has - 3.0], dim=1)


def bond_graphs(n: int, seed: int) -> list[Data]:
    """Random trees of 7-11 atoms with one-hot bond types (single / double / triple); every other
    graph has exactly one double bond, placed at random."""
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(n):
        size = 7 + int(torch.randint(0, 5, (1,), generator=gen))
        parent = [int(torch.randint(0, j, (1,), generator=gen)) for j in range(1, size)]
        pairs = torch.tensor([list(range(1, size)), parent])
        kinds = torch.zeros(size - 1, dtype=torch.long)
        kinds[torch.rand(size - 1, generator=gen) < 0.2] = 2  # a few triple bonds
        if i % 2:
            kinds[int(torch.randint(0, size - 1, (1,), generator=gen))] = 1
        ei, kind = to_undirected(pairs, kinds, num_nodes=size)
        graphs.append(Data(x=torch.ones(size, 2), edge_index=ei,
                           edge_attr=torch.nn.functional.one_hot(kind, 3).float(),
                           y=torch.tensor([i % 2])))
    return graphs


@pytest.fixture(scope="module")
def bonds_fitted():
    model = DoubleBondNet()
    explainer = Explainer(model, algorithm=GemExplainer(k=(1, 2, 3), epochs=150, seed=0),
                          explanation_type="model", edge_mask_type="object",
                          model_config=GRAPH_CONFIG)
    explainer.algorithm.fit(model, bond_graphs(80, seed=0))
    return model, explainer


def _double_bond(g: Data) -> tuple[int, int]:
    e = int(torch.nonzero(g.edge_attr[:, 1]).view(-1)[0])
    u, v = g.edge_index[:, e].tolist()
    return min(u, v), max(u, v)


def _top_pair(g: Data, edge_mask: torch.Tensor) -> tuple[int, int]:
    e = int(edge_mask.argmax())
    u, v = g.edge_index[:, e].tolist()
    return min(u, v), max(u, v)


def test_a_bond_feature_model_is_fitted_and_its_bonds_found(bonds_fitted):
    model, explainer = bonds_fitted
    algo = explainer.algorithm
    assert algo.edge_inputs_.names == ("edge_attr",)
    assert algo.settings_.inputs.edge_features  # Gem's auto-encoder reads the bond features too
    # the distillation deleted bonds with their features: on every training graph with a double
    # bond, that bond has the largest effect (the only bond whose deletion flips the prediction)
    dist = algo.distillation_
    for i, g in enumerate(bond_graphs(80, seed=0)):
        inst = graph_computation_graphs(g.x, g.edge_index, edge_tensors={"edge_attr": g.edge_attr},
                                        edge_inputs=algo.edge_inputs_).instances[0]
        delta = dist.delta[int(dist.pair_ptr[i]):int(dist.pair_ptr[i + 1])]
        if bool((inst.edge_attr[:, 1] > 0).any()):
            assert inst.edge_attr[ranked_pairs(delta, 1)[0], 1] == 1
    # Gem alone, one pass on held-out graphs: the double bond first on (nearly) every one
    test = bond_graphs(40, seed=1)
    hits = total = 0
    for g in test[1::2]:
        mask = explainer(g.x, g.edge_index, edge_attr=g.edge_attr).edge_mask
        assert mask.shape == (g.edge_index.size(1),)
        hits += _top_pair(g, mask) == _double_bond(g)
        total += 1
    assert hits >= 0.9 * total, (hits, total)


def test_a_batch_with_bond_features_and_the_check(bonds_fitted):
    model, explainer = bonds_fitted
    b = Batch.from_data_list(bond_graphs(12, seed=2))
    alone = explainer(b.x, b.edge_index, batch=b.batch, edge_attr=b.edge_attr).edge_mask
    explainer.algorithm.check = "repair"  # the check's copies carry the bond features too
    try:
        checked = explainer(b.x, b.edge_index, batch=b.batch, edge_attr=b.edge_attr).edge_mask
    finally:
        explainer.algorithm.check = None
    assert alone.shape == checked.shape == (b.edge_index.size(1),)
    assert torch.isfinite(checked).all()


def test_explaining_without_the_bond_features_is_a_clear_error(bonds_fitted):
    model, explainer = bonds_fitted
    g = bond_graphs(2, seed=3)[1]
    with pytest.raises(ValueError, match="fitted on a model that reads edge_attr"):
        explainer.algorithm(model, g.x, g.edge_index, target=torch.tensor([1]))
    with pytest.raises(ValueError, match="edge_attr"):
        explainer.algorithm(model, g.x, g.edge_index, target=torch.tensor([1]),
                            edge_attr=g.edge_attr[:, :2])


def test_only_tensors_the_model_takes_are_carried():
    class NoBonds(nn.Module):
        def forward(self, x, edge_index, batch=None):
            return x.sum(0, keepdim=True)

    graphs = bond_graphs(2, seed=4)
    assert fit_edge_inputs(NoBonds(), graphs, "graph") is None
    assert fit_edge_inputs(DoubleBondNet(), graphs, "graph").names == ("edge_attr",)


# ----------------------------------------------------------------------------- node level

class WeightedGCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.head = GCNConv(4, 16), GCNConv(16, 16), nn.Linear(16, 4)

    def forward(self, x, edge_index, edge_weight=None):
        h = self.c1(x, edge_index, edge_weight).relu()
        return self.head(self.c2(h, edge_index, edge_weight).relu())


def test_a_node_model_with_edge_weights():
    data = house_graph_data(seed=0)
    gen = torch.Generator().manual_seed(0)
    pairs_w = torch.rand(data.edge_index.size(1), generator=gen) + 0.5
    # symmetric weights: the weight of (u, v) is the weight of (v, u)
    key = torch.minimum(*data.edge_index) * data.num_nodes + torch.maximum(*data.edge_index)
    _, inverse = torch.unique(key, return_inverse=True)
    data.edge_weight = pairs_w[inverse]
    torch.manual_seed(0)
    model = WeightedGCN().eval()
    explainer = Explainer(model, algorithm=GemExplainer(k=4, epochs=5),
                          explanation_type="model", edge_mask_type="object",
                          model_config=NODE_CONFIG)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # symmetric weights: no warning about directions
        explainer.algorithm.fit(model, data, index=list(range(0, data.num_nodes, 3)))
    spec = explainer.algorithm.edge_inputs_
    assert spec.inputs == (EdgeInput("edge_weight", (), torch.float32),)
    e = explainer(data.x, data.edge_index, index=[1, 5], edge_weight=data.edge_weight)
    assert e.edge_mask.shape == (data.edge_index.size(1),)
    assert float(e.edge_mask.max()) > 0


def test_edge_rows_are_reused_only_while_the_tensors_are_unchanged():
    data = house_graph_data(seed=1)
    key = torch.minimum(*data.edge_index) * data.num_nodes + torch.maximum(*data.edge_index)
    _, inverse = torch.unique(key, return_inverse=True)
    data.edge_weight = (torch.arange(int(inverse.max()) + 1).float() + 1.0)[inverse]
    torch.manual_seed(0)
    model = WeightedGCN().eval()
    explainer = Explainer(model, algorithm=GemExplainer(k=4, epochs=3),
                          explanation_type="model", edge_mask_type="object",
                          model_config=NODE_CONFIG)
    explainer.algorithm.fit(model, data, index=list(range(0, data.num_nodes, 4)))
    algo = explainer.algorithm
    structure = algo._structure(data.edge_index, data.num_nodes)
    first = algo._pair_rows(algo.edge_inputs_, {"edge_weight": data.edge_weight}, structure)
    assert algo._pair_rows(algo.edge_inputs_, {"edge_weight": data.edge_weight}, structure) is first
    data.edge_weight.mul_(2.0)  # changed in place: read again
    again = algo._pair_rows(algo.edge_inputs_, {"edge_weight": data.edge_weight}, structure)
    assert again is not first and torch.equal(again, 2.0 * first)
