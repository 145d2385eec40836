"""Gem explainer and its input labels: learning, batching, persistence, edge cases."""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from gem_core.gem.autoencoder import EXPLAINER_KIND, GemAutoEncoder, NotFittedError
from gem_core.gem.network import normalized_adjacency
from gem_core.data.instances import Instance, to_pairs
from gem_core.gem.labeling import (UNREACHABLE, WLLabeler, hop_labels, hop_one_hot, pack, select,
                                   wl_colors)

torch.set_num_threads(1)


# ----------------------------------------------------------------------------- synthetic data

def make_instance(edges: list[tuple[int, int]], n: int, types=None, target=None, num_types: int = 3):
    ei = torch.tensor(edges, dtype=torch.long).t() if edges else torch.zeros(2, 0, dtype=torch.long)
    pairs, _ = to_pairs(ei, n)
    types = torch.zeros(n, dtype=torch.long) if types is None else torch.as_tensor(types)
    x = F.one_hot(types, num_types).float()
    return Instance(x=x, pairs=pairs, y=0, target=target)


def motif_instance(gen: torch.Generator, node_task: bool) -> Instance:
    """A random tree (+2 random edges) of unmarked nodes with a planted 5-cycle of marked nodes.

    The planted signal: motif edges weigh 1, all others 0 (``motif_mask``). Node task: the
    target is a random motif node.
    """
    n_base = int(torch.randint(6, 14, (1,), generator=gen))
    src = list(range(1, n_base))
    dst = [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n_base)]
    extra = torch.randint(0, n_base, (2, 2), generator=gen)
    src += extra[0].tolist()
    dst += extra[1].tolist()
    motif = list(range(n_base, n_base + 5))
    src += motif + [motif[0]]
    dst += motif[1:] + motif[:1] + [int(torch.randint(0, n_base, (1,), generator=gen))]
    n = n_base + 5
    pairs, _ = to_pairs(torch.tensor([src, dst]), n)
    types = torch.cat([1 + torch.randint(0, 2, (n_base,), generator=gen), torch.zeros(5, dtype=torch.long)])
    target = motif[int(torch.randint(0, 5, (1,), generator=gen))] if node_task else None
    return Instance(x=F.one_hot(types, 3).float(), pairs=pairs, y=0, target=target,
                    motif_mask=(pairs >= n_base).all(0))


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    pos, neg = scores[labels > 0.5], scores[labels <= 0.5]
    return float((pos[:, None] > neg[None]).float().mean()
                 + 0.5 * (pos[:, None] == neg[None]).float().mean())


def planted(task: str, count: int = 90, seed: int = 0) -> list[Instance]:
    gen = torch.Generator().manual_seed(seed)
    return [motif_instance(gen, task == "node") for _ in range(count)]


@pytest.fixture(scope="module", params=["graph", "node"])
def fitted(request):
    """(explainer, train, val, test) fitted on the planted motif signal (60 / 10 / 20 instances)."""
    ins = planted(request.param)
    weights = [i.motif_mask.float() for i in ins]
    ex = GemAutoEncoder(lr=0.01, max_epochs=60, patience=60, seed=0)
    out = ex.fit(ins[:60], weights[:60], ins[60:70], weights[60:70])
    assert out is ex
    return ex, ins[:60], ins[60:70], ins[70:]


# ----------------------------------------------------------------------------- learning

def test_learns_planted_motif_signal(fitted):
    ex, _, _, test = fitted
    scores = ex.explain(test)
    assert [s.shape for s in scores] == [(i.num_pairs,) for i in test]
    s, y = torch.cat(scores), torch.cat([i.motif_mask.float() for i in test])
    assert float(s.min()) >= 0.0 and float(s.max()) <= 1.0
    mse = float(((s - y) ** 2).mean())
    assert mse < 0.3 * float(y.var())  # explains most of the variance on held-out graphs
    assert auc(s, y) > 0.97
    # per instance, the top-5 edges are (almost always) the motif's 5 edges
    hits = [float(i.motif_mask[sc.topk(5).indices].float().mean()) for i, sc in zip(test, scores)]
    assert sum(hits) / len(hits) > 0.9
    h = ex.history_
    assert h["monitored"] == "val" and 1 <= h["best_epoch"] <= h["epochs"] <= 60
    assert h["val_loss"][h["best_epoch"] - 1] == pytest.approx(h["best_loss"])


