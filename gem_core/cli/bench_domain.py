"""How a model does by how like its training molecules a molecule is (the applicability domain).

For each ``--targets`` entry (``mutagenicity:strong``, ``mutagenicity:paper``, or a model
trained on a user's table by its name), the molecules of each split grouped by the Tanimoto
similarity (Morgan fingerprints) of their closest training molecule: how many, and the share the
model predicts right (a regressor: its RMSE). The Molecule page's caution line
(``DOMAIN_SIMILARITY``, 0.3) was read on the validation split; the test split only reports.
"""

from __future__ import annotations

import argparse
from typing import Any

from gem_core.cli.common import add_command, add_names_arg, parse_names, write_json

SPLITS = ("val", "test")
DEFAULT_TARGETS = ("mutagenicity:strong", "mutagenicity:paper")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "domain", run, __doc__, dataset=False, check=_check)
    add_names_arg(p, "--targets", DEFAULT_TARGETS, "dataset:target, or a model's name")
    add_names_arg(p, "--splits", SPLITS, f"splits of {', '.join(SPLITS)}")


def _check(args: argparse.Namespace) -> None:
    parse_names(args.splits, SPLITS, "split")


def _workbench(entry: str, device: str) -> Any:
    from gem_core.service.session import workbench

    dataset, _, target = entry.strip().partition(":")
    if target:
        wb = workbench(dataset, device, target)
        wb.target()
        return wb
    from gem_core.service.user_models import user_workbench

    return user_workbench(dataset, device)


def run(args: argparse.Namespace) -> int:
    from gem_core.chemistry.neighbours import DOMAIN_SIMILARITY
    from gem_core.service.neighbours import similarity_bins

    splits = parse_names(args.splits, SPLITS, "split")
    out: list[dict[str, Any]] = []
    for entry in args.targets.split(","):
        wb = _workbench(entry, args.device)
        measure = "rmse" if wb.regression else "right"
        print(
            f"{entry.strip()}: closest training similarity (Tanimoto, Morgan r=2), "
            f"molecules and {'RMSE' if wb.regression else 'share right'} per bin "
            f"(caution under {DOMAIN_SIMILARITY})"
        )
        for split in splits:
            rows = similarity_bins(wb, split)
            cells = [
                f"[{r['low']:.1f},{r['high']:.1f}) {r['molecules']:>3} "
                + ("  -  " if r[measure] is None else f"{r[measure]:.3f}")
                for r in rows
            ]
            print(f"  {split:<5} " + " | ".join(cells))
            out.append({"target": entry.strip(), "split": split, "bins": rows})
    write_json({"threshold": DOMAIN_SIMILARITY, "results": out}, args.json)
    return 0
