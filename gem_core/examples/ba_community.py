"""BA-Community: Gem against PyG's GNNExplainer and PGExplainer on a user's own model.

A dataset the engine has never seen, built from PyG pieces: two BA-shapes graphs (PyG's
``ExplainerDataset(BAGraph(300, 5), HouseMotif(), 80)`` each) joined by a few random edges
between their base graphs. Node features are drawn per community (10 dimensions: the first two
``N(-1, 0.5²)`` in community A and ``N(+1, 0.5²)`` in community B, the other eight ``N(0, 1)``
noise), so a node's class, ``role + 4 · community`` (8 classes: base, top, middle, bottom of a
house, in A or B), needs both its features and the structure around it. The ground-truth
explanation of a house node is its house (``motif_edge_mask``).

The explained model is a plain 3-layer GIN returning log-probabilities (:class:`GIN`), trained
here like any user model. All three explainers are used through PyG's ``Explainer``:

* **Gem** (:class:`gem_core.pyg.GemExplainer`): fitted on the training house nodes, then all
  test nodes are explained in one call, ``explainer(x, edge_index, index=test_nodes)``.
* **GNNExplainer** (PyG, 100 epochs): one call per node on the node's computation graph (its
  k-hop subgraph; faster than the whole graph and the same explanation for a GIN).
* **PGExplainer** (PyG, 30 epochs): trained on the same training nodes against the model's
  predictions (``"phenomenon"`` with the prediction as target, PyG's only mode for it), one call
  per node on the node's computation graph (PyG's node-level PGExplainer takes a single index).

All explanations are measured by the engine (:mod:`gem_core.evaluation.metrics`): accuracy at K (keep the
K best undirected edges of the computation graph, delete the others, is the prediction still
the true label?), edge ROC-AUC against the house edges, and milliseconds per explained node
(wall clock of the explain calls, divided by the number of nodes).

Run the full-size comparison with ``python -m gem_core.examples.ba_community`` (``--small`` for
a quick run, ``--json PATH`` to save the figures).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from gem_core.data.instances import Instance, node_instance
from gem_core.evaluation.metrics import MethodResult, evaluate_scores
from gem_core.explainers._pyg import directed_to_pairs
from gem_core.pyg import GemExplainer, PyGBlackBox, count_hops
from gem_core.runtime.progress import ProgressFn, report, scaled

MODEL_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="log_probs")
K_GRID = (5, 6, 7, 8, 9)
METHODS = ("gem", "gnnexplainer", "pgexplainer")
TITLES = {"gem": "Gem", "gnnexplainer": "GNNExplainer", "pgexplainer": "PGExplainer"}


# ----------------------------------------------------------------------------- the dataset


def ba_community(
    num_base: int = 300,
    base_edges: int = 5,
    num_motifs: int = 80,
    inter_edges: Optional[int] = None,
    num_features: int = 10,
    seed: int = 0,
) -> Data:
    """Two BA-shapes graphs joined into one, node features drawn per community.

    Args:
        num_base: nodes of each Barabási-Albert base graph.
        base_edges: edges added with each new BA node.
        num_motifs: house motifs attached to each base graph.
        inter_edges: random edges between the two base graphs (default ``num_base // 30``).
        num_features: feature width (at least 2: the first two carry the community).
        seed: seeds the graphs, the features and the splits.
    Returns:
        ``Data`` with ``x``, a coalesced symmetric ``edge_index``, ``y`` (8 classes),
        ``motif_edge_mask`` (per directed edge: inside a house), ``community`` and seeded
        70/10/20 ``train_mask`` / ``val_mask`` / ``test_mask``.
    """
    from torch_geometric.datasets import ExplainerDataset
    from torch_geometric.datasets.graph_generator import BAGraph
    from torch_geometric.datasets.motif_generator import HouseMotif
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    if num_features < 2:
        raise ValueError("num_features must be at least 2")
    np_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)  # PyG's generators draw from numpy's global generator too
        parts = [
            ExplainerDataset(
                BAGraph(num_nodes=num_base, num_edges=base_edges),
                HouseMotif(),
                num_motifs=num_motifs,
            )[0]
            for _ in range(2)
        ]
        n_a = parts[0].num_nodes
        n_links = num_base // 30 if inter_edges is None else int(inter_edges)
        gen = torch.Generator().manual_seed(seed + 1)
        links = torch.stack(
            [
                torch.randint(0, num_base, (n_links,), generator=gen),
                torch.randint(0, num_base, (n_links,), generator=gen) + n_a,
            ]
        )
        edge_index = torch.cat([parts[0].edge_index, parts[1].edge_index + n_a, links], dim=1)
        motif = torch.cat([parts[0].edge_mask, parts[1].edge_mask, torch.zeros(n_links)])
        community = torch.cat(
            [torch.zeros(n_a, dtype=torch.long), torch.ones(parts[1].num_nodes, dtype=torch.long)]
        )
        n = int(community.numel())
        x = torch.randn(n, num_features, generator=gen)
        x[:, :2] = 0.5 * x[:, :2] + (2.0 * community.float() - 1.0).unsqueeze(1)
        y = torch.cat([parts[0].y, parts[1].y + 4]).long()
        perm = torch.randperm(n, generator=gen)
    np.random.set_state(np_state)
    edge_index, motif = to_undirected(edge_index, motif.float(), num_nodes=n, reduce="max")
    edge_index, motif = remove_self_loops(edge_index, motif)
    edge_index, motif = coalesce(edge_index, motif, num_nodes=n, reduce="max")
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    n_val, n_test = int(round(0.1 * n)), int(round(0.2 * n))
    masks[0][perm[n_val + n_test :]] = True
    masks[1][perm[:n_val]] = True
    masks[2][perm[n_val : n_val + n_test]] = True
    return Data(
        x=x,
        edge_index=edge_index,
        y=y,
        motif_edge_mask=motif > 0,
        community=community,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_nodes=n,
    )


# ----------------------------------------------------------------------------- a user's model


class GIN(nn.Module):
    """A plain GIN node classifier (``num_layers`` GINConv layers, a linear head, log-softmax)."""

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, num_layers: int = 3):
        super().__init__()
        from torch_geometric.nn import GINConv

        dims = [in_channels] + [hidden] * num_layers
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)))
            for a, b in zip(dims[:-1], dims[1:])
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.head(x).log_softmax(dim=-1)


def train_node_classifier(
    model: nn.Module,
    data: Data,
    epochs: int = 1000,
    lr: float = 0.005,
    weight_decay: float = 5e-4,
    patience: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """Full-batch NLL training with early stopping on validation accuracy; returns accuracies."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, since = -1.0, None, 0
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.nll_loss(
            model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]
        ).backward()
        opt.step()
        acc = _accuracies(model, data)
        if acc["val"] > best:
            best, since = acc["val"], 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            since += 1
            if since >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return _accuracies(model, data)


