"""How like the model's training molecules a molecule is: its nearest training neighbours.

A chemist trusts a prediction (and its explanation) more for a molecule that resembles what the
model learned from. The usual measure is the Tanimoto similarity of Morgan fingerprints (radius 2,
2048 bits, RDKit's ``rdFingerprintGenerator``) to the closest training molecule; below
:data:`DOMAIN_SIMILARITY` a molecule is outside the model's applicability domain. The threshold
was read on the bond-aware Mutagenicity target's validation split (molecules under 0.3: 15 of
434, the target right on 73 % of them against 88 % overall; docs/your-data.md, "How like the
training molecules"); the test split only reports.

Fingerprints are of the heavy-atom graph: graphs of a data set (hydrogens as atoms, partial
sanitisation) and parsed SMILES give the same bits for the same molecule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from rdkit import Chem, DataStructs, rdBase
from rdkit.Chem import rdFingerprintGenerator

from gem_core.chemistry.convert import molecule_smiles

__all__ = ["DOMAIN_SIMILARITY", "Neighbour", "TrainingIndex", "fingerprint"]

#: a molecule whose closest training molecule is less similar than this is outside the domain
DOMAIN_SIMILARITY = 0.3
_RADIUS, _BITS = 2, 2048
_BLOCK = 512  # queries per sparse product (a block's similarities: 512 x training molecules)


def _generator() -> rdFingerprintGenerator.FingerprintGenerator64:
    return rdFingerprintGenerator.GetMorganGenerator(radius=_RADIUS, fpSize=_BITS)


_PERCEIVE = (
    Chem.SanitizeFlags.SANITIZE_SYMMRINGS
    | Chem.SanitizeFlags.SANITIZE_SETAROMATICITY
    | Chem.SanitizeFlags.SANITIZE_SETCONJUGATION
    | Chem.SanitizeFlags.SANITIZE_SETHYBRIDIZATION
)


def fingerprint(mol: Chem.Mol) -> DataStructs.ExplicitBitVect:
    """Morgan fingerprint (radius 2, 2048 bits) of ``mol``'s heavy atoms. Hydrogens that are
    atoms of the graph are folded in and rings and aromaticity perceived first, so a data set's
    graph (explicit hydrogens, partial sanitisation), a parsed SMILES and the Kekulé form the
    model reads (aromatic flags cleared) of one molecule give the same bits."""
    with rdBase.BlockLogs():
        heavy = Chem.RemoveHs(mol, sanitize=False)
        heavy.UpdatePropertyCache(strict=False)
        Chem.SanitizeMol(heavy, _PERCEIVE, catchErrors=True)
    return _generator().GetFingerprint(heavy)


@dataclass(frozen=True)
class Neighbour:
    """A training molecule near the one asked about: its ``similarity`` (Tanimoto, 0-1), its
    ``smiles``, its measured ``label`` (class name, or the value written as text) and its
    position ``index`` in the training split."""

    similarity: float
    smiles: str
    label: str
    index: int


class TrainingIndex:
    """The fingerprints of a model's training molecules (with their SMILES and labels), to find
    a molecule's nearest ones. :meth:`of_molecules` builds it; :meth:`state` /
    :meth:`from_state` keep it in a file, so that it is built once per model."""

    def __init__(
        self,
        fps: Sequence[DataStructs.ExplicitBitVect],
        smiles: Sequence[str],
        labels: Sequence[str],
    ):
        if not len(fps) == len(smiles) == len(labels):
            raise ValueError(f"{len(labels)} labels for {len(fps)} molecules")
        self._fps = list(fps)
        self._smiles = [str(s) for s in smiles]
        self._labels = [str(label) for label in labels]
        self._dense: Optional[tuple[Any, Any]] = None

    @classmethod
    def of_molecules(cls, mols: Sequence[Chem.Mol], labels: Sequence[str]) -> "TrainingIndex":
        """The index of ``mols`` (a model's training molecules) and their measured ``labels``."""
        if len(mols) != len(labels):
            raise ValueError(f"{len(labels)} labels for {len(mols)} molecules")
        return cls([fingerprint(m) for m in mols], [molecule_smiles(m) for m in mols], labels)

    def state(self) -> dict[str, Any]:
        """The index as tensors and strings (``runtime.store.save_torch``)."""
        import numpy as np
        import torch

        bits = np.zeros((len(self._fps), _BITS), dtype=np.uint8)
        for i, fp in enumerate(self._fps):
            bits[i, list(fp.GetOnBits())] = 1
        packed = torch.from_numpy(np.packbits(bits, axis=1))
        return {"bits": packed, "smiles": self._smiles, "labels": self._labels}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "TrainingIndex":
        """The index :meth:`state` wrote."""
        import numpy as np

        bits = np.unpackbits(state["bits"].numpy(), axis=1, count=_BITS)
        fps = []
        for row in bits:
            fp = DataStructs.ExplicitBitVect(_BITS)
            fp.SetBitsFromList(np.flatnonzero(row).tolist())
            fps.append(fp)
        return cls(fps, state["smiles"], state["labels"])

    def __len__(self) -> int:
        return len(self._fps)

    def similarities(self, mol: Chem.Mol) -> list[float]:
        """Tanimoto similarity of ``mol`` to every training molecule, in training order."""
        return list(DataStructs.BulkTanimotoSimilarity(fingerprint(mol), self._fps))

    def closest(self, mol: Chem.Mol) -> float:
        """The similarity of ``mol``'s closest training molecule (0 with no training molecule)."""
        return max(self.similarities(mol), default=0.0)

    def closest_many(self, mols: Sequence[Chem.Mol]) -> list[float]:
        """:meth:`closest` of each of ``mols``, the same numbers, batched (a screen's chunk):
        the bits two fingerprints share are a sparse product of the queries' bits with the
        training molecules' bit matrix, in blocks of :data:`_BLOCK` queries; about a third of
        the time of a Tanimoto loop (RDKit's ``BulkTanimotoSimilarity`` per molecule)."""
        import torch

        if not self._fps:
            return [0.0] * len(mols)
        train, counts = self._matrix()
        out: list[float] = []
        for start in range(0, len(mols), _BLOCK):
            bits = [list(fingerprint(m).GetOnBits()) for m in mols[start : start + _BLOCK]]
            rows = [i for i, b in enumerate(bits) for _ in b]
            cols = [c for b in bits for c in b]
            queries = torch.sparse_coo_tensor(
                torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1),
                torch.ones(len(rows)),
                (len(bits), _BITS),
                check_invariants=True,  # indices made here, in range: checked all the same
            )
            shared = torch.sparse.mm(queries, train).double()  # whole numbers, exact in float32
            own = torch.tensor([len(b) for b in bits], dtype=torch.float64)
            union = (own[:, None] + counts[None, :] - shared).clamp(min=1.0)
            out += (shared / union).max(1).values.tolist()
        return out

    def _matrix(self) -> tuple[Any, Any]:
        """The training fingerprints as a dense ``[bits, molecules]`` 0/1 matrix and their bit
        counts (made once)."""
        import torch

        if self._dense is None:
            train = torch.zeros((_BITS, len(self._fps)), dtype=torch.float32)
            for j, fp in enumerate(self._fps):
                train[list(fp.GetOnBits()), j] = 1.0
            self._dense = (train, train.sum(0).double())
        return self._dense

    def nearest(self, mol: Chem.Mol, n: int = 3) -> list[Neighbour]:
        """The ``n`` most similar training molecules, most similar first (ties: training order)."""
        sims = self.similarities(mol)
        order = sorted(range(len(sims)), key=lambda i: (-sims[i], i))[: max(n, 0)]
        return [Neighbour(float(sims[i]), self._smiles[i], self._labels[i], i) for i in order]
