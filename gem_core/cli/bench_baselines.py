"""``bench baselines``: ms per instance of the batched white-box baselines vs. PyG's, per instance.

For every method given (default: every registry method with nothing to fit whose explainer keeps
PyG's per-instance path as ``explain_reference``: GNNExplainer, Integrated Gradients), in one
process with one thread count: the batched ``explain`` over the whole split (one cold call, then
the median of ``--repeats`` warm calls, as ``reproduce`` times batched methods), and PyG's own
explainer one instance at a time on an evenly spaced subset (``--reference-limit``). Prints both
times (wall clock, and the process's CPU time, which a busy machine inflates less), the speed-up
(reference over warm batched, wall clock) and how far the scores of the subset agree: the
largest absolute difference, the share of instances with the same top-K pairs at the dataset's
default K, the mean Jaccard of the top-K sets and the mean share of PyG's top-K pairs kept. For
GNNExplainer, which optimises, also how many instances optimised alone on the batched path equal
PyG's to the last bit, and PyG's own noise floor (its agreement with itself when the initial
mask is scaled by 1 + 1e-6).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "baselines", run, __doc__, dataset="optional")
    p.set_defaults(dataset="mutagenicity")
    add_target_arg(p)
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated methods (default: those with a per-instance reference)",
    )
    p.add_argument(
        "--split",
        default="test",
        choices=("train", "val", "test"),
        help="split to explain (default: test)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="only the first N instances for the batched runs (default: all)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="R",
        help="warm batched calls, their median is reported (default: 3)",
    )
    p.add_argument(
        "--reference-limit",
        type=int,
        default=30,
        metavar="M",
        help="instances explained one by one with PyG (default: 30)",
    )


def _default_methods(context: Any) -> list[str]:
    from gem_core.explainers import METHODS, method_spec

    return [
        m
        for m in METHODS
        if not method_spec(m).needs_fit
        and hasattr(method_spec(m).create(context), "explain_reference")
    ]


def _evenly_spaced(n: int, count: int) -> list[int]:
    if count >= n:
        return list(range(n))
    return [int(i * n / count) for i in range(count)]


def bench_method(
    exp: Any, instances: list, positions: list[int], k: int, repeats: int
) -> dict[str, Any]:
    """Cold and warm batched ms per instance, reference ms per instance, speed-up, agreement."""
    n = len(instances)
    start = time.perf_counter()
    scores = exp.explain(instances)
    cold_ms = 1000.0 * (time.perf_counter() - start) / n
    warm, warm_cpu = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        exp.explain(instances)
        warm.append(1000.0 * (time.perf_counter() - start) / n)
        warm_cpu.append(1000.0 * (time.process_time() - cpu) / n)
    warm_ms = statistics.median(warm) if warm else cold_ms
    subset = [instances[i] for i in positions]
    start, cpu = time.perf_counter(), time.process_time()
    reference = exp.explain_reference(subset)
    ref_ms = 1000.0 * (time.perf_counter() - start) / max(len(subset), 1)
    ref_cpu = 1000.0 * (time.process_time() - cpu) / max(len(subset), 1)
    result = {
        "instances": n,
        "cold_ms_per_instance": cold_ms,
        "ms_per_instance": warm_ms,
        "warm_calls_ms": warm,
        "cpu_ms_per_instance": statistics.median(warm_cpu) if warm_cpu else None,
        "reference": {
            "instances": len(subset),
            "ms_per_instance": ref_ms,
            "cpu_ms_per_instance": ref_cpu,
        },
        "speedup": ref_ms / warm_ms,
        **agreement([scores[i] for i in positions], reference, k),
    }
    if hasattr(exp, "init_scale") and hasattr(exp, "max_pack_nodes"):
        result.update(optimisation_checks(exp, subset, reference, k))
    return result


def agreement(scores: list, reference: list, k: int) -> dict[str, Any]:
    """Largest score difference, share of instances with the same top-k pairs, mean Jaccard of
    the top-k sets, mean share of the reference's top-k pairs that ``scores`` keeps, and share
    of instances whose scores equal the reference's to the last bit."""
    import torch

    from gem_core.data import ranking
    from gem_core.evaluation.faithfulness import jaccard

    diffs, same, overlaps, kept, equal = [], 0, [], [], 0
    for mine, ref in zip(scores, reference):
        equal += bool(torch.equal(mine, ref))
        if mine.numel():
            diffs.append(float((mine - ref).abs().max()))
            a, b = ranking.topk_mask(mine, k), ranking.topk_mask(ref, k)
            overlaps.append(jaccard(a, b))
            kept.append(int((a & b).sum()) / max(int(b.sum()), 1))
        same += bool(torch.equal(a, b)) if mine.numel() else 1
    return {
        "max_abs_diff": max(diffs, default=0.0),
        "same_topk": same / max(len(scores), 1),
        "topk_jaccard": statistics.mean(overlaps) if overlaps else 1.0,
        "topk_share": statistics.mean(kept) if kept else 1.0,
        "bit_identical": equal / max(len(scores), 1),
    }


