"""``bench screen``: molecules per second of ``screen`` on 1 process, all cores and a local Ray.

The input is real chemistry: the Mutagenicity graphs rebuilt as SMILES (``convert.instance_to_mol``;
needs the raw data) and the 4,999 NCI compounds that RDKit ships (``RDConfig.RDDataDir/NCI``),
repeated to ``--rows``. (The TU NCI1 graphs carry integer atom types with no public element map
and no bond orders, so they cannot be rebuilt as molecules; RDKit's NCI sample stands for them.)
Each configuration runs the real CLI in a fresh process, end to end (SMILES file in, Parquet
out, start-up included); the outputs must be byte-identical. Peak memory is the largest
resident set of any process of a run. ``--steps N`` also times each step of a chunk in this
process (one torch thread, the model loaded first) on the input's first N rows. ``--repeat N``
runs every configuration N times in rounds and reports medians: each speed-up is the median of
its rounds' ratios, each taken between runs minutes apart, not between medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from gem_core.cli.common import add_command, write_json

_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:]).returncode\n"
    "print(json.dumps({'rc': rc, 'seconds': time.perf_counter() - t,\n"
    "  'peak_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))\n"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "screen", run, __doc__, dataset=False)
    p.add_argument("--rows", type=int, default=100_000, help="input rows (default: 100,000)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes / Ray CPUs of the parallel runs (default: all cores)",
    )
    p.add_argument(
        "--chunk-size", type=int, default=None, help="rows per chunk (default: screen's)"
    )
    p.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every configuration N times, in rounds, and report medians: each "
        "speed-up is the median of its rounds' (a machine whose speed drifts "
        "5-10%% between minutes cannot show a 0.05x difference in one round)",
    )
    p.add_argument(
        "--memory-rows",
        type=int,
        nargs="*",
        default=(),
        help="also run the parallel path on these input sizes and compare peak memory "
        "(e.g. 100000 1000000)",
    )
    p.add_argument("--keep", metavar="DIR", default=None, help="keep input and outputs in DIR")
    p.add_argument(
        "--steps",
        type=int,
        default=0,
        metavar="N",
        help="also time each step of a chunk on the first N rows, in this process "
        "(ms per row: parsing, the target, the explainer, fragments, ...)",
    )


def source_smiles() -> list[str]:
    """Mutagenicity graphs as SMILES (when the raw data is there) + RDKit's NCI sample."""
    from rdkit import Chem, RDConfig, rdBase

    out: list[str] = []
    try:
        from gem_core.chemistry.convert import instance_to_mol
        from gem_core.data.datasets import load_dataset
        from gem_core.data.instances import dataset_instances

        ds = load_dataset("mutagenicity")
        assert ds.graphs is not None  # a graph task
        with rdBase.BlockLogs():
            for inst in dataset_instances(ds, list(range(len(ds.graphs)))):
                out.append(Chem.MolToSmiles(instance_to_mol(inst)))
    except Exception as exc:  # no raw data: the NCI sample alone
        print(f"(Mutagenicity not used: {exc})", file=sys.stderr)
    nci = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
    out.extend(line.split()[0] for line in nci.read_text().splitlines() if line.strip())
    return out


def _write_input(path: Path, smiles: list[str], rows: int) -> None:
    with open(path, "w") as fh:
        for i in range(rows):
            fh.write(f"{smiles[i % len(smiles)]} m{i + 1}\n")


