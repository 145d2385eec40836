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

from gem_core.cli.common import (
    add_choose_split_arg,
    add_command,
    parse_names,
    progress_bar,
    write_json,
)

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
    add_choose_split_arg(p)
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated rows (default: {','.join(METHODS)})",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=None,
        metavar="NAME:PATH=VALUE,...",
        help="a sweep: Gem's settings over the adapter's defaults, one fit per variant and "
        "model (repeatable; 'current' is always first); prints each model's mean sufficiency "
        "/ necessity per variant, to choose the defaults on --split val",
    )


#: the rows a zoo run can have (gem_core.evaluation.zoo.ZOO_METHODS, repeated for the same
#: reason as MODELS)
METHODS = ("gem", "gem_check", "random", "gnnexplainer")


def _check(args: argparse.Namespace) -> None:
    parse_names(args.models, MODELS, "model")
    methods = parse_names(args.methods, METHODS, "method")
    if args.variant:
        if not any(m.startswith("gem") for m in methods):
            raise ValueError("--variant varies Gem's settings: keep gem or gem_check in --methods")
        from gem_core.evaluation.tuning import parse_variant

        for text in args.variant:
            parse_variant(text)  # a one-line error for a bad name, path or value
    for name in ("limit", "train_limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer")


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.zoo import run_zoo, zoo_checks

    if args.variant:
        return _sweep(args)
    with progress_bar(args, "zoo") as progress:
        result = run_zoo(
            parse_names(args.models, MODELS, "model"),
            seed=args.seed,
            limit=args.limit,
            train_limit=args.train_limit,
            split=args.split,
            methods=parse_names(args.methods, METHODS, "method"),
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
            for m in METHODS
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


def _sweep(args: argparse.Namespace) -> int:
    """``--variant``: the zoo once per variant (Gem's rows refitted with its settings; the
    baselines asked for once, with the first variant), then one table: per model and variant,
    Gem's mean sufficiency / necessity, and per variant the mean over the models and how many
    models it leads (the best sufficiency among the variants) or where it is below random."""
    from gem_core.evaluation.result_file import SCHEMA_VERSION
    from gem_core.evaluation.tuning import CURRENT, Variant, parse_variant
    from gem_core.evaluation.zoo import run_zoo

    variants = [Variant(CURRENT)] + [parse_variant(t) for t in args.variant]
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must differ, got {', '.join(names)}")
    models = parse_names(args.models, MODELS, "model")
    methods = parse_names(args.methods, METHODS, "method")
    gem_rows = [m for m in methods if m.startswith("gem")]
    runs = []
    with progress_bar(args, "zoo sweep") as progress:
        for i, v in enumerate(variants):
            asked = methods if i == 0 else gem_rows  # the baselines do not depend on Gem
            runs.append(
                run_zoo(
                    models,
                    seed=args.seed,
                    limit=args.limit,
                    train_limit=args.train_limit,
                    split=args.split,
                    methods=asked,
                    gem_settings=dict(v.overrides) or None,
                    progress=progress,
                )
            )
    row = gem_rows[0]  # _check: a sweep has a Gem row
    table = _sweep_table(variants, runs, models, row)
    print(
        f"zoo sweep on the {args.split} split, {row} (mean sufficiency k=5..25 / mean necessity "
        f"k=2..10, drop_isolated), seed {args.seed}"
    )
    for line in table["lines"]:
        print(line)
    write_json(
        {
            "schema_version": SCHEMA_VERSION,
            "bench": {
                "zoo_sweep": {
                    "split": args.split,
                    "row": row,
                    "variants": [
                        {"name": v.name, "overrides": dict(v.overrides), "result": r}
                        for v, r in zip(variants, runs)
                    ],
                    "summary": table["summary"],
                }
            },
        },
        args.json,
    )
    return 0


def _pair(suff: float, nec: float, width: int) -> str:
    """``suff/nec`` right-aligned in ``width`` characters."""
    return f"{suff:.3f}/{nec:.3f}".rjust(width)


def _sweep_table(variants, runs, models, row: str) -> dict:
    """The printed lines and the per-variant summary of a sweep."""
    cell: dict[tuple[str, str], tuple[float, float]] = {}
    random: dict[str, float] = {}
    for v, run in zip(variants, runs):
        for entry in run["models"]:
            by = {r["method"]: r for r in entry["rows"]}
            if row in by:
                cell[v.name, entry["model"]] = (
                    by[row]["mean_sufficiency"],
                    by[row]["mean_necessity"],
                )
            if "random" in by:
                random[entry["model"]] = by["random"]["mean_sufficiency"]
    width = max(max(len(v.name) for v in variants) + 2, 13)
    lines = [f"{'model':<20}" + "".join(v.name.rjust(width) for v in variants)]
    if random:
        lines[0] += "random".rjust(9)
    nan = (float("nan"), float("nan"))
    for m in models:
        text = f"{m:<20}" + "".join(_pair(*cell.get((v.name, m), nan), width) for v in variants)
        if random:
            text += f"{random.get(m, float('nan')):9.3f}"
        lines.append(text)
    summary = []
    for v in variants:
        mine = {m: cell[v.name, m] for m in models if (v.name, m) in cell}
        best = {m: max(cell[w.name, m][0] for w in variants if (w.name, m) in cell) for m in mine}
        summary.append(
            {
                "name": v.name,
                "mean_sufficiency": round(sum(s for s, _ in mine.values()) / max(len(mine), 1), 4),
                "mean_necessity": round(sum(n for _, n in mine.values()) / max(len(mine), 1), 4),
                "leads": sum(1 for m, (s, _) in mine.items() if s >= best[m]),
                "below_random": [m for m, (s, _) in mine.items() if m in random and s < random[m]],
            }
        )
    lines.append(
        f"{'mean':<20}"
        + "".join(_pair(s["mean_sufficiency"], s["mean_necessity"], width) for s in summary)
    )
    for s in summary:
        below = ", ".join(s["below_random"]) or "none"
        lines.append(
            f"  {s['name']}: best sufficiency on {s['leads']} of {len(models)} models; "
            f"below random on: {below}"
        )
    return {"lines": lines, "summary": summary}
