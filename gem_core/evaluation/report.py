"""``docs/results.md``, generated from the recorded results (``python -m gem_core results``).

The figures a reader needs now, one table per dataset and target, written from
``assets/results/*.json`` (``reproduce``) and, when recorded, the bench JSONs beside them
(``bench-*.json``: outside models, one molecule per PyG call). Nothing in the page is typed by
hand, so it cannot drift from the runs: a test regenerates it and fails when the file differs.
The dated history of how the figures came about is ``docs/history/results-diary.md``.
The files are read through :mod:`gem_core.evaluation.result_file` (typed, version-checked).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from gem_core.evaluation import paper
from gem_core.evaluation.result_file import ResultFile, load_bench, load_result
from gem_core.evaluation.result_schema import (
    ClassBench,
    CrippenBench,
    KMap,
    SplitsTarget,
    ZooBench,
)
from gem_core.explainers import title
from gem_core.models.predict import NODES_PER_FORWARD
from gem_core.runtime.store import ASSETS_DIR, PROJECT_ROOT

RESULTS_DIR = ASSETS_DIR / "results"
DOC_PATH = PROJECT_ROOT / "docs" / "results.md"
#: the reproduce files in the page's order (dataset, target stem)
DATASET_FILES = ("ba_shapes", "tree_cycles", "mutagenicity", "mutagenicity-strong", "nci1")
#: rows in the page's order; any other recorded method follows
METHOD_ORDER = (
    "gem",
    "gem_check",
    "random_check",
    "gnnexplainer",
    "pgexplainer",
    "integrated_gradients",
    "subgraphx",
    "distilled",
    "distilled_predicted",
    "random",
)
#: the baselines Gem alone is compared with cell by cell (the issue's acceptance)
BASELINES = ("gnnexplainer", "pgexplainer")
SUFFICIENCY_KS = tuple(range(5, 26))
NECESSITY_KS = tuple(range(2, 11))


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _mean(curve: Optional[KMap], ks: Iterable[int]) -> Optional[float]:
    if not curve:
        return None
    values = [curve[k] for k in ks if k in curve]
    return sum(values) / len(values) if values else None


def _methods(result: ResultFile) -> list[str]:
    recorded = result.methods
    return [m for m in METHOD_ORDER if m in recorded] + sorted(
        m for m in recorded if m not in METHOD_ORDER
    )


def _gem_verdict(name: str, result: ResultFile) -> str:
    """One sentence: Gem alone against the paper's cells and the baselines, K by K."""
    ks = result.k_grid
    gem = result.methods["gem"].accuracy_at_k
    cell = paper.EXPLANATION_ACCURACY.get(result.dataset, {}).get("gem")
    parts = []
    if cell and name == result.dataset:  # the paper's cells are for its target only
        ours = {k: cell[str(k)] for k in ks}
        missed = [f"K = {k} by {100 * (ours[k] - gem[k]):.1f}" for k in ks if gem[k] < ours[k]]
        parts.append(
            "meets the paper's cell at every K"
            if not missed
            else "misses the paper's cell at " + ", ".join(missed) + " points"
        )
        ceiling = result.target.test_accuracy
        above = [k for k in ks if ceiling is not None and ours[k] > ceiling]
        if missed and above:
            parts.append(
                "the paper's cells at K = "
                + ", ".join(f"{k} ({_pct(ours[k])})" for k in above)
                + f" lie above this target's own test accuracy ({_pct(ceiling)} %, the paper's "
                f"target {_pct(paper.TARGET_ACCURACY.get(result.dataset))}): an explanation "
                "that keeps the target's prediction scores its accuracy there, so only one "
                "that turns wrong predictions right, unfaithful to the model, could reach them"
            )
    for base in BASELINES:
        row = result.methods.get(base)
        other = row.accuracy_at_k if row is not None else None
        if not other:
            continue
        behind = [f"K = {k} by {100 * (other[k] - gem[k]):.1f}" for k in ks if gem[k] < other[k]]
        parts.append(
            f"≥ {title(base)} at every K"
            if not behind
            else f"below {title(base)} at " + ", ".join(behind) + " points"
        )
    return "Gem alone " + "; ".join(parts) + "." if parts else ""


