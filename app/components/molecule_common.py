"""What both parts of the Molecule page share: the model being explained (a Mutagenicity target,
or a model trained on the user's table), class names as a chemist reads them, toxicophores, fit
offers and literal Markdown."""
from __future__ import annotations

import string

import streamlit as st

from gem_core.api import (CLASS_NAMES, DATASET, ModelUnavailableError, Workbench, get_spec,
                          molecule_model, target_checkpoint_available)
from messages import DATA_HELP, fit_offer, progress_bar, show_error
from state.engine_cache import probabilities_with, spinner_on_first, values_with
from state.selection import molecule_target, molecule_user_model
from theme import class_title, method_title

SPEC = get_spec(DATASET)

MUTAGEN = CLASS_NAMES.index("mutagen")


def display(label: str) -> str:
    """A class as a chemist reads it ("non-mutagen"; the engine's JSON keeps "nonmutagen")."""
    return class_title(label)


def load_model(device: str) -> Workbench | None:
    """The workbench the page explains with, or None with a message: the user's model chosen in
    the sidebar, else the Mutagenicity workbench of the sidebar's target (trained on first
    use)."""
    user = molecule_user_model()
    if user is not None:
        try:
            with spinner_on_first(("model", device, user), f"Loading the model {user}…"):
                return molecule_model(device, model=user)
        except Exception as exc:  # deleted meanwhile, unreadable: one line, never a traceback
            show_error(exc, f"Cannot load the model {user}")
        return None
    try:
        if target_checkpoint_available(molecule_target()):
            with spinner_on_first(("target", device, molecule_target()),
                                  "Loading the Mutagenicity model…"):
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


# ----------------------------------------------------------------------------- the model's words


def is_user_model(model: Workbench) -> bool:
    """Whether ``model`` was trained on a user's table (not a Mutagenicity target)."""
    return model.name != DATASET


def regression(model: Workbench) -> bool:
    """Whether ``model`` predicts a number (a user's regression model), not classes."""
    return is_user_model(model) and bool(model.regression)


def class_names(model: Workbench) -> tuple[str, ...]:
    """The model's classes in its order (Mutagenicity's: mutagen, nonmutagen; a regressor: its
    outcome's name)."""
    return tuple(model.spec.class_names) if is_user_model(model) else CLASS_NAMES


def first_class(model: Workbench) -> str:
    """The class whose probability the page shows (mutagen; a user model's first class), or a
    regressor's outcome, as a chemist reads it."""
    return display(class_names(model)[0])


def focus_words(model: Workbench) -> str:
    """What the page's number is: "P(mutagen)", "P(active)", or a regressor's outcome "logp"."""
    return first_class(model) if regression(model) else f"P({first_class(model)})"


def model_title(model: Workbench) -> str:
    """The model in a sentence: "the Mutagenicity model", "the model ames_2024"."""
    return f"the model {model.name}" if is_user_model(model) else "the Mutagenicity model"


def model_key(model: Workbench) -> str:
    """The model's part of the page's cache keys: the Mutagenicity target's name; a user's
    model's name and its checkpoint's digest (a model deleted and trained again under the
    same name is another model)."""
    if not is_user_model(model):
        return molecule_target()
    return f"user:{model.name}:{model.target().digest[:16]}"


def offer_fits(model: Workbench, waiting: list[str]) -> None:
    """A one-off fit offer for each method of ``waiting``."""
    for m in waiting:
        fit_offer(model, m, f"{method_title(m)} is not fitted for {model_title(model)} yet (a "
                            f"one-off fit on the training molecules, cached afterwards).",
                  key=f"mol_fit_{m}")


def on_explanation_alone(model: Workbench, instance, mask, label: int,
                         key: tuple) -> tuple[str, float]:
    """The sentence "P(mutagen) = … on these K bonds alone: still … / the prediction flips to
    …" of one explanation (``mask`` over ``instance``'s bonds; ``label`` the prediction on the
    whole molecule), and the probability of ``label`` on the explanation alone. A regressor's:
    "logp = … on these K bonds alone, … without them (… on the whole molecule)", and its value
    on the explanation alone. Both tabs of the page say it the same way. ``key`` names the
    molecule and the model (the numbers are computed once per server process)."""
    kept = int(mask.sum())
    these = "this one bond" if kept == 1 else f"these {kept} bonds"
    if regression(model):
        whole, alone, without = values_with(key, model, instance, mask)
        them = "it" if kept == 1 else "them"
        return (f"{first_class(model)} = **{alone:.4g}** on {these} alone, **{without:.4g}** "
                f"without {them} ({whole:.4g} on the whole molecule).", alone)
    names = class_names(model)
    p_sub = probabilities_with(key, model, instance, mask)
    sub_label = max(range(len(p_sub)), key=p_sub.__getitem__)
    verdict = (f"still {display(names[sub_label])}" if sub_label == label else
               f"the prediction flips to **{display(names[sub_label])}**")
    return (f"{focus_words(model)} = **{p_sub[MUTAGEN]:.3f}** on {these} alone: {verdict}.",
            p_sub[label])


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
