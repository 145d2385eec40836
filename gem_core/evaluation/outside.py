"""Outside models: target GNNs this project never tuned Gem for, and the PyG adapter judged on them
by the field's yardstick.

Gem is model-agnostic in its interface (only the target's outputs are read); this module checks
that it is in fact. It trains small graph classifiers of common recipes on Mutagenicity — a
3-layer GCN with max pooling (GNNX-Bench's, Kosan et al. ICLR 2024: hidden 20), a 3-layer GIN
(sum pooling) and a 3-layer GraphSAGE (mean pooling) — with plain PyG layers, on the dataset's own
80/10/10 split, then fits :class:`gem_core.pyg.GemExplainer` through PyG's ``Explainer`` on the
training graphs and scores it, GNNExplainer (PyG's objective, batched) and random edge scores
with sufficiency@k and necessity@k (:mod:`.faithfulness`) under a protocol, overall and per
predicted class. Trained models are cached in the store (seeded, so the same command gives the
same models). ``python -m gem_core bench outside`` is the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gem_core.data.instances import Instance
from gem_core.data.protocol import check_protocol
from gem_core.runtime.progress import ProgressFn, report

#: the sufficiency grid of graph tasks (GNNX-Bench's curve) and the necessity grid
SUFFICIENCY_K = tuple(range(5, 26))
NECESSITY_K = tuple(range(2, 11))
#: the budgets Gem's stability across seeds is reported at
STABILITY_K = (5, 10, 15, 20, 25)
OUTSIDE_KIND = "gem-outside-model"


class _PooledGNN(nn.Module):
    """Three message-passing layers with ReLU, a global pooling and a linear head: logits."""

    def __init__(self, convs: Sequence[nn.Module], pool: Callable, hidden: int, classes: int):
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.pool = pool
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        h = x.float()
        for conv in self.convs:
            h = conv(h, edge_index).relu()
        return self.head(self.pool(h, batch))


def _bond_inputs(
    x: Tensor, batch: Optional[Tensor], edge_attr: Optional[Tensor]
) -> tuple[Tensor, Tensor]:
    """The batch vector (one graph when none is given) and the bond features (required)."""
    if batch is None:
        batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
    if edge_attr is None:
        raise ValueError("this model reads bond features: pass edge_attr")
    return batch, edge_attr.float()


class _PooledEdgeGNN(_PooledGNN):
    """:class:`_PooledGNN` whose layers also read the bond features, ``conv(h, edge_index,
    edge_attr)`` (GINE, GATv2 with ``edge_dim``): the molecule models PyG users train."""

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        batch, e = _bond_inputs(x, batch, edge_attr)
        h = x.float()
        for conv in self.convs:
            h = conv(h, edge_index, e).relu()
        return self.head(self.pool(h, batch))


#: bond features of Mutagenicity's graphs (one-hot single / double / triple)
BOND_FEATURES = 3


def _gine(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import GINEConv, global_add_pool

    h = 32

    def mlp(a: int) -> nn.Module:
        return nn.Sequential(nn.Linear(a, h), nn.ReLU(), nn.Linear(h, h))

    return _PooledEdgeGNN(
        [GINEConv(mlp(features), edge_dim=BOND_FEATURES)]
        + [GINEConv(mlp(h), edge_dim=BOND_FEATURES) for _ in range(2)],
        global_add_pool,
        h,
        classes,
    )


def _heads(conv: Callable[..., nn.Module], features: int, bonds: bool) -> list[nn.Module]:
    """Three attention layers of 4 heads, hidden 32 (``bonds``: each reads the bond types)."""
    extra = {"edge_dim": BOND_FEATURES} if bonds else {}
    return [conv(a, 8, heads=4, **extra) for a in (features, 32, 32)]


def _gatv2(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import GATv2Conv, global_mean_pool

    return _PooledEdgeGNN(_heads(GATv2Conv, features, True), global_mean_pool, 32, classes)


def _gcn_max(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import GCNConv, global_max_pool

    h = 20
    return _PooledGNN(
        [GCNConv(features, h), GCNConv(h, h), GCNConv(h, h)], global_max_pool, h, classes
    )


def _gin(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import GINConv, global_add_pool

    h = 32

    def mlp(a: int) -> nn.Module:
        return nn.Sequential(nn.Linear(a, h), nn.ReLU(), nn.Linear(h, h))

    return _PooledGNN(
        [GINConv(mlp(features)), GINConv(mlp(h)), GINConv(mlp(h))], global_add_pool, h, classes
    )


def _sage(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import SAGEConv, global_mean_pool

    h = 32
    return _PooledGNN(
        [SAGEConv(features, h), SAGEConv(h, h), SAGEConv(h, h)], global_mean_pool, h, classes
    )


def _gat(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import GATConv, global_mean_pool

    return _PooledGNN(_heads(GATConv, features, False), global_mean_pool, 32, classes)


def _transformer(features: int, classes: int) -> nn.Module:
    from torch_geometric.nn import TransformerConv, global_add_pool

    return _PooledEdgeGNN(_heads(TransformerConv, features, True), global_add_pool, 32, classes)


class AttentiveFPModel(nn.Module):
    """PyG's ``AttentiveFP`` (Xiong et al. 2020: graph attention over atoms and bonds, a gated
    readout) behind the ``forward(x, edge_index, batch=None, edge_attr=None)`` convention of
    the other models (its own takes ``edge_attr`` before ``batch``)."""

    def __init__(self, features: int, outputs: int, edge_dim: int, hidden: int = 32):
        super().__init__()
        from torch_geometric.nn.models import AttentiveFP

        self.net = AttentiveFP(
            features, hidden, outputs, edge_dim=edge_dim, num_layers=2, num_timesteps=2
        )

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        batch, e = _bond_inputs(x, batch, edge_attr)
        return self.net(x.float(), edge_index, e, batch)


def _attentivefp(features: int, classes: int) -> nn.Module:
    return AttentiveFPModel(features, classes, BOND_FEATURES)


@dataclass(frozen=True)
class OutsideModel:
    """A recipe of an outside target: how to build it, in words and in code."""

    name: str
    title: str
    build: Callable[[int, int], nn.Module]


OUTSIDE_MODELS: dict[str, OutsideModel] = {
    m.name: m
    for m in (
        OutsideModel(
            "gcn_max", "3-layer GCN, hidden 20, max pooling (GNNX-Bench's recipe)", _gcn_max
        ),
        OutsideModel("gin", "3-layer GIN, hidden 32, sum pooling", _gin),
        OutsideModel("sage", "3-layer GraphSAGE, hidden 32, mean pooling", _sage),
        OutsideModel(
            "gine", "3-layer GINE reading bond types (edge_attr), hidden 32, sum pooling", _gine
        ),
        OutsideModel(
            "gatv2",
            "3-layer GATv2 (4 heads) reading bond types (edge_attr), hidden 32, mean pooling",
            _gatv2,
        ),
        OutsideModel("gat", "3-layer GAT (4 heads), hidden 32, mean pooling", _gat),
        OutsideModel(
            "transformer",
            "3-layer graph transformer (TransformerConv, 4 heads) reading bond types "
            "(edge_attr), hidden 32, sum pooling",
            _transformer,
        ),
        OutsideModel(
            "attentivefp",
            "AttentiveFP (2 layers, 2 readout steps) reading bond types (edge_attr), hidden 32",
            _attentivefp,
        ),
    )
}


def check_outside_model(name: str) -> OutsideModel:
    key = str(name).strip().lower()
    if key not in OUTSIDE_MODELS:
        raise ValueError(
            f"Unknown outside model {name!r}. Choose one of: {', '.join(OUTSIDE_MODELS)}."
        )
    return OUTSIDE_MODELS[key]


# ----------------------------------------------------------------------------- training


def train_outside_model(
    name: str,
    graphs: Sequence[Any],
    split,
    seed: int = 0,
    epochs: int = 150,
    lr: float = 0.005,
    batch_size: int = 64,
    progress: Optional[ProgressFn] = None,
) -> tuple[nn.Module, dict[str, float]]:
    """Train the recipe ``name`` on the ``split.train`` graphs (Adam, cross-entropy), keeping the
    epoch of best validation accuracy; returns the model (eval mode, CPU) and its accuracies."""
    from torch_geometric.loader import DataLoader

    recipe = check_outside_model(name)
    torch.manual_seed(seed)
    classes = int(max(int(g.y.view(-1)[0]) for g in graphs)) + 1
    model = recipe.build(int(graphs[0].x.size(1)), classes)
    train = [graphs[i] for i in split.train.tolist()]
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(train, batch_size=batch_size, shuffle=True, generator=gen)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best, best_state = -1.0, None
    for epoch in range(epochs):
        model.train()
        for b in loader:
            opt.zero_grad()
            out = model(b.x, b.edge_index, b.batch, **bond_kwargs(model, b))
            F.cross_entropy(out, b.y.view(-1)).backward()
            opt.step()
        acc = accuracy(model, [graphs[i] for i in split.val.tolist()])
        if acc > best:
            best, best_state = acc, {k: v.clone() for k, v in model.state_dict().items()}
        report(progress, (epoch + 1) / epochs, f"{name}: epoch {epoch + 1}, val {acc:.3f}")
    assert best_state is not None  # the first epoch's accuracy (>= 0) beats the initial -1
    model.load_state_dict(best_state)
    model.eval()
    scores = {
        part: accuracy(model, [graphs[i] for i in getattr(split, part).tolist()])
        for part in ("train", "val", "test")
    }
    return model, scores


@torch.no_grad()
def accuracy(model: nn.Module, graphs: Sequence[Any]) -> float:
    from torch_geometric.data import Batch

    model.eval()
    b = Batch.from_data_list(list(graphs))
    out = model(b.x, b.edge_index, b.batch, **bond_kwargs(model, b))
    return float((out.argmax(-1) == b.y.view(-1)).float().mean())


def bond_kwargs(model: nn.Module, batch: Any) -> dict[str, Tensor]:
    """``edge_attr=`` of a PyG batch for a model whose forward reads it, else nothing."""
    from gem_core.explainers._pyg import takes_edge_attr

    return {"edge_attr": batch.edge_attr} if takes_edge_attr(model) else {}


#: training epochs of an outside model (the epoch of best validation accuracy is kept)
MODEL_EPOCHS = 150


def outside_model(
    name: str,
    dataset,
    seed: int = 0,
    refresh: bool = False,
    epochs: int = MODEL_EPOCHS,
    progress: Optional[ProgressFn] = None,
) -> tuple[nn.Module, dict[str, float]]:
    """The recipe ``name`` trained on ``dataset`` (a graph-task ``GemDataset``), from the store
    when it was trained before with the same recipe, dataset, seed and epochs."""
    from gem_core.runtime.store import cache_dir, cached, config_key

    recipe = check_outside_model(name)
    parts = dict(model=recipe.name, dataset=dataset.spec.name, seed=int(seed), version=1)
    if epochs != MODEL_EPOCHS:  # the key of the default recipe stays as first made
        parts["epochs"] = int(epochs)
    key = config_key(**parts)
    path = cache_dir() / "outside_models" / f"{recipe.name}-{key}.pt"

    def build() -> dict[str, Any]:
        model, acc = train_outside_model(
            recipe.name, dataset.graphs, dataset.split, seed, epochs=epochs, progress=progress
        )
        return {"kind": OUTSIDE_KIND, "state": model.state_dict(), "accuracy": acc}

    state = cached(path, build, OUTSIDE_KIND, refresh=refresh)
    classes = len(dataset.class_names)
    model = recipe.build(int(dataset.graphs[0].x.size(1)), classes)
    model.load_state_dict(state["state"])
    model.eval()
    return model, dict(state["accuracy"])


# ----------------------------------------------------------------------------- evaluation


@dataclass
class OutsideResult:
    """One method on one outside model under one protocol."""

    method: str
    sufficiency: dict[int, float]
    necessity: dict[int, float]
    sufficiency_per_class: dict[int, dict[int, float]]
    necessity_per_class: dict[int, dict[int, float]]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_sufficiency(self) -> float:
        return sum(self.sufficiency.values()) / len(self.sufficiency)

    @property
    def mean_necessity(self) -> float:
        return sum(self.necessity.values()) / len(self.necessity)

    def to_dict(self) -> dict[str, Any]:
        def kd(d: dict[int, float]) -> dict[str, float]:
            return {str(k): round(float(v), 4) for k, v in sorted(d.items())}

        return {
            "method": self.method,
            "mean_sufficiency": round(self.mean_sufficiency, 4),
            "mean_necessity": round(self.mean_necessity, 4),
            "sufficiency_at_k": kd(self.sufficiency),
            "necessity_at_k": kd(self.necessity),
            "sufficiency_per_class": {
                str(c): kd(v) for c, v in sorted(self.sufficiency_per_class.items())
            },
            "necessity_per_class": {
                str(c): kd(v) for c, v in sorted(self.necessity_per_class.items())
            },
            "seconds": round(self.seconds, 3),
            **self.extra,
        }


def gem_scores(
    model: nn.Module, train_graphs: Sequence[Any], graphs: Sequence[Any], **options: Any
) -> tuple[list[Tensor], Any]:
    """Fit :class:`gem_core.pyg.GemExplainer` through PyG's ``Explainer`` on ``train_graphs``
    (graph level, the model's own predictions) and explain ``graphs`` in one call; returns the
    pair scores per graph (in :func:`instances_of` order) and the fitted algorithm (its
    ``explainer_`` explains again: :func:`explain_again`)."""
    from torch_geometric.explain import Explainer

    from gem_core.pyg import GemExplainer

    explainer = Explainer(
        model=model,
        algorithm=GemExplainer(**options),
        explanation_type="model",
        edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"),
    )
    explainer.algorithm.fit(model, list(train_graphs))
    explainer.algorithm.explainer_ = explainer
    return explain_again(explainer.algorithm, graphs), explainer.algorithm


def explain_again(algorithm: Any, graphs: Sequence[Any], **check: Any) -> list[Tensor]:
    """The fitted adapter ``algorithm`` (from :func:`gem_scores`) explains ``graphs`` once more,
    with the explain-time ``check`` options given (``check="repair"``: Gem + check; nothing: as
    fitted), timed in ``algorithm.explain_seconds_``; the pair scores per graph."""
    from torch_geometric.data import Batch

    before = {name: getattr(algorithm, name) for name in check}
    for name, value in check.items():
        setattr(algorithm, name, value)
    try:
        b = Batch.from_data_list(list(graphs))
        start = time.perf_counter()
        model = algorithm.explainer_.model
        mask = algorithm.explainer_(
            b.x, b.edge_index, batch=b.batch, **bond_kwargs(model, b)
        ).edge_mask
        algorithm.explain_seconds_ = time.perf_counter() - start
    finally:
        for name, value in before.items():
            setattr(algorithm, name, value)
    return pair_scores(b.x.size(0), b.edge_index, mask, b.ptr)


def checked_control(
    algorithm: Any,
    black_box,
    instances: list[Instance],
    scores: list[Tensor],
    predicted: Tensor,
    check: str,
) -> list[Tensor]:
    """``scores`` (random ones: the control) put through the same explain-time search as the
    fitted adapter's with ``check`` (its width, budgets and protocols)."""
    from gem_core.data.packed import PackedGraphs
    from gem_core.gem.explain import apply_check

    settings = algorithm._explain_settings().with_overrides({"check.rule": check})
    packed = PackedGraphs.from_instances(instances)
    checked = apply_check(
        settings, algorithm.k_grid, black_box, packed, torch.cat(scores), predicted
    )
    return list(packed.split_pairs(checked))


def _plain_options(options: dict[str, Any]) -> dict[str, Any]:
    """The adapter's options as JSON values (tuples as lists, the settings' paths nested)."""

    def plain(value: Any) -> Any:
        if isinstance(value, tuple):
            return list(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(options)


def instances_of(graphs: Sequence[Any]) -> list[Instance]:
    """The graphs as engine instances (undirected pairs, u < v, in ``to_pairs`` order)."""
    from gem_core.data.instances import graph_instance

    return [graph_instance(g, i) for i, g in enumerate(graphs)]


def pair_scores(num_nodes: int, edge_index: Tensor, edge_mask: Tensor, ptr: Tensor) -> list[Tensor]:
    """A directed edge mask of a batch read back per graph and undirected pair (u < v), in the
    order :func:`instances_of` gives the pairs: the maximum over the pair's directions."""
    from torch_geometric.utils import coalesce

    u, v = edge_index
    lo, hi = torch.minimum(u, v), torch.maximum(u, v)
    keep = lo != hi
    pairs, values = coalesce(
        torch.stack([lo[keep], hi[keep]]), edge_mask[keep].float(), num_nodes, reduce="max"
    )
    graph_of = torch.bucketize(pairs[0], ptr[1:], right=True)
    counts = torch.bincount(graph_of, minlength=len(ptr) - 1)
    return list(torch.split(values, counts.tolist()))


def evaluate(
    black_box,
    instances: list[Instance],
    scores: list[Tensor],
    method: str,
    protocol: str,
    seconds: float,
    predicted: Optional[Tensor] = None,
    **extra: Any,
) -> OutsideResult:
    """Sufficiency@k (k = 5..25) and necessity@k (k = 2..10) of ``scores`` under ``protocol``."""
    from gem_core.evaluation.faithfulness import necessity_at_k, sufficiency_at_k

    protocol = check_protocol(protocol)
    suf = sufficiency_at_k(
        black_box, (instances, scores), SUFFICIENCY_K, protocol, predicted=predicted
    )
    nec = necessity_at_k(black_box, (instances, scores), NECESSITY_K, protocol, predicted=predicted)
    return OutsideResult(
        method, suf.at_k, nec.at_k, suf.per_class, nec.per_class, seconds, dict(extra)
    )


def _random_scores(
    model: nn.Module, train: list[Instance], instances: list[Instance], seed: int
) -> list[Tensor]:
    from gem_core.explainers.random_scores import RandomExplainer

    return list(RandomExplainer(seed=seed, task="graph").explain(instances))


def _gnnexplainer_scores(
    model: nn.Module, train: list[Instance], instances: list[Instance], seed: int
) -> list[Tensor]:
    from gem_core.explainers.gnnexplainer import GNNExplainerBaseline

    torch.manual_seed(seed)
    return list(GNNExplainerBaseline(model, "graph").explain(instances))


def _pgexplainer_scores(
    model: nn.Module, train: list[Instance], instances: list[Instance], seed: int
) -> list[Tensor]:
    from gem_core.explainers.pgexplainer import PGExplainerBaseline

    explainer = PGExplainerBaseline(model, "graph", seed=seed)
    explainer.fit(train)
    return list(explainer.explain(instances))


def _integrated_gradients_scores(
    model: nn.Module, train: list[Instance], instances: list[Instance], seed: int
) -> list[Tensor]:
    from gem_core.explainers.integrated_gradients import IntegratedGradientsExplainer

    return list(IntegratedGradientsExplainer(model, "graph").explain(instances))


#: the baselines run beside Gem on an outside model, each ``(model, train instances, instances,
#: seed) -> scores``: random edge scores, GNNExplainer and Integrated Gradients (PyG's objective
#: and Captum's, batched), PGExplainer (PyG's, fitted on the training graphs)
OUTSIDE_BASELINES: dict[
    str, Callable[[nn.Module, list[Instance], list[Instance], int], list[Tensor]]
] = {
    "random": _random_scores,
    "gnnexplainer": _gnnexplainer_scores,
    "pgexplainer": _pgexplainer_scores,
    "integrated_gradients": _integrated_gradients_scores,
}
#: Gem (the generator alone), Gem + check (the same fit, then the explain-time search that asks
#: the model) and Random + check (the same search over random scores: the control), then the
#: baselines
OUTSIDE_GEM_METHODS = ("gem", "gem_check", "random_check")
OUTSIDE_METHODS = (*OUTSIDE_GEM_METHODS, *OUTSIDE_BASELINES)
#: the search Gem + check and Random + check run (the adapter's check="repair", the rule validated
#: on these models; its width is the adapter's graph-level default)
OUTSIDE_CHECK = "repair"


def baseline_scores(
    method: str, model: nn.Module, train: list[Instance], instances: list[Instance], seed: int = 0
) -> list[Tensor]:
    """Scores of the baseline ``method`` (a key of :data:`OUTSIDE_BASELINES`) on ``instances``
    (``train``: what a baseline that learns is fitted on)."""
    if method not in OUTSIDE_BASELINES:
        raise ValueError(f"no outside baseline {method!r} ({', '.join(OUTSIDE_BASELINES)})")
    return OUTSIDE_BASELINES[method](model, train, instances, seed)


def _gem_alone(fitted, graphs, instances, black_box, predicted, baseline):
    """Gem: the generator alone (the fit's own explanation, the model not asked)."""
    return fitted["alone"], fitted["seconds"], {"explain_ms_per_graph": round(fitted["ms"], 4)}


def _gem_checked(fitted, graphs, instances, black_box, predicted, baseline):
    """Gem + check: the same fit, with the adapter's explain-time search."""
    algo = fitted["algo"]
    scores = explain_again(algo, graphs, check=OUTSIDE_CHECK)
    return (
        scores,
        fitted["seconds"],
        {
            "check": OUTSIDE_CHECK,
            "explain_ms_per_graph": round(1000 * algo.explain_seconds_ / max(len(graphs), 1), 4),
        },
    )


def _random_checked(fitted, graphs, instances, black_box, predicted, baseline):
    """Random + check: the same search over random scores (the control)."""
    rnd, rnd_seconds = baseline("random")
    t0 = time.perf_counter()
    scores = checked_control(fitted["algo"], black_box, instances, rnd, predicted, OUTSIDE_CHECK)
    seconds = rnd_seconds + time.perf_counter() - t0
    return (
        scores,
        seconds,
        {
            "check": OUTSIDE_CHECK,
            "explain_ms_per_graph": round(1000 * seconds / max(len(graphs), 1), 4),
        },
    )


#: how each Gem row of an outside run is made from the one fit
_GEM_ROWS = dict(zip(OUTSIDE_GEM_METHODS, (_gem_alone, _gem_checked, _random_checked)))


def run_outside(
    model_name: str,
    dataset,
    protocols: Sequence[str] = ("drop_isolated",),
    methods: Sequence[str] = OUTSIDE_METHODS,
    split: str = "test",
    gem_options: Optional[dict[str, Any]] = None,
    seed: int = 0,
    limit: Optional[int] = None,
    train_limit: Optional[int] = None,
    model_epochs: int = MODEL_EPOCHS,
    stability_seeds: Sequence[int] = (),
    progress: Optional[ProgressFn] = None,
) -> dict[str, Any]:
    """Every method on the outside model ``model_name`` under every protocol, on ``split``.

    Gem is fitted on the training graphs (the first ``train_limit`` when given), once per
    protocol it is judged by: its ``teacher.protocol`` follows the judging protocol unless
    ``gem_options``' ``settings`` fix it. ``limit``: only the first graphs of ``split``.
    ``stability_seeds``: also refit Gem with each of these seeds and report its stability (mean
    Jaccard of the top-k edge sets across the seeds, :func:`.faithfulness.stability`) at k =
    5, 10, 15, 20, 25 and their mean.
    """
    from gem_core.evaluation.faithfulness import stability
    from gem_core.models.targets import GNNBlackBox

    unknown = [m for m in methods if m not in OUTSIDE_METHODS]
    if unknown:
        raise ValueError(
            f"unknown method {', '.join(map(repr, unknown))} for outside models "
            f"(known: {', '.join(OUTSIDE_METHODS)})"
        )
    model, acc = outside_model(
        model_name, dataset, seed=seed, epochs=model_epochs, progress=progress
    )
    idx = getattr(dataset.split, split).tolist()
    if limit is not None:
        idx = idx[: int(limit)]
    graphs = [dataset.graphs[i] for i in idx]
    train = [dataset.graphs[i] for i in dataset.split.train.tolist()[:train_limit]]
    instances = instances_of(graphs)
    black_box = GNNBlackBox(model, "graph", len(dataset.class_names), device="cpu")
    from gem_core.models.predict import predict_proba

    predicted = predict_proba(black_box, instances).argmax(-1)
    out: dict[str, Any] = {
        "model": model_name,
        "title": OUTSIDE_MODELS[model_name].title,
        "accuracy": acc,
        "split": split,
        "instances": len(instances),
        "predicted_share": {
            str(c): round(float((predicted == c).float().mean()), 4)
            for c in range(len(dataset.class_names))
        },
        "protocols": {},
    }
    baseline_cache: dict[str, tuple[list[Tensor], float]] = {}
    train_instances: Optional[list[Instance]] = None

    def baseline(method: str) -> tuple[list[Tensor], float]:
        nonlocal train_instances
        if method not in baseline_cache:
            if train_instances is None:
                train_instances = instances_of(train)
            t0 = time.perf_counter()
            baseline_cache[method] = (
                baseline_scores(method, model, train_instances, instances, seed),
                time.perf_counter() - t0,
            )
        return baseline_cache[method]

    for protocol in protocols:
        rows = []
        fitted: dict[str, Any] = {}  # Gem's fit for this protocol: its three rows share it
        for method in methods:
            report(progress, 0.0, f"{model_name} / {protocol}: {method}")
            extra: dict[str, Any] = {}
            if method in OUTSIDE_GEM_METHODS:
                options = {
                    "epochs": 300,
                    "k": SUFFICIENCY_K,
                    "seed": seed,
                    **(gem_options or {}),
                }
                options["settings"] = {
                    "teacher.protocol": protocol,
                    **options.get("settings", {}),
                }
                if not fitted:
                    t0 = time.perf_counter()
                    alone, algo = gem_scores(model, train, graphs, **{**options, "check": "off"})
                    fitted.update(
                        algo=algo,
                        alone=alone,
                        seconds=time.perf_counter() - t0,
                        ms=1000 * algo.explain_seconds_ / max(len(graphs), 1),
                    )
                row = _GEM_ROWS[method]
                scores, seconds, extra = row(
                    fitted, graphs, instances, black_box, predicted, baseline
                )
                extra["fit_seconds"] = round(fitted["algo"].fit_seconds_, 2)
                extra["options"] = _plain_options(options)
                if stability_seeds and method == OUTSIDE_GEM_METHODS[0]:
                    report(progress, 0.0, f"{model_name} / {protocol}: Gem stability")
                    runs = [
                        scores
                        if int(s_) == int(options["seed"])
                        else gem_scores(
                            model, train, graphs, **{**options, "check": "off", "seed": int(s_)}
                        )[0]
                        for s_ in stability_seeds
                    ]
                    stab: dict[str, Any] = {
                        str(k): round(stability(runs, k), 4) for k in STABILITY_K
                    }
                    stab["mean"] = round(sum(stab.values()) / len(STABILITY_K), 4)
                    stab["seeds"] = [int(s_) for s_ in stability_seeds]
                    extra["stability"] = stab
            else:
                scores, seconds = baseline(method)
            rows.append(
                evaluate(
                    black_box, instances, scores, method, protocol, seconds, predicted, **extra
                ).to_dict()
            )
        out["protocols"][protocol] = rows
    return out
