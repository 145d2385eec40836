"""Shared state of the app: the sidebar selection, cached engine objects, progress bars.

Pages stay thin: they read :func:`selection`, get engine objects from here, and draw. Caching
and the session's values live only in this module (``st.cache_resource`` for shared,
thread-safe engine objects, ``st.cache_data`` for plain results, ``st.session_state`` behind
small named functions); pages and components only pass widget ``key=`` arguments.
"""
from __future__ import annotations

import gc
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import streamlit as st
import torch

from gem_core.api import (DATASETS, DatasetSpec, DEFAULT_TARGET, DEFAULT_TEACHER, METHODS, Workbench,
                          choose_device, configure_threads, get_spec, method_spec,
                          molecule_default_target, molecule_spec, recorded_fit_seconds,
                          resolve_device, target_names, target_spec, workbench)
from components import graph_pyvis, graph_view
from teaching import Trace, greedy_trace
from theme import method_title

# The explainers compared when a session starts: Gem and the paper's baselines (PGExplainer
# offers its one-off fit), and random scores as the floor.
DEFAULT_METHODS: tuple[str, ...] = ("gem", "gnnexplainer", "pgexplainer", "random")

DATA_HELP = (
    "Mutagenicity and NCI1 are read from TU Dortmund raw files. Set the environment variable "
    "`GEM_DATA_ROOT` to a folder holding `Mutagenicity/raw/Mutagenicity_*.txt` and "
    "`NCI1/raw/NCI1_*.txt` (for example `../shared/data/TUDataset`) and restart the app."
)


@st.cache_resource(show_spinner=False)
def _threads() -> int:
    """Apply ``$GEM_NUM_THREADS`` once per process."""
    return configure_threads()


# ----------------------------------------------------------------------------- heap

# A full garbage collection walks every object Python tracks: about half a million once torch,
# Streamlit and a data set are loaded, a 0.25-0.3 s pause on 2 cores that fell into a random
# click (an instance change took 0.37 s instead of 0.1 s of server time). When a page run leaves
# that many objects for the collector to walk (the first run; a new data set or model), the app
# collects once and freezes the survivors (``gc.freeze``: long-lived models, data sets, caches),
# so later collections walk only what is new. Collecting first leaves no garbage in the frozen
# set (freezing after every collection instead kept 0.15 MB of each rerun's garbage for good).
FREEZE_AT = 100_000  # objects the collector walks (~50 ms a full collection on 2 cores)


#: reruns (of every session) between two looks at the heap: listing the collector's objects
#: costs a few milliseconds under the GIL, which a class's reruns queue behind
SETTLE_EVERY = 16
_reruns_since_look = [SETTLE_EVERY]  # the first run looks


def settle_heap(threshold: int = FREEZE_AT, every: int = SETTLE_EVERY) -> bool:
    """Every ``every`` reruns of the process: collect and freeze when the collector has
    ``threshold`` or more objects to walk (see above); whether it did."""
    _reruns_since_look[0] += 1
    if _reruns_since_look[0] < every:
        return False
    _reruns_since_look[0] = 0
    if len(gc.get_objects()) < threshold:
        return False
    gc.collect()
    gc.freeze()
    return True


_threads()


# ----------------------------------------------------------------------------- selection

@dataclass(frozen=True)
class Selection:
    """What the sidebar selected; read by every page."""

    dataset: str
    device: str
    k: int
    methods: tuple[str, ...]
    target: str = "paper"

    @property
    def spec(self) -> DatasetSpec:
        return get_spec(self.dataset)


def device_options() -> list[str]:
    opts = ["auto", "cpu"]
    if torch.cuda.is_available():
        opts.append("cuda")
    return opts


DEVICE_TITLES = {"auto": "auto (the faster one, measured)", "cpu": "CPU", "cuda": "CUDA"}


