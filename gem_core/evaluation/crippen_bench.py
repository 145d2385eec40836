"""Crippen logP: a regression target whose reasons are known, to score attributions against.

RDKit's Crippen logP is a sum of atom contributions (each atom typed by its element, its
neighbours and its hydrogens). A GNN regressor that learns it well (test R² ≥ 0.9) must take its
value from those contributions, so an explanation of its prediction can be scored against them:
per molecule, the rank correlation (Spearman ρ, and Kendall τ as the field reports it) between
an explainer's bond scores and each bond's *ground truth*, the summed contributions of its two
atoms (:func:`gem_core.chemistry.crippen.bond_contributions`). Two truths are scored:

* ``signed``: the summed contributions themselves (the issue's yardstick; a hydrophilic bond has
  a negative one, so an unsigned importance can rank it only by its size);
* ``magnitude``: their absolute values (how much a bond moves the value, either way: what an
  unsigned explainer such as Gem or GNNExplainer claims to rank).

Methods: Gem through the PyG door (``GemExplainer`` fitted with ``mode="regression"`` on the
training molecules; the generator alone, one forward pass for the whole test set, the model not
asked), Gem + check (the same fit, with the adapter's explain-time search that asks the model:
a separate row with its own ms), Gem signed (a second fit, taught each bond's signed effect on
the value, ``teacher.kind = "signed"``: what pushes logP up ranks first), Integrated Gradients
on the edge mask (Captum through PyG's ``CaptumExplainer``, signed), PyG's GNNExplainer
(regression objective, per molecule) and random scores. Also each method's sufficiency and
necessity under ``drop_isolated`` with the regression tolerance
(:mod:`gem_core.evaluation.faithfulness`) and its milliseconds per molecule.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor, nn

from gem_core.data.instances import Instance
from gem_core.runtime.progress import ProgressFn, report

#: the rows, in order: Gem (the generator alone), Gem + check (the same fit with the
#: explain-time search that asks the model: a separate method), then the baselines
CRIPPEN_METHODS = (
    "gem",
    "gem_check",
    "gem_signed",
    "integrated_gradients",
    "gnnexplainer",
    "random",
)


def _crippen_gine(features: int) -> nn.Module:
    from gem_core.chemistry.crippen import CrippenGINE

    return CrippenGINE(in_channels=features)


def _crippen_attentivefp(features: int) -> nn.Module:
    from gem_core.chemistry.crippen import NUM_BOND_FEATURES
    from gem_core.evaluation.outside import AttentiveFPModel

    return AttentiveFPModel(features, 1, NUM_BOND_FEATURES, hidden=64)


#: the regressors, each built from the atom-feature count: chemistry/crippen's GINE, and PyG's
#: AttentiveFP (both read the bond types)
CRIPPEN_RECIPES: dict[str, Callable[[int], nn.Module]] = {
    "gine": _crippen_gine,
    "attentivefp": _crippen_attentivefp,
}
CRIPPEN_MODELS = tuple(CRIPPEN_RECIPES)
#: the search of the Gem + check row (the adapter's, as on the outside classifiers)
CRIPPEN_CHECK = "repair"
#: the budgets Gem is taught and the metrics judge (molecules of the corpus have ~10-40 bonds)
SUFFICIENCY_K = tuple(range(5, 26))
NECESSITY_K = tuple(range(2, 11))
REGRESSION_CONFIG = dict(mode="regression", task_level="graph", return_type="raw")


def _truths(instances: Sequence[Instance], graphs: Sequence[Any]) -> list[Tensor]:
    """Per molecule, each undirected bond's summed atom contributions, in the instance's order."""
    out = []
    for inst, g in zip(instances, graphs):
        c = g.atom_contrib.double()
        out.append(c[inst.pairs[0]] + c[inst.pairs[1]])
    return out


def rank_agreement(scores: Sequence[Tensor], truths: Sequence[Tensor]) -> dict[str, float]:
    """Mean per-molecule Spearman ρ and Kendall τ of ``scores`` against ``truths`` (molecules
    with fewer than 3 bonds, or constant scores or truth, are left out and counted)."""
    from scipy.stats import kendalltau, spearmanr

    rhos, taus = [], []
    for s, t in zip(scores, truths):
        a, b = s.double().numpy(), t.double().numpy()
        if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
            continue
        rhos.append(float(spearmanr(a, b).statistic))
        taus.append(float(kendalltau(a, b).statistic))
    return {
        "spearman": round(float(np.mean(rhos)), 4) if rhos else float("nan"),
        "kendall": round(float(np.mean(taus)), 4) if taus else float("nan"),
        "molecules": len(rhos),
    }


def _pair_scores(batch: Any, edge_mask: Tensor, instances: Sequence[Instance]) -> list[Tensor]:
    """A directed edge mask of a batch as pair scores in each instance's pair order."""
    from gem_core.evaluation.outside import pair_scores

    scores = pair_scores(batch.num_nodes, batch.edge_index, edge_mask.detach(), batch.ptr)
    for inst, s in zip(instances, scores):
        if s.numel() != inst.num_pairs:  # pragma: no cover - the orders are both (u, v) sorted
            raise RuntimeError("an edge mask does not cover its molecule's bonds")
    return scores


