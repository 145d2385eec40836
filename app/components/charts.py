"""Plotly charts of the app. Every trace gets its method's colour explicitly (Streamlit's theme
would otherwise recolour them); the paper's numbers are dashed lines of the same colour. The
benchmark charts draw a typed results file (``gem_core.api.ResultFile``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import plotly.graph_objects as go

from gem_core.api import (DEFAULT_TARGET, get_spec, paper)
from theme import method_color as _color
from theme import method_title as _title

if TYPE_CHECKING:
    from gem_core.api import ResultFile

# The legend sits under the x-axis title (anchored by its top, with room kept for both), and the
# title at the left, clear of Plotly's toolbar (top right).
_LAYOUT = dict(margin=dict(l=50, r=20, t=60, b=120),
               legend=dict(orientation="h", yanchor="top", y=-0.3, x=0, xanchor="left"),
               template="plotly_white", height=420, title_x=0.0, title_xanchor="left")
# One marker shape per method, so lines that lie on top of each other stay visible (the order of
# the registry, cycled); Gem's line is drawn last, on top.
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "triangle-down",
            "pentagon", "cross", "hexagon")


def _symbol(m: str, methods: Sequence[str]) -> str:
    return _SYMBOLS[list(methods).index(m) % len(_SYMBOLS)] if m in methods else "circle"


def _gem_last(methods: Sequence[str]) -> list[str]:
    """Drawing order: every method in the sidebar's order, Gem last (on top of the others)."""
    return [m for m in methods if m != "gem"] + [m for m in methods if m == "gem"]


def _target_note(result: ResultFile) -> str:
    """Which target was measured, when it is not the paper's (its dashed values are the paper's
    model's)."""
    name = result.target.name
    return "" if not name or name == DEFAULT_TARGET else f" — measured on the {name} target"


def _sorted_k(row: Mapping[Any, float]) -> tuple[list[int], list[float]]:
    items = sorted(((int(k), float(v)) for k, v in row.items()), key=lambda kv: kv[0])
    return [k for k, _ in items], [v for _, v in items]


def accuracy_sweep(result: ResultFile, methods: Sequence[str],
                   mutagen_only: bool = False) -> go.Figure:
    """Explanation accuracy against K per method (solid), the paper's values dashed."""
    ds = result.dataset
    fig = go.Figure()
    paper_label = "paper" if not _target_note(result) else "paper, its GCN"
    for m in _gem_last(methods):
        res = result.methods.get(m)
        row = res.accuracy(mutagen_only) if res is not None else None
        if row:
            ks, vals = _sorted_k(row)
            fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                     name=f"{_title(m)} (ours)",
                                     line=dict(color=_color(m), width=3),
                                     marker=dict(symbol=_symbol(m, methods), size=9)))
        table = paper.EXPLANATION_ACCURACY_MUTAGEN if mutagen_only else \
            paper.EXPLANATION_ACCURACY.get(ds, {})
        ref = table.get(m) if table else None
        if ref:
            ks, vals = _sorted_k(ref)
            fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                     name=f"{_title(m)} ({paper_label})",
                                     line=dict(color=_color(m), dash="dash", width=2),
                                     marker=dict(symbol=_symbol(m, methods) + "-open", size=9)))
    dist = result.distillation.accuracy_at_k
    if dist and not mutagen_only and "distilled" in methods and "distilled" not in result.methods:
        ks, vals = _sorted_k(dist)
        fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                 name="Distillation (ours)",
                                 line=dict(color=_color("distilled"), width=3)))
    subtitle = " (mutagen test graphs only)" if mutagen_only else ""
    fig.update_layout(title=f"Explanation accuracy vs K{subtitle}{_target_note(result)}",
                      xaxis_title="K (edges kept)",
                      yaxis_title="accuracy (%)", **_LAYOUT)
    fig.update_xaxes(dtick=get_spec(ds).k_tick)
    return fig


def agreement_sweep(result: ResultFile, methods: Sequence[str]) -> Optional[go.Figure]:
    """Agreement with the target's own prediction against K per method (None when not measured)."""
    fig = go.Figure()
    for m in _gem_last(methods):
        res = result.methods.get(m)
        row = res.agreement_at_k if res is not None else None
        if row:
            ks, vals = _sorted_k(row)
            fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                     name=_title(m), line=dict(color=_color(m), width=3),
                                     marker=dict(symbol=_symbol(m, methods), size=9)))
    if not fig.data:
        return None
    fig.update_layout(title=f"Agreement with the model's own prediction vs K{_target_note(result)}",
                      xaxis_title="K (edges kept)", yaxis_title="agreement (%)", **_LAYOUT)
    fig.update_xaxes(dtick=get_spec(result.dataset).k_tick)
    return fig


