"""The model zoo: Gem's PyG door on the graph models people train, classifiers and regressors.

Eight graph classifiers of PyG's common layers on Mutagenicity (:data:`ZOO_CLASSIFIERS`: GCN with
max pooling, GIN, GraphSAGE, GAT, and four reading bond types as ``edge_attr``: GINE, GATv2,
TransformerConv, AttentiveFP; :mod:`.outside`) and two regressors of Crippen logP on RDKit's NCI
corpus (:data:`ZOO_REGRESSORS`: GINE and AttentiveFP, both reading bond types;
:mod:`.crippen_bench`). On each, Gem is fitted through PyG's ``Explainer`` with the adapter's
defaults on the training graphs and judged on the test split under ``drop_isolated`` (a
regressor's prediction kept within 0.1 x the spread of its outputs), beside random edge scores
and GNNExplainer (the classifiers': PyG's objective, batched over the split; the regressors':
PyG's ``GNNExplainer`` with its regression objective, per molecule). Two Gem rows share one fit:
the generator alone (one forward pass, the model not asked) and Gem + check (the adapter's
explain-time search, ``check="repair"``, which asks the model: a separate method with its own ms).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Optional

from gem_core.runtime.progress import ProgressFn, report, scaled

ZOO_CLASSIFIERS = ("gcn_max", "gin", "sage", "gat", "gine", "gatv2", "transformer", "attentivefp")
ZOO_REGRESSORS = ("crippen_gine", "crippen_attentivefp")
ZOO_MODELS = ZOO_CLASSIFIERS + ZOO_REGRESSORS
#: the rows of every model: Gem's two (one fit) and the two baselines the acceptance names
ZOO_METHODS = ("gem", "gem_check", "random", "gnnexplainer")
#: the models that read bond features (``edge_attr``)
BOND_MODELS = frozenset(
    {"gine", "gatv2", "transformer", "attentivefp", "crippen_gine", "crippen_attentivefp"}
)


def _row(r: dict[str, Any], instances: int) -> dict[str, Any]:
    """A method's row: mean sufficiency, mean necessity and ms per explained graph (the
    explain call alone for Gem's rows; a baseline's whole time over the graphs)."""
    ms = r.get("ms_per_molecule", r.get("explain_ms_per_graph"))
    if ms is None:
        ms = 1000 * float(r["seconds"]) / max(instances, 1)
    return {
        "method": r["method"],
        "mean_sufficiency": r["mean_sufficiency"],
        "mean_necessity": r["mean_necessity"],
        "ms_per_graph": round(float(ms), 3),
    }


def run_zoo(
    models: Sequence[str] = ZOO_MODELS,
    seed: int = 0,
    limit: Optional[int] = None,
    train_limit: Optional[int] = 1000,
    model_epochs: Optional[int] = None,
    molecules: Optional[int] = None,
    split: str = "test",
    methods: Sequence[str] = ZOO_METHODS,
    gem_settings: Optional[dict[str, Any]] = None,
    progress: Optional[ProgressFn] = None,
) -> dict[str, Any]:
    """Every zoo model: its quality (accuracy or R²) and the ``methods`` rows (of
    :data:`ZOO_METHODS`: mean sufficiency over k = 5..25, mean necessity over k = 2..10, ms per
    graph) on the first ``limit`` graphs of ``split`` (all by default; ``"val"`` to choose
    settings, ``"test"`` to report), Gem fitted on the first ``train_limit`` training graphs
    with ``gem_settings`` (setting paths over the adapter's defaults; None: the defaults).
    ``model_epochs`` (fewer training epochs) and ``molecules`` (the Crippen corpus's first
    molecules only) make quick runs."""
    unknown = [m for m in models if m not in ZOO_MODELS]
    if unknown:
        raise ValueError(f"unknown zoo model {unknown[0]!r} (known: {', '.join(ZOO_MODELS)})")
    odd = [m for m in methods if m not in ZOO_METHODS]
    if odd or not methods:
        raise ValueError(f"zoo methods are {', '.join(ZOO_METHODS)}, got {list(methods)!r}")
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    entries = []
    dataset = None
    for i, name in enumerate(models):
        part = scaled(progress, i / len(models), (i + 1) / len(models))
        report(part, 0.0, f"zoo: {name}")
        t0 = time.perf_counter()
        if name in ZOO_CLASSIFIERS:
            from gem_core.evaluation.outside import MODEL_EPOCHS, OUTSIDE_MODELS, run_outside

            if dataset is None:
                from gem_core.data.datasets import load_dataset

                dataset = load_dataset("mutagenicity")
            res = run_outside(
                name,
                dataset,
                ("drop_isolated",),
                tuple(methods),
                split,
                gem_options={"settings": dict(gem_settings)} if gem_settings else None,
                seed=seed,
                limit=limit,
                train_limit=train_limit,
                model_epochs=model_epochs or MODEL_EPOCHS,
                progress=part,
            )
            entry = {
                "model": name,
                "title": OUTSIDE_MODELS[name].title,
                "task": "classification",
                "dataset": "mutagenicity",
                "quality": {f"{split}_accuracy": round(float(res["accuracy"][split]), 4)},
                "instances": res["instances"],
                "rows": [_row(r, res["instances"]) for r in res["protocols"]["drop_isolated"]],
            }
        else:
            from gem_core.evaluation.crippen_bench import run_crippen

            model_name = name.removeprefix("crippen_")
            res = run_crippen(
                seed=seed,
                limit=limit,
                train_limit=train_limit,
                methods=tuple(methods),
                model_name=model_name,
                molecules=molecules,
                model_epochs=model_epochs,
                split=split,
                gem_settings=dict(gem_settings) if gem_settings else None,
                progress=part,
            )
            entry = {
                "model": name,
                "title": f"{model_name} regressor of Crippen logP reading bond types (edge_attr)",
                "task": "regression",
                "dataset": "crippen_logp",
                "quality": {f"{split}_r2": res["regressor"][f"{split}_r2"]},
                "instances": res["test_molecules"],
                "rows": [_row(r, res["test_molecules"]) for r in res["rows"]],
            }
        if gem_settings:  # a sweep's variant, on the rows of the fit it made
            for row in entry["rows"]:
                if row["method"].startswith("gem"):
                    row["settings"] = dict(gem_settings)
        entry["reads_bonds"] = name in BOND_MODELS
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        entries.append(entry)
    out: dict[str, Any] = {"seed": seed, "protocol": "drop_isolated", "models": entries}
    if split != "test":  # the test run's JSON keeps its shape (assets/results/bench-zoo.json)
        out["split"] = split
    if gem_settings:
        out["gem_settings"] = dict(gem_settings)
    return out


def zoo_checks(entry: dict[str, Any]) -> list[tuple[bool, str]]:
    """The acceptance of one model: Gem alone and Gem + check each reach random's and
    GNNExplainer's mean sufficiency."""
    by = {r["method"]: r for r in entry["rows"]}
    out = []
    for gem in ("gem", "gem_check"):
        if gem not in by:
            continue
        for other in ("random", "gnnexplainer"):
            if other in by:
                g, o = by[gem]["mean_sufficiency"], by[other]["mean_sufficiency"]
                out.append((g >= o, f"{gem} mean sufficiency {g:.3f} ≥ {other}'s {o:.3f}"))
    return out
