"""Chemistry with RDKit: SMILES ⇄ Mutagenicity-style graphs, molecule drawing (explanation
highlights, toxicophore outlines), fragment SMILES, and the mutagenicity toxicophores of Kazius et
al. (2005) with their bond masks and the toxicophore benchmark of explanation scores.

Modules: ``smiles`` (SMILES in, Mutagenicity-style graph out: parsing, cleaning, fragments, charge
warnings, ``MoleculeError``, ``MoleculeInstance``, ``smiles_to_instance``, the example SMILES),
``convert`` (graphs and atom pairs back to RDKit: ``instance_to_mol``, bond indices of atom pairs,
``fragment_smiles`` / ``fragment_smarts``, ``without_hydrogens``), ``drawing`` (the highlight and
outline colours, ``molecule_drawer``, ``draw_molecule_svg``) and ``toxicophores`` (the toxicophore
SMARTS, bond masks and benchmark).

May import ``runtime`` and ``data``.
"""
