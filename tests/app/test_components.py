"""Unit tests of the app's drawing helpers and the teaching trace."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from components import graph_pyvis, graph_static, graph_view  # app/ is on sys.path (conftest)


def _picture():
    pairs = [(0, 1), (1, 2), (2, 0), (2, 3)]
    pos = graph_view.layout(4, pairs)
    pic = graph_view.node_task_picture(pairs, [10, 11, 12, 13], [0, 1, 1, 2],
                                       ["base", "<b>top</b>", "a&b"], 1, pos,
                                       motif=[False, True, True, False])
    return pic


def test_layout_is_deterministic_and_normalised():
    pairs = [(0, 1), (1, 2), (2, 3)]
    a, b = graph_view.layout(4, pairs), graph_view.layout(4, pairs)
    assert np.allclose(a, b)
    assert a.min() >= 0 and a.max() <= 1 and a.shape == (4, 2)


def test_pyvis_is_offline_and_escaped():
    pic = _picture().with_explanation([True, True, False, False], [0.9, 0.5, 0.1, 0.0], "#d62728")
    page = graph_pyvis.pyvis_html(pic, 300)
    assert "https://cdn" not in page and "bootstrap" not in page.lower()
    assert "<b>top</b>" not in page and "&lt;b&gt;top&lt;/b&gt;" in page
    assert "explanation edge" in page  # legend


def test_network_data_is_the_pyvis_network_as_json(tmp_path):
    import json

    pic = _picture().with_explanation([True, True, False, False], [0.9, 0.5, 0.1, 0.0], "#d62728")
    data = json.loads(json.dumps(graph_pyvis.network_data(pic)))  # what the live view receives
    assert [n["id"] for n in data["nodes"]] == [0, 1, 2, 3]
    assert [(e["from"], e["to"]) for e in data["edges"]] == pic.pairs
    assert [e["color"] for e in data["edges"]] == ["#d62728", "#d62728", graph_view.FADED_EDGE,
                                                    graph_view.FADED_EDGE]
    # the stronger score draws the wider explanation edge; the target node is a star
    assert data["edges"][0]["width"] > data["edges"][1]["width"]
    assert [n["shape"] for n in data["nodes"]].count("star") == 1
    assert data["options"]["physics"] == {"enabled": False}
    assert not any("<b>" in n["label"] + n["title"] for n in data["nodes"])  # escaped
    assert ["explanation edge (width = score)", "#d62728", "edge"] in data["legend"]
    # vis-network itself is pyvis' copy, published next to the component, atomically
    assert graph_pyvis.publish_vis_assets(tmp_path / "lib")
    inline = graph_pyvis.pyvis_html(pic, 300)
    for name in graph_pyvis.VIS_FILES:
        published = (tmp_path / "lib" / name).read_text(encoding="utf-8")
        assert published.strip() and published.strip() in inline
    assert not list((tmp_path / "lib").glob("*.tmp"))


def test_live_view_page_escapes_the_legend_and_keeps_the_browser_globals():
    from components import network_view

    page = (network_view.COMPONENT_DIR / "index.html").read_text(encoding="utf-8")
    assert "https://" not in page and "http://" not in page  # offline
    assert "lib/vis-network.min.js" in page
    assert "innerHTML" not in page and "createTextNode" in page  # legend text is never HTML
    for name in ("var network", "edges", "streamlit:componentReady", "streamlit:setFrameHeight"):
        assert name in page


def test_strip_cdn_removes_network_tags():
    html = ('<head><link rel="stylesheet" href="https://cdn.jsdelivr.net/x.css" />'
            '<script src="https://cdn.jsdelivr.net/x.js"></script><script>var a=1;</script></head>')
    out = graph_pyvis.strip_cdn(html)
    assert "jsdelivr" not in out and "var a=1;" in out


def test_static_svg_and_png():
    pic = _picture().with_explanation([True, False, True, False], [1.0, 0.2, 0.6, 0.1], "#1f77b4")
    svg = graph_static.to_svg(pic, title="A <title>")
    root = ET.fromstring(svg)  # well-formed XML, names escaped
    assert root.tag.endswith("svg")
    assert "A &lt;title&gt;" in svg
    png = graph_static.to_png(pic, title="x")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_molecule_png():
    from rdkit import Chem

    from components import molecule_view

    mol = Chem.AddHs(Chem.MolFromSmiles("O=[N+]([O-])c1ccccc1"))
    png = molecule_view.molecule_png(mol, [(0, 1), (1, 2)])
    assert png[:4] == b"\x89PNG"
    svg = molecule_view.molecule_svg(mol, [(0, 1)], [1.0])
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg


def test_charts_use_method_colours():
    from components import charts
    from theme import METHOD_COLORS

    from gem_core.api import load_result

    result = load_result({"dataset": "ba_shapes", "log_odds_k": 7,
              "methods": {"gem": {"accuracy_at_k": {"5": 0.9, "6": 0.95}, "log_odds": [0.1, 0.2],
                                  "ms_per_instance": 0.4},
                          "random": {"accuracy_at_k": {"5": 0.3, "6": 0.4}, "log_odds": [3.0],
                                     "ms_per_instance": 0.01}},
              "distillation": {"accuracy_at_k": {"5": 0.97}}})
    fig = charts.accuracy_sweep(result, ["gem", "random"])
    ours = [t for t in fig.data if t.name.endswith("(ours)")]
    paper = [t for t in fig.data if t.name.endswith("(paper)")]
    assert {t.line.color for t in ours} == {METHOD_COLORS["gem"], METHOD_COLORS["random"]}
    assert paper and all(t.line.dash == "dash" for t in paper)
    assert paper[0].line.color == METHOD_COLORS["gem"]
    assert charts.timing_chart(result, ["gem", "random"]).layout.yaxis.type == "log"
    assert len(charts.log_odds_histogram(result, ["gem", "random"]).data) == 2


def test_sufficiency_chart_puts_gnnx_bench_points_beside_ours():
    from components import charts
    from theme import METHOD_COLORS

    from gem_core.api import load_result

    curve = {"keep_nodes": {"5": 0.5}, "drop_isolated": {"5": 0.6, "10": 0.7}}
    result = load_result({"dataset": "mutagenicity",
                          "methods": {"gem": {"sufficiency_at_k": curve},
                                      "distilled": {"accuracy_at_k": {}}}})
    fig = charts.sufficiency_sweep(result, ["gem", "distilled"])
    ours = [t for t in fig.data if t.name.endswith("(ours)")]
    theirs = [t for t in fig.data if "GNNX-Bench" in t.name]
    assert [t.name for t in ours] == ["Gem (ours)"] and list(ours[0].y) == [60.0, 70.0]
    assert len(theirs) == 1 and list(theirs[0].x) == [5, 10, 15, 20, 25]
    assert theirs[0].line.dash == "dot" and theirs[0].line.color == METHOD_COLORS["gem"]
    bare = load_result({"dataset": "ba_shapes", "methods": {"gem": {}}})
    assert charts.sufficiency_sweep(bare, ["gem"]) is None


@pytest.mark.parametrize("ms, shown", [(0.036, "0.036 ms"), (0.0004, "0.0004 ms"), (6.43, "6.4 ms"),
                                       (404.9, "405 ms"), (999.7, "1.0 s"), (28204.2, "28.2 s")])
def test_explain_times_read_at_every_size(ms, shown):
    """Sub-0.05 ms times keep their digits (no "0.0 ms"), tens of seconds read in seconds."""
    from theme import fmt_ms

    assert fmt_ms(ms) == shown


def test_teaching_trace_matches_the_reference():
    from gem_core.gem.distill.reference import reference_distill_one
    from gem_core.service.session import workbench
    from teaching import greedy_trace

    wb = workbench("ba_shapes", "cpu")
    inst = next(i for i in wb.instances("test") if 6 <= i.num_pairs <= 20)
    trace = greedy_trace(inst, wb.black_box, wb.spec.connected)
    ref = reference_distill_one(inst, wb.black_box, wb.spec.connected)
    assert torch.allclose(trace.delta, ref.delta)
    assert torch.allclose(trace.weights, ref.weights)
    assert torch.equal(trace.kept, ref.kept)
    assert trace.steps and trace.steps[-1].mask.equal(ref.kept)
    # each accepted step never raises the loss by more than the tolerance
    for s in trace.steps:
        if s.accepted:
            assert s.loss_after <= s.loss_before + 1e-6
        else:
            assert s.weight == pytest.approx(s.loss_after - s.loss_before)


def test_how_it_works_default_instance_steps_replay_the_old_greedy_loop():
    """The page's default example (first BA-shapes test node with 4-30 edges): the steps from the
    engine's trace hook are those of the greedy loop the page used to run itself."""
    from gem_core.data.instances import collate
    from gem_core.gem.distill import TIE_TOL, cross_entropy
    from gem_core.gem.distill.reference import remove_pair
    from gem_core.service.session import workbench
    from teaching import greedy_trace

    wb = workbench("ba_shapes", "cpu")
    inst = next(i for i in wb.instances("test") if 4 <= i.num_pairs <= 30)
    trace = greedy_trace(inst, wb.black_box, wb.spec.connected)

    def loss(mask: torch.Tensor) -> float:
        logits = wb.black_box(collate([inst], [mask]))
        return float(cross_entropy(logits, torch.tensor([int(inst.y)]))[0])

    p = inst.num_pairs
    full = torch.ones(p, dtype=torch.bool)
    assert trace.label == int(inst.y) and trace.full_loss == loss(full)
    delta = [loss(full & (torch.arange(p) != j)) - trace.full_loss for j in range(p)]
    assert trace.delta.tolist() == delta
    current, current_loss, n = full.clone(), trace.full_loss, 0
    for j in sorted(range(p), key=lambda j: (int(round(delta[j] / TIE_TOL)), j)):
        if not current[j]:
            continue
        tentative = remove_pair(inst, current, j, wb.spec.connected)
        new = loss(tentative)
        accepted = new <= current_loss + TIE_TOL
        dropped = [i for i in range(p) if i != j and current[i] and not tentative[i]]
        s = trace.steps[n]
        assert (s.number, s.pair, s.loss_before, s.loss_after, s.accepted) == (
            n + 1, j, current_loss, new, accepted)
        assert s.weight == (0.0 if accepted else new - current_loss)
        if accepted:
            current, current_loss = tentative, new
        assert s.dropped_with == (dropped if accepted else []) and torch.equal(s.mask, current)
        n += 1
    assert n == len(trace.steps) >= 2