def _in_forward_order(model: Any, **tensors: Any) -> dict[str, Any]:
    """Keyword tensors in the order of the model's ``forward`` parameters: PyG's Captum wrapper
    passes them on by position."""
    import inspect

    names = list(inspect.signature(model.forward).parameters)
    return dict(sorted(tensors.items(), key=lambda kv: names.index(kv[0])))


def _one_by_one(
    explainer: Any, graphs: Sequence[Any], instances: Sequence[Instance]
) -> list[Tensor]:
    """A per-molecule PyG explainer's pair scores (signed as it gives them)."""
    from torch_geometric.data import Batch

    out = []
    for g, inst in zip(graphs, instances):
        b = Batch.from_data_list([g])
        kwargs = _in_forward_order(explainer.model, batch=b.batch, edge_attr=b.edge_attr)
        mask = explainer(b.x, b.edge_index, **kwargs).edge_mask
        out.extend(_pair_scores(b, mask, [inst]))
    return out


#: the kind of a cached Crippen regressor in the store
CRIPPEN_KIND = "gem-crippen-regressor"


def crippen_regressor(
    name: str, seed: int, graphs: Sequence[Any], epochs: Optional[int] = None
) -> tuple[Any, dict[str, Any]]:
    """The regressor ``name`` (:data:`CRIPPEN_MODELS`) trained on ``graphs`` (seeded split;
    ``epochs``: at most that many, else the recipe's), from the store when the same recipe was
    trained before on the same molecules with the same seed (weights and split are saved)."""
    from gem_core.chemistry.crippen import train_crippen_regressor
    from gem_core.runtime.store import cache_dir, cached, config_key

    if name not in CRIPPEN_RECIPES:
        raise ValueError(f"unknown Crippen model {name!r} (known: {', '.join(CRIPPEN_MODELS)})")
    features = int(graphs[0].x.size(1))

    def train() -> dict[str, Any]:
        torch.manual_seed(seed)  # the initial weights (the trainer seeds its own steps again)
        model = CRIPPEN_RECIPES[name](features)
        if epochs is None:
            model, metrics = train_crippen_regressor(graphs, seed=seed, model=model)
        else:
            model, metrics = train_crippen_regressor(
                graphs, seed=seed, model=model, epochs=int(epochs)
            )
        return {"kind": CRIPPEN_KIND, "state": model.state_dict(), "metrics": metrics}

    smiles = [str(g.smiles) for g in graphs]
    key = config_key(model=name, seed=int(seed), epochs=epochs, molecules=smiles, version=1)
    state = cached(cache_dir() / "crippen_models" / f"{name}-{key}.pt", train, CRIPPEN_KIND)
    model = CRIPPEN_RECIPES[name](features)
    model.load_state_dict(state["state"])
    model.eval()
    return model, dict(state["metrics"])


