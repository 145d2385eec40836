"""Command line: ``python -m gem_core <command> --help``.

The top layer beside the app: it may import any engine layer. Each subcommand lives in
:mod:`gem_core.cli` as a module with ``register(subparsers)`` (``common`` holds their shared set-up);
library errors (unknown dataset, missing data, bad K, bad checkpoint, bad SMILES) become one
clear line on stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

COMMANDS = ("train", "distill", "bench", "reproduce", "explain", "tune", "screen")


class UserError(Exception):
    """An error whose message is meant for the user as-is."""


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (``PROG: error: ...; see --help``), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m gem_core",
        description="Gem: generative causal explanations for graph neural networks.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"gem_core.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gem_core.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from gem_core.data.config import UnknownDatasetError
    from gem_core.data.datasets import DataUnavailableError
    from gem_core.runtime.store import ArtifactError

    from gem_core.runtime.device import configure_threads

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if hasattr(args, "threads"):
            configure_threads(args.threads)
        return int(args.func(args) or 0)
    except (UserError, UnknownDatasetError, DataUnavailableError, ArtifactError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