def _target_selector(spec: DatasetSpec, key: str, default: str = DEFAULT_TARGET) -> str:
    """Which target model to explain, where the dataset has more than the paper's (``default``
    unless the user picks another)."""
    names = target_names(spec)
    if len(names) == 1:
        return names[0]
    chosen = st.selectbox("Model being explained", names, format_func=lambda n: target_spec(n).title,
                          index=names.index(default) if default in names else 0,
                          key=key, persist_state="session",
                          help="The graph neural network whose predictions are explained (the "
                               "paper's 'target model'): the paper's architecture, or a "
                               "stronger one that reads bond types. Explainers are fitted per "
                               "model.")
    comparison = _target_comparison(spec, names)
    if comparison:
        st.caption(comparison)
    return chosen


def _target_comparison(spec: DatasetSpec, names: tuple[str, ...]) -> str:
    """The targets side by side, from the shipped results: test accuracy and how well Gem's
    explanations find the toxicophores (molecules), so a chemist picks with figures."""
    from gem_core.api import recorded_target_summary

    parts = []
    for name in names:
        rec = recorded_target_summary(spec.name, name)
        if rec is None:
            return ""
        text = f"{name}: {100 * rec['test_accuracy']:.1f} % accurate"
        if "toxicophore_auc" in rec:
            text += f", Gem's toxicophore AUC {rec['toxicophore_auc']:.2f}"
        parts.append(text)
    return ("Test split — " + "; ".join(parts) + ". The toxicophore AUC says how well the "
            "explanations point at known mutagenic groups (0.5 = chance)."
            if parts else "")


def molecule_target() -> str:
    """The Mutagenicity target the Molecule page uses (set by the sidebar; the target registry's
    molecule default until the user picks another)."""
    return st.session_state.get("molecule_target", molecule_default_target())


def molecule_default_reason() -> str:
    """One sentence on why the Molecule page opens on its default target, from the shipped
    results (test accuracy, Gem's toxicophore AUC); empty when they cannot be read."""
    from gem_core.api import recorded_target_summary

    spec = molecule_spec()
    default = molecule_default_target()
    others = [n for n in target_names(spec) if n != default]
    recs = {n: recorded_target_summary(spec.name, n) for n in (default, *others)}
    if not others or any(r is None or "toxicophore_auc" not in r for r in recs.values()):
        return ""
    mine = recs[default]
    vs = "; ".join(f"{100 * recs[n]['test_accuracy']:.1f} % and "
                   f"{recs[n]['toxicophore_auc']:.2f} for {target_spec(n).title}" for n in others)
    return (f"The page explains the {target_spec(default).title} model by default: "
            f"it is right on {100 * mine['test_accuracy']:.1f} % of the test molecules and "
            f"Gem's explanations of it find the known mutagenic groups with a toxicophore AUC "
            f"of {mine['toxicophore_auc']:.2f} ({vs}; 0.5 = chance), in the shipped results.")


def device_label(device: str) -> str:
    """The torch device a selection really runs on, as people read it (the GPU's name)."""
    try:
        dev = resolve_device(device)
    except ValueError as exc:
        return str(exc)
    if dev.type == "cuda":
        label = f"CUDA · {torch.cuda.get_device_name(dev)}"
    else:
        label = f"CPU · {torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}"
    if device in (None, "auto"):  # say why auto chose it
        label += f" (auto: {choose_device('interactive').reason})"
    return label