@torch.no_grad()
def _accuracies(model: nn.Module, data: Data) -> dict[str, float]:
    model.eval()
    pred = model(data.x, data.edge_index).argmax(-1)
    return {
        name: float((pred[m] == data.y[m]).float().mean())
        for name, m in (
            ("train", data.train_mask),
            ("val", data.val_mask),
            ("test", data.test_mask),
        )
    }


# ----------------------------------------------------------------------------- helpers


def _target_node(inst: Instance) -> int:
    """The explained node of a node-task instance, as its computation graph numbers it."""
    assert inst.target is not None  # the instances here are all of a node task
    return int(inst.target)


def pair_scores(
    instance: Instance, edge_index: Tensor, num_nodes: int, edge_mask: Tensor
) -> Tensor:
    """Scores of ``instance``'s pairs read from a mask over the directed edges of the full graph.

    A pair gets the maximum of the values of the directed edges joining its two nodes.
    """
    ei = edge_index.cpu().numpy().astype(np.int64)
    lo, hi = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    keys = lo * num_nodes + hi
    uniq, inverse = np.unique(keys, return_inverse=True)
    best = np.full(uniq.size, -np.inf)
    np.maximum.at(best, inverse.reshape(-1), edge_mask.detach().cpu().double().numpy())
    assert instance.node_ids is not None  # a node-task instance knows its graph's node ids
    ids = instance.node_ids[instance.pairs].numpy()
    want = ids[0] * num_nodes + ids[1]
    pos = np.searchsorted(uniq, want)
    if want.size and not bool((uniq[np.minimum(pos, uniq.size - 1)] == want).all()):
        raise ValueError("the instance has pairs that are not edges of the graph")
    return torch.from_numpy(best[pos]).float()


def explain_nodes(data: Data, nodes: Sequence[int], num_hops: int) -> list[Instance]:
    """The engine's instances (computation graphs with their house masks) of ``nodes``."""
    return [node_instance(data, int(v), num_hops, "ba_community") for v in nodes]


@torch.no_grad()
def _subgraph_targets(model: nn.Module, inst: Instance) -> Tensor:
    return model(inst.x, inst.edge_index()).argmax(-1)


