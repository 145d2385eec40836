"""Every page of the app in a real browser: Explore on a fresh cache, the other pages, charts."""
from __future__ import annotations

import json
import pytest

from tools.browser import (IDLE, MAIN, explanation_panels, mark_panels_old, panel_drawn,
                           panel_frame, selected_methods, set_k, slider_value, wait_panels_drawn)
from gem_core.explainers import METHODS
from gem_core.explainers import title as method_title

from .conftest import (OUTPUT, PROJECT, assert_no_errors, goto_page, heading, open_app,
                       screenshot)

pytestmark = pytest.mark.browser

KEY_OF_TITLE = {method_title(key): key for key in METHODS}
PAGES = (  # url path, heading
    ("molecule", "Explain a molecule"),
    ("your-data", "Your data"),
    ("benchmarks", "Benchmarks"),
    ("pipeline", "Pipeline"),
    ("how-it-works", "How Gem works"),
)


def _assert_pyvis_drawn(page, panel: str) -> None:
    frame = panel_frame(page, panel)
    assert frame is not None, f"no pyvis iframe in {panel}"
    # the iframe can exist before its scripts have run (a loaded machine): give them time
    try:
        frame.wait_for_function("() => typeof vis === 'object'", timeout=30_000)
    except Exception:
        pass
    assert frame.evaluate("typeof vis") == "object", f"vis is not defined in the {panel} iframe"
    wait_panels_drawn(page, [panel], timeout=30)
    assert frame.locator("canvas").count() >= 1, f"no <canvas> in the {panel} iframe"
    assert panel_drawn(page, panel) > 500, f"the {panel} canvas is blank"


def test_explore_on_a_fresh_cache_shows_ba_shapes_explanations(app_server, page):
    """The README's first command on a new machine: BA-shapes explained, nothing trained."""
    open_app(page, app_server, "/")
    assert heading(page) == "Explore explanations"
    assert page.locator(".st-key-sb_dataset input[role=combobox]").input_value() == "BA-shapes"
    main = page.locator(MAIN).inner_text()
    assert "Test instance #0" in main and "Training the" not in main

    page.locator(".st-key-sb_methods [data-tag]").first.wait_for()
    chosen = selected_methods(page)
    assert chosen, "no explainer selected by default"
    drawn, to_fit = [], []
    for title in chosen:
        key = KEY_OF_TITLE[title]
        # the panel's component iframe can appear after the script run ends: wait for either
        page.wait_for_selector(f".st-key-panel_{key} iframe, .st-key-ex_fit_{key} button")
        if page.query_selector(f".st-key-panel_{key} iframe"):
            _assert_pyvis_drawn(page, f"panel_{key}")
            text = page.locator(f".st-key-panel_{key}").inner_text()
            assert "on the explanation" in text and "edges" in text, text
            drawn.append(key)
        else:  # an explainer that needs a one-off fit offers the button instead
            assert page.locator(f".st-key-ex_fit_{key} button").is_visible(), title
            to_fit.append(key)
    _assert_pyvis_drawn(page, "panel_original")
    # the view's own "fit" button brings a zoomed view back to the whole graph
    frame = panel_frame(page, "panel_original")
    frame.evaluate("() => network.moveTo({scale: 4})")
    zoomed = frame.evaluate("() => network.getScale()")
    frame.locator("#fit").click()
    page.wait_for_timeout(500)
    assert frame.evaluate("() => network.getScale()") < zoomed
    assert drawn, f"no explanation drawn for the default explainers {chosen}"
    assert_no_errors(page)
    # The shipped target served the page: nothing was trained into the empty cache.
    trained = list((app_server.cache_dir / "targets").glob("*")) if app_server.cache_dir else []
    assert not trained, trained
    (OUTPUT / "browser-explore-defaults.json").write_text(json.dumps(
        {"selected": chosen, "drawn": drawn, "fit_button": to_fit}, indent=2))
    screenshot(page, "explore")

    # K one step up: the caption and every explanation panel follow.
    panels = explanation_panels(page)
    k = slider_value(page, "ba_shapes") + 1
    mark_panels_old(page, panels)
    set_k(page, "ba_shapes", "ArrowRight")
    wait_panels_drawn(page, panels, [f".st-key-ex_svg_ba_shapes-0-{p[6:]}-k{k}" for p in panels])
    page.wait_for_selector(IDLE)
    assert f"K = {k}" in page.locator(MAIN).inner_text()
    for p in panels:
        assert f"· {k} edges" in page.locator(f".st-key-{p}").inner_text()
    assert_no_errors(page)


