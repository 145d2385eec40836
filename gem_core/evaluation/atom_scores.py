"""Atoms as well as bonds: which atoms of a molecule a method says the prediction rests on, and
whether those are the atoms of the Kazius toxicophores.

A chemist reads highlighted atoms; and a model that decides from atom features keeps its
prediction when bonds go, so bond deletion alone cannot see its reasons. This module gives atom
scores four ways and judges them on the toxicophore atoms of predicted mutagens (``bench atoms``):

* ``atom_deletion`` — the Granger effect of deleting an atom with its bonds (the field's
  ``drop_isolated`` protocol: the atom goes, and so do hydrogens left without a bond): the rise of
  the loss against the model's own prediction. It asks the model once per atom, like the bond
  distillation Gem is trained on, so it is a teacher, not an amortized explainer.
* ``gem`` and ``gem_check`` — Gem's bond scores (one pass; with the explain-time search), an
  atom scored by its best bond (:func:`atoms_from_bonds`).
* ``integrated_gradients`` — Captum's Integrated Gradients of the predicted class on the atom
  features (through PyG's ``CaptumExplainer``, ``node_mask_type="attributes"``), summed per atom.
* ``random`` — uniform scores, the floor.

The yardstick: per predicted mutagen holding an alert, the ROC-AUC of the atom scores against the
alert atoms (:func:`atom_toxicophore_auc`), and the same molecules' bond AUC of Gem's bond scores
(:func:`gem_core.chemistry.toxicophores.toxicophore_bond_mask`), averaged over molecules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.data.protocol import drop_isolated
from gem_core.data.ranking import atoms_from_bonds, roc_auc
from gem_core.models.predict import predict_proba

__all__ = [
    "ATOM_METHODS",
    "atom_deletion_effects",
    "atoms_from_bonds",
    "atom_toxicophore_mask",
    "atom_toxicophore_auc",
]

ATOM_METHODS = ("gem", "gem_check", "atom_deletion", "integrated_gradients", "random")


def _without_atom(inst: Instance, atom: int) -> Instance:
    """``inst`` with every pair of ``atom`` deleted, then its isolated nodes dropped."""
    keep = (inst.pairs[0] != atom) & (inst.pairs[1] != atom)
    return drop_isolated(inst.subgraph(keep))


@torch.no_grad()
def atom_deletion_effects(
    black_box: Any,
    instances: Sequence[Instance],
    predicted: Tensor,
    batch_size: int = 2048,
) -> list[Tensor]:
    """Per instance, ``[num_nodes]`` loss rises when each atom is deleted with its bonds
    (cross-entropy of the class ``predicted`` on the whole instance, float64)."""
    variants: list[Instance] = []
    owners: list[int] = []
    for i, inst in enumerate(instances):
        for atom in range(inst.num_nodes):
            variants.append(_without_atom(inst, atom))
            owners.append(i)
    labels = torch.as_tensor(predicted).long()
    whole = predict_proba(black_box, list(instances), batch_size=batch_size)
    full = -whole[torch.arange(len(instances)), labels].clamp_min(1e-300).log()
    proba = predict_proba(black_box, variants, batch_size=batch_size)
    owner = torch.tensor(owners, dtype=torch.long)
    loss = -proba[torch.arange(len(variants)), labels[owner]].clamp_min(1e-300).log()
    rises = loss - full[owner]
    sizes = [inst.num_nodes for inst in instances]
    return list(rises.split(sizes))


def atom_toxicophore_mask(mol: Any) -> Tensor:
    """Bool ``[num_atoms]``: the atoms of any Kazius alert match of ``mol``."""
    from gem_core.chemistry.toxicophores import match_toxicophores

    mask = torch.zeros(mol.GetNumAtoms(), dtype=torch.bool)
    for matches in match_toxicophores(mol).values():
        for match in matches:
            mask[list(match)] = True
    return mask


def atom_toxicophore_auc(
    mols: Sequence[Any],
    atom_scores: Mapping[str, Sequence[Tensor]],
    bond_scores: Mapping[str, Sequence[Tensor]],
    pairs: Sequence[Tensor],
) -> dict[str, Any]:
    """Mean per-molecule ROC-AUC of each method's atom scores against the alert atoms, and of
    each method's bond scores against the alert bonds, over the molecules where both are defined
    (some alert atoms and bonds, not all): ``{"molecules", "atoms": {m: auc}, "bonds": {m: auc}}``.
    """
    from gem_core.chemistry.toxicophores import toxicophore_bond_mask

    kept: list[tuple[int, Tensor, Tensor]] = []
    for i, mol in enumerate(mols):
        atoms = atom_toxicophore_mask(mol)
        bonds = toxicophore_bond_mask(mol, pairs[i])
        if atoms.any() and not atoms.all() and bonds.any() and not bonds.all():
            kept.append((i, atoms, bonds))

    def mean_auc(scores: Sequence[Tensor], which: int) -> Optional[float]:
        aucs = [roc_auc(scores[i], masks[which - 1]) for i, *masks in kept]
        found = [a for a in aucs if a is not None]
        return sum(found) / len(found) if found else None

    return {
        "molecules": len(kept),
        "atoms": {m: mean_auc(s, 1) for m, s in atom_scores.items()},
        "bonds": {m: mean_auc(s, 2) for m, s in bond_scores.items()},
    }


class _OneGraph(torch.nn.Module):
    """A one-graph call of a graph model, ``(x, edge_index, batch, edge_attr)`` by position (how
    PyG's Captum wrapper passes its arguments on)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, edge_attr: Tensor) -> Tensor:
        return self.model(x, edge_index, batch=batch, edge_attr=edge_attr)


def integrated_gradients_atoms(model: Any, instances: Sequence[Instance]) -> list[Tensor]:
    """Per instance, ``[num_nodes]`` Integrated Gradients of the model's predicted class on the
    atom features, summed per atom (PyG's ``CaptumExplainer``, one molecule per call; a model
    reading bond types ``model(x, edge_index, batch=, edge_attr=)``)."""
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import CaptumExplainer

    from gem_core.data.instances import collate

    explainer = Explainer(
        model=_OneGraph(model).eval(),
        algorithm=CaptumExplainer("IntegratedGradients"),
        explanation_type="model",
        node_mask_type="attributes",
        edge_mask_type=None,
        model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"),
    )
    out = []
    for inst in instances:
        b = collate([inst], edge_attr=True)
        mask = explainer(b.x.float(), b.edge_index, batch=b.batch, edge_attr=b.edge_attr).node_mask
        out.append(mask.sum(-1).detach().double())
    return out
