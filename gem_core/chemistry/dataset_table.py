"""A shipped molecule dataset written as the table a chemist would bring: SMILES, label, id.

This is how the "Your data" flow is checked against the shipped models: Mutagenicity's graphs,
written out as SMILES with their class names, trained again through the table path, must reach
the shipped bond-aware target's accuracy (and its explanations the same toxicophores).
"""

from __future__ import annotations

import csv
import io

from gem_core.chemistry.convert import instance_to_mol, molecule_smiles
from gem_core.data.datasets import GemDataset
from gem_core.data.instances import graph_instance

__all__ = ["dataset_rows", "dataset_csv"]


def dataset_rows(ds: GemDataset) -> list[tuple[str, str, str]]:
    """``(smiles, class name, id)`` of every graph of a molecule dataset, in dataset order (the
    id is ``<dataset>-<graph index>``)."""
    if ds.atom_symbols is None or ds.graphs is None:
        raise ValueError(f"{ds.spec.title} is not a dataset of molecules: no table to write.")
    rows = []
    for i, graph in enumerate(ds.graphs):
        mol = instance_to_mol(graph_instance(graph, i), ds.atom_symbols)
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
