"""Data: the dataset table (``config``: one row per dataset), the loaders (``datasets``), the
``Instance`` every later layer works on (``instances``) and the top-K ranking of edge scores
(``ranking``: which pairs an explanation keeps, ties at the cut, AUC of scores).

May import ``gem_core.runtime`` only.
"""