# ----------------------------------------------------------------------------- the three methods


def run_gem(
    model: nn.Module,
    data: Data,
    train_nodes: Tensor,
    test_nodes: Tensor,
    instances: Sequence[Instance],
    k_grid: Sequence[int],
    epochs: int,
    seed: int,
    model_config: dict,
    progress: Optional[ProgressFn] = None,
    repeats: int = 3,
) -> tuple[list[Tensor], float, float]:
    """Fit Gem through PyG's Explainer, explain all test nodes in one call; scores, ms, fit s.

    The explain call is timed ``repeats`` times; the median is reported.
    """
    from torch_geometric.explain import Explainer

    explainer = Explainer(
        model,
        algorithm=GemExplainer(epochs=epochs, k=tuple(k_grid), seed=seed),
        explanation_type="model",
        model_config=model_config,
        edge_mask_type="object",
    )
    start = time.perf_counter()
    explainer.algorithm.fit(model, data, index=train_nodes, progress=progress)
    fit_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        explanation = explainer(data.x, data.edge_index, index=test_nodes)
        times.append(time.perf_counter() - start)
    ms = 1000.0 * float(np.median(times)) / len(instances)
    rows = (
        explanation.edge_masks.to_dense()
        if len(instances) > 1
        else explanation.edge_mask.unsqueeze(0)
    )
    scores = [
        pair_scores(inst, data.edge_index, data.num_nodes, row)
        for inst, row in zip(instances, rows)
    ]
    return scores, ms, fit_s


def run_gnnexplainer(
    model: nn.Module,
    instances: Sequence[Instance],
    epochs: int,
    seed: int,
    model_config: dict,
    progress: Optional[ProgressFn] = None,
) -> tuple[list[Tensor], float]:
    """PyG's GNNExplainer, one call per node on its computation graph; scores and ms."""
    from torch_geometric.explain import Explainer, GNNExplainer

    explainer = Explainer(
        model,
        algorithm=GNNExplainer(epochs=epochs),
        explanation_type="model",
        model_config=model_config,
        edge_mask_type="object",
    )
    scores, elapsed = [], 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i, inst in enumerate(instances):
            ei = inst.edge_index()
            start = time.perf_counter()
            expl = explainer(inst.x, ei, index=_target_node(inst))
            elapsed += time.perf_counter() - start
            scores.append(directed_to_pairs(expl.edge_mask, inst.num_pairs))
            report(progress, (i + 1) / len(instances), f"GNNExplainer {i + 1}/{len(instances)}")
    return scores, 1000.0 * elapsed / len(instances)


def run_pgexplainer(
    model: nn.Module,
    train: Sequence[Instance],
    instances: Sequence[Instance],
    epochs: int,
    seed: int,
    model_config: dict,
    lr: float = 0.003,
    progress: Optional[ProgressFn] = None,
    repeats: int = 3,
) -> tuple[list[Tensor], float, float]:
    """PyG's PGExplainer trained on ``train`` (per node, PyG's ``train`` step), one call per node.

    The pass over all nodes is timed ``repeats`` times; the median is reported.
    """
    from torch_geometric.explain import Explainer, PGExplainer

    algo = PGExplainer(epochs=epochs, lr=lr)
    # PyG keeps the coefficients in a class-level dict that keyword arguments mutate: set every
    # coefficient on this instance instead (PyG's defaults).
    algo.coeffs = {"edge_size": 0.05, "edge_ent": 1.0, "temp": [5.0, 2.0], "bias": 0.01}
    explainer = Explainer(
        model,
        algorithm=algo,
        explanation_type="phenomenon",
        model_config=model_config,
        edge_mask_type="object",
    )
    gen = torch.Generator().manual_seed(seed)
    fit_data = [
        (inst.x, inst.edge_index(), _subgraph_targets(model, inst), _target_node(inst))
        for inst in train
    ]
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")
        torch.manual_seed(seed)
        for epoch in range(epochs):
            for j in torch.randperm(len(fit_data), generator=gen).tolist():
                x, ei, target, index = fit_data[j]
                algo.train(epoch, model, x, ei, target=target, index=index)
            report(progress, 0.8 * (epoch + 1) / epochs, f"PGExplainer epoch {epoch + 1}/{epochs}")
    fit_s = time.perf_counter() - start
    targets = [_subgraph_targets(model, inst) for inst in instances]
    totals = []
    for _ in range(repeats):
        scores, elapsed = [], 0.0
        for inst, target in zip(instances, targets):
            ei = inst.edge_index()
            start = time.perf_counter()
            expl = explainer(inst.x, ei, target=target, index=_target_node(inst))
            elapsed += time.perf_counter() - start
            scores.append(directed_to_pairs(expl.edge_mask, inst.num_pairs))
        totals.append(elapsed)
    ms = 1000.0 * float(np.median(totals)) / len(instances)
    report(progress, 1.0, "PGExplainer done")
    return scores, ms, fit_s