def sidebar(page: str = "") -> Selection:
    """Draw the selectors shared by the pages and store the selection in the session.

    The Molecule page always uses the Mutagenicity model and its own K (one per molecule), so
    there the sidebar names the model instead of offering a dataset and a K.
    """
    molecule_page = page == "molecule"
    with st.sidebar:
        st.markdown("### Settings")
        names = list(DATASETS)
        if molecule_page:
            dataset = st.session_state.get("sb_dataset", names[0])
            st.markdown("**Model:** the Mutagenicity graph neural network (mutagen / "
                        "non-mutagen)")
        else:
            dataset = st.selectbox("Dataset", names, format_func=lambda n: DATASETS[n].title,
                                   key="sb_dataset", persist_state="session")
        spec = get_spec(dataset)
        if molecule_page:  # its own choice: the chemist's default, not the paper tables'
            target = _target_selector(molecule_spec(), "sb_target_molecule",
                                      molecule_default_target())
        else:
            target = _target_selector(spec, f"sb_target_{spec.name}")
        device = st.selectbox("Device", device_options(), format_func=DEVICE_TITLES.get,
                              key="sb_device", persist_state="session")
        st.caption(f"Running on {device_label(device)}", help="The torch device the models use.")
        if molecule_page:
            k = st.session_state.get(f"sb_k_{dataset}", spec.default_k)
        else:
            k = st.slider(
                "K (explanation edges)", min_value=min(spec.k_grid), max_value=max(spec.k_grid),
                value=spec.default_k, step=1, key=f"sb_k_{dataset}", persist_state="session",
                help=f"The paper's grid for {spec.title}: {', '.join(map(str, spec.k_grid))}.")
        methods = st.multiselect(
            "Explainers to compare", list(METHODS), default=list(DEFAULT_METHODS),
            format_func=method_title, key="sb_methods", persist_state="session")
        for m in methods:
            if method_spec(m).wait_note:
                st.warning(method_spec(m).wait_note + ".", icon="⏱")
        fitted = [method_title(m) for m in METHODS if method_spec(m).needs_fit]
        st.caption(f"{' and '.join(fitted)} learn from the training split once per dataset "
                   f"(their fits ship with the app); the others explain each instance directly.")
    chosen = target if not molecule_page or dataset == molecule_spec().name else DEFAULT_TARGET
    sel = Selection(dataset, device, int(k), tuple(m for m in METHODS if m in methods), chosen)
    if molecule_page:  # the Molecule page's model: Mutagenicity, with the target chosen here
        st.session_state["molecule_target"] = target
    st.session_state["selection"] = sel
    return sel


def selection() -> Selection:
    """The current sidebar selection (set by the router before the page runs)."""
    sel = st.session_state.get("selection")
    if sel is None:  # a page run on its own (tests): defaults
        spec = get_spec(list(DATASETS)[0])
        sel = Selection(spec.name, "auto", spec.default_k, DEFAULT_METHODS)
    return sel


# ----------------------------------------------------------------------------- engine objects

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


@st.cache_data(show_spinner=False, max_entries=64)
def test_predictions(dataset: str, device: str, digest: str,
                     target: str = "paper") -> list[list[float]]:
    """Class probabilities of the target on every test instance a user may pick (the
    explainer's, then the other test nodes; full computation graphs)."""
    wb = get_workbench(dataset, device, target)
    inst = wb.browse_instances("test")
    out: list[list[float]] = []
    for start in range(0, len(inst), 256):
        out.extend(wb.predict_proba(inst[start:start + 256]).tolist())
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def explain_test_split(dataset: str, device: str, method: str, token: str,
                       target: str = "paper") -> tuple[tuple[np.ndarray, ...], float]:
    """Scores of ``method`` for every explained test instance, in one call (the teacher from the
    split's cached distillation), and the explain time per instance (ms)."""
    wb = get_workbench(dataset, device, target)
    explained = wb.explain(method, wb.instances("test"))
    return (tuple(scores.detach().cpu().float().numpy() for scores in explained),
            float(explained.ms_per_instance))


@st.cache_data(show_spinner=False, max_entries=4000)
def explain_test_instance(dataset: str, device: str, method: str, position: int,
                          token: str, target: str = "paper") -> tuple[np.ndarray, float]:
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
        return (batch[position - explained].detach().cpu().float().numpy(),
                float(batch.ms_per_instance))
    inst = wb.browse_instances("test")[position]  # the explainer's test instances come first
    one = wb.explain(method, [inst])
    return one[0].detach().cpu().float().numpy(), float(one.ms_per_instance)


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
    contrast = instances[len(wb.instances("test")):]
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


