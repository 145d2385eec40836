"""Why the generator lags where it does: its faithfulness on its own training graphs against test.

Issue 50 asks whether Gem alone falls short of the check for want of capacity (it is weak on the
very graphs it was taught on) or of generalisation (strong on training graphs, weak on new ones),
and whether one predicted class carries the gap. :func:`split_diagnosis` answers it for one
graph dataset and target: the registry's methods (Gem alone and random scores by default) on each
split asked for, sufficiency at k = 5..25 and necessity at k = 2..10 under ``drop_isolated`` (the
field's protocol), overall and per class the target predicts on the whole graph. Only outputs of
the target are read, as the reported tables do; the splits are the dataset's own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from gem_core.runtime.progress import ProgressFn, report

if TYPE_CHECKING:
    from gem_core.evaluation.result_schema import SplitsTarget

#: the fine k of the field's means (as ``reproduce`` and the zoo report them)
SUFFICIENCY_KS = (5, 10, 15, 20, 25)
NECESSITY_KS = (2, 4, 6, 8, 10)
PROTOCOL = "drop_isolated"
DEFAULT_METHODS = ("gem", "random")
DEFAULT_SPLITS = ("train", "test")
#: ``dataset[:target]`` entries measured by default: the graph tasks' reported tables
DEFAULT_TARGETS = ("mutagenicity", "mutagenicity:strong", "nci1")
#: a train − test difference of mean sufficiency below this reads as "train and test agree"
GAP_TOLERANCE = 0.05


def parse_target(entry: str) -> tuple[str, str]:
    """``"mutagenicity:strong"`` -> ``("mutagenicity", "strong")``; a bare dataset names its
    default target. Raises ``ValueError`` for an unknown dataset, target or a node task."""
    from gem_core.data.config import DATASETS, DEFAULT_TARGET, target_names

    dataset, _, target = entry.strip().partition(":")
    target = target or DEFAULT_TARGET
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {', '.join(DATASETS)}")
    if DATASETS[dataset].task != "graph":
        raise ValueError(f"{dataset} is a node task: its explanations are judged at K = 5-10")
    if target not in target_names(DATASETS[dataset]):
        known = ", ".join(target_names(DATASETS[dataset]))
        raise ValueError(f"{dataset} has no target {target!r}; choose from {known}")
    return dataset, target


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def split_diagnosis(
    dataset: str,
    target: str,
    splits: Sequence[str] = DEFAULT_SPLITS,
    methods: Sequence[str] = DEFAULT_METHODS,
    limit: Optional[int] = None,
    device: str = "cpu",
    progress: Optional[ProgressFn] = None,
) -> dict[str, Any]:
    """Each method's sufficiency and necessity curves on each split, overall and per class.

    Args:
        dataset, target: a graph dataset and one of its targets (:func:`parse_target`).
        splits: the dataset's splits to measure (``train``, ``val``, ``test``).
        methods: registry methods; Gem is fitted (or loaded) as the reported tables' Gem.
        limit: at most this many instances of each split (evenly spaced; None: all of them).
        device: where the target and Gem run (``auto``, ``cpu``, ``cuda``).
        progress: optional ``progress(fraction, message)`` callback.

    Returns:
        ``{"dataset", "target", "protocol", "splits": [{"split", "instances", "class_counts":
        {class: n}, "methods": [{"method", "sufficiency": {k: v}, "necessity": {k: v},
        "sufficiency_per_class": {class: {k: v}}, "necessity_per_class": {…},
        "mean_sufficiency", "mean_necessity", "seconds"}]}]}``; classes are the target's
        predictions on the whole graphs, as text keys.
    """
    import torch

    from gem_core.evaluation.faithfulness import necessity_at_k, sufficiency_at_k
    from gem_core.service.session import workbench

    bench = workbench(dataset, device=device, target=target)
    out: dict[str, Any] = {
        "dataset": dataset,
        "target": target,
        "protocol": PROTOCOL,
        "splits": [],
    }
    steps = max(1, len(splits) * len(methods))
    done = 0
    for split in splits:
        instances = bench.instances(split)
        if limit is not None and len(instances) > limit:
            step = len(instances) / limit
            instances = [instances[int(i * step)] for i in range(limit)]
        predicted = bench.predicted(instances)
        counts = {str(int(c)): int((predicted == c).sum()) for c in torch.unique(predicted)}
        rows = []
        for method in methods:
            report(progress, done / steps, f"{dataset}:{target} {split}: {method}")
            start = time.perf_counter()
            explanation = bench.explain(method, instances)
            args = (bench.black_box, explanation)
            suff = sufficiency_at_k(*args, SUFFICIENCY_KS, PROTOCOL, predicted=predicted)
            nec = necessity_at_k(*args, NECESSITY_KS, PROTOCOL, predicted=predicted)
            rows.append(
                {
                    "method": method,
                    "sufficiency": {str(k): v for k, v in suff.at_k.items()},
                    "necessity": {str(k): v for k, v in nec.at_k.items()},
                    "sufficiency_per_class": {
                        str(c): {str(k): v for k, v in curve.items()}
                        for c, curve in suff.per_class.items()
                    },
                    "necessity_per_class": {
                        str(c): {str(k): v for k, v in curve.items()}
                        for c, curve in nec.per_class.items()
                    },
                    "mean_sufficiency": _mean(list(suff.at_k.values())),
                    "mean_necessity": _mean(list(nec.at_k.values())),
                    "seconds": time.perf_counter() - start,
                }
            )
            done += 1
        out["splits"].append(
            {"split": split, "instances": len(instances), "class_counts": counts, "methods": rows}
        )
    report(progress, 1.0, "done")
    return out


def class_name(dataset: str, cls: int) -> str:
    """How a predicted class of ``dataset`` reads (``mutagen``), its number when unnamed."""
    from gem_core.data.config import DATASETS

    names = DATASETS[dataset].class_names if dataset in DATASETS else ()
    return names[cls] if 0 <= cls < len(names) else str(cls)


def findings(run: SplitsTarget) -> list[str]:
    """What the curves of one recorded target say, in sentences computed from them: Gem's
    train − test gap (capacity or generalisation) and where Gem is below random, per split, k
    and predicted class."""
    lines = []
    by_split = {s.split: {r.method: r for r in s.methods} for s in run.splits}
    gem_train = by_split.get("train", {}).get("gem")
    gem_test = by_split.get("test", {}).get("gem")
    if gem_train is not None and gem_test is not None:
        gap = gem_train.mean_sufficiency - gem_test.mean_sufficiency
        lines.append(
            f"Gem's mean sufficiency train {gem_train.mean_sufficiency:.3f}, test "
            f"{gem_test.mean_sufficiency:.3f} (gap {gap:+.3f}): "
            + (
                "train and test agree, so this is not a generalisation gap: where Gem falls "
                "short, it falls short on the graphs it was taught on too (what it is taught, "
                "or its capacity)"
                if abs(gap) < GAP_TOLERANCE
                else f"a generalisation gap of {gap:.3f}"
            )
            + "."
        )
    for split, rows in by_split.items():
        gem, rand = rows.get("gem"), rows.get("random")
        if gem is None or rand is None:
            continue
        below = [str(k) for k, v in gem.sufficiency.items() if v < rand.sufficiency.get(k, -1)]
        classes = [
            class_name(run.dataset, c)
            for c, curve in gem.sufficiency_per_class.items()
            if c in rand.sufficiency_per_class
            and _mean(list(curve.values())) < _mean(list(rand.sufficiency_per_class[c].values()))
        ]
        lines.append(
            f"{split}: Gem "
            + (f"below random at k = {', '.join(below)}" if below else "≥ random at every k")
            + (
                f"; below random over the curve for the predicted class {', '.join(classes)}"
                if classes
                else "; ≥ random over the curve for every predicted class"
            )
            + "."
        )
    return lines
