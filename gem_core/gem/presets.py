"""Named settings of Gem: the paper's, the defaults, the PyG adapter's and the shipped datasets'.

A preset is :class:`~gem_core.gem.settings.GemSettings` built from another preset and a short
diff of setting paths. The dataset and target rows of :mod:`gem_core.data.config` name one
(``gem={"preset": "nci1"}``) plus at most a few paths; :func:`dataset_settings` merges them. Why
each value is what it is lives in the decision records under ``docs/decisions/`` (the question,
the validation table, the choice), not here; a dataset has a preset of its own only where
validation showed the defaults lose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gem_core.data.config import DatasetSpec, target_config
from gem_core.gem.settings import GemSettings, check_paths

#: the molecule rows' graded targets over every K from 1 to 30 (a full ranking of the top 30)
_EVERY_K_TO_30 = tuple(range(1, 31))

_DEFAULT = GemSettings()

PRESETS: dict[str, GemSettings] = {
    # GemSettings' own defaults: graded targets over the K grid, the paper's top-K rule and
    # auto-encoder, one network, no check
    "default": _DEFAULT,
    # the paper's Gem: the normalised distilled weights as targets, σ(z_u · z_v) (no bias)
    "paper": _DEFAULT.with_overrides({"teacher.kind": "weights", "network.decoder_bias": False}),
}
# the PyG adapter's defaults for a model it knows nothing of (decisions/007)
PRESETS["node"] = _DEFAULT.with_overrides(
    {
        "teacher.kind": "mix",
        "teacher.topk_policy": "nosplit",
        "teacher.protocol": "drop_isolated",
        "teacher.connected": True,
        "training.lr": 0.003,
        "check.protocol": "taught",
    }
)
PRESETS["graph"] = _DEFAULT.with_overrides(
    {
        "teacher.topk_policy": "sufficient",
        "teacher.protocol": "drop_isolated",
        "teacher.necessity_weight": 1.0,
        "teacher.connected": False,
        "inputs.condition_on_prediction": True,
        "network.decoder": "mlp",
        "check.width": 8,
        "check.protocol": "taught",
    }
)
# BA-shapes (decisions/002)
PRESETS["ba_shapes"] = _DEFAULT.with_overrides(
    {
        "teacher.kind": "graded+add",
        "teacher.necessity_lead": 3,
        "inputs.degree_features": True,
        "network.decoder": "mlp",
        "network.ensemble": 3,
        "training.lr": 0.003,
        "training.max_epochs": 1000,
        "training.patience": 100,
        "check.rule": "repair",
        "check.lead": 4,
    }
)
# Tree-cycles (decisions/003)
PRESETS["tree_cycles"] = _DEFAULT.with_overrides(
    {
        "teacher.kind": "mix",
        "teacher.necessity_lead": 3,
        "network.decoder": "mlp",
        "training.lr": 0.003,
        "training.max_epochs": 600,
        "check.rule": "repair",
    }
)
# Mutagenicity, the paper's target (decisions/004)
PRESETS["mutagenicity"] = _DEFAULT.with_overrides(
    {
        "teacher.topk_policy": "refine",
        "teacher.label_source": "predicted",
        "teacher.necessity_lead": 5,
        "inputs.condition_on_prediction": True,
        "network.ensemble": 5,
        "training.fidelity": 20.0,
        "check.rule": "climb",
        "check.width": 8,
        "check.backward": "grid",
        "check.lead": 5,
    }
)
# Mutagenicity, the bond-aware target (decisions/005): the paper target's, then bond types as
# this target reads them, graded targets over K = 1-30 and its own check
PRESETS["mutagenicity_strong"] = PRESETS["mutagenicity"].with_overrides(
    {
        "teacher.ks": _EVERY_K_TO_30,
        "teacher.necessity_lead": 0,
        "inputs.wl_edge_labels": True,
        "inputs.edge_features": True,
        "network.decoder": "mlp",
        "check.rule": "search",
        "check.late": "sustain",
        "check.lead": 0,
    }
)
# NCI1 (decisions/006)
PRESETS["nci1"] = _DEFAULT.with_overrides(
    {
        "teacher.ks": _EVERY_K_TO_30,
        "teacher.label_source": "predicted",
        "teacher.protocol": "drop_isolated",
        "teacher.necessity_lead": 5,
        "inputs.condition_on_prediction": True,
        "network.ensemble": 5,
        "check.rule": "sustain",
        "check.width": 5,
        "check.late": "climb",
        "check.backward": "late",
        "check.lead": 3,
    }
)

#: how many setting paths a dataset or target row may change beyond naming a preset
MAX_ROW_DIFF = 5


def preset(name: str) -> GemSettings:
    """The preset ``name`` (case-insensitive, ``-`` accepted for ``_``); a one-line error
    naming the presets for others."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in PRESETS:
        raise ValueError(f"unknown Gem preset {name!r} (known: {', '.join(PRESETS)})")
    return PRESETS[key]


def row_settings(
    rows: Sequence[Mapping[str, Any]], where: str, base: str = "default"
) -> GemSettings:
    """The settings of ``rows`` applied in order: a row that names a ``preset`` starts over from
    it, its other keys are setting paths (at most :data:`MAX_ROW_DIFF` per row)."""
    settings = preset(base)
    for row in rows:
        diff = {k: v for k, v in row.items() if k != "preset"}
        check_paths(diff, where)
        if len(diff) > MAX_ROW_DIFF:
            raise ValueError(
                f"{where}: a row changes at most {MAX_ROW_DIFF} settings beyond its preset, "
                f"this one {len(diff)}: make it a preset with a decision record"
            )
        if "preset" in row:
            settings = preset(row["preset"])
        settings = settings.with_overrides(diff)
    return settings


def dataset_settings(spec: DatasetSpec, target: str = "paper") -> GemSettings:
    """Gem's settings for the target model ``target`` of ``spec``: the dataset's row, then the
    target's row (which may name a preset of its own); the dataset's ``num_hops`` unless a row
    sets ``inputs.num_hops``."""
    cfg = target_config(spec, target)
    rows = [dict(spec.gem), dict(cfg.gem)]
    settings = row_settings(rows, f"{spec.title}, target {str(target).strip().lower()!r}")
    if any("inputs.num_hops" in row for row in rows):
        return settings
    return settings.with_overrides({"inputs.num_hops": spec.num_hops})


__all__ = ["MAX_ROW_DIFF", "PRESETS", "dataset_settings", "preset", "row_settings"]
