import torch
from torch_geometric.data import Data

from gem_core.data.datasets import load_dataset
from gem_core.data.instances import (collate, graph_instance, node_instance, split_instances,
                                     to_pairs)
from gem_core.models.targets import GNNBlackBox, GraphGCN, NodeGCN

from .conftest import requires_mutagenicity


def test_to_pairs_undirected_sorted_no_self_loops():
    ei = torch.tensor([[0, 1, 2, 1, 3, 3], [1, 0, 1, 2, 3, 0]])
    pairs, _ = to_pairs(ei, 4)
    assert pairs.tolist() == [[0, 0, 1], [1, 3, 2]]


def test_to_pairs_carries_edge_values():
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    attr = torch.tensor([[1.0, 0], [1.0, 0], [0, 1.0], [0, 1.0]])
    pairs, vals = to_pairs(ei, 3, attr)
    assert pairs.tolist() == [[0, 1], [1, 2]]
    assert vals.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_node_instance_is_three_hop_subgraph():
    # a path 0-1-2-3-4-5: the 3-hop graph of node 0 holds nodes 0..3
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    data = Data(x=torch.eye(6), edge_index=ei, y=torch.arange(6))
    inst = node_instance(data, 0, num_hops=3)
    assert inst.num_nodes == 4 and inst.num_pairs == 3
    assert inst.node_ids.tolist() == [0, 1, 2, 3]
    assert inst.target == 0 and inst.y == 0
    inst = node_instance(data, 3, num_hops=1)
    assert inst.node_ids.tolist() == [2, 3, 4]
    assert int(inst.node_ids[inst.target]) == 3


def test_edge_index_both_directions_and_mask():
    ei = torch.tensor([[0, 1], [1, 2]])
    data = Data(x=torch.ones(3, 2), edge_index=torch.cat([ei, ei.flip(0)], 1), y=torch.tensor([1]))
    inst = graph_instance(data, 0)
    assert inst.edge_index().size(1) == 4
    sub = inst.subgraph(torch.tensor([True, False]))
    assert sub.num_pairs == 1 and sub.num_nodes == 3
    assert sub.edge_index().tolist() == [[0, 1], [1, 0]]


def test_batched_logits_equal_one_by_one_node_task():
    torch.manual_seed(0)
    ds = load_dataset("ba_shapes")
    insts = split_instances(ds, "test")[:12]
    bb = GNNBlackBox(NodeGCN(ds.num_features, 4), "node", 4, "cpu")
    batched = bb(collate(insts))
    single = torch.cat([bb(collate([i])) for i in insts])
    assert batched.shape == (12, 4)
    assert torch.allclose(batched, single, atol=1e-5)


def test_batched_logits_with_masks_and_empty_graphs():
    torch.manual_seed(0)
    graphs = []
    for n in (4, 6, 5):
        ei = torch.randint(0, n, (2, 8))
        graphs.append(graph_instance(Data(x=torch.randn(n, 3), edge_index=ei, y=torch.tensor([0])), 0))
    bb = GNNBlackBox(GraphGCN(3, 2), "graph", 2, "cpu")
    masks = [torch.zeros(g.num_pairs, dtype=torch.bool) for g in graphs]  # every edge deleted
    batched = bb(collate(graphs, masks))
    assert batched.shape == (3, 2)
    single = torch.cat([bb(collate([g], [m])) for g, m in zip(graphs, masks)])
    assert torch.allclose(batched, single, atol=1e-5)


@requires_mutagenicity
def test_mutagenicity_instances_round_trip():
    ds = load_dataset("mutagenicity")
    insts = split_instances(ds, "test")[:40]
    assert all(i.edge_attr.shape == (i.num_pairs, 3) for i in insts)
    # both directions of the raw edge index map onto the pairs
    g = ds.graphs[int(ds.explain_split.test[0])]
    assert insts[0].num_pairs * 2 == g.edge_index.size(1)
    torch.manual_seed(0)
    bb = GNNBlackBox(GraphGCN(14, 2), "graph", 2, "cpu")
    batched = bb(collate(insts))
    single = torch.cat([bb(collate([i])) for i in insts])
    assert torch.allclose(batched, single, atol=1e-5)


def test_node_instance_prediction_equals_full_graph_prediction():
    """The premise of the paper: the 3-hop computation graph fully determines a node's output."""
    torch.manual_seed(1)
    ds = load_dataset("ba_shapes")
    model = NodeGCN(ds.num_features, 4).eval()
    nodes = torch.arange(0, 700, 23)
    from gem_core.data.instances import dataset_instances

    insts = dataset_instances(ds, nodes)
    bb = GNNBlackBox(model, "node", 4, "cpu")
    with torch.no_grad():
        full = model(ds.graph.x, ds.graph.edge_index)[nodes]
    assert torch.allclose(bb(collate(insts)), full, atol=1e-5)
