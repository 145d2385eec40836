"""Command line: ``python -m gem_core <command> --help``.

The top layer beside the app: it may import any engine layer. Each subcommand lives in
:mod:`gem_core.cli` as a module with ``register(subparsers)`` (``common`` holds their shared set-up);
library errors (unknown dataset, missing data, bad K, bad checkpoint, bad SMILES) become one
clear line on stderr and exit status 2, never a traceback.

Start-up is kept light: command modules import argparse-level things only (names come from the
dataset rows and the explainer registry, which load without torch), a command's ``check`` refuses
bad input (missing files, invalid SMILES) before its ``run`` imports the engine, so ``--help``
and input errors answer in a fraction of a second. A command's process defers the modules PyG
imports but no command runs (:mod:`gem_core.runtime.imports`: ``torch._dynamo``, 1-1.5 s).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

COMMANDS = (
    "train",
    "distill",
    "bench",
    "reproduce",
    "explain",
    "tune",
    "screen",
    "results",
    "models",
)


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


def _user_error_types() -> tuple[type[BaseException], ...]:
    """The library errors shown as one line. Read from the modules already imported only: an
    exception can only be of a class that was loaded, and ``--help`` should not load the engine."""
    found: list[type[BaseException]] = [UserError, ValueError]
    for module, name in (
        ("gem_core.data.config", "UnknownDatasetError"),
        ("gem_core.data.datasets", "DataUnavailableError"),
        ("gem_core.runtime.store", "ArtifactError"),
        ("gem_core.runtime.workers", "WorkerLostError"),
    ):
        loaded = sys.modules.get(module)
        if loaded is not None:
            found.append(getattr(loaded, name))
    return tuple(found)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse, check the input (no torch yet), set the threads, run; library errors -> one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from gem_core.runtime.imports import defer_unused_imports

    defer_unused_imports()  # this process is ours: PyG's unused torch._dynamo waits for a use
    try:
        check = getattr(args, "check", None)
        if check is not None:
            check(args)  # bad input is refused before the engine (torch, PyG) is imported
        if hasattr(args, "threads"):
            from gem_core.runtime.device import configure_threads

            configure_threads(args.threads)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not isinstance(exc, _user_error_types()):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
