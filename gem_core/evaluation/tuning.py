"""Validation sweeps of Gem's settings: how each design choice of ``config.py`` was (and can be) made.

A *variant* is a set of overrides of a dataset's Gem settings, named by their paths — the
auto-encoder (``network.decoder=mlp``, ``network.hidden=64/64/32`` …), what it learns from
(``teacher.kind=graded``, ``teacher.topk_policy=refine``, ``teacher.label_source=predicted``) or the
explain-time check (``check.rule=repair``) — and ``train_on=correct``. Every
variant is fitted on the training split with the same seeds and scored by explanation accuracy at
each K on the **validation** split, beside the dataset's current settings measured in the same run.
The test split is never read, so the choice made from a sweep does not leak into the reported tables.

The distillations of the train and val splits come from the cache and each distinct training
target is computed once, so a sweep costs one Gem fit per (variant, seed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from gem_core.data.config import DatasetSpec
from gem_core.gem.settings import SETTING_PATHS, GemSettings, setting_kind
from gem_core.gem.training_targets import format_ks, parse_ks
from gem_core.runtime.progress import ProgressFn, report, scaled

# Gem hyperparameters a variant may override, with the parser of a command-line value
_BOOL_WORDS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def _parse_bool(text: str) -> bool:
    try:
        return _BOOL_WORDS[text.strip().lower()]
    except KeyError:
        raise ValueError(f"expected true or false, got {text!r}") from None


def _parse_hidden(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(w) for w in text.replace(",", "/").split("/"))
    except ValueError:
        raise ValueError(f"hidden widths look like 32/32/16, got {text!r}") from None


def _parser(path: str) -> Callable[[str], Any]:
    """How a command-line value of the setting at ``path`` is read (the settings validate it)."""
    kind = setting_kind(path)
    if kind in ("bool", "optional_bool"):
        return _parse_bool
    if kind in ("positive_int", "non_negative_int", "int"):
        return int
    if kind in ("positive", "non_negative", "fraction"):
        return float
    if kind == "widths":
        return _parse_hidden
    if kind == "budgets":
        return parse_ks
    return str  # choices and the check's rules: the settings turn names into values


#: necessity is averaged over k = 1..5 (issue 26's yardstick on this project's own targets)
NECESSITY_K = (1, 2, 3, 4, 5)
TRAIN_ON = ("all", "correct")  # "correct": only instances the target classifies correctly
#: the variant key that is no setting: which training instances Gem is fitted on
TRAIN_ON_KEY = "train_on"


@dataclass(frozen=True)
class Variant:
    """A named set of overrides of a dataset's Gem settings (empty: the current settings)."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def refits(self) -> bool:
        """Whether the variant changes the fitted Gem (anything but the explain-time check)."""
        return any(not k.startswith("check.") for k in self.overrides if k != TRAIN_ON_KEY)

    def settings(self, base: GemSettings) -> GemSettings:
        """``base`` (the dataset's current Gem settings) with this variant's overrides."""
        return base.with_overrides({k: v for k, v in self.overrides.items() if k != TRAIN_ON_KEY})

    @property
    def train_on(self) -> str:
        """Which training instances Gem is fitted on: ``all`` or ``correct``."""
        return self.overrides.get(TRAIN_ON_KEY, "all")


CURRENT = "current"


def parse_variant(text: str) -> Variant:
    """``NAME:path=value[,path=value…]`` (or just ``NAME`` with no overrides) as a
    :class:`Variant`; a path names a setting (``network.decoder=mlp``, ``check.rule=repair``,
    :data:`gem_core.gem.settings.SETTING_PATHS`), or ``train_on=all|correct``."""
    name, _, body = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"variant {text!r} needs a name: NAME:key=value,…")
    overrides: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in body.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"variant {name!r}: expected key=value, got {item!r}")
        if key != TRAIN_ON_KEY and key not in SETTING_PATHS:
            known = ", ".join((*SETTING_PATHS, TRAIN_ON_KEY))
            raise ValueError(f"variant {name!r}: unknown setting {key!r} (known: {known})")
        try:
            overrides[key] = str(value.strip()) if key == TRAIN_ON_KEY else _parser(key)(value)
        except ValueError as exc:
            raise ValueError(f"variant {name!r}, {key}: {exc}") from None
    return Variant(name, overrides)


