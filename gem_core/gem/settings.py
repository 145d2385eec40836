"""Every setting of Gem in one validated value: :class:`GemSettings`.

What Gem learns from (the kind of training target, the top-K rule and budgets behind it, the
label the distillation is computed against, whether Gem reads the target's prediction) and how
its auto-encoder is built and trained (learning rate, widths, epochs, decoder, input labels …).
The registry's Gem, the PyG adapter and the ``tune`` sweeps all fit through
:mod:`gem_core.gem.pipeline` with one of these.

Per-dataset and per-target choices are rows, not fields: a
:class:`~gem_core.data.config.DatasetSpec` and its :class:`~gem_core.data.config.TargetConfig`
each carry a plain mapping ``gem`` of overrides, and :meth:`GemSettings.for_dataset` merges the
defaults, the dataset's row and the target's row into one validated value. Options with a fixed
set of values are ``str`` enums
(``Decoder("mlp")``, ``Decoder.mlp == "mlp"``), in the style of PyG's
``torch_geometric.explain.config``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, Union

from gem_core.data.config import DatasetSpec, check_k, target_config
from gem_core.data.protocol import PROTOCOLS
from gem_core.gem.checked_ranking import CHECK_RULES
from gem_core.gem.distill import LABEL_SOURCES, TOPK_POLICIES


class _Choice(str, Enum):
    """A setting with a fixed set of string values; ``str()`` is the value itself."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


class TargetKind(_Choice):
    """What the auto-encoder learns (:func:`gem_core.gem.training_targets.explainer_targets`)."""

    weights = "weights"
    graded = "graded"
    mix = "mix"
    graded_add = "graded+add"
    blend = "blend"


#: the top-K rule of the distilled masks behind ``graded`` targets: one member per rule of the
#: distillation (:data:`gem_core.gem.distill.TOPK_POLICIES`: nosplit, exact, paper, refine,
#: sufficient)
TopKPolicy = _Choice("TopKPolicy", [(p, p) for p in TOPK_POLICIES], module=__name__)
#: the label Gem's training distillations are computed against: one member per label source of
#: the distillation (:data:`gem_core.gem.distill.LABEL_SOURCES`: true, predicted)
LabelSource = _Choice("LabelSource", [(s, s) for s in LABEL_SOURCES], module=__name__)
#: the evaluation protocol the ``sufficient`` top-K rule judges its copies by: one member per
#: protocol of :mod:`gem_core.data.protocol` (keep_nodes, drop_isolated)
EvalProtocol = _Choice("EvalProtocol", [(p, p) for p in PROTOCOLS], module=__name__)


class Decoder(_Choice):
    """Gem's pair scorer: the inner product (the paper's) or inner product plus an MLP."""

    inner = "inner"
    mlp = "mlp"


#: how the target checks Gem's ranking at explain time (:mod:`gem_core.gem.checked_ranking`):
#: one of its CHECK_RULES (off, repair, best, search, sustain, climb)
CheckRule = _Choice("CheckRule", [(r, r) for r in CHECK_RULES], module=__name__)
#: the check's rule from the smallest K of the dataset's grid on: ``same`` (``check``'s own)
#: or another rule
LateCheckRule = _Choice(
    "LateCheckRule",
    [("same", "same"), *[(r, r) for r in CHECK_RULES if r != "off"]],
    module=__name__,
)

#: where the check also searches backwards (:mod:`gem_core.gem.checked_ranking`): ``off``, at
#: every K of the dataset's grid (``grid``) or at those above the smallest (``late``: the
#: smallest explanation, whose stability is measured, stays as the check grows it)
BackwardCheck = _Choice("BackwardCheck", [(b, b) for b in ("off", "grid", "late")], module=__name__)

_CHOICES: dict[str, type[_Choice]] = {
    "target_kind": TargetKind,
    "topk_policy": TopKPolicy,
    "label_source": LabelSource,
    "decoder": Decoder,
    "protocol": EvalProtocol,
    "check": CheckRule,
    "check_late": LateCheckRule,
    "check_backward": BackwardCheck,
}
_BOOLS = (
    "connected_growth",
    "condition_on_prediction",
    "decoder_bias",
    "degree_features",
    "wl_edge_labels",
    "edge_features",
)
_POSITIVE_INTS = (
    "batch_size",
    "max_epochs",
    "patience",
    "num_hops",
    "wl_rounds",
    "max_colors",
    "ensemble",
    "check_width",
)
_NON_NEGATIVE = ("kl_weight", "weight_decay", "necessity_weight")
_NON_NEGATIVE_INTS = ("necessity_lead", "check_lead")

