"""Services the app and the CLI talk to: the ``Workbench`` session (a dataset, a target and the
registry's explainers, held and reloaded), what-if edits, the plain-language reading of an
explanation, the Molecule flow (predict and explain SMILES) and library screening.

May import ``runtime``, ``data``, ``chemistry``, ``models``, ``gem``, ``explainers`` and ``pyg``.
"""
