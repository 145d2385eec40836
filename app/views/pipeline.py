"""Pipeline: train the target → distil → fit Gem → evaluate, for the sidebar's dataset and device.

Each stage has its own progress bar. Everything lands in the artifact cache (target checkpoint,
distillations, the Gem explainer), so the Explore and Molecule pages use it at once; a full
evaluation also rewrites ``assets/results/<dataset>.json`` for the Benchmarks page.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st
from messages import DATA_HELP, device_label, progress_bar, show_error
from state.engine_cache import get_workbench
from state.runtime import run_page
from state.selection import selection
from state.session import pipeline_summary, remember_pipeline_summary
from theme import method_title

from gem_core.api import DataUnavailableError, forget_explainer, load_result

QUICK_LIMIT = 20
EVAL_MODES = (
    f"Quick: first {QUICK_LIMIT} test instances (not saved)",
    "Full test split (saved for the Benchmarks page)",
)


def _stage(title: str):
    return st.status(title, expanded=True)


def _run(sel, refit: bool, full: bool) -> dict:
    """Run the four stages; returns a summary for the page (also kept in the session)."""
    summary: dict = {"dataset": sel.dataset, "device": sel.device, "stages": []}
    wb = get_workbench(sel.dataset, sel.device, sel.target)
    spec = wb.spec

    with _stage("1 · Target model") as box:
        t0 = time.perf_counter()
        _ = wb.dataset
        with progress_bar("loading or training the target GNN") as progress:
            target = wb.target(progress)
        m = target.metrics
        summary["target"] = {
            "train": m.train_accuracy,
            "val": m.val_accuracy,
            "test": m.test_accuracy,
            "epochs": m.epochs,
        }
        summary["stages"].append(("target", time.perf_counter() - t0))
        box.update(
            label=f"1 · Target model: test accuracy {100 * m.test_accuracy:.1f} %",
            state="complete",
            expanded=False,
        )

    with _stage("2 · Distillation (train and validation splits)") as box:
        from gem_core.api import ACCURACY_TOPK_POLICY, topk_accuracy

        t0 = time.perf_counter()
        with progress_bar("distilling the training split") as progress:
            train = wb.distillation("train", progress)
        with progress_bar("distilling the validation split") as progress:
            wb.distillation("val", progress)
        # the top-K rule the distillation accuracy is reported with everywhere (refine)
        masks = train.topk_grid(
            [spec.default_k],
            ACCURACY_TOPK_POLICY,
            instances=wb.instances("train"),
            black_box=wb.black_box,
            device=wb.device,
        )[spec.default_k]
        acc = topk_accuracy(wb.instances("train"), masks, wb.black_box, device=wb.device)
        summary["distillation"] = {
            "instances": len(train),
            "seconds": train.seconds,
            "k": spec.default_k,
            "accuracy": acc,
        }
        summary["stages"].append(("distillation", time.perf_counter() - t0))
        box.update(
            label=f"2 · Distillation: {len(train)} training instances, accuracy "
            f"{100 * acc:.1f} % at K = {spec.default_k}",
            state="complete",
            expanded=False,
        )

    with _stage("3 · Fit Gem") as box:
        t0 = time.perf_counter()
        if refit:  # every device's shared workbench then picks up the new fit
            forget_explainer(sel.dataset, "gem")
        with progress_bar("fitting the Gem explainer") as progress:
            gem = wb.fit("gem", progress, refresh=refit)
        hist = getattr(gem, "history_", {}) or {}
        summary["gem"] = {
            "fit_seconds": float(getattr(gem, "fit_seconds_", 0.0) or 0.0),
            "best_epoch": hist.get("best_epoch"),
            "epochs": hist.get("epochs"),
            "refit": refit,
            "loaded_from": getattr(gem, "loaded_from_", None),
        }
        summary["stages"].append(("gem", time.perf_counter() - t0))
        box.update(
            label="3 · Gem fitted" if refit else "3 · Gem ready (fitted or from cache)",
            state="complete",
            expanded=False,
        )

    with _stage("4 · Evaluate") as box:
        t0 = time.perf_counter()
        from gem_core.api import run_reproduce

        methods = list(sel.methods) or ["gem"]
        with progress_bar("evaluating " + ", ".join(method_title(m) for m in methods)) as p:
            result = load_result(
                run_reproduce(
                    sel.dataset,
                    device=sel.device,
                    methods=methods,
                    target=sel.target,
                    limit=None if full else QUICK_LIMIT,
                    progress=p,
                )
            )
        summary["result"] = result
        summary["stages"].append(("evaluate", time.perf_counter() - t0))
        n = "?" if result.test_instances is None else result.test_instances
        box.update(
            label=f"4 · Evaluated {n} test instances" + (" (saved)" if full else ""),
            state="complete",
            expanded=False,
        )
    return summary


def _show(summary: dict) -> None:
    st.subheader("Results", anchor=False)
    t = summary.get("target")
    if t:
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Target train accuracy", f"{100 * t['train']:.1f} %")
        c2.metric("Target val accuracy", f"{100 * t['val']:.1f} %")
        c3.metric("Target test accuracy", f"{100 * t['test']:.1f} %")
        d = summary.get("distillation")
        if d:
            c4.metric(
                f"Distillation accuracy (train, K = {d['k']})", f"{100 * d['accuracy']:.1f} %"
            )
    g = summary.get("gem")
    if g:
        epochs = f", best epoch {g['best_epoch']} of {g['epochs']}" if g.get("epochs") else ""
        if g.get("loaded_from"):
            st.caption(
                f"Gem: loaded from {g['loaded_from']} (its fit took "
                f"{g['fit_seconds']:.1f} s{epochs})"
            )
        else:
            st.caption(f"Gem: fitted now in {g['fit_seconds']:.1f} s{epochs}")
    result = summary.get("result")  # a ResultFile
    if result is not None:
        rows = []
        for m, res in result.methods.items():
            row = {"method": method_title(m)}
            for k in result.k_grid:
                v = res.accuracy_at_k.get(k)
                row[f"acc@{k} (%)"] = None if v is None else round(100 * v, 1)
            row["ms / instance"] = round(res.ms_per_instance, 3)
            rows.append(row)
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="pl_result_df")
    if summary.get("stages"):
        st.caption("Stage times: " + ", ".join(f"{n} {s:.1f} s" for n, s in summary["stages"]))


def render() -> None:
    sel = selection()
    spec = sel.spec
    st.header("Pipeline", anchor="pipeline")
    st.markdown(
        f"Runs Gem end to end for **{spec.title}** on **{device_label(sel.device)}**: (1) load "
        f"or train the "
        f"target GNN, (2) distil the Granger-causal ground truth of the training and validation "
        f"instances, (3) fit the Gem explainer on it, (4) evaluate the explainers selected in the "
        f"sidebar ({', '.join(method_title(m) for m in sel.methods) or 'Gem'}). Results are "
        f"cached: the other pages use them immediately."
    )
    c1, c2 = st.columns(2)
    refit = c1.checkbox("Refit Gem even if a fitted one is cached", key="pl_refit")
    mode = c2.radio("Evaluation", EVAL_MODES, key="pl_eval")
    if st.button("Run pipeline", key="pl_run", type="primary", icon=":material/play_arrow:"):
        try:
            summary = _run(sel, refit, mode == EVAL_MODES[1])
        except DataUnavailableError as exc:
            st.warning(
                f"The {spec.title} data is not available. {DATA_HELP}", icon=":material/folder_off:"
            )
            st.caption(str(exc))
            return
        except Exception as exc:
            show_error(exc, "The pipeline stopped")
            return
        remember_pipeline_summary(sel.dataset, summary)
        st.success("Pipeline finished.", icon=":material/check_circle:")
    summary = pipeline_summary(sel.dataset)
    if summary:
        _show(summary)
    else:
        st.caption("Nothing run yet in this session.")


run_page(render)