#: the auto-encoder's hyperparameters (keyword arguments of
#: :class:`~gem_core.gem.autoencoder.GemAutoEncoder`), in its order
AUTOENCODER_FIELDS = (
    "lr",
    "hidden",
    "batch_size",
    "max_epochs",
    "patience",
    "kl_weight",
    "weight_decay",
    "num_hops",
    "wl_rounds",
    "max_colors",
    "decoder_bias",
    "decoder",
    "degree_features",
    "wl_edge_labels",
    "edge_features",
    "ensemble",
    "seed",
)
# in every saved Gem's key, whatever their value (the settings of the first shipped explainers)
_ALWAYS_KEYED = ("lr", "num_hops", "max_epochs")


@dataclass(frozen=True)
class GemSettings:
    """Gem's settings, validated at construction (a bad value raises a one-line ``ValueError``
    naming the field).

    Attributes:
        target_kind: what the auto-encoder learns: ``weights`` (normalised greedy weights, the
            paper), ``graded`` (mean of the distilled top-K masks over :attr:`target_ks`),
            ``mix`` (the average of both), ``graded+add`` or ``blend`` (the average of
            ``graded`` under :attr:`topk_policy` and ``graded`` under the ``sufficient`` rule:
            what removal keeps and what alone keeps the prediction).
        topk_policy: top-K rule of the distilled masks ``graded`` targets are built from: the
            literal Appendix C rule (``paper``), the loss-driven ``refine``, ``nosplit`` or
            ``exact``, or ``sufficient`` (grow each explanation by the pair that best keeps the
            label, judged under :attr:`protocol`).
        protocol: the evaluation protocol Gem is taught for (``keep_nodes``: deleted edges
            leave their nodes; ``drop_isolated``: nodes left without an edge are dropped, as
            GNNX-Bench judges); read by the ``sufficient`` rule and :attr:`necessity_lead`.
        connected_growth: the ``sufficient`` rule grows connected explanations when the
            distillation's connectivity rule is on (False: it may pick edges anywhere).
        necessity_weight: the ``sufficient`` rule's weight λ of necessity: a candidate pair's
            loss is ``CE(f(S), y) − λ · log(1 − p_y(f(G \\ S)))`` (0: sufficiency alone).
        necessity_lead: how many pairs of each training target are ranked first by greedy
            necessity (:mod:`gem_core.gem.necessity_order`): within the targets' top-K set at
            the smallest K (the teacher's explanation there), the pair whose deletion most raises
            the loss of the target's
            prediction (judged under :attr:`protocol`), then the next with it deleted, … The
            top-K sets the targets teach stay the same; 0: off.
        target_ks: the budgets K whose top-K masks the ``graded`` targets average (empty: the
            dataset's K grid).
        label_source: distil against the ``true`` label (the paper) or the target's
            ``predicted`` class (which an explainer of the model can imitate).
        condition_on_prediction: Gem reads the target's predicted class (one-hot, on every node)
            beside the structure: one batched forward of the target per explained batch.
        lr: Adam learning rate of the auto-encoder.
        hidden: GCN output widths; the last one is the latent width of the μ / log σ heads.
        batch_size: instances per optimisation step.
        max_epochs: upper bound on training epochs.
        patience: early-stopping patience (epochs without a lower validation MSE).
        kl_weight: weight of the VGAE KL term; 0 disables it.
        weight_decay: Adam L2 penalty.
        num_hops: node tasks: hop distances 1 … ``num_hops`` get their own label column.
        wl_rounds: graph tasks: Weisfeiler-Lehman refinement rounds.
        max_colors: graph tasks: WL vocabulary size per round.
        decoder_bias: a learnable offset in the decoder, ``σ(z_u · z_v + b)``.
        decoder: ``inner`` (``σ(z_u · z_v + b)``, the paper's) or ``mlp`` (an MLP on
            ``[z_u * z_v, |z_u - z_v|]`` added to the inner product).
        degree_features: append a one-hot degree bucket to Gem's input labels.
        wl_edge_labels: refine the WL labels of graph tasks with the edge types (bond orders).
        edge_features: edge features in Gem: per-node counts in the encoder, e_uv in an ``mlp``
            decoder.
        ensemble: how many auto-encoders are trained (each from its own seed, derived from
            :attr:`seed`); Gem's score of a pair is their mean. Averaging removes most of what
            one seed's initialisation and shuffling decide alone, so Gem refitted with another
            seed keeps more of the same top-K edges (stability across seeds).
        seed: seeds the auto-encoder's initialisation, shuffling and noise.
        check: how the target checks Gem's ranking when it explains (a deviation from the
            paper; :mod:`gem_core.gem.checked_ranking`): ``off`` (Gem's one-pass ranking),
            ``repair`` (Gem's next pair unless the target's prediction fails on it and holds
            with another of the :attr:`check_width` next ones), ``best`` (of those, the one
            the prediction holds on most surely), ``search`` (``repair``, and where it holds on
            none of them, the surest of all the pairs left that it holds on), ``sustain``
            (``repair``, and where the explanation so far holds and none of them keeps it so,
            the surest of all the pairs left) or ``climb`` (``search``, and where no pair left
            makes it hold, the surest of them instead of Gem's next). Positions
            :attr:`necessity_lead` to the largest budget K are checked. Read at explain time
            only: a fitted Gem is the same
            whatever the check.
        check_width: how many of Gem's next pairs the check compares at each position.
        check_late: the check's rule from the smallest K of the dataset's grid on (``same``:
            :attr:`check` throughout). The smallest explanation stays as :attr:`check` makes it
            (and as stable across seeds); the larger ones may look further for sufficiency.
        check_backward: at the K of the dataset's grid (``grid``: every one; ``late``: those
            above the smallest; ``off``) where the checked top-K does not hold, the target is
            asked backwards too: the pairs after the previous K are dropped from the whole
            instance, a few at a time, the prediction kept surest, down to K; where it holds on
            what is left, that is the top-K (no cost where the top-K holds).
        check_lead: at explain time, the first ``check_lead`` pairs are drawn from Gem's top-K
            at the grid's smallest K and put in the target's own greedy deletion order: step by
            step, the pair whose deletion, with those before it, most lowers the predicted
            class's probability under both protocols (the field's necessity). The check then
            grows the explanation from position max(:attr:`necessity_lead`, ``check_lead``).
            0: off. Unlike :attr:`necessity_lead` (the teacher's order, learned), the target
            decides for each instance.
    """

    target_kind: Union[TargetKind, str] = TargetKind.graded
    topk_policy: Union[TopKPolicy, str] = TopKPolicy.paper
    target_ks: tuple[int, ...] = ()
    protocol: Union[EvalProtocol, str] = EvalProtocol("keep_nodes")
    necessity_weight: float = 0.0
    connected_growth: bool = True
    necessity_lead: int = 0
    label_source: Union[LabelSource, str] = LabelSource.true
    condition_on_prediction: bool = False
    lr: float = 0.01
    hidden: tuple[int, ...] = (32, 32, 16)
    batch_size: int = 32
    max_epochs: int = 300
    patience: int = 30
    kl_weight: float = 0.0
    weight_decay: float = 0.0
    num_hops: int = 3
    wl_rounds: int = 2
    max_colors: int = 300
    decoder_bias: bool = True
    decoder: Union[Decoder, str] = Decoder.inner
    degree_features: bool = False
    wl_edge_labels: bool = False
    edge_features: bool = False
    ensemble: int = 1
    seed: int = 0
    check: Union[CheckRule, str] = CheckRule("off")
    check_width: int = 3
    check_late: Union[LateCheckRule, str] = LateCheckRule("same")
    check_backward: Union[BackwardCheck, str] = BackwardCheck("off")
    check_lead: int = 0

    def __post_init__(self) -> None:
        for name, choice in _CHOICES.items():
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, choice(value))
            except ValueError:
                _fail(name, f"{value!r} is not one of {', '.join(choice.values())}")
        for name in _BOOLS:
            if not isinstance(getattr(self, name), bool):
                _fail(name, f"{getattr(self, name)!r} is not True or False")
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                _fail(name, f"{value!r} is not a positive integer")
        for name in _NON_NEGATIVE_INTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                _fail(name, f"{value!r} is not a non-negative integer")
        if not _is_int(self.seed):
            _fail("seed", f"{self.seed!r} is not an integer")
        if not _is_number(self.lr) or not self.lr > 0:
            _fail("lr", f"{self.lr!r} is not a positive number")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                _fail(name, f"{value!r} is not a non-negative number")
        hidden = self.hidden
        if (
            isinstance(hidden, (str, bytes))
            or not hasattr(hidden, "__iter__")
            or len(tuple(hidden)) < 2
            or not all(_is_int(h) and h >= 1 for h in hidden)
        ):
            _fail("hidden", f"{hidden!r} is not at least two positive widths")
        object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
        ks = self.target_ks
        if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
            _fail("target_ks", f"{ks!r} is not a sequence of budgets K")
        try:
            ks = tuple(check_k(k) for k in ks)
        except ValueError as exc:
            _fail("target_ks", str(exc))
        object.__setattr__(self, "target_ks", ks)

    # ------------------------------------------------------------------ building
    def replace(self, **changes: Any) -> "GemSettings":
        """A copy with ``changes`` (validated; an unknown name is a one-line ``ValueError``)."""
        _check_names(changes, "GemSettings")
        return replace(self, **changes)

    @classmethod
    def for_dataset(cls, spec: DatasetSpec, target: str = "paper") -> "GemSettings":
        """Gem's settings for the target model ``target`` of ``spec``: the defaults, then the
        dataset's row (``spec.gem``, its ``num_hops`` first), then the target's (its ``gem``)."""
        cfg = target_config(spec, target)
        _check_names(spec.gem, f"{spec.title}")
        _check_names(cfg.gem, f"{spec.title}, target {str(target).strip().lower()!r}")
        return cls(**{"num_hops": spec.num_hops, **spec.gem, **cfg.gem})

    # ------------------------------------------------------------------ reading
    @property
    def asks_target(self) -> bool:
        """Whether explaining calls the target (the check, or the lead it orders): then the
        target's predicted classes are needed and the explanation costs its forwards."""
        return self.check.value != "off" or self.check_lead > 0

    def unchecked(self) -> "GemSettings":
        """These settings with everything that asks the target at explain time off (Gem's
        one-pass ranking, as a large screen uses it)."""
        return self.replace(check="off", check_lead=0)

    def budgets(self, k_grid: tuple[int, ...]) -> tuple[int, ...]:
        """The budgets K the ``graded`` targets average: :attr:`target_ks`, else ``k_grid``."""
        return tuple(self.target_ks) or tuple(k_grid)

    def autoencoder_params(self) -> dict[str, Any]:
        """The auto-encoder's keyword arguments, as plain values (strings, tuples, numbers)."""
        return {name: _plain(getattr(self, name)) for name in AUTOENCODER_FIELDS}

    def key_parts(self) -> dict[str, Any]:
        """What a saved Gem's key holds of these settings, exactly as the shipped explainers'
        keys were made (so they keep loading): ``lr``, ``num_hops`` and ``max_epochs`` always,
        the other auto-encoder settings (the seed included) and the later target settings only
        where they differ from their defaults."""
        default = _DEFAULT
        params = {
            name: _plain(getattr(self, name))
            for name in AUTOENCODER_FIELDS
            if name in _ALWAYS_KEYED or getattr(self, name) != getattr(default, name)
        }
        parts: dict[str, Any] = {
            "params": params,
            "train_target": self.target_kind.value,
            "topk_policy": self.topk_policy.value,
        }
        if self.label_source != LabelSource.true:
            parts["label_source"] = self.label_source.value
        if self.condition_on_prediction:
            parts["condition_on_prediction"] = True
        if self.target_ks:
            parts["target_ks"] = list(self.target_ks)
        if self.protocol != EvalProtocol("keep_nodes"):
            parts["protocol"] = self.protocol.value
        if self.necessity_weight:
            parts["necessity_weight"] = float(self.necessity_weight)
        if not self.connected_growth:
            parts["connected_growth"] = False
        if self.necessity_lead:
            parts["necessity_lead"] = int(self.necessity_lead)
        return parts


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fail(name: str, message: str) -> None:
    raise ValueError(f"GemSettings.{name}: {message}")


#: every field name of :class:`GemSettings`
SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(GemSettings))
_DEFAULT = GemSettings()


def _check_names(row: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(row) - set(SETTING_NAMES))
    if unknown:
        raise ValueError(
            f"{where}: unknown Gem setting {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(SETTING_NAMES)})"
        )