def test_every_page_opens(app_server, page):
    open_app(page, app_server, "/")
    links = page.eval_on_selector_all("[data-testid=stSidebarNav] a",
                                      "els => els.map(e => new URL(e.href).pathname)")
    assert links == ["/", *(f"/{path}" for path, _ in PAGES)]
    for path, title in PAGES:
        goto_page(page, path, title)
        assert heading(page) == title
        assert_no_errors(page)
        if path == "how-it-works":  # a live pyvis example and Plotly bar charts
            frames = page.locator(f"{MAIN} iframe")
            assert frames.count() >= 1
            frame = frames.first.element_handle().content_frame()
            frame.wait_for_function("typeof network !== 'undefined'")
            assert frame.evaluate("typeof vis") == "object"
            assert frame.locator("canvas").count() >= 1
            page.locator(f"{MAIN} .js-plotly-plot .main-svg").first.wait_for()
        screenshot(page, path)
    # Direct links work too (a fresh session on that page).
    open_app(page, app_server, "/how-it-works")
    assert heading(page) == "How Gem works"


def test_benchmarks_page_draws_plotly_charts(app_server, page):
    results = PROJECT / "assets" / "results" / "ba_shapes.json"
    open_app(page, app_server, "/benchmarks")
    assert heading(page) == "Benchmarks"
    assert_no_errors(page)
    if not results.exists():
        assert "No benchmark results for BA-shapes yet" in page.locator(MAIN).inner_text()
        pytest.skip(f"{results.relative_to(PROJECT)} is not there yet (written by "
                    f"`python -m gem_core reproduce --dataset ba_shapes`): the page shows its "
                    f"'no results' message, so there are no charts to check")
    charts = page.locator(f"{MAIN} .js-plotly-plot")
    charts.first.wait_for()
    # Plotly draws each chart asynchronously after the script run: wait for all their traces.
    page.wait_for_function(
        """() => { const c = document.querySelectorAll('[data-testid=stMain] .js-plotly-plot');
                   return c.length >= 3 && [...c].every(e => e.querySelector(
                     '.scatterlayer .trace, .barlayer .trace, .boxlayer .trace')); }""")
    for i in range(charts.count()):
        assert charts.nth(i).locator(".main-svg").count() >= 1
        # at least one trace drawn (lines, bars, points or boxes)
        assert charts.nth(i).locator(
            ".scatterlayer .trace, .barlayer .trace, .boxlayer .trace").count() >= 1
    assert "Explanation accuracy" in page.locator(MAIN).inner_text()
    screenshot(page, "benchmarks-charts")



def test_the_wheel_scrolls_the_page_and_ctrl_wheel_zooms_the_graph(app_server, page):
    """Issue 27 item 15: over a graph the mouse wheel scrolls the page instead of zooming; Ctrl +
    wheel and the + / − buttons zoom; the explained node's label is larger than the others."""
    open_app(page, app_server, "/")
    page.wait_for_selector(".st-key-panel_original iframe", timeout=120_000)
    _assert_pyvis_drawn(page, "panel_original")
    frame = panel_frame(page, "panel_original")
    before = frame.evaluate("() => network.getScale()")
    box = page.locator(".st-key-panel_original iframe").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)
    page.wait_for_timeout(300)
    assert frame.evaluate("() => network.getScale()") == before  # not zoomed
    page.keyboard.down("Control")
    page.mouse.wheel(0, -300)
    page.keyboard.up("Control")
    page.wait_for_timeout(300)
    zoomed = frame.evaluate("() => network.getScale()")
    assert zoomed > before
    frame.locator("#zoom-out").click()
    page.wait_for_timeout(300)
    assert frame.evaluate("() => network.getScale()") < zoomed
    sizes = frame.evaluate("() => nodes.get().map(n => [n.shape, (n.font || {}).size])")
    star = [s for shape, s in sizes if shape == "star"]
    assert star and all(s > max(s2 for shape, s2 in sizes if shape != "star") for s in star)
    assert_no_errors(page)


