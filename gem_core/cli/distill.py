"""``distill``: distil a split of a dataset (Granger Δ, greedy, top-K) and print its accuracy.

Distillation accuracy at K: the target's accuracy (vs. the true label) on the distilled top-K
subgraph of every instance (all nodes kept, every other edge deleted), paper Table 6.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json
from gem_core.runtime.progress import scaled

if TYPE_CHECKING:  # pragma: no cover
    from gem_core.data.instances import Instance
    from gem_core.models.targets import BlackBox

# gem_core.gem.distill.TOPK_POLICIES / ACCURACY_TOPK_POLICY, repeated so the CLI starts without torch
# (a test checks that they agree)
POLICIES = ("nosplit", "exact", "paper", "refine", "sufficient")
DEFAULT_POLICY = "refine"


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "distill",
        run,
        help="distil explanations (Granger Δ + greedy + top-K) and print their accuracy",
        description="Compute the Granger-causal distillation of a split (cached in the artifact "
        "store) and the target's accuracy on the distilled top-K subgraphs.",
    )
    p.add_argument(
        "--k",
        type=int,
        nargs="+",
        default=None,
        metavar="K",
        help="edge budget(s) K (default: the dataset's K grid)",
    )
    p.add_argument(
        "--split",
        default="test",
        choices=("train", "val", "test"),
        help="split to distil (default: test)",
    )
    p.add_argument(
        "--label-source",
        default="true",
        choices=("true", "predicted"),
        help="losses against the true label (default) or the target's prediction",
    )
    p.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        choices=POLICIES,
        help="top-K policy: refine (default; loss-driven, with forward passes: "
        "from the greedy result repeatedly remove the pair whose removal gives "
        "the lowest loss, splitting nothing off, down to K; below K, add back "
        "pairs while that lowers the loss; one descent serves all K), nosplit "
        "(remove the lowest-weight pair whose "
        "removal splits nothing off: K connected pairs whenever the greedy phase "
        "left more), exact (ascending walk accepting only removals that leave at "
        "least K pairs) or paper (Appendix C literally: with the connectivity "
        "rule it can end below K)",
    )
    p.add_argument(
        "--fill",
        action="store_true",
        help="top explanations with fewer than K pairs up with the highest-Δ missing "
        "pairs (keeping them connected under the connectivity rule)",
    )
    p.add_argument("--refresh", action="store_true", help="recompute even if cached")
    add_target_arg(p)


def run(args: argparse.Namespace) -> int:
    from gem_core.data.config import check_k
    from gem_core.data.datasets import load_dataset
    from gem_core.data.instances import split_instances
    from gem_core.gem.distill import distill_dataset, load_distillation, topk_accuracy
    from gem_core.models.targets import get_target
    from gem_core.runtime.device import resolve_device

    # ``auto``: the device measured faster for the distillation's batched forwards
    args.device = str(resolve_device(args.device, "distillation"))
    ds = load_dataset(args.dataset)
    ks = list(args.k) if args.k else list(ds.spec.k_grid)
    for k in ks:
        check_k(k)
    start = time.perf_counter()
    with progress_bar(args, f"distill {ds.name}") as progress:
        target = get_target(
            ds, device=args.device, progress=scaled(progress, 0.0, 0.05), name=args.target
        )
        dist = (
            None if args.refresh else load_distillation(ds, target, args.split, args.label_source)
        )
        cached = dist is not None
        if dist is None:
            dist = distill_dataset(
                ds,
                target,
                split=args.split,
                label_source=args.label_source,
                device=args.device,
                refresh=True,
                progress=scaled(progress, 0.05, 1.0),
            )
    instances = split_instances(ds, args.split)
    if len(instances) != len(dist) or [i.index for i in instances] != dist.indices.tolist():
        raise ValueError("cached distillation does not match the split; rerun with --refresh")
    black_box = target.black_box(args.device)
    tic = time.perf_counter()
    all_masks = dist.topk_grid(
        ks,
        policy=args.policy,
        fill=args.fill,
        instances=instances,
        black_box=black_box,
        device=args.device,
    )
    topk_seconds = time.perf_counter() - tic
    accuracy, mean_pairs = {}, {}
    for k in ks:
        masks = all_masks[k]
        mean_pairs[k] = sum(int(m.sum()) for m in masks) / max(len(masks), 1)
        accuracy[k] = topk_accuracy(instances, masks, black_box, args.device)
    full = _full_accuracy(instances, black_box, args.device)
    n = len(dist)
    ms = 1000.0 * dist.seconds / max(n, 1)
    how = "cached; computed" if cached else "computed"
    print(
        f"{ds.spec.title} distillation ({args.split} split, {n} instances, labels: "
        f"{dist.label_source}, connectivity rule {'on' if dist.connected else 'off'})"
    )
    print(f"  {how} in {dist.seconds:.1f} s = {ms:.2f} ms per instance")
    print(f"  target accuracy on the full graphs: {full:.1%}")
    print(
        f"  top-K policy {args.policy}{' + fill-up' if args.fill else ''}: "
        f"{topk_seconds:.2f} s for {len(ks)} K = {1000.0 * topk_seconds / max(n, 1):.2f} ms "
        f"per instance"
    )
    for k in ks:
        print(f"  accuracy at K={k:>3}: {accuracy[k]:.1%}  ({mean_pairs[k]:.1f} pairs on average)")
    write_json(
        {
            "dataset": ds.name,
            "split": args.split,
            "label_source": dist.label_source,
            "connected": dist.connected,
            "target_digest": target.digest,
            "cached": cached,
            "full_graph_accuracy": full,
            "policy": args.policy,
            "fill": bool(args.fill),
            "seconds": time.perf_counter() - start,
            "distillation": {
                "accuracy_at_k": {str(k): accuracy[k] for k in ks},
                "mean_pairs_at_k": {str(k): mean_pairs[k] for k in ks},
                "topk_seconds": topk_seconds,
                "ms_per_instance": ms,
                "topk_ms_per_instance": 1000.0 * topk_seconds / max(n, 1),
                "instances": n,
            },
        },
        args.json,
    )
    return 0


def _full_accuracy(instances: Sequence[Instance], black_box: BlackBox, device: str) -> float:
    """Accuracy of the target on the untouched computation graphs (for comparison)."""
    import torch

    from gem_core.gem.distill import topk_accuracy

    masks = [torch.ones(inst.num_pairs, dtype=torch.bool) for inst in instances]
    return topk_accuracy(instances, masks, black_box, device)
