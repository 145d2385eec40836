"""Every setting of Gem in one validated value: :class:`GemSettings`, a few small groups.

* :class:`TeacherSettings`: what Gem learns from (the distillation and its training targets);
* :class:`InputSettings`: what the auto-encoder reads beside the nodes' features;
* :class:`NetworkSettings`: the auto-encoder's shape;
* :class:`TrainingSettings`: how it is fitted;
* :class:`CheckSettings`: the explain-time check, a separate method ("Gem + check") that asks
  the target; read when explaining only, so a fitted Gem is the same whatever it is.

A setting is named by its path, ``"group.field"`` (``"check.rule"``, ``"training.lr"``): rows,
presets (:mod:`gem_core.gem.presets`), ``tune`` variants and the PyG adapter's ``settings=`` all
use those paths, and :meth:`GemSettings.with_overrides` applies them. Options with a fixed set
of values are ``str`` enums (``Decoder("mlp")``, ``Decoder.mlp == "mlp"``); the check's rules are
strategy objects (:mod:`gem_core.gem.check_rules`). Every value is validated at construction: a
bad one raises a one-line ``ValueError`` naming its path.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Optional

from gem_core.data.config import check_k
from gem_core.gem.check_rules import (
    OFF,
    BackwardSearch,
    CheckRule,
    backward_search,
    check_rule,
)


class _Choice(str, Enum):
    """A setting with a fixed set of string values; ``str()`` is the value itself."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(str(m.value) for m in cls)


class TargetKind(_Choice):
    """What the auto-encoder learns (:func:`gem_core.gem.training_targets.explainer_targets`)."""

    weights = "weights"
    graded = "graded"
    mix = "mix"
    graded_add = "graded+add"
    blend = "blend"
    signed = "signed"  # a regressor's: each pair ranked by how much it raises the value


class TopKPolicy(_Choice):
    """The top-K rule of the distilled masks behind ``graded`` targets
    (:data:`gem_core.gem.distill.TOPK_POLICIES`)."""

    nosplit = "nosplit"
    exact = "exact"
    paper = "paper"
    refine = "refine"
    sufficient = "sufficient"


class LabelSource(_Choice):
    """The label the training distillations are computed against
    (:data:`gem_core.gem.distill.LABEL_SOURCES`)."""

    true = "true"
    predicted = "predicted"


class EvalProtocol(_Choice):
    """The evaluation protocol Gem is taught for (:mod:`gem_core.data.protocol`)."""

    keep_nodes = "keep_nodes"
    drop_isolated = "drop_isolated"


class PairOrder(_Choice):
    """How Gem's pair scores are read as a ranking: by ``score``, or ``cover``-first (each next
    pair one that touches a node the ranking lacks, while one does; :mod:`gem_core.gem.cover_order`)."""

    score = "score"
    cover = "cover"


class CheckProtocol(_Choice):
    """The protocols under which the check asks whether a prediction holds: ``both``
    (``keep_nodes`` and ``drop_isolated``) or the one Gem is ``taught`` for (``teacher.protocol``)."""

    both = "both"
    taught = "taught"


class Decoder(_Choice):
    """Gem's pair scorer: the inner product (the paper's) or inner product plus an MLP."""

    inner = "inner"
    mlp = "mlp"


def _setting(default: Any, kind: Any) -> Any:
    """A field whose values are checked (and coerced) by ``kind``: an enum class, a rule
    parser, or one of the names of :data:`_CHECKS`."""
    return field(default=default, metadata={"kind": kind})


