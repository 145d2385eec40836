#!/usr/bin/env python
"""Experiment: a stronger, bond-aware Mutagenicity target GNN (GINE, see gem_core/strong_target.py).

Stages (each run once per invocation; finished training runs are kept in ``--work-dir`` and
reused, so an interrupted sweep resumes):

1. **sweep**: every recipe in ``RECIPES`` x every seed in ``--seeds`` is trained on the seeded
   80/10/10 split of ``load_dataset("mutagenicity")``, checkpoint selection and early stopping on
   validation accuracy. Only validation numbers are looked at; the table prints the mean and the
   spread (min-max) over seeds.
   With ``--top N --extra-seeds S...`` the N best recipes of that table are then also trained
   with seeds S and tabulated again on all their seeds.
2. **choose**: the recipe with the best mean validation accuracy (ties: lower mean validation
   loss) over all its seeds, among the N best when ``--top`` is given; or ``--choose NAME``.
3. **final** (``--final``): for the chosen recipe only, test accuracy of every seed's model (the
   test split is read here and nowhere else), forward time of the whole test split on one thread,
   parameter count, and robustness on explanation-like subgraphs (test graphs with a random 50 %
   of their bonds kept, all atoms kept; several draws) against the shipped paper target. The model
   of the seed with the best validation accuracy is saved to
   ``assets/targets/mutagenicity-strong.pt``.

Usage (CPU, one thread)::

    GEM_DATA_ROOT=/work/shared/data/TUDataset GEM_CACHE_DIR=/tmp/wtg-cache GEM_NUM_THREADS=1 \\
        nice -n 5 python scripts/experiments/strong_target.py --seeds 0 1 --top 5 --extra-seeds 2 \\
        [--final]

(the run reported: exactly this command, about 2 CPU-hours on a loaded machine,
each finished run cached in ``$GEM_CACHE_DIR/strong-target-sweep``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import torch  # noqa: E402

from gem_core.data.datasets import load_dataset  # noqa: E402
from gem_core.models.strong_target import (DEFAULT_RECIPE, GINETarget, count_parameters,
                                           train_strong_target)

# name -> overrides of DEFAULT_RECIPE (hidden 64, 4 layers, dropout 0.2, lr 1e-3, no weight decay,
# batch 64, <= 200 epochs, patience 50, halve lr on a 15-epoch val-loss plateau, 10 % of training
# graphs with hidden bond orders, no edge dropping)
RECIPES: dict[str, dict] = {
    "h64-L4": {},
    "h32-L3": dict(hidden=32, num_layers=3),
    "h64-L3": dict(num_layers=3),
    "h64-L5": dict(num_layers=5),
    "h64-L4-wd1e-4": dict(weight_decay=1e-4),
    "h64-L4-do0.5": dict(dropout=0.5),
    "h64-L4-cos-lr2e-3-bs128": dict(lr=2e-3, batch_size=128, schedule="cosine"),
    "h64-L4-noUnknownBond": dict(unknown_bond_prob=0.0),
    "h64-L4-dropedge0.1": dict(drop_edge=0.1),
    "h128-L4-do0.5": dict(hidden=128, dropout=0.5),
    # second round, after the first table: edge dropping looked best, all within noise
    "h64-L4-dropedge0.2": dict(drop_edge=0.2),
    "h64-L4-dropedge0.1-300ep": dict(drop_edge=0.1, max_epochs=300),
    "h64-L4-ema0.99": dict(ema=0.99),
    "h64-L4-dropedge0.1-ema0.99": dict(drop_edge=0.1, ema=0.99),
}

OUT_PATH = ROOT / "assets" / "targets" / "mutagenicity-strong.pt"


def run_key(name: str, seed: int) -> str:
    return f"{name}__seed{seed}"


def train_or_load(ds, name: str, seed: int, work: Path) -> dict:
    """Train one (recipe, seed) unless ``work`` already holds it; returns its validation metrics."""
    meta_path, state_path = work / f"{run_key(name, seed)}.json", work / f"{run_key(name, seed)}.pt"
    if meta_path.exists() and state_path.exists():
        return json.loads(meta_path.read_text())
    print(f"training {name} seed {seed} ...", flush=True)
    model, metrics = train_strong_target(ds, seed=seed, report_test=False, **RECIPES[name])
    metrics.pop("history")
    torch.save(model.state_dict(), state_path)
    meta_path.write_text(json.dumps(metrics, indent=1))
    print(f"  val acc {metrics['val_accuracy']:.4f} (no bonds {metrics['val_accuracy_no_bonds']:.4f})"
          f" best epoch {metrics['best_epoch']} / {metrics['epochs']}, {metrics['train_seconds']:.0f} s",
          flush=True)
    return metrics


def build(ds, name: str, state: dict) -> GINETarget:
    r = {**DEFAULT_RECIPE, **RECIPES[name]}
    model = GINETarget(ds.num_features, ds.num_classes, r["hidden"], r["num_layers"], r["dropout"],
                       none_bond="unknown" if r["unknown_bond_prob"] > 0 else "single")
    model.load_state_dict(state)
    return model.eval()


def print_table(rows: dict[str, list[dict]]) -> None:
    print("\n| recipe | seeds | val acc mean | spread (min-max) | val acc, no bond orders | "
          "best epochs | train s / run |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        acc = [m["val_accuracy"] for m in runs]
        nob = [m["val_accuracy_no_bonds"] for m in runs]
        print(f"| {name} | {len(runs)} | {100 * statistics.mean(acc):.2f} | "
              f"{100 * min(acc):.2f}-{100 * max(acc):.2f} | {100 * statistics.mean(nob):.2f} | "
              f"{', '.join(str(m['best_epoch']) for m in runs)} | "
              f"{statistics.mean(m['train_seconds'] for m in runs):.0f} |")


# ----------------------------------------------------------------------------- final stage

def val_robustness(ds, rows: dict, seeds: list[int], work: Path, draws: int) -> None:
    """Validation accuracy with a random 50 % of bonds kept, per recipe (mean over its seeds).

    Information for the engine (explanations are subgraphs); not used for the choice.
    """
    print(f"\nvalidation graphs with a random 50 % of bonds kept ({draws} draws; mean over seeds):")
    print("| recipe | val acc, 50 % bonds | agreement with own full-graph prediction |")
    print("|---|---|---|")
    for name in rows:
        models = {s: (build(ds, name, torch.load(work / f"{run_key(name, s)}.pt", weights_only=True)),
                      True) for s in seeds}
        rob = robustness(ds, models, draws, split="val")
        print(f"| {name} | {100 * statistics.mean(v['half_edges_accuracy_mean'] for v in rob.values()):.2f}"
              f" | {100 * statistics.mean(v['half_edges_agreement_mean'] for v in rob.values()):.2f} |")
    from gem_core.models.targets import get_target

    rob = robustness(ds, {"paper": (get_target(ds).model.eval(), True)}, draws, split="val")["paper"]
    print(f"| paper target (full-graph val acc {100 * rob['full_accuracy']:.2f}) | "
          f"{100 * rob['half_edges_accuracy_mean']:.2f} | {100 * rob['half_edges_agreement_mean']:.2f} |")


def _test_batch(ds, keep_frac: float = 1.0, gen: torch.Generator | None = None, split: str = "test"):
    """A whole split as one batch; with ``keep_frac < 1`` a random fraction of each graph's
    undirected bonds is kept (both directions together, bond orders aligned, all atoms kept)."""
    from gem_core.data.instances import graph_instance

    xs, eis, eas, bs, ys, offset = [], [], [], [], [], 0
    for k, i in enumerate(ds.split[split]):
        inst = graph_instance(ds.graphs[int(i)], int(i), ds.name)
        pairs, attr = inst.pairs, inst.edge_attr
        if keep_frac < 1.0:
            p = pairs.size(1)
            n_keep = int(round(keep_frac * p))
            sel = torch.randperm(p, generator=gen)[:n_keep].sort().values
            pairs, attr = pairs[:, sel], attr[sel]
        xs.append(inst.x)
        eis.append(torch.cat([pairs, pairs.flip(0)], dim=1) + offset)
        eas.append(torch.cat([attr, attr], dim=0))
        bs.append(torch.full((inst.num_nodes,), k, dtype=torch.long))
        ys.append(inst.y)
        offset += inst.num_nodes
    return (torch.cat(xs), torch.cat(eis, dim=1), torch.cat(eas), torch.cat(bs),
            torch.tensor(ys), len(ys))


@torch.no_grad()
def _predict(model, b, use_bonds: bool = True) -> torch.Tensor:
    x, ei, ea, batch, _, n = b
    if isinstance(model, GINETarget):
        return model(x, ei, batch=batch, num_graphs=n, edge_attr=ea if use_bonds else None).argmax(-1)
    return model(x, ei, batch=batch, num_graphs=n).argmax(-1)


def forward_ms(model, b, use_bonds: bool = True, repeats: int = 20) -> float:
    """Median wall time (ms) of one forward pass over the batch, after 3 warm-up calls."""
    for _ in range(3):
        _predict(model, b, use_bonds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _predict(model, b, use_bonds)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def robustness(ds, models: dict, draws: int, seed: int = 1234, split: str = "test") -> dict:
    """Accuracy and agreement with the full-graph prediction on graphs with 50 % of bonds kept."""
    full = _test_batch(ds, split=split)
    y = full[4]
    full_pred = {name: _predict(m, full, bonds) for name, (m, bonds) in models.items()}
    acc = {name: [] for name in models}
    agree = {name: [] for name in models}
    gen = torch.Generator().manual_seed(seed)
    for _ in range(draws):
        sub = _test_batch(ds, 0.5, gen, split=split)
        for name, (m, bonds) in models.items():
            pred = _predict(m, sub, bonds)
            acc[name].append(float((pred == y).float().mean()))
            agree[name].append(float((pred == full_pred[name]).float().mean()))
    return {name: {"full_accuracy": float((full_pred[name] == y).float().mean()),
                   "half_edges_accuracy_mean": statistics.mean(acc[name]),
                   "half_edges_accuracy_sd": statistics.pstdev(acc[name]),
                   "half_edges_agreement_mean": statistics.mean(agree[name])}
            for name in models}


def final(ds, name: str, seeds: list[int], work: Path, draws: int, out_path: Path = OUT_PATH) -> None:
    from gem_core.models.targets import get_target

    torch.set_num_threads(1)
    full = _test_batch(ds)
    y = full[4]
    runs = {}
    for seed in seeds:
        meta = json.loads((work / f"{run_key(name, seed)}.json").read_text())
        model = build(ds, name, torch.load(work / f"{run_key(name, seed)}.pt", weights_only=True))
        meta["test_accuracy"] = float((_predict(model, full) == y).float().mean())
        meta["test_accuracy_no_bonds"] = float((_predict(model, full, False) == y).float().mean())
        runs[seed] = (model, meta)
    print(f"\nchosen recipe {name}: {json.dumps({**DEFAULT_RECIPE, **RECIPES[name]})}")
    print("| seed | val acc | test acc | test acc, edge_attr=None | best epoch | train s |")
    print("|---|---|---|---|---|---|")
    for seed, (_, m) in runs.items():
        print(f"| {seed} | {100 * m['val_accuracy']:.2f} | {100 * m['test_accuracy']:.2f} | "
              f"{100 * m['test_accuracy_no_bonds']:.2f} | {m['best_epoch']} | {m['train_seconds']:.0f} |")
    # the seed with the best validation accuracy (ties: lower val loss) is the shipped model
    best_seed = max(runs, key=lambda s: (runs[s][1]["val_accuracy"], -runs[s][1]["val_loss"]))
    model, metrics = runs[best_seed]
    paper = get_target(ds).model.eval()
    timing = {
        "strong_forward_ms_434": forward_ms(model, full),
        "strong_forward_ms_434_no_bonds": forward_ms(model, full, False),
        "paper_forward_ms_434": forward_ms(paper, full),
    }
    models = {"strong": (model, True), "strong (edge_attr=None)": (model, False),
              "paper": (paper, True)}
    rob = robustness(ds, models, draws)
    print(f"\nshipped seed {best_seed}: {count_parameters(model)} parameters "
          f"(paper target {count_parameters(paper)}); forward over the 434 test graphs, 1 thread: "
          f"{timing['strong_forward_ms_434']:.1f} ms (edge_attr=None "
          f"{timing['strong_forward_ms_434_no_bonds']:.1f} ms; paper target "
          f"{timing['paper_forward_ms_434']:.1f} ms)")
    print(f"\ntest graphs with a random 50 % of bonds kept ({draws} draws), all atoms kept:")
    print("| model | test acc, full graphs | test acc, 50 % bonds (mean ± sd) | "
          "agreement with own full-graph prediction |")
    print("|---|---|---|---|")
    for k, v in rob.items():
        print(f"| {k} | {100 * v['full_accuracy']:.2f} | {100 * v['half_edges_accuracy_mean']:.2f} ± "
              f"{100 * v['half_edges_accuracy_sd']:.2f} | {100 * v['half_edges_agreement_mean']:.2f} |")
    metrics = {**metrics, **timing, "robustness_half_edges": rob, "parameters": count_parameters(model),
               "test_accuracy_per_seed": {str(s): m["test_accuracy"] for s, (_, m) in runs.items()},
               "val_accuracy_per_seed": {str(s): m["val_accuracy"] for s, (_, m) in runs.items()}}
    # the engine's target checkpoint (what get_target / load_saved_target read), with the recipe
    # as the dataset's strong TargetConfig (config.py must name the same recipe)
    from gem_core.data.config import target_config
    from gem_core.models.targets import TargetMetrics, save_target

    chosen = {**DEFAULT_RECIPE, **RECIPES[name]}
    cfg = target_config(ds.spec, "strong")
    if any(getattr(cfg, k) != v for k, v in chosen.items()):
        print(f"note: config.py's strong target differs from the chosen recipe {name}: update it")
    save_target(model, TargetMetrics(metrics["train_accuracy"], metrics["val_accuracy"],
                                     metrics["test_accuracy"], metrics["train_seconds"],
                                     metrics["epochs"]), ds, out_path, cfg)
    print(f"\nsaved {out_path} ({out_path.stat().st_size / 1024:.0f} KiB)")
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=1, default=str))


def _rank(runs: list[dict]) -> tuple[float, float]:
    """Mean validation accuracy, ties broken by lower mean validation loss."""
    return (statistics.mean(m["val_accuracy"] for m in runs),
            -statistics.mean(m["val_loss"] for m in runs))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--top", type=int, default=0,
                    help="after the sweep, the TOP best recipes are also trained with --extra-seeds "
                         "and the choice is made among them on all their seeds")
    ap.add_argument("--extra-seeds", type=int, nargs="*", default=[])
    ap.add_argument("--work-dir", type=Path,
                    default=Path(os.environ.get("GEM_CACHE_DIR", "/tmp")) / "strong-target-sweep")
    ap.add_argument("--choose", choices=list(RECIPES), help="skip the choice by validation")
    ap.add_argument("--final", action="store_true",
                    help="evaluate the chosen recipe on test and save the asset")
    ap.add_argument("--out", type=Path, default=OUT_PATH, help="where --final saves the model")
    ap.add_argument("--draws", type=int, default=10, help="random 50 %% bond subsets per test graph")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("GEM_NUM_THREADS", "1")))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset("mutagenicity")
    assert ds.split.sizes() == (3469, 434, 434), ds.split.sizes()
    rows = {name: [train_or_load(ds, name, s, args.work_dir) for s in args.seeds]
            for name in args.recipes}
    print_table(rows)
    if args.extra_seeds and args.top:
        top = sorted(rows, key=lambda n: _rank(rows[n]), reverse=True)[:args.top]
        print(f"\nthe {args.top} best recipes get seeds {args.extra_seeds} too: {', '.join(top)}")
        rows = {n: rows[n] + [train_or_load(ds, n, s, args.work_dir) for s in args.extra_seeds]
                for n in top}
        args.seeds = list(args.seeds) + list(args.extra_seeds)
        print_table(rows)
    val_robustness(ds, rows, args.seeds, args.work_dir, args.draws)
    chosen = args.choose or max(rows, key=lambda n: _rank(rows[n]))
    print(f"\nbest by mean validation accuracy: {chosen}")
    if args.final:
        final(ds, chosen, args.seeds, args.work_dir, args.draws, args.out)


if __name__ == "__main__":
    main()
