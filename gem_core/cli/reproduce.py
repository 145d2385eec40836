"""Run target → distillation → Gem → baselines and print the paper's tables.

Runs (or loads from the cache) the whole pipeline for one or all datasets and prints the
explanation accuracy per K of every method measured by default (Gem and the baselines), each
cell "ours (paper)", then timings, then the field's sufficiency / necessity (GNNX-Bench; their
published numbers are for their own GCN, not our target). Full runs also write assets/results/<dataset>.json.
"""
from __future__ import annotations

import argparse

from gem_core.data.config import DATASETS
from gem_core.explainers import METHODS, REPRODUCE_METHODS
from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json

def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "reproduce", run, __doc__, dataset=False)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--dataset", metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    group.add_argument("--all", action="store_true", help="all four datasets")
    p.add_argument("--methods", default=",".join(REPRODUCE_METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} "
                        f"(default: {','.join(REPRODUCE_METHODS)})")
    add_target_arg(p)
    p.add_argument("--limit", type=int, default=None,
                   help="evaluate on the first N test instances only (quick check; not saved to assets)")
    p.add_argument("--stability", action="store_true",
                   help="also measure each seeded method's stability (Jaccard of its top-K across "
                        "seeds 0, 1, 2): refits and re-explains it once per seed, a few times the "
                        "run's cost; without it their JSON 'stability' says 'not measured' "
                        "(methods without a seed always get 1.0)")


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.reproduce import format_tables, run_reproduce

    from gem_core.data.config import get_spec, target_names

    names = ([n for n in DATASETS if args.target in target_names(get_spec(n))] if args.all
             else [args.dataset])
    methods = [m for m in args.methods.split(",") if m.strip()]
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    outputs = {}
    for name in names:
        with progress_bar(args, f"reproduce {name}") as progress:
            result = run_reproduce(name, device=args.device, methods=methods, limit=args.limit,
                                   progress=progress, target=args.target,
                                   stability=args.stability)
        print(format_tables(result))
        print()
        outputs[result["dataset"]] = result
    write_json(outputs[names[0]] if len(names) == 1 else outputs, args.json)
    return 0