@dataclass(frozen=True)
class TeacherSettings:
    """What Gem learns from: the distillation ("ground truth") and the targets made of it.

    Attributes:
        kind: ``weights`` (normalised distilled weights, the paper), ``graded`` (mean of the
            distilled top-K masks over :attr:`ks`), ``mix`` (the average of both),
            ``graded+add`` or ``blend`` (``graded`` averaged with what alone keeps the
            prediction).
        topk_policy: the top-K rule of the distilled masks: ``paper`` (Appendix C), the
            loss-driven ``refine``, ``nosplit``, ``exact``, or ``sufficient`` (grow each
            explanation by the pair that best keeps the label, judged under :attr:`protocol`).
        ks: the budgets K the ``graded`` targets average (empty: the dataset's K grid).
        label_source: distil against the ``true`` label (the paper) or the target's
            ``predicted`` class (what an explainer of the model can imitate).
        protocol: the evaluation protocol Gem is taught for (``keep_nodes`` or
            ``drop_isolated``, as GNNX-Bench judges); read by ``sufficient`` and the lead.
        necessity_weight: ``sufficient``'s weight λ of necessity (0: sufficiency alone).
        necessity_lead: how many pairs of each target are ranked first by greedy necessity
            within the smallest K's explanation (0: off); the top-K sets stay the same.
        connected: keep the distilled explanations connected (None: the dataset's rule, or in
            the PyG adapter the task level's).
    """

    kind: TargetKind = _setting(TargetKind.graded, TargetKind)
    topk_policy: TopKPolicy = _setting(TopKPolicy.paper, TopKPolicy)
    ks: tuple[int, ...] = _setting((), "budgets")
    label_source: LabelSource = _setting(LabelSource.true, LabelSource)
    protocol: EvalProtocol = _setting(EvalProtocol.keep_nodes, EvalProtocol)
    necessity_weight: float = _setting(0.0, "non_negative")
    necessity_lead: int = _setting(0, "non_negative_int")
    connected: Optional[bool] = _setting(None, "optional_bool")

    def __post_init__(self) -> None:
        _validate(self, "teacher")


@dataclass(frozen=True)
class InputSettings:
    """What the auto-encoder reads beside the nodes' own features.

    Attributes:
        condition_on_prediction: the target's predicted class (one-hot, on every node): one
            batched forward of the target per explained batch.
        num_hops: node tasks: hop distances 1 … ``num_hops`` get their own label column.
        wl_rounds: graph tasks: Weisfeiler-Lehman refinement rounds.
        max_colors: graph tasks: WL vocabulary size per round.
        degree_features: a one-hot degree bucket among the labels.
        wl_edge_labels: WL colours refined with the edge types (bond orders).
        edge_features: edge features: per-node counts in the encoder, e_uv in an ``mlp``
            decoder.
    """

    condition_on_prediction: bool = _setting(False, "bool")
    num_hops: int = _setting(3, "positive_int")
    wl_rounds: int = _setting(2, "positive_int")
    max_colors: int = _setting(300, "positive_int")
    degree_features: bool = _setting(False, "bool")
    wl_edge_labels: bool = _setting(False, "bool")
    edge_features: bool = _setting(False, "bool")

    def __post_init__(self) -> None:
        _validate(self, "inputs")


@dataclass(frozen=True)
class NetworkSettings:
    """The auto-encoder's shape.

    Attributes:
        hidden: GCN output widths; the last one is the latent width (paper: 32, 32, 16).
        decoder: ``inner`` (``σ(z_u · z_v + b)``, the paper's) or ``mlp`` (an MLP on
            ``[z_u * z_v, |z_u - z_v|]`` added to the inner product).
        decoder_bias: the learnable offset ``b`` (False: the paper's ``σ(z_u · z_v)``).
        ensemble: how many auto-encoders are trained (each from its own seed); a pair's score
            is their mean, so Gem refitted with another seed keeps more of the same edges.
        order: how the scores are read as a ranking, ``score`` or ``cover`` (cover-first: the
            explanations touch more nodes; read when explaining, so no refit changes it).
    """

    hidden: tuple[int, ...] = _setting((32, 32, 16), "widths")
    decoder: Decoder = _setting(Decoder.inner, Decoder)
    decoder_bias: bool = _setting(True, "bool")
    ensemble: int = _setting(1, "positive_int")
    order: PairOrder = _setting(PairOrder.score, PairOrder)

    def __post_init__(self) -> None:
        _validate(self, "network")


