"""A scaffold split: molecules grouped by Bemis-Murcko scaffold, each group in one split.

A random split puts close analogues of a test molecule in training, which flatters a model; a
scaffold split asks it to predict chemotypes it has not seen, which is what a chemist screening a
new series needs to know. The balanced variant (Chemprop's ``scaffold_balanced``): scaffolds too
large for the test split go to training first, the others in a seeded random order, each
filling train, then validation, then test.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from rdkit import Chem, rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold

from gem_core.data.config import SEED, SPLIT_FRACTIONS
from gem_core.data.datasets import Split

__all__ = ["murcko_scaffold", "scaffold_split", "SPLIT_KINDS"]

#: how a user's table may be split: at random, or by scaffold
SPLIT_KINDS = ("random", "scaffold")


def murcko_scaffold(smiles: str) -> str:
    """The Bemis-Murcko scaffold of ``smiles`` as canonical SMILES (``""`` for an acyclic or
    unparsable molecule: those form one group)."""
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            return ""
        return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold_split(
    smiles: Sequence[str],
    seed: int = SEED,
    fractions: tuple[float, float, float] = SPLIT_FRACTIONS,
) -> Split:
    """Split ``range(len(smiles))`` so that no scaffold is in two splits (sizes as
    :func:`~gem_core.data.datasets.random_split`'s, give or take a scaffold group)."""
    n = len(smiles)
    n_val = int(round(fractions[1] * n))
    n_test = int(round(fractions[2] * n))
    n_train = n - n_val - n_test
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(murcko_scaffold(s), []).append(i)
    big = sorted((g for g in groups.values() if len(g) > n_test / 2), key=lambda g: (-len(g), g[0]))
    small = [g for g in groups.values() if len(g) <= n_test / 2]
    random.Random(seed).shuffle(small)
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for group in [*big, *small]:
        if len(train) + len(group) <= n_train:
            train += group
        elif len(val) + len(group) <= n_val:
            val += group
        else:
            test += group
    return Split(
        train=torch.tensor(sorted(train), dtype=torch.long),
        val=torch.tensor(sorted(val), dtype=torch.long),
        test=torch.tensor(sorted(test), dtype=torch.long),
    )