def run_crippen(
    seed: int = 0,
    limit: Optional[int] = 300,
    train_limit: Optional[int] = 1500,
    methods: Sequence[str] = CRIPPEN_METHODS,
    gem_epochs: int = 300,
    model_name: str = "gine",
    molecules: Optional[int] = None,
    model_epochs: Optional[int] = None,
    split: str = "test",
    gem_settings: Optional[dict[str, Any]] = None,
    progress: Optional[ProgressFn] = None,
) -> dict[str, Any]:
    """Train the Crippen regressor ``model_name`` (seeded split), then score every method on the
    first ``limit`` test molecules; Gem is fitted on the first ``train_limit`` training
    molecules (once: Gem + check explains again with the same fit). ``molecules``: only the
    corpus's first molecules; ``model_epochs``: fewer training epochs (both for quick runs).
    ``split``: ``"val"`` to choose settings (``gem_settings``: setting paths of Gem's fits),
    ``"test"`` to report."""
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    from torch_geometric.data import Batch
    from torch_geometric.explain import Explainer

    from gem_core.chemistry.crippen import crippen_graphs
    from gem_core.evaluation.faithfulness import necessity_at_k, sufficiency_at_k
    from gem_core.models.predict import predict_values
    from gem_core.pyg import GemExplainer
    from gem_core.pyg.black_box import PyGBlackBox
    from gem_core.pyg.computation_graphs import graph_fit_instances
    from gem_core.pyg.edge_inputs import fit_edge_inputs

    unknown = [m for m in methods if m not in CRIPPEN_METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r} (known: {', '.join(CRIPPEN_METHODS)})")
    report(progress, 0.0, "reading the corpus")
    graphs = crippen_graphs(molecules)
    report(progress, 0.05, "training the regressor")
    model, metrics = crippen_regressor(model_name, seed, graphs, model_epochs)
    train_seconds = float(metrics["seconds"])  # when it was trained (the store keeps it)
    test = [graphs[i] for i in metrics[f"{split}_idx"]][:limit]
    train = [graphs[i] for i in metrics["train_idx"]][:train_limit]
    edge_inputs = fit_edge_inputs(model, test, "graph")
    instances, _ = graph_fit_instances(test, None, None, False, edge_inputs)
    black_box = PyGBlackBox(model, "graph", "regression", "raw", "cpu", None, edge_inputs)
    truths = _truths(instances, test)
    whole = predict_values(black_box, instances)  # the values every metric compares with, once
    batch = Batch.from_data_list(test)
    runs: dict[str, Callable[[], tuple[list[Tensor], dict[str, Any]]]] = {}

    fitted: dict[str, Any] = {}

    def gem_explain(
        check: str, teacher: Optional[str] = None
    ) -> tuple[list[Tensor], dict[str, Any]]:
        key = teacher or "default"
        if key not in fitted:
            settings = {**(gem_settings or {}), **({"teacher.kind": teacher} if teacher else {})}
            fitted[key] = Explainer(
                model,
                GemExplainer(
                    epochs=gem_epochs, k=SUFFICIENCY_K, seed=seed, settings=settings or None
                ),
                "model",
                REGRESSION_CONFIG,
                edge_mask_type="object",
            )
            fitted[key].algorithm.fit(model, train)
        explainer = fitted[key]
        explainer.algorithm.check = check
        t = time.perf_counter()
        mask = explainer(batch.x, batch.edge_index, batch=batch.batch, edge_attr=batch.edge_attr)
        ms = 1000 * (time.perf_counter() - t) / len(test)
        scores = _pair_scores(batch, mask.edge_mask, instances)
        extra = {"ms": ms, "fit_seconds": round(explainer.algorithm.fit_seconds_, 2)}
        if check != "off":
            extra["check"] = check
        if teacher:
            extra["teacher"] = teacher
        return scores, extra

    def per_molecule(algorithm: Any) -> Callable[[], tuple[list[Tensor], dict[str, Any]]]:
        def run() -> tuple[list[Tensor], dict[str, Any]]:
            explainer = Explainer(
                model, algorithm, "model", REGRESSION_CONFIG, edge_mask_type="object"
            )
            t = time.perf_counter()
            scores = _one_by_one(explainer, test, instances)
            return scores, {"ms": 1000 * (time.perf_counter() - t) / len(test)}

        return run

    def random() -> tuple[list[Tensor], dict[str, Any]]:
        from gem_core.explainers.random_scores import RandomExplainer

        t = time.perf_counter()
        scores = list(RandomExplainer(seed=seed, task="graph").explain(instances))
        return scores, {"ms": 1000 * (time.perf_counter() - t) / len(test)}

    from torch_geometric.explain.algorithm import CaptumExplainer, GNNExplainer

    runs["gem"] = lambda: gem_explain("off")
    runs["gem_check"] = lambda: gem_explain(CRIPPEN_CHECK)
    runs["gem_signed"] = lambda: gem_explain("off", "signed")
    runs["integrated_gradients"] = per_molecule(CaptumExplainer("IntegratedGradients"))
    runs["gnnexplainer"] = per_molecule(GNNExplainer(epochs=100))
    runs["random"] = random
    rows = []
    for i, name in enumerate(methods):
        report(progress, 0.1 + 0.9 * i / len(methods), f"explaining with {name}")
        torch.manual_seed(seed)
        scores, extra = runs[name]()
        signed = rank_agreement(scores, truths)
        magnitude = rank_agreement([s.abs() for s in scores], [t.abs() for t in truths])
        judged = (black_box, (instances, scores))
        suff = sufficiency_at_k(*judged, SUFFICIENCY_K, "drop_isolated", predicted=whole)
        nec = necessity_at_k(*judged, NECESSITY_K, "drop_isolated", predicted=whole)
        rows.append(
            {
                "method": name,
                "spearman": signed["spearman"],
                "kendall": signed["kendall"],
                "spearman_magnitude": magnitude["spearman"],
                "kendall_magnitude": magnitude["kendall"],
                "molecules_ranked": signed["molecules"],
                "mean_sufficiency": round(float(np.mean(list(suff.at_k.values()))), 4),
                "mean_necessity": round(float(np.mean(list(nec.at_k.values()))), 4),
                "ms_per_molecule": round(float(extra.pop("ms")), 3),
                **extra,
            }
        )
    report(progress, 1.0, "done")
    return {
        "split": split,
        "model": model_name,
        "reads_bonds": True,
        "seed": seed,
        "molecules": len(graphs),
        "test_molecules": len(test),
        "gem_train_molecules": len(train),
        "regressor": {
            "train_r2": round(float(metrics["train_r2"]), 4),
            "val_r2": round(float(metrics["val_r2"]), 4),
            "test_r2": round(float(metrics["test_r2"]), 4),
            "epochs": int(metrics["epochs"]),
            "seconds": round(train_seconds, 1),
        },
        "rows": rows,
    }
