"""Reproduce the paper's tables for one dataset, every method measured in the same run.

:func:`run_reproduce` runs (or loads from the cache) the target, the distillation, Gem, and the
baselines, evaluates all of them with the same code on the same test instances, and returns the
results JSON (also written to ``assets/results/<dataset>.json``, with its ``schema_version``).
:func:`format_tables` renders them beside the paper's numbers; the shipped files are read through
:func:`gem_core.evaluation.result_file.load_result`.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from gem_core.data.config import DEFAULT_TARGET, get_spec, target_spec
from gem_core.evaluation import paper
from gem_core.evaluation.faithfulness import (
    FINE_K,
    PROTOCOLS,
    necessity_at_k,
    stability,
    sufficiency_at_k,
)
from gem_core.evaluation.result_file import (
    SCHEMA_VERSION,
    MethodRow,
    ResultFile,
    load_result,
)
from gem_core.explainers import REPRODUCE_METHODS, check_method, method_spec, title
from gem_core.runtime.device import deterministic_algorithms, resolve_device
from gem_core.runtime.device_choice import REPRODUCE_WORKLOADS
from gem_core.runtime.progress import ProgressFn, report, scaled
from gem_core.runtime.store import ASSETS_DIR, save_json
from gem_core.service.session import Workbench, workbench

DEFAULT_METHODS = REPRODUCE_METHODS
# Batched methods (registry rows with ``batched``) explain the whole test split in one call of a
# few milliseconds: their first call also pays one-off costs (lazy kernels, allocations; 1.9 ms
# per node against 0.1 warm on BA-shapes), so their time is the median of TIMING_REPEATS warm calls
TIMING_REPEATS = 5
#: the explainer seeds ``stability`` compares (GNNX-Bench: Jaccard of top-k sets across seeds)
STABILITY_SEEDS = (0, 1, 2)


def results_path(dataset: str, target: str = DEFAULT_TARGET) -> Path:
    """``assets/results/<dataset>.json`` (the paper's target) or ``<dataset>-<target>.json``
    (the target row's :meth:`~gem_core.data.config.TargetSpec.stem`)."""
    return ASSETS_DIR / "results" / f"{target_spec(target).stem(get_spec(dataset).name)}.json"


def read_results(dataset: str, target: str = DEFAULT_TARGET) -> ResultFile:
    """The shipped results of ``dataset`` / ``target``, typed and checked.

    Read once per version of the file (its modification time and size key a small cache): the
    app asks on every rerun. Raises ``OSError`` when there is no file and
    :class:`~gem_core.evaluation.result_file.ResultFileError` (one line) when it cannot be read.
    """
    path = results_path(dataset, target)
    stat = path.stat()
    return _read_results(str(path), stat.st_mtime_ns, stat.st_size)


def recorded_results(dataset: str, target: str = DEFAULT_TARGET) -> Optional[ResultFile]:
    """:func:`read_results`, None when the file is missing, malformed or of another schema
    version."""
    try:
        return read_results(dataset, target)
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=16)
def _read_results(path: str, mtime_ns: int, size: int) -> ResultFile:
    return load_result(path)


def _readable(path: Path) -> Optional[ResultFile]:
    """The results at ``path``, None when there are none this engine can read."""
    try:
        return load_result(path)
    except (OSError, ValueError):
        return None


def recorded_fit_seconds(
    dataset: str, method: str, target: str = DEFAULT_TARGET
) -> Optional[float]:
    """How long ``method``'s fit took in the shipped results of ``dataset`` (None: not recorded).

    Lets the app say how long a one-off fit will take from a measurement, not a guess.
    """
    data = recorded_results(dataset, target)
    row = data.methods.get(method) if data is not None else None
    return row.fit_seconds if row is not None and row.fit_seconds > 0 else None


def recorded_target_summary(
    dataset: str, target: str = DEFAULT_TARGET
) -> Optional[dict[str, float]]:
    """What the shipped results say of a target: ``{"test_accuracy": a}`` plus, on molecules,
    ``"toxicophore_auc"`` of Gem's explanations (None when no results file can be read).

    Lets the app compare the targets a user chooses between with measured figures.
    """
    data = recorded_results(dataset, target)
    if data is None or data.target.test_accuracy is None:
        return None
    out = {"test_accuracy": data.target.test_accuracy}
    gem = data.toxicophores.methods.get("gem") if data.toxicophores is not None else None
    if gem is not None and gem.auc is not None:
        out["toxicophore_auc"] = gem.auc
    return out


def _distillation_summary(
    wb: Workbench, instances, progress: Optional[ProgressFn]
) -> dict[str, Any]:
    from gem_core.gem.distill import ACCURACY_TOPK_POLICY, topk_accuracy

    dist = wb.distillation("test", progress)
    tic = time.perf_counter()
    masks = dist.topk_grid(
        wb.spec.k_grid,
        ACCURACY_TOPK_POLICY,
        instances=instances,
        black_box=wb.black_box,
        device=wb.device,
    )
    topk_seconds = time.perf_counter() - tic
    acc = {
        str(k): topk_accuracy(instances, masks[k], wb.black_box, device=wb.device)
        for k in wb.spec.k_grid
    }
    n = max(len(dist), 1)
    return {
        "accuracy_at_k": acc,
        "ms_per_instance": 1000.0 * dist.seconds / n,
        "topk_ms_per_instance": 1000.0 * topk_seconds / n,
        "policy": ACCURACY_TOPK_POLICY,
        "instances": len(dist),
        "split": "test",
        "connected": dist.connected,
    }


def run_reproduce(
    dataset: str,
    device: str = "auto",
    methods: Sequence[str] = DEFAULT_METHODS,
    limit: Optional[int] = None,
    write_assets: bool = True,
    progress: Optional[ProgressFn] = None,
    bench: Optional[Workbench] = None,
    target: str = DEFAULT_TARGET,
    stability: bool = False,
) -> dict[str, Any]:
    """Run the whole pipeline for ``dataset`` and return the results JSON.

    Args:
        dataset: dataset name.
        device: ``auto`` / ``cpu`` / ``cuda``.
        methods: registry names of the methods to evaluate (default: the rows measured by
            ``reproduce``, :data:`gem_core.explainers.REPRODUCE_METHODS`).
        limit: evaluate on the first ``limit`` test instances only (quick runs; not written to
            ``assets/results``).
        write_assets: write ``assets/results/<dataset>.json`` (full runs only: every default
            method, every test instance — a subset would drop the others' results).
        progress: optional ``progress(fraction, message)`` callback.
        bench: the workbench to use (default: the process-wide shared one, so fitted
            explainers are reused by the app and later calls).
        target: which target model to explain (``paper`` or, where the dataset has one,
            ``strong``); the same JSON shape, in ``assets/results/<dataset>-<target>.json``.
        stability: also measure the stability of every method with a seed, refitting it and
            explaining the test split once per seed of :data:`STABILITY_SEEDS` (a few times
            the cost of the run); without it their ``stability`` says it was not measured.

    Every method also gets the field's faithfulness curves (GNNX-Bench, :mod:`.faithfulness`):
    ``sufficiency_at_k`` / ``necessity_at_k`` on the fine K grid of the task, under both
    protocols, overall and per predicted class, and ``stability``.
    """
    methods = [check_method(m) for m in methods]
    # fits, distillations and whole splits explained at once, all on one workbench: ``auto`` is
    # CUDA only where it was measured faster for each of these workloads
    wb = (
        bench
        if bench is not None
        else workbench(dataset, str(resolve_device(device, REPRODUCE_WORKLOADS)), target)
    )
    with deterministic_algorithms(wb.device):  # on CUDA: the same numbers at every run
        return _reproduce(wb, methods, limit, write_assets, progress, stability)


def _reproduce(
    wb: Workbench,
    methods: list[str],
    limit: Optional[int],
    write_assets: bool,
    progress: Optional[ProgressFn],
    measure_stability: bool = False,
) -> dict[str, Any]:
    """The body of :func:`run_reproduce` on a resolved workbench."""
    spec = wb.spec
    start = time.perf_counter()
    report(progress, 0.0, "target model")
    target = wb.target(scaled(progress, 0.0, 0.05))
    test = wb.instances("test")
    if limit is not None:
        test = test[:limit]
    report(progress, 0.05, "distillation of the test split")
    distillation = _distillation_summary(
        wb, test if limit is None else wb.instances("test"), scaled(progress, 0.05, 0.15)
    )
    from gem_core.evaluation.metrics import evaluate_scores

    results: dict[str, Any] = {}
    scores: dict[str, list] = {}
    subsampled: dict[str, tuple[list, list]] = {}
    subsample_of: dict[str, list[int]] = {}  # a subsampled method -> its test indices
    predicted = wb.predict_proba(test).argmax(-1)  # on the whole instances, for the field's curves
    forward_ms = None
    if "gem" in methods and wb.gem_settings.inputs.condition_on_prediction:
        # a part of Gem's time, reported (read from the settings: Gem is fitted in its turn)
        forward_ms = target_forward_ms(wb.black_box, test)
    n = len(methods)
    for i, method in enumerate(methods):
        lo, hi = 0.15 + 0.85 * i / n, 0.15 + 0.85 * (i + 1) / n
        report(progress, lo, f"{title(method)}: fitting")
        exp = wb.explainer(method, scaled(progress, lo, lo + 0.6 * (hi - lo)))
        report(progress, lo + 0.6 * (hi - lo), f"{title(method)}: explaining")
        picked = subsample_indices(len(test), method_spec(method).max_test_instances)
        insts = [test[j] for j in picked]
        explained = wb.explain(method, insts)
        ms = explained.ms_per_instance
        if method_spec(method).batched:
            ms = statistics.median(
                wb.explain(method, insts).ms_per_instance for _ in range(TIMING_REPEATS)
            )
        res = evaluate_scores(
            wb.black_box,
            insts,
            explained.scores,
            spec.k_grid,
            log_odds_k=spec.default_k,
            mutagen_label=spec.mutagen_label,
            ms_per_instance=ms,
            fit_seconds=float(getattr(exp, "fit_seconds_", 0.0)),
        )
        results[method] = res.to_dict()
        if len(insts) < len(test):  # a slow method measured on a seeded subsample (its row says)
            results[method]["test_instances"] = len(insts)
            subsampled[method] = (insts, explained.scores)
            subsample_of[method] = picked
        else:
            scores[method] = explained.scores
        if hasattr(exp, "distill_seconds_"):  # learns from a distillation (Gem): what it cost
            results[method]["distill_seconds"] = float(exp.distill_seconds_)
        if hasattr(exp, "search_summary_"):  # searches per instance (SubgraphX): how far it got
            results[method]["search"] = dict(exp.search_summary_)
        report(progress, lo + 0.9 * (hi - lo), f"{title(method)}: sufficiency and necessity")
        on_test = len(insts) == len(test)
        classes = predicted if on_test else wb.predict_proba(insts).argmax(-1)
        results[method].update(
            field_curves(wb.black_box, insts, explained.scores, spec.task, classes)
        )
        results[method]["stability"] = method_stability(
            wb, method, insts, exp, explained.scores, measure_stability
        )
    m = target.metrics
    out = {
        "schema_version": SCHEMA_VERSION,
        "dataset": spec.name,
        "target": {
            "name": wb.target_name,
            "train_accuracy": m.train_accuracy,
            "val_accuracy": m.val_accuracy,
            "test_accuracy": m.test_accuracy,
            "train_seconds": m.train_seconds,
            "forward_ms_per_instance": forward_ms,  # None: Gem's time holds no target forward
        },
        "distillation": distillation,
        "methods": results,
        "k_grid": list(spec.k_grid),
        "faithfulness_k": list(FINE_K[spec.task]),
        "log_odds_k": spec.default_k,
        "test_instances": len(test),
        "seconds": time.perf_counter() - start,
        "machine": _machine(wb.device),
    }
    if subsample_of and scores:
        report(progress, 0.97, "every method on the subsample")
        out["same_subsample"] = {
            method: same_subsample(wb, test, picked, scores, predicted, method, results[method])
            for method, picked in subsample_of.items()
        }
    if (
        wb.dataset.atom_symbols is not None
        and spec.mutagen_label is not None
        and (scores or subsampled)
    ):
        # molecules with a mutagen class: do the explanations find toxicophores?
        toxicophores = _toxicophores(wb, test, scores)
        out["toxicophores"] = toxicophores
        for method, (insts, sub_scores) in subsampled.items():
            row = _toxicophores(wb, insts, {method: sub_scores})
            toxicophores["methods"][method] = {
                **row["methods"][method],
                "molecules": row["molecules"],
            }
    if write_assets and limit is None and set(DEFAULT_METHODS) <= set(methods):
        path = results_path(spec.name, wb.target_name)
        keep_measured_stability(out, _readable(path))
        load_result(out)  # never write a file its reader refuses
        save_json(out, path)
    report(progress, 1.0, "done")
    return out


def subsample_indices(n: int, limit: Optional[int], seed: int = 0) -> list[int]:
    """Indices of at most ``limit`` of ``n`` test instances: a fixed, seeded subsample in the
    split's order (all of them when ``limit`` is None or not smaller than ``n``)."""
    if limit is None or n <= int(limit):
        return list(range(n))
    keep = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[: int(limit)]
    return sorted(keep.tolist())


#: the figures :func:`same_subsample` restricts to a slow method's subsample
SAME_SUBSAMPLE_KEYS = ("accuracy_at_k", "agreement_at_k", "sufficiency_at_k", "necessity_at_k")


def same_subsample(
    wb: Workbench,
    test: list,
    picked: list[int],
    scores: dict[str, list],
    predicted: Tensor,
    name: str,
    own: dict[str, Any],
) -> dict[str, Any]:
    """Every fully measured method scored on the seeded subsample (test indices ``picked``) of
    the slow method ``name``, beside its own figures ``own``: the side-by-side comparison on the same
    instances (accuracy and agreement at the paper's K, the field's curves under both
    protocols)."""
    from gem_core.evaluation.metrics import evaluate_scores

    spec = wb.spec
    insts = [test[j] for j in picked]
    classes = predicted[torch.tensor(picked, dtype=torch.long)]
    rows: dict[str, Any] = {}
    for method, full in scores.items():
        sub = [full[j] for j in picked]
        res = evaluate_scores(
            wb.black_box, insts, sub, spec.k_grid, log_odds_k=spec.default_k, fidelity=False
        ).to_dict()
        res.update(field_curves(wb.black_box, insts, sub, spec.task, classes))
        rows[method] = {key: res[key] for key in SAME_SUBSAMPLE_KEYS if key in res}
    return {
        "test_instances": len(picked),
        "indices": list(picked),
        "methods": {**rows, name: {key: own[key] for key in SAME_SUBSAMPLE_KEYS if key in own}},
    }


def field_curves(black_box, test, scores, task: str, predicted) -> dict[str, Any]:
    """``sufficiency_at_k`` and ``necessity_at_k`` on the task's fine K grid under every
    protocol, with their per-class forms (predicted class on the whole instance)."""
    out: dict[str, Any] = {}
    metrics = (("sufficiency_at_k", sufficiency_at_k), ("necessity_at_k", necessity_at_k))
    for name, metric in metrics:
        curves = {
            p: metric(black_box, (test, scores), FINE_K[task], p, predicted=predicted).to_dict()
            for p in PROTOCOLS
        }
        out[name] = {p: c["at_k"] for p, c in curves.items()}
        out[f"{name}_per_class"] = {p: c["per_class"] for p, c in curves.items()}
    return out


def _seed_of(explainer) -> Optional[int]:
    """The seed an explainer was built with (its ``seed``, or its settings' ``seed``), None when
    it has none (no randomness)."""
    for owner in (explainer, getattr(explainer, "settings", None)):
        seed = getattr(owner, "seed", None)
        if isinstance(seed, int) and not isinstance(seed, bool):
            return seed
    return None


def _results_alone(row: MethodRow) -> MethodRow:
    """``row`` without what two runs of the same explanations may differ in: the timings, and
    the stability itself (measured or not)."""
    return dataclasses.replace(
        row, ms_per_instance=0.0, fit_seconds=0.0, distill_seconds=None, stability=None
    )


def target_forward_ms(black_box, instances) -> float:
    """Milliseconds per instance of the target's forward on the whole ``instances`` as Gem's
    explain path runs it (:func:`~gem_core.gem.explain.predict_packed`), the median of
    :data:`TIMING_REPEATS` calls after a first one, as a batched method's time: where Gem reads
    the predicted class, this forward is part of Gem's time, and the report says how much."""
    from gem_core.data.packed import PackedGraphs
    from gem_core.gem.explain import predict_packed

    packed = PackedGraphs.from_instances(list(instances))
    times = []
    for _ in range(TIMING_REPEATS + 1):
        tic = time.perf_counter()
        predict_packed(black_box, packed)
        times.append(time.perf_counter() - tic)
    return 1000.0 * statistics.median(times[1:]) / max(len(instances), 1)


def keep_measured_stability(out: dict[str, Any], previous: Optional[ResultFile]) -> None:
    """Keep a stability that an earlier run measured (``--stability``, minutes of refits) when
    this run did not measure it and its explanations are the earlier run's, value for value.

    A plain ``reproduce`` rewrites the shipped results file; without this it would replace the
    measured stability of every seeded method by "not measured". Identical results (every field
    but timings) mean the same target, data and settings, so the refits would repeat too.
    ``previous`` is the earlier file as read (None: none, or one of another schema version).
    """
    if previous is None:
        return
    for method, row in load_result(out).methods.items():
        old = previous.methods.get(method)
        kept = old.stability if old is not None else None
        if row.stability is None or row.stability.measured or kept is None or not kept.measured:
            continue
        if old is not None and _results_alone(row) == _results_alone(old):
            out["methods"][method]["stability"] = {
                **kept.to_dict(),
                "note": "measured by an earlier run with --stability, "
                "whose other results this run repeats exactly",
            }


def method_stability(
    wb: Workbench, method: str, test, held, scores, measure: bool
) -> dict[str, Any]:
    """Stability of ``method`` at the dataset's smallest K across :data:`STABILITY_SEEDS`.

    A method without a seed is deterministic (1.0). One with a seed is rebuilt with each seed
    (``held``'s own seed reuses ``scores``), fitted on the training split where it learns, and
    explains ``test`` -- only when ``measure``; otherwise the entry says it was not measured.
    """
    k = min(wb.spec.k_grid)
    seeds = list(STABILITY_SEEDS)
    own = _seed_of(held)
    if own is None:
        return {"value": 1.0, "seeds": seeds, "deterministic": True, "k": k, "measured": True}
    if not measure:
        return {
            "value": None,
            "seeds": seeds,
            "deterministic": False,
            "k": k,
            "measured": False,
            "note": "not measured: run reproduce with --stability (one refit per seed)",
        }
    tic = time.perf_counter()
    row = method_spec(method)
    runs = []
    for seed in seeds:
        if seed == own:
            runs.append(list(scores))
            continue
        exp = row.create(wb.context, seed=seed)
        if row.needs_fit:
            exp.fit(wb.instances("train"), wb.instances("val"))
        runs.append(list(exp.explain(test).scores))
    return {
        "value": stability(runs, k),
        "seeds": seeds,
        "deterministic": False,
        "k": k,
        "measured": True,
        "seconds": time.perf_counter() - tic,
    }


def _machine(device: torch.device) -> dict[str, Any]:
    """Where the run happened: device (with the GPU's name), threads, CPU, torch."""
    out: dict[str, Any] = {
        "device": str(device),
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    return out


def _toxicophores(wb: Workbench, test, scores: dict[str, list]) -> dict[str, Any]:
    """The toxicophore benchmark of every method on the test molecules the target calls mutagens."""
    from gem_core.chemistry.toxicophores import toxicophore_benchmark

    predictions = wb.predict_proba(test).argmax(-1)
    mutagen_label, atoms = wb.spec.mutagen_label, wb.dataset.atom_symbols
    assert mutagen_label is not None and atoms is not None  # the caller checked: molecules
    return toxicophore_benchmark(
        test, scores, predictions, mutagen_label=mutagen_label, atom_symbols=atoms
    )


def _cell(ours: Optional[float], theirs: Optional[float]) -> str:
    a = "  –  " if ours is None else f"{100 * ours:5.1f}"
    b = "  –  " if theirs is None else f"{100 * theirs:5.1f}"
    return f"{a} ({b})"


W = 37  # width of the method column (the longest title and a space)


def format_tables(result: Union[ResultFile, Mapping[str, Any]]) -> str:
    """Plain-text tables: rows = methods, columns = K, each cell "ours (paper)" in percent.

    Then agreement with the target's own prediction, timings, and (molecules) the toxicophore
    benchmark. ``result``: a :class:`ResultFile` or the JSON :func:`run_reproduce` returns.
    """
    result = load_result(result)
    ds = result.dataset
    spec = get_spec(ds)
    ks = list(result.k_grid or spec.k_grid)
    n = "?" if result.test_instances is None else result.test_instances
    target = result.target.name
    plain = target_spec(target).plain
    which = "" if plain else f", {target} target"
    lines = [f"{spec.title}{which}: explanation accuracy (%) on {n} test instances — ours (paper)"]
    lines += [
        f"  ({title(m)}: on a seeded subsample of {res.test_instances} of them)"
        for m, res in result.methods.items()
        if res.test_instances
    ]
    header = f"{'method':<{W}}" + "".join(f"{'K=' + str(k):>16}" for k in ks)
    lines += [header, "-" * len(header)]
    for mutagen_only in (False, True) if spec.mutagen_label is not None else (False,):
        if mutagen_only:
            lines += [
                "",
                "mutagen test graphs only (the paper's \"-0\" rows)",
                header,
                "-" * len(header),
            ]
        for method, res in result.methods.items():
            row = res.accuracy(mutagen_only)
            cells = "".join(
                f"{_cell(row.get(k), paper.paper_accuracy(ds, method, k, mutagen_only)):>16}"
                for k in ks
            )
            lines.append(f"{title(method):<{W}}{cells}")
        if not mutagen_only:
            dist = result.distillation
            ref = paper.DISTILLATION_ACCURACY.get(ds) or {}
            cells = "".join(f"{_cell(dist.accuracy_at_k.get(k), ref.get(str(k))):>16}" for k in ks)
            lines.append(f"{'(distillation, ' + str(dist.policy) + ')':<{W}}{cells}")
    if any(res.agreement_at_k for res in result.methods.values()):
        lines += [
            "",
            "agreement (%): the target's prediction on the top-K explanation equals its "
            "prediction on the whole instance",
            header,
            "-" * len(header),
        ]
        for method, res in result.methods.items():
            cells = "".join(f"{_pct(res.agreement_at_k.get(k)) + ' ' * 8:>16}" for k in ks)
            lines.append(f"{title(method):<{W}}{cells}")
    mid = ks[len(ks) // 2]
    lines += [
        "",
        f"{'method':<{W}}{'ms/instance':>14}{'paper ms':>10}{'fit s':>10}"
        f"{'fidelity@' + str(mid):>14}{'edge AUC':>10}{'median Δlog-odds':>18}",
    ]
    for method, res in result.methods.items():
        pm = paper.INFERENCE_MS.get(method, {}).get(ds)
        fid = res.fidelity_at_k.get(mid)
        auc = res.edge_auc
        lo = sorted(res.log_odds or [float("nan")])
        med = lo[len(lo) // 2]
        lines.append(
            f"{title(method):<{W}}{res.ms_per_instance:>14.3f}"
            f"{'–' if pm is None else pm:>10}{res.fit_seconds:>10.1f}"
            f"{_pct(fid):>14}{'–' if auc is None else f'{auc:.3f}':>10}{med:>18.3f}"
        )
    lines += _toxicophore_table(result)
    lines += _faithfulness_table(result)
    lines += _same_subsample_tables(result, ks)
    theirs = paper.TARGET_ACCURACY.get(ds)
    lines += [
        "",
        f"{'' if plain else target + ' '}target GNN test accuracy "
        f"{_pct(result.target.test_accuracy)} % "
        f"(paper {'–' if theirs is None else f'{100 * theirs:.1f}'} %); "
        f"distillation {result.distillation.ms_per_instance:.2f} ms/instance",
    ]
    return "\n".join(lines)


def _pct(value: Optional[float]) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _toxicophore_table(result: ResultFile) -> list[str]:
    """The toxicophore benchmark (molecules): AUC and recall at its k per method."""
    tox = result.toxicophores
    if not tox:
        return []
    k = tox.k
    lines = [
        "",
        f"toxicophores (Kazius et al. 2005): {tox.molecules} test molecules the "
        f"target calls mutagens that hold one; per-molecule bond AUC and recall of "
        f"toxicophore bonds in the top {k}",
        f"{'method':<{W}}{'AUC':>10}{f'recall@{k}':>12}",
    ]
    for method, row in tox.methods.items():
        auc, rec = row.auc, row.recall
        lines.append(
            f"{title(method):<{W}}{'–' if auc is None else f'{auc:.3f}':>10}"
            f"{'–' if rec is None else f'{rec:.3f}':>12}"
        )
    rnd = tox.random_recall
    lines.append(
        f"{'(uniformly random scores, expected)':<{W}}{0.5:>10.3f}"
        f"{'–' if rnd is None else f'{rnd:.3f}':>12}"
    )
    return lines


#: necessity is summarised over k = 1 … NECESSITY_LEAD_K in the same-subsample table
NECESSITY_LEAD_K = 5


def _same_subsample_tables(result: ResultFile, ks: list[int]) -> list[str]:
    """Per slow method measured on a subsample: every method's accuracy and agreement at the
    paper's K and mean necessity over k = 1..5, on those same instances."""
    lines: list[str] = []
    for slow, block in result.same_subsample.items():
        head = (
            "".join(f"{'acc@' + str(k):>9}" for k in ks)
            + "".join(f"{'agr@' + str(k):>9}" for k in ks)
            + f"{'nec@1-' + str(NECESSITY_LEAD_K) + ' drop / keep':>24}"
        )
        lines += [
            "",
            f"every method on {title(slow)}'s seeded subsample of "
            f"{block.test_instances} test instances (%): accuracy and agreement at K, "
            f"mean necessity over k = 1..{NECESSITY_LEAD_K}",
            f"{'method':<{W}}{head}",
        ]
        for method, res in block.methods.items():
            cells = "".join(f"{_pct(res.accuracy_at_k.get(k)):>9}" for k in ks)
            cells += "".join(f"{_pct(res.agreement_at_k.get(k)):>9}" for k in ks)
            nec = [_mean_necessity(res, protocol) for protocol in ("drop_isolated", "keep_nodes")]
            cells += f"{' / '.join(_pct(v) for v in nec):>24}"
            lines.append(f"{title(method):<{W}}{cells}")
    return lines


def _mean_necessity(res: MethodRow, protocol: str) -> Optional[float]:
    curve = res.curve("necessity", protocol)
    ks = range(1, NECESSITY_LEAD_K + 1)
    if any(k not in curve for k in ks):
        return None
    return sum(curve[k] for k in ks) / len(ks)


def _faithfulness_table(result: ResultFile, protocol: str = "drop_isolated") -> list[str]:
    """Sufficiency and necessity (%) at GNNX-Bench's K values under ``protocol``, with their
    published figure in parentheses where there is one (their GCN, not our target), and
    stability; empty for results written before these metrics existed."""
    methods = {m: r for m, r in result.methods.items() if r.sufficiency_at_k}
    if not methods:
        return []
    ds = result.dataset
    fine = set(result.faithfulness_k)
    cols: list[tuple[Literal["sufficiency", "necessity"], int]] = [
        ("sufficiency", k) for k in paper.GNNX_BENCH_SUFFICIENCY_K if k in fine
    ]
    cols += [("necessity", k) for k in paper.GNNX_BENCH_NECESSITY_K if k in fine]
    head = "".join(f"{('suf@' if m == 'sufficiency' else 'nec@') + str(k):>13}" for m, k in cols)
    lines = [
        "",
        f"faithfulness (%), GNNX-Bench's sufficiency / necessity ({protocol}) — ours "
        f"({paper.GNNX_BENCH_MODEL}, a different model); stability: top-K Jaccard "
        f"across seeds",
        f"{'method':<{W}}{head}{'stability':>11}",
    ]
    for method, res in methods.items():
        cells = ""
        for metric, k in cols:
            ours = res.curve(metric, protocol).get(k)
            theirs = paper.gnnx_bench(ds, method, metric, k)
            cells += f"{_pct(ours) + ('' if theirs is None else f' ({100 * theirs:.0f})'):>13}"
        value = res.stability.value if res.stability is not None else None
        lines.append(f"{title(method):<{W}}{cells}{'–' if value is None else f'{value:.2f}':>11}")
    return lines
