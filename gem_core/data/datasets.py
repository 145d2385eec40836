"""The datasets of the registry behind one :func:`load_dataset`, with seeded splits.

Each row's ``source`` says where its graphs come from (:data:`LOADERS`):

* a :class:`~gem_core.data.config.SyntheticSource` (BA-shapes, Tree-cycles) is generated
  deterministically with PyG's ``ExplainerDataset`` and keeps its motif edge masks as
  explanation ground truth;
* a :class:`~gem_core.data.config.TUSource` (Mutagenicity, NCI1) is read from TU raw files under
  ``$GEM_DATA_ROOT`` (copied into the cache first: PyG writes ``processed/`` beside ``raw/`` and
  the data root is read-only), or downloaded by PyG when the variable is unset;
* a :class:`~gem_core.data.config.TableSource` (a model trained on a user's table) is read from
  the ``dataset.pt`` saved in that model's folder, with the split it was trained on.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data

from gem_core.data.config import (
    SEED,
    SPLIT_FRACTIONS,
    DatasetSpec,
    SyntheticSource,
    TableSource,
    TUSource,
    dataset_cache_dir,
    get_spec,
)
from gem_core.runtime.store import cache_dir, load_torch

TU_FILES = ("A", "graph_indicator", "graph_labels", "node_labels")

# the Mutagenicity featurisation the chemistry layer reads (atoms of the one-hot columns, class
# names), as its registry row states it
_atom_symbols = get_spec("mutagenicity").atom_symbols
assert _atom_symbols is not None, "the mutagenicity row names its one-hot atom columns"
MUTAGENICITY_ATOMS: tuple[str, ...] = _atom_symbols
MUTAGENICITY_CLASSES: tuple[str, ...] = get_spec("mutagenicity").class_names
BOND_ORDERS = (1, 2, 3)  # Mutagenicity edge labels 0, 1, 2

_LOCK = threading.Lock()


class DataUnavailableError(FileNotFoundError):
    """The raw files of a dataset are missing and could not be downloaded."""


@dataclass
class Split:
    """Indices (nodes for node tasks, graphs for graph tasks) of train / val / test."""

    train: Tensor
    val: Tensor
    test: Tensor

    def __getitem__(self, name: str) -> Tensor:
        if name not in ("train", "val", "test"):
            raise KeyError(f"split must be train, val or test, not {name!r}")
        return getattr(self, name)

    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.val), len(self.test)


@dataclass
class GemDataset:
    """A loaded dataset: its graph(s), the target model's split and the explainer's split.

    Attributes:
        spec: static facts (task, K grid, connectivity rule).
        graph: node tasks: the one graph (``x``, ``edge_index``, ``y``, ``motif_edge_mask``).
        graphs: graph tasks: one :class:`Data` per molecule (``x``, ``edge_index``, ``y``,
            ``edge_attr`` where the dataset has edge labels).
        split: indices the target GNN is trained / validated / tested on.
        explain_split: instances the explainer is fitted and evaluated on (node tasks: the motif
            nodes of ``split``; graph tasks: ``split``).
        class_names: human-readable class labels (the row's).
        atom_symbols: molecules only: symbol of each one-hot node-feature column (the row's).
    """

    spec: DatasetSpec
    split: Split
    explain_split: Split
    graph: Optional[Data] = None
    graphs: Optional[list[Data]] = None
    class_names: tuple[str, ...] = ()
    atom_symbols: Optional[tuple[str, ...]] = None
    info: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def num_features(self) -> int:
        ref = self.graph if self.graph is not None else self._graph_list()[0]
        return int(ref.x.size(1))

    @property
    def num_classes(self) -> int:
        return self.spec.num_classes

    def labels(self) -> Tensor:
        """Label of every node (node task) or graph (graph task)."""
        if self.graph is not None:
            return self.graph.y
        return torch.tensor([int(g.y) for g in self._graph_list()])

    def __len__(self) -> int:
        return self.graph.num_nodes if self.graph is not None else len(self._graph_list())

    def _graph_list(self) -> list[Data]:
        """``graphs`` of a dataset without its one ``graph`` (the loaders set one of the two)."""
        assert self.graphs is not None, "a dataset holds either one graph or a list of graphs"
        return self.graphs


def random_split(
    n: int, seed: int = SEED, fractions: tuple[float, float, float] = SPLIT_FRACTIONS
) -> Split:
    """Seeded split of ``range(n)``: val and test get ``round(f * n)`` each, train the rest."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(fractions[1] * n))
    n_test = int(round(fractions[2] * n))
    n_train = n - n_val - n_test
    return Split(
        train=perm[:n_train].sort().values,
        val=perm[n_train : n_train + n_val].sort().values,
        test=perm[n_train + n_val :].sort().values,
    )


# ----------------------------------------------------------------------------- synthetic


def _synthetic_graph(source: SyntheticSource, seed: int) -> Data:
    """The graph of ``source``, generated with ``seed`` (the global generators left as found)."""
    import numpy as np
    from torch_geometric.datasets import ExplainerDataset, graph_generator, motif_generator

    # PyG's generators draw from both torch's and numpy's global generators.
    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)
        base = getattr(graph_generator, source.graph)(**dict(source.graph_args))
        motif = getattr(motif_generator, source.motif)(**dict(source.motif_args))
        ds = ExplainerDataset(base, motif, num_motifs=source.num_motifs)
        raw = ds[0]
    np.random.set_state(np_state)
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    edge_index, edge_mask = to_undirected(raw.edge_index, raw.edge_mask.float(), reduce="max")
    edge_index, edge_mask = remove_self_loops(edge_index, edge_mask)
    edge_index, edge_mask = coalesce(edge_index, edge_mask, reduce="max")
    n = raw.num_nodes
    return Data(
        x=torch.ones(
            n, source.num_features
        ),  # constant features, as in GNNExplainer's synthetic benchmarks
        edge_index=edge_index,
        y=raw.y.long(),
        motif_edge_mask=edge_mask > 0,
        num_nodes=n,
    )


def _load_synthetic(spec: DatasetSpec, seed: int) -> GemDataset:
    """A node task: the generated graph, split over its nodes; its motif nodes are explained."""
    assert isinstance(spec.source, SyntheticSource)  # LOADERS dispatches on the source's type
    graph = _synthetic_graph(spec.source, seed)
    split = random_split(graph.num_nodes, seed)
    motif = graph.y != 0
    explain = Split(*(idx[motif[idx]] for idx in (split.train, split.val, split.test)))
    return GemDataset(
        spec=spec, split=split, explain_split=explain, graph=graph, class_names=spec.class_names
    )


# ----------------------------------------------------------------------------- TU datasets


def data_root() -> Optional[Path]:
    """``$GEM_DATA_ROOT`` as a path, or None when unset."""
    root = os.environ.get("GEM_DATA_ROOT")
    return Path(root).expanduser() if root else None


def _tu_cache_root() -> Path:
    return cache_dir() / "tudataset"


def _stage_raw_files(tu_name: str, source_root: Path, cache_root: Path) -> None:
    """Copy ``<source_root>/<Name>/raw`` into the cache (the data root stays read-only)."""
    src = source_root / tu_name / "raw"
    missing = [f for f in TU_FILES if not (src / f"{tu_name}_{f}.txt").is_file()]
    if missing:
        raise DataUnavailableError(
            f"Dataset {tu_name} not found: looked in {src} for {tu_name}_{{{','.join(missing)}}}.txt "
            f"(GEM_DATA_ROOT={os.environ.get('GEM_DATA_ROOT')!r}). Set GEM_DATA_ROOT to a folder "
            f"holding {tu_name}/raw/{tu_name}_*.txt, e.g. ../shared/data/TUDataset."
        )
    dst = cache_root / tu_name / "raw"
    if all(
        (dst / p.name).is_file() and (dst / p.name).stat().st_size == p.stat().st_size
        for p in src.glob(f"{tu_name}_*.txt")
    ):
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{tu_name}-raw-", dir=cache_root))
    try:
        for p in src.glob(f"{tu_name}_*.txt"):
            shutil.copy2(p, tmp / p.name)
        (cache_root / tu_name).mkdir(parents=True, exist_ok=True)
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _read_tu(source: TUSource) -> list[Data]:
    from torch_geometric.datasets import TUDataset

    tu_name = source.tu_name
    cache_root = _tu_cache_root()
    cache_root.mkdir(parents=True, exist_ok=True)
    root = data_root()
    with _LOCK:
        if root is not None:
            _stage_raw_files(tu_name, root, cache_root)
        try:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):  # PyG prints "Processing..."
                ds = TUDataset(str(cache_root), tu_name)
        except Exception as exc:
            raise DataUnavailableError(
                f"Dataset {tu_name} is missing from {cache_root / tu_name / 'raw'} and could not be "
                f"downloaded ({type(exc).__name__}: {exc}). Set GEM_DATA_ROOT to a folder holding "
                f"{tu_name}/raw/{tu_name}_*.txt (e.g. ../shared/data/TUDataset)."
            ) from exc
    graphs = []
    for g in ds:
        data = Data(
            x=g.x.float(), edge_index=g.edge_index, y=g.y.view(-1).long(), num_nodes=g.num_nodes
        )
        if getattr(g, "edge_attr", None) is not None:
            data.edge_attr = g.edge_attr
        graphs.append(data)
    return graphs


