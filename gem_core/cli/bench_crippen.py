"""Crippen logP: Gem's bond scores against a known ground truth, beside Integrated Gradients.

Trains a GINE regressor of RDKit's Crippen logP on RDKit's NCI corpus (``Data/NCI/first_5K.smi``,
seeded 80/10/10 split, bond types as ``edge_attr``), fits Gem on the training molecules through
the PyG door (``mode="regression"``; the generator alone, the model not asked at explain time;
Gem + check, the same fit with the explain-time search, a separate row), and scores them,
Integrated Gradients (Captum), GNNExplainer (PyG) and random scores on the test
molecules: per molecule, Spearman ρ and Kendall τ between bond scores and each bond's summed atom
contributions (signed: the issue's yardstick; and in magnitude), then sufficiency (k = 5..25) and
necessity (k = 2..10) under drop_isolated, a value kept within 0.1 x the spread of the
model's outputs, and ms per molecule. Checks: test R² ≥ 0.9; Gem's mean ρ ≥ Integrated Gradients'.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from gem_core.cli.common import add_command, parse_names, progress_bar, write_json

METHODS = ("gem", "gem_check", "gem_signed", "integrated_gradients", "gnnexplainer", "random")
MODELS = ("gine", "attentivefp")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "crippen", run, __doc__, dataset=False, check=_check)
    p.add_argument("--seed", type=int, default=0, help="split, model, Gem seed (default 0)")
    p.add_argument(
        "--limit", type=int, default=300, metavar="N", help="test molecules explained (default 300)"
    )
    p.add_argument(
        "--train-limit",
        type=int,
        default=1500,
        metavar="N",
        help="training molecules Gem is fitted on (default 1500)",
    )
    p.add_argument("--model", default="gine", choices=MODELS, help="the regressor (default: gine)")
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated methods (default: {','.join(METHODS)})",
    )


def _check(args: argparse.Namespace) -> None:
    parse_names(args.methods, METHODS, "method")
    for name in ("limit", "train_limit"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer")


def checks(result: dict[str, Any]) -> list[str]:
    """The acceptance lines: the regressor's R² and Gem's ρ against Integrated Gradients'."""
    out = []
    r2 = result["regressor"]["test_r2"]
    out.append(f"  {'PASS' if r2 >= 0.9 else 'MISS'}  regressor test R² {r2:.3f} ≥ 0.9")
    by = {r["method"]: r for r in result["rows"]}
    if "integrated_gradients" in by:
        for gem, key, what in (
            ("gem", "spearman", "signed"),
            ("gem_signed", "spearman", "signed"),
            ("gem", "spearman_magnitude", "magnitude"),
        ):
            if gem not in by:
                continue
            g, ig = by[gem][key], by["integrated_gradients"][key]
            ok = not math.isnan(g) and (math.isnan(ig) or g >= ig)
            out.append(
                f"  {'PASS' if ok else 'MISS'}  {gem}'s mean Spearman ({what}) {g:.3f} ≥ "
                f"Integrated Gradients' {ig:.3f}"
            )
    return out


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.crippen_bench import run_crippen

    with progress_bar(args, "crippen") as progress:
        result = run_crippen(
            seed=args.seed,
            limit=args.limit,
            train_limit=args.train_limit,
            methods=parse_names(args.methods, METHODS, "method"),
            model_name=args.model,
            progress=progress,
        )
    reg = result["regressor"]
    print(
        f"Crippen logP: {result['molecules']} molecules; {result['model']} regressor R² train {reg['train_r2']:.3f}"
        f" / val {reg['val_r2']:.3f} / test {reg['test_r2']:.3f} ({reg['epochs']} epochs, "
        f"{reg['seconds']:.0f} s); Gem fitted on {result['gem_train_molecules']}, "
        f"{result['test_molecules']} test molecules explained"
    )
    print(
        f" {'method':<21} {'rho':>6} {'tau':>6} {'|rho|':>6} {'|tau|':>6} {'suff':>6} {'nec':>6}"
        f" {'ms/mol':>8}"
    )
    for r in result["rows"]:
        print(
            f" {r['method']:<21} {r['spearman']:>6.3f} {r['kendall']:>6.3f} "
            f"{r['spearman_magnitude']:>6.3f} {r['kendall_magnitude']:>6.3f} "
            f"{r['mean_sufficiency']:>6.3f} {r['mean_necessity']:>6.3f} {r['ms_per_molecule']:>8.2f}"
        )
    for line in checks(result):
        print(line)
    from gem_core.evaluation.result_file import SCHEMA_VERSION

    write_json({"schema_version": SCHEMA_VERSION, "bench": {"crippen": result}}, args.json)
    return 0