@dataclass(frozen=True)
class TrainingSettings:
    """How the auto-encoder is fitted.

    Attributes:
        lr: Adam learning rate.
        batch_size: instances per optimisation step.
        max_epochs: upper bound on training epochs.
        patience: early-stopping patience (epochs without a lower validation loss).
        val_fraction: the share of the fit instances held out for early stopping where the
            data brings no validation split (the PyG adapter; the engine's datasets have one).
        fidelity: weight of the fidelity term of a training-time adjustment after the fit
            (:mod:`gem_core.gem.fidelity`: the frozen target reads the generator's relaxed
            top-K of each training instance; a PyG classifier); 0: off, the paper's fit.
    """

    lr: float = _setting(0.01, "positive")
    batch_size: int = _setting(32, "positive_int")
    max_epochs: int = _setting(300, "positive_int")
    patience: int = _setting(30, "positive_int")
    val_fraction: float = _setting(0.1, "fraction")
    fidelity: float = _setting(0.0, "non_negative")

    def __post_init__(self) -> None:
        _validate(self, "training")


@dataclass(frozen=True)
class CheckSettings:
    """The explain-time check (a deviation from the paper; :mod:`gem_core.gem.checked_ranking`):
    the target asked, position by position, which of Gem's next pairs to place.

    Attributes:
        rule: a :class:`~gem_core.gem.check_rules.CheckRule` (``off``: Gem's one-pass ranking).
        width: how many of Gem's next pairs are compared at each position.
        late: the rule from the smallest K of the grid on (None: :attr:`rule` throughout).
        backward: where a grown top-K does not hold, the grid's budgets searched backwards from
            the whole instance (``off``, ``grid`` or ``late``).
        lead: the first ``lead`` pairs of the smallest explanation put in the target's own greedy
            deletion order (necessity) before the check grows the rest (0: off).
        protocol: where a prediction must hold for the check: under ``both`` protocols, or only
            the one Gem is ``taught`` for (``teacher.protocol``: the one it is judged by; one
            copy per question instead of two, and fewer places where the check leaves Gem's order).
    """

    rule: CheckRule = _setting(OFF, check_rule)
    width: int = _setting(3, "positive_int")
    late: Optional[CheckRule] = _setting(None, "late_rule")
    backward: BackwardSearch = _setting(backward_search("off"), backward_search)
    lead: int = _setting(0, "non_negative_int")
    protocol: CheckProtocol = _setting(CheckProtocol.both, CheckProtocol)

    def __post_init__(self) -> None:
        _validate(self, "check")

    @property
    def asks_target(self) -> bool:
        """Whether explaining calls the target (the check, or the lead it orders)."""
        return self.rule.asks_target or self.lead > 0