@st.cache_data(show_spinner=False, max_entries=8000)
def probabilities_on(key: tuple, mask_bits: bytes, size: int, _model: Workbench,
                     _instance) -> list[float]:
    """The target's class probabilities on ``_instance`` (named by ``key``: the instance and
    the model) keeping only the pairs of a mask (``mask_bits``: the mask packed, ``size`` its
    length), once per server process: every panel of every rerun asked the target anew."""
    mask = torch.from_numpy(np.unpackbits(np.frombuffer(mask_bits, dtype=np.uint8),
                                          count=size).astype(bool))
    return _model.predict_proba([_instance], [mask])[0].tolist()


def probabilities_with(key: tuple, model: Workbench, instance, mask) -> list[float]:
    """:func:`probabilities_on` of a boolean ``mask`` over ``instance``'s pairs."""
    bits = np.packbits(np.asarray(torch.as_tensor(mask).cpu().numpy(), dtype=bool)).tobytes()
    return probabilities_on(key, bits, int(torch.as_tensor(mask).numel()), model, instance)


@st.cache_resource(show_spinner=False, max_entries=256)
def explained_molecule(smiles: str, largest: bool, methods: tuple[str, ...], target: str,
                       device: str, tokens: tuple[str, ...], _model: Workbench, _mol):
    """The Molecule page's prediction and explanations of one parsed molecule (``_mol``, from
    ``smiles`` with the largest-fragment option ``largest``) by ``methods`` (``tokens`` name
    their fits), computed once per server process: a class typing the same examples shares
    them. Its 2D depiction is made here, before the result is shared (read-only after)."""
    from gem_core.api import ensure_depiction, explain_molecules

    res = explain_molecules([_mol], list(methods), model=_model, strict=False)[0]
    ensure_depiction(res.molecule.mol)
    return res


@st.cache_data(show_spinner=False, max_entries=512)
def what_if(key: tuple, edits: tuple, methods: tuple[str, ...], tokens: tuple[str, ...],
            edge: str, _model: Workbench, _instance):
    """The engine's :func:`gem_core.service.whatif.evaluate_edits` of ``_instance`` (identified by
    ``key``), cached by (instance, edits, methods); ``tokens`` name the explainers used (a refit
    is a new entry). Returns ``(original, outcomes)``; an :class:`EditError` is not cached."""
    from gem_core.api import evaluate_edits

    return evaluate_edits(_model, _instance, list(edits), list(methods), edge=edge)


@st.cache_resource(show_spinner=False)
def _teachers_computed() -> set:
    """(dataset, device, target, position, token) of the contrast instances whose distilled
    teacher this process has computed: shared by every browser session."""
    return set()


def contrast_teacher(dataset: str, device: str, target: str, position: int, token: str,
                     compute: bool) -> Optional[np.ndarray]:
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


@st.cache_data(show_spinner=False, max_entries=2000)
def explanation_reading(key: tuple, method: str, k: int, class_names: tuple[str, ...],
                        edge: str, _scores, _teacher_scores, _model: Workbench, _instance,
                        _mol=None, compare_teacher: bool = True) -> tuple[dict, str]:
    """The engine's :func:`gem_core.service.reading.read_explanation` of one panel: ``(facts, text)``,
    cached per (``key``, method, K): ``key`` names the instance and the explainer's fit (its
    token), which decide the scores, so the long score arrays are not hashed on every rerun.
    ``_teacher_scores`` are the distilled teacher's when the page has them (else the engine
    distils the instance)."""
    from gem_core.api import read_explanation

    reading = read_explanation(
        _model, _instance, method, torch.as_tensor(_scores), k, class_names, mol=_mol,
        teacher_scores=None if _teacher_scores is None else torch.as_tensor(_teacher_scores),
        edge=edge, compare_teacher=compare_teacher)
    return reading.facts, reading.text


def show_reading(text: str, key: str) -> None:
    """The reading under a panel, in a keyed container (browser tests find it by its key)."""
    with st.container(key=key):
        st.markdown(f"**In words.** {text}")


