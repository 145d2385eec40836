import os

import pytest
import torch

from gem_core.data.config import UnknownDatasetError, get_spec
from gem_core.data.datasets import DataUnavailableError, load_dataset, random_split

from .conftest import requires_mutagenicity, requires_nci1


def _disjoint_cover(split, n):
    allidx = torch.cat([split.train, split.val, split.test])
    assert allidx.numel() == n
    assert torch.unique(allidx).numel() == n


def test_ba_shapes_shape_and_motifs():
    ds = load_dataset("ba_shapes")
    g = ds.graph
    assert g.num_nodes == 700
    assert torch.bincount(g.y).tolist() == [300, 160, 160, 80]
    assert ds.num_classes == 4
    # 80 houses: 6 edges each, both directions -> 960 directed motif edges
    assert int(g.motif_edge_mask.sum()) == 80 * 6 * 2
    # motif edges connect motif nodes only
    src, dst = g.edge_index[:, g.motif_edge_mask]
    assert bool((g.y[src] != 0).all() and (g.y[dst] != 0).all())
    _disjoint_cover(ds.split, 700)
    assert ds.split.sizes() == (560, 70, 70)
    for name in ("train", "val", "test"):
        assert bool((g.y[ds.explain_split[name]] != 0).all())
    assert sum(ds.explain_split.sizes()) == 400


def test_tree_cycles_shape_and_motifs():
    ds = load_dataset("tree_cycles")
    g = ds.graph
    assert g.num_nodes == 871
    assert torch.bincount(g.y).tolist() == [511, 360]
    assert int(g.motif_edge_mask.sum()) == 60 * 6 * 2
    # undirected: every edge has its reverse
    e = set(map(tuple, g.edge_index.t().tolist()))
    assert all((v, u) in e for u, v in e)
    assert sum(ds.explain_split.sizes()) == 360


def test_synthetic_generation_is_deterministic():
    a, b = load_dataset("ba_shapes"), load_dataset("ba_shapes")
    assert torch.equal(a.graph.edge_index, b.graph.edge_index)
    c = load_dataset("ba_shapes", seed=1)
    assert not torch.equal(a.graph.edge_index, c.graph.edge_index)


def test_random_split_sizes_and_seed():
    s = random_split(4337)
    assert s.sizes() == (3469, 434, 434)
    _disjoint_cover(s, 4337)
    assert torch.equal(s.test, random_split(4337).test)
    assert not torch.equal(s.test, random_split(4337, seed=3).test)


@requires_mutagenicity
def test_mutagenicity():
    ds = load_dataset("mutagenicity")
    assert len(ds) == 4337
    assert ds.num_features == 14 and ds.atom_symbols[3] == "H"
    assert torch.bincount(ds.labels()).tolist() == [2401, 1936]
    assert ds.split.sizes() == (3469, 434, 434)
    g = ds.graphs[0]
    assert g.edge_attr.size(1) == 3  # bond orders single / double / triple


@requires_nci1
def test_nci1():
    ds = load_dataset("nci1")
    assert len(ds) == 4110 and ds.num_features == 37 and ds.num_classes == 2
    assert ds.split.sizes() == (3288, 411, 411)


def test_unknown_dataset():
    with pytest.raises(UnknownDatasetError, match="ba_shapes"):
        get_spec("cora")
    assert get_spec("BA-shapes").name == "ba_shapes"


def test_missing_mutagenicity_names_dataset_folder_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataUnavailableError) as err:
        load_dataset("mutagenicity")
    msg = str(err.value)
    assert "Mutagenicity" in msg and str(tmp_path) in msg and "GEM_DATA_ROOT" in msg


@requires_mutagenicity
def test_data_root_is_never_written(tmp_path, monkeypatch):
    root = os.environ["GEM_DATA_ROOT"]
    before = sorted(os.listdir(os.path.join(root, "Mutagenicity")))
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "cache"))
    load_dataset("mutagenicity")
    assert sorted(os.listdir(os.path.join(root, "Mutagenicity"))) == before
    assert (tmp_path / "cache" / "tudataset" / "Mutagenicity" / "processed").is_dir()