def test_the_picker_search_matches_whole_labels_only():
    """Issue 27, item 8: "325" finds node 325's edges, never 3–25 or 31–258; "C4" the bonds of
    C4, never those of C14 or C40; "4" the atom numbered 4; "N" every nitrogen; a group word
    its bonds; several words must all match."""
    from components.whatif_view import search

    nodes = ["3", "25", "31", "258", "325 (the explained node)", "326"]
    pairs = [(0, 1), (2, 3), (4, 5), (0, 4)]
    edges = ["3–25", "31–258", "325–326", "3–325"]
    assert search("325", pairs, nodes, edges) == ([2, 3], [4])
    assert search("3", pairs, nodes, edges) == ([0, 3], [0])
    assert search("3 325", pairs, nodes, edges) == ([3], [0, 4])
    assert search("", pairs, nodes, edges) == ([0, 1, 2, 3], list(range(6)))
    atoms = ["C4", "C14", "C40", "N5 (aromatic nitro)", "H41 (on C4)"]
    bonds = [(0, 3), (1, 2), (2, 4), (0, 4), (1, 3)]
    labels = ["C4–N5 (aromatic nitro)", "C14–C40", "C40–H41", "C4–H41", "C14–N5"]
    assert search("C4", bonds, atoms, labels) == ([0, 3], [0])
    assert search("c4", bonds, atoms, labels) == ([0, 3], [0])
    assert search("4", bonds, atoms, labels) == ([0, 3], [0])
    assert search("N", bonds, atoms, labels) == ([0, 4], [3])
    assert search("nitro", bonds, atoms, labels) == ([0], [])
    assert search("C4–N5", bonds, atoms, labels) == ([0], [0, 3])
    assert search("Xe", bonds, atoms, labels) == ([], [])


