"""Target GNNs of the paper, their training, and the black-box view the rest of the engine uses.

* :class:`NodeGCN`: 3 graph-convolution layers of width 20, the three outputs concatenated, a
  linear head.
* :class:`GraphGCN`: 3 graph-convolution layers of width 20, global max pooling, a linear head.

The convolution is the un-normalised one of the authors' models, ``h_i' = W1 h_i + W2 Σ_j h_j``
(PyG's ``GraphConv``), each layer's output L2-normalised. Unlike the symmetric-normalised
``GCNConv``, its output at a node depends only on the node's L-hop neighbourhood *edges*, not on
the degrees of nodes at the border, so a node's prediction on its L-hop computation graph equals
its prediction on the full graph — the premise of the paper. (With ``GCNConv`` the 3-hop
subgraph changes the border nodes' degrees and hence the prediction.)

Downstream code never touches a model's weights: it sees a :class:`BlackBox`, a callable from an
:class:`~gem_core.data.instances.InstanceBatch` to one row of logits per instance. Any PyG model can
be wrapped the same way (:class:`GNNBlackBox`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GraphConv, global_max_pool

from gem_core.data.config import (
    DEFAULT_TARGET,
    DatasetSpec,
    TargetConfig,
    dataset_cache_dir,
    target_spec,
)
from gem_core.data.datasets import GemDataset
from gem_core.data.instances import InstanceBatch
from gem_core.runtime.device import deterministic_algorithms, resolve_device
from gem_core.runtime.progress import ProgressFn, report
from gem_core.runtime.store import ASSETS_DIR, ArtifactError, load_torch, save_torch

TARGET_KIND = "gem-target"


def _conv_stack(in_channels: int, hidden: int, num_layers: int) -> nn.ModuleList:
    dims = [in_channels] + [hidden] * num_layers
    return nn.ModuleList(GraphConv(a, b, aggr="add") for a, b in zip(dims[:-1], dims[1:]))


def _embed(convs: nn.ModuleList, x: Tensor, edge_index: Tensor) -> list[Tensor]:
    """Each layer's output: ReLU(conv), L2-normalised per node."""
    outs = []
    for conv in convs:
        x = F.normalize(F.relu(conv(x, edge_index)), p=2.0, dim=-1)
        outs.append(x)
    return outs


class NodeGCN(nn.Module):
    """Node classifier: graph convolution ×3 (width ``hidden``), the 3 outputs concatenated, linear head."""

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 20, num_layers: int = 3):
        super().__init__()
        self.convs = _conv_stack(in_channels, hidden, num_layers)
        self.lin = nn.Linear(hidden * num_layers, num_classes)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        return self.lin(torch.cat(_embed(self.convs, x, edge_index), dim=-1))


