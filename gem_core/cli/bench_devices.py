"""``bench devices``: CPU against CUDA per workload, and the device ``auto`` picks for each.

In one process, for each dataset given and on each device present (the CPU always, CUDA when
there is one), times the workloads users wait for, with the real engine and shipped models:

- ``interactive``: Gem explaining one instance at a time (the app, ``explain``), median ms;
- ``batched``: Gem over the test split in one call, ms per instance (median of warm calls);
- ``distillation``: Δ + greedy + top-K over the first ``--limit`` training instances;
- ``fit``: ``--epochs`` epochs of Gem's auto-encoder on those instances, ms per epoch;
- ``gnnexplainer`` / ``integrated_gradients``: the batched baselines over the first ``--limit``
  test instances (``batched`` workload);
- ``screen`` (molecule datasets): predicting and explaining a parsed chunk of ``--limit``
  molecules (the part of a screening chunk that a GPU can take; parsing stays on the CPU);
- ``library_N`` (graph datasets, each N of ``--library``): Gem alone over a library of N
  molecules in one call (the dataset's molecules repeated to N), ms per molecule: the generator's
  one batched pass, where a GPU may pay (``batched`` workload).

Every CUDA time is taken after ``torch.cuda.synchronize``. Last, ``auto``'s choice per workload
(:func:`gem_core.runtime.device_choice.choose_device`: a short probe, cached per machine) is set
beside the device measured faster, so a wrong pick shows.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

from gem_core.cli.common import add_command, write_json

#: measured row -> the ``auto`` workload it stands for
ROW_WORKLOAD = {
    "interactive": "interactive",
    "batched": "batched",
    "distillation": "distillation",
    "fit": "fit",
    "gnnexplainer": "batched",
    "integrated_gradients": "batched",
    "screen": "screen",
    "library": "batched",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "devices", run, __doc__, dataset=False)
    p.add_argument(
        "--datasets",
        default="ba_shapes,mutagenicity",
        help="comma-separated datasets (default: ba_shapes,mutagenicity)",
    )
    p.add_argument(
        "--devices",
        default=None,
        help="comma-separated devices (default: cpu, and cuda when present)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=256,
        metavar="N",
        help="instances for the distillation, fit, baselines and screen rows (default: 256)",
    )
    p.add_argument(
        "--interactive",
        type=int,
        default=20,
        metavar="M",
        help="single instances timed for the interactive row (default: 20)",
    )
    p.add_argument(
        "--epochs", type=int, default=5, help="epochs timed for the fit row (default: 5)"
    )
    p.add_argument(
        "--library",
        default="10000",
        metavar="N[,N...]",
        help="library sizes Gem explains in one call on graph datasets (default: 10000; "
        "'' for none)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="R",
        help="warm calls per batched row, median reported (default: 3)",
    )


def _sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn: Callable[[], Any], device: Any, repeats: int, per: int = 1) -> float:
    """Median wall-clock ms of ``repeats`` warm calls of ``fn`` (one untimed warm-up first),
    divided by ``per``."""
    fn()
    times = []
    for _ in range(max(repeats, 1)):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(1000.0 * (time.perf_counter() - start) / per)
    return statistics.median(times)


def _molecule_rows(instances: list) -> list:
    from rdkit import Chem, rdBase

    from gem_core.chemistry.convert import instance_to_mol
    from gem_core.service.screening.reader import InputRow

    with rdBase.BlockLogs():
        smiles = [Chem.MolToSmiles(instance_to_mol(inst)) for inst in instances]
    return [InputRow(row=i + 1, id=f"m{i + 1}", smiles=s, error=None) for i, s in enumerate(smiles)]


def measure_dataset(
    dataset: str,
    device: str,
    limit: int,
    interactive: int,
    epochs: int,
    repeats: int,
    library: tuple[int, ...] = (),
) -> dict[str, float]:
    """ms of every workload row of ``dataset`` on ``device`` (see the module docstring)."""
    import torch

    from gem_core.gem.autoencoder import GemAutoEncoder
    from gem_core.gem.distill import distill
    from gem_core.service.session import Workbench

    wb = Workbench(dataset, device)
    wb.target()
    k, spec = wb.spec.default_k, wb.spec
    test, train = wb.instances("test"), wb.instances("train")[:limit]
    rows: dict[str, float] = {}
    wb.explain("gem", test[:2])  # loads the shipped Gem and warms the kernels
    singles = test[:interactive]
    times = []
    for inst in singles:
        _sync(device)
        start = time.perf_counter()
        wb.explain("gem", [inst])[0].float().cpu()
        times.append(1000.0 * (time.perf_counter() - start))
    rows["interactive"] = statistics.median(times)
    rows["batched"] = _median_ms(lambda: wb.explain("gem", test), device, repeats, len(test))
    if spec.task == "graph":
        every = wb.instances("train") + wb.instances("val") + test
        for n in library:
            molecules = (every * (n // len(every) + 1))[:n]
            rows[f"library_{n}"] = _median_ms(
                functools.partial(wb.explain, "gem", molecules), device, min(repeats, 2), n
            )

    black_box = wb.black_box
    rows["distillation"] = _median_ms(
        lambda: distill(train, black_box, connected=spec.connected, device=device).topk(k),
        device,
        1,
        len(train),
    )

    gen = torch.Generator().manual_seed(0)
    weights = [torch.rand(inst.num_pairs, generator=gen) for inst in train]

    def fit() -> None:
        GemAutoEncoder.from_settings(
            wb.gem_settings, device=device, max_epochs=epochs, patience=epochs, ensemble=1
        ).fit(train, weights)

    rows["fit"] = _median_ms(fit, device, 1, epochs)
    baseline_set = test[:limit]
    for method in ("gnnexplainer", "integrated_gradients"):
        rows[method] = _median_ms(
            functools.partial(wb.explain, method, baseline_set), device, 1, len(baseline_set)
        )
    from gem_core.service.molecules import DATASET as SCREENED_DATASET

    if spec.name == SCREENED_DATASET:  # the data set whose model screens libraries
        from gem_core.service.screening.chunk import ScreenSettings, finish_rows, parse_rows

        settings = ScreenSettings(device=device)
        input_rows = _molecule_rows(wb.instances("train")[:limit])
        rows["screen"] = _median_ms(
            lambda: finish_rows(parse_rows(input_rows, settings), settings),
            device,
            1,
            len(input_rows),
        )
        rows["screen_parse_only"] = _median_ms(
            lambda: parse_rows(input_rows, settings), "cpu", 1, len(input_rows)
        )
    return rows


def _auto_choices() -> dict[str, dict[str, Any]]:
    """``auto``'s verdict per workload, and for a ``reproduce`` run (all of its workloads)."""
    from dataclasses import asdict

    from gem_core.runtime.device_choice import (
        REPRODUCE_WORKLOADS,
        WORKLOADS,
        choose_device,
        choose_for_run,
    )

    choices = {w: asdict(choose_device(w)) for w in WORKLOADS}
    choices["reproduce"] = asdict(choose_for_run(REPRODUCE_WORKLOADS))
    return choices


