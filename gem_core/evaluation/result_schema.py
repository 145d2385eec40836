"""The shape of the result files in ``assets/results``: frozen dataclasses, one per block.

What ``reproduce`` writes (:class:`ResultFile`) and what ``bench pyg`` writes (:class:`BenchFile`),
read by :mod:`gem_core.evaluation.result_file`. K and class keys, text in the JSON, are ``int``
here; a block's field the file lacks reads as its default (empty, None, 0.0 for timings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from gem_core.data.config import DEFAULT_TARGET

#: the version of the files in ``assets/results`` this engine writes and reads
SCHEMA_VERSION = 1
#: the version of a file written before ``schema_version`` existed
UNVERSIONED = 1

KMap = Mapping[int, float]
#: protocol -> K -> value (sufficiency / necessity curves)
Curves = Mapping[str, KMap]
#: protocol -> predicted class -> K -> value
ClassCurves = Mapping[str, Mapping[int, KMap]]


class ResultFileError(ValueError):
    """A result file that cannot be read: wrong version or malformed.

    Its message is one line, ``<file>: <problem>`` (``problem`` alone for JSON already read);
    ``file`` and ``problem`` are kept apart for callers that name the file themselves.
    """

    def __init__(self, problem: str, file: str = "") -> None:
        super().__init__(f"{file}: {problem}" if file else problem)
        self.file, self.problem = file, problem


@dataclass(frozen=True)
class Target:
    """The target model the results explain."""

    name: str = DEFAULT_TARGET
    train_accuracy: Optional[float] = None
    val_accuracy: Optional[float] = None
    test_accuracy: Optional[float] = None
    train_seconds: Optional[float] = None
    #: ms per instance of its forward over the whole test split, as Gem's explain path runs it
    #: (written where Gem reads the predicted class: that forward is part of Gem's time)
    forward_ms_per_instance: Optional[float] = None


@dataclass(frozen=True)
class Distillation:
    """The distillation of the test split: the teacher's own accuracy at K and its cost."""

    accuracy_at_k: KMap = field(default_factory=dict)
    ms_per_instance: float = 0.0
    topk_ms_per_instance: Optional[float] = None
    policy: Optional[str] = None
    instances: Optional[int] = None
    split: Optional[str] = None
    connected: Optional[bool] = None


