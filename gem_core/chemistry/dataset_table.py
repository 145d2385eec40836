"""A shipped molecule dataset written as the table a chemist would bring: SMILES, label, id.

This is how the "Your data" flow is checked against the shipped models: Mutagenicity's graphs,
written out as SMILES with their class names, trained again through the table path, must reach
the shipped bond-aware target's accuracy (and its explanations the same toxicophores).
"""

from __future__ import annotations

import csv
import io

from rdkit import Chem

from gem_core.chemistry.convert import instance_to_mol, molecule_smiles
from gem_core.data.datasets import GemDataset
from gem_core.data.instances import graph_instance

__all__ = ["dataset_rows", "dataset_csv", "restore_dropped_charges"]

#: a neutral atom with this many bonds (hydrogens explicit) lost its + charge in the dataset
_CATION_VALENCE = {"N": 4, "O": 3}


def restore_dropped_charges(mol: Chem.Mol) -> Chem.Mol:
    """``mol`` with the formal charges its dataset dropped from N-oxides, azoxy groups,
    quaternary ammonium and oxonium rings: a neutral N with four bonds (hydrogens explicit) or O
    with three becomes N+ / O+, and a terminal O singly bonded to such an N, with no hydrogen,
    becomes O-. The graph is unchanged; without this such a molecule (76 of Mutagenicity's)
    writes a SMILES that no reader accepts (``[O]N(=N...)...``: a 4-valent N). Nitro and azide
    groups are charged already (:func:`instance_to_mol`)."""
    rw = Chem.RWMol(mol)
    for atom in rw.GetAtoms():
        cation = _CATION_VALENCE.get(atom.GetSymbol())
        if cation is None or atom.GetFormalCharge() != 0:
            continue
        # of the dataset's (Kekulé) bond orders, as instance_to_mol read them
        if atom.GetValence(Chem.ValenceType.EXPLICIT) != cation:
            continue
        atom.SetFormalCharge(1)
        for bond in atom.GetBonds():
            o = bond.GetOtherAtom(atom)
            if (
                atom.GetSymbol() == "N"
                and o.GetSymbol() == "O"
                and o.GetDegree() == 1
                and o.GetFormalCharge() == 0
                and bond.GetBondType() == Chem.BondType.SINGLE
            ):
                o.SetFormalCharge(-1)
                break
    out = rw.GetMol()
    out.UpdatePropertyCache(strict=False)
    return out


def dataset_rows(ds: GemDataset) -> list[tuple[str, str, str]]:
    """``(smiles, class name, id)`` of every graph of a molecule dataset, in dataset order (the
    id is ``<dataset>-<graph index>``)."""
    if ds.atom_symbols is None or ds.graphs is None:
        raise ValueError(f"{ds.spec.title} is not a dataset of molecules: no table to write.")
    rows = []
    for i, graph in enumerate(ds.graphs):
        mol = restore_dropped_charges(instance_to_mol(graph_instance(graph, i), ds.atom_symbols))
        label = int(graph.y.view(-1)[0])
        rows.append((molecule_smiles(mol), ds.class_names[label], f"{ds.name}-{i}"))
    return rows


def dataset_csv(ds: GemDataset) -> str:
    """:func:`dataset_rows` as CSV text with the header ``smiles,label,id``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["smiles", "label", "id"])
    writer.writerows(dataset_rows(ds))
    return out.getvalue()
