"""Explain a chemist's molecule: SMILES in, Mutagenicity prediction and explanation bonds out.

This is the engine side of the app's Molecule page and of ``python -m gem_core explain``:

* :func:`molecule_model` is the shared Mutagenicity :class:`~gem_core.service.session.Workbench` with its
  target loaded. Without the raw dataset it opens from checkpoints only (the target's, cached or
  shipped in ``assets/targets/``; Gem's fitted for that target); methods that need training data
  (PGExplainer, fitting Gem) then raise :class:`ModelUnavailableError`.
* :func:`explain_molecules` predicts and explains many molecules in one batch per method.
* :func:`explain_smiles` is the one-molecule flow with the CLI's JSON shape::

    {"smiles": ..., "target": "strong", "prediction": {"label": "mutagen" | "nonmutagen",
     "probability": p}, "explanation": {"bonds": [[i, j], ...], "scores": [...], "atoms":
     [i, ...], "atom_scores": [...], "labels": ["N6=O7 (aromatic nitro)", ...]}, "reading":
     {"text", "facts"}, "toxicophores":
     {"present": [...], "touched": [...]}}

  The target is the registry's molecule default (:data:`MOLECULE_TARGET`) unless one is named.

  Bonds are atom-index pairs ``i < j`` numbered like ``Chem.AddHs(Chem.MolFromSmiles(smiles))``,
  best first, ``K`` of them (fewer when the molecule has fewer bonds); ``probability`` is the
  model's probability of the predicted label (class 0 = mutagen, 1 = nonmutagen).

Bad input raises :class:`~gem_core.chemistry.smiles.MoleculeError` (a ``ValueError``) with a message meant
for the user; the CLI turns it into exit status 2, the app into an error box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.chemistry.convert import fragment_smarts
from gem_core.chemistry.labels import bond_labels
from gem_core.chemistry.smiles import MoleculeError, MoleculeInstance, smiles_to_instance
from gem_core.data.config import check_k, get_spec, molecule_default_target
from gem_core.data.datasets import MUTAGENICITY_CLASSES, DataUnavailableError
from gem_core.data.ranking import ranked_pairs
from gem_core.explainers import Explanation, check_method
from gem_core.runtime.progress import ProgressFn, report, scaled
from gem_core.service.session import ModelUnavailableError, Workbench, workbench
from gem_core.service.session import forget_explainer as forget

DATASET = "mutagenicity"
#: the target a molecule is explained with where none is chosen (the target row marked
#: ``molecule_default``: the more accurate one whose explanations find the toxicophores)
MOLECULE_TARGET = molecule_default_target()
CLASS_NAMES: tuple[str, ...] = MUTAGENICITY_CLASSES  # class 0 = mutagen, 1 = nonmutagen

__all__ = [
    "DATASET",
    "CLASS_NAMES",
    "MOLECULE_TARGET",
    "ModelUnavailableError",
    "MoleculeExplanation",
    "molecule_model",
    "target_checkpoint_available",
    "forget_explainer",
    "explain_molecules",
    "explain_smiles",
    "ranked_bonds",
    "default_k",
    "suggested_k",
    "molecule_k",
]


def default_k() -> int:
    """The paper's default K for Mutagenicity (from the config table)."""
    return get_spec(DATASET).default_k


def suggested_k(num_bonds: int) -> int:
    """A K that explains rather than repeats a molecule: a quarter of its bonds (rounded up),
    at most the paper's default K. The paper's K grid (15-30) is at least the bond count of
    small molecules, where every bond would be "the explanation"."""
    return max(1, min(default_k(), math.ceil(int(num_bonds) / 4)))


def molecule_k(k: Optional[int], num_bonds: int) -> int:
    """The K of one molecule: ``k`` when given (checked), else :func:`suggested_k` of its
    ``num_bonds``. The one K rule of every molecule view: the Molecule page's two tabs,
    ``explain`` and ``screen``."""
    return suggested_k(num_bonds) if k is None else check_k(k)


# ----------------------------------------------------------------------------- the model


def target_checkpoint_available(target: str = MOLECULE_TARGET) -> bool:
    """Whether the Mutagenicity target loads from a checkpoint (no training needed)."""
    from gem_core.models.targets import cached_target_path, shipped_target_path

    return any(
        p.exists()
        for p in (cached_target_path(DATASET, target), shipped_target_path(DATASET, target))
    )