def check_variants(variants: Sequence[Variant], base: GemSettings) -> list[Variant]:
    """The variants with the current settings (``base``) first; clear errors for bad names or
    values."""
    names = [v.name for v in variants]
    if CURRENT in names:
        raise ValueError(
            f"{CURRENT!r} is the name of the dataset's own settings; pick another name"
        )
    if len(set(names)) != len(names):
        raise ValueError("variant names must be unique")
    out = [Variant(CURRENT)] + list(variants)
    for v in out:
        try:
            v.settings(base)
        except ValueError as exc:
            raise ValueError(f"variant {v.name!r}: {exc}") from None
        if v.train_on not in TRAIN_ON:
            raise ValueError(f"variant {v.name!r}: train_on must be one of {', '.join(TRAIN_ON)}")
    return out


def correctly_classified(black_box, instances: Sequence) -> torch.Tensor:
    """Boolean mask: does the target predict each instance's true label on its full graph?"""
    from gem_core.models.predict import predict_proba

    y = torch.tensor([int(i.y) for i in instances])
    return predict_proba(black_box, instances).argmax(-1) == y


def validation_sweep(
    bench,
    variants: Sequence[Variant],
    seeds: Sequence[int] = (0, 1, 2),
    include_current: bool = True,
    progress: Optional[ProgressFn] = None,
) -> dict[str, Any]:
    """Fit Gem once per (variant, seed) and measure its explanation accuracy on the validation split.

    Args:
        bench: the dataset's :class:`~gem_core.service.session.Workbench` (target, splits, device).
        variants: the variants to compare; the dataset's current settings come first, under the
            name ``"current"`` (unless ``include_current`` is False).
        seeds: Gem seeds (initialisation, shuffling, noise); every variant uses the same ones.
        include_current: measure the current settings too (the reference of every comparison).
        progress: optional ``progress(fraction, message)`` callback.

    Returns:
        ``{"dataset", "split": "val", "k_grid", "seeds", "variants": {name: {"overrides",
        "accuracy_at_k": {"<K>": mean over seeds}, "mean": …, "std" (of the seed means), "per_seed":
        [{"seed", "accuracy_at_k", "best_epoch", "fit_seconds"}], "stability" (with two seeds or
        more: ``{"k", "value"}``, the mean Jaccard of the seeds' top-K edges at the smallest K)}}}``.
    """
    from gem_core.evaluation.faithfulness import stability
    from gem_core.evaluation.metrics import evaluate_scores
    from gem_core.gem.distill import distill_dataset
    from gem_core.gem.pipeline import GemPipeline
    from gem_core.models.predict import predict_proba

    spec: DatasetSpec = bench.spec
    current: GemSettings = bench.gem_settings
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("give at least one seed")
    variants = check_variants(variants, current)
    if not include_current:
        variants = variants[1:]
    if not variants:
        raise ValueError("nothing to compare: give at least one variant")
    report(progress, 0.0, "target model")
    target, bb = bench.target(), bench.black_box
    train, val = bench.instances("train"), bench.instances("val")

    distillations: dict[tuple[str, str], Any] = {}
    targets: dict[Any, tuple[list, list]] = {}  # teacher settings -> train / val targets
    correct: dict[str, torch.Tensor] = {}

    def training_data(v: Variant, pipeline: GemPipeline):
        s = pipeline.settings
        label_source = s.teacher.label_source.value
        key = s.teacher
        if key not in targets:
            made = []
            for split, insts in (("train", train), ("val", val)):
                if (split, label_source) not in distillations:
                    distillations[(split, label_source)] = distill_dataset(
                        bench.dataset, target, split, label_source=label_source, device=bench.device
                    )
                made.append(pipeline.targets(distillations[(split, label_source)], insts))
            targets[key] = (made[0], made[1])
        tr_w, va_w = targets[key]
        if v.train_on == "all":
            return train, tr_w, val, va_w
        # "correct": the authors' code fits the explainer on correctly classified instances only
        for split, insts in (("train", train), ("val", val)):
            if split not in correct:
                correct[split] = correctly_classified(bb, insts)
        pick = lambda xs, m: [x for x, keep in zip(xs, m.tolist()) if keep]  # noqa: E731
        return (
            pick(train, correct["train"]),
            pick(tr_w, correct["train"]),
            pick(val, correct["val"]),
            pick(va_w, correct["val"]),
        )

    out: dict[str, Any] = {
        "dataset": spec.name,
        "split": "val",
        "k_grid": list(spec.k_grid),
        "seeds": seeds,
        "val_instances": len(val),
        "variants": {},
    }
    atoms = bench.dataset.atom_symbols
    val_predictions = None
    if atoms is not None:
        from gem_core.chemistry.toxicophores import toxicophore_benchmark

        val_predictions = predict_proba(bb, val).argmax(-1)
    runs = len(variants) * len(seeds)
    done = 0
    for v in variants:
        per_seed, seed_scores = [], []
        for seed in seeds:
            lo, hi = done / runs, (done + 1) / runs
            report(progress, lo, f"{v.name}, seed {seed}: training targets")
            # the recipe of the registry's Gem, with this variant's settings and seed (the
            # distillations and training targets cached across variants and seeds)
            pipeline = GemPipeline(
                v.settings(current).with_overrides({"seed": seed}),
                spec.k_grid,
                bb,
                spec.num_classes,
                device=bench.device,
            )
            tr, tr_w, va, va_w = training_data(v, pipeline)
            start = time.perf_counter()
            gem = pipeline.fit_autoencoder(tr, tr_w, va, va_w, progress=scaled(progress, lo, hi))
            fit_seconds = time.perf_counter() - start
            scores = pipeline.explain(gem, val)
            seed_scores.append(scores)
            measured = evaluate_scores(bb, val, scores, spec.k_grid, fidelity=False)
            acc = {str(k): v for k, v in measured.accuracy_at_k.items()}
            agree = {str(k): v for k, v in (measured.agreement_at_k or {}).items()}
            row = {
                "seed": seed,
                "accuracy_at_k": acc,
                "mean": sum(acc.values()) / len(acc),
                "agreement_at_k": agree,
                "agreement_mean": sum(agree.values()) / len(agree),
                "best_epoch": int(gem.history_["best_epoch"]),
                "fit_seconds": fit_seconds,
            }
            row["faithfulness"] = _faithfulness(bb, val, scores, spec.k_grid)
            if atoms is not None:  # molecules: does the explanation find the toxicophores?
                tox = toxicophore_benchmark(
                    val, {"gem": scores}, val_predictions, atom_symbols=atoms
                )["methods"]["gem"]
                row["toxicophore_auc"], row["toxicophore_recall_at_8"] = (
                    tox["auc"],
                    tox["recall_at_8"],
                )
            per_seed.append(row)
            done += 1
            report(
                progress,
                done / runs,
                f"{v.name}, seed {seed}: val accuracy {per_seed[-1]['mean']:.1%}",
            )
        out["variants"][v.name] = _summary(v, per_seed, spec.k_grid)
        if len(seeds) > 1:  # the variant refitted with each seed: do its top-K edges agree?
            k = min(spec.k_grid)
            out["variants"][v.name]["stability"] = {"k": k, "value": stability(seed_scores, k)}
    return out


