"""The registry: every explanation method of the engine, one row each.

A row names the method, its title, how to build it from an :class:`ExplainerContext`, whether it
must be fitted before it explains, whether it explains a whole batch in one call, whether
``reproduce`` measures it by default, and its settings (keyword arguments of its constructor).
The CLI (``--method``, ``reproduce --methods``), the session (:class:`~gem_core.service.session.Workbench`)
and the app's pages read the methods from here, so a new method is one module and one row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: the names load without torch (the CLI's --method choices)
    from gem_core.explainers.base import Explainer, ExplainerContext


class UnknownMethodError(ValueError):
    """A method name that is not in the registry."""


@dataclass(frozen=True)
class MethodSpec:
    """One registry row.

    Attributes:
        name: the method's key (CLI, JSON, cache keys).
        title: how people read it (tables, charts, panels).
        build: ``(context, **settings) -> Explainer``.
        needs_fit: it learns from training instances before it explains (a one-off cost).
        batched: one call explains many instances at once (timed as warm repeated calls).
        in_reproduce: measured by ``reproduce`` unless ``--methods`` says otherwise.
        settings: the keyword arguments ``build`` gets (documented defaults of this engine).
        description: one line for ``--help`` and the app.
        teacher: the method whose explanations this one learns to imitate (shown beside it, so
            a user sees when the fast explainer departs from the slow one), or None.
        max_test_instances: ``reproduce`` measures it on a fixed, seeded subsample of at most
            this many test instances (a method of seconds per instance), or None: all of them.
        wait_note: for a method that makes people wait (seconds per instance), what to tell
            them before they pick it (the app shows it); empty for the others.
        distils: it explains by distilling each instance, one forward pass of the target per
            edge in sequence (a second or more on a 1,500-edge instance; cached per split).
        classifiers_only: its objective reads class probabilities (a regressor's one value
            would give it nothing to optimise), so a regression model refuses it.
    """

    name: str
    title: str
    build: Callable[..., Explainer]
    needs_fit: bool
    batched: bool
    in_reproduce: bool
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    teacher: Optional[str] = None
    max_test_instances: Optional[int] = None
    wait_note: str = ""
    distils: bool = False
    classifiers_only: bool = False

    def create(self, context: ExplainerContext, **overrides: Any) -> Explainer:
        """A new, unfitted explainer of this method for ``context``."""
        return self.build(context, **{**self.settings, **overrides})


def _gem(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.gem import GemExplainer

    return GemExplainer(ctx, **settings)


def _distilled(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.distilled import DistilledExplainer

    return DistilledExplainer(ctx, **settings)


def _gnnexplainer(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.gnnexplainer import GNNExplainerBaseline

    return GNNExplainerBaseline(ctx.target.model, ctx.task, device=str(ctx.device), **settings)


def _pgexplainer(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.pgexplainer import PGExplainerBaseline

    return PGExplainerBaseline(ctx.target.model, ctx.task, device=str(ctx.device), **settings)


def _integrated_gradients(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.integrated_gradients import IntegratedGradientsExplainer

    return IntegratedGradientsExplainer(
        ctx.target.model, ctx.task, device=str(ctx.device), **settings
    )


def _message_passing_layers(model: Any) -> int:
    """How many message-passing layers a PyG model has (0 when it is not a PyG model)."""
    from torch_geometric.nn import MessagePassing

    return sum(isinstance(m, MessagePassing) for m in model.modules())


def _subgraphx(
    ctx: ExplainerContext,
    num_hops: Optional[int] = None,
    max_nodes: Optional[int] = None,
    **settings: Any,
) -> Explainer:
    """SubgraphX; L defaults to the target's message-passing layers (else the dataset's hops), the
    node budget to the dataset's smallest K (at least 3): a connected subgraph of K nodes has at
    least K - 1 pairs, so the chosen subgraph fills about the smallest top-K evaluated."""
    from gem_core.explainers.subgraphx import SubgraphXExplainer

    hops = num_hops or _message_passing_layers(ctx.target.model) or ctx.spec.num_hops
    budget = max_nodes or max(3, min(ctx.spec.k_grid))
    return SubgraphXExplainer(
        ctx.black_box, num_hops=hops, max_nodes=budget, task=ctx.task, **settings
    )


def _random(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.random_scores import RandomExplainer

    return RandomExplainer(task=ctx.task, **settings)


def _gem_check(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.gem import CheckedGemExplainer

    return CheckedGemExplainer(ctx, **settings)


def _random_check(ctx: ExplainerContext, **settings: Any) -> Explainer:
    from gem_core.explainers.random_scores import CheckedRandomExplainer

    return CheckedRandomExplainer(ctx, **settings)


_ROWS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "gem",
        "Gem",
        _gem,
        needs_fit=True,
        batched=True,
        in_reproduce=True,
        description="Gem: a graph auto-encoder trained on distilled Granger-causal "
        "explanations; one forward pass per batch, the target not asked "
        "when it explains",
        teacher="distilled_predicted",
    ),
    MethodSpec(
        "gem_check",
        "Gem + check",
        _gem_check,
        needs_fit=True,
        batched=True,
        in_reproduce=True,
        description="Gem's ranking, then a search that asks the target at explain time "
        "which of Gem's next edges keeps its prediction (batched forwards "
        "per position: not amortized)",
        teacher="distilled_predicted",
    ),
    MethodSpec(
        "distilled",
        "Distilled teacher (true label)",
        _distilled,
        needs_fit=False,
        batched=False,
        in_reproduce=True,
        settings={"label_source": "true"},
        distils=True,
        description="the distillation Gem learns from (Δ loss per edge against the true "
        "label, greedy pruning); slow, needs labels",
    ),
    MethodSpec(
        "distilled_predicted",
        "Distilled teacher (predicted label)",
        _distilled,
        needs_fit=False,
        batched=False,
        in_reproduce=True,
        settings={"label_source": "predicted"},
        distils=True,
        description="the same distillation against the target's own prediction: what a "
        "label-free explainer of the model can imitate",
    ),
    MethodSpec(
        "gnnexplainer",
        "GNNExplainer",
        _gnnexplainer,
        needs_fit=False,
        batched=False,
        in_reproduce=True,
        settings={"epochs": 100, "lr": 0.01},
        description="PyG's GNNExplainer objective, one mask per instance, all of a batch "
        "optimised together",
        classifiers_only=True,
    ),
    MethodSpec(
        "pgexplainer",
        "PGExplainer",
        _pgexplainer,
        needs_fit=True,
        batched=True,
        in_reproduce=True,
        settings={"epochs": 30, "lr": 0.003},
        description="PyG's PGExplainer, an edge MLP trained on the training instances",
        classifiers_only=True,
    ),
    MethodSpec(
        "integrated_gradients",
        "Integrated Gradients",
        _integrated_gradients,
        needs_fit=False,
        batched=False,
        in_reproduce=True,
        settings={"n_steps": 50},
        description="Captum's Integrated Gradients on the edge mask (as PyG's "
        "CaptumExplainer), all instances and path steps of a batch together",
    ),
    MethodSpec(
        "subgraphx",
        "SubgraphX",
        _subgraphx,
        needs_fit=False,
        batched=False,
        in_reproduce=False,
        settings={
            "rollout": 20,
            "c_puct": 10.0,
            "expand_atoms": 12,
            "sample_num": 100,
            "time_budget_s": 10.0,
            "seed": 0,
            "num_hops": None,
            "max_nodes": None,
        },
        description="SubgraphX (Yuan et al. 2021): Monte-Carlo tree search over connected "
        "subgraphs scored by Shapley values; seconds per instance",
        max_test_instances=100,
        wait_note="SubgraphX takes seconds per explanation (a tree search with Shapley "
        "values, stopped after 10 s), where Gem takes a fraction of a "
        "millisecond",
        classifiers_only=True,
    ),
    MethodSpec(
        "random",
        "Random",
        _random,
        needs_fit=False,
        batched=True,
        in_reproduce=True,
        settings={"seed": 0},
        description="uniform random scores (the floor)",
    ),
    MethodSpec(
        "random_check",
        "Random + check",
        _random_check,
        needs_fit=False,
        batched=True,
        in_reproduce=True,
        settings={"seed": 0},
        description="uniform random scores put through the same explain-time search "
        "as Gem + check: the control of what the search does alone",
    ),
)

REGISTRY: Mapping[str, MethodSpec] = MappingProxyType({row.name: row for row in _ROWS})
#: every method name, in the registry's order (tables, charts and selectors follow it)
METHODS: tuple[str, ...] = tuple(REGISTRY)
#: what ``reproduce`` measures by default
REPRODUCE_METHODS: tuple[str, ...] = tuple(m for m in METHODS if REGISTRY[m].in_reproduce)
#: the explanations a label-free explainer is compared with: the distillation against the
#: target's own prediction (Gem's teacher)
DEFAULT_TEACHER: str = next(row.teacher for row in _ROWS if row.teacher)
#: methods that explain many instances in one call (the ones a library screen can use)
BATCH_METHODS: tuple[str, ...] = tuple(m for m in METHODS if REGISTRY[m].batched)


def check_method(method: str) -> str:
    """The registry name of ``method`` (case-insensitive); a clear error for unknown names."""
    key = str(method).strip().lower()
    if key not in REGISTRY:
        raise UnknownMethodError(f"Unknown method {method!r}. Choose one of: {', '.join(METHODS)}.")
    return key


def method_spec(method: str) -> MethodSpec:
    """The registry row of ``method``."""
    return REGISTRY[check_method(method)]


def title(method: str) -> str:
    """The human-readable title of ``method`` (the name itself for unknown names)."""
    row = REGISTRY.get(str(method).strip().lower())
    return row.title if row is not None else str(method)