# ----------------------------------------------------------------------------- the comparison


@dataclass
class Comparison:
    """Results of the three methods on the same test nodes, measured by the engine."""

    results: dict[str, MethodResult]
    k_grid: tuple[int, ...]
    num_test: int
    num_train: int
    model_accuracy: dict[str, float] = field(default_factory=dict)

    def mean_accuracy(self, method: str) -> float:
        acc = self.results[method].accuracy_at_k
        return float(np.mean([acc[k] for k in self.k_grid]))

    def speedup(self, baseline: str) -> float:
        """How many times faster Gem explains a node than ``baseline``."""
        return self.results[baseline].ms_per_instance / max(
            self.results["gem"].ms_per_instance, 1e-12
        )

    def gem_wins(self) -> dict[str, bool]:
        """The acceptance checks: accuracy at every K and AUC at least the baselines', speed."""
        gem = self.results["gem"]
        out = {}
        for b in ("gnnexplainer", "pgexplainer"):
            base = self.results[b]
            out[f"accuracy >= {b} at every K"] = all(
                gem.accuracy_at_k[k] >= base.accuracy_at_k[k] for k in self.k_grid
            )
            out[f"auc >= {b}"] = (gem.edge_auc or 0.0) >= (base.edge_auc or 0.0)
        out["10x faster than pgexplainer"] = self.speedup("pgexplainer") >= 10.0
        out["1000x faster than gnnexplainer"] = self.speedup("gnnexplainer") >= 1000.0
        return out

    def table(self) -> str:
        head = f"{'method':<14}" + "".join(f"{'acc@' + str(k):>8}" for k in self.k_grid)
        head += f"{'mean':>8}{'edge AUC':>10}{'ms/node':>11}{'fit s':>9}"
        lines = [
            f"BA-Community: {self.num_test} test house nodes, explainers fitted on "
            f"{self.num_train} training house nodes; accuracy in %",
            head,
            "-" * len(head),
        ]
        for m in METHODS:
            r = self.results[m]
            row = f"{TITLES[m]:<14}" + "".join(
                f"{100 * r.accuracy_at_k[k]:>8.1f}" for k in self.k_grid
            )
            auc = "–" if r.edge_auc is None else f"{r.edge_auc:.3f}"
            row += (
                f"{100 * self.mean_accuracy(m):>8.1f}{auc:>10}{r.ms_per_instance:>11.3f}"
                f"{r.fit_seconds:>9.1f}"
            )
            lines.append(row)
        lines.append("")
        lines.append(
            f"Gem explains a node {self.speedup('pgexplainer'):,.1f}x faster than PGExplainer "
            f"and {self.speedup('gnnexplainer'):,.0f}x faster than GNNExplainer."
        )
        if self.model_accuracy:
            acc = ", ".join(f"{k} {100 * v:.1f}%" for k, v in self.model_accuracy.items())
            lines.append(f"explained model (GIN) accuracy: {acc}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "k_grid": list(self.k_grid),
            "num_test": self.num_test,
            "num_train": self.num_train,
            "model_accuracy": self.model_accuracy,
            "results": {m: r.to_dict() for m, r in self.results.items()},
            "speedup": {b: self.speedup(b) for b in ("gnnexplainer", "pgexplainer")},
            "checks": self.gem_wins(),
        }


