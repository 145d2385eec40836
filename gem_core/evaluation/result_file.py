"""The result files of ``assets/results``, typed: what ``reproduce`` and ``bench pyg`` write.

:func:`load_result` reads a ``reproduce`` file (``<dataset>[-<target>].json``) into a frozen
:class:`ResultFile`, :func:`load_bench` a bench file (``bench-pyg.json``) into a
:class:`BenchFile`; the report, the tables and the app read their attributes, never string keys.

Both check the file's ``schema_version`` (:data:`SCHEMA_VERSION`; a file without one is version
1, as every file was before the field existed) and its shape, and raise :class:`ResultFileError`
with one line naming the file and the field when either is wrong. A field this reader does not
know is an error too: the writer and the reader change together (a test runs one into the other).

In a reproduce file only ``dataset`` and ``methods`` are required: quick runs (``--limit``), older
files and hand-made ones may lack the rest, which then reads as the defaults of
:mod:`gem_core.evaluation.result_schema` (empty curves, None figures, 0.0 timings). A bench file
holds every field (one writer, no partial runs).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Union

from gem_core.data.config import DEFAULT_TARGET
from gem_core.evaluation.json_fields import (
    Block,
    Malformed,
    bad,
    by_int,
    child,
    list_of,
    map_of,
    optional,
    read_flag,
    read_int,
    read_k_map,
    read_number,
    read_text,
)
from gem_core.evaluation.result_schema import (
    SCHEMA_VERSION,
    UNVERSIONED,
    BenchFile,
    BenchRow,
    ClassBench,
    ClassTimes,
    CrippenBench,
    CrippenRow,
    Distillation,
    Machine,
    MethodRow,
    PygBench,
    ResultFile,
    ResultFileError,
    SameSubsample,
    SplitMethod,
    SplitRun,
    SplitsTarget,
    Stability,
    Target,
    ToxicophoreRow,
    Toxicophores,
    ToxicophoreSummary,
    ZooBench,
    ZooModel,
    ZooRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "BenchFile",
    "MethodRow",
    "ResultFile",
    "ResultFileError",
    "load_bench",
    "load_result",
]

Source = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def load_result(source: Union[Source, ResultFile]) -> ResultFile:
    """The reproduce results in ``source`` (a path, the JSON as a dict, or a ``ResultFile``).

    Raises :class:`ResultFileError` (a ``ValueError``) when the file is not valid JSON, has
    another schema version or a field is missing, unknown or of the wrong type.
    """
    if isinstance(source, ResultFile):
        return source
    data, name = _open(source)
    with _named(name):
        return _result(data)


def load_bench(source: Source) -> BenchFile:
    """The bench JSON in ``source`` (a path or the JSON as a dict); errors as :func:`load_result`."""
    data, name = _open(source)
    with _named(name):
        return _bench(data)


def _open(source: Source) -> tuple[Any, str]:
    """The JSON of ``source`` and the file's name for messages (empty for JSON already read)."""
    if not isinstance(source, (str, os.PathLike)):
        return source, ""  # checked by the reader (an object, not a list or a number)
    path = Path(source)
    try:
        return json.loads(path.read_text(encoding="utf-8")), path.name
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg}, line {exc.lineno})"
        raise ResultFileError(problem, path.name) from None


@contextmanager
def _named(name: str) -> Iterator[None]:
    """Turn a :class:`Malformed` field into a :class:`ResultFileError` naming the file."""
    try:
        yield
    except Malformed as exc:
        raise ResultFileError(str(exc), name) from None


def _top(data: Any, known: Collection[str]) -> tuple[Block, int]:
    """The top-level object of a file and its schema version (checked before its fields)."""
    if not isinstance(data, Mapping):
        raise bad("", "a JSON object", data)
    version = data.get("schema_version", UNVERSIONED)
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad("schema_version", "an integer", version)
    if version != SCHEMA_VERSION:
        raise Malformed(
            f"schema_version {version} is not supported: this gem_core reads version "
            f"{SCHEMA_VERSION}; write the file again with this version's command"
        )
    return Block(data, "", known), version


