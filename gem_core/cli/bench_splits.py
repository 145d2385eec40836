"""Gem alone on its training graphs against the test graphs, per predicted class (issue 50's diagnosis).

For each graph dataset and target (``--targets``, ``dataset[:target]``), the registry's Gem (the
generator alone, as the reported tables fit it) and random scores on each split: sufficiency at
k = 5..25 and necessity at k = 2..10 under drop_isolated, overall and per class the target
predicts on the whole graph. Train and test alike means what Gem lacks it lacks on the graphs it
was taught on (its teacher or its capacity), a gap means generalisation. The recorded run,
``--json assets/results/bench-splits.json``, is a section of docs/results.md.
"""

from __future__ import annotations

import argparse

from gem_core.cli.common import (
    add_command,
    add_names_arg,
    parse_names,
    progress_bar,
    write_json,
)

SPLITS = ("train", "val", "test")


def register(sub: argparse._SubParsersAction) -> None:
    from gem_core.evaluation.split_diagnosis import DEFAULT_METHODS, DEFAULT_SPLITS, DEFAULT_TARGETS

    p = add_command(sub, "splits", run, __doc__, dataset=False, check=_check)
    add_names_arg(p, "--targets", DEFAULT_TARGETS, "dataset[:target]")
    add_names_arg(p, "--splits", DEFAULT_SPLITS, f"splits of {', '.join(SPLITS)}")
    add_names_arg(p, "--methods", DEFAULT_METHODS, "registry methods")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="at most N graphs of each split, evenly spaced (default: all)",
    )


def _methods(text: str) -> list[str]:
    from gem_core.explainers import METHODS

    return parse_names(text, tuple(METHODS), "method")


def _check(args: argparse.Namespace) -> None:
    from gem_core.evaluation.split_diagnosis import parse_target

    for entry in args.targets.split(","):
        parse_target(entry)
    parse_names(args.splits, SPLITS, "split")
    _methods(args.methods)
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be a positive integer")


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.result_file import SCHEMA_VERSION, load_bench
    from gem_core.evaluation.split_diagnosis import findings, parse_target, split_diagnosis

    splits, methods = parse_names(args.splits, SPLITS, "split"), _methods(args.methods)
    results = []
    for entry in args.targets.split(","):
        dataset, target = parse_target(entry)
        with progress_bar(args, f"splits {dataset}:{target}") as progress:
            result = split_diagnosis(
                dataset,
                target,
                splits=splits,
                methods=methods,
                limit=args.limit,
                device=args.device,
                progress=progress,
            )
        results.append(result)
        print(f"{dataset}, target {target} ({result['protocol']})")
        print(f" {'split':<6} {'method':<21} {'graphs':>6} sufficiency k=5..25{'':<11} per class")
        for s in result["splits"]:
            for r in s["methods"]:
                curve = " ".join(f"{v:.3f}" for v in r["sufficiency"].values())
                per_class = " / ".join(
                    f"{c}: {sum(v.values()) / len(v):.3f}"
                    for c, v in r["sufficiency_per_class"].items()
                )
                print(
                    f" {s['split']:<6} {r['method']:<21} {s['instances']:>6} {curve}   {per_class}"
                )
        (typed,) = load_bench(
            {"schema_version": SCHEMA_VERSION, "bench": {"splits": [result]}}
        ).splits
        for line in findings(typed):
            print("  " + line)
    write_json({"schema_version": SCHEMA_VERSION, "bench": {"splits": results}}, args.json)
    return 0
