"""Screen a compound library: predict and explain every molecule of a SMILES file.

INPUT is a .smi file (SMILES [id] per line), a .csv/.tsv table (SMILES column: --smiles-column,
else the first of smiles / canonical_smiles / ...; an id column is kept when present), or '-' for
stdin. OUTPUT is Parquet (.parquet) or CSV (.csv): one row per input row, in input order, with
row, id, smiles, canonical_smiles, status (ok / rejected), reason, message, prediction,
p_mutagen, bonds (the top-K atom-index pairs, K a quarter of the molecule's bonds unless --k
says, numbered like Chem.AddHs(Chem.MolFromSmiles(S)), as in `explain`), scores, fragment (the
bonds as a readable SMILES) and toxicophores (the Kazius alerts in the molecule).

--model NAME screens with a model trained on your own table (train --csv FILE --name NAME)
instead of the Mutagenicity target: prediction then holds that model's classes, and p_mutagen
gives way to p_<first class>, the probability of the model's first class (its classes sorted,
as `models list` shows them; the name lower-case, other characters than a-z, 0-9 and _ as _:
p_active for active / inactive, p_0 for 0 / 1); the summary counts predicted_<first class>
instead of predicted_mutagens.

Rows that cannot be molecules (invalid SMILES, unsupported elements, salts unless --salts
largest or whole, empty or non-UTF-8 lines) become 'rejected' rows with the app's message; the
run never stops for them. Work is done in chunks on all cores; finished chunks are kept in
OUTPUT.parts/, so a killed run started again with the same arguments resumes where it stopped.

examples:
  python -m gem_core screen library.smi --out hits.parquet
  python -m gem_core screen library.csv --smiles-column SMILES --out hits.csv --k 8
  python -m gem_core screen library.smi --out hits.parquet --ray auto    # on a Ray cluster
  python -m gem_core screen library.smi --out hits.csv --model ames_2024   # your own model
"""

from __future__ import annotations

import argparse
import sys

from gem_core.cli.common import add_command, add_salts_args, write_json
from gem_core.cli.explain import add_model_arg, add_molecule_target_arg, check_model
from gem_core.explainers import BATCH_METHODS

# gem_core.service.screening.runner.DEFAULT_CHUNK_SIZE, repeated so that --help starts without
# torch (tests/test_startup.py checks that they agree)
DEFAULT_CHUNK_SIZE = 2000
#: the method ``--check`` stands for: Gem's ranking, then the target's explain-time search
CHECKED_GEM = "gem_check"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _k(text: str) -> int | None:
    """``--k``: a whole number, or 'auto' (None: each molecule's own K)."""
    return None if text.strip().lower() == "auto" else _positive(text)


def register(sub: argparse._SubParsersAction) -> None:
    # each chunk runs on one torch thread in its worker (one worker per core), so the command
    # sets no threads of its own: a Ray screen's driver then starts Ray before importing torch
    p = add_command(sub, "screen", run, __doc__, dataset=False, check=check, threads=False)
    p.add_argument("input", metavar="INPUT", help="a .smi / .csv / .tsv file, or - for stdin")
    p.add_argument(
        "--out", required=True, metavar="OUTPUT", help="result file: .parquet (or .pq) or .csv"
    )
    p.add_argument(
        "--smiles-column",
        default=None,
        metavar="NAME",
        help="the table's SMILES column (default: smiles, canonical_smiles, ...)",
    )
    p.add_argument(
        "--id-column",
        default=None,
        metavar="NAME",
        help="the table's id column (default: id, name, title, ... when present)",
    )
    p.add_argument(
        "--k",
        type=_k,
        default=None,
        metavar="K|auto",
        help="explanation bonds per molecule (default: auto, a quarter of each "
        "molecule's bonds, at most the paper's default K: the K of `explain` "
        "and of the app)",
    )
    p.add_argument(
        "--method", default="gem", choices=BATCH_METHODS, help="explainer (default: gem)"
    )
    add_molecule_target_arg(p)
    for action in p._actions:  # the shared --target, whose help says nothing of --model
        if action.dest == "target":
            action.help = f"{action.help}; ignored with --model"
    add_model_arg(p)
    add_salts_args(p)
    p.add_argument(
        "--check",
        action="store_true",
        dest="check_ranking",
        help="shorthand for --method gem_check: Gem's ranking, then the explain-time "
        "search that asks the target (milliseconds per molecule instead of 0.1)",
    )
    p.add_argument(
        "--workers",
        type=_positive,
        default=None,
        metavar="N",
        help="processes (default: all cores; with --ray, the local cluster's CPUs)",
    )
    p.add_argument(
        "--chunk-size",
        type=_positive,
        default=DEFAULT_CHUNK_SIZE,
        metavar="ROWS",
        help=f"rows per chunk: the unit of work and of resuming (default: {DEFAULT_CHUNK_SIZE})",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the chunks as Ray tasks (CPU workers; --device auto means the CPU): "
        "on the cluster at ADDRESS ('auto' after `ray start --head`), or on a "
        "local one without ADDRESS",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an unfinished earlier run of OUTPUT instead of resuming it",
    )


def check(args: argparse.Namespace) -> None:
    """Refuse a missing input file (the reader's message) or an unknown --model before the
    engine is imported."""
    from gem_core.service.screening.reader import open_source

    if args.input != "-":
        open_source(args.input).close()
    check_model(args)


def run(args: argparse.Namespace) -> int:
    from gem_core.service.screening import ScreenSettings, screen

    method = CHECKED_GEM if args.check_ranking else args.method
    settings = ScreenSettings(
        method=method,
        k=args.k,
        target=args.target,
        device=args.device,
        salts=args.salts,
        model=args.model,
    )
    bar = None

    def progress(done: int, expected: int | None) -> None:
        nonlocal bar
        if args.no_progress:
            return
        if bar is None:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=expected,
                unit=" mol",
                desc="screen",
                leave=False,
                file=sys.stderr,
                smoothing=0.1,
            )
        bar.update(done - bar.n)

    try:
        result = screen(
            args.input,
            args.out,
            settings,
            workers=args.workers,
            use_ray=args.ray is not None,
            ray_address=args.ray or None,
            chunk_size=args.chunk_size,
            smiles_column=args.smiles_column,
            id_column=args.id_column,
            restart=args.restart,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.close()
    s = result.summary
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(s.rejected.items()))
    resumed = (
        f"; resumed: {result.chunks_resumed} of {result.chunks} chunks were already done"
        if result.chunks_resumed
        else ""
    )
    answered = (
        f"the {result.target} Mutagenicity target"
        if result.model is None
        else f"model {result.model} (trained on your table)"
    )
    print(
        f"screened {s.rows} rows with {answered} in "
        f"{result.seconds:.1f} s ({result.molecules_per_second:.0f} molecules/s, "
        f"{result.workers} worker(s), {result.backend}){resumed}",
        file=sys.stderr,
    )
    print(
        f"ok {s.ok}"
        + ("" if s.first_class is None else f" ({s.mutagens} predicted {s.first_class})")
        + ", rejected "
        f"{sum(s.rejected.values())}"
        + (f" ({reasons})" if reasons else "")
        + f" -> {result.output}",
        file=sys.stderr,
    )
    write_json(result.as_dict(), args.json)
    return 0