@dataclass(frozen=True)
class GemSettings:
    """Gem's settings: five groups and the seed (see the module docstring).

    Attributes:
        teacher: what Gem learns from (:class:`TeacherSettings`).
        inputs: what the auto-encoder reads (:class:`InputSettings`).
        network: the auto-encoder's shape (:class:`NetworkSettings`).
        training: how it is fitted (:class:`TrainingSettings`).
        check: the explain-time check (:class:`CheckSettings`).
        seed: seeds the auto-encoder's initialisation, shuffling and noise.
    """

    teacher: TeacherSettings = field(default_factory=TeacherSettings)
    inputs: InputSettings = field(default_factory=InputSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    check: CheckSettings = field(default_factory=CheckSettings)
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            group = _GROUPS.get(f.name)
            if group is not None and not isinstance(getattr(self, f.name), group):
                _fail(f.name, f"{getattr(self, f.name)!r} is not a {group.__name__}")
        if not _is_int(self.seed):
            _fail("seed", f"{self.seed!r} is not an integer")

    # ------------------------------------------------------------------ building
    def with_overrides(self, overrides: Mapping[str, Any]) -> GemSettings:
        """A copy with ``overrides`` applied, each named by its path (``"check.rule"``,
        ``"seed"``); values are validated, an unknown path is a one-line ``ValueError``."""
        check_paths(overrides, "GemSettings")
        changes: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for path, value in overrides.items():
            group, _, name = path.partition(".")
            if name:
                changes.setdefault(group, {})[name] = value
            else:
                top[path] = value
        for group, values in changes.items():
            top[group] = dataclasses.replace(getattr(self, group), **values)
        return dataclasses.replace(self, **top)

    # ------------------------------------------------------------------ reading
    def get(self, path: str) -> Any:
        """The value at ``path`` (``"training.lr"``)."""
        check_paths([path], "GemSettings")
        return self._at(path)

    def _at(self, path: str) -> Any:
        group, _, name = path.partition(".")
        return getattr(getattr(self, group), name) if name else getattr(self, group)

    def as_dict(self) -> dict[str, Any]:
        """Every setting by path, as plain values (strings, tuples, numbers, None)."""
        return {path: _plain(self._at(path)) for path in SETTING_PATHS}

    @property
    def asks_target(self) -> bool:
        """Whether explaining calls the target (the check, or the lead it orders): then the
        target's predicted classes are needed and the explanation costs its forwards."""
        return self.check.asks_target

    def unchecked(self) -> GemSettings:
        """These settings with everything that asks the target at explain time off (Gem's
        one-pass ranking, as a large screen uses it)."""
        return dataclasses.replace(self, check=dataclasses.replace(self.check, rule=OFF, lead=0))

    def budgets(self, k_grid: tuple[int, ...]) -> tuple[int, ...]:
        """The budgets K the ``graded`` targets average: ``teacher.ks``, else ``k_grid``."""
        return tuple(self.teacher.ks) or tuple(k_grid)

    def autoencoder_params(self) -> dict[str, Any]:
        """The auto-encoder's keyword arguments, as plain values (strings, tuples, numbers)."""
        return {name: _plain(self._at(path)) for name, path in AUTOENCODER_PATHS.items()}

    def key_parts(self) -> dict[str, Any]:
        """What a saved Gem's key holds of these settings, exactly as the shipped explainers'
        keys were made (so they keep loading): ``lr``, ``num_hops`` and ``max_epochs`` always,
        the other auto-encoder settings (the seed included) and the later teacher settings only
        where they differ from their defaults."""
        params = {
            name: _plain(self._at(path))
            for name, path in AUTOENCODER_PATHS.items()
            if name in _ALWAYS_KEYED or self._at(path) != _DEFAULT._at(path)
        }
        t = self.teacher
        parts: dict[str, Any] = {
            "params": params,
            "train_target": t.kind.value,
            "topk_policy": t.topk_policy.value,
        }
        if t.label_source != LabelSource.true:
            parts["label_source"] = t.label_source.value
        if self.inputs.condition_on_prediction:
            parts["condition_on_prediction"] = True
        if t.ks:
            parts["target_ks"] = list(t.ks)
        if t.protocol != EvalProtocol.keep_nodes:
            parts["protocol"] = t.protocol.value
        if t.necessity_weight:
            parts["necessity_weight"] = float(t.necessity_weight)
        if t.necessity_lead:
            parts["necessity_lead"] = int(t.necessity_lead)
        if self.training.fidelity:
            parts["fidelity"] = float(self.training.fidelity)
        return parts


_GROUPS: dict[str, type] = {
    "teacher": TeacherSettings,
    "inputs": InputSettings,
    "network": NetworkSettings,
    "training": TrainingSettings,
    "check": CheckSettings,
}

#: every setting's path, group by group
SETTING_PATHS: tuple[str, ...] = (
    *(f"{g}.{f.name}" for g, cls in _GROUPS.items() for f in fields(cls)),
    "seed",
)

#: the auto-encoder's keyword arguments (:class:`~gem_core.gem.autoencoder.GemAutoEncoder`)
#: and the settings they come from, in its order
AUTOENCODER_PATHS: dict[str, str] = {
    "lr": "training.lr",
    "hidden": "network.hidden",
    "batch_size": "training.batch_size",
    "max_epochs": "training.max_epochs",
    "patience": "training.patience",
    "num_hops": "inputs.num_hops",
    "wl_rounds": "inputs.wl_rounds",
    "max_colors": "inputs.max_colors",
    "decoder_bias": "network.decoder_bias",
    "decoder": "network.decoder",
    "degree_features": "inputs.degree_features",
    "wl_edge_labels": "inputs.wl_edge_labels",
    "edge_features": "inputs.edge_features",
    "ensemble": "network.ensemble",
    "seed": "seed",
}
# in every saved Gem's key, whatever their value (the settings of the first shipped explainers)
_ALWAYS_KEYED = ("lr", "num_hops", "max_epochs")


def check_paths(paths: Any, where: str) -> None:
    """A one-line ``ValueError`` naming the paths of ``paths`` that are no setting's."""
    unknown = sorted(set(paths) - set(SETTING_PATHS))
    if unknown:
        raise ValueError(
            f"{where}: unknown Gem setting {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(SETTING_PATHS)})"
        )


def setting_kind(path: str) -> Any:
    """How the setting at ``path`` is checked: an enum class, a parser, or a kind's name
    (``"bool"``, ``"positive_int"``, ``"widths"`` …); read by ``tune`` to parse its values."""
    check_paths([path], "GemSettings")
    group, _, name = path.partition(".")
    if not name:
        return "int"
    return next(f.metadata["kind"] for f in fields(_GROUPS[group]) if f.name == name)


def autoencoder_settings(params: Mapping[str, Any]) -> GemSettings:
    """The default settings with the auto-encoder's keyword arguments ``params`` (validated as
    settings; those that are no setting are ignored)."""
    return _DEFAULT.with_overrides(
        {AUTOENCODER_PATHS[k]: v for k, v in params.items() if k in AUTOENCODER_PATHS}
    )


# ---------------------------------------------------------------------- validation
def _validate(group: Any, name: str) -> None:
    """Check (and coerce) every field of ``group`` by its kind; one-line errors by path."""
    for f in fields(group):
        kind, value = f.metadata["kind"], getattr(group, f.name)
        path = f"{name}.{f.name}"
        check = _CHECKS.get(kind) if isinstance(kind, str) else None
        try:
            if check is not None:
                value = check(value)
            elif isinstance(kind, type) and issubclass(kind, _Choice):
                value = _choice(kind, value)
            else:
                value = kind(value)
        except ValueError as exc:
            _fail(path, str(exc))
        object.__setattr__(group, f.name, value)


def _choice(kind: type[_Choice], value: Any) -> _Choice:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{value!r} is not one of {', '.join(kind.values())}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _need(ok: bool, value: Any, what: str) -> None:
    if not ok:
        raise ValueError(f"{value!r} is not {what}")


def _bool(value: Any) -> bool:
    _need(isinstance(value, bool), value, "True or False")
    return bool(value)


def _optional_bool(value: Any) -> Optional[bool]:
    return None if value is None else _bool(value)


def _positive_int(value: Any) -> int:
    _need(_is_int(value) and value >= 1, value, "a positive integer")
    return int(value)


def _non_negative_int(value: Any) -> int:
    _need(_is_int(value) and value >= 0, value, "a non-negative integer")
    return int(value)


def _positive(value: Any) -> float:
    _need(_is_number(value) and value > 0, value, "a positive number")
    return float(value)


def _non_negative(value: Any) -> float:
    _need(_is_number(value) and value >= 0, value, "a non-negative number")
    return float(value)


def _fraction(value: Any) -> float:
    _need(_is_number(value) and 0 <= value < 1, value, "a number in [0, 1)")
    return float(value)


def _sequence(value: Any) -> tuple[Any, ...]:
    _need(not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"), value, "a sequence")
    return tuple(value)


def _widths(value: Any) -> tuple[int, ...]:
    widths = _sequence(value)
    ok = len(widths) >= 2 and all(_is_int(h) and h >= 1 for h in widths)
    _need(ok, value, "at least two positive widths")
    return tuple(int(h) for h in widths)


def _budgets(value: Any) -> tuple[int, ...]:
    return tuple(check_k(k) for k in _sequence(value))


def _late_rule(value: Any) -> Optional[CheckRule]:
    if value is None or (isinstance(value, str) and value.strip().lower() == "same"):
        return None
    rule = check_rule(value)
    _need(rule.asks_target, value, "a rule that asks the target (or 'same')")
    return rule


_CHECKS = {
    "bool": _bool,
    "optional_bool": _optional_bool,
    "positive_int": _positive_int,
    "non_negative_int": _non_negative_int,
    "positive": _positive,
    "non_negative": _non_negative,
    "fraction": _fraction,
    "widths": _widths,
    "budgets": _budgets,
    "late_rule": _late_rule,
}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (CheckRule, BackwardSearch)):
        return value.name
    return value


def _fail(name: str, message: str) -> None:
    raise ValueError(f"GemSettings.{name}: {message}")


_DEFAULT = GemSettings()
