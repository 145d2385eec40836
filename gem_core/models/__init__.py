"""Target models: the GNNs explained (the paper's GCNs, the bond-aware GINE Mutagenicity target),
their training and checkpoints, the black-box view the explainers get (``GNNBlackBox``) and
``predict_proba``, the one forward-pass helper above it.

May import ``runtime``, ``data`` and ``chemistry``.
"""
