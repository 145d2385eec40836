"""``bench startup``: whole-process times of the CLI's quick answers and of one cold explanation.

Each case is a fresh ``python -m gem_core ...`` process, timed from start to exit (median of
``--repeats`` runs after one untimed warm-up that fills the OS file cache): ``--help``, a bad
argument, an ``explain`` of an invalid SMILES and ``explain`` of nitrobenzene (target and Gem
explainer loaded from the cache, one explanation). Each quick case is run once more with
``-X importtime`` to show whether it imported torch. The load average is printed: on shared cores
wall times are only comparable within one run, so the CPU seconds of each process (user + system,
which a busy machine inflates far less) are printed beside them; with ``--baseline DIR`` the
same commands of another checkout run interleaved with these.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, NamedTuple, Optional

from gem_core.cli.common import add_command, write_json

NITROBENZENE = "c1ccc(cc1)[N+](=O)[O-]"


class Case(NamedTuple):
    """One timed command: its name, CLI arguments, expected exit status, goal in seconds and
    whether it should answer without torch."""

    name: str
    argv: tuple[str, ...]
    status: int
    goal: Optional[float]
    light: bool


CASES = (
    Case("--help", ("--help",), 0, 0.5, True),
    Case(
        "bad argument", ("explain", "--smiles", "CCO", "--method", "no-such-method"), 2, 0.5, True
    ),
    Case("invalid SMILES", ("explain", "--smiles", "c1ccc(cc1"), 2, None, True),
    Case(
        "explain nitrobenzene (cold)",
        ("explain", "--smiles", NITROBENZENE, "--no-progress"),
        0,
        4.0,
        False,
    ),
)
HEAVY = ("torch", "torch_geometric")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "startup", run, __doc__, dataset=False)
    p.add_argument("--repeats", type=int, default=5, help="timed runs per case (default: 5)")
    p.add_argument(
        "--baseline",
        metavar="DIR",
        default=None,
        help="also time the same commands in another checkout DIR (e.g. the main "
        "branch), interleaved with this one, and print the ratios",
    )


def _command(root: str, argv: tuple[str, ...], *flags: str) -> subprocess.CompletedProcess:
    """``python FLAGS -m gem_core ARGV`` run in ``root`` (so its ``gem_core`` is the one run)."""
    return subprocess.run(
        [sys.executable, *flags, "-m", "gem_core", *argv],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(root: str, case: Case) -> tuple[float, float]:
    """Wall and CPU seconds of one whole process; its exit status is checked."""
    cpu = _cpu_of_children()
    start = time.perf_counter()
    proc = _command(root, case.argv)
    seconds = time.perf_counter() - start
    if proc.returncode != case.status:
        raise ValueError(
            f"`python -m gem_core {' '.join(case.argv)}` in {root} exited with "
            f"{proc.returncode}, expected {case.status}: {proc.stderr.strip()[-300:]}"
        )
    return seconds, _cpu_of_children() - cpu


def _heavy_imports(root: str, case: Case) -> list[str]:
    """Which of torch / PyG the command imports (one ``-X importtime`` run)."""
    proc = _command(root, case.argv, "-X", "importtime")
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return [m for m in HEAVY if m in names]


def _summary(runs: list[tuple[float, float]]) -> dict[str, Any]:
    wall, cpu = [w for w, _ in runs], [c for _, c in runs]
    return {
        "median_s": statistics.median(wall),
        "times_s": wall,
        "median_cpu_s": statistics.median(cpu),
        "cpu_s": cpu,
    }


def run(args: argparse.Namespace) -> int:
    import gem_core

    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    roots = {"this": os.path.dirname(os.path.dirname(os.path.abspath(gem_core.__file__)))}
    if args.baseline is not None:
        if not os.path.isfile(os.path.join(args.baseline, "gem_core", "__main__.py")):
            raise ValueError(f"--baseline {args.baseline!r} holds no gem_core package.")
        roots["baseline"] = os.path.abspath(args.baseline)
    load = os.getloadavg()
    print(
        f"bench startup: whole processes, median of {args.repeats} (after 1 warm-up); "
        f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    results: dict[str, Any] = {"repeats": args.repeats, "roots": roots, "cases": {}}
    met = True
    for case in CASES:
        times: dict[str, list[tuple[float, float]]] = {which: [] for which in roots}
        for root in roots.values():
            _timed(root, case)  # warm-up
        for _ in range(args.repeats):  # interleaved, so a load change hits both alike
            for which, root in roots.items():
                times[which].append(_timed(root, case))
        row: dict[str, Any] = {
            "argv": list(case.argv),
            "goal_s": case.goal,
            **{which: _summary(t) for which, t in times.items()},
        }
        median, cpu = row["this"]["median_s"], row["this"]["median_cpu_s"]
        line = f"  {case.name:<28} {median:6.2f} s (cpu {cpu:5.2f} s)"
        if case.goal is not None:
            row["meets_goal"] = median <= case.goal
            row["meets_goal_cpu"] = cpu <= case.goal
            met = met and row["meets_goal"]
            verdict = {True: "met", False: "NOT met"}
            line += (
                f"  (goal <= {case.goal:.1f} s: wall {verdict[row['meets_goal']]}, "
                f"cpu {verdict[row['meets_goal_cpu']]})"
            )
        if "baseline" in row:
            base, base_cpu = row["baseline"]["median_s"], row["baseline"]["median_cpu_s"]
            row["speedup"] = base / median
            row["cpu_speedup"] = base_cpu / cpu
            line += (
                f"  baseline {base:6.2f} s (cpu {base_cpu:5.2f} s) = {row['speedup']:.1f}x "
                f"(cpu {row['cpu_speedup']:.1f}x)"
            )
        if case.light:
            row["imports"] = _heavy_imports(roots["this"], case)
            line += f"  imports: {', '.join(row['imports']) or 'no torch'}"
        results["cases"][case.name] = row
        print(line)
    load = os.getloadavg()
    results["load_average"] = list(load)
    results["goals_met"] = met
    print(f"  goals met: {met}; load average at the end {load[0]:.2f}")
    write_json({"bench": {"startup": results}}, args.json)
    return 0
