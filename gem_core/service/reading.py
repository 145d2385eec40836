"""A plain-language reading of one explanation, built from engine facts only.

:func:`read_explanation` asks the target and the explainers (no external service, no template
chemistry) and writes a few sentences a teacher or a chemist can read under an explanation:
the prediction, the K edges kept, whether the prediction survives on the explanation alone and
whether it changes without it, the toxicophore classes the explanation touches (molecules), how
many of its edges the distilled teacher keeps too, and on the synthetic sets how much of the
motif it covers. The same facts come back as a dict (the JSON export).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance

__all__ = ["Reading", "read_explanation"]


@dataclass
class Reading:
    """``facts`` (JSON-ready) and ``text`` (sentences) of one explanation."""

    facts: dict[str, Any]
    text: str


#: the distilled teacher (the Granger distillation against the model's prediction) in the words
#: of the reading: what it is to a chemist or a teacher, not its name in the code
TEACHER_IN_WORDS = "The slow, exact method Gem learns from"


def _pretty(name: str) -> str:
    return {"nonmutagen": "non-mutagen"}.get(name, name)


def _class(names: Sequence[str], c: int) -> str:
    return _pretty(names[c]) if c < len(names) else f"class {c}"


def read_explanation(
    model: Any,
    instance: Instance,
    method: str,
    scores: Tensor,
    k: int,
    class_names: Sequence[str] = (),
    mol: Any = None,
    teacher_scores: Optional[Tensor] = None,
    edge: str = "edge",
    compare_teacher: bool = True,
) -> Reading:
    """Facts and sentences for ``method``'s top-``k`` explanation of ``instance``.

    Args:
        model: the :class:`~gem_core.service.session.Workbench` of the target.
        scores: one score per pair of ``instance`` (the method's explanation).
        class_names: the dataset's class names (index = class).
        mol: the RDKit molecule of a molecule instance (atom ``k`` = node ``k``): toxicophores.
        teacher_scores: the distilled teacher's scores, when already computed; otherwise the
            registry's default teacher explains the instance here (skipped for the teacher itself).
        edge: "edge" or "bond".
        compare_teacher: say how many of the explanation's pairs the distilled teacher keeps
            (False: left out, as where its distillation would take seconds and was not asked
            for; ``facts`` then has no ``teacher``).
    """
    from gem_core.explainers import DEFAULT_TEACHER, Explanation, check_method, title

    method = check_method(method)
    explanation = Explanation(method, [scores], 0.0, [instance])  # checks one score per pair
    mask = explanation.topk_mask(0, k)
    kept = int(mask.sum())
    total = instance.num_pairs
    proba = model.predict_proba(
        [instance, instance, instance], [torch.ones(total, dtype=torch.bool), mask, ~mask]
    )
    whole, alone, without = (int(p.argmax()) for p in proba)
    facts: dict[str, Any] = {
        "method": method,
        "prediction": {"label": _class(class_names, whole), "probability": float(proba[0, whole])},
        "k": kept,
        f"{edge}s": total,
        "on_explanation": {
            "label": _class(class_names, alone),
            "probability": float(proba[1, alone]),
            "survives": alone == whole,
        },
        "without_explanation": {
            "label": _class(class_names, without),
            "probability": float(proba[2, without]),
            "changes": without != whole,
        },
    }
    name = title(method)
    p_whole = facts["prediction"]["probability"]
    lines = [
        f"The model predicts {facts['prediction']['label']} (p = {p_whole:.3f}). "
        f"{name} keeps {kept} of the {total} {edge}s."
    ]
    if kept >= total:
        lines.append(
            f"With K = {k} that is every {edge}: the explanation is the whole graph; "
            f"lower K to see which {edge}s matter most."
        )
    else:
        a = facts["on_explanation"]
        these = f"this one {edge}" if kept == 1 else f"these {kept} {edge}s"
        lines.append(
            f"On {these} alone it {'still ' if a['survives'] else ''}predicts "
            f"{a['label']} (p = {a['probability']:.3f})"
            + (
                ": the explanation is enough for the prediction."
                if a["survives"]
                else ": the explanation alone does not carry the prediction."
            )
        )
        w = facts["without_explanation"]
        them, are = ("it", "it is") if kept == 1 else ("them", "they are")
        lines.append(
            f"Without {them} it predicts {w['label']} (p = {w['probability']:.3f})"
            + (
                f": {are} necessary for it."
                if w["changes"]
                else ": the rest of the graph still carries the prediction."
            )
        )

    pairs = [tuple(p) for p in instance.pairs.t().tolist()]
    chosen = [pairs[j] for j in torch.nonzero(mask).view(-1).tolist()]
    if mol is not None:
        from gem_core.chemistry.toxicophores import _BY_NAME, match_toxicophores

        touched: list[dict[str, Any]] = []
        present: list[str] = []
        for cls, matches in match_toxicophores(mol).items():
            atoms = [set(t) for t in matches]
            in_tox = [p for p in pairs if any(p[0] in s and p[1] in s for s in atoms)]
            hit = [p for p in chosen if p in set(in_tox)]
            present.append(cls)
            if hit:
                touched.append(
                    {
                        "class": cls,
                        "title": _BY_NAME[cls].title,
                        f"{edge}s_in_explanation": len(hit),
                        f"{edge}s": len(in_tox),
                    }
                )
        facts["toxicophores"] = {"present": present, "touched": touched}
        if touched:
            lines.append(
                "It touches "
                + "; ".join(
                    f"the {t['title'].lower()} toxicophore ({t[f'{edge}s_in_explanation']} of its "
                    f"{t[f'{edge}s']} {edge}s)"
                    for t in touched
                )
                + "."
            )
        elif present:
            lines.append(
                "It touches none of the molecule's toxicophores ("
                + ", ".join(_BY_NAME[c].title.lower() for c in present)
                + ")."
            )
        else:
            lines.append("The molecule has none of the Kazius et al. toxicophores.")

    if method != DEFAULT_TEACHER and compare_teacher:
        if teacher_scores is None:
            teacher_scores = model.explain(DEFAULT_TEACHER, [instance])[0]
        t_mask = Explanation(DEFAULT_TEACHER, [teacher_scores], 0.0, [instance]).topk_mask(0, k)
        shared = int((mask & t_mask).sum())
        facts["teacher"] = {"method": DEFAULT_TEACHER, "shared": shared, "of": kept}
        # in plain words: the distilled teacher is "the slow, exact method Gem learns from"
        # (its precise name is in facts["teacher"] and on the How it works page)
        teacher = TEACHER_IN_WORDS
        lines.append(
            (
                f"{teacher} keeps this {edge} too."
                if shared
                else f"{teacher} does not keep this {edge}."
            )
            if kept == 1
            else f"{teacher} keeps {shared} of the same {kept} {edge}s."
        )

    if instance.motif_mask is not None and bool(instance.motif_mask.any()):
        motif = instance.motif_mask.bool()
        covered = int((mask & motif).sum())
        facts["motif"] = {"covered": covered, "of": int(motif.sum())}
        lines.append(f"It covers {covered} of the {int(motif.sum())} motif {edge}s.")
    return Reading(facts, " ".join(lines))