def _forward_share(result: ResultFile) -> str:
    """Where Gem reads the predicted class: how much of Gem's time is the target's forward
    (measured in the same run), so the generator's own cost can be read off ("" otherwise)."""
    forward = result.target.forward_ms_per_instance
    gem = result.methods.get("gem")
    if forward is None or gem is None:
        return ""
    return (
        f" Gem reads the target's predicted class: the target's forward over the test split, "
        f"{forward:.3g} ms per instance in the same run, is part of Gem's {gem.ms_per_instance:.3g}"
        f" ms (Gem's own pass: about {max(gem.ms_per_instance - forward, 0.0):.2g} ms)."
    )


def dataset_section(name: str, result: Union[ResultFile, Mapping[str, Any]]) -> list[str]:
    """The markdown of one ``reproduce`` result (typed, or its JSON): target, distillation, one
    row per method."""
    result = load_result(result)
    ks = result.k_grid
    target = result.target
    dist = result.distillation
    cells = paper.EXPLANATION_ACCURACY.get(result.dataset, {})
    is_paper_target = name == result.dataset
    lines = [
        f"## {name}: {result.test_instances} test instances, K = {', '.join(map(str, ks))}",
        "",
    ]
    lines.append(
        f"Target `{target.name}`: accuracy train {_pct(target.train_accuracy)} / "
        f"validation {_pct(target.val_accuracy)} / test {_pct(target.test_accuracy)} %"
        + (
            f" (paper: {_pct(paper.TARGET_ACCURACY[result.dataset])})"
            if is_paper_target and result.dataset in paper.TARGET_ACCURACY
            else ""
        )
        + f". Distillation (the teacher), accuracy at K: "
        f"{' '.join(_pct(dist.accuracy_at_k[k]) for k in ks)}, "
        f"{dist.ms_per_instance:.2f} ms per instance." + _forward_share(result)
    )
    lines.append("")
    verdict = _gem_verdict(name, result)
    if verdict:
        lines += [verdict, ""]
    tox = result.toxicophores.methods if result.toxicophores is not None else {}
    head = (
        "| method | accuracy at K (paper) | agreement at K | sufficiency k=5..25 | "
        "necessity k=2..10 | ms / instance |" + (" toxicophore AUC |" if tox else "")
    )
    lines += [head, "|" + " --- |" * (6 + bool(tox))]
    for method in _methods(result):
        res = result.methods[method]
        theirs = cells.get(method) if is_paper_target else None
        acc = " ".join(
            _pct(res.accuracy_at_k[k]) + (f" ({_pct(theirs[str(k)])})" if theirs else "")
            for k in ks
        )
        agree = " ".join(_pct(res.agreement_at_k.get(k)) for k in ks)
        suff = _mean(res.curve("sufficiency", "drop_isolated"), SUFFICIENCY_KS)
        nec = _mean(res.curve("necessity", "drop_isolated"), NECESSITY_KS)
        row = (
            f"| {title(method)} | {acc} | {agree} | {_pct(suff)} | {_pct(nec)} | "
            f"{res.ms_per_instance:.3g} |"
        )
        if tox:
            tox_row = tox.get(method)
            auc = tox_row.auc if tox_row is not None else None
            row += f" {'–' if auc is None else f'{auc:.3f}'} |"
        lines.append(row)
    lines.append("")
    return lines


