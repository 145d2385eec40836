"""Gem itself: the Granger-causal distillation (``distill/``), what the auto-encoder learns from it
(``training_targets``), the hop / Weisfeiler-Lehman node labels (``labeling``) and the graph
auto-encoder (``autoencoder``).

May import ``runtime``, ``data``, ``chemistry`` and ``models``; knows nothing of the explainer
registry, the app or the CLI.
"""