def test_overlapping_lines_stay_visible_and_titles_clear_the_legend_and_toolbar():
    """Issue 27 item 12: Gem's line drawn last (on top), one marker shape per method, the legend
    under the x-axis title, titles at the left (clear of Plotly's toolbar), and a strong-target
    chart saying which target was measured beside the paper's dashed values."""
    from components import charts

    from gem_core.api import load_result

    same = {"5": 0.9, "6": 0.95}  # two methods on exactly the same points (Tree-cycles' case)
    raw = {"dataset": "tree_cycles", "target": {"name": "paper"},
              "methods": {"gem": {"accuracy_at_k": same, "agreement_at_k": same},
                          "pgexplainer": {"accuracy_at_k": same, "agreement_at_k": same},
                          "random": {"accuracy_at_k": {"5": 0.3}, "agreement_at_k": {"5": 0.3}}}}
    result = load_result(raw)
    methods = ["gem", "pgexplainer", "random"]
    for fig in (charts.accuracy_sweep(result, methods), charts.agreement_sweep(result, methods)):
        ours = [t for t in fig.data if "paper" not in t.name]
        assert ours[-1].name.startswith("Gem")
        symbols = [t.marker.symbol for t in ours]
        assert len(set(symbols)) == len(symbols) == 3
        layout = fig.layout
        assert layout.legend.yanchor == "top" and layout.legend.y <= -0.25
        assert layout.margin.b >= 100 and layout.title.x == 0 and layout.title.xanchor == "left"
        assert "target" not in layout.title.text
    strong = load_result({**raw, "dataset": "mutagenicity", "target": {"name": "strong"},
                          "methods": {"gem": {"accuracy_at_k": {"15": 0.8, "20": 0.85}}}})
    fig = charts.accuracy_sweep(strong, ["gem"])
    assert fig.layout.title.text.endswith("measured on the strong target")
    assert [t.name for t in fig.data] == ["Gem (ours)", "Gem (paper, its GCN)"]
    assert fig.data[1].marker.symbol == fig.data[0].marker.symbol + "-open"