def _screen(
    inp: Path, out: Path, extra: list[str], chunk: Optional[int], device: str = "cpu"
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "gem_core",
        "screen",
        str(inp),
        "--out",
        str(out),
        "--no-progress",
        "--restart",
        "--device",
        device,
        *extra,
    ]
    if chunk:
        cmd += ["--chunk-size", str(chunk)]
    env = {**os.environ, "GEM_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"screen failed: {proc.stderr.strip()[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        # a worker's own error comes before the parent's; keep enough of stderr to show it
        raise RuntimeError(f"screen exited {res['rc']}: {proc.stderr.strip()[-3000:]}")
    return res


def step_times(inp: Path, rows: int, chunk_size: Optional[int]) -> dict[str, float]:
    """Milliseconds per input row of each step of ``explain_rows`` on the first ``rows`` rows of
    ``inp`` (the screen's default settings, one torch thread, the model loaded beforehand)."""
    import itertools

    import torch

    from gem_core.service.screening import DEFAULT_CHUNK_SIZE
    from gem_core.service.screening.chunk import ScreenSettings, StepTimes, explain_rows, warm_up
    from gem_core.service.screening.reader import iter_rows

    settings = ScreenSettings()
    threads = torch.get_num_threads()
    warm_up(settings)  # one thread, the model loaded
    try:
        with open(inp, "rb") as fh:
            batch = list(itertools.islice(iter_rows(fh), rows))
        size = chunk_size or DEFAULT_CHUNK_SIZE
        times = StepTimes()
        with times.step("whole chunk"):
            for start in range(0, len(batch), size):
                explain_rows(batch[start : start + size], settings, times)
    finally:
        torch.set_num_threads(threads)
    return {name: 1e3 * sec / max(len(batch), 1) for name, sec in times.seconds.items()}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's runs as one: the median of each figure, the worst exit status."""
    return {
        "rc": max(r["rc"] for r in runs),
        **{
            key: statistics.median(r[key] for r in runs)
            for key in ("seconds", "peak_mb", "molecules_per_second")
        },
    }


def run(args: argparse.Namespace) -> int:
    """The bench in a folder of its own: ``--keep DIR``, or a temporary one removed at the end
    (an input and one output per run: 60 MB at 100,000 rows and 4 runs)."""
    if args.keep:
        return _run_in(args, Path(args.keep))
    with tempfile.TemporaryDirectory(prefix="gem-bench-screen-") as folder:
        return _run_in(args, Path(folder))


def _run_in(args: argparse.Namespace, folder: Path) -> int:
    from gem_core.service.screening import default_workers

    workers = args.workers or default_workers()
    smiles = source_smiles()
    folder.mkdir(parents=True, exist_ok=True)
    inp = folder / "library.smi"
    _write_input(inp, smiles, args.rows)
    from gem_core.runtime.device import resolve_device

    device = resolve_device(args.device, "screen").type  # every run on the same device
    if device != "cpu" and not args.no_ray:
        raise ValueError(
            f"bench screen's Ray runs use CPU workers: add --no-ray with --device {device}."
        )
    print(
        f"input: {args.rows:,} rows from {len(smiles):,} distinct SMILES "
        f"(Mutagenicity rebuilt + RDKit NCI sample); {workers} cores; --device {device}"
    )
    configs = [
        ("1 process", ["--workers", "1"]),
        (f"{workers} processes", ["--workers", str(workers)]),
    ]
    if not args.no_ray:
        configs += [
            ("Ray, 1 worker", ["--workers", "1", "--ray"]),
            (f"Ray, {workers} workers", ["--workers", str(workers), "--ray"]),
        ]
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    results: dict[str, Any] = {"rows": args.rows, "cores": workers, "runs": {}, "rounds": []}
    outputs: list[Path] = []
    for round_ in range(args.repeat):
        if args.repeat > 1:
            print(f" round {round_ + 1} of {args.repeat}")
        runs: dict[str, Any] = {}
        for name, extra in configs:
            out = folder / f"out-{len(outputs)}.parquet"
            r = _screen(inp, out, extra, args.chunk_size, device)
            r["molecules_per_second"] = args.rows / r["seconds"]
            runs[name] = r
            outputs.append(out)
            print(
                f"  {name:<16} {r['seconds']:7.1f} s  {r['molecules_per_second']:7.0f} "
                f"molecules/s  peak {r['peak_mb']:6.0f} MB"
            )
        results["rounds"].append(runs)
    results["runs"] = {
        name: _median_run([runs[name] for runs in results["rounds"]]) for name, _ in configs
    }
    if args.repeat > 1:
        print(f" medians of {args.repeat} rounds:")
        for name, r in results["runs"].items():
            print(
                f"  {name:<16} {r['seconds']:7.1f} s  {r['molecules_per_second']:7.0f} "
                f"molecules/s  peak {r['peak_mb']:6.0f} MB"
            )
    speedups = [
        (f"{workers} processes / 1 process", "process_speedup", "1 process", f"{workers} processes")
    ]
    if not args.no_ray:
        speedups.append(
            (
                f"Ray {workers} workers / Ray 1 worker",
                "ray_speedup",
                "Ray, 1 worker",
                f"Ray, {workers} workers",
            )
        )
    for label, key, one, many in speedups:
        per_round = [runs[one]["seconds"] / runs[many]["seconds"] for runs in results["rounds"]]
        results[key] = statistics.median(per_round)
        results[f"{key}_rounds"] = per_round
        spread = (
            f" (median of {len(per_round)} rounds; {', '.join(f'{x:.3f}' for x in per_round)})"
            if len(per_round) > 1
            else ""
        )
        print(f"  {label}: {results[key]:.2f}x{spread}")
    first = outputs[0].read_bytes()
    same = [o.read_bytes() == first for o in outputs]
    results["identical_outputs"] = all(same)
    print(f"  outputs byte-identical across the {len(outputs)} runs: {all(same)}")
    for rows in args.memory_rows:
        big = folder / f"library-{rows}.smi"
        _write_input(big, smiles, rows)
        r = _screen(
            big,
            folder / f"mem-{rows}.parquet",
            ["--workers", str(workers)],
            args.chunk_size,
            device,
        )
        results.setdefault("memory", {})[str(rows)] = r
        print(
            f"  {rows:>9,} rows, {workers} processes: {r['seconds']:7.1f} s, "
            f"{rows / r['seconds']:7.0f} molecules/s, peak {r['peak_mb']:6.0f} MB"
        )
        big.unlink()
    if args.steps:
        steps = step_times(inp, min(args.steps, args.rows), args.chunk_size)
        results["steps_ms_per_row"] = steps
        print(
            f"  steps of a chunk, first {min(args.steps, args.rows):,} rows, 1 thread (ms per row):"
        )
        for name, ms in steps.items():
            print(f"    {name:<22} {ms:7.3f}")
    write_json({"bench": {"screen": results}}, args.json)
    return 0 if results["identical_outputs"] else 1