def _load_tu(spec: DatasetSpec, seed: int) -> GemDataset:
    """A graph task: the TU graphs with at least one edge, split over the graphs."""
    assert isinstance(spec.source, TUSource)  # LOADERS dispatches on the source's type
    graphs = _read_tu(spec.source)
    # Graphs without any edge would have nothing to explain (none occur in Mutagenicity or NCI1).
    # Every other graph is kept: Mutagenicity splits 3,469 / 434 / 434 (the paper's Table 9 says
    # 3,468 / 434 / 434, which sums to 4,336 of the 4,337 graphs).
    n_all = len(graphs)
    kept = [i for i, g in enumerate(graphs) if g.edge_index.numel() > 0]
    for i in kept:
        graphs[i].source_index = i
    graphs = [graphs[i] for i in kept]
    info = {"dropped_empty_graphs": n_all - len(graphs)}
    return graph_dataset(spec, graphs, random_split(len(graphs), seed), info)


def graph_dataset(
    spec: DatasetSpec, graphs: list[Data], split: Split, info: Optional[dict] = None
) -> GemDataset:
    """A graph task's dataset: its graphs, one split for the target and the explainer, and the
    row's class names and atoms."""
    return GemDataset(
        spec=spec,
        split=split,
        explain_split=split,
        graphs=graphs,
        class_names=spec.class_names,
        atom_symbols=spec.atom_symbols,
        info=dict(info or {}),
    )


