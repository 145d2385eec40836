"""``bench app``: the Streamlit app in a real browser (Debian Chromium driven by Playwright).

Starts a fresh ``streamlit run`` server on the loopback interface, opens the Explore page and
measures, as a user sees it:

* launch → first explanation: from starting the server process until the first explainer panel
  has its pyvis network drawn on the canvas (goal ≤ 15 s);
* K change: from the key press on the sidebar's K slider until every explanation panel shows
  the new top-K (goal ≤ 1 s);
* instance change: from entering another test instance until every panel shows it (≤ 1 s);
* what-if edit: from picking an edge to delete (the Explore page's "What if…" section, test
  instance 0, house edges one after another) until the edited graph and every fast explainer's
  new top-K are drawn (≤ 1 s), and "Undo all" until the original is back; the same for the
  nitro group's C–N bond of 4-nitrotoluene on the Molecule page (RDKit pictures loaded).

Run as ``python -m gem_core bench app`` from a source checkout (the app is not part of the
installed engine).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from gem_core.cli.common import add_json_arg, write_json
from tools.browser import (
    IDLE,
    MAIN,
    AppServer,
    browser_unavailable_reason,
    click_option,
    error_texts,
    explanation_panels,
    launch_chromium,
    mark_panels_old,
    panel_drawn,
    selected_methods,
    set_instance,
    set_k,
    slider_value,
    wait_idle,
    wait_panels_drawn,
)

# issue 27's goals on 2 cores (the first explanation counted from launch, cold or warm)
GOALS = {"first_explanation_s": 12.0, "k_change_s": 0.5, "instance_change_s": 0.5,
         "edit_s": 0.5}
NITROTOLUENE = "Cc1ccc([N+](=O)[O-])cc1"  # the nitro group's C–N bond is atoms 4-5


def _cache_state(cache: Path, dataset: str) -> dict[str, Any]:
    """What the engine cache holds for ``dataset`` before the server starts."""
    files = [p for p in cache.rglob("*") if p.is_file()] if cache.is_dir() else []
    mine = [str(p.relative_to(cache)) for p in files if dataset in p.name]
    from gem_core.runtime.store import ASSETS_DIR

    return {"cache_dir": str(cache), "files": len(files), dataset: sorted(mine),
            "warm": bool(mine),
            "shipped_target": (ASSETS_DIR / "targets" / f"{dataset}.pt").exists(),
            "shipped_gem": (ASSETS_DIR / "explainers" / f"{dataset}.pt").exists()}


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def server_env(fresh_cache: bool) -> tuple[dict[str, str], Optional[tempfile.TemporaryDirectory]]:
    """The environment of a bench's server, as scripts/app.sh starts it (one torch thread unless
    the caller says otherwise), and with ``fresh_cache`` an empty temporary engine cache (the
    folder to clean up after, else None)."""
    env = dict(os.environ)
    env.setdefault("GEM_NUM_THREADS", "1")
    tmp: Optional[tempfile.TemporaryDirectory] = None
    if fresh_cache:
        tmp = tempfile.TemporaryDirectory(prefix="gem-bench-cache-")
        env["GEM_CACHE_DIR"] = tmp.name
    return env, tmp


def run_app(args: argparse.Namespace) -> int:
    from playwright.sync_api import sync_playwright

    reason = browser_unavailable_reason()
    if reason:
        print(f"bench app: {reason}", file=sys.stderr)
        return 2
    if args.users:
        from tools.bench_users import main_users

        return main_users(args)
    dataset = "ba_shapes"  # the app's default dataset
    env, tmp = server_env(args.fresh_cache)
    from gem_core.runtime.store import cache_dir

    # The server's cache folder: $GEM_CACHE_DIR, or the engine's default one.
    cache = Path(env["GEM_CACHE_DIR"]).expanduser() if env.get("GEM_CACHE_DIR") else cache_dir()
    env["GEM_CACHE_DIR"] = str(cache)
    state = _cache_state(cache, dataset)
    result: dict[str, Any] = {"dataset": dataset, "cache": state, "goals": GOALS,
                              "threads": env.get("GEM_NUM_THREADS", "")}
    server = AppServer(env=env, port=args.port)
    try:
        with sync_playwright() as pw:
            t = time.perf_counter()
            browser = launch_chromium(pw)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(args.timeout * 1000)
            result["browser_launch_s"] = time.perf_counter() - t

            server.start()
            t0 = server.started_at
            result["server_healthy_s"] = server.wait_healthy(args.timeout)
            page.goto(server.url + "/")
            page.wait_for_selector(f"{MAIN} .st-key-panel_original", timeout=args.timeout * 1000)
            result["page_shell_s"] = time.perf_counter() - t0
            first = None
            deadline = time.perf_counter() + args.timeout
            while first is None:
                for panel in explanation_panels(page):
                    if panel_drawn(page, panel) > 0:
                        first = (panel, time.perf_counter() - t0)
                        break
                if first is None:
                    if time.perf_counter() > deadline:
                        raise TimeoutError("no explanation panel drawn")
                    page.wait_for_timeout(15)
            result["first_explanation_panel"] = first[0].removeprefix("panel_")
            result["first_explanation_s"] = first[1]
            wait_idle(page, args.timeout * 1000)
            panels = explanation_panels(page)
            wait_panels_drawn(page, ["panel_original", *panels], timeout=args.timeout)
            result["all_panels_s"] = time.perf_counter() - t0
            result["panels"] = [p.removeprefix("panel_") for p in panels]
            result["methods_selected"] = selected_methods(page)

            k_times, k_panels = [], []
            k = slider_value(page, dataset)
            for i in range(args.repeats):
                direction = "ArrowLeft" if k >= 9 or (i % 2 and k > 5) else "ArrowRight"
                k += 1 if direction == "ArrowRight" else -1
                mark_panels_old(page, panels)
                t = time.perf_counter()
                set_k(page, dataset, direction)
                sel = [f".st-key-ex_svg_{dataset}-0-{p.removeprefix('panel_')}-k{k}"
                       for p in panels]
                seen = wait_panels_drawn(page, panels, sel, args.timeout, start=t)
                k_times.append(max(seen.values()) if seen else time.perf_counter() - t)
                k_panels.append({p.removeprefix("panel_"): s for p, s in seen.items()})
                wait_idle(page, args.timeout * 1000)
            result["k_change_s"] = {"median": _median(k_times), "max": max(k_times),
                                    "runs": k_times, "per_panel": k_panels}

            i_times, i_panels = [], []
            for pos in args.positions:
                mark_panels_old(page, ["panel_original", *panels])
                t = time.perf_counter()
                set_instance(page, dataset, pos)
                sel = [f".st-key-ex_svg_{dataset}-{pos}-{p.removeprefix('panel_')}-k{k}"
                       for p in panels]
                seen = wait_panels_drawn(page, ["panel_original", *panels], sel,
                                         args.timeout, start=t)
                i_times.append(max(seen.values()))
                i_panels.append({p.removeprefix("panel_"): s for p, s in seen.items()})
                wait_idle(page, args.timeout * 1000)
            result["instance_change_s"] = {"median": _median(i_times), "max": max(i_times),
                                           "runs": i_times, "positions": list(args.positions),
                                           "per_panel": i_panels}
            if args.edits:
                set_instance(page, dataset, 0)
                wait_idle(page, args.timeout * 1000)
                result["edit_s"] = _time_explore_edits(page, dataset, args.edits, args.timeout)
                result["molecule_edit_s"] = _time_molecule_edit(page, server.url, args.timeout,
                                                                args.edits)
            result["errors"] = error_texts(page)
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            browser.close()
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()
    _print_table(result)
    write_json({"bench": {"app": result}}, args.json)
    return 1 if result["errors"] else 0


def _whatif_panels(page: Any, prefix: str) -> list[str]:
    """Container keys of the What-if panels that draw a network (edited graph, explainers)."""
    keys = page.eval_on_selector_all(
        f"{MAIN} [class*='st-key-{prefix}_panel_']",
        "els => els.filter(e => e.querySelector('iframe')).map("
        f"e => [...e.classList].find(c => c.startsWith('st-key-{prefix}_panel_')).slice(7))")
    return [k for k in keys if "_cmp_" not in k]


def _time_explore_edits(page: Any, dataset: str, count: int, timeout: float) -> dict[str, Any]:
    """Delete house edges of test instance 0 one by one (each adds to the edit), then undo."""
    from gem_core.service.session import workbench
    from gem_core.service.whatif import Edit, evaluate_edits

    wb = workbench(dataset, "cpu")
    inst = wb.instances("test")[0]
    pairs = [tuple(p) for p in inst.pairs.t().tolist()]
    ids = inst.node_ids.tolist()
    motif = [j for j in range(len(pairs)) if inst.motif_mask is not None and inst.motif_mask[j]]
    order = [j for j in motif if inst.target not in pairs[j]] + \
        [j for j in motif if inst.target in pairs[j]]
    chosen: list[int] = []
    for j in order:  # never an edit the engine rejects: every step must draw
        _, (out,) = evaluate_edits(wb, inst, [Edit.of([pairs[i] for i in [*chosen, j]])])
        if out.error is None:
            chosen.append(j)
        if len(chosen) == count:
            break
    times, panels = [], []
    for step, j in enumerate(chosen):
        label = f"{ids[pairs[j][0]]}–{ids[pairs[j][1]]}"
        token = "e" + "_".join(map(str, sorted(chosen[:step + 1])))
        mark_panels_old(page, panels)
        # the picker's find box matches whole node labels: one end of the edge
        t = click_option(page, "ex_whatif_edges_", str(ids[pairs[j][0]]), label)
        sel = f".st-key-ex_whatif_result_{token}"
        if not panels:  # the first edit mounts the panels: find them once they are there
            page.wait_for_selector(sel, timeout=timeout * 1000)
            wait_idle(page, timeout * 1000)
            panels = _whatif_panels(page, "ex_whatif")
        seen = wait_panels_drawn(page, panels, [sel], timeout, start=t)
        times.append(max(seen.values()))
        page.keyboard.press("Escape")
        wait_idle(page, timeout * 1000)
    t = time.perf_counter()
    page.locator("[class*='st-key-ex_whatif_undo_'] button").click()
    page.wait_for_selector(".st-key-ex_whatif_result_none", timeout=timeout * 1000)
    undo = time.perf_counter() - t
    wait_idle(page, timeout * 1000)
    return {"median": _median(times), "max": max(times) if times else float("nan"),
            "runs": times, "first": times[0] if times else float("nan"),
            "edges": [f"{ids[pairs[j][0]]}–{ids[pairs[j][1]]}" for j in chosen],
            "panels": [p.removeprefix("ex_whatif_panel_") for p in panels], "undo_s": undo}


#: bonds of 4-nitrotoluene deleted one after another on the Molecule page (each adds to the edit)
MOLECULE_EDITS = ("C4–N5 (aromatic nitro)", "C1–C2", "C3–C4", "C8–C9", "C0–C1")


def _time_molecule_edit(page: Any, url: str, timeout: float, count: int) -> dict[str, Any]:
    """4-nitrotoluene on the Molecule page: delete ``count`` bonds one after another (the nitro
    group's C–N first), each until every What-if picture (edited molecule, each fast
    explainer) is loaded; then undo."""
    import re

    from gem_core.chemistry.smiles import smiles_to_instance

    pairs = smiles_to_instance(NITROTOLUENE).pairs
    page.goto(url + "/molecule")
    page.wait_for_selector(f"{MAIN} [data-testid=stHeading]", timeout=timeout * 1000)
    wait_idle(page, timeout * 1000)
    page.locator(".st-key-mol_smiles input").fill(NITROTOLUENE)
    page.locator(".st-key-mol_explain button").click()
    page.wait_for_timeout(200)
    page.wait_for_selector(".st-key-mol_whatif_result_none", timeout=timeout * 1000)
    wait_idle(page, timeout * 1000)
    times, chosen, panels = [], [], 0
    for label in MOLECULE_EDITS[:max(1, count)]:
        a, b = (int(n) for n in re.findall(r"[A-Z][a-z]?(\d+)", label.split(" ")[0]))
        chosen.append(pairs.index((a, b)))
        token = "e" + "_".join(map(str, sorted(chosen)))
        t = click_option(page, "mol_whatif_edges_", label.split("–")[0], label)
        page.wait_for_selector(f".st-key-mol_whatif_result_{token}", timeout=timeout * 1000)
        page.wait_for_selector(IDLE, timeout=timeout * 1000)
        page.wait_for_function(
            "() => { const im = [...document.querySelectorAll("
            "\"[class*='st-key-mol_whatif_panel_'] img\")];"
            " return im.length > 0 && im.every(i => i.complete && i.naturalWidth > 0); }",
            timeout=timeout * 1000)
        times.append(time.perf_counter() - t)
        panels = page.eval_on_selector_all("[class*='st-key-mol_whatif_panel_']",
                                           "els => els.length")
        page.keyboard.press("Escape")
        wait_idle(page, timeout * 1000)
    t = time.perf_counter()
    page.locator("[class*='st-key-mol_whatif_undo_'] button").click()
    page.wait_for_selector(".st-key-mol_whatif_result_none", timeout=timeout * 1000)
    undo = time.perf_counter() - t
    wait_idle(page, timeout * 1000)
    return {"median": _median(times), "max": max(times), "runs": times, "panels": panels,
            "undo_s": undo, "bonds": list(MOLECULE_EDITS[:len(times)])}


def _print_table(r: dict[str, Any]) -> None:
    c = r["cache"]
    warm = ("warm: " + ", ".join(c[r["dataset"]])) if c["warm"] else "cold (nothing cached)"
    print(f"bench app: fresh `streamlit run` on 127.0.0.1, Explore page on {r['dataset']}, "
          f"Chromium headless, GEM_NUM_THREADS={r['threads'] or 'unset'}")
    print(f"  engine cache {c['cache_dir']}: {warm}; shipped target "
          f"{'yes' if c['shipped_target'] else 'no'}, shipped Gem "
          f"{'yes' if c['shipped_gem'] else 'no'}")
    print(f"  explainers selected: {', '.join(r['methods_selected'])}; panels drawn: "
          f"{', '.join(r['panels']) or 'none'}")
    rows = [
        ("server healthy (from launch)", r["server_healthy_s"], None),
        ("page shell (from launch)", r["page_shell_s"], None),
        (f"first explanation drawn ({r['first_explanation_panel']})",
         r["first_explanation_s"], GOALS["first_explanation_s"]),
        ("all panels drawn (from launch)", r["all_panels_s"], None),
        ("K change, median", r["k_change_s"]["median"], GOALS["k_change_s"]),
        ("K change, max", r["k_change_s"]["max"], None),
        ("instance change, median", r["instance_change_s"]["median"],
         GOALS["instance_change_s"]),
        ("instance change, max", r["instance_change_s"]["max"], None),
    ]
    if "edit_s" in r:
        e, m = r["edit_s"], r["molecule_edit_s"]
        rows += [
            (f"what-if edit → repaint, median ({len(e['runs'])})", e["median"], GOALS["edit_s"]),
            ("what-if edit → repaint, first (mounts)", e["first"], None),
            ("what-if edit → repaint, max", e["max"], None),
            ("what-if undo all", e["undo_s"], None),
            (f"molecule edit → pictures, median ({len(m['runs'])})", m["median"],
             GOALS["edit_s"]),
            ("molecule edit → pictures, max", m["max"], None),
            ("molecule undo all", m["undo_s"], None),
        ]
    print(f"  {'measure':44s} {'seconds':>8s}  {'goal':>6s}")
    for name, value, goal in rows:
        verdict = "" if goal is None else (f"≤ {goal:g}  " + ("ok" if value <= goal else "MISSED"))
        print(f"  {name:44s} {value:8.2f}  {verdict}")
    for label, key in (("K change", "k_change_s"), ("instance change", "instance_change_s")):
        per = r[key]["per_panel"]
        if per:
            panels = per[0].keys()
            parts = [f"{p} {_median([run.get(p, float('nan')) for run in per]):.2f}"
                     for p in panels]
            print(f"  {label} per panel (median s): " + ", ".join(parts))
    if "edit_s" in r:
        print(f"  what-if: deleted {', '.join(r['edit_s']['edges'])} one after another; panels "
              f"{', '.join(r['edit_s']['panels'])}; molecule: deleted "
              f"{', '.join(r['molecule_edit_s']['bonds'])}, {r['molecule_edit_s']['panels']} "
              f"pictures")
    if r["errors"]:
        print(f"  ERRORS on the page: {r['errors']}")


def register_app(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "app", help="the Streamlit app in Chromium: launch → first explanation, K and instance "
                    "changes",
        description="Start a fresh `streamlit run` server on 127.0.0.1, open the Explore page "
                    "in Debian's Chromium (Playwright) and time launch → first explanation "
                    "drawn, a K change and an instance change until the page shows the new "
                    "explanations, and what-if edits until the edited graph is drawn. Uses "
                    "$GEM_CACHE_DIR unless --fresh-cache.")
    p.add_argument("--fresh-cache", action="store_true",
                   help="start the server with an empty temporary engine cache")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="K changes to time (default: 3)")
    p.add_argument("--positions", type=int, nargs="+", default=[1, 2, 3], metavar="POS",
                   help="test-instance positions to switch to, in order (default: 1 2 3)")
    p.add_argument("--edits", type=int, default=3, metavar="N",
                   help="what-if edits to time on test instance 0 (default: 3; 0 skips the "
                        "what-if timings)")
    p.add_argument("--users", type=int, default=0, metavar="N",
                   help="a class on one server: a warm-up walk, one user, then N users walking "
                        "the app at once (Explore: open, K, a test node, a base node; a SMILES "
                        "on the Molecule page; Benchmarks); per action p50/p95 server and "
                        "browser time as ratios to one user, server RSS (tools/bench_users.py)")
    p.add_argument("--rounds", type=int, default=3, metavar="R",
                   help="with --users: rounds of the walk per user (default: 3; the one-user "
                        "phase walks twice as many)")
    p.add_argument("--think", type=float, default=2.0, metavar="S",
                   help="with --users: mean think time between a user's actions, seconds "
                        "(default: 2; each one 0.5-1.5 times that, seeded)")
    p.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    p.add_argument("--timeout", type=float, default=180.0,
                   help="seconds to wait for any step (default: 180)")
    p.add_argument("--screenshot", metavar="PNG", default=None,
                   help="save a screenshot of the page at the end")
    add_json_arg(p)
    p.add_argument("--records", metavar="PATH", default=None,
                   help="with --users: also write every click's record (server and browser "
                        "seconds, session, start) as JSON to PATH; --json writes the summary "
                        "docs/results.md shows")
    p.set_defaults(func=run_app)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m tools.bench_app ARGS`` (what ``python -m gem_core bench app ARGS`` runs)."""
    from gem_core.cli import OneLineParser

    parser = OneLineParser(prog="python -m gem_core bench")
    register_app(parser.add_subparsers(dest="benchmark", required=True))
    args = parser.parse_args(["app", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
