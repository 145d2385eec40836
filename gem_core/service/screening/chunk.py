"""The chunk function of a screen: input rows in, one Arrow table of result rows out.

The same :func:`screen_chunk` runs in the CLI's own process, in each worker process and in each
Ray task, so every path gives the same bytes: it depends only on its rows and settings (one
torch thread, the chunk as one batch). Models are loaded once per process and kept.
"""

from __future__ import annotations

import functools
import gc
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from gem_core.data.config import DATASETS, molecule_default_target, user_spec
from gem_core.service.screening.reader import InputRow

__all__ = [
    "ScreenSettings",
    "SCHEMA",
    "USER_TARGET",
    "screen_schema",
    "class_column",
    "check_model",
    "ParsedChunk",
    "StepTimes",
    "screen_chunk",
    "parse_chunk",
    "parse_rows",
    "unpack_parsed",
    "finish_rows",
    "explain_rows",
]

#: the classes of the Mutagenicity target (class 0 = mutagen), without importing torch
MUTAGENICITY_CLASSES: tuple[str, ...] = DATASETS["mutagenicity"].class_names
#: the target row of a model trained on a user's table (``gem_core.service.user_models.TARGET``,
#: repeated so that the settings are checked without torch)
USER_TARGET = "strong"


def class_column(name: str) -> str:
    """A class name made safe for a column name: lower-case, every character other than
    ``a-z``, ``0-9`` and ``_`` replaced by ``_`` (``"Active (IC50)"`` -> ``active__ic50_``)."""
    return re.sub(r"[^a-z0-9_]", "_", str(name).lower())


@functools.lru_cache(maxsize=64)
def screen_schema(
    first_class: str = MUTAGENICITY_CLASSES[0], regression: bool = False
) -> pa.Schema:
    """Output columns, in order, of a screen whose model's first class is ``first_class``.

    ``prediction`` is the predicted class's name; ``p_<first class>`` (the name made safe by
    :func:`class_column`: ``p_mutagen`` for Mutagenicity, ``p_active`` for a user model whose
    classes are active / inactive) the model's probability of its first class (class 0). A
    model of a number (``regression``; ``first_class`` is then the outcome's name) has
    ``value_<outcome>`` there, the predicted value, and ``prediction`` is that value as text.
    ``bonds`` are atom-index pairs (``explain``'s numbering), best first, ``scores`` theirs;
    ``message`` is the rejection message, or the parser's notes for an accepted molecule (kept
    largest fragment, charges); ``toxicophores`` the Kazius alerts found in the molecule (its
    chemistry, whichever model answered); ``closest_training`` the Tanimoto similarity of the
    model's closest training molecule (:mod:`gem_core.service.neighbours`; under 0.3 the molecule
    is outside the model's domain; null where the training data is not here). Model columns are
    null for rejected rows."""
    return pa.schema(
        [
            ("row", pa.int64()),
            ("id", pa.string()),
            ("smiles", pa.string()),
            ("canonical_smiles", pa.string()),
            ("status", pa.string()),
            ("reason", pa.string()),
            ("message", pa.string()),
            ("prediction", pa.string()),
            (("value_" if regression else "p_") + class_column(first_class), pa.float64()),
            ("bonds", pa.list_(pa.list_(pa.int32()))),
            ("scores", pa.list_(pa.float64())),
            ("fragment", pa.string()),
            ("toxicophores", pa.list_(pa.string())),
            ("closest_training", pa.float64()),
        ]
    )


#: The output columns of a Mutagenicity screen (:func:`screen_schema`; ``p_mutagen``).
SCHEMA = screen_schema()
#: the position of the first class's probability column (a regressor's value) in every schema
P_COLUMN = SCHEMA.get_field_index("p_mutagen")


def check_model(name: str) -> str:
    """The user model ``name`` as a screen names it (stripped, lower-cased); a one-line
    ``ValueError`` when there is no such model (no torch needed)."""
    key = str(name).strip().lower()
    if user_spec(key) is None:
        raise ValueError(f"No model named {name!r} (python -m gem_core models list).")
    return key