def optimisation_checks(exp: Any, subset: list, reference: list, k: int) -> dict[str, Any]:
    """For an optimising explainer (GNNExplainer): how many of the subset's instances, each
    optimised alone on the batched path, equal PyG's scores to the last bit, and PyG's own noise
    floor: the agreement of its scores with those of a run whose initial mask is scaled by
    1 + 1e-6 (a rounding-sized change; packing changes the arithmetic by as little)."""
    import copy

    import torch

    alone = copy.copy(exp)
    alone.max_pack_nodes = 1
    identical = sum(bool(torch.equal(a, b)) for a, b in zip(alone.explain(subset), reference))
    nudged = copy.copy(alone)
    nudged.init_scale = exp.init_scale * (1 + 1e-6)
    return {
        "alone_bit_identical": identical / max(len(subset), 1),
        "noise_floor": agreement(nudged.explain(subset), reference, k),
    }


def _fmt(ms: Any) -> str:
    return "n/a" if ms is None else f"{ms:.2f} ms"


def run(args: argparse.Namespace) -> int:
    import torch

    from gem_core.explainers import check_method, method_spec, title
    from gem_core.service.session import Workbench

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}.")
    if args.repeats < 0 or args.reference_limit < 1:
        raise ValueError("--repeats must be >= 0 and --reference-limit >= 1.")
    wb = Workbench(args.dataset, args.device, args.target)
    with progress_bar(args, f"bench baselines {wb.spec.name}") as progress:
        wb.target(progress)
    context = wb.context
    methods = (
        [check_method(m) for m in args.methods.split(",") if m.strip()]
        if args.methods
        else _default_methods(context)
    )
    instances = wb.instances(args.split)
    if args.limit is not None:
        instances = instances[: args.limit]
    k = wb.spec.default_k
    positions = _evenly_spaced(len(instances), args.reference_limit)
    pairs = sum(inst.num_pairs for inst in instances) / len(instances)
    print(
        f"{wb.spec.title} ({wb.target_name} target), {args.split} split, {len(instances)} instances ({pairs:.1f} pairs "
        f"on average), {torch.get_num_threads()} thread(s), device {wb.device}, K={k}"
    )
    results: dict[str, Any] = {}
    for method in methods:
        exp = method_spec(method).create(context)
        if not hasattr(exp, "explain_reference"):
            raise ValueError(f"{method} has no per-instance reference to compare with.")
        r = bench_method(exp, instances, positions, k, args.repeats)
        results[method] = r
        print(f"  {title(method)}:")
        print(
            f"    batched:   {r['ms_per_instance']:8.2f} ms per instance (median of "
            f"{len(r['warm_calls_ms'])} warm calls; cold call {r['cold_ms_per_instance']:.2f}; "
            f"CPU time {_fmt(r['cpu_ms_per_instance'])})"
        )
        print(
            f"    per instance (PyG): {r['reference']['ms_per_instance']:8.2f} ms per instance "
            f"({r['reference']['instances']} instances; CPU time "
            f"{_fmt(r['reference']['cpu_ms_per_instance'])})"
        )
        print(
            f"    speed-up:  {r['speedup']:.1f}x; same top-{k} on {100 * r['same_topk']:.0f}% "
            f"of them (mean Jaccard {r['topk_jaccard']:.3f}; {100 * r['topk_share']:.1f}% of "
            f"PyG's top-{k} pairs kept), largest score difference "
            f"{r['max_abs_diff']:.1e}, bit-identical on {100 * r['bit_identical']:.0f}%"
        )
        if "noise_floor" in r:
            floor = r["noise_floor"]
            print(
                f"    one instance per optimisation: bit-identical to PyG on "
                f"{100 * r['alone_bit_identical']:.0f}%; PyG against itself with its initial "
                f"mask scaled by 1 + 1e-6: same top-{k} on {100 * floor['same_topk']:.0f}% "
                f"(mean Jaccard {floor['topk_jaccard']:.3f}; {100 * floor['topk_share']:.1f}% "
                f"of its top-{k} pairs kept)"
            )
    write_json(
        {
            "bench": {
                "baselines": {
                    "dataset": wb.spec.name,
                    "target": wb.target_name,
                    "split": args.split,
                    "k": k,
                    "threads": torch.get_num_threads(),
                    "device": str(wb.device),
                    "methods": results,
                }
            }
        },
        args.json,
    )
    return 0
