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

from ..explainers import METHODS
from .common import add_command, add_target_arg, progress_bar, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "explain", run, __doc__, dataset=False)
    p.add_argument("--smiles", required=True, help="the molecule, e.g. 'O=[N+]([O-])c1ccccc1'")
    p.add_argument("--k", type=int, default=None,
                   help="number of explanation bonds (default: the paper's default K for "
                        "Mutagenicity)")
    p.add_argument("--method", default="gem", choices=METHODS, help="explainer (default: gem)")
    add_target_arg(p)


def run(args: argparse.Namespace) -> int:
    from ..chem import smiles_to_instance
    from ..config import check_k
    from ..molecules import explain_smiles

    # Validate the input before any model is loaded or a progress bar is drawn.
    smiles_to_instance(args.smiles)
    if args.k is not None:
        check_k(args.k)
    quiet = args.json == "-"
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