STATUS_OK = "ok"
STATUS_REJECTED = "rejected"


@dataclass(frozen=True)
class ScreenSettings:
    """What a screen computes (everything that changes its rows): explainer ``method`` (a
    batched one), ``k`` explanation bonds (``None``: each molecule's own K, a quarter of its
    bonds as on the Molecule page, :func:`gem_core.service.molecules.molecule_k`), the
    Mutagenicity ``target`` (default: the molecule default of the target registry),
    ``device`` and how ``salts`` are read (:data:`~gem_core.chemistry.smiles.SALT_RULES`:
    refused, their largest fragment, or whole). Gem's explain-time search
    (:mod:`gem_core.gem.checked_ranking`: milliseconds per molecule where Gem's one pass costs
    0.1) is its own method, ``gem_check``.

    ``model``: the name of a model trained on a user's table (``train --csv``,
    :mod:`gem_core.service.user_models`) that answers instead of Mutagenicity's ``target``
    (then not read; :func:`~gem_core.service.screening.runner.check_settings` sets it to the
    user model's own target row). The rows then hold that model's class names as
    ``prediction`` and its first class's probability as ``p_<first class>`` (:attr:`schema`)."""

    method: str = "gem"
    k: Optional[int] = None
    target: str = field(default_factory=molecule_default_target)
    device: str = "cpu"
    salts: str = "refuse"
    model: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        """The settings as a run's manifest and output metadata keep them (a Mutagenicity
        screen's without ``model``: the same as before user models existed)."""
        out = asdict(self)
        if self.model is None:
            del out["model"]
        return out

    @property
    def class_names(self) -> tuple[str, ...]:
        """The answering model's classes, in its order (class 0 first); a one-line
        ``ValueError`` for a user model that is not there (any more)."""
        if self.model is None:
            return MUTAGENICITY_CLASSES
        spec = user_spec(check_model(self.model))
        assert spec is not None  # check_model found it
        return spec.class_names

    @property
    def first_class(self) -> str:
        """The class whose probability the rows hold (``mutagen`` for Mutagenicity; a
        regressor's outcome name)."""
        return self.class_names[0]

    @property
    def regression(self) -> bool:
        """Whether the answering model predicts a number (a user's regression model)."""
        if self.model is None:
            return False
        spec = user_spec(check_model(self.model))
        return spec is not None and spec.regression

    @property
    def schema(self) -> pa.Schema:
        """The output columns of this screen: :data:`SCHEMA` for Mutagenicity, else
        :func:`screen_schema` of the user model's first class (or outcome)."""
        if self.model is None:
            return SCHEMA
        return screen_schema(self.first_class, self.regression)


_MODELS: dict[tuple[Optional[str], str, str], Any] = {}


def _model(settings: ScreenSettings) -> Any:
    """This process's workbench (Mutagenicity's ``target``, or the user's ``model``) with the
    explainer loaded (once per process)."""
    key = (settings.model, settings.target, settings.device)
    if key not in _MODELS:
        from gem_core.service.molecules import molecule_model

        wb = molecule_model(settings.device, target=settings.target, model=settings.model)
        wb.explainer(settings.method)
        _MODELS[key] = wb
        # The engine's modules and the models live as long as this process: move them out of
        # the cyclic collector's reach, or every full collection (a chunk allocates enough for
        # several) walks them again. 6-7 % of a one-process screen on 2 cores.
        gc.freeze()
    return _MODELS[key]


def _explainer(model: Any, settings: ScreenSettings) -> Any:
    """The workbench's explainer of ``settings.method``."""
    return model.explainer(settings.method)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class StepTimes:
    """Seconds :func:`explain_rows` spends per step, summed over the chunks it is given
    (``bench screen --steps``); ``None`` in its place times nothing."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def _step(times: Optional[StepTimes], name: str) -> Iterator[None]:
    if times is None:
        yield
    else:
        with times.step(name):
            yield


@dataclass
class ParsedChunk:
    """Rows after parsing: the output columns filled so far and the accepted molecules
    ``(position, MoleculeInstance)``; :func:`finish_rows` adds the model's columns."""

    columns: dict[str, list[Any]]
    parsed: list[tuple[int, Any]]


