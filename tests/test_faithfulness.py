"""The field's faithfulness metrics (GNNX-Bench) on hand-computed cases: hand-written black boxes
whose prediction depends on a known edge or on a known node's presence."""
import pytest
import torch

from gem_core.data.instances import Instance, InstanceBatch
from gem_core.evaluation.faithfulness import (PROTOCOLS, Protocol, check_protocol, drop_isolated,
                                              jaccard, necessity_at_k, stability,
                                              sufficiency_at_k)
from gem_core.explainers import Explanation


def _logits(flag: torch.Tensor) -> torch.Tensor:
    """Class 1 where ``flag`` is true, class 0 elsewhere."""
    f = flag.double() * 2 - 1
    return torch.stack([torch.zeros_like(f), f], dim=1)


def marked_edge_box(batch: InstanceBatch) -> torch.Tensor:
    """Class 1 iff the graph holds an edge between two nodes whose feature 0 is 1."""
    u, v = batch.edge_index
    marked = (batch.x[u, 0] * batch.x[v, 0]) > 0
    count = torch.zeros(batch.num_instances, dtype=torch.float64).index_add_(0, batch.batch[u], marked.double())
    return _logits(count > 0)


def marked_node_box(batch: InstanceBatch) -> torch.Tensor:
    """Class 1 iff the graph holds a node whose feature 1 is 1 (edges do not matter)."""
    present = torch.zeros(batch.num_instances, dtype=torch.float64).index_add_(0, batch.batch, batch.x[:, 1].double())
    return _logits(present > 0)


def node_count_box(batch: InstanceBatch) -> torch.Tensor:
    """Node task: class 1 iff the instance has at least 4 nodes; reads the target's row."""
    assert batch.target_index is not None
    sizes = torch.bincount(batch.batch, minlength=batch.num_instances)
    return _logits(sizes >= 4)


def _graph(x0, x1, pairs, target=None):
    x = torch.tensor([x0, x1], dtype=torch.float).t().contiguous()
    return Instance(x=x, pairs=torch.tensor(pairs, dtype=torch.long).t().contiguous(), y=0,
                    target=target)


def _path4():
    """0-1-2-3 with nodes 0 and 1 marked: the pair (0, 1) (index 0) decides class 1."""
    return _graph([1, 1, 0, 0], [0, 0, 0, 0], [(0, 1), (1, 2), (2, 3)])


def test_top1_edge_that_flips_the_prediction():
    g = _path4()
    right = torch.tensor([0.9, 0.5, 0.1])  # the marked pair first
    wrong = torch.tensor([0.1, 0.5, 0.9])  # the pair (2, 3) first
    for protocol in PROTOCOLS:
        nec = necessity_at_k(marked_edge_box, ([g], [right]), [1], protocol)
        suf = sufficiency_at_k(marked_edge_box, ([g], [right]), [1], protocol)
        assert nec.at_k == {1: 1.0} and suf.at_k == {1: 1.0}
        nec = necessity_at_k(marked_edge_box, ([g, g], [right, wrong]), [1, 2, 3], protocol)
        suf = sufficiency_at_k(marked_edge_box, ([g, g], [right, wrong]), [1, 2, 3], protocol)
        # wrong: top-1 (2,3) alone is class 0 -> insufficient; removing it keeps class 1;
        # top-2 {(2,3),(1,2)}: still without (0,1); k = 3 takes every pair
        assert suf.at_k == {1: 0.5, 2: 0.5, 3: 1.0}
        assert nec.at_k == {1: 0.5, 2: 0.5, 3: 1.0}


def test_an_instance_kept_on_a_single_edge_and_an_explanation_object():
    g = _path4()
    exp = Explanation("hand", [torch.tensor([0.2, 0.9, 0.1])], 0.0, [g])  # (1, 2) first
    assert sufficiency_at_k(marked_edge_box, exp, [1]).at_k == {1: 0.0}
    # k = 2 keeps (1, 2) and (0, 1): sufficient; removing them: the prediction changes
    assert sufficiency_at_k(marked_edge_box, exp, [2]).at_k == {2: 1.0}
    assert necessity_at_k(marked_edge_box, exp, [1, 2]).at_k == {1: 0.0, 2: 1.0}


def test_removing_an_edge_that_isolates_a_node_under_both_protocols():
    # 0-1-2 with node 2 marked: the graph is class 1 while node 2 is in it
    g = _graph([0, 0, 0], [0, 0, 1], [(0, 1), (1, 2)])
    iso_first = torch.tensor([0.1, 0.9])  # (1, 2) first: removing it isolates node 2
    keep_01 = torch.tensor([0.9, 0.1])  # (0, 1) first: keeping it alone isolates node 2
    assert necessity_at_k(marked_node_box, ([g], [iso_first]), [1], "keep_nodes").at_k == {1: 0.0}
    assert necessity_at_k(marked_node_box, ([g], [iso_first]), [1], "drop_isolated").at_k == {1: 1.0}
    assert sufficiency_at_k(marked_node_box, ([g], [keep_01]), [1], "keep_nodes").at_k == {1: 1.0}
    assert sufficiency_at_k(marked_node_box, ([g], [keep_01]), [1], "drop_isolated").at_k == {1: 0.0}
    # keeping (1, 2) keeps node 2 under both protocols
    for protocol in PROTOCOLS:
        assert sufficiency_at_k(marked_node_box, ([g], [iso_first]), [1], protocol).at_k == {1: 1.0}
    # removing every edge: a graph with no pair left keeps its nodes (no empty graph)
    assert necessity_at_k(marked_node_box, ([g], [iso_first]), [2], "drop_isolated").at_k == {2: 0.0}


