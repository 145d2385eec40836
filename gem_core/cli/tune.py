"""``tune``: compare Gem settings on the validation split, beside the dataset's current settings."""

from __future__ import annotations

import argparse

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json

EXAMPLES = """\
examples:
  python -m gem_core tune --dataset mutagenicity --variant mlp:network.decoder=mlp \\
      --variant paper-targets:teacher.topk_policy=paper --seeds 0 1 2
  python -m gem_core tune --dataset ba_shapes \\
      --variant inner:network.decoder=inner,inputs.degree_features=false
  python -m gem_core tune --dataset nci1 --variant climb-late:check.late=climb

a variant changes settings by their paths (docs/settings.md lists them all):
  teacher.*   what Gem learns from: kind (weights|graded|mix|graded+add|blend), topk_policy
              (nosplit|exact|paper|refine|sufficient), ks (1-30 or 5/10/15), label_source
              (true|predicted), protocol (keep_nodes|drop_isolated), necessity_weight,
              necessity_lead
  inputs.*    what it reads: condition_on_prediction, num_hops, wl_rounds, max_colors,
              degree_features, wl_edge_labels, edge_features
  network.*   hidden (e.g. 64/64/32), decoder (inner|mlp), decoder_bias, ensemble, order (score|cover)
  training.*  lr, batch_size, max_epochs, patience
  check.*     the explain-time check (no refit needed, but each variant is fitted anew): rule
              (off|repair|best|search|sustain|climb), width, late (same or a rule), backward
              (off|grid|late), lead
  seed, and train_on (all|correct: only instances the target classifies correctly)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "tune",
        run,
        help="compare Gem settings by validation accuracy (never reads the test split)",
        description="Fit Gem with the dataset's current settings and with each --variant, for "
        "every seed, and print the explanation accuracy per K on the validation split. "
        "This is how the presets in gem_core/gem/presets.py were chosen (docs/decisions/).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:key=value,…",
        help="a named set of setting overrides (repeat for several)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        metavar="SEED",
        help="Gem seeds, the same for every variant (default: 0 1 2)",
    )
    add_target_arg(p)


def run(args: argparse.Namespace) -> int:
    from gem_core.evaluation.tuning import (
        check_variants,
        format_sweep,
        parse_variant,
        validation_sweep,
    )
    from gem_core.service.session import workbench

    wb = workbench(args.dataset, args.device, args.target)
    variants = [parse_variant(v) for v in args.variant]
    check_variants(variants, wb.gem_settings)  # bad settings fail before any fitting
    with progress_bar(args, f"tune {wb.name}") as progress:
        result = validation_sweep(wb, variants, args.seeds, progress=progress)
    print(format_sweep(result))
    write_json(result, args.json)
    return 0
