"""Atoms as well as bonds: the toxicophore AUC of atom scores against bond scores.

On Mutagenicity's test molecules predicted mutagen (the ``strong`` target unless ``--target``),
scores every atom four ways (:mod:`gem_core.evaluation.atom_scores`): Gem's bond scores read per
atom (the generator alone; and with the explain-time search), the Granger effect of deleting the
atom (asks the model per atom), Integrated Gradients on the atom features (signed: evidence for
the predicted class; and its magnitude), and random scores. Per
molecule holding an alert, the ROC-AUC of the atom scores against the alert atoms, beside the
AUC of the bond scores against the alert bonds, averaged; and ms per molecule of each method.
Checks: Gem's atom AUC ≥ its bond AUC and ≥ Integrated Gradients' atom AUC.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gem_core.cli.common import add_command, progress_bar, write_json
from gem_core.runtime.progress import report


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "atoms", run, __doc__, dataset=False)
    p.add_argument("--target", default="strong", help="Mutagenicity's target (default: strong)")
    p.add_argument(
        "--limit", type=int, default=0, metavar="N", help="first N test molecules (0: all)"
    )
    p.add_argument("--seed", type=int, default=0, help="random scores' seed (default 0)")


def checks(result: dict[str, Any]) -> list[str]:
    """The acceptance lines: Gem's atom AUC against its bond AUC and Integrated Gradients'."""
    atoms, bonds = result["atoms"], result["bonds"]
    out = []
    rivals = (
        ("Gem's bond AUC", bonds["gem"]),
        ("IG's atom AUC", atoms.get("ig")),
        ("|IG|'s atom AUC", atoms.get("ig_magnitude")),
    )
    for name, other in rivals:
        if other is None:
            continue
        ok = atoms["gem"] is not None and atoms["gem"] >= other
        out.append(
            f"  {'PASS' if ok else 'MISS'}  Gem's atom AUC {atoms['gem']:.3f} ≥ {name} {other:.3f}"
        )
    return out


def run(args: argparse.Namespace) -> int:
    import torch

    from gem_core.chemistry.toxicophores import as_tox_molecules
    from gem_core.evaluation.atom_scores import (
        atom_deletion_effects,
        atom_toxicophore_auc,
        atoms_from_bonds,
        integrated_gradients_atoms,
    )
    from gem_core.service.session import workbench

    wb = workbench("mutagenicity", args.device, args.target)
    test = wb.instances("test")
    if args.limit > 0:
        test = test[: args.limit]
    predicted = wb.predict_proba(test).argmax(-1)
    mutagen = wb.spec.mutagen_label
    chosen = [i for i in range(len(test)) if int(predicted[i]) == mutagen]
    insts = [test[i] for i in chosen]
    pred = predicted[chosen]
    ms: dict[str, float] = {}
    bonds: dict[str, list] = {}
    atoms: dict[str, list] = {}
    with progress_bar(args, "bench atoms") as progress:
        for i, method in enumerate(("gem", "gem_check")):
            report(progress, i / 5, f"explaining with {method}")
            explained = wb.explain(method, insts, predicted=pred)
            bonds[method] = list(explained)
            atoms[method] = [atoms_from_bonds(x, s) for x, s in zip(insts, explained)]
            ms[method] = explained.ms_per_instance
        report(progress, 0.4, "deleting atoms")
        t0 = time.perf_counter()
        atoms["atom_deletion"] = atom_deletion_effects(wb.black_box, insts, pred)
        ms["atom_deletion"] = 1000 * (time.perf_counter() - t0) / max(len(insts), 1)
        report(progress, 0.6, "Integrated Gradients")
        t0 = time.perf_counter()
        atoms["ig"] = integrated_gradients_atoms(wb.target().model, insts)
        ms["ig"] = 1000 * (time.perf_counter() - t0) / max(len(insts), 1)
        atoms["ig_magnitude"] = [a.abs() for a in atoms["ig"]]  # evidence either way
        ms["ig_magnitude"] = ms["ig"]
        gen = torch.Generator().manual_seed(args.seed)
        atoms["random"] = [torch.rand(x.num_nodes, generator=gen).double() for x in insts]
        bonds["random"] = [torch.rand(x.num_pairs, generator=gen).double() for x in insts]
        ms["random"] = 0.0
        mols = [m.mol for m in as_tox_molecules(insts, wb.dataset.atom_symbols or ())]
        auc = atom_toxicophore_auc(mols, atoms, bonds, [x.pairs for x in insts])
    result = {
        "target": args.target,
        "predicted_mutagens": len(insts),
        "molecules": auc["molecules"],
        "atoms": auc["atoms"],
        "bonds": auc["bonds"],
        "ms_per_molecule": ms,
    }
    print(
        f"mutagenicity ({args.target}): {auc['molecules']} predicted mutagens with an alert "
        f"(of {len(insts)} predicted, {len(test)} test molecules)"
    )
    print(f"{'method':<16} {'atom AUC':>9} {'bond AUC':>9} {'ms/molecule':>12}")
    for m in atoms:
        a, b = auc["atoms"].get(m), auc["bonds"].get(m)
        print(
            f"{m:<16} {'-' if a is None else f'{a:.3f}':>9} {'-' if b is None else f'{b:.3f}':>9} "
            f"{ms[m]:>12.3g}"
        )
    for line in checks(result):
        print(line)
    write_json(result, args.json)
    return 0