def what_if_evaluator(key: tuple, model: Workbench, instance, edge: str):
    """``evaluate(edits, methods)`` for the What-if section: :func:`what_if` of this instance."""
    def evaluate(edits: tuple, methods: tuple[str, ...]):
        tokens = tuple(explainer_token(model, m) for m in methods)
        return what_if(key, tuple(edits), tuple(methods), tokens, edge, model, instance)

    return evaluate


# ----------------------------------------------------------------------------- progress

@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[float, str], None]]:
    """An ``st.progress`` bar as an engine ``progress(fraction, message)`` callback."""
    bar = st.progress(0.0, text=label)

    def update(fraction: float, message: str = "") -> None:
        text = f"{label}: {message}" if message else label
        bar.progress(min(1.0, max(0.0, float(fraction))), text=text)

    try:
        yield update
    finally:
        bar.progress(1.0, text=f"{label}: done")


def _recorded_fit_words(wb: Workbench, took: float) -> str:
    """The recorded fit time with the machine it was measured on, beside this one's."""
    from gem_core.api import recorded_results

    recorded = recorded_results(wb.name, wb.target_name)
    machine = recorded.machine if recorded is not None else None
    threads = machine.threads if machine is not None else None
    device = (machine.device if machine is not None else None) or "cpu"
    where = (device.upper()
             + (f" with {threads} thread{'s' if threads != 1 else ''}" if threads else ""))
    return (f"In the recorded benchmark run (assets/results) this fit took {took:.0f} s on a "
            f"{where}; here it runs on {device_label(wb.device.type)} and takes longer while "
            f"the machine is busy with other work.")


def fit_offer(wb: Workbench, method: str, message: str, key: str) -> None:
    """Say that ``method`` needs a one-off fit and offer a button that fits it (then reruns)."""
    title = method_title(method)
    took = recorded_fit_seconds(wb.name, method, wb.target_name)
    if took is not None:
        message += f" {_recorded_fit_words(wb, took)}"
    st.info(message, icon=":material/hourglass_empty:")
    if st.button(f"Fit {title} now", key=key, icon=":material/play_arrow:"):
        try:
            with st.status(f"Fitting {title} on {wb.spec.title}…", expanded=True):
                with progress_bar(f"fitting {title}") as progress:
                    wb.explainer(method, progress)
        except Exception as exc:  # engine errors -> message box
            show_error(exc, f"Fitting {title} failed")
            return
        st.rerun()


def show_error(exc: BaseException, what: str = "") -> None:
    """An engine error as a message box (never a traceback; that goes to the server log)."""
    logging.getLogger("gem_app").warning("%s", what or "error", exc_info=exc)
    prefix = f"{what}: " if what else ""
    st.error(f"{prefix}{exc}", icon=":material/error:")


# ----------------------------------------------------------------------------- rerun timing

RERUN_LOG = logging.getLogger("gem_app.rerun")
#: the reruns a session's debug expander lists
RECENT_RERUNS = 8


