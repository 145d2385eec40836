"""The engine's objects and results, cached once per server process for every browser session.

Streamlit runs a page's script from the top on every click; everything here is what a rerun must
not pay again: the workbench (``st.cache_resource``: shared, thread-safe engine objects), the
explainers' scores of the test instances (batched on the first view; the contrast nodes in a
background batch), the model's probabilities on an explanation, a molecule's explanations, the
What-if outcomes, the readings and the How-it-works distillation (``st.cache_data``: plain
results). Cache keys name what decides a result (dataset, device, target, the explainer's fit
token); arguments whose name starts with ``_`` are not hashed.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import streamlit as st
import torch
from teaching import Trace, greedy_trace

from gem_core.api import (
    DEFAULT_TEACHER,
    Explanation,
    Workbench,
    method_spec,
    rank_scores,
    workbench,
)

# ----------------------------------------------------------------------------- workbench


@st.cache_resource(show_spinner=False)
def get_workbench(dataset: str, device: str, target: str = "paper") -> Workbench:
    """The shared, thread-safe workbench of a dataset's target model on a device."""
    return workbench(dataset, device, target)


def method_ready(wb: Workbench, method: str) -> bool:
    """Whether ``method`` explains without a slow fit right now (fitted, saved or fit-free)."""
    return wb.is_fitted(method)


def explainer_token(wb: Workbench, method: str) -> str:
    """Identifies the explainer currently used for ``method`` (part of result cache keys)."""
    exp = wb.explainer(method)
    return f"{wb.target().digest}:{method}:{id(exp)}"


@st.cache_resource(show_spinner=False)
def _computed() -> set:
    """The keys :func:`spinner_on_first` has seen computed in this server process."""
    return set()


@contextmanager
def spinner_on_first(key: tuple, text: str) -> Iterator[None]:
    """``st.spinner(text)`` around the first computation of ``key`` in this server process, and
    nothing around the cache hits after it: a spinner starts a timer thread on every run, 7 % of
    an Explore rerun whose results are all cached (py-spy), which every session of a class
    queues behind."""
    done = _computed()
    if key in done:
        yield
        return
    with st.spinner(text):
        yield
    done.add(key)  # not reached when the computation raised: the next run tries again


# ----------------------------------------------------------------------------- test instances


@st.cache_data(show_spinner=False, max_entries=64)
def test_predictions(
    dataset: str, device: str, digest: str, target: str = "paper"
) -> list[list[float]]:
    """Class probabilities of the target on every test instance a user may pick (the
    explainer's, then the other test nodes; full computation graphs)."""
    wb = get_workbench(dataset, device, target)
    inst = wb.browse_instances("test")
    out: list[list[float]] = []
    for start in range(0, len(inst), 256):
        out.extend(wb.predict_proba(inst[start : start + 256]).tolist())
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def explain_test_split(
    dataset: str, device: str, method: str, token: str, target: str = "paper"
) -> tuple[tuple[np.ndarray, ...], float]:
    """Scores of ``method`` for every explained test instance, in one call (the teacher from the
    split's cached distillation), and the explain time per instance (ms)."""
    wb = get_workbench(dataset, device, target)
    explained = wb.explain(method, wb.instances("test"))
    return (
        tuple(scores.detach().cpu().float().numpy() for scores in explained),
        float(explained.ms_per_instance),
    )


@st.cache_data(show_spinner=False, max_entries=4000)
def explain_test_instance(
    dataset: str, device: str, method: str, position: int, token: str, target: str = "paper"
) -> tuple[np.ndarray, float]:
    """Scores of ``method`` for one test instance (float32) and the explain time (ms);
    K-independent.

    The explained test instances of a method that answers within a second are explained all at
    once on the first pick (batched: a few seconds at most, once), so that moving between
    instances never waits for an explainer and an instance always shows the same scores. The
    contrast nodes (on node tasks, the split's other nodes) come from the background batch of
    :func:`prefetch_contrast` once it is done, else one by one; a method that makes people wait
    (SubgraphX) goes one by one.
    """
    wb = get_workbench(dataset, device, target)
    explained = len(wb.instances("test"))
    if position < explained and not method_spec(method).wait_note:
        scores, ms = explain_test_split(dataset, device, method, token, target)
        return scores[position], ms
    job = _contrast_jobs().get((dataset, device, target, method, token))
    if job is not None and job.done() and job.exception() is None:
        batch = job.result()
        return (
            batch[position - explained].detach().cpu().float().numpy(),
            float(batch.ms_per_instance),
        )
    inst = wb.browse_instances("test")[position]  # the explainer's test instances come first
    one = wb.explain(method, [inst])
    return one[0].detach().cpu().float().numpy(), float(one.ms_per_instance)