def compare(
    model: nn.Module,
    data: Data,
    train_nodes: Tensor,
    test_nodes: Tensor,
    *,
    k_grid: Sequence[int] = K_GRID,
    gem_epochs: int = 300,
    gnn_epochs: int = 100,
    pg_epochs: int = 30,
    model_config: Optional[dict] = None,
    seed: int = 0,
    progress: Optional[ProgressFn] = None,
) -> Comparison:
    """Fit and run Gem, GNNExplainer and PGExplainer on ``model``; measure them with the engine.

    Args:
        model: the trained node classifier (any PyG model: Gem only calls it, GNNExplainer and
            PGExplainer also use its gradients and, for PGExplainer, its embeddings).
        data: the graph, with ``y`` and ``motif_edge_mask`` (ground-truth explanation edges).
        train_nodes: nodes Gem and PGExplainer are fitted on.
        test_nodes: nodes explained and measured.
        k_grid: the K values of accuracy at K (undirected edges).
        gem_epochs, gnn_epochs, pg_epochs: training epochs of the three methods.
        model_config: PyG model config (default :data:`MODEL_CONFIG`, log-probabilities).
        seed: seeds every method.
    """
    model.eval()
    config = dict(model_config or MODEL_CONFIG)
    hops = count_hops(model)
    train_nodes = torch.as_tensor(train_nodes).view(-1)
    test_nodes = torch.as_tensor(test_nodes).view(-1)
    test = explain_nodes(data, test_nodes.tolist(), hops)
    train = explain_nodes(data, train_nodes.tolist(), hops)
    black_box = PyGBlackBox(model, "node", config["mode"], config["return_type"], data.x.device)
    scores, ms, fit = {}, {}, {}
    scores["gem"], ms["gem"], fit["gem"] = run_gem(
        model,
        data,
        train_nodes,
        test_nodes,
        test,
        k_grid,
        gem_epochs,
        seed,
        config,
        scaled(progress, 0.0, 0.5),
    )
    scores["pgexplainer"], ms["pgexplainer"], fit["pgexplainer"] = run_pgexplainer(
        model, train, test, pg_epochs, seed, config, progress=scaled(progress, 0.5, 0.75)
    )
    scores["gnnexplainer"], ms["gnnexplainer"] = run_gnnexplainer(
        model, test, gnn_epochs, seed, config, scaled(progress, 0.75, 1.0)
    )
    fit["gnnexplainer"] = 0.0
    results = {
        m: evaluate_scores(
            black_box, test, scores[m], k_grid, ms_per_instance=ms[m], fit_seconds=fit[m]
        )
        for m in METHODS
    }
    return Comparison(results, tuple(k_grid), len(test), len(train))


def house_nodes(data: Data, mask: Tensor, limit: Optional[int] = None, seed: int = 0) -> Tensor:
    """House nodes (``y % 4 != 0``) of a split, optionally a seeded sample of ``limit`` of them."""
    nodes = torch.nonzero(mask & (data.y % 4 != 0)).view(-1)
    if limit is not None and nodes.numel() > limit:
        keep = torch.randperm(nodes.numel(), generator=torch.Generator().manual_seed(seed))[:limit]
        nodes = nodes[keep.sort().values]
    return nodes


SIZES = {
    # full: the comparison of docs/pyg.md; small: a quick run (the doc test uses it)
    "full": dict(
        num_base=300,
        num_motifs=80,
        gem_epochs=300,
        gnn_epochs=100,
        pg_epochs=30,
        max_train=300,
        model_epochs=1000,
    ),
    "small": dict(
        num_base=60,
        num_motifs=12,
        gem_epochs=60,
        gnn_epochs=30,
        pg_epochs=5,
        max_train=40,
        model_epochs=300,
    ),
}


def run(size: str = "full", seed: int = 0, progress: Optional[ProgressFn] = None) -> Comparison:
    """Build BA-Community, train the GIN, compare the three explainers (``size``: full / small)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    s = SIZES[size]
    data = ba_community(num_base=s["num_base"], num_motifs=s["num_motifs"], seed=seed)
    torch.manual_seed(seed)
    model = GIN(data.num_features, 8)
    accuracy = train_node_classifier(model, data, epochs=s["model_epochs"], seed=seed)
    comparison = compare(
        model,
        data,
        house_nodes(data, data.train_mask, s["max_train"], seed),
        house_nodes(data, data.test_mask),
        gem_epochs=s["gem_epochs"],
        gnn_epochs=s["gnn_epochs"],
        pg_epochs=s["pg_epochs"],
        seed=seed,
        progress=progress,
    )
    comparison.model_accuracy = accuracy
    return comparison


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gem_core.examples.ba_community",
        description="Gem vs PyG's GNNExplainer and PGExplainer on BA-Community (a user's GIN).",
    )
    parser.add_argument("--small", action="store_true", help="a quick, small run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    from gem_core.runtime.device import configure_threads
    from gem_core.runtime.progress import tqdm_progress

    configure_threads(args.threads)
    with tqdm_progress("BA-Community", enabled=not args.quiet) as progress:
        comparison = run("small" if args.small else "full", args.seed, progress)
    print(comparison.table())
    checks = comparison.gem_wins()
    print("checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(comparison.to_dict(), fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
