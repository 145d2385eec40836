"""The set-up every CLI subcommand shares: its parser with the common options, progress, JSON.

A subcommand module has ``register(subparsers)``, which calls :func:`add_command` and adds its
own options, and ``run(args) -> int``. :func:`gem_core.cli.main` applies ``--threads`` before
``run`` is called (after the command's optional ``check``) and turns library errors into one
line and exit status 2. Nothing here imports torch: see :mod:`gem_core.cli`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Union

from gem_core.data.config import DATASETS, SALT_RULES

DatasetArg = Union[bool, Literal["optional"]]


def add_command(
    sub: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], int],
    doc: str | None = None,
    *,
    help: str | None = None,
    description: str | None = None,
    dataset: DatasetArg = True,
    check: Callable[[argparse.Namespace], None] | None = None,
    threads: bool = True,
    **parser_kwargs: Any,
) -> argparse.ArgumentParser:
    """A subcommand parser with ``--dataset`` (when ``dataset``), ``--device``, ``--threads``,
    ``--no-progress`` and ``--json``; the command's own options are added to the returned parser.

    ``doc`` (a command module's docstring) gives both texts: its first line is the ``--help``
    summary, the whole of it the description (shown as written). ``check(args)``, when given,
    validates the input cheaply (raising a library error) before the threads are set and
    ``run`` imports the engine. ``threads=False``: the command sets its own threads (no
    ``--threads``, and ``$GEM_NUM_THREADS`` is not applied before ``run``).
    """
    if doc is not None:
        first = doc.strip().splitlines()[0].rstrip(".")
        help = help or first[:1].lower() + first[1:]
        description = description or doc.strip()
        parser_kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    p = sub.add_parser(name, help=help, description=description, **parser_kwargs)
    if dataset:
        add_dataset_arg(p, required=dataset is True)
    common = p.add_argument_group("common options")
    add_runtime_args(common, threads=threads)
    add_json_arg(common)
    p.set_defaults(func=run, check=check)
    return p


def add_target_arg(parser: argparse.ArgumentParser) -> None:
    """``--target paper|strong``: which target model of the dataset to use."""
    from gem_core.data.config import TARGET_NAMES

    parser.add_argument(
        "--target",
        default="paper",
        choices=TARGET_NAMES,
        help="the target model: the paper's architecture (default) or, where the "
        "dataset has one, the stronger bond-aware model",
    )


def add_dataset_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--dataset NAME``, one of the dataset rows."""
    parser.add_argument(
        "--dataset", required=required, metavar="NAME", help=f"one of: {', '.join(DATASETS)}"
    )


def add_runtime_args(parser: Any, threads: bool = True) -> None:
    """``--device``, ``--threads`` (when ``threads``) and ``--no-progress``."""
    parser.add_argument(
        "--device",
        default="auto",
        help="auto (the device measured faster for this work; the CPU without CUDA), cpu or cuda",
    )
    if threads:
        parser.add_argument(
            "--threads",
            type=int,
            default=None,
            help="CPU threads for torch (default: $GEM_NUM_THREADS or torch's default)",
        )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_choose_split_arg(parser: argparse.ArgumentParser) -> None:
    """``--split val|test`` of a bench that chooses settings on validation and reports on test."""
    parser.add_argument(
        "--split",
        choices=("val", "test"),
        default="test",
        help="split explained and scored (default: test; choose settings on val)",
    )


def add_json_arg(parser: Any) -> None:
    """``--json PATH``."""
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the results as JSON to PATH ('-' for stdout)",
    )


def progress_bar(
    args: argparse.Namespace, label: str, quiet: bool = False
) -> AbstractContextManager:
    """A tqdm progress bar on stderr (off with ``--no-progress`` or ``quiet``)."""
    from gem_core.runtime.progress import tqdm_progress

    return tqdm_progress(label, enabled=not (args.no_progress or quiet))


def write_json(obj: Any, target: str | None) -> None:
    """Write ``obj`` as JSON to ``target`` ('-': stdout; None: nowhere)."""
    if not target:
        return
    if target == "-":
        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from gem_core.runtime.store import save_json

    save_json(obj, Path(target))


def add_salts_args(parser: Union[argparse.ArgumentParser, Any]) -> None:
    """``--salts RULE`` and its shorthand ``--largest-fragment`` (``--salts largest``), one of
    them: how a SMILES of several fragments is read (dest ``salts``, default ``refuse``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--salts",
        choices=SALT_RULES,
        default="refuse",
        help="salts and mixtures: refuse them (default), keep the largest fragment, or read "
        "them whole (counter-ions as atoms, as Mutagenicity's own graphs)",
    )
    group.add_argument(
        "--largest-fragment",
        dest="salts",
        action="store_const",
        const="largest",
        help="the same as --salts largest",
    )


def add_names_arg(
    parser: argparse.ArgumentParser, flag: str, default: Sequence[str], what: str
) -> None:
    """``flag`` taking a comma-separated list of ``what`` (checked with :func:`parse_names`),
    ``default`` when not given."""
    text = ",".join(default)
    parser.add_argument(flag, default=text, help=f"comma-separated {what} (default: {text})")


def parse_names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    """A comma-separated list of names, each one of ``known`` (a one-line error otherwise)."""
    names = [w.strip().lower() for w in str(text).split(",") if w.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(
            f"unknown {what} {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from {', '.join(known)}"
        )
    return names