class _StderrHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when a line is written (the server's log;
    a test's capture), not on the stream of the moment it was made."""

    @property  # type: ignore[override]
    def stream(self):
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


@st.cache_resource(show_spinner=False)
def _rerun_log_handler() -> bool:
    """Send the rerun lines to stderr (the server's log) once per process: Streamlit sets up
    only its own loggers."""
    if not RERUN_LOG.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        RERUN_LOG.addHandler(handler)
        RERUN_LOG.setLevel(logging.INFO)
        RERUN_LOG.propagate = False
    return True


def session_id() -> str:
    """This browser session's id on the server (empty outside a script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return "" if ctx is None else "_".join(str(ctx.session_id).split())  # one word in the log


@contextmanager
def timed_rerun(page: str) -> Iterator[Callable[[], float]]:
    """Time this script run on the server (the whole rerun: sidebar, page, caches) and log it
    as ``rerun session=ID page=PAGE start=EPOCH ms=MS`` (what ``bench app --users`` reads).
    Yields a function giving the milliseconds so far (the debug expander shows them)."""
    _rerun_log_handler()
    wall, start = time.time(), time.perf_counter()

    def so_far() -> float:
        return 1000.0 * (time.perf_counter() - start)

    try:
        yield so_far
    finally:
        ms = so_far()
        RERUN_LOG.info("rerun session=%s page=%s start=%.3f ms=%.1f", session_id(),
                       page or "explore", wall, ms)
        recent = st.session_state.setdefault("_reruns", [])
        recent.append((page or "explore", round(ms, 1)))
        del recent[:-RECENT_RERUNS]


def rerun_debug(so_far: Callable[[], float]) -> None:
    """The sidebar's debug expander: this run's server time so far, the session's last runs."""
    recent = st.session_state.get("_reruns", [])
    with st.sidebar.expander("Server time (debug)", icon=":material/timer:"):
        with st.container(key="dbg_rerun"):
            st.caption(f"Session {session_id()[:8]} · this run {so_far():.0f} ms so far")
            if recent:
                st.caption("Last runs (page, ms): " + ", ".join(
                    f"{page} {ms:.0f}" for page, ms in reversed(recent)))


def run_page(render: Callable[[], None]) -> None:
    """Run a page; an unexpected error becomes a message box instead of a traceback.

    Streamlit's own control flow (``st.rerun``, ``st.stop``) derives from BaseException and
    passes through.
    """
    # a developer's look at the reruns: one cProfile file per rerun in this folder
    profile_to = os.environ.get("GEM_APP_PROFILE")
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        render()
    except Exception as exc:
        show_error(exc, "This page stopped on an unexpected error")
    finally:
        settle_heap()
        if profile_to:
            profiler.disable()
            Path(profile_to).mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(Path(profile_to) / f"{time.time():.3f}.prof")


# ----------------------------------------------------------------------------- page caches

@st.cache_data(show_spinner=False, max_entries=512)
def graph_layout(dataset: str, position: int, num_nodes: int,
                 pairs: tuple[tuple[int, int], ...]) -> list[list[float]]:
    """The layout of one instance's computation graph, shared by all its panels."""
    return graph_view.layout(num_nodes, pairs).tolist()


@st.cache_resource(show_spinner=False, max_entries=512)
def hop_distances(dataset: str, index: int, num_nodes: int, num_pairs: int,
                  _instance) -> tuple[int, ...]:
    """Hops from a node instance's explained node to each of its nodes (``num_nodes + 1``: not
    reachable), once per instance and server process: the What-if section orders its 1,500
    edges by them on every rerun of a BA-shapes base node."""
    import networkx as nx

    g = nx.Graph(_instance.pairs.t().tolist())
    g.add_nodes_from(range(num_nodes))
    dist = nx.single_source_shortest_path_length(g, int(_instance.target))
    return tuple(dist.get(i, num_nodes + 1) for i in range(num_nodes))


@st.cache_data(show_spinner=False, max_entries=64)
def distillation_trace(dataset: str, device: str, position: int, digest: str) -> Trace:
    """Δ of every edge of a test instance and its greedy distillation, step by step (the
    reference distillation's trace; ``digest`` names the target model)."""
    wb = get_workbench(dataset, device)
    inst = wb.instances("test")[position]
    return greedy_trace(inst, wb.black_box, wb.spec.connected)


@st.cache_data(show_spinner=False, max_entries=64)
def distilled_topk_and_targets(dataset: str, device: str, position: int, digest: str,
                               k: int) -> tuple[list[bool], list[float]]:
    """The engine's distilled top-K of a test instance and Gem's training target for it."""
    from gem_core.api import distill
    from gem_core.api import explainer_targets

    wb = get_workbench(dataset, device)
    inst = wb.instances("test")[position]
    dist = distill([inst], wb.black_box, connected=wb.spec.connected,
                   label_source=wb.gem_settings.label_source.value, device=wb.device)
    targets = explainer_targets(dist, wb.gem_settings, wb.spec.k_grid, instances=[inst],
                                black_box=wb.black_box)[0]
    return dist.topk(k)[0].tolist(), [float(t) for t in targets]


@st.cache_resource(show_spinner=False, max_entries=128)
def benchmark_chart(chart: str, source: tuple[str, float], methods: tuple[str, ...],
                    option: bool, _build: Callable[[], Any]) -> Any:
    """A Benchmarks chart (``chart``: its name) of one results file (``source``: path and
    modification time) for ``methods`` and the page's ``option``, built by ``_build`` once per
    server process: building the Plotly figures (templates copied, values validated) was most
    of the page's server time on every rerun of every session. Streamlit only reads the figure."""
    return _build()


@st.cache_resource(show_spinner=False)
def vis_assets_published(folder: str) -> bool:
    """Publish vis-network into ``folder`` once per process (the live network view's files)."""
    return graph_pyvis.publish_vis_assets(Path(folder))


# ----------------------------------------------------------------------------- session values

def session_value(key: str, default: Any = None) -> Any:
    """The session's value under ``key`` (a widget's state or a page's own), else ``default``."""
    return st.session_state.get(key, default)


def set_session_value(key: str, value: Any) -> None:
    """Set the session's value under ``key`` (a widget's state only before the widget draws)."""
    st.session_state[key] = value


def drop_session_value(key: str) -> None:
    """Forget the session's value under ``key`` (nothing when there is none)."""
    st.session_state.pop(key, None)


def session_cache(name: str) -> dict:
    """A dict kept for this browser session under ``name``: results a page keeps per session."""
    return st.session_state.setdefault(name, {})


def random_pick(key: str, n: int, again: bool) -> int:
    """A random position below ``n``, kept in the session under ``key`` until ``again``."""
    if again or key not in st.session_state:
        st.session_state[key] = random.randrange(n)
    return int(st.session_state[key])


def remember_pipeline_summary(dataset: str, summary: Any) -> None:
    """Keep the Pipeline page's last summary of ``dataset`` for this session."""
    st.session_state[f"pl_summary_{dataset}"] = summary


def pipeline_summary(dataset: str) -> Any:
    """The Pipeline page's last summary of ``dataset`` in this session (None before a run)."""
    return st.session_state.get(f"pl_summary_{dataset}")


def set_molecule_example(smiles: str) -> None:
    """An example button's callback: put ``smiles`` in the SMILES box and submit it."""
    st.session_state["mol_smiles"] = smiles
    st.session_state["mol_submitted"] = smiles


def submit_molecule() -> None:
    """The SMILES box's (and the Explain button's) callback: submit what the box holds."""
    st.session_state["mol_submitted"] = st.session_state.get("mol_smiles", "")


def submitted_molecule() -> Optional[str]:
    """The SMILES last submitted on the Molecule page (None before the first)."""
    return st.session_state.get("mol_submitted")


def prepare_smiles_box() -> None:
    """Before the SMILES box draws: a box Streamlit forgot (the page was left, so the widget was
    not drawn) shows the molecule the page's results belong to, the one last submitted."""
    if "mol_smiles" not in st.session_state and "mol_submitted" in st.session_state:
        st.session_state["mol_smiles"] = st.session_state["mol_submitted"]


def prepare_molecule_k(smiles: str, bonds: int, suggested: int) -> None:
    """Set the Molecule page's K slider before it draws: ``suggested`` for a new molecule, else
    the K chosen before, clipped to 1 … ``bonds``.

    The chosen K is kept under a key of its own: Streamlit forgets a widget's value after a run
    that does not draw it (a SMILES with a typo, another page), and K must survive those.
    """
    if st.session_state.get("mol_k_molecule") != smiles:  # a new molecule
        st.session_state["mol_k_kept"] = int(suggested)
        st.session_state["mol_k_molecule"] = smiles
    elif "mol_k" in st.session_state:  # the slider's value, drawn in the last run
        st.session_state["mol_k_kept"] = int(st.session_state["mol_k"])
    kept = int(st.session_state.get("mol_k_kept", suggested))
    st.session_state["mol_k"] = min(max(1, kept), max(1, bonds))