def test_a_close_up_is_laid_out_on_its_own_so_house_nodes_do_not_overlap():
    """Issue 27 item 15: the close-up of BA-shapes' crowded computation graphs is laid out
    anew (not cut out of the whole graph's spring layout, where house nodes were drawn on top of
    each other): on every large test graph its nodes stay at least 5 % of the frame apart."""
    import networkx as nx

    from gem_core.service.session import workbench

    checked = 0
    for inst in workbench("ba_shapes", "cpu").instances("test"):
        if inst.num_nodes <= 60:  # the page's close-up threshold
            continue
        g = nx.Graph(inst.pairs.t().tolist())
        keep = sorted(nx.single_source_shortest_path_length(g, int(inst.target), cutoff=2))
        pairs = [tuple(p) for p in inst.pairs.t().tolist()]
        n = inst.num_nodes
        pic = graph_view.GraphPicture(graph_view.layout(n, pairs), pairs, [str(i) for i in range(n)],
                                      ["#000000"] * n, [""] * n, int(inst.target))
        close = pic.restricted(keep)
        p = close.positions
        gaps = np.sqrt(((p[:, None] - p[None]) ** 2).sum(-1)) + np.eye(len(p)) * 9
        assert gaps.min() >= 0.05, (inst.index, gaps.min())
        assert np.array_equal(close.positions, pic.restricted(keep).positions)  # one layout
        checked += 1
    assert checked >= 5


def test_the_app_collects_then_freezes_once_many_objects_are_new():
    """A full garbage collection walked the app's ~0.5 million long-lived objects (0.27 s that
    fell into a random click). When a page run leaves many objects to walk, the app collects
    once (no garbage is kept) and freezes the survivors; otherwise a run does nothing."""
    import gc
    import weakref

    from state.runtime import settle_heap

    class Node:
        pass

    before = gc.get_freeze_count()
    assert not settle_heap(threshold=len(gc.get_objects()) + 10_000, every=1)
    assert gc.get_freeze_count() == before
    assert not settle_heap(threshold=1, every=10 ** 9)  # not its turn to look
    kept = [[i] for i in range(1000)]  # long-lived
    cycle = Node()
    cycle.self = cycle  # garbage only a collection frees
    gone = weakref.ref(cycle)
    del cycle
    assert settle_heap(threshold=1, every=1)
    assert gone() is None, "garbage was frozen instead of collected"
    assert gc.get_freeze_count() >= before + len(kept)
    assert len(gc.get_objects()) < 1000  # the collector has next to nothing left to walk


def test_outcome_histogram_bins_numbers_on_a_numeric_axis():
    """The Your data page's outcome histogram: the values themselves, binned by Plotly on a
    numeric axis (bins labelled as text once sorted 10.5 before 2.7)."""
    from components import charts

    values = [0.3, 2.7, 10.5, 11.4, 19.2, 2.5, 9.0]
    fig = charts.outcome_histogram(values, "IC50")
    (trace,) = fig.data
    assert trace.type == "histogram" and list(trace.x) == values
    assert fig.layout.xaxis.type in (None, "linear") and fig.layout.xaxis.title.text == "IC50"
