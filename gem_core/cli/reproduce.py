"""Run target → distillation → Gem → baselines and print the paper's tables.

Runs (or loads from the cache) the whole pipeline for one or all datasets and prints the
explanation accuracy per K of every method measured by default (Gem and the baselines), each
cell "ours (paper)", then timings, then the field's sufficiency / necessity (GNNX-Bench; their
published numbers are for their own GCN, not our target). Full runs also write assets/results/<dataset>.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json
from gem_core.data.config import DATASETS
from gem_core.explainers import METHODS, REPRODUCE_METHODS


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "reproduce", run, __doc__, dataset=False)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--dataset", metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    group.add_argument("--all", action="store_true", help="all four datasets")
    p.add_argument(
        "--methods",
        default=",".join(REPRODUCE_METHODS),
        help=f"comma-separated subset of {','.join(METHODS)} "
        f"(default: {','.join(REPRODUCE_METHODS)})",
    )
    add_target_arg(p)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="evaluate on the first N test instances only (quick check; not saved to assets)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="with --all on the CPU: reproduce N datasets side by side, each in its own "
        "process with one torch thread (default: the cores this process may use, "
        "at most one per dataset; 1: one after another, with --threads)",
    )
    p.add_argument(
        "--stability",
        action="store_true",
        help="also measure each seeded method's stability (Jaccard of its top-K across "
        "seeds 0, 1, 2): refits and re-explains it once per seed, a few times the "
        "run's cost; without it their JSON 'stability' says 'not measured' "
        "(methods without a seed always get 1.0)",
    )


def run(args: argparse.Namespace) -> int:
    from gem_core.data.config import get_spec, target_names

    names = (
        [n for n in DATASETS if args.target in target_names(get_spec(n))]
        if args.all
        else [args.dataset]
    )
    methods = [m for m in args.methods.split(",") if m.strip()]
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers must be at least 1")
    workers = _workers(args, len(names))
    options = dict(
        device=args.device,
        methods=methods,
        limit=args.limit,
        target=args.target,
        stability=args.stability,
    )
    outputs = {}
    for text, result in _results(args, names, workers, options):
        print(text)
        print()
        outputs[result["dataset"]] = result
    write_json(outputs[names[0]] if len(names) == 1 else outputs, args.json)
    return 0


def _results(
    args: argparse.Namespace, names: list[str], workers: int, options: dict
) -> Iterator[tuple[str, dict]]:
    """Each dataset's tables and JSON, in ``names`` order: one after another, or ``workers``
    datasets side by side (each a CPU-bound process with one thread: on two cores the four
    datasets take about half the time, with the same numbers, every run being seeded)."""
    if workers == 1:
        for name in names:
            with progress_bar(args, f"reproduce {name}") as progress:
                yield _reproduce(name, progress=progress, **options)
        return
    from gem_core.runtime.workers import worker_pool

    with (
        worker_pool(workers) as pool,
        progress_bar(args, f"reproduce {len(names)} datasets, {workers} at a time") as bar,
    ):
        futures = [pool.submit(_reproduce, name, **options) for name in names]
        for done, future in enumerate(futures, 1):
            text, result = future.result()
            if bar is not None:
                bar(done / len(names), result["dataset"])
            yield text, result


def _workers(args: argparse.Namespace, datasets: int) -> int:
    """Processes for ``datasets`` datasets: ``--workers``, else the cores this process may use;
    one on CUDA (one device) and for a single dataset."""
    if datasets == 1:
        return 1
    from gem_core.runtime.device import resolve_device
    from gem_core.runtime.device_choice import REPRODUCE_WORKLOADS

    if resolve_device(args.device, REPRODUCE_WORKLOADS).type != "cpu":
        return 1
    if args.workers is not None:
        return min(args.workers, datasets)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, datasets))


def _reproduce(name: str, progress=None, **options) -> tuple[str, dict]:
    """One dataset's tables and JSON (in a worker or in this process)."""
    from gem_core.evaluation.reproduce import format_tables, run_reproduce

    result = run_reproduce(name, progress=progress, **options)
    return format_tables(result), result