def test_drop_isolated_keeps_the_target_node_and_relabels():
    x = torch.arange(10, dtype=torch.float).view(5, 2)
    inst = Instance(x=x, pairs=torch.tensor([[2], [4]]), y=1, target=0,
                    node_ids=torch.tensor([10, 11, 12, 13, 14]))
    out = drop_isolated(inst)
    assert out.num_nodes == 3 and out.target == 0
    assert out.pairs.tolist() == [[1], [2]] and out.node_ids.tolist() == [10, 12, 14]
    assert torch.equal(out.x, x[[0, 2, 4]])
    # node task: removing the far edge (2, 3) isolates node 3 only under drop_isolated
    node = Instance(x=torch.zeros(4, 2), pairs=torch.tensor([[0, 0, 2], [1, 2, 3]]), y=0, target=0)
    far_first = torch.tensor([0.1, 0.2, 0.9])
    assert necessity_at_k(node_count_box, ([node], [far_first]), [1], "keep_nodes").at_k == {1: 0.0}
    assert necessity_at_k(node_count_box, ([node], [far_first]), [1], "drop_isolated").at_k == {1: 1.0}
    # removing every edge isolates the target too: it stays (one node), the prediction is defined
    assert necessity_at_k(node_count_box, ([node], [far_first]), [3], "drop_isolated").at_k == {3: 1.0}


def test_per_class_forms():
    g1 = _path4()  # class 1 on the whole graph
    g0 = _graph([1, 0, 0], [0, 0, 0], [(0, 1), (1, 2)])  # no marked pair: class 0
    right, wrong = torch.tensor([0.9, 0.5, 0.1]), torch.tensor([0.1, 0.5, 0.9])
    data = ([g1, g1, g0], [right, wrong, torch.tensor([0.9, 0.1])])
    suf = sufficiency_at_k(marked_edge_box, data, [1])
    nec = necessity_at_k(marked_edge_box, data, [1])
    assert suf.per_class == {0: {1: 1.0}, 1: {1: 0.5}}
    assert nec.per_class == {0: {1: 0.0}, 1: {1: 0.5}}
    assert suf.at_k[1] == pytest.approx(2 / 3) and nec.at_k[1] == pytest.approx(1 / 3)
    # only the classes that occur; predictions given by the caller are used as they are
    only1 = sufficiency_at_k(marked_edge_box, ([g1], [right]), [1])
    assert set(only1.per_class) == {1}
    assert only1.to_dict() == {"at_k": {"1": 1.0}, "per_class": {"1": {"1": 1.0}}}
    told = sufficiency_at_k(marked_edge_box, ([g1], [right]), [1], predicted=torch.tensor([0]))
    assert told.at_k == {1: 0.0} and set(told.per_class) == {0}


def test_stability_of_identical_disjoint_and_half_overlapping_sets():
    a = [torch.tensor([0.9, 0.8, 0.1, 0.0])]
    assert stability([a, a, a], 2) == 1.0
    disjoint = [torch.tensor([0.0, 0.1, 0.8, 0.9])]
    assert stability([a, disjoint], 2) == 0.0
    half = [torch.tensor([0.1, 0.9, 0.8, 0.0])]  # {1, 2} against {0, 1}: 1 shared of 3
    assert stability([a, half], 2) == pytest.approx(1 / 3)
    # per instance over every pair of seeds, then over instances
    assert stability([a, a, half], 2) == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)
    two = [a + a, a + half]
    assert stability(two, 2) == pytest.approx((1 + 1 / 3) / 2)
    assert jaccard(torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.bool)) == 1.0
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stability([a], 2)
    with pytest.raises(ValueError, match="same instances"):
        stability([a, a + a], 2)


def test_protocol_strings_are_validated():
    assert check_protocol("keep_nodes") is Protocol.KEEP_NODES
    assert check_protocol(" Drop_Isolated ") is Protocol.DROP_ISOLATED
    assert check_protocol(Protocol.DROP_ISOLATED) == "drop_isolated"
    with pytest.raises(ValueError, match="Unknown protocol 'drop'. Choose one of: keep_nodes, "
                                         "drop_isolated"):
        sufficiency_at_k(marked_edge_box, ([_path4()], [torch.zeros(3)]), [1], "drop")
    with pytest.raises(ValueError, match="got 2 scores for an instance with 3 pairs"):
        necessity_at_k(marked_edge_box, ([_path4()], [torch.zeros(2)]), [1])


def test_batched_in_chunks_gives_the_same_figures():
    g1, g0 = _path4(), _graph([1, 0, 0], [0, 0, 0], [(0, 1), (1, 2)])
    gen = torch.Generator().manual_seed(0)
    insts = [g1, g0] * 5
    scores = [torch.rand(i.num_pairs, generator=gen) for i in insts]
    for protocol in PROTOCOLS:
        whole = sufficiency_at_k(marked_edge_box, (insts, scores), [1, 2], protocol, batch_size=None)
        chunked = sufficiency_at_k(marked_edge_box, (insts, scores), [1, 2], protocol, batch_size=3)
        assert whole == chunked