def _names(cls: Any) -> tuple[str, ...]:
    """The fields of a dataclass: the keys its JSON object may hold."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _target(value: Any, at: str) -> Target:
    b = Block(value, at, _names(Target))
    number = optional(read_number)
    return Target(
        name=b.get("name", read_text, DEFAULT_TARGET),
        train_accuracy=b.get("train_accuracy", number, None),
        val_accuracy=b.get("val_accuracy", number, None),
        test_accuracy=b.get("test_accuracy", number, None),
        train_seconds=b.get("train_seconds", number, None),
        forward_ms_per_instance=b.get("forward_ms_per_instance", number, None),
    )


def _distillation(value: Any, at: str) -> Distillation:
    b = Block(value, at, _names(Distillation))
    return Distillation(
        accuracy_at_k=b.get("accuracy_at_k", read_k_map, {}),
        ms_per_instance=b.get("ms_per_instance", read_number, 0.0),
        topk_ms_per_instance=b.get("topk_ms_per_instance", optional(read_number), None),
        policy=b.get("policy", optional(read_text), None),
        instances=b.get("instances", optional(read_int), None),
        split=b.get("split", optional(read_text), None),
        connected=b.get("connected", optional(read_flag), None),
    )


def _stability(value: Any, at: str) -> Stability:
    b = Block(value, at, _names(Stability))
    return Stability(
        value=b.get("value", optional(read_number), None),
        seeds=b.get("seeds", list_of(read_int), ()),
        deterministic=b.get("deterministic", read_flag, False),
        k=b.get("k", optional(read_int), None),
        measured=b.get("measured", read_flag, True),
        seconds=b.get("seconds", optional(read_number), None),
        note=b.get("note", optional(read_text), None),
    )


_curves = map_of(read_k_map)
_class_curves = map_of(by_int(read_k_map))


def _method(value: Any, at: str) -> MethodRow:
    b = Block(value, at, _names(MethodRow))
    return MethodRow(
        accuracy_at_k=b.get("accuracy_at_k", read_k_map, {}),
        accuracy_at_k_mutagen=b.get("accuracy_at_k_mutagen", read_k_map, {}),
        agreement_at_k=b.get("agreement_at_k", read_k_map, {}),
        log_odds=b.get("log_odds", list_of(read_number), ()),
        fidelity_at_k=b.get("fidelity_at_k", read_k_map, {}),
        edge_auc=b.get("edge_auc", optional(read_number), None),
        ms_per_instance=b.get("ms_per_instance", read_number, 0.0),
        fit_seconds=b.get("fit_seconds", read_number, 0.0),
        distill_seconds=b.get("distill_seconds", optional(read_number), None),
        test_instances=b.get("test_instances", optional(read_int), None),
        search=b.get("search", map_of(read_number), {}),
        sufficiency_at_k=b.get("sufficiency_at_k", _curves, {}),
        sufficiency_at_k_per_class=b.get("sufficiency_at_k_per_class", _class_curves, {}),
        necessity_at_k=b.get("necessity_at_k", _curves, {}),
        necessity_at_k_per_class=b.get("necessity_at_k_per_class", _class_curves, {}),
        stability=b.get("stability", optional(_stability), None),
    )


def _tox_fields(b: Block, k: int) -> dict[str, Any]:
    """The fields a toxicophore summary and the whole benchmark share (recall keys follow k)."""
    recall = f"recall_at_{k}"

    def row(value: Any, at: str) -> ToxicophoreRow:
        r = Block(value, at, ("auc", recall, "molecules"))
        return ToxicophoreRow(
            auc=r.get("auc", optional(read_number), None),
            recall=r.get(recall, optional(read_number), None),
            molecules=r.get("molecules", optional(read_int), None),
        )

    methods: dict[str, ToxicophoreRow] = b.get("methods", map_of(row), {})
    return dict(
        molecules=b.get("molecules", optional(read_int), None),
        methods=methods,
        random_recall=b.get(f"random_{recall}", optional(read_number), None),
        toxicophore_bonds=b.get("toxicophore_bonds", optional(read_number), None),
    )


def _toxicophores(value: Any, at: str) -> Toxicophores:
    if not isinstance(value, Mapping):
        raise bad(at, "an object", value)
    k = read_int(value["k"], child(at, "k")) if "k" in value else 8
    shared = ("molecules", "methods", f"random_recall_at_{k}", "toxicophore_bonds")

    def summary(value: Any, at: str) -> ToxicophoreSummary:
        return ToxicophoreSummary(**_tox_fields(Block(value, at, shared), k))

    b = Block(value, at, shared + ("k", "random_auc", "predicted_mutagens", "left_out", "by_class"))
    return Toxicophores(
        **_tox_fields(b, k),
        k=k,
        random_auc=b.get("random_auc", optional(read_number), None),
        predicted_mutagens=b.get("predicted_mutagens", optional(read_int), None),
        left_out=b.get("left_out", map_of(read_int), {}),
        by_class=b.get("by_class", map_of(summary), {}),
    )


def _same_subsample(value: Any, at: str) -> SameSubsample:
    b = Block(value, at, ("test_instances", "indices", "methods"))
    return SameSubsample(
        test_instances=b.get("test_instances", optional(read_int), None),
        indices=b.get("indices", list_of(read_int), ()),
        methods=b.get("methods", map_of(_method), {}),
    )


def _machine(value: Any, at: str) -> Machine:
    b = Block(value, at, _names(Machine))
    text = optional(read_text)
    return Machine(
        device=b.get("device", text, None),
        threads=b.get("threads", optional(read_int), None),
        cpu=b.get("cpu", text, None),
        torch=b.get("torch", text, None),
        gpu=b.get("gpu", text, None),
    )


def _result(data: Any) -> ResultFile:
    b, version = _top(data, _names(ResultFile))
    return ResultFile(
        dataset=b.need("dataset", read_text),
        methods=b.need("methods", map_of(_method)),
        schema_version=version,
        target=b.get("target", _target, Target()),
        distillation=b.get("distillation", _distillation, Distillation()),
        k_grid=b.get("k_grid", list_of(read_int), ()),
        faithfulness_k=b.get("faithfulness_k", list_of(read_int), ()),
        log_odds_k=b.get("log_odds_k", optional(read_int), None),
        test_instances=b.get("test_instances", optional(read_int), None),
        seconds=b.get("seconds", optional(read_number), None),
        machine=b.get("machine", _machine, Machine()),
        same_subsample=b.get("same_subsample", map_of(_same_subsample), {}),
        toxicophores=b.get("toxicophores", optional(_toxicophores), None),
    )


def _bench_row(value: Any, at: str) -> BenchRow:
    b = Block(value, at, ("calls", "median_ms", "p90_ms", "times_gem", "process_medians_ms"))
    return BenchRow(
        calls=b.need("calls", read_int),
        median_ms=b.need("median_ms", read_number),
        p90_ms=b.need("p90_ms", read_number),
        times_gem=b.need("times_gem", read_number),
        process_medians_ms=b.get("process_medians_ms", list_of(read_number), ()),
    )


def _pyg_bench(value: Any, at: str) -> PygBench:
    b = Block(value, at, ("model", "fit_graphs", "fit_seconds", "rows"))
    return PygBench(
        model=b.need("model", read_text),
        fit_graphs=b.need("fit_graphs", read_int),
        fit_seconds=b.need("fit_seconds", read_number),
        rows=b.need("rows", map_of(_bench_row)),
    )


def _zoo_row(value: Any, at: str) -> ZooRow:
    b = Block(value, at, ("method", "mean_sufficiency", "mean_necessity", "ms_per_graph"))
    return ZooRow(
        method=b.need("method", read_text),
        mean_sufficiency=b.need("mean_sufficiency", read_number),
        mean_necessity=b.need("mean_necessity", read_number),
        ms_per_graph=b.need("ms_per_graph", read_number),
    )


def _zoo_model(value: Any, at: str) -> ZooModel:
    keys = ("model", "title", "task", "dataset", "quality", "instances", "reads_bonds")
    b = Block(value, at, (*keys, "seconds", "rows"))
    return ZooModel(
        model=b.need("model", read_text),
        title=b.need("title", read_text),
        task=b.need("task", read_text),
        dataset=b.need("dataset", read_text),
        quality=b.need("quality", map_of(read_number)),
        instances=b.need("instances", read_int),
        reads_bonds=b.need("reads_bonds", read_flag),
        seconds=b.need("seconds", read_number),
        rows=b.need("rows", list_of(_zoo_row)),
    )


def _zoo_bench(value: Any, at: str) -> ZooBench:
    b = Block(value, at, ("seed", "protocol", "models"))
    return ZooBench(
        seed=b.need("seed", read_int),
        protocol=b.need("protocol", read_text),
        models=b.need("models", list_of(_zoo_model)),
    )


def _crippen_row(value: Any, at: str) -> CrippenRow:
    numbers = ("spearman", "kendall", "spearman_magnitude", "kendall_magnitude")
    means = ("mean_sufficiency", "mean_necessity", "ms_per_molecule")
    extra = ("fit_seconds", "check", "teacher")
    b = Block(value, at, ("method", *numbers, "molecules_ranked", *means, *extra))
    return CrippenRow(
        method=b.need("method", read_text),
        spearman=b.need("spearman", read_number),
        kendall=b.need("kendall", read_number),
        spearman_magnitude=b.need("spearman_magnitude", read_number),
        kendall_magnitude=b.need("kendall_magnitude", read_number),
        molecules_ranked=b.need("molecules_ranked", read_int),
        mean_sufficiency=b.need("mean_sufficiency", read_number),
        mean_necessity=b.need("mean_necessity", read_number),
        ms_per_molecule=b.need("ms_per_molecule", read_number),
        fit_seconds=b.get("fit_seconds", read_number, None),
        check=b.get("check", read_text, None),
        teacher=b.get("teacher", read_text, None),
    )


def _crippen_bench(value: Any, at: str) -> CrippenBench:
    counts = ("seed", "molecules", "test_molecules", "gem_train_molecules")
    b = Block(value, at, ("model", "reads_bonds", *counts, "regressor", "rows", "split"))
    return CrippenBench(
        model=b.need("model", read_text),
        reads_bonds=b.need("reads_bonds", read_flag),
        seed=b.need("seed", read_int),
        molecules=b.need("molecules", read_int),
        test_molecules=b.need("test_molecules", read_int),
        gem_train_molecules=b.need("gem_train_molecules", read_int),
        regressor=b.need("regressor", map_of(read_number)),
        rows=b.need("rows", list_of(_crippen_row)),
        split=b.get("split", read_text, "test"),
    )


def _split_method(value: Any, at: str) -> SplitMethod:
    curves = ("sufficiency", "necessity", "sufficiency_per_class", "necessity_per_class")
    b = Block(value, at, ("method", *curves, "mean_sufficiency", "mean_necessity", "seconds"))
    return SplitMethod(
        method=b.need("method", read_text),
        sufficiency=b.need("sufficiency", read_k_map),
        necessity=b.need("necessity", read_k_map),
        sufficiency_per_class=b.need("sufficiency_per_class", by_int(read_k_map)),
        necessity_per_class=b.need("necessity_per_class", by_int(read_k_map)),
        mean_sufficiency=b.need("mean_sufficiency", read_number),
        mean_necessity=b.need("mean_necessity", read_number),
        seconds=b.need("seconds", read_number),
    )


def _split_run(value: Any, at: str) -> SplitRun:
    b = Block(value, at, ("split", "instances", "class_counts", "methods"))
    return SplitRun(
        split=b.need("split", read_text),
        instances=b.need("instances", read_int),
        class_counts=b.need("class_counts", by_int(read_int)),
        methods=b.need("methods", list_of(_split_method)),
    )


def _splits_target(value: Any, at: str) -> SplitsTarget:
    b = Block(value, at, ("dataset", "target", "protocol", "splits"))
    return SplitsTarget(
        dataset=b.need("dataset", read_text),
        target=b.need("target", read_text),
        protocol=b.need("protocol", read_text),
        splits=b.need("splits", list_of(_split_run)),
    )


def _class_times(value: Any, at: str) -> ClassTimes:
    keys = ("n", "server_p50", "server_p95", "browser_p50", "browser_p95")
    b = Block(value, at, keys)
    return ClassTimes(
        n=b.need("n", read_int),
        server_p50=b.need("server_p50", read_number),
        server_p95=b.need("server_p95", read_number),
        browser_p50=b.need("browser_p50", read_number),
        browser_p95=b.need("browser_p95", read_number),
    )


def _class_action(value: Any, at: str) -> dict[str, ClassTimes]:
    b = Block(value, at, ("one", "many"))
    return {"one": b.need("one", _class_times), "many": b.need("many", _class_times)}


def _class_bench(value: Any, at: str) -> ClassBench:
    counts = ("errors", "widget_resets")
    keys = ("users", "rounds", "think_s", "threads", "actions", "rss_mb")
    b = Block(value, at, (*keys, "rss_growth_mb_per_user", *counts, "goals"))
    return ClassBench(
        users=b.need("users", read_int),
        rounds=b.need("rounds", read_int),
        think_s=b.need("think_s", read_number),
        threads=b.need("threads", read_text),
        actions=b.need("actions", map_of(_class_action)),
        rss_mb=b.need("rss_mb", map_of(read_number)),
        rss_growth_mb_per_user=b.need("rss_growth_mb_per_user", read_number),
        errors=b.need("errors", read_int),
        widget_resets=b.need("widget_resets", read_int),
        goals=b.need("goals", map_of(read_number)),
    )


def _bench(data: Any) -> BenchFile:
    b, version = _top(data, ("schema_version", "bench"))
    known = ("pyg", "zoo", "crippen", "splits", "class")
    benches = b.need("bench", lambda value, at: Block(value, at, known))
    return BenchFile(
        pyg=benches.get("pyg", _pyg_bench, None),
        schema_version=version,
        zoo=benches.get("zoo", _zoo_bench, None),
        crippen=benches.get("crippen", _crippen_bench, None),
        splits=benches.get("splits", list_of(_splits_target), ()),
        class_=benches.get("class", _class_bench, None),
    )
