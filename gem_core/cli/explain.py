"""Predict a SMILES with the Mutagenicity model and explain it.

Builds the Mutagenicity-style graph of a SMILES (explicit hydrogens, Kekulé bond orders),
predicts mutagen / nonmutagen with the target GNN and lists the K most important bonds as
atom-index pairs (numbering of RDKit's Chem.AddHs(Chem.MolFromSmiles(SMILES))), best first.
Bad input (empty, unparsable SMILES, unsupported elements, salts, too large molecules) prints
the message the app shows and exits with status 2.

example:
  python -m gem_core explain --smiles "O=[N+]([O-])c1ccccc1" --k 5 --json -
"""
from __future__ import annotations

import argparse

from gem_core.explainers import METHODS
from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "explain", run, __doc__, dataset=False, check=check)
    p.add_argument("--smiles", required=True, help="the molecule, e.g. 'O=[N+]([O-])c1ccccc1'")
    p.add_argument("--k", type=int, default=None,
                   help="number of explanation bonds (default: the paper's default K for "
                        "Mutagenicity)")
    p.add_argument("--method", default="gem", choices=METHODS, help="explainer (default: gem)")
    p.add_argument("--remove-bonds", default=None, metavar="I-J,K-L",
                   help="what if these bonds were gone: atom-index pairs (the numbering of the "
                        "output's bonds); prints the prediction and explanation of the edited "
                        "molecule beside the original and the change in loss")
    add_target_arg(p)


def check(args: argparse.Namespace) -> None:
    """Refuse a bad SMILES or K before any model is loaded or a progress bar is drawn (a SMILES
    the app rejects is refused by RDKit alone, without importing torch)."""
    from gem_core.chemistry.smiles import smiles_to_instance
    from gem_core.data.config import check_k

    if args.k is not None:
        check_k(args.k)
    smiles_to_instance(args.smiles)


def run(args: argparse.Namespace) -> int:
    from gem_core.service.molecules import explain_smiles

    quiet = args.json == "-"
    if args.remove_bonds is not None:
        return _run_edited(args, quiet)
    with progress_bar(args, "explain", quiet=quiet) as progress:
        result = explain_smiles(args.smiles, k=args.k, method=args.method, device=args.device,
                                progress=progress, target=args.target)
    if not quiet:
        pred = result["prediction"]
        print(f"{result['smiles']}: {pred['label']} (p = {pred['probability']:.3f})")
        bonds = result["explanation"]["bonds"]
        scores = result["explanation"]["scores"]
        print(f"{len(bonds)} explanation bond(s), best first ({args.method}):")
        for (i, j), s in zip(bonds, scores):
            print(f"  {i:>4d} - {j:<4d} {s:.4f}")
    write_json(result, args.json)
    return 0


def _run_edited(args: argparse.Namespace, quiet: bool) -> int:
    from gem_core.service.molecules import explain_smiles_edited
    from gem_core.service.whatif import parse_pair_list

    result = explain_smiles_edited(args.smiles, parse_pair_list(args.remove_bonds), k=args.k,
                                   method=args.method, device=args.device, target=args.target)
    if not quiet:
        before, after = result["original_prediction"], result["prediction"]
        removed = ", ".join(f"{i}-{j}" for i, j in result["removed_bonds"])
        print(f"{result['smiles']}: {before['label']} (p = {before['probability']:.3f})")
        print(f"without bond(s) {removed}: {after['label']} (p = {after['probability']:.3f}); "
              f"P(mutagen) {result['p_mutagen']['original']:.3f} -> "
              f"{result['p_mutagen']['edited']:.3f}; loss change {result['loss']['delta']:+.4f}")
        bonds, scores = result["explanation"]["bonds"], result["explanation"]["scores"]
        print(f"{len(bonds)} explanation bond(s) of the edited molecule, best first ({args.method}):")
        for (i, j), s in zip(bonds, scores):
            print(f"  {i:>4d} - {j:<4d} {s:.4f}")
    write_json(result, args.json)
    return 0
