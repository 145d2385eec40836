"""Helpers shared by the CLI subcommands: common options and JSON output."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..config import DATASETS


def add_dataset_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--dataset", required=required, metavar="NAME",
                        help=f"one of: {', '.join(DATASETS)}")


def add_runtime_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: $GEM_NUM_THREADS or torch's default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the results as JSON to PATH ('-' for stdout)")


def write_json(obj: Any, target: str | None) -> None:
    if not target:
        return
    if target == "-":
        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from ..store import save_json

    save_json(obj, Path(target))