# ----------------------------------------------------------------------------- users' tables

#: the ``kind`` of a user table's converted graphs (``dataset.pt`` in the model's folder)
TABLE_KIND = "gem-user-table"
TABLE_FILE = "dataset.pt"


def table_state(graphs: Sequence[Data], split: Split, smiles: Sequence[str]) -> dict:
    """The graphs of a user's table as one file's state: tensors concatenated (one tensor per
    field, with pointers), the split, the SMILES as a plain list (``weights_only``)."""
    node_ptr = torch.tensor([0, *accumulate(g.num_nodes for g in graphs)])
    edge_ptr = torch.tensor([0, *accumulate(g.edge_index.size(1) for g in graphs)])
    return {
        "kind": TABLE_KIND,
        "x": torch.cat([g.x for g in graphs]),
        "edge_index": torch.cat([g.edge_index for g in graphs], dim=1),
        "edge_attr": torch.cat([g.edge_attr for g in graphs]),
        "y": torch.cat([g.y.view(-1) for g in graphs]),
        "node_ptr": node_ptr,
        "edge_ptr": edge_ptr,
        "split": {name: split[name] for name in ("train", "val", "test")},
        "smiles": list(smiles),
    }


def table_graphs(state: dict) -> list[Data]:
    """The graphs of :func:`table_state` again (edge indices local to each graph)."""
    node_ptr, edge_ptr = state["node_ptr"].tolist(), state["edge_ptr"].tolist()
    graphs = []
    for i in range(len(node_ptr) - 1):
        e0, e1 = edge_ptr[i], edge_ptr[i + 1]
        graph = Data(
            x=state["x"][node_ptr[i] : node_ptr[i + 1]],
            edge_index=state["edge_index"][:, e0:e1],
            edge_attr=state["edge_attr"][e0:e1],
            y=state["y"][i : i + 1],
            num_nodes=node_ptr[i + 1] - node_ptr[i],
        )
        graph.source_index = i
        graphs.append(graph)
    return graphs


def _load_table(spec: DatasetSpec, seed: int) -> GemDataset:
    """A user's table: its molecules and the split its model was trained on (saved with it, so
    ``seed`` does not change it)."""
    path = dataset_cache_dir(spec.name) / TABLE_FILE
    if not path.exists():
        raise DataUnavailableError(f"The molecules of model {spec.name!r} are missing ({path}).")
    state = load_torch(path, kind=TABLE_KIND)
    split = Split(**{name: state["split"][name] for name in ("train", "val", "test")})
    info = {"smiles": state["smiles"]}
    return graph_dataset(spec, table_graphs(state), split, info)


#: how each kind of source is loaded into a :class:`GemDataset` (a new dataset of a known kind
#: is one registry row; a new kind of source is one entry here)
LOADERS: dict[type, Callable[[DatasetSpec, int], GemDataset]] = {
    SyntheticSource: _load_synthetic,
    TUSource: _load_tu,
    TableSource: _load_table,
}


def load_dataset(name: str, seed: int = SEED) -> GemDataset:
    """Load a dataset of the registry (``ba_shapes``, ``tree_cycles``, ``mutagenicity``,
    ``nci1``, ...) with its splits, through the loader of its row's source.

    Raises:
        UnknownDatasetError: for a name the registry lacks.
        DataUnavailableError: when TU raw files are missing and cannot be downloaded.
        ValueError: for a row without a source of a known kind.
    """
    spec = get_spec(name)
    loader = LOADERS.get(type(spec.source))
    if loader is None:
        raise ValueError(
            f"dataset {spec.name!r} has no source this engine can load ({spec.source!r})"
        )
    return loader(spec, seed)
