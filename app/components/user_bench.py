"""The Benchmarks page's part for the models trained on users' tables (the Your data page): how
faithful and how fast each explainer is on a model's own test split, measured by the engine
(:func:`gem_core.evaluation.user_model_bench.evaluate_user_model`) on a click and kept for the
server process, so a rerun shows it again without measuring."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from gem_core.api import BENCH_METHODS, molecule_model
from messages import fit_offer, show_error
from state.engine_cache import measure_user_benchmark, user_benchmark
from state.training_jobs import NO_OWNER, known_owner, session_models
from theme import method_title

#: the class whose molecules' explanations are compared with the Kazius alerts, where a model
#: has it (as on the Your data page)
ALERT_CLASS = "mutagen"


def render_user_benchmarks(device: str) -> None:
    """A selector of this session's models, a button that measures the chosen one on its test
    split, and the measurement (nothing when the session has no model)."""
    models = {m.name: m for m in session_models()}
    if not models:
        return
    owner = known_owner() or NO_OWNER
    st.subheader("Your models", anchor="your-models")
    st.caption(
        "A model trained on your own table (the Your data page), explained on its test "
        "molecules: sufficiency (the prediction on the top-k bonds alone is the same, mean "
        "over k = 5..25), necessity (deleting them changes it, k = 2..10), both with the "
        "field's drop_isolated protocol, and the time per molecule. Gem + check asks the model "
        "at explain time; random scores are the floor."
    )
    name = st.selectbox(
        "Model", list(models), key="bm_user_model",
        format_func=lambda n: n if models[n].owner == owner else f"{n} (shared)")
    model = models[name]
    if model.regression:
        st.caption("A model of a number keeps its prediction when the value stays within "
                   "0.1 × the spread of its test predictions.")
    try:
        wb = molecule_model(device, model=name)
    except Exception as exc:  # deleted meanwhile, unreadable: one line
        show_error(exc, f"Cannot load the model {name}")
        return
    ready = tuple(m for m in BENCH_METHODS if wb.is_fitted(m))
    for m in BENCH_METHODS:
        if m not in ready:
            fit_offer(wb, m, f"{method_title(m)} is not fitted for the model {name} yet (a "
                             f"one-off fit on its training molecules, cached afterwards); it is "
                             f"measured once fitted.", key=f"bm_user_fit_{m}")
    alert = ALERT_CLASS if ALERT_CLASS in model.classes else None
    key = (name, wb.target().digest, str(wb.device), ready, alert)
    result = user_benchmark(key)
    clicked = st.button("Measure on its test split", key="bm_user_go", icon=":material/speed:",
                        disabled=not ready,
                        help="Measured once per model and server: shown again afterwards.")
    if clicked and result is None:
        try:
            with st.spinner(f"Explaining the test molecules of {name} with each method…"):
                result = measure_user_benchmark(key, name, device, ready, alert, owner)
        except Exception as exc:  # noqa: BLE001 - any engine error is one message
            show_error(exc, "Measuring failed")
            return
    if result is not None:
        _show(result, alert is not None)


def _show(result: dict, alert: bool) -> None:
    rows = [{"method": method_title(m), "ms per molecule": round(r["ms_per_molecule"], 3),
             "sufficiency": round(r["sufficiency"], 3), "necessity": round(r["necessity"], 3),
             **({"toxicophore AUC": r["toxicophore_auc"]} if alert else {})}
            for m, r in result["methods"].items()]
    with st.container(key="bm_user_result"):
        st.caption(f"{result['model']}: {result['molecules']} test molecules, "
                   f"{result['protocol']} protocol.")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                     key="bm_user_table")
