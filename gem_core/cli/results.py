"""Write docs/results.md from the recorded results (assets/results/*.json and bench-*.json).

The page is generated, never edited by hand: after ``reproduce`` (or a bench with
``--json assets/results/bench-<name>.json``) run this to bring it up to date. ``--check`` writes
nothing and exits with status 1 when the page differs from what the recorded results give.
"""

from __future__ import annotations

import argparse

from gem_core.cli.common import add_command


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "results", run, __doc__, dataset=False, threads=False)
    p.add_argument(
        "--check",
        action="store_true",
        dest="only_check",
        help="exit 1 if docs/results.md is stale instead of writing it",
    )


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.report import DOC_PATH, render, write

    if args.only_check:
        current = DOC_PATH.read_text() if DOC_PATH.is_file() else ""
        if current != render():
            print(f"{DOC_PATH} is stale: run python -m gem_core results")
            return 1
        print(f"{DOC_PATH} is up to date")
        return 0
    changed = write()
    print(f"{DOC_PATH} {'written' if changed else 'unchanged'}")
    return 0
