"""What the app tells people about the engine, the same on every page: progress bars, error
boxes, the one-off fit offer, the device a selection runs on, why the Molecule page opens on its
model, where the data comes from.

Nothing here is cached or kept in the session: it draws (or words) what it is given, so pages and
components share one wording for the same situation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st
import torch
from theme import method_title

from gem_core.api import (
    Workbench,
    choose_device,
    molecule_default_target,
    molecule_spec,
    recorded_fit_seconds,
    resolve_device,
    target_names,
    target_spec,
)

#: the salts rules (gem_core.api.SALT_RULES) as the pages offer them
SALT_CHOICES = {
    "refuse": "refuse them",
    "largest": "keep the largest fragment",
    "whole": "keep them whole",
}
SALT_HELP = (
    "A SMILES of several fragments (a salt, a mixture). Refused: its message names the fragment "
    "to keep. Largest fragment: the counter-ions are removed. Whole: every fragment is one "
    "graph, the counter-ions atoms of it, as Mutagenicity's own molecules keep them (its models "
    "were trained so)."
)

DATA_HELP = (
    "Mutagenicity and NCI1 are read from TU Dortmund raw files. Set the environment variable "
    "`GEM_DATA_ROOT` to a folder holding `Mutagenicity/raw/Mutagenicity_*.txt` and "
    "`NCI1/raw/NCI1_*.txt` (for example `../shared/data/TUDataset`) and restart the app."
)


# ----------------------------------------------------------------------------- words


def device_label(device: str) -> str:
    """The torch device a selection really runs on, as people read it (the GPU's name)."""
    try:
        dev = resolve_device(device)
    except ValueError as exc:
        return str(exc)
    if dev.type == "cuda":
        label = f"CUDA · {torch.cuda.get_device_name(dev)}"
    else:
        label = (
            f"CPU · {torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}"
        )
    if device in (None, "auto"):  # say why auto chose it
        label += f" (auto: {choose_device('interactive').reason})"
    return label


def molecule_default_reason() -> str:
    """One sentence on why the Molecule page opens on its default target, from the shipped
    results (test accuracy, Gem's toxicophore AUC); empty when they cannot be read."""
    from gem_core.api import recorded_target_summary

    spec = molecule_spec()
    default = molecule_default_target()
    others = [n for n in target_names(spec) if n != default]
    recs = {n: recorded_target_summary(spec.name, n) for n in (default, *others)}
    if not others or any(r is None or "toxicophore_auc" not in r for r in recs.values()):
        return ""
    mine = recs[default]
    vs = "; ".join(
        f"{100 * recs[n]['test_accuracy']:.1f} % and "
        f"{recs[n]['toxicophore_auc']:.2f} for {target_spec(n).title}"
        for n in others
    )
    return (
        f"The page explains the {target_spec(default).title} model by default: "
        f"it is right on {100 * mine['test_accuracy']:.1f} % of the test molecules and "
        f"Gem's explanations of it find the known mutagenic groups with a toxicophore AUC "
        f"of {mine['toxicophore_auc']:.2f} ({vs}; 0.5 = chance), in the shipped results."
    )


# ----------------------------------------------------------------------------- boxes


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[float, str], None]]:
    """An ``st.progress`` bar as an engine ``progress(fraction, message)`` callback."""
    bar = st.progress(0.0, text=label)

    def update(fraction: float, message: str = "") -> None:
        text = f"{label}: {message}" if message else label
        bar.progress(min(1.0, max(0.0, float(fraction))), text=text)

    try:
        yield update
    finally:
        bar.progress(1.0, text=f"{label}: done")


def _recorded_fit_words(wb: Workbench, took: float) -> str:
    """The recorded fit time with the machine it was measured on, beside this one's."""
    from gem_core.api import recorded_results

    recorded = recorded_results(wb.name, wb.target_name)
    machine = recorded.machine if recorded is not None else None
    threads = machine.threads if machine is not None else None
    device = (machine.device if machine is not None else None) or "cpu"
    where = device.upper() + (
        f" with {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    )
    return (
        f"In the recorded benchmark run (assets/results) this fit took {took:.0f} s on a "
        f"{where}; here it runs on {device_label(wb.device.type)} and takes longer while "
        f"the machine is busy with other work."
    )


def fit_offer(wb: Workbench, method: str, message: str, key: str) -> None:
    """Say that ``method`` needs a one-off fit and offer a button that fits it (then reruns)."""
    title = method_title(method)
    took = recorded_fit_seconds(wb.name, method, wb.target_name)
    if took is not None:
        message += f" {_recorded_fit_words(wb, took)}"
    st.info(message, icon=":material/hourglass_empty:")
    if st.button(f"Fit {title} now", key=key, icon=":material/play_arrow:"):
        try:
            with st.status(f"Fitting {title} on {wb.spec.title}…", expanded=True):
                with progress_bar(f"fitting {title}") as progress:
                    wb.explainer(method, progress)
        except Exception as exc:  # engine errors -> message box
            show_error(exc, f"Fitting {title} failed")
            return
        st.rerun()


def show_error(exc: BaseException, what: str = "") -> None:
    """An engine error as a message box (never a traceback; that goes to the server log)."""
    logging.getLogger("gem_app").warning("%s", what or "error", exc_info=exc)
    prefix = f"{what}: " if what else ""
    st.error(f"{prefix}{exc}", icon=":material/error:")


def show_reading(text: str, key: str) -> None:
    """The reading under a panel, in a keyed container (browser tests find it by its key)."""
    with st.container(key=key):
        st.markdown(f"**In words.** {text}")
