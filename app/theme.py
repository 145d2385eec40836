"""How methods look in the app: one colour each (charts, panels, badges) and their titles.

Streamlit's theme would otherwise recolour Plotly traces, so every trace gets its method's colour
explicitly. Titles come from the engine's registry; colours are the app's own.
"""
from __future__ import annotations

from gem_core.explainers import title as _registry_title

METHOD_COLORS: dict[str, str] = {
    "gem": "#d62728",
    "distilled": "#9467bd",
    "distilled_predicted": "#c5b0d5",
    "gnnexplainer": "#1f77b4",
    "pgexplainer": "#2ca02c",
    "integrated_gradients": "#ff7f0e",
    "random": "#7f7f7f",
}
FALLBACK_COLOR = "#444444"


def method_color(method: str) -> str:
    """The chart colour of ``method`` (a neutral grey for a method without one)."""
    return METHOD_COLORS.get(method, FALLBACK_COLOR)


def method_title(method: str) -> str:
    """The method's title as people read it (from the registry)."""
    return _registry_title(method)