class GraphGCN(nn.Module):
    """Graph classifier: graph convolution ×3 (width ``hidden``), global max pooling, linear head.

    Each layer's output is max-pooled and the pooled vectors are concatenated before the head
    (the node classifier's jumping-knowledge readout, as in the authors' models).
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 20, num_layers: int = 3):
        super().__init__()
        self.convs = _conv_stack(in_channels, hidden, num_layers)
        self.lin = nn.Linear(hidden * num_layers, num_classes)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
    ) -> Tensor:
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        size = (
            num_graphs if num_graphs is not None else int(batch.max()) + 1 if batch.numel() else 1
        )
        pooled = [global_max_pool(h, batch, size=size) for h in _embed(self.convs, x, edge_index)]
        return self.lin(torch.cat(pooled, dim=-1))


class BlackBox(Protocol):
    """What the explainers may know of a target: logits per instance, nothing else."""

    task: str
    num_classes: int

    def __call__(self, batch: InstanceBatch) -> Tensor:  # [num_instances, num_classes]
        ...


def uses_edge_attr(black_box) -> bool:
    """Whether a black box reads edge features (then batches built for it must carry them)."""
    return bool(getattr(black_box, "uses_edge_attr", False))


class GNNBlackBox:
    """Wraps a PyG module ``model(x, edge_index[, batch])`` as a :class:`BlackBox`.

    Node task: the model's output rows at the targets. Graph task: the model's pooled output,
    called with ``batch=`` (and ``num_graphs=`` when the model accepts it, so instances whose
    edges were all deleted still get a row). A model whose ``forward`` takes ``edge_attr`` (a
    bond-aware target) gets the batch's edge features (``uses_edge_attr``).

    A regressor (``regression=True``: one output column, a value) says so to the engine
    (:func:`gem_core.gem.distill.conventions.is_regression`); ``tolerance`` is how near a value
    counts as the same prediction for the explain-time check.
    """

    def __init__(
        self,
        model: nn.Module,
        task: str,
        num_classes: int,
        device: Union[str, torch.device, None] = "auto",
        regression: bool = False,
        tolerance: Optional[float] = None,
    ):
        self.task = task
        self.num_classes = num_classes
        self.regression = bool(regression)
        self.tolerance = tolerance
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        import inspect

        params = inspect.signature(model.forward).parameters
        self._takes_num_graphs = "num_graphs" in params
        self.uses_edge_attr = "edge_attr" in params

    @torch.no_grad()
    def __call__(self, batch: InstanceBatch) -> Tensor:
        return self.forward(batch)

    def forward(self, batch: InstanceBatch) -> Tensor:
        """:meth:`__call__` with autograd on (the fidelity term reads the target on soft edge
        weights, :mod:`gem_core.gem.fidelity`)."""
        b = batch.to(self.device)
        extra = {}
        if self.uses_edge_attr:
            if b.edge_attr is None:
                raise ValueError("this target reads edge features (bond types); the batch has none")
            extra["edge_attr"] = b.edge_attr
        if self.task == "node":
            return self.model(b.x, b.edge_index, **extra)[b.target_index]
        if self._takes_num_graphs:
            return self.model(b.x, b.edge_index, batch=b.batch, num_graphs=b.num_instances, **extra)
        return self.model(b.x, b.edge_index, batch=b.batch, **extra)


def build_model(
    spec: DatasetSpec, in_channels: int, cfg: Optional[TargetConfig] = None
) -> nn.Module:
    """The untrained target of ``cfg``, built by its architecture's row (:data:`ARCHITECTURES`)."""
    cfg = cfg or spec.target
    arch = architecture(cfg.arch)
    if spec.task not in arch.tasks:
        raise ValueError(
            f"the {arch.title} target is a {' / '.join(arch.tasks)} classifier, "
            f"not a {spec.task} one"
        )
    return arch.build(spec, in_channels, cfg)


@dataclass
class TargetMetrics:
    train_accuracy: float
    val_accuracy: float
    test_accuracy: float
    train_seconds: float
    epochs: int


@dataclass
class TrainedTarget:
    """A trained target GNN, its metrics, and where it was loaded from."""

    model: nn.Module
    metrics: TargetMetrics
    dataset: str
    digest: str
    path: Optional[Path] = None

    def black_box(self, device: Union[str, torch.device, None] = "auto") -> GNNBlackBox:
        from gem_core.data.config import UnknownDatasetError, get_spec

        try:
            spec: Optional[DatasetSpec] = get_spec(self.dataset)
        except UnknownDatasetError:
            spec = None
        if spec is not None:
            return GNNBlackBox(
                self.model,
                spec.task,
                spec.num_classes,
                device,
                regression=spec.regression,
                tolerance=spec.value_tolerance,
            )
        task = "node" if isinstance(self.model, NodeGCN) else "graph"  # a model of no dataset
        head = self.model.lin
        assert isinstance(head, nn.Linear)  # NodeGCN's / GraphGCN's classifier
        return GNNBlackBox(self.model, task, head.out_features, device)


# ----------------------------------------------------------------------------- training


