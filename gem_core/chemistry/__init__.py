"""Chemistry with RDKit: SMILES ⇄ Mutagenicity-style graphs, molecule drawing (explanation
highlights, toxicophore outlines), fragment SMILES, and the mutagenicity toxicophores of Kazius et
al. (2005) with their bond masks and the toxicophore benchmark of explanation scores.

May import ``runtime`` and ``data``.
"""