def parse_rows(
    rows: Sequence[InputRow], settings: ScreenSettings, times: Optional[StepTimes] = None
) -> ParsedChunk:
    """Parse every row into a Mutagenicity-like graph and fill the columns that need no model:
    rejected rows get status, reason and the app's message; accepted ones their status,
    canonical SMILES, parser's notes and toxicophore classes."""
    from gem_core.chemistry.toxicophores import toxicophore_classes

    with _step(times, "parsing"):
        chunk = _parse_rows(rows, settings)
    out = chunk.columns
    for i, mol in chunk.parsed:
        out["status"][i] = STATUS_OK
        out["canonical_smiles"][i] = mol.smiles
        out["message"][i] = _one_line(" ".join(mol.warnings)) or None
    with _step(times, "toxicophore classes"):
        for i, mol in chunk.parsed:
            out["toxicophores"][i] = toxicophore_classes(mol.mol)
    return chunk


def _parse_rows(rows: Sequence[InputRow], settings: ScreenSettings) -> ParsedChunk:
    from gem_core.chemistry.smiles import MoleculeError, smiles_to_instance

    out: dict[str, list[Any]] = {name: [None] * len(rows) for name in settings.schema.names}
    parsed: list[tuple[int, Any]] = []
    for i, row in enumerate(rows):
        out["row"][i], out["id"][i], out["smiles"][i] = row.row, row.id, row.smiles
        error = row.error
        if error is None:
            try:
                parsed.append(
                    (
                        i,
                        smiles_to_instance(row.smiles, salts=settings.salts),
                    )
                )
                continue
            except MoleculeError as exc:
                error = (exc.kind, str(exc))
        out["status"][i], out["reason"][i], out["message"][i] = (
            STATUS_REJECTED,
            error[0],
            _one_line(error[1]),
        )
    return ParsedChunk(out, parsed)


def finish_rows(
    chunk: ParsedChunk, settings: ScreenSettings, times: Optional[StepTimes] = None
) -> pa.Table:
    """Predict and explain the accepted molecules of a parsed chunk (one batch), and fill the
    columns that depend on the explanation."""
    from gem_core.chemistry.convert import fragment_smiles

    out, parsed = chunk.columns, chunk.parsed
    if parsed:
        from gem_core.runtime.device import deterministic_algorithms

        with deterministic_algorithms(settings.device):  # CUDA: a resumed run gives the same bytes
            _explain_parsed(parsed, settings, out, times)
        with _step(times, "fragment SMILES"):
            for i, mol in parsed:
                out["fragment"][i] = fragment_smiles(mol.mol, out["bonds"][i])
    with _step(times, "output table"):
        return pa.Table.from_pydict(out, schema=settings.schema)


def explain_rows(
    rows: Sequence[InputRow], settings: ScreenSettings, times: Optional[StepTimes] = None
) -> pa.Table:
    """Parse, predict and explain ``rows`` (one batch) into a table of ``settings.schema``
    (:data:`SCHEMA` for Mutagenicity; ``times``: add each step's seconds there)."""
    return finish_rows(parse_rows(rows, settings, times), settings, times)


def _explain_parsed(
    parsed: list[tuple[int, Any]],
    settings: ScreenSettings,
    out: dict[str, list[Any]],
    times: Optional[StepTimes] = None,
) -> None:
    from gem_core.models.predict import NODES_PER_FORWARD

    model = _model(settings)
    instances = [mol.instance for _, mol in parsed]
    with _step(times, "target's forward"):
        if model.regression:  # a user's model of a number: its values, and the values said
            labels_t = model.predict_values(instances)
            proba_t = labels_t.view(-1, 1)
        else:
            # on the CPU, forwards of a few thousand nodes (cache-sized), not the whole chunk
            proba_t = model.predict_proba(
                instances, max_nodes=NODES_PER_FORWARD if settings.device == "cpu" else None
            )
            labels_t = proba_t.argmax(-1)
    with _step(times, "explainer"):
        # the prediction is made once: an explainer that reads it (Gem) gets it from here
        explained = _explainer(model, settings).explain(instances, predicted=labels_t)
    with _step(times, "closest training molecule"):
        from gem_core.service.neighbours import closest_similarities

        closest = closest_similarities(model, [mol.mol for _, mol in parsed])
        if closest is not None:
            for (i, _), c in zip(parsed, closest):
                out["closest_training"][i] = c
    with _step(times, "top-K bonds"):
        _fill_model_columns(
            parsed,
            proba_t.numpy(),
            labels_t.numpy(),
            explained,
            settings,
            out,
            tuple(model.spec.class_names),
        )


