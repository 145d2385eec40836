"""The one packing (gem_core.data.packed): offsets, pointers, the two direction orders, subsets
and the batches the target reads; its users (collate, the labels' pack, the distillation's
layout, the PyG computation graphs) agree with it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gem_core.data.instances import Instance, collate
from gem_core.data.packed import (InstanceBatch, PackedGraphs, np_segment_arange, segment_arange,
                                  segment_ptr, segment_ranges)

torch.set_num_threads(1)


def random_instances(count: int, node_task: bool, seed: int = 0, edge_attr: bool = True,
                     ) -> list[Instance]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = 2 + int(torch.randint(0, 7, (1,), generator=gen))
        full = torch.triu_indices(n, n, 1)
        keep = torch.rand(full.size(1), generator=gen) < 0.5
        pairs = full[:, keep]
        attr = None
        if edge_attr:
            attr = torch.nn.functional.one_hot(
                torch.randint(0, 3, (pairs.size(1),), generator=gen), 3).float()
        target = int(torch.randint(0, n, (1,), generator=gen)) if node_task else None
        out.append(Instance(x=torch.randn(n, 4, generator=gen), pairs=pairs, y=i % 2,
                            target=target, edge_attr=attr, index=i))
    return out


def reference_batch(instances, pair_lists, interleaved=False) -> InstanceBatch:
    """The forward batch built one instance at a time: instance c keeps pair_lists[c] (local
    pair indices, in that order)."""
    xs, batch, targets, offset = [], [], [], 0
    fwd, bwd, fwd_attr = [], [], []
    for c, (inst, keep) in enumerate(zip(instances, pair_lists)):
        xs.append(inst.x)
        batch += [c] * inst.num_nodes
        for j in keep:
            u, v = (int(t) + offset for t in inst.pairs[:, j])
            fwd.append((u, v))
            bwd.append((v, u))
            if inst.edge_attr is not None:
                fwd_attr.append(inst.edge_attr[j])
        if inst.target is not None:
            targets.append(offset + inst.target)
        offset += inst.num_nodes
    if interleaved:
        edges = [e for pair in zip(fwd, bwd) for e in pair]
        attrs = [a for a in fwd_attr for _ in range(2)]
    else:
        edges, attrs = fwd + bwd, fwd_attr + fwd_attr
    ei = torch.tensor(edges, dtype=torch.long).t() if edges else torch.zeros(2, 0, dtype=torch.long)
    attr = None
    if all(i.edge_attr is not None for i in instances):
        attr = torch.stack(attrs) if attrs else torch.zeros(0, 3)
    return InstanceBatch(torch.cat(xs), ei.reshape(2, -1), torch.tensor(batch),
                         torch.tensor(targets) if targets else None, len(instances), attr)


def assert_same_batch(a: InstanceBatch, b: InstanceBatch) -> None:
    assert torch.equal(a.x, b.x)
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.batch, b.batch)
    assert a.num_instances == b.num_instances
    assert (a.target_index is None) == (b.target_index is None)
    if a.target_index is not None:
        assert torch.equal(a.target_index, b.target_index)
    assert (a.edge_attr is None) == (b.edge_attr is None)
    if a.edge_attr is not None:
        assert torch.equal(a.edge_attr.reshape(-1, 3), b.edge_attr.reshape(-1, 3))


# ----------------------------------------------------------------------------- segments

def test_segment_helpers_match_loops():
    counts = torch.tensor([3, 0, 2, 4, 0])
    starts = torch.tensor([10, 5, 0, 7, 1])
    assert segment_ptr(counts).tolist() == [0, 3, 3, 5, 9, 9]
    assert segment_arange(counts).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert segment_ranges(starts, counts).tolist() == [
        v for s, c in zip(starts.tolist(), counts.tolist()) for v in range(s, s + c)]
    assert np_segment_arange(counts.numpy()).tolist() == segment_arange(counts).tolist()
    empty = torch.zeros(0, dtype=torch.long)
    assert segment_ptr(empty).tolist() == [0] and segment_arange(empty).numel() == 0


# ----------------------------------------------------------------------------- building

def test_the_direction_orders_are_pinned():
    """The order of the directed edges decides the order of a GNN's sums (and so its floats):
    blocked (collate, the Δ and refine copies) and interleaved (the greedy prefixes)."""
    a = Instance(x=torch.zeros(3, 1), pairs=torch.tensor([[0, 1], [1, 2]]), y=0, target=2,
                 edge_attr=torch.tensor([1.0, 2.0]))
    b = Instance(x=torch.ones(2, 1), pairs=torch.tensor([[0], [1]]), y=0, target=0,
                 edge_attr=torch.tensor([3.0]))
    p = PackedGraphs.from_instances([a, b])
    assert p.pairs.tolist() == [[0, 1, 3], [1, 2, 4]]
    assert p.node_ptr.tolist() == [0, 3, 5] and p.pair_ptr.tolist() == [0, 2, 3]
    assert p.targets.tolist() == [2, 3]
    assert p.edge_attr.tolist() == [[1.0], [2.0], [3.0]]
    blocked = p.forward_batch()
    assert blocked.edge_index.tolist() == [[0, 1, 3, 1, 2, 4], [1, 2, 4, 0, 1, 3]]
    assert blocked.edge_attr.view(-1).tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    assert blocked.batch.tolist() == [0, 0, 0, 1, 1] and blocked.target_index.tolist() == [2, 3]
    inter = p.forward_batch(interleaved=True)
    assert inter.edge_index.tolist() == [[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]]
    assert inter.edge_attr.view(-1).tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    masked = p.forward_batch(torch.tensor([True, False, True]))
    assert masked.edge_index.tolist() == [[0, 3, 1, 4], [1, 4, 0, 3]]
    assert masked.edge_attr.view(-1).tolist() == [1.0, 3.0, 1.0, 3.0]


@pytest.mark.parametrize("node_task", [True, False])
def test_from_instances_offsets_pointers_and_owners(node_task):
    insts = random_instances(7, node_task)
    p = PackedGraphs.from_instances(insts)
    assert p.num_instances == 7 and p.task == ("node" if node_task else "graph")
    assert p.num_nodes == sum(i.num_nodes for i in insts)
    assert p.num_pairs == sum(i.num_pairs for i in insts)
    assert p.node_counts().tolist() == [i.num_nodes for i in insts]
    assert p.pair_counts().tolist() == [i.num_pairs for i in insts]
    assert p.node_owner().tolist() == [c for c, i in enumerate(insts) for _ in range(i.num_nodes)]
    assert p.pair_owner().tolist() == [c for c, i in enumerate(insts) for _ in range(i.num_pairs)]
    for i, (inst, x, local) in enumerate(zip(insts, p.split_nodes(p.x),
                                             p.split_pairs(p.local_pairs(), dim=1))):
        assert torch.equal(x, inst.x) and torch.equal(local, inst.pairs)
        lo, hi = int(p.pair_ptr[i]), int(p.pair_ptr[i + 1])
        assert torch.equal(p.pairs[:, lo:hi], inst.pairs + int(p.node_ptr[i]))
        assert torch.equal(p.edge_attr[lo:hi], inst.edge_attr)
    if node_task:
        assert p.local_targets().tolist() == [i.target for i in insts]
    else:
        assert p.targets is None and p.local_targets() is None
    again = PackedGraphs.from_segments(p.x, p.local_pairs(), p.node_counts(), p.pair_counts(),
                                       p.local_targets(), p.edge_attr)
    for name in ("x", "pairs", "node_ptr", "pair_ptr", "targets", "edge_attr"):
        a, b = getattr(p, name), getattr(again, name)
        assert (a is None and b is None) or torch.equal(a, b), name


def test_edge_feature_policy_and_errors():
    insts = random_instances(3, True)
    bare = random_instances(2, True, seed=1, edge_attr=False)
    assert PackedGraphs.from_instances(insts).edge_attr is not None
    assert PackedGraphs.from_instances(insts, edge_attr=False).edge_attr is None
    assert PackedGraphs.from_instances(insts + bare).edge_attr is None  # not every instance has them
    with pytest.raises(ValueError, match="edge features"):
        PackedGraphs.from_instances(insts + bare, edge_attr=True)
    with pytest.raises(ValueError, match="edge features"):
        PackedGraphs.from_instances(bare).forward_batch(edge_attr=True)
    assert PackedGraphs.from_instances(insts).forward_batch(edge_attr=False).edge_attr is None
    with pytest.raises(ValueError, match="empty"):
        PackedGraphs.from_instances([])
    with pytest.raises(ValueError, match="node-task and graph-task"):
        PackedGraphs.from_instances(random_instances(1, True) + random_instances(1, False))
    with pytest.raises(ValueError, match="outside its nodes"):
        PackedGraphs.from_instances([Instance(x=torch.zeros(2, 1), pairs=torch.zeros(2, 0,
                                              dtype=torch.long), y=0, target=5)])
    with pytest.raises(ValueError, match="pair mask"):
        PackedGraphs.from_instances(insts).forward_batch(torch.ones(1, dtype=torch.bool))


def test_float_features_keeps_float32_and_converts_the_rest():
    insts = random_instances(3, False)
    p = PackedGraphs.from_instances(insts)
    assert p.float_features() is p
    double = PackedGraphs.from_instances([Instance(x=i.x.double(), pairs=i.pairs, y=0)
                                          for i in insts])
    assert double.x.dtype == torch.float64  # the target gets the features as given
    assert double.float_features().x.dtype == torch.float32


# ----------------------------------------------------------------------------- forward batches

@pytest.mark.parametrize("node_task", [True, False])
@pytest.mark.parametrize("interleaved", [False, True])
def test_forward_batch_equals_the_one_by_one_reference(node_task, interleaved):
    insts = random_instances(9, node_task, seed=3)
    gen = torch.Generator().manual_seed(4)
    masks = [torch.rand(i.num_pairs, generator=gen) < 0.5 for i in insts]
    p = PackedGraphs.from_instances(insts)
    assert_same_batch(p.forward_batch(interleaved=interleaved),
                      reference_batch(insts, [range(i.num_pairs) for i in insts], interleaved))
    kept = [torch.nonzero(m).view(-1).tolist() for m in masks]
    assert_same_batch(p.forward_batch(torch.cat(masks), interleaved=interleaved),
                      reference_batch(insts, kept, interleaved))
    # collate is the blocked forward batch of the packed instances
    if not interleaved:
        assert_same_batch(collate(insts, masks), reference_batch(insts, kept))
        assert_same_batch(collate(insts, [m.float() for m in masks]), reference_batch(insts, kept))


def test_collate_checks_its_masks():
    insts = random_instances(3, True)
    with pytest.raises(ValueError, match="one pair mask per instance"):
        collate(insts, [torch.ones(insts[0].num_pairs, dtype=torch.bool)])
    bad = [torch.ones(i.num_pairs + 1, dtype=torch.bool) for i in insts]
    with pytest.raises(ValueError, match="pair mask"):
        collate(insts, bad)


@pytest.mark.parametrize("node_task", [True, False])
def test_copies_batch_keeps_the_given_pairs_in_the_given_order(node_task):
    insts = random_instances(6, node_task, seed=5)
    p = PackedGraphs.from_instances(insts)
    gen = np.random.default_rng(0)
    inst = torch.tensor([4, 0, 4, 2, 5])  # repeats allowed
    lists = []
    for i in inst.tolist():
        k = insts[i].num_pairs
        lists.append(gen.permutation(k)[: gen.integers(0, k + 1)].tolist())  # any order
    pair_index = torch.tensor([int(p.pair_ptr[i]) + j for i, js in zip(inst.tolist(), lists)
                               for j in js], dtype=torch.long)
    pair_copy = torch.tensor([c for c, js in enumerate(lists) for _ in js], dtype=torch.long)
    got = p.copies_batch(inst, pair_index, pair_copy)
    assert_same_batch(got, reference_batch([insts[i] for i in inst.tolist()], lists))
    assert p.copies_batch(inst, pair_index, pair_copy, edge_attr=False).edge_attr is None


@pytest.mark.parametrize("node_task", [True, False])
def test_prefix_batches_equal_the_forward_batch_of_the_prefix(node_task):
    insts = random_instances(8, node_task, seed=6)
    p = PackedGraphs.from_instances(insts)
    batches = p.prefix_batches("cpu")
    gen = np.random.default_rng(1)
    for m in (1, 3, 8):
        prefix = p.select(torch.arange(m))
        assert_same_batch(batches(m), prefix.forward_batch(interleaved=True))
        mask = gen.random(prefix.num_pairs) < 0.5
        assert_same_batch(batches(m, mask),
                          prefix.forward_batch(torch.from_numpy(mask), interleaved=True))


# ----------------------------------------------------------------------------- subsets

@pytest.mark.parametrize("node_task", [True, False])
def test_select_equals_packing_the_subset(node_task):
    insts = random_instances(7, node_task, seed=7)
    p = PackedGraphs.from_instances(insts)
    idx = torch.tensor([5, 1, 1, 6, 0])
    sub = p.select(idx)
    ref = PackedGraphs.from_instances([insts[i] for i in idx.tolist()])
    for name in ("x", "pairs", "node_ptr", "pair_ptr", "targets", "edge_attr"):
        a, b = getattr(sub, name), getattr(ref, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert torch.equal(p.x[p.node_positions(idx)], sub.x)
    assert torch.equal(p.edge_attr[p.pair_positions(idx)], sub.edge_attr)


# ----------------------------------------------------------------------------- the users

def test_the_users_build_on_the_packing():
    from gem_core.gem.distill.layout import _Layout
    from gem_core.gem.labeling import pack

    insts = random_instances(6, True, seed=8)
    p = PackedGraphs.from_instances(insts)
    labelled = pack(insts)
    assert isinstance(labelled, PackedGraphs) and torch.equal(labelled.pairs, p.pairs)
    layout = _Layout.build(insts, edge_attr=True)
    assert torch.equal(layout.packed.pairs, p.pairs)
    assert torch.equal(layout.local_pairs, torch.cat([i.pairs for i in insts], dim=1))
    assert layout.targets.tolist() == [i.target for i in insts]
    assert layout.labels.tolist() == [i.y for i in insts]
    assert _Layout.build(insts).packed.edge_attr is None  # the target reads no edge features
    graph_layout = _Layout.build(random_instances(3, False))
    assert graph_layout.targets.tolist() == [-1, -1, -1]
    sub = layout.select(torch.tensor([3, 0]))
    assert torch.equal(sub.packed.pairs, p.select(torch.tensor([3, 0])).pairs)
    assert sub.labels.tolist() == [insts[3].y, insts[0].y]