def _faithfulness(
    black_box, instances: Sequence, scores: Sequence, k_grid: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Per protocol: mean sufficiency over the paper's K grid, its mean per predicted class,
    and mean necessity over k = 1..5 (:mod:`gem_core.evaluation.faithfulness`)."""
    from gem_core.data.protocol import PROTOCOLS
    from gem_core.evaluation.faithfulness import necessity_at_k, sufficiency_at_k
    from gem_core.models.predict import predict_proba

    predicted = predict_proba(black_box, list(instances)).argmax(-1)
    pair = (list(instances), list(scores))
    out = {}
    for protocol in PROTOCOLS:
        suf = sufficiency_at_k(black_box, pair, k_grid, protocol, predicted=predicted)
        nec = necessity_at_k(black_box, pair, NECESSITY_K, protocol, predicted=predicted)
        row = {"sufficiency": _avg(suf.at_k), "necessity": _avg(nec.at_k)}
        row.update({f"sufficiency_class_{c}": _avg(v) for c, v in suf.per_class.items()})
        out[protocol] = row
    return out


def _avg(d: Mapping[Any, float]) -> float:
    return float(sum(d.values()) / len(d)) if d else float("nan")


def _summary(v: Variant, per_seed: list[dict[str, Any]], k_grid: Sequence[int]) -> dict[str, Any]:
    """Means over seeds (and the spread of the seed means: how far apart two runs land)."""

    def mean_std(key: str) -> tuple[float, float]:
        values = torch.tensor([r[key] for r in per_seed], dtype=torch.float64)
        return float(values.mean()), float(values.std()) if len(per_seed) > 1 else 0.0

    acc_mean, acc_std = mean_std("mean")
    agree_mean, agree_std = mean_std("agreement_mean")
    out: dict[str, Any] = {
        "overrides": {k: list(x) if isinstance(x, tuple) else x for k, x in v.overrides.items()},
        "accuracy_at_k": {
            str(k): sum(r["accuracy_at_k"][str(k)] for r in per_seed) / len(per_seed)
            for k in k_grid
        },
        "mean": acc_mean,
        "std": acc_std,
        "agreement_at_k": {
            str(k): sum(r["agreement_at_k"][str(k)] for r in per_seed) / len(per_seed)
            for k in k_grid
        },
        "agreement_mean": agree_mean,
        "agreement_std": agree_std,
        "per_seed": per_seed,
    }
    out["faithfulness"] = {
        protocol: {
            key: sum(r["faithfulness"][protocol][key] for r in per_seed) / len(per_seed)
            for key in per_seed[0]["faithfulness"][protocol]
        }
        for protocol in per_seed[0]["faithfulness"]
    }
    if "toxicophore_auc" in per_seed[0]:
        out["toxicophore_auc"] = mean_std("toxicophore_auc")[0]
        out["toxicophore_recall_at_8"] = mean_std("toxicophore_recall_at_8")[0]
    return out


def _format_value(key: str, value: Any) -> str:
    """An override as typed on the command line (``teacher.ks`` ranges as ``1-30``)."""
    if key == "teacher.ks":
        return format_ks(value)
    if isinstance(value, (list, tuple)):
        return "/".join(map(str, value))
    return str(value)


def format_sweep(result: dict[str, Any]) -> str:
    """The sweep as tables: one row per variant, validation accuracy and agreement (%) per K,
    mean ± std over seeds, the difference to the current settings, and (molecules) the
    toxicophore benchmark."""
    ks = result["k_grid"]
    variants = result["variants"]
    lines = [
        f"{result['dataset']}: Gem on {result['val_instances']} validation instances, mean over "
        f"seeds {', '.join(map(str, result['seeds']))}"
    ]
    for title, key, mean, std in (
        ("explanation accuracy (%)", "accuracy_at_k", "mean", "std"),
        (
            "agreement with the target's prediction (%)",
            "agreement_at_k",
            "agreement_mean",
            "agreement_std",
        ),
    ):
        head = (
            f"{'variant':<22}"
            + "".join(f"{'K=' + str(k):>8}" for k in ks)
            + f"{'mean':>8}{'± std':>8}{'vs current':>12}"
        )
        lines += ["", title, head, "-" * len(head)]
        ref = variants.get(CURRENT, {}).get(mean)
        for name, r in variants.items():
            cells = "".join(f"{100 * r[key][str(k)]:>8.1f}" for k in ks)
            delta = "" if name == CURRENT or ref is None else f"{100 * (r[mean] - ref):>+12.1f}"
            lines.append(f"{name:<22}{cells}{100 * r[mean]:>8.1f}{100 * r[std]:>8.1f}{delta}")
    for protocol in next(iter(variants.values()))["faithfulness"]:
        keys = list(next(iter(variants.values()))["faithfulness"][protocol])
        lines += [
            "",
            f"faithfulness ({protocol}): mean sufficiency over the K grid (overall, "
            f"per predicted class), mean necessity over k = 1..5",
            f"{'variant':<22}"
            + "".join(f"{k.replace('sufficiency_class_', 'class '):>13}" for k in keys),
        ]
        for name, r in variants.items():
            lines.append(
                f"{name:<22}" + "".join(f"{r['faithfulness'][protocol][k]:>13.3f}" for k in keys)
            )
    if any("stability" in r for r in variants.values()):
        k = next(r["stability"]["k"] for r in variants.values() if "stability" in r)
        lines += [
            "",
            f"stability across the seeds: mean Jaccard of the top-{k} edges",
            f"{'variant':<22}{'stability':>10}",
        ]
        for name, r in variants.items():
            lines.append(f"{name:<22}{r['stability']['value']:>10.3f}")
    if any("toxicophore_auc" in r for r in variants.values()):
        lines += [
            "",
            "toxicophores of the validation molecules the target calls mutagens",
            f"{'variant':<22}{'AUC':>8}{'recall@8':>10}",
        ]
        for name, r in variants.items():
            lines.append(
                f"{name:<22}{r['toxicophore_auc']:>8.3f}{r['toxicophore_recall_at_8']:>10.3f}"
            )
    lines.append("")
    for name, r in variants.items():
        if r["overrides"]:
            settings = ", ".join(f"{k}={_format_value(k, v)}" for k, v in r["overrides"].items())
            lines.append(f"  {name}: {settings}")
    return "\n".join(lines)