def bench_sections(results_dir: Path) -> list[str]:
    """The recorded bench JSONs (``bench-*.json``), one short table each."""
    lines: list[str] = []
    path = results_dir / "bench-pyg.json"
    run = load_bench(path).pyg if path.is_file() else None
    if run is not None:
        names = {"gem": "Gem", "gem_check": "Gem + check", "pyg_gnnexplainer": "PyG GNNExplainer"}
        each = {k: r.process_medians_ms for k, r in run.rows.items() if r.process_medians_ms}
        processes = max((len(v) for v in each.values()), default=1)
        command = "python -m gem_core bench pyg" + (
            f" --processes {processes}" if processes > 1 else ""
        )
        spread = (
            f" On this 2-core machine one process's timings are steady but separate processes "
            f"of the same code differ by tens of percent, so the bench ran in {processes} fresh "
            f"processes and each figure is the median of theirs (the processes' medians: "
            + "; ".join(
                f"{names.get(k, k)} {', '.join(f'{m:.2f}' for m in v)}" for k, v in each.items()
            )
            + " ms)."
            if each
            else ""
        )
        lines += [
            "## One molecule per PyG call (`bench pyg`)",
            "",
            f"`{command} --json assets/results/bench-pyg.json`: "
            f"{run.model} on Mutagenicity, Gem fitted on {run.fit_graphs} graphs, "
            f"one torch thread, ms per call (median, p90) and the median as a multiple of "
            f"Gem's.{spread}",
            "",
            "| method | calls | median ms | p90 ms | × Gem |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for key, row in run.rows.items():
            lines.append(
                f"| {names.get(key, key)} | {row.calls} | {row.median_ms:.2f} | "
                f"{row.p90_ms:.2f} | {row.times_gem:.1f} |"
            )
        lines.append("")
    return lines


def _zoo_section(zoo: ZooBench) -> list[str]:
    """``bench zoo``: per model, mean sufficiency / necessity of each row, and its ms."""
    names = ("gem", "gem_check", "random", "gnnexplainer")
    lines = [
        "## The model zoo (`bench zoo`)",
        "",
        "`python -m gem_core bench zoo --threads 1 --limit 300 --json "
        "assets/results/bench-zoo.json`: Gem through the PyG door with its defaults on 8 "
        "classifiers (Mutagenicity) and 2 regressors (Crippen logP, RDKit's NCI corpus), under "
        f"`{zoo.protocol}` (a regressor's value kept within 0.1 × the spread of its outputs); "
        "mean sufficiency over k = 5..25 / mean necessity over k = 2..10 on up to 300 test "
        "graphs, Gem fitted on 1000 training graphs; ms per explained graph (Gem's rows: the "
        "explain call; GNNExplainer: batched over the split for the classifiers, one molecule "
        "per call for the regressors). The regressors' rows were measured again after their "
        "default changed (Gem's ranking read cover-first, decisions/008), with `--models "
        "crippen_gine,crippen_attentivefp`; the classifiers' rows are the run above. Every "
        "Gem + check row was measured again after the `graph` preset's check came to judge "
        "under the protocol Gem is taught for (`check.protocol = \"taught\"`, decisions/007), "
        "with `--methods gem_check`.",
        "",
        "| model | task | bonds | accuracy / R² | Gem | Gem + check | random | GNNExplainer "
        "| ms Gem / + check / GNNExplainer |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in zoo.models:
        by = {r.method: r for r in entry.rows}
        quality = next(iter(entry.quality.values()))
        cells = " | ".join(
            f"{by[m].mean_sufficiency:.3f} / {by[m].mean_necessity:.3f}" if m in by else "–"
            for m in names
        )
        ms = " / ".join(
            f"{by[m].ms_per_graph:.3g}" if m in by else "–"
            for m in ("gem", "gem_check", "gnnexplainer")
        )
        lines.append(
            f"| {entry.model} | {entry.task} | {'yes' if entry.reads_bonds else 'no'} "
            f"| {quality:.3f} | {cells} | {ms} |"
        )
    lines.append("")
    return lines


def _crippen_section(run: CrippenBench) -> list[str]:
    """``bench crippen``: rank agreement with the Crippen atom contributions per method."""
    lines = [
        "## Crippen logP: bond scores against the atom contributions (`bench crippen`)",
        "",
        "`python -m gem_core bench crippen --threads 1 --json assets/results/bench-crippen.json`"
        f": a {run.model} regressor of RDKit's Crippen logP (test R² "
        f"{run.regressor['test_r2']:.3f}), {run.test_molecules} test molecules, Gem fitted on "
        f"{run.gem_train_molecules}. Mean per-molecule Spearman ρ and Kendall τ between a "
        "method's bond scores and each bond's summed atom contributions (signed, and both in "
        "magnitude); sufficiency and necessity under `drop_isolated` (a value kept within 0.1 × "
        "the spread). `gem_signed` is Gem taught the signed effect (`teacher.kind = signed`).",
        "",
        "| method | ρ | τ | ρ magnitude | τ magnitude | sufficiency | necessity | ms / molecule |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in run.rows:
        lines.append(
            f"| {r.method} | {r.spearman:.3f} | {r.kendall:.3f} | "
            f"{r.spearman_magnitude:.3f} | {r.kendall_magnitude:.3f} | "
            f"{r.mean_sufficiency:.3f} | {r.mean_necessity:.3f} | {r.ms_per_molecule:.3g} |"
        )
    lines.append("")
    return lines


def _splits_section(runs: Sequence[SplitsTarget]) -> list[str]:
    """``bench splits``: Gem alone on its training graphs against test, per predicted class."""
    from gem_core.data.config import DEFAULT_TARGET
    from gem_core.evaluation.split_diagnosis import class_name, findings

    lines = [
        "## Why Gem alone lags where it does: training graphs against test (`bench splits`)",
        "",
        "`python -m gem_core bench splits --threads 1 --json assets/results/bench-splits.json`: "
        "the registry's Gem (the generator alone, as the tables above fit it) and random scores "
        "on the training and the test split; sufficiency at k = 5, 10, 15, 20, 25 under "
        "`drop_isolated`, the mean of these five per class the target predicts on the whole "
        "graph (graphs of that class in brackets), and the mean necessity over k = 2, 4, .., 10. Alike on "
        "train and test means that what Gem lacks it lacks on the very graphs it was taught on: "
        "its teacher (or its capacity), not generalisation.",
        "",
        "| target | split | method | sufficiency at k | per predicted class | necessity |",
        "| --- | --- | --- | --- | --- | ---: |",
    ]
    notes = []
    for run in runs:
        name = run.dataset + ("" if run.target == DEFAULT_TARGET else f", {run.target}")
        for split in run.splits:
            for row in split.methods:
                per_class = " / ".join(
                    f"{class_name(run.dataset, c)} ({split.class_counts.get(c, 0)}) "
                    f"{sum(curve.values()) / len(curve):.3f}"
                    for c, curve in row.sufficiency_per_class.items()
                    if curve
                )
                curve_text = " ".join(f"{v:.3f}" for v in row.sufficiency.values())
                lines.append(
                    f"| {name} | {split.split} ({split.instances}) | {title(row.method)} | "
                    f"{curve_text} | {per_class} | {row.mean_necessity:.3f} |"
                )
        notes.append(f"- {name}: " + " ".join(findings(run)))
    return lines + [""] + notes + [""]


#: the class walk's actions, as the page names them
CLASS_ACTIONS = {
    "open": "open Explore",
    "k": "K change",
    "instance": "a test node",
    "base": "a base node",
    "molecule": "a SMILES on Molecule",
    "benchmarks": "Benchmarks",
}


def _class_section(run: ClassBench) -> list[str]:
    """``bench app --users N``: per action one user against N, and the goals judged."""
    n = run.users
    goal_ratio = run.goals.get("server_p95_ratio", float("nan"))
    lines = [
        f"## A class on one server (`bench app --users {n}`)",
        "",
        f"`python -m gem_core bench app --users {n} --json assets/results/bench-class.json` "
        f"(the source checkout; docs/class.md explains the walk): one Streamlit server, a "
        f"warm-up walk, then one user and then {n} Chromium sessions at once walking the app "
        f"({run.rounds} rounds each, one user twice as many; about {run.think_s:g} s of think "
        f"time between clicks), the browsers on the server's cores at the lowest CPU priority "
        f"(their processes and their scheduler group: students' browsers run on their own "
        f"machines). Server time: the session's logged script runs between the "
        f"click and the result on screen; seconds, p50 / p95, and the p95 as a multiple of "
        f"one user's in the same run (goal ≤ {goal_ratio:g}×).",
        "",
        f"| action | 1 user server p50 / p95 | {n} users server p50 / p95 | server p95 × "
        f"| browser p95, 1 / {n} users |",
        "| --- | --- | --- | ---: | --- |",
    ]
    missed = []
    for action, times in run.actions.items():
        one, many = times["one"], times["many"]
        ratio = many.server_p95 / one.server_p95 if one.server_p95 else float("nan")
        if not ratio <= goal_ratio:
            missed.append(f"{CLASS_ACTIONS.get(action, action)} {ratio:.1f}×")
        lines.append(
            f"| {CLASS_ACTIONS.get(action, action)} | {one.server_p50:.2f} / "
            f"{one.server_p95:.2f} | {many.server_p50:.2f} / {many.server_p95:.2f} | "
            f"{ratio:.1f} | {one.browser_p95:.2f} / {many.browser_p95:.2f} |"
        )
    base = run.actions.get("base", {}).get("one")
    goal_base = run.goals.get("base_node_s", float("nan"))
    goal_rss = run.goals.get("rss_mb_per_user", float("nan"))
    growth = run.rss_growth_mb_per_user
    lines += [
        "",
        f"{run.errors} errors, {run.widget_resets} widget resets; server memory "
        f"{run.rss_mb.get('one', float('nan')):.0f} MB after one user, peak "
        f"{run.rss_mb.get('many_peak', float('nan')):.0f} MB under {n}: {growth:.1f} MB per "
        f"added user (goal ≤ {goal_rss:g}: {'met' if growth <= goal_rss else 'missed'})"
        + (
            f"; a base node shown in {base.browser_p50:.2f} s (median, one user; goal ≤ "
            f"{goal_base:g} s: {'met' if base.browser_p50 <= goal_base else 'missed'})"
            if base is not None
            else ""
        )
        + ". Server p95 within "
        + (
            f"{goal_ratio:g}× of one user's for every action."
            if not missed
            else f"{goal_ratio:g}× of one user's: missed for " + ", ".join(missed) + "."
        ),
        "",
    ]
    return lines


def render(results_dir: Path = RESULTS_DIR) -> str:
    """The whole page from the JSONs in ``results_dir``."""
    lines = [
        "# Measured results",
        "",
        "<!-- generated by `python -m gem_core results` from assets/results/*.json: do not edit; "
        "tests/test_results_doc.py fails when this file differs from what the command writes -->",
        "",
        "Every figure below comes from the JSON files in `assets/results/`, written by",
        "`GEM_DATA_ROOT=../shared/data/TUDataset GEM_NUM_THREADS=1 python -m gem_core reproduce "
        "--all --workers 1 --threads 1 --stability` (one dataset after another on one torch "
        "thread, so that the ms columns are not two datasets' runs sharing the machine's caches; "
        "every Gem row was timed with the second core idle, some later rows of NCI1 and of the "
        "bond-aware target while another job used it; `--dataset mutagenicity --target strong --threads 1 "
        "--stability` for the bond-aware target) and by the bench commands named in their "
        "sections.",
        "Test split only; settings were chosen on validation (the decisions and their tables: "
        "`docs/history/results-diary.md`, the dated record until 2026-11-29).",
        "",
        "Rows: **Gem** is the generator alone, one auto-encoder pass (on the CPU in runs of at "
        f"most {NODES_PER_FORWARD:,} nodes, whose activations stay in the caches), no search: "
        "where it reads the predicted class (Mutagenicity, NCI1), the target's forward on the "
        f"whole instances gives it (on the CPU in runs of at most {NODES_PER_FORWARD:,} nodes "
        "too), inside the timed call, and nothing else asks the target (on both Mutagenicity targets its fit "
        "ends with the `training.fidelity` adjustment, the target read on Gem's relaxed top-K "
        "of each training molecule: while fitting, never when explaining); "
        "**Gem + check** (`gem_check`) adds the explain-time search that asks the target; "
        "**Random + check** is that search over random scores, the control. Accuracy at "
        "K: the prediction on the top-K edges alone equals the true label (the paper's tables; "
        "its numbers in brackets for its target); agreement: it equals the target's prediction "
        "on the whole instance; sufficiency and necessity: the field's `drop_isolated` protocol, "
        "the mean over k; ms per instance of one batched call over the test split.",
        "",
    ]
    for stem in DATASET_FILES:
        path = results_dir / f"{stem}.json"
        if path.is_file():
            lines += dataset_section(stem, load_result(path))
    lines += bench_sections(results_dir)
    zoo_path, crippen_path = results_dir / "bench-zoo.json", results_dir / "bench-crippen.json"
    zoo = load_bench(zoo_path).zoo if zoo_path.is_file() else None
    crippen = load_bench(crippen_path).crippen if crippen_path.is_file() else None
    lines += _zoo_section(zoo) if zoo is not None else []
    lines += _crippen_section(crippen) if crippen is not None else []
    splits_path = results_dir / "bench-splits.json"
    splits = load_bench(splits_path).splits if splits_path.is_file() else ()
    lines += _splits_section(splits) if splits else []
    class_path = results_dir / "bench-class.json"
    class_run = load_bench(class_path).class_ if class_path.is_file() else None
    lines += _class_section(class_run) if class_run is not None else []
    return "\n".join(lines).rstrip() + "\n"


def write(path: Path = DOC_PATH, results_dir: Path = RESULTS_DIR) -> bool:
    """Write the page; returns whether it changed."""
    text = render(results_dir)
    old = path.read_text() if path.is_file() else None
    if old != text:
        path.write_text(text)
    return old != text