def molecule_model(
    device: str = "auto",
    progress: Optional[ProgressFn] = None,
    target: str = MOLECULE_TARGET,
    model: Optional[str] = None,
) -> Workbench:
    """The shared molecule :class:`~gem_core.service.session.Workbench` of ``device``, target
    loaded: Mutagenicity's ``target``, or the model trained on a user's table named ``model``
    (:mod:`gem_core.service.user_models`; its target is its own, ``target`` is not read).

    The target comes from its checkpoint when there is one (no data needed); otherwise it is
    trained on the raw data (minutes).

    Raises:
        ModelUnavailableError: no usable checkpoint and no raw data to train one.
        ValueError: no user model of that name.
    """
    if model is not None:
        from gem_core.service.user_models import user_workbench

        return user_workbench(model, device)
    wb = workbench(DATASET, device, target)
    wb.target(progress)
    return wb


def forget_explainer(method: Optional[str] = None) -> None:
    """Drop a held Mutagenicity explainer from every shared workbench (e.g. after a refit)."""
    forget(DATASET, method)


# ----------------------------------------------------------------------------- explanations


def ranked_bonds(pairs: Tensor, scores: Tensor, k: int) -> tuple[list[list[int]], list[float]]:
    """The top-``k`` pairs as ``[[i, j], ...]``, best first (ties: lower pair index), and scores
    (the order of :func:`gem_core.data.ranking.ranked_pairs`)."""
    s = torch.as_tensor(scores).detach().double().cpu()
    order = ranked_pairs(s, check_k(int(k)))
    bonds = [[int(pairs[0, j]), int(pairs[1, j])] for j in order]
    return bonds, [float(s[j]) for j in order]


@dataclass
class MoleculeExplanation:
    """Prediction and explanations of one molecule.

    Attributes:
        molecule: the parsed molecule (graph instance + RDKit molecule, same numbering).
        probabilities: class probabilities of the target on the whole molecule (a regressor:
            empty).
        value: a regressor's predicted value on the whole molecule (None for a classifier).
        explanations: method -> its one-instance :class:`Explanation` of ``molecule.instance``
            (one score per bond, in ``molecule.instance.pairs`` order; ``ms_per_instance`` that
            of the batch it was explained in).
        errors: method -> message, for methods that could not run.
    """

    molecule: MoleculeInstance
    probabilities: list[float]
    explanations: dict[str, Explanation] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    class_names: tuple[str, ...] = CLASS_NAMES
    value: Optional[float] = None

    @property
    def scores(self) -> dict[str, Tensor]:
        """method -> one score per bond (in ``molecule.instance.pairs`` order)."""
        return {m: e[0] for m, e in self.explanations.items()}

    @property
    def ms_per_instance(self) -> dict[str, float]:
        """method -> explain time per molecule of the batch it was explained in."""
        return {m: e.ms_per_instance for m, e in self.explanations.items()}

    @property
    def regression(self) -> bool:
        """Whether the model predicted a value (a regressor), not a class."""
        return self.value is not None

    @property
    def label(self) -> int:
        if self.regression:
            return 0
        return int(max(range(len(self.probabilities)), key=lambda c: self.probabilities[c]))

    @property
    def label_name(self) -> str:
        """The predicted class; a regressor's value as text (``"logp = 2.31"``)."""
        if self.value is not None:
            return f"{self.class_names[0]} = {self.value:.4g}"
        return self.class_names[self.label]

    @property
    def probability(self) -> float:
        """Probability of the predicted label (NaN for a regressor: it predicts a value)."""
        if self.regression:
            return math.nan
        return float(self.probabilities[self.label])

    def bonds(self, method: str, k: int) -> tuple[list[list[int]], list[float]]:
        """Top-``k`` explanation bonds of ``method``, best first, with their scores."""
        return ranked_bonds(self.molecule.instance.pairs, self.explanations[method][0], k)

    def atom_scores(self, method: str) -> Tensor:
        """One score per atom (``molecule.instance`` numbering): the atom's best bond score of
        ``method`` (:func:`gem_core.data.ranking.atoms_from_bonds`; ``bench atoms``
        measures how these find the toxicophore atoms)."""
        from gem_core.data.ranking import atoms_from_bonds

        return atoms_from_bonds(self.molecule.instance, self.explanations[method][0])

    def atoms(self, method: str, k: int) -> tuple[list[int], list[float]]:
        """The atoms of ``method``'s top-``k`` bonds, best first (by atom score, ties: lower
        index), with their scores."""
        bonds, _ = self.bonds(method, k)
        scores = self.atom_scores(method)
        touched = sorted({a for b in bonds for a in b}, key=lambda a: (-float(scores[a]), a))
        return touched, [float(scores[a]) for a in touched]

    def mask(self, method: str, k: int) -> Tensor:
        """Boolean mask of ``method``'s top-``k`` bonds (in ``molecule.instance.pairs`` order)."""
        return self.explanations[method].topk_mask(0, int(k))

    def fragment(self, method: str, k: int) -> str:
        """The explanation bonds as a SMARTS-like fragment."""
        bonds, _ = self.bonds(method, k)
        return fragment_smarts(self.molecule.mol, [tuple(b) for b in bonds])

    def to_json(self, method: str, k: int) -> dict[str, Any]:
        """The CLI's JSON shape for one method."""
        bonds, scores = self.bonds(method, k)
        prediction: dict[str, Any] = (
            {"outcome": self.class_names[0], "value": self.value}
            if self.value is not None
            else {"label": self.label_name, "probability": self.probability}
        )
        atoms, atom_scores = self.atoms(method, k)
        return {
            "smiles": self.molecule.input_smiles,
            "prediction": prediction,
            "explanation": {
                "bonds": bonds,
                "scores": scores,
                "atoms": atoms,
                "atom_scores": atom_scores,
            },
        }


