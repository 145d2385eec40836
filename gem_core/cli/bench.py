"""``bench``: performance benchmarks, one sub-command each (``bench distill``, ...).

A benchmark is a ``(name, register)`` entry of :data:`BENCHMARKS`; ``register(subparsers)`` adds
its sub-command, so later benchmarks plug in without touching the others.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from gem_core.cli.common import add_command, progress_bar, write_json


def _register_app(sub: argparse._SubParsersAction) -> None:
    """``bench app`` drives the Streamlit app in a browser. It lives with the app in the source
    checkout (``tools/bench_app.py``), not in the engine package, so the engine runs it as its own
    process (``python -m tools.bench_app``, from the checkout) instead of importing upward."""
    p = sub.add_parser(
        "app",
        add_help=False,
        prefix_chars="\0",
        help="the Streamlit app in Chromium: launch → first explanation, K and "
        "instance changes, what-if edits (source checkout only; --help there)",
    )
    p.add_argument("tool_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run_app)


def _run_app(args: argparse.Namespace) -> int:
    import subprocess

    from gem_core.runtime.store import PROJECT_ROOT

    if not (PROJECT_ROOT / "tools" / "bench_app.py").is_file():
        raise ValueError("bench app needs the source checkout (tools/bench_app.py and app/).")
    cmd = [sys.executable, "-m", "tools.bench_app", *args.tool_args]
    return subprocess.run(cmd, cwd=PROJECT_ROOT, check=False).returncode


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="performance benchmarks (bench distill, bench startup, ...)",
        description="Performance benchmarks of the engine.",
    )
    bench_sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for _, register_benchmark in BENCHMARKS:
        register_benchmark(bench_sub)


# ----------------------------------------------------------------------------- bench distill


def _register_distill(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "distill",
        run_distill,
        dataset="optional",
        help="batched vs. reference distillation speed (ms per instance)",
        description="Time the batched distillation (Δ + greedy + top-K at the default K) over a "
        "whole split and the plain reference implementation on an evenly spaced "
        "subset of it, in the same process with the same thread count.",
    )
    p.set_defaults(dataset="mutagenicity")
    p.add_argument(
        "--split",
        default="train",
        choices=("train", "val", "test"),
        help="split to distil (default: train)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="only the first N instances for the batched run (default: all)",
    )
    p.add_argument(
        "--reference-limit",
        type=int,
        default=100,
        metavar="M",
        help="instances timed with the reference implementation (default: 100; 0 skips)",
    )


def _evenly_spaced(items: Sequence[Any], count: int) -> list[Any]:
    """``count`` items spread evenly over ``items`` (all of them if fewer)."""
    if count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def run_distill(args: argparse.Namespace) -> int:
    import torch

    from gem_core.data.datasets import load_dataset
    from gem_core.data.instances import split_instances
    from gem_core.gem.distill import ACCURACY_TOPK_POLICY, distill
    from gem_core.gem.distill.reference import (
        reference_distill,
        reference_refine,
        reference_topk_all,
    )
    from gem_core.models.targets import get_target

    threads = torch.get_num_threads()  # --threads was applied by the CLI
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}.")
    if args.reference_limit < 0:
        raise ValueError(f"--reference-limit must be >= 0, got {args.reference_limit}.")
    ds = load_dataset(args.dataset)
    spec, k = ds.spec, ds.spec.default_k
    target = get_target(ds, device=args.device)
    black_box = target.black_box(args.device)
    instances = split_instances(ds, args.split)
    if args.limit is not None:
        instances = instances[: args.limit]
    black_box_warmup(black_box, instances)

    with progress_bar(args, f"bench distill {ds.name}") as progress:

        def batched():
            dist = distill(
                instances,
                black_box,
                connected=spec.connected,
                device=args.device,
                progress=progress,
            )
            dist.topk(k)
            return dist

        dist, batched_s = _timed(batched)
    n = len(instances)
    batched_ms = 1000.0 * batched_s / n
    pairs = sum(inst.num_pairs for inst in instances) / n
    print(
        f"{spec.title}, {args.split} split, connectivity rule {'on' if spec.connected else 'off'}, "
        f"K={k}, {threads} thread(s), device {black_box.device}"
    )
    print(
        f"  batched:   {n:5d} instances ({pairs:.1f} pairs on average) in {batched_s:7.2f} s "
        f"= {batched_ms:8.2f} ms per instance"
    )
    # the top-K policy the distillation accuracy is reported with, over the dataset's K grid
    grid, refine_s = _timed(
        lambda: dist.topk_grid(
            spec.k_grid,
            ACCURACY_TOPK_POLICY,
            instances=instances,
            black_box=black_box,
            device=args.device,
        )
    )
    refine_ms = 1000.0 * refine_s / n
    print(
        f"  top-K {ACCURACY_TOPK_POLICY} (K = {', '.join(map(str, spec.k_grid))}): "
        f"{refine_s:7.2f} s = {refine_ms:8.2f} ms per instance"
    )
    result: dict[str, Any] = {
        "dataset": ds.name,
        "split": args.split,
        "k": k,
        "threads": threads,
        "device": str(black_box.device),
        "connected": spec.connected,
        "batched": {
            "instances": n,
            "seconds": batched_s,
            "ms_per_instance": batched_ms,
            "mean_pairs": pairs,
        },
        "topk": {
            "policy": ACCURACY_TOPK_POLICY,
            "k_grid": list(spec.k_grid),
            "seconds": refine_s,
            "ms_per_instance": refine_ms,
        },
    }
    if args.reference_limit > 0:
        positions = _evenly_spaced(range(n), args.reference_limit)
        subset = [instances[i] for i in positions]

        def reference():
            res = reference_distill(subset, black_box, spec.connected)
            return res, reference_topk_all(subset, res, k, spec.connected)

        (ref, ref_masks), ref_s = _timed(reference)
        m = len(subset)
        ref_ms = 1000.0 * ref_s / m
        ref_pairs = sum(inst.num_pairs for inst in subset) / m
        mine = dist.subset(positions)
        my_masks = mine.topk(k)
        agree = sum(
            bool(
                torch.equal(mine.kept_masks()[j], ref[j].kept)
                and torch.allclose(mine.deltas()[j], ref[j].delta, atol=1e-5)
                and torch.equal(my_masks[j], ref_masks[j])
            )
            for j in range(m)
        )
        speedup = ref_ms / batched_ms
        print(
            f"  reference: {m:5d} instances ({ref_pairs:.1f} pairs on average) in {ref_s:7.2f} s "
            f"= {ref_ms:8.2f} ms per instance"
        )
        print(f"  speed-up:  {speedup:.1f}x   (results agree on {agree}/{m} instances)")
        result["reference"] = {
            "instances": m,
            "seconds": ref_s,
            "ms_per_instance": ref_ms,
            "mean_pairs": ref_pairs,
            "agree": agree,
        }
        result["speedup"] = speedup

        ref_grid, ref_refine_s = _timed(
            lambda: [
                reference_refine(inst, res, spec.k_grid, spec.connected, black_box)
                for inst, res in zip(subset, ref)
            ]
        )
        ref_refine_ms = 1000.0 * ref_refine_s / m
        same = sum(
            all(torch.equal(grid[kk][positions[j]], ref_grid[j][kk]) for kk in spec.k_grid)
            for j in range(m)
        )
        print(
            f"  top-K {ACCURACY_TOPK_POLICY}, reference: {ref_refine_s:7.2f} s = "
            f"{ref_refine_ms:8.2f} ms per instance; speed-up {ref_refine_ms / refine_ms:.1f}x "
            f"(same on {same}/{m} instances)"
        )
        result["topk"]["reference"] = {
            "instances": m,
            "seconds": ref_refine_s,
            "ms_per_instance": ref_refine_ms,
            "agree": same,
        }
        result["topk"]["speedup"] = ref_refine_ms / refine_ms
    write_json({"bench": {"distill": result}}, args.json)
    return 0


def black_box_warmup(black_box: Any, instances: Sequence[Any]) -> None:
    """One small forward pass so lazy initialisation is not timed."""
    from gem_core.data.instances import collate

    black_box(collate(list(instances[:4])))


BENCHMARKS: tuple[tuple[str, Callable[[argparse._SubParsersAction], None]], ...] = (
    ("distill", _register_distill),
    ("app", _register_app),
    (
        "screen",
        lambda sub: __import__("gem_core.cli.bench_screen", fromlist=["register"]).register(sub),
    ),
    (
        "baselines",
        lambda sub: __import__("gem_core.cli.bench_baselines", fromlist=["register"]).register(sub),
    ),
    (
        "startup",
        lambda sub: __import__("gem_core.cli.bench_startup", fromlist=["register"]).register(sub),
    ),
    (
        "outside",
        lambda sub: __import__("gem_core.cli.bench_outside", fromlist=["register"]).register(sub),
    ),
    ("pyg", lambda sub: __import__("gem_core.cli.bench_pyg", fromlist=["register"]).register(sub)),
    ("zoo", lambda sub: __import__("gem_core.cli.bench_zoo", fromlist=["register"]).register(sub)),
    (
        "splits",
        lambda sub: __import__("gem_core.cli.bench_splits", fromlist=["register"]).register(sub),
    ),
    (
        "domain",
        lambda sub: __import__("gem_core.cli.bench_domain", fromlist=["register"]).register(sub),
    ),
    (
        "crippen",
        lambda sub: __import__("gem_core.cli.bench_crippen", fromlist=["register"]).register(sub),
    ),
    (
        "devices",
        lambda sub: __import__("gem_core.cli.bench_devices", fromlist=["register"]).register(sub),
    ),
    (
        "atoms",
        lambda sub: __import__("gem_core.cli.bench_atoms", fromlist=["register"]).register(sub),
    ),
)
