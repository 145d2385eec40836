"""One graph per call through PyG's ``Explainer``: Gem alone, Gem + check and PyG's GNNExplainer.

How a PyG user explains a molecule: ``explainer(x, edge_index, batch=batch)``, one graph per call.
On an outside model (``bench outside``'s GCN with max pooling, GNNX-Bench's recipe, on
Mutagenicity; trained once and cached), ``gem_core.pyg.GemExplainer`` is fitted through PyG on
the training graphs (``--fit-graphs``, ``--epochs``: the call's cost does not depend on how long
Gem trained), then each of ``--graphs`` test molecules is explained in its own call by

* Gem: the generator alone (one auto-encoder pass; the class PyG's ``Explainer`` predicted is the
  one Gem reads, so the model runs once per call, inside PyG);
* Gem + check: the same fit with ``check="repair"`` (the explain-time search asks the model);
* PyG's ``GNNExplainer`` (100 epochs), for ``--baseline-graphs`` of them (seconds each);

after a warm-up of a few calls each, on one torch thread. Printed: the median and p90 ms per call
of each, and each method's median as a multiple of Gem's (measured in the same run).

One process's timings are steady, but separate processes of the same code can differ by tens of
percent on a small shared machine: ``--processes N`` runs the whole bench in N fresh processes one
after another and reports, per method, the median of their medians (and each one).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gem_core.cli.common import add_command, progress_bar, write_json

#: the outside model timed (bench outside's GCN with max pooling)
MODEL = "gcn_max"
WARMUP = 5
#: the size options, each a positive integer when given
_SIZES = ("graphs", "baseline_graphs", "fit_graphs", "epochs", "model_epochs")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "pyg", run, __doc__, dataset=False, check=_check)
    p.add_argument(
        "--graphs",
        type=int,
        default=200,
        metavar="N",
        help="test molecules explained one per call by Gem (default: 200)",
    )
    p.add_argument(
        "--baseline-graphs",
        type=int,
        default=20,
        metavar="N",
        help="of them, explained one per call by PyG's GNNExplainer (default: 20)",
    )
    p.add_argument(
        "--fit-graphs",
        type=int,
        default=1000,
        metavar="N",
        help="training molecules Gem is fitted on (default: 1000)",
    )
    p.add_argument(
        "--epochs", type=int, default=100, metavar="E", help="Gem's training epochs (default: 100)"
    )
    p.add_argument("--seed", type=int, default=0, help="model and Gem seed (default 0)")
    p.add_argument(
        "--model-epochs",
        type=int,
        default=None,
        metavar="E",
        help="train the outside model for E epochs when it is not stored yet (quick runs; "
        "default: its recipe's)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="run the bench in N fresh processes, one after another; report the median of their "
        "medians (default: 1, this process)",
    )


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _check(args: argparse.Namespace) -> None:
    for name in (*_SIZES, "processes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"{_flag(name)} must be a positive integer, got {getattr(args, name)}")


def _times(explain, graphs) -> list[float]:
    """Milliseconds of one ``explain(graph)`` call per graph, after a few warm-up calls."""
    for g in graphs[:WARMUP]:
        explain(g)
    out = []
    for g in graphs:
        start = time.perf_counter()
        explain(g)
        out.append(1000.0 * (time.perf_counter() - start))
    return out


def _summary(ms: list[float]) -> dict[str, Any]:
    ordered = sorted(ms)
    return {
        "calls": len(ms),
        "median_ms": statistics.median(ms),
        "p90_ms": ordered[min(len(ms) - 1, int(0.9 * len(ms)))],
    }


def _in_processes(args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    """The bench run ``args.processes`` times, each in a fresh process: per method the median of
    the processes' medians and p90s, and each process's median; the median fit time."""
    import json
    import subprocess
    import sys
    import tempfile

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):
            out = f"{tmp}/run{i}.json"
            command = [sys.executable, "-m", "gem_core", "bench", "pyg", "--no-progress"]
            for name in (*_SIZES, "seed"):  # this run's options, given again
                if getattr(args, name) is not None:
                    command += [_flag(name), str(getattr(args, name))]
            subprocess.run([*command, "--json", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs.append(json.load(f)["bench"]["pyg"])
    rows: dict[str, Any] = {}
    for name in runs[0]["rows"]:
        per = [r["rows"][name] for r in runs]
        rows[name] = {
            "calls": per[0]["calls"],
            "median_ms": statistics.median(r["median_ms"] for r in per),
            "p90_ms": statistics.median(r["p90_ms"] for r in per),
            "process_medians_ms": [round(r["median_ms"], 3) for r in per],
        }
    return rows, statistics.median(r["fit_seconds"] for r in runs)


def run(args: argparse.Namespace) -> int:
    if args.processes > 1:
        rows, fit_s = _in_processes(args)
        fit_graphs = args.fit_graphs
    else:
        rows, fit_s, fit_graphs = _measure(args)
    base = rows["gem"]["median_ms"]
    where = f"median of {args.processes} processes" if args.processes > 1 else "one process"
    print(
        f"bench pyg: one molecule per call through PyG's Explainer, {MODEL} on Mutagenicity, "
        f"one torch thread, {where}; Gem fitted on {fit_graphs} graphs in {fit_s:.0f} s"
    )
    print(f"  {'method':<18} {'calls':>5} {'median ms':>10} {'p90 ms':>8} {'× Gem':>8}")
    titles = {"gem": "Gem", "gem_check": "Gem + check", "pyg_gnnexplainer": "PyG GNNExplainer"}
    for name, row in rows.items():
        row["times_gem"] = row["median_ms"] / base if base else float("nan")
        each = row.get("process_medians_ms")
        print(
            f"  {titles[name]:<18} {row['calls']:>5} {row['median_ms']:10.2f} "
            f"{row['p90_ms']:8.2f} {row['times_gem']:8.1f}"
            + (f"   (processes: {', '.join(f'{m:.2f}' for m in each)})" if each else "")
        )
    from gem_core.evaluation.result_file import SCHEMA_VERSION

    write_json(
        {
            "schema_version": SCHEMA_VERSION,
            "bench": {
                "pyg": {
                    "model": MODEL,
                    "fit_graphs": fit_graphs,
                    "fit_seconds": fit_s,
                    "rows": rows,
                }
            },
        },
        args.json,
    )
    return 0


def _measure(args: argparse.Namespace) -> tuple[dict[str, Any], float, int]:
    """The bench in this process: per method its calls, median and p90 ms; the fit's seconds
    and the number of graphs Gem was fitted on."""
    import torch
    from torch_geometric.explain import Explainer, GNNExplainer

    from gem_core.data.datasets import load_dataset
    from gem_core.evaluation.outside import outside_model
    from gem_core.pyg import GemExplainer

    torch.set_num_threads(1)
    dataset = load_dataset("mutagenicity")
    with progress_bar(args, "bench pyg") as progress:
        epochs = {} if args.model_epochs is None else {"epochs": args.model_epochs}
        model, _ = outside_model(MODEL, dataset, seed=args.seed, progress=progress, **epochs)
    assert dataset.graphs is not None  # Mutagenicity: a graph task
    train = [dataset.graphs[i] for i in dataset.split.train.tolist()[: args.fit_graphs]]
    test = [dataset.graphs[i] for i in dataset.split.test.tolist()[: args.graphs]]
    config = dict(mode="multiclass_classification", task_level="graph", return_type="raw")
    gem = Explainer(
        model=model,
        algorithm=GemExplainer(epochs=args.epochs, k=list(range(5, 26)), seed=args.seed),
        explanation_type="model",
        edge_mask_type="object",
        model_config=config,
    )
    start = time.perf_counter()
    gem.algorithm.fit(model, train)
    fit_s = time.perf_counter() - start
    gnnx = Explainer(
        model=model,
        algorithm=GNNExplainer(epochs=100),
        explanation_type="model",
        edge_mask_type="object",
        model_config=config,
    )

    def call(explainer):
        def explain(g):
            return explainer(g.x, g.edge_index, batch=torch.zeros(g.num_nodes, dtype=torch.long))

        return explain

    rows = {"gem": _summary(_times(call(gem), test))}
    gem.algorithm.check = "repair"
    rows["gem_check"] = _summary(_times(call(gem), test))
    gem.algorithm.check = "off"
    torch.manual_seed(args.seed)
    rows["pyg_gnnexplainer"] = _summary(_times(call(gnnx), test[: args.baseline_graphs]))
    return rows, fit_s, len(train)