def explain_molecules(
    molecules: Sequence[MoleculeInstance],
    methods: Sequence[str] = ("gem",),
    device: str = "auto",
    progress: Optional[ProgressFn] = None,
    strict: bool = True,
    model: Optional[Workbench] = None,
) -> list[MoleculeExplanation]:
    """Predict and explain parsed molecules, one batched call per method.

    Args:
        molecules: from :func:`~gem_core.chemistry.smiles.smiles_to_instance`.
        methods: explainer names (see :data:`gem_core.explainers.METHODS`).
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: optional ``progress(fraction, message)`` callback.
        strict: raise when a method cannot run; otherwise record the message in ``errors``.
        model: the Mutagenicity workbench to use (default: :func:`molecule_model`).
    """
    methods = [check_method(m) for m in methods]
    molecules = list(molecules)
    if not molecules:
        return []
    model = model or molecule_model(device)
    instances = [m.instance for m in molecules]
    names = model.spec.class_names
    if model.regression:  # a user's model of a number: its value, judged within a tolerance
        predicted = model.predict_values(instances)
        out = [
            MoleculeExplanation(m, [], class_names=names, value=float(v))
            for m, v in zip(molecules, predicted)
        ]
    else:
        proba = model.predict_proba(instances)
        predicted = proba.argmax(-1)  # made once: an explainer that reads it (Gem) gets it here
        out = [
            MoleculeExplanation(m, [float(p) for p in row], class_names=names)
            for m, row in zip(molecules, proba)
        ]
    for i, method in enumerate(methods):
        part = scaled(progress, i / len(methods), (i + 1) / len(methods))
        report(part, 0.0, f"explaining with {method}")
        try:
            explained = model.explain(method, instances, part, predicted=predicted)
        except (ModelUnavailableError, DataUnavailableError) as exc:
            if strict:
                raise
            for res in out:
                res.errors[method] = str(exc)
            continue
        for res, s in zip(out, explained):
            res.explanations[method] = Explanation(
                method,
                [torch.as_tensor(s).detach().float().cpu()],
                explained.ms_per_instance,
                [res.molecule.instance],
            )
    report(progress, 1.0, "done")
    return out


