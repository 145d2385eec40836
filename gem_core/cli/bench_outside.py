"""Gem on outside models: the PyG adapter on target GNNs nobody here tuned Gem for, by the field's yardstick.

Trains (or takes from the store) small graph classifiers of common recipes on Mutagenicity's
80/10/10 split: a 3-layer GCN with max pooling (GNNX-Bench's recipe), a 3-layer GIN and a
3-layer GraphSAGE. On each, Gem is fitted through PyG's ``Explainer`` on the training graphs
(``gem_core.pyg.GemExplainer`` with its defaults, taught for the protocol it is judged by), and
Gem, random edge scores, GNNExplainer, PGExplainer and Integrated Gradients (PyG's objectives,
Captum's integral) explain the chosen split. Gem is the generator alone (one forward pass,
the model not asked); Gem + check is the same fit with the adapter's explain-time search (it asks
the model which of Gem's next edges keeps its prediction); Random + check is that search over
random scores, the control. Printed per model and protocol: mean sufficiency over k = 5..25
and its curve at 5/10/15/20/25, mean necessity
over k = 2..10, mean sufficiency per predicted class, seconds (Gem: fit and explain; PGExplainer:
fit and explain), ms per explained graph (Gem: the explain call alone), and the checks of issue 50
on Gem alone (≥ random at every k, ≥ the original Gem's published .747, ≥ every baseline on mean
sufficiency and necessity; necessity ≥ .299; per class ≥ random) and on the search (Gem + check ≥
Random + check).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gem_core.cli.common import (
    add_choose_split_arg,
    add_command,
    parse_names,
    progress_bar,
    write_json,
)

# gem_core.evaluation.outside.OUTSIDE_MODELS / OUTSIDE_METHODS and gem_core.data.protocol
# .PROTOCOLS, repeated so that bad input is answered without importing torch (a test checks)
MODELS = ("gcn_max", "gin", "sage", "gine", "gatv2", "gat", "transformer", "attentivefp")
#: the models a plain run covers (as before the zoo's recipes came; ``bench zoo`` runs them all)
DEFAULT_MODELS = MODELS[:5]
METHODS = (
    "gem",
    "gem_check",
    "random_check",
    "random",
    "gnnexplainer",
    "pgexplainer",
    "integrated_gradients",
)
PROTOCOLS = ("keep_nodes", "drop_isolated")
#: the rows the "≥ every baseline" checks leave out: Gem's own three and random's
NOT_BASELINES = frozenset(METHODS[:4])
#: the original Gem's published mean sufficiency and necessity on GNNX-Bench's GCN (REFERENCE §9)
ORIGINAL_GEM_SUFFICIENCY = 0.747
ORIGINAL_GEM_NECESSITY = 0.299


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "outside", run, __doc__, dataset=False, check=_check)
    p.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"comma-separated outside models, of {', '.join(MODELS)} "
        f"(default: {','.join(DEFAULT_MODELS)})",
    )
    p.add_argument(
        "--protocols",
        default="drop_isolated,keep_nodes",
        help="comma-separated protocols (default: drop_isolated,keep_nodes)",
    )
    p.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated methods (default: {','.join(METHODS)})",
    )
    add_choose_split_arg(p)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="only the first N graphs of the split (default: all)",
    )
    p.add_argument("--seed", type=int, default=0, help="model, Gem and baseline seed (default 0)")
    p.add_argument(
        "--stability",
        action="store_true",
        help="also refit Gem with seeds 0, 1, 2 and report its stability (top-k "
        "Jaccard across seeds; two extra fits per model and protocol)",
    )


def _check(args: argparse.Namespace) -> None:
    parse_names(args.models, MODELS, "model")
    parse_names(args.protocols, PROTOCOLS, "protocol")
    parse_names(args.methods, METHODS, "method")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be a positive integer, got {args.limit}")


def _mean(d: dict[str, float]) -> float:
    return sum(d.values()) / len(d)


def checks(rows: list[dict[str, Any]]) -> list[str]:
    """The acceptance checks of one (model, protocol) block, one line each: PASS / MISS."""
    by = {r["method"]: r for r in rows}
    gem = by.get("gem")
    if gem is None:
        return []
    out = []

    def line(ok: bool, text: str) -> None:
        out.append(f"  {'PASS' if ok else 'MISS'}  {text}")

    if "random" in by:
        rnd = by["random"]
        worse = [k for k, v in gem["sufficiency_at_k"].items() if v < rnd["sufficiency_at_k"][k]]
        line(
            not worse,
            "sufficiency ≥ random's at every k = 5..25"
            + (f" (below at k = {', '.join(worse)})" if worse else ""),
        )
        for c, curve in gem["sufficiency_per_class"].items():
            g, r = _mean(curve), _mean(rnd["sufficiency_per_class"].get(c, curve))
            line(g >= r, f"class {c}: mean sufficiency {g:.3f} ≥ random's {r:.3f}")
    line(
        gem["mean_sufficiency"] >= ORIGINAL_GEM_SUFFICIENCY,
        f"mean sufficiency {gem['mean_sufficiency']:.3f} ≥ original Gem's published "
        f"{ORIGINAL_GEM_SUFFICIENCY}",
    )
    for name, row in by.items():
        if name in NOT_BASELINES:  # the baselines proper, beside random's own checks
            continue
        line(
            gem["mean_sufficiency"] >= row["mean_sufficiency"],
            f"mean sufficiency {gem['mean_sufficiency']:.3f} ≥ {name}'s "
            f"{row['mean_sufficiency']:.3f}",
        )
        line(
            gem["mean_necessity"] >= row["mean_necessity"],
            f"mean necessity {gem['mean_necessity']:.3f} ≥ {name}'s {row['mean_necessity']:.3f}",
        )
    line(
        gem["mean_necessity"] >= ORIGINAL_GEM_NECESSITY,
        f"mean necessity {gem['mean_necessity']:.3f} ≥ {ORIGINAL_GEM_NECESSITY}",
    )
    checked, control = by.get("gem_check"), by.get("random_check")
    if checked is not None and control is not None:  # the generator helps the search
        for what in ("mean_sufficiency", "mean_necessity"):
            line(
                checked[what] >= control[what],
                f"Gem + check {what.replace('mean_', 'mean ')} {checked[what]:.3f} ≥ the same "
                f"search over random scores' {control[what]:.3f}",
            )
    return out


def run(args: argparse.Namespace) -> int:
    from gem_core.data.datasets import load_dataset
    from gem_core.evaluation.outside import run_outside

    models = parse_names(args.models, MODELS, "model")
    protocols = parse_names(args.protocols, PROTOCOLS, "protocol")
    methods = parse_names(args.methods, METHODS, "method")
    dataset = load_dataset("mutagenicity")
    results = []
    start = time.perf_counter()
    for name in models:
        with progress_bar(args, f"outside {name}") as progress:
            results.append(
                run_outside(
                    name,
                    dataset,
                    protocols,
                    methods,
                    args.split,
                    seed=args.seed,
                    limit=args.limit,
                    stability_seeds=(0, 1, 2) if args.stability else (),
                    progress=progress,
                )
            )
    for res in results:
        acc = res["accuracy"]
        share = ", ".join(f"class {c} {v:.0%}" for c, v in res["predicted_share"].items())
        print(
            f"\n{res['model']}: {res['title']} — accuracy train {acc['train']:.3f} / val "
            f"{acc['val']:.3f} / test {acc['test']:.3f}; {res['instances']} {res['split']} "
            f"graphs, predicted {share}"
        )
        n = max(res["instances"], 1)
        for protocol, rows in res["protocols"].items():
            print(
                f" {protocol}: {'method':<21} {'suff':>5} {'@5':>5} {'@10':>5} {'@15':>5} "
                f"{'@20':>5} {'@25':>5} {'nec':>5}  per-class suff   seconds  ms/graph"
            )
            for r in rows:
                s = r["sufficiency_at_k"]
                per = " / ".join(
                    f"{_mean(v):.3f}" for _, v in sorted(r["sufficiency_per_class"].items())
                )
                ms = r.get("explain_ms_per_graph")
                ms = f"{ms:9.3f}" if ms is not None else f"{1000 * r['seconds'] / n:9.3f}"
                print(
                    f" {'':{len(protocol)}}  {r['method']:<21} {r['mean_sufficiency']:5.3f} "
                    + " ".join(f"{s[str(k)]:5.3f}" for k in (5, 10, 15, 20, 25))
                    + f" {r['mean_necessity']:5.3f}  {per:<15} {r['seconds']:8.1f} {ms}"
                )
            for r in rows:
                if "stability" in r:
                    st = r["stability"]
                    print(
                        f"  {r['method']} stability across seeds {st['seeds']}: "
                        + ", ".join(f"k={k} {st[str(k)]:.3f}" for k in (5, 10, 15, 20, 25))
                        + f"; mean {st['mean']:.3f}"
                    )
            for text in checks(rows):
                print(text)
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    write_json({"split": args.split, "seed": args.seed, "results": results}, args.json)
    return 0
