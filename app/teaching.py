"""The distillation of one instance, step by step, and the words of the "How it works" page.

The engine's :mod:`gem_core.gem.distill` is batched and returns only the outcome; teaching needs every
intermediate graph. :func:`greedy_trace` gets them from the reference distillation
(:func:`gem_core.gem.distill.reference.reference_distill_one`, paper Appendix C) through its
``on_step`` hook, so the page shows the engine's own steps; this module only presents them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from gem_core.api import TIE_TOL, GreedyStep, Instance, reference_distill_one


@dataclass
class Trace:
    """Δ of every edge, the full-graph loss, the label, and the greedy steps in order."""

    delta: Tensor
    full_loss: float
    label: int
    steps: list[GreedyStep]
    weights: Tensor
    kept: Tensor


def greedy_trace(instance: Instance, black_box, connected: bool, tol: float = TIE_TOL) -> Trace:
    """Δ of each edge, then the greedy pruning with every step recorded (against the true label)."""
    steps: list[GreedyStep] = []
    result = reference_distill_one(
        instance, black_box, connected, "true", tol, on_step=steps.append
    )
    return Trace(result.delta, result.full_loss, result.label, steps, result.weights, result.kept)


# ----------------------------------------------------------------------------- wording


def fmt_change(before: float, after: float) -> tuple[str, str]:
    """Two losses with just enough decimals that a change shows (0.00041 → 0.00043, not
    0.0004 → 0.0004); scientific notation when even 10 decimals cannot tell them apart."""
    for decimals in range(4, 11):
        a, b = f"{before:.{decimals}f}", f"{after:.{decimals}f}"
        if a != b or before == after:
            return a, b
    return f"{before:.3e}", f"{after:.3e}"


def fmt_small(value: float) -> str:
    """A weight or Δ readable at any size: 3 significant digits below 0.001, else 4 decimals."""
    return f"{value:.3g}" if value != 0 and abs(value) < 1e-3 else f"{value:.4f}"


_TARGETS = {
    "weights": "the distilled weights, divided by the largest (the paper's targets)",
    "graded": "how often each edge is in the distilled top-K explanation over {ks}",
    "mix": "the average of the distilled weights and how often each edge is in the distilled "
    "top-K over {ks}",
    "graded+add": "how often each edge is in the distilled top-K over {ks}, and, "
    "for the edges outside it, how little adding them back disturbs the "
    "prediction",
}


def describe_gem(
    spec, target: str = "paper", molecule_words: bool = False, checked: bool = False
) -> str:
    """What Gem learns and reads for a dataset's target, from the settings the engine uses;
    ``molecule_words``: atoms and bonds instead of nodes and edges (the Molecule page);
    ``checked``: Gem + check, the separate method whose explain-time search asks the model."""
    alone, check = _describe_gem(spec, target)
    text = (
        f"Gem + check starts from Gem's ranking. {alone} {check.strip()}"
        if checked
        else alone
        + (
            " Gem + check, a separate explainer beside it, lets the model search "
            "Gem's ranking at explain time."
            if check
            else ""
        )
    )
    if molecule_words:
        for graph_word, chem_word in (
            (" an edge", " a bond"),
            ("edge", "bond"),
            ("node", "atom"),
            ("whole graph", "whole molecule"),
            ("per instance", "per molecule"),
        ):
            text = text.replace(graph_word, chem_word)
    return text


def _describe_gem(spec, target: str) -> tuple[str, str]:
    """(Gem: what it learns and how it explains in one pass; the explain-time search of Gem +
    check, empty where the settings have none)."""
    from gem_core.api import check_plan, dataset_settings

    settings = dataset_settings(spec, target)
    teacher, inputs = settings.teacher, settings.inputs
    budgets = settings.budgets(spec.k_grid)
    if budgets == tuple(spec.k_grid):
        ks = f"the K grid ({', '.join(map(str, budgets))})"
    elif len(budgets) > 2 and budgets == tuple(range(budgets[0], budgets[-1] + 1)):
        ks = (
            f"every K from {budgets[0]} to {budgets[-1]}, so it also learns which edges of "
            f"the smallest explanation matter most"
        )
    else:
        ks = f"K = {', '.join(map(str, budgets))}"
    labels = (
        "each node's hop distance to the explained node"
        if spec.task == "node"
        else "Weisfeiler-Lehman colours of the nodes (their structural roles)"
    )
    if inputs.degree_features:
        labels += " and its degree"
    if inputs.wl_edge_labels:
        labels += ", refined with the bond types"
    if inputs.edge_features:
        labels += " and each node's count of single, double and triple bonds"
    decoder = (
        "scores an edge with the inner product of its two nodes' embeddings"
        if settings.network.decoder == "inner"
        else "scores an edge with the inner product of its two nodes' embeddings plus a small "
        "network on the pair" + (" and its bond type" if inputs.edge_features else "")
    )
    against = (
        "the model's own prediction" if teacher.label_source == "predicted" else "the true label"
    )
    text = (
        f"Gem is a graph auto-encoder of 3 GCN layers that reads {labels}, beside the "
        f"nodes' own features, and {decoder}. It learns "
        f"{_TARGETS[teacher.kind.value].format(ks=ks)}, distilled against {against}"
    )
    if teacher.topk_policy == "refine":
        text += ", the top-K cut by the loss"
    text += "."
    if teacher.necessity_lead:
        text += (
            f" Inside the smallest explanation, its first {teacher.necessity_lead} edges "
            f"are the ones whose deletion, one after another, most shakes the model's "
            f"prediction (what the field's necessity score tests: delete the top edges, does "
            f"the prediction change?)."
        )
    if inputs.condition_on_prediction:
        text += (
            f" It also reads the class the model predicts, so it can explain "
            f"{spec.prediction_phrase}."
        )
    text += (
        " After training it never calls the model to explain: one forward pass of the "
        "auto-encoder per batch."
        if not inputs.condition_on_prediction
        else " Explaining a batch is one forward pass of the model (for its prediction) and one "
        "of the auto-encoder."
    )
    if not settings.asks_target:
        return text, ""
    plan = check_plan(settings, spec.k_grid)
    ordered = ""
    if plan.lead:
        ordered = (
            f" When it explains, the model itself orders the first "
            f"{plan.lead} edges of Gem's smallest explanation (K = "
            f"{plan.lead_within}): one at a time, the edge whose deletion, with those "
            f"before it, most shakes its prediction (under both ways of judging), so the "
            f"explanation's first edges are the ones its prediction most depends on."
        )
    if not plan.rule.asks_target:
        return text, ordered.strip() + (" That takes a few small batched passes of the model.")
    where = f"from edge {plan.start + 1} on" if plan.start else "from the first edge on"
    rule = plan.rule.summary
    if plan.late is not None and plan.late[1] is not plan.rule:
        rule += (
            f"; from K = {plan.late[0]} on, where the smallest "
            f"explanation is already decided, it {plan.late[1].summary}"
        )
    backward = ""
    if plan.backward:
        at_ks = ", ".join(str(k) for _, k in plan.backward)
        backward = (
            f" Where the explanation at K = {at_ks} still "
            f"does not hold, the model is asked the other way round too: starting from "
            f"the whole graph, the edges after the previous K are taken away a few at a "
            f"time, each time those whose loss shakes the prediction least, until K "
            f"are left; if the prediction holds on those, they become that explanation."
        )
    return text, ordered.strip() + (
        f" Then the model checks Gem's ranking, {where} up to K = {plan.stop}: of Gem's next "
        f"{plan.width} edges it {rule}; the prediction holds when the model, shown "
        f"only the edges so far, still predicts what it predicts on the whole graph, whether "
        f"the nodes left without an edge stay or go.{backward} Explaining a batch is one "
        f"forward pass of the auto-encoder and a few small batched passes of the model per "
        f"edge checked, milliseconds per instance."
    )