def test_requests_to_other_hosts_are_caught():
    """The ``page`` fixture's guard: the favicon a ``:material/...`` page icon fetched from
    Google's font host (before the app shipped its own icon) counts as leaving the machine; the
    app's own server, data and blob URLs do not."""
    from .conftest import outside_requests

    gstatic = ("https://fonts.gstatic.com/s/i/short-term/release/materialsymbolsrounded/hub/"
               "default/24px.svg")
    assert outside_requests([gstatic, "http://127.0.0.1:8501/_stcore/health",
                             "http://localhost:8501/", "data:image/png;base64,AA",
                             "blob:http://127.0.0.1:8501/x"]) == [gstatic]


def _explore_drawn(page) -> list[str]:
    """Until Explore's panels are drawn (their iframes can appear after the run ends): their keys."""
    page.wait_for_selector(f"{MAIN} .st-key-panel_original iframe")
    page.wait_for_selector(f"{MAIN} [class*='st-key-panel_']:not(.st-key-panel_original) iframe")
    page.wait_for_selector(IDLE)
    panels = explanation_panels(page)
    wait_panels_drawn(page, ["panel_original", *panels], timeout=120)
    return panels


def test_the_network_views_fetch_vis_network_once_per_browser(app_server, page):
    """Every network view is an iframe of its own, made anew whenever a user comes back to
    Explore; vis-network (690 kB) came from the component's folder, which Streamlit serves again
    (gzipped on the server) for each of them: six fetches per Explore view. Served by the app's
    static files with a Last-Modified date, the browser keeps it: the first view's frames may
    fetch it side by side, a later view fetches nothing."""
    # what reached the server, per the browser's own network log (Playwright reports responses
    # served from the browser's cache as responses too)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cached: set[str] = set()
    received: dict[str, str] = {}
    cdp.on("Network.requestServedFromCache", lambda e: cached.add(e["requestId"]))
    cdp.on("Network.responseReceived", lambda e: received.update(
        {e["requestId"]: e["response"]["url"]}) if "vis-network" in e["response"]["url"]
        and not e["response"].get("fromDiskCache") else None)

    def fetched() -> list[str]:
        return sorted(url for rid, url in received.items() if rid not in cached)

    open_app(page, app_server, "/")
    assert len(_explore_drawn(page)) >= 2
    first = fetched()
    assert {u.rsplit("/", 1)[1] for u in first} == {"vis-network.css", "vis-network.min.js"}
    assert all("/app/static/vis-network/" in u for u in first), first
    goto_page(page, "benchmarks", "Benchmarks")
    page.locator("[data-testid=stSidebarNav] a").first.click()  # back: new iframes
    page.wait_for_timeout(300)
    assert len(_explore_drawn(page)) >= 2
    assert fetched() == first  # nothing fetched again
    assert_no_errors(page)


def test_the_network_views_draw_without_the_static_files(app_server, page):
    """A server started without the project's config (no static serving) still draws: the view
    falls back on the component's own copy of vis-network."""
    page.route("**/app/static/vis-network/**", lambda route: route.abort())
    open_app(page, app_server, "/")
    panels = _explore_drawn(page)
    assert len(panels) >= 2
    frame = panel_frame(page, panels[0])
    assert frame.evaluate("typeof vis") == "object"
    assert_no_errors(page)
