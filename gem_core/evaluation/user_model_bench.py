"""A model trained on a user's table, benchmarked on its test split: how faithful each method's
explanations are (the field's sufficiency and necessity, ``drop_isolated``), how fast, and
whether they find the Kazius alerts (the same figures the shipped targets have in
``docs/results.md``; ``models evaluate``, the Your data page)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from gem_core.chemistry.toxicophores import toxicophore_benchmark
from gem_core.evaluation.faithfulness import necessity_at_k, sufficiency_at_k
from gem_core.runtime.progress import ProgressFn, report
from gem_core.service.user_models import user_model, user_workbench

__all__ = ["BENCH_METHODS", "SUFFICIENCY_KS", "NECESSITY_KS", "evaluate_user_model"]

#: the methods a user model is benchmarked with by default: Gem, the search on top of it, the
#: gradient baseline and random scores (each batched over the test split)
BENCH_METHODS = ("gem", "gem_check", "integrated_gradients", "random")
#: the field's K ranges (GNNX-Bench): sufficiency over k = 5..25, necessity over k = 2..10
SUFFICIENCY_KS = tuple(range(5, 26))
NECESSITY_KS = tuple(range(2, 11))


def evaluate_user_model(
    name: str,
    methods: Sequence[str] = BENCH_METHODS,
    device: str = "auto",
    alert_class: Optional[str] = None,
    owner: Optional[str] = None,
    progress: Optional[ProgressFn] = None,
    split: str = "test",
) -> dict[str, Any]:
    """How faithful and how fast each method's explanations of user model ``name`` are on its
    test split: ``{"model", "molecules", "protocol", "methods": {m: {"ms_per_molecule",
    "sufficiency", "necessity", "toxicophore_auc"}}}`` (sufficiency: mean over
    :data:`SUFFICIENCY_KS`, necessity over :data:`NECESSITY_KS`, under ``drop_isolated``;
    the toxicophore AUC of the Kazius alerts' bonds on the test molecules predicted
    ``alert_class``, None without one). ``split="val"``: the same on the validation split, to
    choose settings or methods on (the test split only reports). A model of a number
    (regression) keeps its prediction when the value stays within 0.1 x the spread of its values
    (:func:`gem_core.evaluation.faithfulness.sufficiency_at_k`); it has no alert class."""
    wb = user_workbench(user_model(name, owner).name, device)
    classes = list(wb.spec.class_names)
    if alert_class is not None and (wb.regression or alert_class not in classes):
        kinds = "predicts a number, not classes" if wb.regression else f"has {', '.join(classes)}"
        raise ValueError(f"{alert_class!r} is not a class of {name} (it {kinds}).")
    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    methods = [wb.check_applicable(m) for m in methods]  # refused before any is computed
    molecules = wb.instances(split)
    predicted = wb.predicted(molecules)
    rows: dict[str, dict[str, Any]] = {}
    for i, method in enumerate(methods):
        report(progress, i / len(methods), f"explaining with {method}")
        explained = wb.explain(method, molecules, predicted=predicted)
        suff = sufficiency_at_k(
            wb.black_box, explained, SUFFICIENCY_KS, "drop_isolated", predicted=predicted
        )
        nec = necessity_at_k(
            wb.black_box, explained, NECESSITY_KS, "drop_isolated", predicted=predicted
        )
        row: dict[str, Any] = {
            "ms_per_molecule": explained.ms_per_instance,
            "sufficiency": sum(suff.at_k.values()) / len(suff.at_k),
            "necessity": sum(nec.at_k.values()) / len(nec.at_k),
            "toxicophore_auc": None,
        }
        if alert_class is not None:
            tox = toxicophore_benchmark(
                molecules,
                {method: list(explained)},
                predicted,
                mutagen_label=classes.index(alert_class),
                atom_symbols=wb.dataset.atom_symbols or (),
            )
            row["toxicophore_auc"] = tox["methods"][method]["auc"]
        rows[method] = row
    report(progress, 1.0, "done")
    return {
        "model": wb.name,
        "split": split,
        "molecules": len(molecules),
        "protocol": "drop_isolated",
        "methods": rows,
    }
