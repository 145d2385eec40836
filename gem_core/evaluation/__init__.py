"""Evaluation: the metrics of edge explanations (``metrics``: accuracy, agreement, log-odds,
fidelity at K), the field's faithfulness yardstick (``faithfulness``: GNNX-Bench's sufficiency /
necessity at K and stability across seeds), the paper's tables measured side by side
(``reproduce``), validation sweeps of Gem's settings (``tuning``) and the paper's reported numbers
(``paper``).

May import every layer below it: ``runtime`` … ``explainers``, ``pyg`` and ``service``.
"""
