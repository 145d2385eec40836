"""Cover-first order (gem_core.gem.cover_order, ``network.order = "cover"``): Gem's ranking read so
that each next pair touches a node the explanation lacks, while one does; no target query."""
import pytest
import torch

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs
from gem_core.data.ranking import ranked_pairs, topk_mask
from gem_core.gem.cover_order import cover_first, cover_first_scores
from gem_core.gem.settings import GemSettings, PairOrder


def _path(n):
    """A path 0 - 1 - ... - n-1: pair j joins nodes j and j + 1."""
    pairs = torch.tensor([[j, j + 1] for j in range(n - 1)]).t().contiguous()
    return Instance(x=torch.ones(n, 1), pairs=pairs, y=0)


def test_a_pair_that_touches_no_new_node_waits_for_those_that_do():
    # a triangle 0-1-2 with a tail 2-3-4: Gem ranks the triangle's pairs first
    pairs = torch.tensor([[0, 1], [1, 2], [0, 2], [2, 3], [3, 4]]).t()
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
    # (0, 2) closes the triangle (both nodes touched): it waits until no pair brings a node
    assert cover_first(pairs, scores) == [0, 1, 3, 4, 2]
    # Gem's order is kept where every pair brings a node, and ties keep the lower index first
    assert cover_first(_path(5).pairs, torch.tensor([0.2, 0.9, 0.2, 0.5])) == [1, 3, 0, 2]


def test_cover_first_scores_keep_gems_values_and_every_top_k_reads_the_new_order():
    a, b = _path(4), Instance(x=torch.ones(4, 1), pairs=torch.tensor([[0, 1], [0, 2], [1, 2], [2, 3]]).t(), y=0)
    packed = PackedGraphs.from_instances([a, b])
    scores = torch.tensor([0.3, 0.2, 0.1, 0.9, 0.8, 0.7, 0.6])
    out = cover_first_scores(packed, scores)
    assert torch.equal(torch.sort(out).values, torch.sort(scores).values)  # the same values
    first, second = packed.split_pairs(out)
    assert ranked_pairs(first, 3) == [0, 1, 2]  # a path: Gem's order already covers
    # b: (0, 1) and (0, 2) touch nodes 0-2, so (1, 2) waits behind (2, 3), which brings node 3
    assert ranked_pairs(second, 4) == [0, 1, 3, 2]
    for k in range(1, 5):  # the top-k of each k touches at least as many nodes as Gem's
        mine, gems = topk_mask(second, k), topk_mask(scores[3:], k)
        assert b.pairs[:, mine].unique().numel() >= b.pairs[:, gems].unique().numel()


def test_the_order_is_a_setting_read_when_explaining_and_not_part_of_a_fit():
    cover = GemSettings().with_overrides({"network.order": "cover"})
    assert cover.network.order is PairOrder.cover and GemSettings().network.order is PairOrder.score
    assert cover.key_parts() == GemSettings().key_parts()  # a fitted Gem serves both orders
    assert not cover.asks_target
    with pytest.raises(ValueError, match="network.order"):
        GemSettings().with_overrides({"network.order": "spread"})


def test_the_explain_path_reads_the_order_without_asking_the_target():
    """explain_packed with ``network.order = "cover"``: the auto-encoder's scores re-read in
    cover-first order, and no black box is needed (Gem's one pass)."""
    from gem_core.gem.autoencoder import GemAutoEncoder
    from gem_core.gem.explain import explain_packed

    insts = [_path(6), Instance(x=torch.ones(5, 1), pairs=torch.tensor(
        [[0, 1], [0, 2], [1, 2], [2, 3], [3, 4]]).t(), y=0)]
    gem = GemAutoEncoder(max_epochs=2, seed=0)
    gem.fit(insts, [torch.rand(i.num_pairs, generator=torch.Generator().manual_seed(1))
                    for i in insts])
    packed = PackedGraphs.from_instances(insts)
    plain = explain_packed(gem, GemSettings(), (2,), packed)
    cover = explain_packed(gem, GemSettings().with_overrides({"network.order": "cover"}), (2,),
                           packed)
    assert torch.equal(cover, cover_first_scores(packed, plain))


@pytest.mark.parametrize("ties", [False, True])
def test_the_batched_order_equals_each_instance_ordered_alone(ties):
    """cover_first_scores goes down every instance's ranking at once; it gives what
    cover_first and the check's reassignment give one instance at a time, ties included
    (Gem gives symmetric bonds equal scores)."""
    from gem_core.gem.checked_ranking import reassign_scores

    g = torch.Generator().manual_seed(3)
    insts = []
    for n in (2, 5, 9, 14):
        pairs = sorted({tuple(sorted(p)) for p in torch.randint(0, n, (2 * n, 2), generator=g).tolist()
                        if p[0] != p[1]} | {(j, j + 1) for j in range(n - 1)})
        insts.append(Instance(x=torch.ones(n, 1), pairs=torch.tensor(pairs).t().contiguous(), y=0))
    packed = PackedGraphs.from_instances(insts)
    scores = torch.rand(packed.num_pairs, generator=g)
    if ties:
        scores = (scores * 3).round() / 3
    counts = packed.pair_counts()
    ranking = torch.full((len(insts), int(counts.max())), -1, dtype=torch.long)
    for i, (inst, part) in enumerate(zip(insts, packed.split_pairs(scores))):
        ranking[i, : inst.num_pairs] = torch.tensor(cover_first(inst.pairs, part))
    assert torch.equal(cover_first_scores(packed, scores),
                       reassign_scores(packed, scores, ranking, counts))
