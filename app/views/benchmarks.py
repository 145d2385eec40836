"""Benchmarks: the paper's measurements for one dataset, ours beside the paper's.

Read from ``assets/results/<dataset>.json`` (written by ``python -m gem_core reproduce`` or by
the button at the bottom): explanation accuracy against K per method (the paper's values
dashed), log-odds-difference histograms, explain time per instance, distillation accuracy and
the target model's accuracy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pandas as pd
import streamlit as st
from components import charts
from messages import progress_bar, show_error
from state.runtime import run_page
from state.selection import selection
from state.view_cache import benchmark_chart, results_json
from theme import method_title

from gem_core.api import METHODS, PROJECT_ROOT, REPRODUCE_METHODS, paper


def _read(dataset: str, target: str) -> tuple[Optional[dict[str, Any]], Path, Optional[str]]:
    from gem_core.api import results_path

    path = results_path(dataset, target)
    if not path.exists():
        return None, path, None
    try:
        data = results_json(str(path), path.stat().st_mtime)
    except (OSError, ValueError) as exc:
        return None, path, f"{path.name} cannot be read: {exc}"
    if not isinstance(data, dict) or "methods" not in data:
        return None, path, f"{path.name} does not hold benchmark results."
    return data, path, None


def _pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _table(result: dict[str, Any], methods: list[str], key: str, mutagen: bool) -> pd.DataFrame:
    ds = result["dataset"]
    ks = [
        str(k)
        for k in result.get("k_grid")
        or sorted({int(k) for m in methods for k in (result["methods"][m].get(key) or {})})
    ]
    rows = []
    for m in methods:
        res = result["methods"][m]
        row = {"method": method_title(m)}
        for k in ks:
            ours = (res.get(key) or {}).get(k)
            theirs = paper.paper_accuracy(ds, m, int(k), mutagen_only=mutagen)
            row[f"K={k}"] = f"{_pct(ours)} ({_pct(theirs)})"
        fid = res.get("fidelity_at_k") or {}
        mid = ks[len(ks) // 2] if ks else None
        row[f"fidelity@{mid}"] = _pct(fid.get(mid)) if mid else "–"
        row["edge AUC"] = "–" if res.get("edge_auc") is None else f"{res['edge_auc']:.3f}"
        row["ms / instance"] = f"{res.get('ms_per_instance', 0.0):.3g}"
        row["fit s"] = f"{res.get('fit_seconds', 0.0):.1f}"
        rows.append(row)
    return pd.DataFrame(rows)


def _show(result: dict[str, Any], sel, source: tuple[str, float]) -> None:
    """The results of one file (``source``: its path and modification time, the key of the
    charts built once per server process)."""
    ds = result["dataset"]
    available = [m for m in METHODS if m in result.get("methods", {})]
    methods = [m for m in available if m in sel.methods] or available
    if set(methods) != set(available):
        st.caption(
            "Showing the explainers selected in the sidebar; the file also holds "
            + ", ".join(method_title(m) for m in available if m not in methods)
            + "."
        )
    target = result.get("target", {})
    dist = result.get("distillation", {})
    spec = sel.spec
    c1, c2, c3, c4 = st.columns(4)
    test_acc = target.get("test_accuracy")
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
        f"{_pct(target.get('val_accuracy'))} %",
        delta=f"train {_pct(target.get('train_accuracy'))} %",
        delta_color="off",
    )
    dk = str(result.get("log_odds_k", spec.default_k))
    d_acc = (dist.get("accuracy_at_k") or {}).get(dk)
    d_ref = (paper.DISTILLATION_ACCURACY.get(ds) or {}).get(dk)
    c3.metric(
        f"Distillation accuracy (K = {dk})",
        _pct(d_acc) + " %",
        delta=None if d_acc is None or d_ref is None else f"paper {100 * d_ref:.1f} %",
        delta_color="off",
    )
    c4.metric(
        "Test instances",
        str(result.get("test_instances", dist.get("instances", "–"))),
        delta=f"distillation {dist.get('ms_per_instance', 0.0):.1f} ms / instance",
        delta_color="off",
    )

    mutagen = False
    if any((result["methods"][m].get("accuracy_at_k_mutagen") for m in methods)):
        mutagen = st.toggle("Mutagen test graphs only (the paper's \"-0\" rows)", key="bm_mutagen")
    key = "accuracy_at_k_mutagen" if mutagen else "accuracy_at_k"
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
    st.dataframe(_table(result, methods, key, mutagen), hide_index=True, key="bm_table")
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
    tox = result.get("toxicophores")
    if tox:
        _toxicophore_table(tox, methods)
    machine = result.get("machine") or {}
    if machine:
        st.caption(
            "Measured on "
            + ", ".join(f"{k} {v}" for k, v in machine.items())
            + f" in {result.get('seconds', 0.0):.0f} s. The paper's times are on a GPU."
        )


def _toxicophore_table(tox: dict[str, Any], methods: list[str]) -> None:
    k = tox.get("k", 8)
    st.markdown(
        f"**Toxicophores** (Kazius et al. 2005): on the {tox['molecules']} test molecules "
        f"the model calls mutagens that hold a known toxicophore, how well each method's "
        f"bond scores find the toxicophore bonds — AUC (random 0.5) and the share of them "
        f"in the top {k} (random {tox.get(f'random_recall_at_{k}', float('nan')):.3f})."
    )
    rows = []
    for m in methods:
        row = tox["methods"].get(m)
        if row:
            rows.append(
                {
                    "method": method_title(m),
                    "AUC": f"{row['auc']:.3f}",
                    f"recall@{k}": f"{row[f'recall_at_{k}']:.3f}",
                }
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
        results_json.clear()
        st.rerun()


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


run_page(render)
