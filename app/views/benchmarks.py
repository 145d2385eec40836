"""Benchmarks: the paper's measurements for one dataset, ours beside the paper's.

Read from ``assets/results/<dataset>.json`` (written by ``python -m gem_core reproduce`` or by
the button at the bottom; typed and checked by ``gem_core.api.read_results``): explanation
accuracy against K per method (the paper's values dashed), log-odds-difference histograms,
explain time per instance, distillation accuracy and the target model's accuracy. Below them,
the session's own models (trained on the Your data page) measured on their test splits on a
click (:mod:`components.user_bench`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import pandas as pd
import streamlit as st
from components import charts
from components.user_bench import render_user_benchmarks
from messages import progress_bar, show_error
from state.runtime import run_page
from state.selection import selection
from state.view_cache import benchmark_chart
from theme import method_title

from gem_core.api import METHODS, PROJECT_ROOT, REPRODUCE_METHODS, paper

if TYPE_CHECKING:
    from gem_core.api import ResultFile


def _read(dataset: str, target: str) -> tuple[Optional[ResultFile], Path, Optional[str]]:
    from gem_core.api import read_results, results_path

    path = results_path(dataset, target)
    if not path.exists():
        return None, path, None
    try:  # read and checked once per version of the file
        return read_results(dataset, target), path, None
    except (OSError, ValueError) as exc:  # not JSON, malformed or of another schema version
        return None, path, f"{path.name} cannot be read: {getattr(exc, 'problem', exc)}"


def _pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _table(result: ResultFile, methods: list[str], mutagen: bool) -> pd.DataFrame:
    ds = result.dataset
    ks = list(result.k_grid) or sorted(
        {k for m in methods for k in result.methods[m].accuracy(mutagen)}
    )
    rows = []
    for m in methods:
        res = result.methods[m]
        row = {"method": method_title(m)}
        for k in ks:
            ours = res.accuracy(mutagen).get(k)
            theirs = paper.paper_accuracy(ds, m, k, mutagen_only=mutagen)
            row[f"K={k}"] = f"{_pct(ours)} ({_pct(theirs)})"
        mid = ks[len(ks) // 2] if ks else None
        row[f"fidelity@{mid}"] = _pct(res.fidelity_at_k.get(mid)) if mid else "–"
        row["edge AUC"] = "–" if res.edge_auc is None else f"{res.edge_auc:.3f}"
        row["ms / instance"] = f"{res.ms_per_instance:.3g}"
        row["fit s"] = f"{res.fit_seconds:.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def _show(result: ResultFile, sel, source: tuple[str, float]) -> None:
    """The results of one file (``source``: its path and modification time, the key of the
    charts built once per server process)."""
    ds = result.dataset
    available = [m for m in METHODS if m in result.methods]
    methods = [m for m in available if m in sel.methods] or available
    if set(methods) != set(available):
        st.caption(
            "Showing the explainers selected in the sidebar; the file also holds "
            + ", ".join(method_title(m) for m in available if m not in methods)
            + "."
        )
    target = result.target
    dist = result.distillation
    spec = sel.spec
    c1, c2, c3, c4 = st.columns(4)
    test_acc = target.test_accuracy
    ref = paper.TARGET_ACCURACY.get(ds)
    c1.metric(
        "Target model test accuracy",
        _pct(test_acc) + " %",
        delta=None
        if test_acc is None or ref is None
        else f"{100 * (test_acc - ref):+.1f} pts vs paper ({100 * ref:.1f} %)",
        delta_color="off",
    )
    c2.metric(
        "Target val accuracy",
        f"{_pct(target.val_accuracy)} %",
        delta=f"train {_pct(target.train_accuracy)} %",
        delta_color="off",
    )
    dk = spec.default_k if result.log_odds_k is None else result.log_odds_k
    d_acc = dist.accuracy_at_k.get(dk)
    d_ref = (paper.DISTILLATION_ACCURACY.get(ds) or {}).get(str(dk))
    c3.metric(
        f"Distillation accuracy (K = {dk})",
        _pct(d_acc) + " %",
        delta=None if d_acc is None or d_ref is None else f"paper {100 * d_ref:.1f} %",
        delta_color="off",
    )
    shown = next((n for n in (result.test_instances, dist.instances) if n is not None), "–")
    c4.metric(
        "Test instances",
        str(shown),
        delta=f"distillation {dist.ms_per_instance:.1f} ms / instance",
        delta_color="off",
    )

    mutagen = False
    if any(result.methods[m].accuracy_at_k_mutagen for m in methods):
        mutagen = st.toggle("Mutagen test graphs only (the paper's \"-0\" rows)", key="bm_mutagen")
    chosen = tuple(methods)

    def chart(name: str, build, option: bool = False):
        return benchmark_chart(name, source, chosen, option, build)

    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            chart("accuracy", lambda: charts.accuracy_sweep(result, methods, mutagen), mutagen),
            key="bm_accuracy",
            theme=None,
        )
    with right:
        st.plotly_chart(
            chart("log_odds", lambda: charts.log_odds_histogram(result, methods)),
            key="bm_log_odds",
            theme=None,
        )
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            chart("timing", lambda: charts.timing_chart(result, methods)),
            key="bm_timing",
            theme=None,
        )
    with right:
        fig = chart("distillation", lambda: charts.distillation_chart(result))
        if fig is not None:
            st.plotly_chart(fig, key="bm_distillation", theme=None)
    st.markdown("**Explanation accuracy (%), ours (paper)**")
    st.dataframe(_table(result, methods, mutagen), hide_index=True, key="bm_table")
    fig = chart("agreement", lambda: charts.agreement_sweep(result, methods))
    if fig is not None:
        st.markdown(
            "**Faithfulness: does the explanation keep the model's own prediction?** "
            "Accuracy above counts an explanation right when the model predicts the "
            "true label on it, so it leans on the model being right; agreement asks "
            "whether the model says on the explanation alone what it says on the whole "
            "instance."
        )
        st.plotly_chart(fig, key="bm_agreement", theme=None)
    fig = chart("sufficiency", lambda: charts.sufficiency_sweep(result, methods))
    if fig is not None:
        st.markdown(
            "**The field's yardstick (GNNX-Bench):** sufficiency is the share of "
            "instances whose prediction on the top-K edges alone (nodes left without an "
            "edge dropped) equals the prediction on the whole instance. Dotted points are "
            "GNNX-Bench's published figures for *their* GCN, not this target."
        )
        st.plotly_chart(fig, key="bm_sufficiency", theme=None)
    if result.toxicophores is not None:
        _toxicophore_table(result, methods)
    machine = result.machine.recorded()
    if machine:
        st.caption(
            "Measured on "
            + ", ".join(f"{k} {v}" for k, v in machine)
            + f" in {result.seconds or 0.0:.0f} s. The paper's times are on a GPU."
        )


def _num(v: Optional[float]) -> str:
    return "–" if v is None else f"{v:.3f}"


def _toxicophore_table(result: ResultFile, methods: list[str]) -> None:
    tox = result.toxicophores
    k = tox.k
    random = float("nan") if tox.random_recall is None else tox.random_recall
    st.markdown(
        f"**Toxicophores** (Kazius et al. 2005): on the {tox.molecules} test molecules "
        f"the model calls mutagens that hold a known toxicophore, how well each method's "
        f"bond scores find the toxicophore bonds — AUC (random 0.5) and the share of them "
        f"in the top {k} (random {random:.3f})."
    )
    rows = []
    for m in methods:
        row = tox.methods.get(m)
        if row is not None:
            rows.append(
                {"method": method_title(m), "AUC": _num(row.auc), f"recall@{k}": _num(row.recall)}
            )
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="bm_tox_table")
    st.caption(
        "An explanation explains the model: a toxicophore the model does not use is not "
        "the explainer's fault, so read these beside the distilled teachers' rows."
    )


def _recompute(sel) -> None:
    from gem_core.api import run_reproduce

    st.subheader("Recompute", anchor=False)
    methods = st.multiselect(
        "Explainers to evaluate",
        list(METHODS),
        default=list(REPRODUCE_METHODS),
        format_func=method_title,
        key="bm_methods",
    )
    st.caption(
        f"Runs target → distillation → explainers → evaluation for {sel.spec.title} on "
        f"the selected device and rewrites the results file. Gem's and PGExplainer's fits "
        f"come from the cache or from the fits shipped with the app; a refit (after the "
        f"target or the settings changed) takes 20-60 s per method on a CPU."
    )
    if st.button(
        "Recompute benchmarks", key="bm_recompute", icon=":material/refresh:", disabled=not methods
    ):
        try:
            with st.status(f"Recomputing {sel.spec.title} benchmarks…", expanded=True) as status:
                with progress_bar("reproduce") as progress:
                    run_reproduce(
                        sel.dataset,
                        device=sel.device,
                        methods=methods,
                        target=sel.target,
                        progress=progress,
                    )
                status.update(label="Benchmarks recomputed", state="complete")
        except Exception as exc:
            show_error(exc, "Recomputing failed")
            return
        st.rerun()  # the rewritten file is read again (a new modification time)


def render() -> None:
    sel = selection()
    st.header("Benchmarks", anchor="benchmarks")
    st.caption(
        f"{sel.spec.title}: our measurements (solid) beside the paper's (dashed, same colour)."
    )
    result, path, problem = _read(sel.dataset, sel.target)
    source = (str(path), path.stat().st_mtime if result is not None else 0.0)
    try:
        rel = path.relative_to(PROJECT_ROOT)
    except ValueError:
        rel = path
    if problem:
        st.error(problem, icon=":material/error:")
    elif result is None:
        st.info(
            f"No benchmark results for {sel.spec.title} yet: `{rel}` is written by "
            f"`python -m gem_core reproduce --dataset {sel.dataset}` or by the Recompute "
            f"button below.",
            icon=":material/info:",
        )
    else:
        try:
            _show(result, sel, source)
        except Exception as exc:  # a malformed file must not break the page
            show_error(exc, f"{rel} could not be shown")
    _recompute(sel)
    render_user_benchmarks(sel.device)


run_page(render)