def _node_accuracy(model: nn.Module, data, idx: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    return float((pred[idx] == data.y[idx]).float().mean())


def _graph_eval(model: nn.Module, loader, device) -> tuple[float, float]:
    model.eval()
    correct, loss, n = 0, 0.0, 0
    with torch.no_grad():
        for b in loader:
            b = b.to(device)
            out = model(b.x, b.edge_index, b.batch, b.num_graphs)
            loss += float(F.cross_entropy(out, b.y, reduction="sum"))
            correct += int((out.argmax(-1) == b.y).sum())
            n += b.num_graphs
    return correct / max(n, 1), loss / max(n, 1)


def train_target(
    ds: GemDataset,
    cfg: Optional[TargetConfig] = None,
    device: Union[str, torch.device] = "auto",
    progress: Optional[ProgressFn] = None,
) -> tuple[nn.Module, TargetMetrics]:
    """Train the target GNN of ``cfg`` (default: the paper's) on ``ds`` on ``device``, with its
    architecture's trainer (:data:`ARCHITECTURES`): Adam and early stopping on validation.

    The checkpoint with the best validation accuracy (ties: lower validation loss) is kept.
    """
    cfg = cfg or ds.spec.target
    trainer = architecture(cfg.arch).train
    dev = resolve_device(device)
    with deterministic_algorithms(dev):
        return trainer(ds, cfg, dev, progress)


def _train_paper_target(
    ds: GemDataset, cfg: TargetConfig, dev: torch.device, progress: Optional[ProgressFn]
) -> tuple[nn.Module, TargetMetrics]:
    """The training loop of :func:`train_target` for the paper's architectures."""
    torch.manual_seed(cfg.seed)
    model = build_model(ds.spec, ds.num_features, cfg).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best = (-1.0, float("inf"))
    best_state = copy.deepcopy(model.state_dict())
    since_best, epoch = 0, 0
    start = time.perf_counter()
    if ds.task == "node":
        assert ds.graph is not None  # a node task's dataset holds its graph
        data = ds.graph.to(dev)
        tr, va, te = (i.to(dev) for i in (ds.split.train, ds.split.val, ds.split.test))

        def train_epoch() -> None:
            model.train()
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            F.cross_entropy(out[tr], data.y[tr]).backward()
            opt.step()

        def validate() -> tuple[float, float]:
            model.eval()
            with torch.no_grad():
                out = model(data.x, data.edge_index)
                return (
                    float((out[va].argmax(-1) == data.y[va]).float().mean()),
                    float(F.cross_entropy(out[va], data.y[va])),
                )

        def accuracies() -> list[float]:
            return [_node_accuracy(model, data, i) for i in (tr, va, te)]
    else:
        gen = torch.Generator().manual_seed(cfg.seed)
        graphs = ds.graphs
        assert graphs is not None  # a graph task's dataset holds its graphs
        loaders = {
            name: DataLoader(
                [graphs[int(i)] for i in ds.split[name]],
                batch_size=cfg.batch_size,
                shuffle=(name == "train"),
                generator=gen if name == "train" else None,
            )
            for name in ("train", "val", "test")
        }

        def train_epoch() -> None:
            model.train()
            for b in loaders["train"]:
                b = b.to(dev)
                opt.zero_grad()
                F.cross_entropy(model(b.x, b.edge_index, b.batch, b.num_graphs), b.y).backward()
                opt.step()

        def validate() -> tuple[float, float]:
            return _graph_eval(model, loaders["val"], dev)

        def accuracies() -> list[float]:
            return [_graph_eval(model, loaders[n], dev)[0] for n in ("train", "val", "test")]

    for epoch in range(1, cfg.max_epochs + 1):
        train_epoch()
        val_acc, val_loss = validate()
        if (val_acc, -val_loss) > (best[0], -best[1]):
            best, best_state, since_best = (val_acc, val_loss), copy.deepcopy(model.state_dict()), 0
        else:
            since_best += 1
        report(progress, epoch / cfg.max_epochs, f"epoch {epoch} val acc {val_acc:.3f}")
        if since_best >= cfg.patience:
            break
    model.load_state_dict(best_state)
    train_acc, val_acc, test_acc = accuracies()
    report(progress, 1.0, "done")
    metrics = TargetMetrics(
        train_acc, val_acc, test_acc, train_seconds=time.perf_counter() - start, epochs=epoch
    )
    return model.cpu().eval(), metrics


# ----------------------------------------------------------------------------- persistence

# Gem's settings of a target (TargetConfig.gem) are not part of how it was trained: never saved in
# its checkpoint, and the field older checkpoints kept them in is dropped on loading
_NOT_SAVED = ("gem", "explainer_settings")


def _training_config(config: dict[str, Any]) -> dict[str, Any]:
    """The training hyperparameters of a target config (its Gem settings left out)."""
    return {k: v for k, v in config.items() if k not in _NOT_SAVED}


def target_filename(dataset: str, name: str = DEFAULT_TARGET) -> str:
    """``<dataset>.pt`` for the paper's target, ``<dataset>-<name>.pt`` for another one (the
    target row's :meth:`~gem_core.data.config.TargetSpec.stem`)."""
    return f"{target_spec(name).stem(dataset)}.pt"


def shipped_target_path(dataset: str, name: str = DEFAULT_TARGET) -> Path:
    return ASSETS_DIR / "targets" / target_filename(dataset, name)


def cached_target_path(dataset: str, name: str = DEFAULT_TARGET) -> Path:
    return dataset_cache_dir(dataset) / "targets" / target_filename(dataset, name)


def save_target(
    model: nn.Module,
    metrics: TargetMetrics,
    ds: GemDataset,
    path: Path,
    cfg: Optional[TargetConfig] = None,
) -> Path:
    cfg = cfg or ds.spec.target
    state = {
        "kind": TARGET_KIND,
        "dataset": ds.name,
        "in_channels": ds.num_features,
        "num_classes": ds.num_classes,
        "config": _training_config(asdict(cfg)),
        "metrics": asdict(metrics),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    return save_torch(state, path)


def load_target_checkpoint(
    path: Path, dataset: Optional[str] = None, in_channels: Optional[int] = None
) -> TrainedTarget:
    """Load a target checkpoint on its own (no dataset needed: shapes are in the file).

    Args:
        path: the checkpoint.
        dataset: when given, the checkpoint must be for this dataset.
        in_channels: when given, the checkpoint must read this many node features.
    Raises:
        ArtifactError: corrupted, foreign, for another dataset or other features.
    """
    from gem_core.data.config import get_spec
    from gem_core.runtime.store import file_digest

    state = load_torch(path, kind=TARGET_KIND)
    name = state.get("dataset")
    if dataset is not None and name != dataset:
        raise ArtifactError(f"{path} holds a target for {name!r}, not {dataset!r}.")
    try:
        spec = get_spec(str(name))
        cfg = TargetConfig(**_training_config(state["config"]))
        model = build_model(spec, int(state["in_channels"]), cfg)
        model.load_state_dict(state["state_dict"])
        metrics = TargetMetrics(**state["metrics"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path} is not a usable target checkpoint: {exc}") from exc
    if int(state["num_classes"]) != spec.num_classes or (
        in_channels is not None and int(state["in_channels"]) != in_channels
    ):
        raise ArtifactError(f"{path} does not match the shapes of dataset {name!r}.")
    return TrainedTarget(model.eval(), metrics, str(name), file_digest(path), Path(path))


def load_target(path: Path, ds: GemDataset) -> TrainedTarget:
    """Load a target checkpoint for ``ds``; refuses corrupted, foreign or mismatched files."""
    state = load_torch(path, kind=TARGET_KIND)
    if state.get("dataset") != ds.name:
        raise ArtifactError(f"{path} holds a target for {state.get('dataset')!r}, not {ds.name!r}.")
    if state.get("in_channels") != ds.num_features or state.get("num_classes") != ds.num_classes:
        raise ArtifactError(f"{path} does not match the shapes of dataset {ds.name!r}.")
    return load_target_checkpoint(path, ds.name)


def load_saved_target(
    dataset: str, name: str = DEFAULT_TARGET, in_channels: Optional[int] = None
) -> Optional[TrainedTarget]:
    """The first checkpoint of ``dataset``'s target ``name`` that loads on its own (cache, then
    shipped), or None.

    No data needed: the checkpoint records its shapes. Corrupted or foreign files are skipped,
    and so are files for other node features than ``in_channels`` (when given).
    """
    for path in (cached_target_path(dataset, name), shipped_target_path(dataset, name)):
        if path.exists():
            try:
                return load_target_checkpoint(path, dataset, in_channels)
            except ArtifactError:
                continue
    return None


def get_target(
    ds: GemDataset,
    retrain: bool = False,
    device: Union[str, torch.device] = "auto",
    progress: Optional[ProgressFn] = None,
    name: str = DEFAULT_TARGET,
) -> TrainedTarget:
    """The target GNN ``name`` of ``ds``: from the cache, else the shipped asset, else trained."""
    from gem_core.data.config import target_config

    cfg = target_config(ds.spec, name)
    if not retrain:
        for path in (cached_target_path(ds.name, name), shipped_target_path(ds.name, name)):
            if path.exists():
                try:
                    return load_target(path, ds)
                except ArtifactError:
                    continue
    model, metrics = train_target(ds, cfg, device=device, progress=progress)
    path = save_target(model, metrics, ds, cached_target_path(ds.name, name), cfg)
    return load_target(path, ds)


# ----------------------------------------------------------------------------- architectures


def _build_graphconv(spec: DatasetSpec, in_channels: int, cfg: TargetConfig) -> nn.Module:
    cls = NodeGCN if spec.task == "node" else GraphGCN
    return cls(in_channels, spec.num_classes, cfg.hidden, cfg.num_layers)


def _build_gine(spec: DatasetSpec, in_channels: int, cfg: TargetConfig) -> nn.Module:
    from gem_core.models.strong_target import GINETarget

    return GINETarget(
        in_channels,
        spec.num_classes,
        cfg.hidden,
        cfg.num_layers,
        cfg.dropout,
        none_bond="unknown" if cfg.unknown_bond_prob > 0 else "single",
    )


def gine_recipe(cfg: TargetConfig) -> dict[str, Any]:
    """The recipe keys of :func:`~gem_core.models.strong_target.train_strong_target` that a
    target config sets."""
    return {
        "hidden": cfg.hidden,
        "num_layers": cfg.num_layers,
        "dropout": cfg.dropout,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "batch_size": cfg.batch_size,
        "max_epochs": cfg.max_epochs,
        "patience": cfg.patience,
        "schedule": cfg.schedule,
        "unknown_bond_prob": cfg.unknown_bond_prob,
        "drop_edge": cfg.drop_edge,
        "ema": cfg.ema,
    }


def _train_gine(
    ds: GemDataset, cfg: TargetConfig, dev: torch.device, progress: Optional[ProgressFn]
) -> tuple[nn.Module, TargetMetrics]:
    """Train the bond-aware target on ``dev``
    (:func:`gem_core.models.strong_target.train_strong_target`)."""
    from gem_core.models.strong_target import train_strong_target

    report(progress, 0.0, "training the bond-aware target")
    model, m = train_strong_target(ds, seed=cfg.seed, device=dev, **gine_recipe(cfg))
    report(progress, 1.0, "done")
    return model.eval(), TargetMetrics(
        m["train_accuracy"], m["val_accuracy"], m["test_accuracy"], m["train_seconds"], m["epochs"]
    )


@dataclass(frozen=True)
class Architecture:
    """One architecture row: how a :class:`~gem_core.data.config.TargetConfig` whose ``arch``
    names it is built and trained.

    Attributes:
        name: the value of ``TargetConfig.arch`` (saved in target checkpoints).
        title: how people read it (messages).
        tasks: the task levels it classifies.
        build: ``(dataset row, in_channels, config) -> untrained model``.
        train: ``(dataset, config, device, progress) -> (model on the CPU, metrics)``.
    """

    name: str
    title: str
    tasks: tuple[str, ...]
    build: Callable[[DatasetSpec, int, TargetConfig], nn.Module]
    train: Callable[
        [GemDataset, TargetConfig, torch.device, Optional[ProgressFn]],
        tuple[nn.Module, TargetMetrics],
    ]


ARCHITECTURES: dict[str, Architecture] = {
    "graphconv": Architecture(
        "graphconv", "paper's GraphConv", ("node", "graph"), _build_graphconv, _train_paper_target
    ),
    "gine": Architecture("gine", "bond-aware", ("graph",), _build_gine, _train_gine),
}


def architecture(name: str) -> Architecture:
    """The architecture row ``name``; a clear error for unknown names."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown target architecture {name!r}")
    return ARCHITECTURES[name]
