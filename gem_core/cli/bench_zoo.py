"""The model zoo: Gem on 8 graph classifiers and 2 regressors of PyG's common layers, 6 reading bonds.

Classifiers on Mutagenicity's split: GCN (max pooling), GIN, GraphSAGE, GAT, and, reading bond
types as edge_attr, GINE, GATv2, TransformerConv and AttentiveFP; regressors of Crippen logP on
RDKit's NCI corpus: GINE and AttentiveFP (bond types as edge_attr). On each: Gem fitted through
PyG's Explainer with the adapter's defaults (the generator alone; Gem + check, the same fit with
the explain-time search that asks the model), random edge scores and GNNExplainer, judged on the
test split under drop_isolated (a regressor's value kept within 0.1 x the spread of its outputs):
mean sufficiency over k = 5..25, mean necessity over k = 2..10, ms per graph. Checks: Gem and
Gem + check each ≥ random's and GNNExplainer's mean sufficiency, per model.
"""

from __future__ import annotations

import argparse

from gem_core.cli.common import add_command, parse_names, progress_bar, write_json

# gem_core.evaluation.zoo.ZOO_MODELS, repeated so that bad input is answered without torch
MODELS = (
    "gcn_max",
    "gin",
    "sage",
    "gat",
    "gine",
    "gatv2",
    "transformer",
    "attentivefp",
    "crippen_gine",
    "crippen_attentivefp",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "zoo", run, __doc__, dataset=False, check=_check)
    p.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated zoo models (default: all)"
    )
    p.add_argument("--seed", type=int, default=0, help="models, Gem and baselines (default 0)")
    p.add_argument(
        "--limit", type=int, default=None, metavar="N", help="first N test graphs (default: all)"
    )
    p.add_argument(
        "--train-limit",
        type=int,
        default=1000,
        metavar="N",
        help="training graphs Gem is fitted on (default 1000)",
    )


def _check(args: argparse.Namespace) -> None:
    parse_names(args.models, MODELS, "model")
    for name in ("limit", "train_limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer")


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.zoo import run_zoo, zoo_checks

    with progress_bar(args, "zoo") as progress:
        result = run_zoo(
            parse_names(args.models, MODELS, "model"),
            seed=args.seed,
            limit=args.limit,
            train_limit=args.train_limit,
            progress=progress,
        )
    print(
        f"{'model':<20} {'task':<14} {'bonds':<5} {'quality':>8} | "
        f"{'Gem':>11} {'Gem+check':>11} {'random':>11} {'GNNExpl.':>11}   (suff / nec)"
    )
    passed = total = 0
    for entry in result["models"]:
        by = {r["method"]: r for r in entry["rows"]}
        quality = next(iter(entry["quality"].values()))
        cells = " ".join(
            f"{by[m]['mean_sufficiency']:.3f}/{by[m]['mean_necessity']:.3f}"
            if m in by
            else " " * 11
            for m in ("gem", "gem_check", "random", "gnnexplainer")
        )
        print(
            f"{entry['model']:<20} {entry['task']:<14} {'yes' if entry['reads_bonds'] else 'no':<5} "
            f"{quality:>8.3f} | {cells}"
        )
        ms = ", ".join(f"{m} {r['ms_per_graph']:.2f}" for m, r in by.items())
        print(f"{'':<20} ms per graph: {ms}; {entry['seconds']:.0f} s in all")
        for ok, text in zoo_checks(entry):
            passed += ok
            total += 1
            print(f"{'':<20} {'PASS' if ok else 'MISS'}  {text}")
    print(f"{passed} of {total} checks pass")
    from gem_core.evaluation.result_file import SCHEMA_VERSION

    write_json({"schema_version": SCHEMA_VERSION, "bench": {"zoo": result}}, args.json)
    return 0
