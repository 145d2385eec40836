"""Predict a SMILES with the Mutagenicity model and explain it.

Builds the Mutagenicity-style graph of a SMILES (explicit hydrogens, Kekulé bond orders),
predicts mutagen / nonmutagen with the target GNN (the strong, bond-aware one unless --target
says otherwise) and lists the K most important bonds, best first, with their atoms and
toxicophore ("N6–O7 (aromatic nitro)"; atom indices are the numbering of RDKit's
Chem.AddHs(Chem.MolFromSmiles(SMILES))), then reads the explanation in words. The JSON carries
the target, the bonds as atom-index pairs and labels, the reading and the toxicophores touched.
Bad input (empty, unparsable SMILES, unsupported elements, salts, too large molecules) prints
the message the app shows and exits with status 2.

example:
  python -m gem_core explain --smiles "O=[N+]([O-])c1ccccc1" --k 5 --json -
"""

from __future__ import annotations

import argparse

from gem_core.cli.common import add_command, add_salts_args, progress_bar, write_json
from gem_core.explainers import METHODS


def add_molecule_target_arg(parser: argparse.ArgumentParser) -> None:
    """``--target`` of the molecule commands: the target registry's molecule default unless
    asked (``explain``, ``screen``)."""
    from gem_core.data.config import TARGET_NAMES, molecule_default_target

    default = molecule_default_target()
    parser.add_argument(
        "--target",
        default=default,
        choices=TARGET_NAMES,
        help=f"the Mutagenicity target model (default: {default}, the more "
        f"accurate one whose explanations find the toxicophores; 'paper': "
        f"the paper's architecture)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "explain", run, __doc__, dataset=False, check=check)
    p.add_argument("--smiles", required=True, help="the molecule, e.g. 'O=[N+]([O-])c1ccccc1'")
    p.add_argument(
        "--k",
        type=int,
        default=None,
        help="number of explanation bonds (default: a quarter of the molecule's "
        "bonds, at most the paper's default K, as on the app's Molecule page)",
    )
    p.add_argument("--method", default="gem", choices=METHODS, help="explainer (default: gem)")
    p.add_argument(
        "--remove-bonds",
        default=None,
        metavar="I-J,K-L",
        help="what if these bonds were gone: atom-index pairs (the numbering of the "
        "output's bonds); prints the prediction and explanation of the edited "
        "molecule beside the original and the change in loss",
    )
    add_molecule_target_arg(p)
    add_model_arg(p)
    add_salts_args(p)


def add_model_arg(parser: argparse.ArgumentParser) -> None:
    """``--model NAME``: a model trained on your table (``train --csv``) instead of Mutagenicity's."""
    parser.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="a model trained on your own table (train --csv ... --name NAME; list: models list) "
        "instead of the Mutagenicity target",
    )


def check_model(args: argparse.Namespace) -> None:
    """Refuse an unknown ``--model`` before the engine loads."""
    if args.model is not None:
        from gem_core.data.config import user_spec

        if user_spec(str(args.model).strip().lower()) is None:
            raise ValueError(f"No model named {args.model!r} (python -m gem_core models list).")


def check(args: argparse.Namespace) -> None:
    """Refuse a bad SMILES or K before any model is loaded or a progress bar is drawn (a SMILES
    the app rejects is refused by RDKit alone, without importing torch)."""
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.data.config import check_k

    if args.k is not None:
        check_k(args.k)
    smiles_to_instance(args.smiles, salts=args.salts)
    check_model(args)


def run(args: argparse.Namespace) -> int:
    from gem_core.service.molecules import explain_smiles

    quiet = args.json == "-"
    if args.remove_bonds is not None:
        if args.model is not None:
            from gem_core.cli import UserError

            raise UserError("--remove-bonds explains Mutagenicity's targets only, not --model")
        return _run_edited(args, quiet)
    with progress_bar(args, "explain", quiet=quiet) as progress:
        result = explain_smiles(
            args.smiles,
            k=args.k,
            method=args.method,
            device=args.device,
            progress=progress,
            target=args.target,
            model=args.model,
            salts=args.salts,
        )
    if not quiet:
        for warning in result.get("warnings", []):
            print(f"note: {warning}")
        pred = result["prediction"]
        words = (
            f"model: {result['model']} (trained on your table)"
            if "model" in result
            else _model_words(result["target"])
        )
        said = (
            f"{pred['outcome']} = {pred['value']:.4g}"
            if "value" in pred
            else f"{pred['label']} (p = {pred['probability']:.3f})"
        )
        print(f"{result['smiles']}: {said}, {words}")
        _print_bonds(
            result,
            f"{len(result['explanation']['bonds'])} explanation bond(s), best "
            f"first ({args.method}):",
        )
        if "reading" in result:
            print(result["reading"]["text"])
        if "nearest_training" in result:
            print(_domain_words(result["nearest_training"]))
    write_json(result, args.json)
    return 0


def _domain_words(near: dict) -> str:
    """The closest training molecules in a line or two, and a caution outside the domain."""
    first = near["neighbours"][0] if near["neighbours"] else None
    if first is None:
        return "No training molecule to compare with."
    listed = "; ".join(
        f"{n['smiles']} ({n['label']}, {n['similarity']:.2f})" for n in near["neighbours"]
    )
    line = f"closest training molecules (Tanimoto): {listed}"
    if near["inside_domain"]:
        return line
    return (
        f"{line}\ncaution: no training molecule is as similar as {near['threshold']:.1f}: this "
        f"molecule is outside what the model learned from, and its prediction less reliable."
    )


def _run_edited(args: argparse.Namespace, quiet: bool) -> int:
    from gem_core.service.molecules import explain_smiles_edited
    from gem_core.service.whatif import parse_pair_list

    result = explain_smiles_edited(
        args.smiles,
        parse_pair_list(args.remove_bonds),
        k=args.k,
        method=args.method,
        device=args.device,
        target=args.target,
        salts=args.salts,
    )
    if not quiet:
        before, after = result["original_prediction"], result["prediction"]
        removed = ", ".join(f"{i}-{j}" for i, j in result["removed_bonds"])
        print(f"{result['smiles']}: {before['label']} (p = {before['probability']:.3f})")
        print(
            f"without bond(s) {removed}: {after['label']} (p = {after['probability']:.3f}); "
            f"P(mutagen) {result['p_mutagen']['original']:.3f} -> "
            f"{result['p_mutagen']['edited']:.3f}; loss change {result['loss']['delta']:+.4f}"
        )
        if result["detached_atoms"]:
            print(
                f"left detached, still in the graph the model reads: atom(s) "
                f"{', '.join(map(str, result['detached_atoms']))} (the app's What-if section "
                f"deletes them in one click)"
            )
        print(_model_words(result["target"]))
        _print_bonds(
            result,
            f"{len(result['explanation']['bonds'])} explanation bond(s) of the "
            f"edited molecule, best first ({args.method}):",
        )
    write_json(result, args.json)
    return 0


def _model_words(target: str) -> str:
    """Which model answered: ``model: Mutagenicity, strong target (stronger (bond-aware GINE))``."""
    from gem_core.data.config import target_spec

    return f"model: Mutagenicity, {target} target — {target_spec(target).title}"


def _print_bonds(result: dict, head: str) -> None:
    """Each explanation bond with its atoms and toxicophore, and its score."""
    print(head)
    labels = result["explanation"]["labels"]
    width = max((len(x) for x in labels), default=0)
    for label, s in zip(labels, result["explanation"]["scores"]):
        print(f"  {label:<{width}}  {s:.4f}")