@dataclass(frozen=True)
class Stability:
    """Top-K Jaccard of a method's explanations across seeds (``value`` None: not measured)."""

    value: Optional[float] = None
    seeds: tuple[int, ...] = ()
    deterministic: bool = False
    k: Optional[int] = None
    measured: bool = True
    seconds: Optional[float] = None
    note: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the writer uses (``seconds`` and ``note`` only when set)."""
        out = dataclasses.asdict(self)
        out["seeds"] = list(self.seeds)
        return {key: v for key, v in out.items() if v is not None or key == "value"}


@dataclass(frozen=True)
class MethodRow:
    """One method's figures: the K-sweep cells, log-odds, timings, the field's curves."""

    accuracy_at_k: KMap = field(default_factory=dict)
    accuracy_at_k_mutagen: KMap = field(default_factory=dict)
    agreement_at_k: KMap = field(default_factory=dict)
    log_odds: tuple[float, ...] = ()
    fidelity_at_k: KMap = field(default_factory=dict)
    edge_auc: Optional[float] = None
    ms_per_instance: float = 0.0
    fit_seconds: float = 0.0
    #: what learning from a distillation cost (Gem)
    distill_seconds: Optional[float] = None
    #: measured on a seeded subsample of this many test instances (slow methods)
    test_instances: Optional[int] = None
    #: how far a per-instance search got (SubgraphX)
    search: Mapping[str, float] = field(default_factory=dict)
    sufficiency_at_k: Curves = field(default_factory=dict)
    sufficiency_at_k_per_class: ClassCurves = field(default_factory=dict)
    necessity_at_k: Curves = field(default_factory=dict)
    necessity_at_k_per_class: ClassCurves = field(default_factory=dict)
    stability: Optional[Stability] = None

    def accuracy(self, mutagen_only: bool = False) -> KMap:
        """Accuracy at K over every test instance, or the mutagens only (the paper's "-0")."""
        return self.accuracy_at_k_mutagen if mutagen_only else self.accuracy_at_k

    def curve(self, metric: Literal["sufficiency", "necessity"], protocol: str) -> KMap:
        """The field's ``metric`` at K under ``protocol`` (empty when not measured)."""
        curves = self.sufficiency_at_k if metric == "sufficiency" else self.necessity_at_k
        return curves.get(protocol) or {}


@dataclass(frozen=True)
class ToxicophoreRow:
    """How one method's bond scores find the toxicophore bonds (averages over molecules)."""

    auc: Optional[float] = None
    #: recall of toxicophore bonds in the top k (the file's ``recall_at_<k>``)
    recall: Optional[float] = None
    #: molecules of a method measured on a subsample (else the summary's)
    molecules: Optional[int] = None


@dataclass(frozen=True)
class ToxicophoreSummary:
    """The toxicophore benchmark over some molecules (all kept ones, or one class's)."""

    molecules: Optional[int] = None
    methods: Mapping[str, ToxicophoreRow] = field(default_factory=dict)
    random_recall: Optional[float] = None
    toxicophore_bonds: Optional[float] = None


@dataclass(frozen=True)
class Toxicophores(ToxicophoreSummary):
    """The toxicophore benchmark of a molecule dataset (Kazius et al. 2005)."""

    k: int = 8
    random_auc: Optional[float] = None
    predicted_mutagens: Optional[int] = None
    left_out: Mapping[str, int] = field(default_factory=dict)
    by_class: Mapping[str, ToxicophoreSummary] = field(default_factory=dict)


@dataclass(frozen=True)
class SameSubsample:
    """Every fully measured method on a slow method's seeded subsample of the test split."""

    test_instances: Optional[int] = None
    indices: tuple[int, ...] = ()
    methods: Mapping[str, MethodRow] = field(default_factory=dict)


@dataclass(frozen=True)
class Machine:
    """Where the run happened."""

    device: Optional[str] = None
    threads: Optional[int] = None
    cpu: Optional[str] = None
    torch: Optional[str] = None
    gpu: Optional[str] = None

    def recorded(self) -> list[tuple[str, Union[str, int]]]:
        """(field, value) of what the file records, in the writer's order."""
        pairs = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return [(name, value) for name, value in pairs if value is not None]


@dataclass(frozen=True)
class ResultFile:
    """One ``reproduce`` results file: a dataset and target, every method measured on it."""

    dataset: str
    methods: Mapping[str, MethodRow]
    schema_version: int = SCHEMA_VERSION
    target: Target = field(default_factory=Target)
    distillation: Distillation = field(default_factory=Distillation)
    k_grid: tuple[int, ...] = ()
    #: the fine K grid of the field's curves
    faithfulness_k: tuple[int, ...] = ()
    log_odds_k: Optional[int] = None
    test_instances: Optional[int] = None
    seconds: Optional[float] = None
    machine: Machine = field(default_factory=Machine)
    same_subsample: Mapping[str, SameSubsample] = field(default_factory=dict)
    toxicophores: Optional[Toxicophores] = None


@dataclass(frozen=True)
class BenchRow:
    """One method's time per call in a bench."""

    calls: int
    median_ms: float
    p90_ms: float
    times_gem: float
    #: each process's median, where the bench ran in several (``median_ms`` is their median)
    process_medians_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class PygBench:
    """``bench pyg``: one molecule per call through PyG's ``Explainer``."""

    model: str
    fit_graphs: int
    fit_seconds: float
    rows: Mapping[str, BenchRow]


@dataclass(frozen=True)
class ZooRow:
    """One method on one zoo model: mean sufficiency, mean necessity, ms per graph."""

    method: str
    mean_sufficiency: float
    mean_necessity: float
    ms_per_graph: float


@dataclass(frozen=True)
class ZooModel:
    """One model of ``bench zoo``: what it is, how good (accuracy or R²) and its rows."""

    model: str
    title: str
    task: str
    dataset: str
    quality: Mapping[str, float]
    instances: int
    reads_bonds: bool
    seconds: float
    rows: tuple[ZooRow, ...]


@dataclass(frozen=True)
class ZooBench:
    """``bench zoo``: Gem through the PyG door on classifiers and regressors."""

    seed: int
    protocol: str
    models: tuple[ZooModel, ...]


@dataclass(frozen=True)
class CrippenRow:
    """One method of ``bench crippen``: rank agreement with the atom contributions, the
    faithfulness means and ms per molecule (Gem's rows: its fit seconds, check and teacher)."""

    method: str
    spearman: float
    kendall: float
    spearman_magnitude: float
    kendall_magnitude: float
    molecules_ranked: int
    mean_sufficiency: float
    mean_necessity: float
    ms_per_molecule: float
    fit_seconds: Optional[float] = None
    check: Optional[str] = None
    teacher: Optional[str] = None


@dataclass(frozen=True)
class CrippenBench:
    """``bench crippen``: bond scores of a Crippen logP regressor against the atom contributions."""

    model: str
    reads_bonds: bool
    seed: int
    molecules: int
    test_molecules: int
    gem_train_molecules: int
    regressor: Mapping[str, float]
    rows: tuple[CrippenRow, ...]
    split: str = "test"


@dataclass(frozen=True)
class SplitMethod:
    """One method on one split of ``bench splits``: curves overall and per predicted class."""

    method: str
    sufficiency: KMap
    necessity: KMap
    sufficiency_per_class: Mapping[int, KMap]
    necessity_per_class: Mapping[int, KMap]
    mean_sufficiency: float
    mean_necessity: float
    seconds: float


@dataclass(frozen=True)
class SplitRun:
    """One split of one target in ``bench splits``."""

    split: str
    instances: int
    class_counts: Mapping[int, int]
    methods: tuple[SplitMethod, ...]


@dataclass(frozen=True)
class SplitsTarget:
    """``bench splits`` for one dataset and target: Gem on its training graphs against test."""

    dataset: str
    target: str
    protocol: str
    splits: tuple[SplitRun, ...]


@dataclass(frozen=True)
class ClassTimes:
    """One action's times under one user or N (``bench app --users N``), seconds."""

    n: int
    server_p50: float
    server_p95: float
    browser_p50: float
    browser_p95: float


@dataclass(frozen=True)
class ClassBench:
    """``bench app --users N``: a class on one server, per action one user against N."""

    users: int
    rounds: int
    think_s: float
    threads: str
    actions: Mapping[str, Mapping[str, ClassTimes]]  # action -> "one" | "many" -> times
    rss_mb: Mapping[str, float]
    rss_growth_mb_per_user: float
    errors: int
    widget_resets: int
    goals: Mapping[str, float]


@dataclass(frozen=True)
class BenchFile:
    """A bench JSON (``bench-<name>.json``): ``bench pyg``, ``zoo``, ``crippen`` or ``splits``."""

    pyg: Optional[PygBench] = None
    schema_version: int = SCHEMA_VERSION
    zoo: Optional[ZooBench] = None
    crippen: Optional[CrippenBench] = None
    splits: tuple[SplitsTarget, ...] = ()
    class_: Optional[ClassBench] = None