@dataclass(frozen=True)
class ScoredInstance:
    """One method's scores of one test instance, in the forms the panels read (shared by every
    session: read-only)."""

    tensor: torch.Tensor  # the scores, float32
    scores: list[float]  # the same as floats, for the page's JSON
    shown: list[float]  # the widths: ranks within the instance, in [0, 1]
    ms: float
    explanation: Explanation


@dataclass(frozen=True)
class PanelRanking:
    """One method's explanation of one test instance at one K, as a panel draws it: the
    K-independent :class:`ScoredInstance` (kept once, not per K) and the ranking at K."""

    scored: ScoredInstance
    ranked: list[int]  # the top-K pairs, best first
    mask: torch.Tensor  # bool per pair: in the top K
    tied: torch.Tensor  # bool per pair: tied at the K cut

    @property
    def tensor(self) -> torch.Tensor:
        return self.scored.tensor

    @property
    def scores(self) -> list[float]:
        return self.scored.scores

    @property
    def shown(self) -> list[float]:
        return self.scored.shown

    @property
    def ms(self) -> float:
        return self.scored.ms


@st.cache_resource(show_spinner=False, max_entries=4000)
def scored_test_instance(
    dataset: str, device: str, method: str, position: int, token: str, target: str, _instance
) -> ScoredInstance:
    """:func:`explain_test_instance`'s scores as the panels read them, once per server process."""
    array, ms = explain_test_instance(dataset, device, method, position, token, target)
    scores = torch.from_numpy(array)
    return ScoredInstance(
        tensor=scores,
        scores=array.tolist(),
        shown=rank_scores(scores).tolist(),
        ms=ms,
        explanation=Explanation(method, [scores], ms, [_instance]),
    )


@st.cache_resource(show_spinner=False, max_entries=8000)
def ranked_test_instance(
    dataset: str,
    device: str,
    method: str,
    position: int,
    token: str,
    target: str,
    k: int,
    _instance,
) -> PanelRanking:
    """The scores read at K once per server process (the ranking, the top-K mask, the ties at
    the cut), not again on every rerun of every session. A few kB per K: the scores and widths
    are kept once per instance and method (:func:`scored_test_instance`)."""
    scored = scored_test_instance(dataset, device, method, position, token, target, _instance)
    explanation = scored.explanation
    return PanelRanking(
        scored=scored,
        ranked=list(explanation.ranked(0, k)),
        mask=explanation.topk_mask(0, k),
        tied=explanation.tied_at_cut(0, k),
    )


@st.cache_resource(show_spinner=False)
def _prefetcher() -> ThreadPoolExecutor:
    """One background worker per server process: the contrast nodes' batches, one at a time
    (two cores: the other stays free for the users' clicks)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="gem-prefetch")


@st.cache_resource(show_spinner=False)
def _contrast_jobs() -> dict:
    """(dataset, device, target, method, token) -> the Future of the contrast nodes' batch."""
    return {}


def _explain_apart(wb: Workbench, method: str, instances: list) -> Any:
    """``method``'s explanation of ``instances`` without holding the session's shared explainer
    for long: a method with nothing to fit gets an explainer (and model copy) of its own, a
    fitted one (Gem, PGExplainer: milliseconds per instance) uses the shared fit."""
    spec = method_spec(method)
    if spec.needs_fit:
        return wb.explain(method, instances)
    return spec.create(wb.context).explain(instances)


def prefetch_contrast(dataset: str, device: str, target: str, methods: tuple[str, ...]) -> None:
    """Explain every contrast node of the test picker (a BA-shapes base node: 1,200-1,500
    edges, GNNExplainer a third of a second each) in one background batch per fast method,
    once per server process, so later picks of them by any session are cache hits. The
    distilled teachers (a second or more per node) and methods that make people wait are
    left to their panels."""
    wb = get_workbench(dataset, device, target)
    instances = wb.browse_instances("test")
    contrast = instances[len(wb.instances("test")) :]
    if not contrast:
        return
    jobs = _contrast_jobs()
    for method in methods:
        spec = method_spec(method)
        if spec.wait_note or spec.distils or not wb.is_fitted(method):
            continue
        key = (dataset, device, target, method, explainer_token(wb, method))
        if key not in jobs:
            jobs[key] = _prefetcher().submit(_explain_apart, wb, method, contrast)


# ----------------------------------------------------------------------------- contrast teachers


@st.cache_resource(show_spinner=False)
def _teachers_computed() -> set:
    """(dataset, device, target, position, token) of the contrast instances whose distilled
    teacher this process has computed: shared by every browser session."""
    return set()