def run(args: argparse.Namespace) -> int:
    import torch

    from gem_core.data.config import get_spec

    datasets = [get_spec(d.strip()).name for d in args.datasets.split(",") if d.strip()]
    if not datasets:
        raise ValueError("--datasets names no data set.")
    if args.devices:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    else:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if min(args.limit, args.interactive, args.epochs) < 1 or args.repeats < 0:
        raise ValueError("--limit, --interactive and --epochs must be >= 1, --repeats >= 0.")
    try:
        library = tuple(int(n) for n in args.library.split(",") if n.strip())
    except ValueError:
        raise ValueError(
            f"--library takes sizes such as 10000,100000, got {args.library!r}"
        ) from None
    if any(n < 1 for n in library):
        raise ValueError("--library sizes must be >= 1.")
    for d in devices:
        if torch.device(d).type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--devices names cuda but no CUDA device is available.")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"{torch.get_num_threads()} CPU thread(s); GPU: {gpu}; torch {torch.__version__}")
    results: dict[str, dict[str, dict[str, float]]] = {}
    for dataset in datasets:
        results[dataset] = {}
        for device in devices:
            results[dataset][device] = measure_dataset(
                dataset,
                device,
                args.limit,
                args.interactive,
                args.epochs,
                args.repeats,
                library,
            )
    auto = _auto_choices()
    print(
        f"{'dataset':14s} {'workload':22s} "
        + " ".join(f"{d:>12s}" for d in devices)
        + "   faster       auto picks"
    )
    for dataset, by_device in results.items():
        for row in by_device[devices[0]]:
            ms = {d: by_device[d][row] for d in devices}
            faster = min(ms, key=ms.__getitem__)
            workload = ROW_WORKLOAD.get(row.split("_")[0] if row.startswith("library_") else row)
            pick = auto[workload]["device"] if workload else "-"
            ratio = ""
            if len(devices) > 1:
                slow = max(ms.values()) / max(min(ms.values()), 1e-9)
                ratio = f" ({slow:.1f}x)"
            slower_pick = pick in ms and ms[pick] > ms[faster]
            note = f"  <- {ms[pick] / ms[faster]:.2f}x slower than {faster}" if slower_pick else ""
            print(
                f"{dataset:14s} {row:22s} "
                + " ".join(f"{ms[d]:9.3f} ms" for d in devices)
                + f"   {faster + ratio:12s} {pick}{note}"
            )
    print(
        "auto per workload: "
        + "; ".join(f"{w} -> {c['device']} ({c['reason']})" for w, c in auto.items())
    )
    write_json(
        {
            "bench": {
                "devices": {
                    "threads": torch.get_num_threads(),
                    "gpu": gpu,
                    "torch": torch.__version__,
                    "devices": devices,
                    "ms": results,
                    "auto": auto,
                    "row_workload": ROW_WORKLOAD,
                }
            }
        },
        args.json,
    )
    return 0
