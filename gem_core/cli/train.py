"""``train``: train (or retrain) a dataset's target GNN and print its accuracies."""

from __future__ import annotations

import argparse
import shutil

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "train",
        run,
        help="train a target GNN and print train/val/test accuracy",
        description="Train the paper's target GNN for a dataset (Adam, early stopping "
        "on validation) and store it in the cache.",
    )
    p.add_argument(
        "--save-asset",
        action="store_true",
        help="also copy the checkpoint into assets/targets/ (regenerates the shipped model)",
    )
    add_target_arg(p)


def run(args: argparse.Namespace) -> int:
    from gem_core.data.datasets import load_dataset
    from gem_core.models.targets import get_target, shipped_target_path
    from gem_core.runtime.device import resolve_device

    ds = load_dataset(args.dataset)
    with progress_bar(args, f"train {ds.name}") as progress:
        target = get_target(
            ds,
            retrain=True,
            device=resolve_device(args.device, "fit"),
            progress=progress,
            name=args.target,
        )
    m = target.metrics
    print(
        f"{ds.spec.title}: train {m.train_accuracy:.1%}  val {m.val_accuracy:.1%}  "
        f"test {m.test_accuracy:.1%}  ({m.train_seconds:.1f} s, {m.epochs} epochs)"
    )
    print(f"checkpoint: {target.path}")
    if args.save_asset:
        dst = shipped_target_path(ds.name, args.target)
        dst.parent.mkdir(parents=True, exist_ok=True)
        assert target.path is not None  # get_target loads the target from its checkpoint
        shutil.copyfile(target.path, dst)
        print(f"shipped asset: {dst}")
    write_json(
        {
            "dataset": ds.name,
            "target": {
                "name": args.target,
                "train_accuracy": m.train_accuracy,
                "val_accuracy": m.val_accuracy,
                "test_accuracy": m.test_accuracy,
                "train_seconds": m.train_seconds,
                "epochs": m.epochs,
            },
        },
        args.json,
    )
    return 0
