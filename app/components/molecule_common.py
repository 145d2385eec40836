"""What both parts of the Molecule page share: the Mutagenicity model, class names as a chemist
reads them, toxicophores, fit offers and literal Markdown."""
from __future__ import annotations

import string

import streamlit as st

from gem_core.api import (CLASS_NAMES, DATASET, ModelUnavailableError, Workbench, get_spec,
                          molecule_model, target_checkpoint_available)
from messages import DATA_HELP, fit_offer, progress_bar, show_error
from state.engine_cache import probabilities_with
from state.selection import molecule_target
from theme import class_title, method_title

SPEC = get_spec(DATASET)

MUTAGEN = CLASS_NAMES.index("mutagen")


def display(label: str) -> str:
    """A class as a chemist reads it ("non-mutagen"; the engine's JSON keeps "nonmutagen")."""
    return class_title(label)


def load_model(device: str) -> Workbench | None:
    """The Mutagenicity workbench of the sidebar's target (trained on first use), or None
    with a message."""
    try:
        if target_checkpoint_available(molecule_target()):
            with st.spinner("Loading the Mutagenicity model…"):
                return molecule_model(device, target=molecule_target())
        with st.status("Training the Mutagenicity model (first use, minutes)…",
                       expanded=True):
            with progress_bar("training") as progress:
                return molecule_model(device, progress, target=molecule_target())
    except ModelUnavailableError as exc:
        st.error(str(exc), icon=":material/error:")
        st.caption(DATA_HELP)
    except Exception as exc:
        show_error(exc, "Cannot load the Mutagenicity model")
    return None


def offer_fits(model: Workbench, waiting: list[str]) -> None:
    """A one-off fit offer for each method of ``waiting``."""
    for m in waiting:
        fit_offer(model, m, f"{method_title(m)} is not fitted for the Mutagenicity model yet (a "
                            f"one-off fit on the training molecules, cached afterwards).",
                  key=f"mol_fit_{m}")


def on_explanation_alone(model: Workbench, instance, mask, label: int,
                         key: tuple) -> tuple[str, float]:
    """The sentence "P(mutagen) = … on these K bonds alone: still … / the prediction flips to
    …" of one explanation (``mask`` over ``instance``'s bonds; ``label`` the prediction on the
    whole molecule), and the probability of ``label`` on the explanation alone. Both tabs of
    the page say it the same way. ``key`` names the molecule and the model (the probabilities
    are computed once per server process)."""
    p_sub = probabilities_with(key, model, instance, mask)
    sub_label = max(range(len(p_sub)), key=p_sub.__getitem__)
    verdict = (f"still {display(CLASS_NAMES[sub_label])}" if sub_label == label else
               f"the prediction flips to **{display(CLASS_NAMES[sub_label])}**")
    kept = int(mask.sum())
    these = "this one bond" if kept == 1 else f"these {kept} bonds"
    return f"P(mutagen) = **{p_sub[MUTAGEN]:.3f}** on {these} alone: {verdict}.", p_sub[label]


def toxicophores(mol) -> dict:
    """The molecule's toxicophore classes (titles) and bonds (atom pairs), from the engine."""
    from gem_core.api import TOXICOPHORES, match_toxicophores, toxicophore_bond_mask

    titles = {t.name: t.title for t in TOXICOPHORES}
    pairs = mol.instance.pairs
    mask = toxicophore_bond_mask(mol.mol, pairs)
    return {"classes": [titles[c] for c in match_toxicophores(mol.mol)],
            "pairs": [tuple(pairs[:, j].tolist()) for j in range(pairs.size(1)) if mask[j]]}


def literal(text: str) -> str:
    """``text`` for a Markdown element, shown as typed (every ASCII punctuation escaped)."""
    return "".join("\\" + c if c in string.punctuation else c for c in str(text))
