"""What if these edges were gone? Evaluate edited copies of one instance in one batch.

The paper's Granger view, asked by the user: delete some edges (bonds), or nodes (atoms) with
their edges, and read the target's prediction, its loss against the prediction on the original
graph, the change in loss (for a single deleted edge exactly the distillation's Δ of that edge
with ``label_source="predicted"``) and every explainer's new scores.

A regressor (a user's model of a number) is asked the same way: each outcome holds its
``value``, and its loss is the squared change of the value from the original graph's (the
distillation's Δ of a regressor), so ``delta_loss`` is that squared change too.

Deleting edges keeps every node (as the distillation does); deleting a node removes it and its
edges. An edit that cuts a part off (the NO₂ of a nitroarene whose C–N bond is deleted) leaves
that part in the graph, where a graph-level model still reads it: each outcome names those
``detached`` nodes, so a front-end can say so and offer to delete them too. Scores of an edited
graph are reported per *original* pair (NaN for deleted pairs), so
an explanation before and after an edit compare position by position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from gem_core.data.instances import Instance
from gem_core.explainers import Explanation, check_method

__all__ = [
    "Edit",
    "EditOutcome",
    "EditError",
    "evaluate_edits",
    "parse_pair_list",
    "detached_nodes",
]


class EditError(ValueError):
    """An edit that names something the graph does not have (message for the user)."""


@dataclass(frozen=True)
class Edit:
    """Edges ``(u, v)`` and nodes to delete (instance numbering; order and direction free)."""

    remove_pairs: tuple[tuple[int, int], ...] = ()
    remove_nodes: tuple[int, ...] = ()

    @classmethod
    def of(cls, pairs: Iterable[Sequence[int]] = (), nodes: Iterable[int] = ()) -> "Edit":
        norm = sorted({(min(int(u), int(v)), max(int(u), int(v))) for u, v in pairs})
        return cls(tuple(norm), tuple(sorted({int(n) for n in nodes})))


@dataclass
class EditOutcome:
    """The target and the explainers on one edited graph.

    Attributes:
        edit: what was deleted.
        kept: per original pair, whether it is still there.
        probabilities: class probabilities on the edited graph (empty when ``error``).
        loss: cross-entropy against the prediction on the original graph.
        delta_loss: ``loss`` minus the loss on the original graph (the paper's Δ).
        explanations: method -> its one-instance :class:`Explanation` of the edited graph
            (one score per *kept* pair, carrying the edited instance).
        error: why this edit cannot be evaluated (disconnected target, no edge left), or None.
        detached: the nodes (original numbering) the edit cuts off from the main part of the
            graph (:func:`detached_nodes`); still in the edited graph.
        value: a regressor's value on the edited graph (None for a classifier, whose
            ``probabilities`` say it; a regressor's are empty); its ``loss`` is then the squared
            change from the value on the original graph.
    """

    edit: Edit
    kept: Tensor
    probabilities: list[float] = field(default_factory=list)
    loss: float = math.nan
    delta_loss: float = math.nan
    explanations: dict[str, Explanation] = field(default_factory=dict)
    error: Optional[str] = None
    detached: tuple[int, ...] = ()
    value: Optional[float] = None

    @property
    def scores(self) -> dict[str, Tensor]:
        """method -> one score per *original* pair (NaN where deleted), so explanations before
        and after an edit compare position by position."""
        out = {}
        for method, explanation in self.explanations.items():
            full = torch.full((self.kept.numel(),), math.nan, dtype=torch.float32)
            full[self.kept] = torch.as_tensor(explanation[0]).detach().float().cpu()
            out[method] = full
        return out

    @property
    def label(self) -> int:
        return int(max(range(len(self.probabilities)), key=lambda c: self.probabilities[c]))


def parse_pair_list(text: str) -> list[tuple[int, int]]:
    """``"3-7,4-9"`` -> ``[(3, 7), (4, 9)]``; a clear :class:`EditError` for anything else."""
    out = []
    for part in str(text).replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        ends = part.split("-")
        if len(ends) != 2 or not all(e.strip().isdigit() for e in ends):
            raise EditError(f"Cannot read {part!r} as a bond: write atom-index pairs like 3-7,4-9.")
        out.append((int(ends[0]), int(ends[1])))
    if not out:
        raise EditError("No bond given: write atom-index pairs like 3-7,4-9.")
    return out


def _outside_main_part(instance: Instance, kept: Tensor, alive: list[bool]) -> set[int]:
    """Live nodes outside the main part of the graph of the ``kept`` pairs: the explained
    node's connected component (node tasks), else the largest (ties: the lowest node)."""
    parent = list(range(instance.num_nodes))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v in instance.pairs[:, kept].t().tolist():
        parent[root(u)] = root(v)
    parts: dict[int, list[int]] = {}
    for i in range(instance.num_nodes):
        if alive[i]:
            parts.setdefault(root(i), []).append(i)
    if not parts:
        return set()
    t = instance.target
    main = (
        root(int(t))
        if t is not None and alive[int(t)]
        else min(parts, key=lambda r: (-len(parts[r]), parts[r][0]))
    )
    return {i for r, members in parts.items() if r != main for i in members}


def detached_nodes(
    instance: Instance, kept: Tensor, removed_nodes: Sequence[int] = ()
) -> tuple[int, ...]:
    """The nodes an edit (``kept`` pairs, ``removed_nodes``) cuts off from the main part of the
    graph (the explained node's part on node tasks, else the largest), in original numbering;
    nodes already apart in the unedited graph do not count."""
    alive = [True] * instance.num_nodes
    for n in removed_nodes:
        alive[int(n)] = False
    before = _outside_main_part(
        instance, torch.ones(instance.num_pairs, dtype=torch.bool), [True] * instance.num_nodes
    )
    return tuple(sorted(_outside_main_part(instance, kept.bool(), alive) - before))


def _check(instance: Instance, edit: Edit, noun: str) -> None:
    index = {tuple(p): j for j, p in enumerate(instance.pairs.t().tolist())}
    missing = [p for p in edit.remove_pairs if tuple(p) not in index]
    if missing:
        shown = ", ".join(f"{u}-{v}" for u, v in missing[:5])
        raise EditError(
            f"No {noun} between {shown} in this graph (its {noun}s are numbered as in "
            f"the edge table)."
        )
    bad = [n for n in edit.remove_nodes if not 0 <= n < instance.num_nodes]
    if bad:
        raise EditError(f"No node {bad[0]} in this graph (nodes 0-{instance.num_nodes - 1}).")


def _apply(
    instance: Instance, edit: Edit, edge: str
) -> tuple[Tensor, Optional[Instance], Optional[str]]:
    """``(kept, edited instance or None, error or None)``."""
    pairs = instance.pairs
    kept = torch.ones(instance.num_pairs, dtype=torch.bool)
    if edit.remove_pairs:
        drop = torch.tensor(edit.remove_pairs, dtype=torch.long).t()
        hit = (pairs.unsqueeze(2) == drop.unsqueeze(1)).all(0).any(1)
        kept &= ~hit
    nodes = torch.ones(instance.num_nodes, dtype=torch.bool)
    if edit.remove_nodes:
        nodes[list(edit.remove_nodes)] = False
        kept &= nodes[pairs[0]] & nodes[pairs[1]]
    t = instance.target
    if t is not None and not bool(nodes[t]):
        return kept, None, "The explained node itself cannot be deleted."
    if not bool(kept.any()):
        return kept, None, f"This edit leaves no {edge}: there is nothing left to predict on."
    if t is not None and not bool(((pairs[0] == t) | (pairs[1] == t))[kept].any()):
        return (
            kept,
            None,
            (
                f"This edit disconnects the explained node from the rest of its "
                f"graph: every {edge} it had is deleted."
            ),
        )
    edited = instance.subgraph(kept)
    if edit.remove_nodes:
        new_of_old = torch.cumsum(nodes.long(), 0) - 1
        edited = Instance(
            x=instance.x[nodes],
            pairs=new_of_old[edited.pairs],
            y=instance.y,
            target=None if t is None else int(new_of_old[t]),
            edge_attr=edited.edge_attr,
            dataset=instance.dataset,
            index=instance.index,
            node_ids=None if instance.node_ids is None else instance.node_ids[nodes],
            motif_mask=edited.motif_mask,
        )
    return kept, edited, None


def evaluate_edits(
    model: Any,
    instance: Instance,
    edits: Sequence[Edit],
    methods: Sequence[str] = (),
    edge: str = "edge",
) -> tuple[EditOutcome, list[EditOutcome]]:
    """The original graph and every edit of it: one batched forward (and one batched explain
    per method) for all of them.

    Args:
        model: a :class:`~gem_core.service.session.Workbench` (its target and explainers are used).
        instance: the graph to edit.
        edits: the edits; an edit naming a missing pair or node raises :class:`EditError`.
        methods: explainers whose scores to compute on every edited graph.
        edge: the word for an edge in messages ("bond" for molecules).

    Returns:
        ``(original, outcomes)``: ``original`` is the unedited graph, ``outcomes`` one per edit.
    """
    methods = [check_method(m) for m in methods]
    for e in edits:
        _check(instance, e, edge)
    applied = [_apply(instance, e, edge) for e in [Edit(), *edits]]
    live = [(i, inst) for i, (_, inst, err) in enumerate(applied) if err is None]
    out = [
        EditOutcome(
            e,
            kept,
            error=err,
            detached=() if err else detached_nodes(instance, kept, e.remove_nodes),
        )
        for e, (kept, _, err) in zip([Edit(), *edits], applied)
    ]
    predicted: Tensor
    if getattr(model, "regression", False):  # a model of a number: values, squared change
        values = model.predict_values([inst for _, inst in live])
        base = float(values[0])  # live[0] is the original graph
        for (i, _), v in zip(live, values.tolist()):
            o = out[i]
            o.value = float(v)
            o.loss = o.delta_loss = (float(v) - base) ** 2
        predicted = values
    else:
        proba = model.predict_proba([inst for _, inst in live])
        label = int(proba[0].argmax())  # live[0] is the original graph
        base_loss = -math.log(max(float(proba[0, label]), 1e-300))
        for (i, _), p in zip(live, proba):
            o = out[i]
            o.probabilities = [float(v) for v in p]
            o.loss = -math.log(max(float(p[label]), 1e-300))
            o.delta_loss = o.loss - base_loss
        predicted = proba.argmax(-1)  # an explainer that reads the prediction (Gem) gets it
    for method in methods:
        explained = model.explain(method, [inst for _, inst in live], predicted=predicted)
        for (i, inst), s in zip(live, explained):
            out[i].explanations[method] = Explanation(
                method, [s], explained.ms_per_instance, [inst]
            )
    return out[0], out[1:]