def contrast_teacher(
    dataset: str, device: str, target: str, position: int, token: str, compute: bool
) -> Optional[np.ndarray]:
    """The distilled teacher's scores of a contrast instance (a node the paper does not
    explain: its distillation asks the model once per edge, seconds on a BA-shapes hub) when
    this process has them, or when ``compute`` asks for them now; else None."""
    key = (dataset, device, target, position, token)
    done = _teachers_computed()
    if key not in done and not compute:
        return None
    scores, _ = explain_test_instance(dataset, device, DEFAULT_TEACHER, position, token, target)
    done.add(key)
    return scores


# ----------------------------------------------------------------------------- probabilities


@st.cache_data(show_spinner=False, max_entries=8000)
def probabilities_on(
    key: tuple, mask_bits: bytes, size: int, _model: Workbench, _instance
) -> list[float]:
    """The target's class probabilities on ``_instance`` (named by ``key``: the instance and
    the model) keeping only the pairs of a mask (``mask_bits``: the mask packed, ``size`` its
    length), once per server process: every panel of every rerun asked the target anew."""
    mask = torch.from_numpy(
        np.unpackbits(np.frombuffer(mask_bits, dtype=np.uint8), count=size).astype(bool)
    )
    return _model.predict_proba([_instance], [mask])[0].tolist()


def probabilities_with(key: tuple, model: Workbench, instance, mask) -> list[float]:
    """:func:`probabilities_on` of a boolean ``mask`` over ``instance``'s pairs."""
    bits = np.packbits(np.asarray(torch.as_tensor(mask).cpu().numpy(), dtype=bool)).tobytes()
    return probabilities_on(key, bits, int(torch.as_tensor(mask).numel()), model, instance)


def _unpack(mask_bits: bytes, size: int) -> torch.Tensor:
    return torch.from_numpy(
        np.unpackbits(np.frombuffer(mask_bits, dtype=np.uint8), count=size).astype(bool)
    )


@st.cache_data(show_spinner=False, max_entries=8000)
def values_on(
    key: tuple, mask_bits: bytes, size: int, _model: Workbench, _instance
) -> tuple[float, float, float]:
    """A regressor's values on ``_instance`` (named by ``key``) whole, on the pairs of a mask
    alone and without them (``mask_bits``: the mask packed, ``size`` its length), once per
    server process."""
    mask = _unpack(mask_bits, size)
    whole = torch.ones_like(mask)
    values = _model.predict_values([_instance] * 3, [whole, mask, ~mask]).tolist()
    return float(values[0]), float(values[1]), float(values[2])


def values_with(key: tuple, model: Workbench, instance, mask) -> tuple[float, float, float]:
    """:func:`values_on` of a boolean ``mask`` over ``instance``'s pairs."""
    bits = np.packbits(np.asarray(torch.as_tensor(mask).cpu().numpy(), dtype=bool)).tobytes()
    return values_on(key, bits, int(torch.as_tensor(mask).numel()), model, instance)


# ----------------------------------------------------------------------------- readings


@st.cache_data(show_spinner=False, max_entries=2000)
def explanation_reading(
    key: tuple,
    method: str,
    k: int,
    class_names: tuple[str, ...],
    edge: str,
    _scores,
    _teacher_scores,
    _model: Workbench,
    _instance,
    _mol=None,
    compare_teacher: bool = True,
) -> tuple[dict, str]:
    """The engine's :func:`gem_core.service.reading.read_explanation` of one panel: ``(facts, text)``,
    cached per (``key``, method, K): ``key`` names the instance and the explainer's fit (its
    token), which decide the scores, so the long score arrays are not hashed on every rerun.
    ``_teacher_scores`` are the distilled teacher's when the page has them (else the engine
    distils the instance)."""
    from gem_core.api import read_explanation

    reading = read_explanation(
        _model,
        _instance,
        method,
        torch.as_tensor(_scores),
        k,
        class_names,
        mol=_mol,
        teacher_scores=None if _teacher_scores is None else torch.as_tensor(_teacher_scores),
        edge=edge,
        compare_teacher=compare_teacher,
    )
    return reading.facts, reading.text


# ----------------------------------------------------------------------------- What-if


@st.cache_data(show_spinner=False, max_entries=512)
def what_if(
    key: tuple,
    edits: tuple,
    methods: tuple[str, ...],
    tokens: tuple[str, ...],
    edge: str,
    _model: Workbench,
    _instance,
):
    """The engine's :func:`gem_core.service.whatif.evaluate_edits` of ``_instance`` (identified by
    ``key``), cached by (instance, edits, methods); ``tokens`` name the explainers used (a refit
    is a new entry). Returns ``(original, outcomes)``; an :class:`EditError` is not cached."""
    from gem_core.api import evaluate_edits

    return evaluate_edits(_model, _instance, list(edits), list(methods), edge=edge)


