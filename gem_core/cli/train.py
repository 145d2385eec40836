"""``train``: train (or retrain) a dataset's target GNN, or a model on your own table.

``--dataset NAME`` trains a shipped dataset's target. ``--csv FILE --smiles-column S
--label-column L --name NAME`` trains the bond-aware recipe on a table of SMILES and outcome
classes (CSV, TSV or .smi), prints what it read and the held-out figures, fits Gem for it, and
saves it as NAME: then ``explain --model NAME``, ``screen --model NAME`` and ``models``.

example:
  python -m gem_core train --csv assay.csv --smiles-column smiles --label-column active --name ames
"""

from __future__ import annotations

import argparse
import shutil

from gem_core.cli.common import (
    add_command,
    add_salts_args,
    add_target_arg,
    progress_bar,
    write_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "train",
        run,
        __doc__,
        help="train a target GNN (a dataset's, or one on your table) and print its accuracy",
        dataset="optional",
        check=check,
    )
    table = p.add_argument_group("your table (instead of --dataset)")
    table.add_argument(
        "--csv",
        metavar="FILE",
        help="a .csv / .tsv / .smi table of molecules, or an .sdf (its data items as columns)",
    )
    table.add_argument("--smiles-column", help="the SMILES column (default: guessed)")
    table.add_argument("--label-column", help="the outcome column (default: guessed)")
    table.add_argument("--id-column", help="an optional id column")
    table.add_argument(
        "--outcome",
        default="auto",
        choices=("auto", "class", "number"),
        help="read the outcome as classes or as a number (default auto: text or at most 10 "
        "whole numbers are classes)",
    )
    table.add_argument(
        "--classes",
        metavar="A,B",
        help="train on these classes only (comma-separated, any case; e.g. Active,Inactive "
        "without a PubChem assay's Inconclusive); the other rows are left out",
    )
    table.add_argument("--name", help="the model's name (letters, digits, _)")
    table.add_argument("--split", default="random", choices=("random", "scaffold"))
    table.add_argument("--recipe", default="default", choices=("default", "small"))
    table.add_argument("--seed", type=int, default=0)
    table.add_argument(
        "--time-budget", type=float, default=600.0, metavar="S", help="most seconds of training"
    )
    add_salts_args(table)
    table.add_argument("--no-gem", action="store_true", help="do not fit Gem after training")
    p.add_argument(
        "--save-asset",
        action="store_true",
        help="also copy the checkpoint into assets/targets/ (regenerates the shipped model)",
    )
    add_target_arg(p)


def check(args: argparse.Namespace) -> None:
    """Exactly one of --dataset and --csv; a table needs --name; the file must exist."""
    from pathlib import Path

    from gem_core.cli import UserError

    if (args.dataset is None) == (args.csv is None):
        raise UserError("give either --dataset NAME or --csv FILE (with --name)")
    if args.csv is not None:
        if not args.name:
            raise UserError("--csv needs --name NAME: the name the model is saved under")
        from gem_core.data.config import check_user_name

        check_user_name(args.name)
        if not Path(args.csv).is_file():
            raise UserError(f"{args.csv!r} does not exist (or is not a file)")


def run(args: argparse.Namespace) -> int:
    if args.csv is not None:
        return _run_table(args)
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


def _run_table(args: argparse.Namespace) -> int:
    """Read the table, say what was read, train, report the held-out figures, fit Gem."""
    from pathlib import Path

    from gem_core.chemistry.tables import guess_columns, read_molecules, read_table
    from gem_core.service.user_models import fit_gem, train_user_model

    path = Path(args.csv)
    table = read_table(path.read_bytes(), path.name)
    guess = guess_columns(table)
    smiles_column = args.smiles_column or guess.smiles
    label_column = args.label_column or guess.outcome
    if smiles_column is None or label_column is None:
        from gem_core.cli import UserError

        raise UserError(
            f"cannot tell the SMILES and outcome columns apart (columns: "
            f"{', '.join(table.columns)}): pass --smiles-column and --label-column"
        )
    with progress_bar(args, "read") as progress:
        reading = read_molecules(
            table,
            smiles_column,
            label_column,
            args.id_column,
            outcome=args.outcome,
            salts=args.salts,
            progress=progress,
            classes=None if args.classes is None else args.classes.split(","),
        )
    print(describe_reading(reading))
    with progress_bar(args, f"train {args.name}") as progress:
        model = train_user_model(
            reading,
            args.name,
            recipe=args.recipe,
            split=args.split,
            seed=args.seed,
            time_budget_s=args.time_budget,
            device=args.device,
            progress=progress,
            source_file=path.name,
        )
    print(describe_model(model, args.split))
    if not args.no_gem:
        with progress_bar(args, f"fit Gem for {model.name}") as progress:
            fit_gem(model.name, args.device, progress)
        print(f"Gem fitted: python -m gem_core explain --model {model.name} --smiles ...")
    write_json({"model": model.name, **model.meta}, args.json)
    return 0


def describe_model(model, split: str) -> str:
    """A trained user model's held-out figures, in a few lines: a classifier's accuracy,
    ROC-AUC and confusion; a regressor's RMSE, MAE and R²."""
    test, training = model.metrics["test"], model.meta["training"]
    trained = (
        f"on {test['n']} molecules ({split} split); {training['seconds']:.0f} s, "
        f"{training['epochs']} epochs, stopped by {training['stopped']}"
    )
    if model.regression:
        r2 = "n/a" if test["r2"] is None else f"{test['r2']:.3f}"
        return (
            f"{model.name}: test RMSE {test['rmse']:.3f}, MAE {test['mae']:.3f}, R² {r2} {trained}"
        )
    auc = "n/a" if test["roc_auc"] is None else f"{test['roc_auc']:.3f}"
    lines = [
        f"{model.name}: test accuracy {test['accuracy']:.1%}, ROC-AUC {auc} {trained}",
        f"confusion (rows measured, columns predicted; {', '.join(model.classes)}):",
    ]
    for name, row in zip(model.classes, test["confusion"]):
        lines.append(f"  {name:>12}: {' '.join(f'{v:6d}' for v in row)}")
    return "\n".join(lines)


def describe_reading(reading) -> str:
    """What was read, in a few lines: rows, valid molecules, refusals, duplicates, classes."""
    from gem_core.chemistry.tables import LEFT_OUT_KINDS

    lines = [
        f"read {reading.rows_read} rows: {reading.valid} valid molecules, "
        f"{len(reading.molecules)} to train on ({reading.duplicates} duplicates, "
        f"{reading.conflicting} with conflicting outcomes left out)"
    ]
    for reason, (count, example) in reading.refused_by_reason().items():
        verb = "left out" if reason in LEFT_OUT_KINDS else "refused"
        lines.append(f"  {verb} {count} ({reason}), e.g. {example}")
    if reading.outcome_kind == "class":
        counts = ", ".join(f"{k}: {v}" for k, v in reading.class_counts().items())
        lines.append(f"classes of {reading.outcome_column}: {counts}")
    else:
        o = reading.outcome_summary()
        if o:
            lines.append(
                f"{reading.outcome_column} (a number: regression): mean {o['mean']:.3g}, "
                f"std {o['std']:.3g}, from {o['min']:.3g} to {o['max']:.3g}"
            )
    lines += [f"  note: {w}" for w in reading.warnings]
    return "\n".join(lines)