def sufficiency_sweep(result: ResultFile, methods: Sequence[str],
                      protocol: str = "drop_isolated") -> Optional[go.Figure]:
    """GNNX-Bench's sufficiency against K per method (ours solid), their published points for
    their own GCN dotted and open (a different model); None when the results lack the curves."""
    ds = result.dataset
    fig = go.Figure()
    for m in _gem_last(methods):
        res = result.methods.get(m)
        row = res.curve("sufficiency", protocol) if res is not None else None
        if row:
            ks, vals = _sorted_k(row)
            fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                     name=f"{_title(m)} (ours)", line=dict(color=_color(m), width=3),
                                     marker=dict(symbol=_symbol(m, methods), size=7)))
    if not fig.data:
        return None
    for m in methods:
        ref = (paper.GNNX_BENCH_SUFFICIENCY.get(ds) or {}).get(m)
        if ref:
            ks, vals = _sorted_k(ref)
            fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                     name=f"{_title(m)} ({paper.GNNX_BENCH_MODEL})",
                                     line=dict(color=_color(m), dash="dot", width=2),
                                     marker=dict(symbol="circle-open", size=9)))
    fig.update_layout(title=f"Sufficiency vs K ({protocol.replace('_', ' ')}){_target_note(result)}",
                      xaxis_title="K (edges kept)", yaxis_title="sufficiency (%)", **_LAYOUT)
    return fig


def log_odds_histogram(result: ResultFile, methods: Sequence[str]) -> go.Figure:
    """The log-odds difference per method, one box each (no method hides behind another).

    Closer to 0 is better: the explanation alone keeps the model's confidence in its prediction.
    """
    fig = go.Figure()
    for m in methods:
        res = result.methods.get(m)
        values = res.log_odds if res is not None else None
        if values:
            fig.add_trace(go.Box(x=list(values), name=_title(m), marker=dict(color=_color(m)),
                                 line=dict(color=_color(m)), boxpoints="outliers",
                                 orientation="h"))
    k = "" if result.log_odds_k is None else result.log_odds_k
    fig.update_layout(title=f"Log-odds difference at K = {k} (0 = confidence kept)",
                      xaxis_title="logit p(full graph) − logit p(explanation)",
                      showlegend=False, **{**_LAYOUT, "margin": dict(l=150, r=20, t=60, b=60),
                                           "height": 380})
    fig.update_yaxes(autorange="reversed")  # the sidebar's order, top to bottom
    return fig


def timing_chart(result: ResultFile, methods: Sequence[str]) -> go.Figure:
    """Milliseconds per explained instance (log scale): ours (filled) beside the paper's GPU
    figures (outlined), grouped so no label sits under another bar or marker."""
    ds = result.dataset
    fig = go.Figure()
    names, ours, colors, refs = [], [], [], []
    for m in methods:
        res = result.methods.get(m)
        if res is None:
            continue
        names.append(_title(m))
        ours.append(max(res.ms_per_instance, 1e-4))
        colors.append(_color(m))
        refs.append((paper.INFERENCE_MS.get(m) or {}).get(ds))
    device = result.machine.gpu or "CPU"
    fig.add_trace(go.Bar(x=names, y=ours, marker=dict(color=colors), name=f"ours ({device})",
                         text=[f"{v:.3g} ms" for v in ours], textposition="outside",
                         offsetgroup="ours"))
    if any(r is not None for r in refs):
        fig.add_trace(go.Bar(x=names, y=[r if r is not None else None for r in refs],
                             name="paper (GPU)", offsetgroup="paper",
                             marker=dict(color="white", line=dict(color=colors, width=2)),
                             text=[f"{r:.3g} ms" if r is not None else "" for r in refs],
                             textposition="outside"))
    fig.update_layout(title="Explanation time per instance", yaxis_title="ms (log scale)",
                      yaxis_type="log", barmode="group", **_LAYOUT)
    return fig


def distillation_chart(result: ResultFile) -> Optional[go.Figure]:
    """Accuracy of the target on the distilled top-K subgraphs, with the paper's Table 6."""
    ds = result.dataset
    row = result.distillation.accuracy_at_k
    if not row:
        return None
    fig = go.Figure()
    ks, vals = _sorted_k(row)
    fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                             name="distillation (ours)",
                             line=dict(color=_color("distilled"), width=3)))
    ref = paper.DISTILLATION_ACCURACY.get(ds)
    if ref:
        ks, vals = _sorted_k(ref)
        fig.add_trace(go.Scatter(x=ks, y=[100 * v for v in vals], mode="lines+markers",
                                 name="distillation (paper)",
                                 line=dict(color=_color("distilled"), dash="dash", width=2),
                                 marker=dict(symbol="circle-open")))
    fig.update_layout(title="Distillation accuracy vs K", xaxis_title="K (edges kept)",
                      yaxis_title="accuracy (%)", **_LAYOUT)
    return fig


def edge_bars(labels: Sequence[str], series: Mapping[str, Sequence[float]],
              colors: Mapping[str, str], title: str, yaxis: str) -> go.Figure:
    """Grouped bars, one group per edge (used by the teaching page)."""
    fig = go.Figure()
    for name, values in series.items():
        fig.add_trace(go.Bar(x=list(labels), y=list(values), name=name,
                             marker=dict(color=colors.get(name, "#444444"))))
    fig.update_layout(barmode="group", title=title, yaxis_title=yaxis, xaxis_title="edge",
                      **{**_LAYOUT, "height": 340})
    fig.update_xaxes(type="category")
    return fig


def outcome_histogram(values: Sequence[float], name: str, bins: int = 20) -> go.Figure:
    """Molecules per bin of a table's numeric outcome, on a numeric axis (bins in value order,
    their widths to scale)."""
    fig = go.Figure(go.Histogram(x=list(values), nbinsx=bins, name="molecules",
                                 marker=dict(color="#1f77b4")))
    fig.update_layout(xaxis_title=name, yaxis_title="molecules", bargap=0.05, showlegend=False,
                      template="plotly_white", height=220, margin=dict(l=50, r=20, t=10, b=50))
    return fig