def _fill_model_columns(
    parsed: list[tuple[int, Any]],
    proba: np.ndarray,
    labels: np.ndarray,
    explained: Sequence[Any],
    settings: ScreenSettings,
    out: dict[str, list[Any]],
    class_names: tuple[str, ...],
) -> None:
    """The prediction (a name of ``class_names``; a regressor's value as text), the first
    class's probability (a regressor's value: ``proba`` is then ``[N, 1]`` values) and the
    top-K bonds with their scores of every molecule: one ranking and one lookup for the whole
    chunk (no tensor operation per molecule)."""
    import torch

    from gem_core.data.ranking import ranked_flat
    from gem_core.service.molecules import molecule_k

    sizes = [mol.instance.num_pairs for _, mol in parsed]
    flat_t = torch.cat([torch.as_tensor(s).detach().reshape(-1) for s in explained])
    flat = flat_t.float().cpu().numpy()  # Gem's float32 scores, as the rows show them
    chosen, counts = ranked_flat(flat, sizes, [molecule_k(settings.k, n) for n in sizes])
    pairs = torch.cat([mol.instance.pairs for _, mol in parsed], 1).numpy()
    bonds = pairs[:, chosen].T.tolist()
    scores = flat[chosen].astype(np.float64).tolist()
    p_first = out[settings.schema.names[P_COLUMN]]  # p_mutagen, p_<a user model's class 0>
    end = 0
    regression = labels.dtype.kind == "f"  # a regressor's values, not class indices
    for (i, _), p, label, n in zip(parsed, proba.tolist(), labels.tolist(), counts.tolist()):
        out["prediction"][i] = f"{label:.4g}" if regression else class_names[label]
        p_first[i] = p[0]
        out["bonds"][i] = bonds[end : end + n]
        out["scores"][i] = scores[end : end + n]
        end += n


def _one_thread() -> None:
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def warm_up(settings: ScreenSettings) -> str:
    """Load this process's model ahead of the first chunk; returns its target checkpoint's
    digest (a Ray screen's driver takes it from its workers instead of loading the model)."""
    _one_thread()
    return _model(settings).target().digest


def screen_chunk(
    index: int, rows: Sequence[InputRow], settings: ScreenSettings
) -> tuple[int, pa.Table]:
    """``(index, table)`` of one chunk, on one torch thread: the unit of work of every CPU path
    (this process, worker processes, Ray tasks)."""
    _one_thread()
    return index, explain_rows(rows, settings)


def parse_chunk(
    index: int, rows: Sequence[InputRow], settings: ScreenSettings
) -> tuple[int, bytes]:
    """The parsing half of :func:`screen_chunk`, for worker processes feeding a GPU:
    ``(index, blob)``, the :class:`ParsedChunk` packed for the trip
    (:mod:`~gem_core.service.screening.wire`; :func:`unpack_parsed` gives it back)."""
    from gem_core.service.screening.wire import pack_molecules

    _one_thread()
    chunk = parse_rows(rows, settings)
    return index, pack_molecules(chunk.columns, chunk.parsed)


def unpack_parsed(blob: bytes) -> ParsedChunk:
    """The :class:`ParsedChunk` that :func:`parse_chunk` packed."""
    from gem_core.service.screening.wire import unpack_molecules

    return ParsedChunk(*unpack_molecules(blob))
