"""Outside models (target GNNs nobody tuned Gem for) and ``bench outside``: the models, the edge
masks read back per pair, a small end-to-end run, and input checks before torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

from gem_core.cli import bench_outside
from gem_core.data.datasets import load_dataset
from gem_core.data.protocol import PROTOCOLS
from gem_core.evaluation.outside import (OUTSIDE_METHODS, OUTSIDE_MODELS, bond_kwargs, instances_of,
                                         outside_model, pair_scores, run_outside,
                                         train_outside_model)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mutagenicity():
    return load_dataset("mutagenicity")


def test_light_copies_agree_with_the_engine():
    assert bench_outside.MODELS == tuple(OUTSIDE_MODELS)
    assert bench_outside.METHODS == OUTSIDE_METHODS
    assert set(bench_outside.PROTOCOLS) == set(PROTOCOLS)


def test_bad_input_is_refused_before_torch():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gem_core", "bench",
                           "outside", "--models", "gcn_max,graphormer"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if not l.startswith("import time:")]
    assert lines == ["error: unknown model 'graphormer'; choose from gcn_max, gin, sage, gine, gatv2, "
                     "gat, transformer, attentivefp"]
    imported = {l.rsplit("|", 1)[1].strip().split(".")[0] for l in proc.stderr.splitlines()
                if l.startswith("import time:") and "|" in l}
    assert not imported & {"torch", "torch_geometric"}


def test_edge_masks_are_read_back_per_undirected_pair(mutagenicity):
    graphs = mutagenicity.graphs[:4]
    instances = instances_of(graphs)
    b = Batch.from_data_list(graphs)
    gen = torch.Generator().manual_seed(0)
    want = [torch.rand(inst.num_pairs, generator=gen) for inst in instances]
    # write each pair's score to both directed edges of the batch
    offset, mask = 0, torch.zeros(b.edge_index.size(1))
    for g, inst, w in zip(graphs, instances, want):
        lookup = {(int(u), int(v)): float(s) for (u, v), s in zip(inst.pairs.t(), w)}
        for e in range(g.edge_index.size(1)):
            u, v = sorted(g.edge_index[:, e].tolist())
            mask[offset + e] = lookup[(u, v)]
        offset += g.edge_index.size(1)
    got = pair_scores(b.num_nodes, b.edge_index, mask, b.ptr)
    assert len(got) == len(want)
    for a, w in zip(got, want):
        assert torch.equal(a, w)


@pytest.mark.parametrize("name", list(OUTSIDE_MODELS))
def test_every_recipe_trains_reproducibly_on_a_few_molecules(mutagenicity, name):
    from types import SimpleNamespace

    split = SimpleNamespace(train=torch.arange(0, 60), val=torch.arange(60, 80),
                            test=torch.arange(80, 100))
    a, acc = train_outside_model(name, mutagenicity.graphs, split, seed=1, epochs=2)
    b, _ = train_outside_model(name, mutagenicity.graphs, split, seed=1, epochs=2)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert set(acc) == {"train", "val", "test"} and all(0 <= v <= 1 for v in acc.values())
    g = Batch.from_data_list(mutagenicity.graphs[:3])
    assert a(g.x, g.edge_index, g.batch, **bond_kwargs(a, g)).shape == (3, 2)


def test_bench_outside_end_to_end_on_a_small_run(mutagenicity, tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path))
    result = run_outside("gcn_max", mutagenicity, protocols=PROTOCOLS, split="val", limit=12,
                         train_limit=40, model_epochs=2, gem_options={"epochs": 3},
                         stability_seeds=(0, 1))
    assert result["instances"] == 12 and set(result["protocols"]) == set(PROTOCOLS)
    for protocol, rows in result["protocols"].items():
        assert [r["method"] for r in rows] == list(OUTSIDE_METHODS)
        for r in rows:
            assert set(r["sufficiency_at_k"]) == {str(k) for k in range(5, 26)}
            assert set(r["necessity_at_k"]) == {str(k) for k in range(2, 11)}
            assert all(0 <= v <= 1 for v in r["sufficiency_at_k"].values())
        gem = rows[0]
        assert gem["options"]["settings"]["teacher.protocol"] == protocol  # Gem is taught for how it is judged
        stab = gem["stability"]
        assert stab["seeds"] == [0, 1] and all(0 <= stab[str(k)] <= 1 for k in (5, 10, 25))
        assert "stability" not in rows[1]
        lines = bench_outside.checks(rows)
        assert lines and all(l.strip().startswith(("PASS", "MISS")) for l in lines)
    # the trained model came from (and went into) the store: a second call loads it
    model, acc = outside_model("gcn_max", mutagenicity, epochs=2)
    assert acc == result["accuracy"]
    assert any((tmp_path / "outside_models").iterdir())
