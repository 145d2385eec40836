"""``reproduce``: the paper's tables for one or all datasets, every method measured in one run."""
from __future__ import annotations

import argparse

from ..config import DATASETS
from ..device import configure_threads
from ..progress import tqdm_progress
from .common import add_json_arg, add_runtime_args, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce", help="run target → distillation → Gem → baselines and print the paper's tables",
        description="Run (or load from the cache) the whole pipeline for a dataset and print "
                    "explanation accuracy per K for Gem, GNNExplainer, PGExplainer and random, "
                    "each cell 'ours (paper)', then timings. Full runs also write "
                    "assets/results/<dataset>.json.")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--dataset", metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    group.add_argument("--all", action="store_true", help="all four datasets")
    p.add_argument("--methods", default="gem,gnnexplainer,pgexplainer,random",
                   help="comma-separated subset of gem,gnnexplainer,pgexplainer,random,distilled")
    p.add_argument("--limit", type=int, default=None,
                   help="evaluate on the first N test instances only (quick check; not saved to assets)")
    add_runtime_args(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..reproduce import format_tables, run_reproduce

    configure_threads(args.threads)
    names = list(DATASETS) if args.all else [args.dataset]
    methods = [m for m in args.methods.split(",") if m.strip()]
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    outputs = {}
    for name in names:
        with tqdm_progress(f"reproduce {name}", enabled=not args.no_progress) as progress:
            result = run_reproduce(name, device=args.device, methods=methods, limit=args.limit,
                                   progress=progress)
        print(format_tables(result))
        print()
        outputs[result["dataset"]] = result
    write_json(outputs[names[0]] if len(names) == 1 else outputs, args.json)
    return 0