def explain_smiles(
    smiles: str,
    k: Optional[int] = None,
    method: str = "gem",
    device: str = "auto",
    progress: Optional[ProgressFn] = None,
    target: str = MOLECULE_TARGET,
    read: bool = True,
    model: Optional[str] = None,
    salts: str = "refuse",
) -> dict[str, Any]:
    """Predict a SMILES with the Mutagenicity target and explain it with ``method``.

    Returns ``{"smiles", "target", "prediction": {"label", "probability"}, "explanation":
    {"bonds", "scores", "labels"}}`` (see the module docstring; ``labels`` are the bonds as a
    chemist reads them, "N6–O7 (aromatic nitro)"), and with ``read`` the engine's reading
    (``{"text", "facts"}``, :func:`gem_core.service.reading.read_explanation`) and the
    ``toxicophores`` (``present``: classes in the molecule; ``touched``: those the explanation
    touches, with its bonds in each). ``k`` defaults to :func:`suggested_k` of the molecule, as
    on the Molecule page. ``model``: a model trained on a user's table (by name) instead of
    Mutagenicity's ``target``; the JSON then names it (``"model"``) and its classes. A model of
    a number (regression) gives ``"prediction": {"outcome", "value"}`` and no reading. Where
    the model's training molecules are here, ``"nearest_training"``: the three most similar
    (Tanimoto of Morgan fingerprints, their measured labels) and ``inside_domain``
    (:mod:`gem_core.service.neighbours`). ``salts``: how a salt is read
    (:data:`~gem_core.data.config.SALT_RULES`); what reading the SMILES noted (a fragment kept,
    a salt read whole, charges) is ``"warnings"``, when there is any.

    Raises:
        MoleculeError: empty, unparsable or unsupported input (message for the user).
        ModelUnavailableError: no target model / explainer can be loaded.
        ValueError: bad K or method.
    """
    method = check_method(method)
    if k is not None:
        check_k(k)  # a bad K is refused before the model loads
    mol = smiles_to_instance(smiles, salts=salts)
    k = molecule_k(k, mol.instance.num_pairs)
    wb = molecule_model(device, target=target, model=model)
    result = explain_molecules([mol], [method], device=device, progress=progress, model=wb)[0]
    out = result.to_json(method, k)
    out = {"smiles": out["smiles"], "target": wb.target_name, **out}
    if model is not None:
        out["model"] = wb.name
    if mol.warnings:
        out["warnings"] = list(mol.warnings)
    out["explanation"]["labels"] = bond_labels(mol.mol, out["explanation"]["bonds"])[0]
    if read and not wb.regression:  # the reading speaks of classes; a regressor has none
        from gem_core.service.reading import read_explanation

        reading = read_explanation(
            wb,
            mol.instance,
            method,
            result.scores[method],
            k,
            wb.spec.class_names,
            mol=mol.mol,
            edge="bond",
        )
        out["reading"] = {"text": reading.text, "facts": reading.facts}
        out["toxicophores"] = reading.facts["toxicophores"]
    from gem_core.service.neighbours import nearest_training

    near = nearest_training(wb, mol.mol)  # None where the training data is not here
    if near is not None:
        out["nearest_training"] = near.to_json()
    return out


def explain_smiles_edited(
    smiles: str,
    remove_bonds: Sequence[Sequence[int]],
    k: Optional[int] = None,
    method: str = "gem",
    device: str = "auto",
    target: str = MOLECULE_TARGET,
    salts: str = "refuse",
) -> dict[str, Any]:
    """:func:`explain_smiles` on the molecule without ``remove_bonds`` (atom-index pairs in the
    ``explain`` numbering), beside the original: the CLI's ``explain --remove-bonds``.

    Returns the :func:`explain_smiles` shape for the edited molecule (bonds keep the original
    numbering) plus ``removed_bonds``, ``detached_atoms`` (cut off the molecule by the edit,
    still in its graph), ``original_prediction``, ``p_mutagen`` (original / edited) and
    ``loss`` (against the prediction on the whole molecule: original, edited, delta — for one
    bond the distillation's Δ of that bond).

    Raises:
        MoleculeError: bad SMILES. EditError (ValueError): a pair that is not a bond, or an edit
            that leaves no bond.
    """
    from gem_core.service.whatif import Edit, EditError, evaluate_edits

    method = check_method(method)
    if k is not None:
        check_k(k)
    mol = smiles_to_instance(smiles, salts=salts)
    k = molecule_k(k, mol.instance.num_pairs)  # the original molecule's K, as the page's
    model = molecule_model(device, target=target)
    edit = Edit.of(remove_bonds)
    original, (edited,) = evaluate_edits(model, mol.instance, [edit], [method], edge="bond")
    if edited.error:
        raise EditError(edited.error)
    mutagen = CLASS_NAMES.index("mutagen")
    kept = edited.kept
    pairs = mol.instance.pairs[:, kept]
    bonds, scores = ranked_bonds(pairs, edited.scores[method][kept], k)
    return {
        "smiles": mol.input_smiles,
        "target": model.target_name,
        "removed_bonds": [list(p) for p in edit.remove_pairs],
        "prediction": {
            "label": CLASS_NAMES[edited.label],
            "probability": edited.probabilities[edited.label],
        },
        "original_prediction": {
            "label": CLASS_NAMES[original.label],
            "probability": original.probabilities[original.label],
        },
        "p_mutagen": {
            "original": original.probabilities[mutagen],
            "edited": edited.probabilities[mutagen],
        },
        "loss": {"original": original.loss, "edited": edited.loss, "delta": edited.delta_loss},
        "explanation": {"bonds": bonds, "scores": scores, "labels": bond_labels(mol.mol, bonds)[0]},
        # atoms the edit cuts off the molecule: still in the graph, still read by the model
        "detached_atoms": [int(a) for a in edited.detached],
    }


__all__ += ["MoleculeError", "explain_smiles_edited"]