def what_if_evaluator(key: tuple, model: Workbench, instance, edge: str):
    """``evaluate(edits, methods)`` for the What-if section: :func:`what_if` of this instance."""

    def evaluate(edits: tuple, methods: tuple[str, ...]):
        tokens = tuple(explainer_token(model, m) for m in methods)
        return what_if(key, tuple(edits), tuple(methods), tokens, edge, model, instance)

    return evaluate


# ----------------------------------------------------------------------------- molecules


@st.cache_resource(show_spinner=False, max_entries=256)
def explained_molecule(
    smiles: str,
    salts: str,
    methods: tuple[str, ...],
    target: str,
    device: str,
    tokens: tuple[str, ...],
    _model: Workbench,
    _mol,
):
    """The Molecule page's prediction and explanations of one parsed molecule (``_mol``, from
    ``smiles`` with the salts rule ``salts``) by ``methods`` (``tokens`` name
    their fits), computed once per server process: a class typing the same examples shares
    them. Its 2D depiction is made here, before the result is shared (read-only after)."""
    from gem_core.api import ensure_depiction, explain_molecules

    res = explain_molecules([_mol], list(methods), model=_model, strict=False)[0]
    ensure_depiction(res.molecule.mol)
    return res


# ----------------------------------------------------------------------------- user models

#: user-model benchmarks kept per server process (the oldest forgotten beyond this)
MAX_USER_BENCHMARKS = 64


@st.cache_resource(show_spinner=False)
def _user_benchmarks() -> dict:
    """(model name, its checkpoint's digest, device, methods) -> the engine's benchmark of it:
    shared by every browser session of this server process."""
    return {}


def user_benchmark(key: tuple) -> Optional[dict]:
    """The benchmark measured for ``key`` (see :func:`measure_user_benchmark`), or None."""
    return _user_benchmarks().get(key)


def measure_user_benchmark(
    key: tuple, name: str, device: str, methods: tuple[str, ...], alert: Optional[str], owner: str
) -> dict:
    """The engine's :func:`gem_core.evaluation.user_model_bench.evaluate_user_model` of user
    model ``name`` (as ``owner`` may open it), kept under ``key`` for the server process: a
    rerun, or another session, reads it instead of measuring again."""
    from gem_core.api import evaluate_user_model

    result = evaluate_user_model(
        name, methods=methods, device=device, alert_class=alert, owner=owner
    )
    kept = _user_benchmarks()
    kept[key] = result
    while len(kept) > MAX_USER_BENCHMARKS:
        kept.pop(next(iter(kept)))
    return result


# ----------------------------------------------------------------------------- How it works


@st.cache_data(show_spinner=False, max_entries=64)
def distillation_trace(dataset: str, device: str, position: int, digest: str) -> Trace:
    """Δ of every edge of a test instance and its greedy distillation, step by step (the
    reference distillation's trace; ``digest`` names the target model)."""
    wb = get_workbench(dataset, device)
    inst = wb.instances("test")[position]
    return greedy_trace(inst, wb.black_box, wb.spec.connected)


@st.cache_data(show_spinner=False, max_entries=64)
def distilled_topk_and_targets(
    dataset: str, device: str, position: int, digest: str, k: int
) -> tuple[list[bool], list[float]]:
    """The engine's distilled top-K of a test instance and Gem's training target for it."""
    from gem_core.api import distill, explainer_targets

    wb = get_workbench(dataset, device)
    inst = wb.instances("test")[position]
    dist = distill(
        [inst],
        wb.black_box,
        connected=wb.spec.connected,
        label_source=wb.gem_settings.teacher.label_source.value,
        device=wb.device,
    )
    targets = explainer_targets(
        dist, wb.gem_settings, wb.spec.k_grid, instances=[inst], black_box=wb.black_box
    )[0]
    return dist.topk(k)[0].tolist(), [float(t) for t in targets]


# ----------------------------------------------------------------------------- training neighbours


@st.cache_data(show_spinner=False, max_entries=2000)
def nearest_of(key: tuple, _model: Workbench, _mol) -> Any:
    """A molecule's closest training molecules (:func:`gem_core.api.nearest_training`; None
    without the data), named by ``key`` (the model and the molecule's SMILES): once per server
    process, not on every rerun of the page (a K change)."""
    from gem_core.api import nearest_training

    return nearest_training(_model, _mol)
