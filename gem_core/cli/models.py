"""Models trained on your own tables: list, delete, share, export, import; write a table.

  models list                         the saved models, their classes and held-out figures
  models delete NAME                  delete a model and everything cached for it
  models share NAME [--off]           let anyone who knows the name open it (the app's users too)
  models export NAME --out FILE       one file another machine imports (weights only)
  models import FILE                  a file from 'models export' (loaded with weights_only)
  models table --dataset mutagenicity --out FILE
                                      a shipped molecule dataset as a SMILES table (smiles,label,id)
  models table --crippen --out FILE   a regression table: RDKit's 5,000 NCI compounds with their
                                      Crippen logP computed by RDKit (smiles,logp,id)
  models evaluate NAME [--alert-class mutagen] [--split val] [--methods gem,distilled_predicted]
                                      each method (Gem, Gem + check, Integrated Gradients, random;
                                      --methods: any of the registry's) on the model's test split
                                      (--split val: its validation split, to choose on): ms per
                                      molecule, sufficiency and necessity (drop_isolated), and with
                                      --alert-class the AUC of its bond scores against the Kazius
                                      alerts' bonds on the molecules predicted in that class

Models are trained with ``train --csv FILE --name NAME`` and used with ``explain --model NAME``
and ``screen --model NAME``. The command line sees every model of this machine's cache.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gem_core.cli.common import (
    add_choose_split_arg,
    add_command,
    parse_names,
    progress_bar,
    write_json,
)

ACTIONS = ("list", "delete", "share", "export", "import", "table", "evaluate")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "models", run, __doc__, dataset="optional", check=check)
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("name", nargs="?", help="the model (delete, share, export) or file (import)")
    p.add_argument("--out", metavar="FILE", help="where export / table writes")
    p.add_argument("--off", action="store_true", help="share: make the model private again")
    p.add_argument(
        "--crippen",
        action="store_true",
        help="table: RDKit's NCI compounds with their Crippen logP (a regression table)",
    )
    p.add_argument(
        "--alert-class",
        default=None,
        help="evaluate: the class whose molecules should carry the Kazius alerts (e.g. mutagen)",
    )
    add_choose_split_arg(p)
    p.add_argument(
        "--methods",
        default=None,
        help="evaluate: comma-separated methods (default: gem,gem_check,integrated_gradients,"
        "random)",
    )


def check(args: argparse.Namespace) -> None:
    """The arguments each action needs, before the engine loads."""
    from gem_core.cli import UserError

    if args.action in ("delete", "share", "export", "import", "evaluate") and not args.name:
        raise UserError(
            f"models {args.action} needs a {'FILE' if args.action == 'import' else 'NAME'}"
        )
    if args.action in ("export", "table") and not args.out:
        raise UserError(f"models {args.action} needs --out FILE")
    if args.action == "table" and not (args.dataset or args.crippen):
        raise UserError("models table needs --dataset NAME (a molecule dataset) or --crippen")
    if args.action == "import" and not Path(args.name).is_file():
        raise UserError(f"{args.name!r} does not exist (or is not a file)")


def _outcome(model) -> str:
    """What a model predicts: its classes, or its outcome's name (a number)."""
    if model.regression:
        return f"{model.meta.get('outcome_column', '')} (number)"
    return "/".join(model.classes)


def _figures(test: dict, model) -> str:
    """A model's test figures in one phrase: accuracy and ROC-AUC, or RMSE and R²."""

    def fmt(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    if model.regression:
        return f"test RMSE {fmt(test.get('rmse'), '.3f')}, R² {fmt(test.get('r2'), '.3f')}"
    return (
        f"test accuracy {fmt(test.get('accuracy'), '.1%')}, ROC-AUC "
        f"{fmt(test.get('roc_auc'), '.3f')}"
    )


def run(args: argparse.Namespace) -> int:
    from gem_core.service import user_models as um

    if args.action == "list":
        models = um.list_user_models()
        for m in models:
            print(
                f"{m.name:<24} {_outcome(m):<28} {_figures(m.metrics.get('test', {}), m)}  "
                f"owner {m.owner}{' (shared)' if m.shared else ''}"
            )
        if not models:
            print("no models yet: python -m gem_core train --csv FILE --name NAME")
        write_json([{"name": m.name, **m.meta} for m in models], args.json)
    elif args.action == "delete":
        um.delete_user_model(args.name)
        print(f"deleted {args.name}")
    elif args.action == "share":
        m = um.share_user_model(args.name, None, shared=not args.off)
        print(f"{m.name}: {'shared' if m.shared else 'private'}")
    elif args.action == "export":
        data = um.export_user_model(args.name)
        Path(args.out).write_bytes(data)
        print(f"wrote {args.out} ({len(data) / 2**20:.1f} MB)")
    elif args.action == "import":
        m = um.import_user_model(Path(args.name).read_bytes())
        print(f"imported {m.name}")
    elif args.action == "evaluate":
        return _evaluate(args)
    else:
        text = _table_text(args)
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({text.count(chr(10)) - 1} molecules)")
    return 0


def _table_text(args: argparse.Namespace) -> str:
    """The table ``models table`` writes: a molecule dataset's classes, or Crippen logP."""
    if args.crippen:
        from gem_core.chemistry.crippen import crippen_csv

        return crippen_csv()
    from gem_core.chemistry.dataset_table import dataset_csv
    from gem_core.data.datasets import load_dataset

    return dataset_csv(load_dataset(args.dataset))


def _evaluate(args: argparse.Namespace) -> int:
    """Faithfulness, speed and toxicophore AUC of each method on the model's test molecules."""
    from gem_core.evaluation.user_model_bench import BENCH_METHODS, evaluate_user_model
    from gem_core.explainers.registry import METHODS

    methods = (
        BENCH_METHODS if args.methods is None else parse_names(args.methods, METHODS, "method")
    )
    with progress_bar(args, f"evaluate {args.name}") as progress:
        result = evaluate_user_model(
            args.name,
            methods,
            device=args.device,
            alert_class=args.alert_class,
            progress=progress,
            split=args.split,
        )
    print(
        f"{result['model']}: {result['molecules']} {result['split']} molecules, "
        f"{result['protocol']}; "
        f"sufficiency mean over k = 5..25, necessity over k = 2..10"
    )
    print(f"{'method':<22} {'ms/molecule':>11} {'sufficiency':>11} {'necessity':>9} {'tox AUC':>8}")
    for method, row in result["methods"].items():
        auc = row["toxicophore_auc"]
        print(
            f"{method:<22} {row['ms_per_molecule']:>11.3f} {row['sufficiency']:>11.3f} "
            f"{row['necessity']:>9.3f} {'n/a' if auc is None else f'{auc:.3f}':>8}"
        )
    write_json(result, args.json)
    return 0
