"""Gem itself: its settings (``settings``: :class:`GemSettings`), the Granger-causal distillation
(``distill/``), what the auto-encoder learns from it (``training_targets``), the hop /
Weisfeiler-Lehman node labels (``labeling``), the graph auto-encoder (``autoencoder``: the
estimator; ``network``, ``inputs``, ``training``: its network, what it reads, how it learns) and
the one fit recipe every front-end uses (``pipeline``: distil → training targets → fit).

May import ``runtime``, ``data``, ``chemistry`` and ``models``; knows nothing of the explainer
registry, the app or the CLI.
"""