def test_batch_invariance(fitted):
    ex, _, _, test = fitted
    together = ex.explain(test)
    alone = [ex.explain([inst])[0] for inst in test]
    for a, b in zip(together, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # the prepared path gives the same scores
    for a, b in zip(together, ex.explain(ex.prepare(test))):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_chunked_explain_matches_one_pass(fitted):
    ex, _, _, test = fitted
    state = ex.to_state()
    small = GemAutoEncoder.from_state(state)
    small.max_nodes_per_pass = 40  # forces several chunks
    for a, b in zip(ex.explain(test), small.explain(test)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_cpu_explains_in_cache_sized_runs(fitted, monkeypatch):
    """On the CPU a collection goes through in runs of at most NODES_PER_FORWARD nodes, however
    many max_nodes_per_pass allows; the scores are those of one pass."""
    import gem_core.gem.autoencoder as autoencoder_module

    ex, _, _, test = fitted
    assert ex.device_.type == "cpu" and ex.max_nodes_per_pass > 40
    one_pass = ex.explain(test)
    monkeypatch.setattr(autoencoder_module, "NODES_PER_FORWARD", 40)
    runs, forward = [], GemAutoEncoder._forward

    def counted(self, prep):
        runs.append(int(prep.packed.num_nodes))
        return forward(self, prep)

    monkeypatch.setattr(GemAutoEncoder, "_forward", counted)
    in_runs = ex.explain(test)
    assert len(runs) > 1 and max(runs) <= 40
    assert sum(runs) == sum(int(i.num_nodes) for i in test)
    for a, b in zip(one_pass, in_runs):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_save_load_round_trip_identical(fitted, tmp_path):
    ex, _, _, test = fitted
    state = ex.to_state()
    assert state["kind"] == EXPLAINER_KIND
    path = tmp_path / "gem.pt"
    torch.save(state, path)
    loaded = torch.load(path, weights_only=True)
    ex2 = GemAutoEncoder.from_state(loaded)
    for a, b in zip(ex.explain(test), ex2.explain(test)):
        assert torch.equal(a, b)
    assert ex2.get_params() == {**ex.get_params(), "hidden": tuple(ex.hidden)}
    if ex.task_ == "graph":
        assert ex2.labeler_.num_columns_ == ex.labeler_.num_columns_
    with pytest.raises(ValueError, match="gem-explainer"):
        GemAutoEncoder.from_state({"kind": "gem-target"})


def test_zero_pair_and_isolated_target(fitted):
    ex, _, _, test = fitted
    if ex.task_ == "graph":
        empty = make_instance([], 3, types=[0, 1, 2])
    else:  # the computation graph of an isolated node: the node alone
        empty = make_instance([], 1, types=[1], target=0)
    out = ex.explain([empty])
    assert len(out) == 1 and out[0].shape == (0,)
    mixed = ex.explain([test[0], empty, test[1]])
    assert [o.numel() for o in mixed] == [test[0].num_pairs, 0, test[1].num_pairs]
    torch.testing.assert_close(mixed[0], ex.explain([test[0]])[0], atol=1e-5, rtol=0)
    assert ex.explain([]) == []


def test_explain_rejects_other_task(fitted):
    ex, _, _, test = fitted
    other = make_instance([(0, 1)], 2, target=None if ex.task_ == "node" else 0)
    with pytest.raises(ValueError, match="task"):
        ex.explain([other])


# ----------------------------------------------------------------------------- estimator contract

def test_fit_returns_self_and_explain_before_fit_raises():
    ex = GemAutoEncoder(max_epochs=2)
    assert not hasattr(ex, "model_")  # no work in __init__
    inst = make_instance([(0, 1), (1, 2)], 3, types=[0, 1, 2])
    with pytest.raises(NotFittedError, match="fit"):
        ex.explain([inst])
    with pytest.raises(NotFittedError):
        ex.to_state()
    calls = []
    assert ex.fit([inst], [torch.tensor([1.0, 0.0])], progress=lambda f, m: calls.append(f)) is ex
    assert calls and calls[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in calls)
    assert ex.history_["monitored"] == "train"
    assert ex.explain([inst])[0].shape == (2,)


def test_fit_validates_weights():
    inst = make_instance([(0, 1), (1, 2)], 3)
    ex = GemAutoEncoder(max_epochs=1)
    with pytest.raises(ValueError, match="pairs"):
        ex.fit([inst], [torch.tensor([1.0])])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ex.fit([inst], [torch.tensor([1.5, 0.0])])
    with pytest.raises(ValueError, match="one weight tensor"):
        ex.fit([inst, inst], [torch.tensor([1.0, 0.0])])


def test_fit_is_reproducible():
    ins = planted("graph", count=20, seed=3)
    w = [i.motif_mask.float() for i in ins]
    a = GemAutoEncoder(max_epochs=3, seed=7).fit(ins, w).to_state()["state_dict"]
    b = GemAutoEncoder(max_epochs=3, seed=7).fit(ins, w).to_state()["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_ensemble_scores_the_mean_of_its_members_and_its_first_member_is_the_plain_gem(
        tmp_path):
    from gem_core.gem.autoencoder import member_seed
    from gem_core.gem.training import forward_pass

    ins = planted("graph", count=24, seed=5)
    w = [i.motif_mask.float() for i in ins]
    one = GemAutoEncoder(max_epochs=4, seed=3).fit(ins[:16], w[:16], ins[16:20], w[16:20])
    three = GemAutoEncoder(max_epochs=4, seed=3, ensemble=3).fit(ins[:16], w[:16], ins[16:20],
                                                                 w[16:20])
    assert len(three.models_) == 3 and len(three.history_["members"]) == 3
    first = one.to_state()["state_dict"]
    assert all(torch.equal(first[k], v) for k, v in three.models_[0].state_dict().items())
    others = [m.state_dict()["decoder_bias"] for m in three.models_]
    assert not torch.equal(others[1], others[2])  # members start from different seeds
    prep = three.prepare(ins[20:])
    members = torch.stack([forward_pass(m, prep, 0, "cpu")[0] for m in three.models_])
    got = torch.cat(three.explain(ins[20:]))
    assert torch.allclose(got, members.mean(0), atol=1e-6)
    assert not torch.allclose(got, members[0], atol=1e-4)
    # saved and loaded whole; a file missing a member is refused, not half-loaded
    state = three.to_state()
    torch.save(state, tmp_path / "gem.pt")
    again = GemAutoEncoder.from_state(torch.load(tmp_path / "gem.pt", weights_only=True))
    assert torch.equal(torch.cat(again.explain(ins[20:])), got)
    with pytest.raises(ValueError, match="2 trained network.*ensemble of 3"):
        GemAutoEncoder.from_state({**state, "member_state_dicts": state["member_state_dicts"][:1]})
    # Gems of different seeds share no member (stability across seeds compares whole ensembles)
    seeds = [member_seed(s, j) for s in range(5) for j in range(5)]
    assert len(set(seeds)) == len(seeds) and member_seed(4, 0) == 4


def test_ensemble_is_a_validated_setting():
    from gem_core.gem.settings import GemSettings

    assert GemSettings().with_overrides({"network.ensemble": 3}).autoencoder_params()["ensemble"] == 3
    assert "ensemble" not in GemSettings().key_parts()["params"]  # shipped Gems keep their keys
    assert GemSettings().with_overrides({"network.ensemble": 3}).key_parts()["params"]["ensemble"] == 3
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="GemSettings.network.ensemble"):
            GemSettings().with_overrides({"network.ensemble": bad})


@pytest.mark.parametrize("task", ["graph", "node"])
def test_mlp_decoder_and_degree_features(task):
    from gem_core.gem.inputs import DEGREE_BUCKETS, degree_columns

    ins = planted(task, count=40, seed=5)
    w = [i.motif_mask.float() for i in ins]
    ex = GemAutoEncoder(lr=0.01, max_epochs=40, patience=40, decoder="mlp", degree_features=True,
                      seed=0).fit(ins[:30], w[:30])
    plain = GemAutoEncoder(max_epochs=1, seed=0).fit(ins[:30], w[:30])
    assert ex.label_dim_ == plain.label_dim_ + DEGREE_BUCKETS
    prep = ex.prepare(ins[30:])
    assert prep.cols.shape[1] == plain.prepare(ins[30:]).cols.shape[1] + 1
    assert int(prep.cols.max()) < ex.label_dim_
    s, y = torch.cat(ex.explain(ins[30:])), torch.cat([i.motif_mask.float() for i in ins[30:]])
    assert auc(s, y) > 0.9
    ex2 = GemAutoEncoder.from_state(ex.to_state())
    for a, b in zip(ex.explain(ins[30:]), ex2.explain(ins[30:])):
        assert torch.equal(a, b)
    # degree buckets: exact below 8, then one per power of two, capped
    for d, bucket in [(0, 0), (1, 1), (7, 7), (8, 8), (15, 8), (16, 9), (63, 10), (64, 11),
                      (1000, 11)]:
        star = torch.stack([torch.zeros(d, dtype=torch.long), torch.arange(1, d + 1)])
        assert int(degree_columns(star, d + 1)[0]) == bucket
    with pytest.raises(ValueError, match="decoder"):
        GemAutoEncoder(decoder="bilinear").fit(ins[:2], w[:2])


def test_for_dataset_uses_spec_settings():
    from gem_core.data.config import get_spec
    from gem_core.gem.presets import PRESETS, dataset_settings

    ba = dataset_settings(get_spec("ba_shapes"))
    assert GemAutoEncoder.from_settings(ba).lr == ba.training.lr
    assert ba.training.lr == PRESETS[get_spec("ba_shapes").gem["preset"]].training.lr
    nci = dataset_settings(get_spec("nci1"))
    assert GemAutoEncoder.from_settings(nci, patience=5).get_params()["patience"] == 5


# ----------------------------------------------------------------------------- model maths

def test_encoder_equals_pyg_gcnconv_on_dense_inputs():
    """The label-lookup first layer + shared CSR normalisation = GCNConv on [one-hot | x]."""
    ins = planted("graph", count=4, seed=1)
    # a CPU reference below, so the explainer stays on the CPU even where CUDA is present
    ex = GemAutoEncoder(max_epochs=1, device="cpu").fit(ins, [i.motif_mask.float() for i in ins])
    prep = ex.prepare(ins)
    p, model = prep.packed, ex.model_
    dense = torch.zeros(p.num_nodes, model.label_dim)
    dense.scatter_add_(1, prep.cols, torch.ones(prep.cols.shape))
    inp = torch.cat([dense, p.x], dim=1)
    ref = GCNConv(inp.size(1), 32)
    ref.lin.weight.data.copy_(model.convs[0].lin.weight.data)
    ref.bias.data.copy_(model.convs[0].bias.data)
    adj = normalized_adjacency(p.pairs, p.num_nodes)
    with torch.no_grad():
        ours = model._first_layer(prep.cols, p.x, adj)
        theirs = ref(inp, p.edge_index())
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # decoder: σ(z_u·z_v + b) read on the pairs equals the dense σ(Z Zᵀ + b) at those entries
    z = torch.randn(p.num_nodes, 16)
    with torch.no_grad():
        dense_scores = torch.sigmoid(z @ z.t() + model.decoder_bias)
        torch.testing.assert_close(model.decode(z, p.pairs), dense_scores[p.pairs[0], p.pairs[1]])


def test_normalized_adjacency_is_gcn_normalisation():
    inst = make_instance([(0, 1), (1, 2), (1, 3)], 5)
    adj = normalized_adjacency(inst.pairs, 5).to_dense()
    a = torch.zeros(5, 5)
    a[inst.pairs[0], inst.pairs[1]] = 1
    a = a + a.t() + torch.eye(5)
    d = a.sum(1).rsqrt()
    torch.testing.assert_close(adj, d[:, None] * a * d[None, :])


# ----------------------------------------------------------------------------- labels

def test_hop_labels_on_hand_graph():
    # 0-1-2-3-4 path, 1-5 branch, node 6 isolated; target 1 (hop labels within one instance)
    inst = make_instance([(0, 1), (1, 2), (2, 3), (3, 4), (1, 5)], 7, target=1)
    other = make_instance([(0, 1)], 2, target=1)
    d1, d2 = hop_labels([inst, other], num_hops=2)
    assert d1.tolist() == [1, 0, 1, 2, UNREACHABLE, 1, UNREACHABLE]
    assert d2.tolist() == [1, 0]
    one_hot = hop_one_hot(d1, num_hops=2)
    assert one_hot.shape == (7, 4)
    assert one_hot.argmax(1).tolist() == [1, 0, 1, 2, 3, 1, 3]  # last column: farther / unreachable
    assert hop_labels([inst], num_hops=3)[0].tolist() == [1, 0, 1, 2, 3, 1, UNREACHABLE]
    with pytest.raises(ValueError):
        hop_labels([make_instance([(0, 1)], 2)])


def test_wl_equal_colours_for_isomorphic_neighbourhoods():
    path = make_instance([(0, 1), (1, 2), (2, 3), (3, 4)], 5)
    cyc = make_instance([(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)], 5)
    # the same path of 5 nodes, relabelled, inside another graph with a far-away extra part
    other = make_instance([(4, 2), (2, 0), (0, 3), (3, 1), (5, 6)], 7)
    p = pack([path, cyc, other])
    colors = wl_colors(p.x, p.pairs, 3)
    c = colors[:, 2]
    path_c, cyc_c, other_c = c[:5], c[5:10], c[10:]
    assert path_c[0] == path_c[4] and path_c[1] == path_c[3]
    assert len({path_c[0], path_c[1], path_c[2]}) == 3
    assert len(set(cyc_c.tolist())) == 1
    # a path's middle node and a 5-cycle's nodes have isomorphic 2-hop unfoldings: equal after
    # two rounds, told apart by the third
    assert cyc_c[0] == path_c[2] and colors[7, 3] != colors[2, 3]
    # other: path 4-2-0-3-1 → ends 4,1; next 2,3; middle 0 (same colours as in `path`)
    assert other_c[4] == path_c[0] and other_c[1] == path_c[0]
    assert other_c[2] == path_c[1] and other_c[3] == path_c[1] and other_c[0] == path_c[2]
    # colours do not depend on what else is packed
    alone = pack([other])
    assert (wl_colors(alone.x, alone.pairs, 2)[:, 2] == other_c).all()
    # node types matter
    typed = make_instance([(0, 1), (1, 2), (2, 3), (3, 4)], 5, types=[1, 0, 0, 0, 0])
    tp = pack([typed])
    assert wl_colors(tp.x, tp.pairs, 2)[0, 2] != path_c[0]


def test_wl_vocabulary_and_unseen_bucket():
    cyc = make_instance([(0, 1), (1, 2), (2, 0)], 3)
    path = make_instance([(0, 1), (1, 2)], 3)
    lab = WLLabeler(num_rounds=2, max_colors=300).fit([cyc, path, path])
    # round 1: "degree 1" and "degree 2" (cycle = path middle); round 2 tells all three apart
    assert [len(v) for v in lab.vocab_] == [2, 3]
    star = make_instance([(0, i) for i in range(1, 6)], 6)  # a degree-5 centre: never seen
    cols = lab.transform([star, path])
    unseen = lab.unseen_columns()
    assert cols[0][0].tolist() == unseen  # the centre's colours are unseen in every round
    assert (cols[1] != torch.tensor(unseen)).all()  # training structure keeps its columns
    assert lab.num_columns_ == sum(len(v) + 1 for v in lab.vocab_)
    hot = lab.one_hot([path])[0]
    assert hot.shape == (3, lab.num_columns_) and (hot.sum(1) == 2).all()
    # the cap keeps only the most frequent colours of a round
    capped = WLLabeler(num_rounds=1, max_colors=1).fit([path, path, cyc])
    c = capped.transform([path])[0][:, 0]
    assert c.tolist() == [1, 0, 1]  # "degree 2" (5 of 9 nodes) kept, path ends (4) unseen
    restored = WLLabeler.from_state(lab.to_state())
    assert all(torch.equal(a, b) for a, b in zip(restored.transform([star, path, cyc]),
                                                 lab.transform([star, path, cyc])))
    with pytest.raises(RuntimeError, match="fit"):
        WLLabeler().transform([path])


def test_select_matches_pack_of_subset():
    ins = planted("node", count=6, seed=2)
    p = pack(ins)
    idx = torch.tensor([4, 1, 3])
    sub, ref = select(p, idx), pack([ins[i] for i in idx])
    for name in ("x", "pairs", "node_ptr", "pair_ptr", "targets"):
        assert torch.equal(getattr(sub, name), getattr(ref, name)), name
