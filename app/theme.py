"""How methods look in the app: one colour each (charts, panels, badges), their titles and how
their explain times read.

Streamlit's theme would otherwise recolour Plotly traces, so every trace gets its method's colour
explicitly. Titles come from the engine's registry; colours are the app's own.
"""

from __future__ import annotations

from gem_core.api import title as _registry_title

METHOD_COLORS: dict[str, str] = {
    "gem": "#d62728",
    "gem_check": "#8c1a1b",  # Gem's red, darker: the same fit, with the target's search
    "distilled": "#9467bd",
    "distilled_predicted": "#c5b0d5",
    "gnnexplainer": "#1f77b4",
    "pgexplainer": "#2ca02c",
    "integrated_gradients": "#ff7f0e",
    "subgraphx": "#17becf",
    "random": "#7f7f7f",
    "random_check": "#3d3d3d",  # Random's grey, darker: the same search over random scores
}
FALLBACK_COLOR = "#444444"


def method_color(method: str) -> str:
    """The chart colour of ``method`` (a neutral grey for a method without one)."""
    return METHOD_COLORS.get(method, FALLBACK_COLOR)


def method_title(method: str) -> str:
    """The method's title as people read it (from the registry)."""
    return _registry_title(method)


#: classes as people read them, where the engine's name is a token ("nonmutagen")
CLASS_TITLES: dict[str, str] = {"nonmutagen": "non-mutagen"}


def class_title(name: str) -> str:
    """A class as people read it ("non-mutagen"; the JSON exports keep the engine's name)."""
    return CLASS_TITLES.get(name, name)


def fmt_ms(ms: float) -> str:
    """An explain time readable at any size: 0.036 ms, 6.4 ms, 405 ms, 28.2 s (one decimal of
    milliseconds hid sub-0.05 ms times as "0.0 ms"; 28204.2 ms reads badly)."""
    if ms < 1.0:
        return f"{ms:.2g} ms"
    if ms < 99.95:
        return f"{ms:.1f} ms"
    if ms < 999.5:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.1f} s"
