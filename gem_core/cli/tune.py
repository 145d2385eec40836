"""``tune``: compare Gem settings on the validation split, beside the dataset's current settings."""

from __future__ import annotations

import argparse

from gem_core.cli.common import add_command, add_target_arg, progress_bar, write_json

EXAMPLES = """\
examples:
  python -m gem_core tune --dataset mutagenicity --variant mlp:decoder=mlp \\
      --variant paper-targets:topk_policy=paper --seeds 0 1 2
  python -m gem_core tune --dataset ba_shapes --variant inner:decoder=inner,degree_features=false

settings a variant may change:
  explainer: lr, hidden (e.g. 64/64/32), batch_size, max_epochs, patience, kl_weight,
             weight_decay, wl_rounds, max_colors, decoder_bias, decoder (inner|mlp),
             degree_features, wl_edge_labels, edge_features, ensemble (networks averaged)
  training targets: target (weights|graded|mix|graded+add|blend),
             topk_policy (nosplit|exact|paper|refine|sufficient), label_source (true|predicted),
             train_on (all|correct: only instances the target classifies correctly),
             condition_on_prediction (true|false: Gem reads the target's predicted class),
             target_ks (budgets K the graded targets average: 1-30 or 5/10/15; default: the
             dataset's K grid, or the target's own budgets),
             protocol (keep_nodes|drop_isolated: what the sufficient rule judges by),
             necessity_weight (the sufficient rule's weight of necessity, e.g. 1.0),
             connected_growth (true|false: may the sufficient rule pick edges anywhere),
             necessity_lead (pairs of each target ranked first by greedy necessity, e.g. 5)
  explaining (no refit needed, but each variant is fitted anew): check
             (off|repair|best|search|sustain|climb), check_width (next pairs compared),
             check_late (the rule from the grid's smallest K on: same|repair|best|search|
             sustain|climb), check_backward (off|grid|late: at the grid's K, or those above
             its smallest, where the top-K does not hold, search backwards from the whole
             instance), check_lead (the first pairs of the smallest explanation
             put in the target's deletion order, e.g. 5), e.g.
             --variant climb-late:check_late=climb
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "tune",
        run,
        help="compare Gem settings by validation accuracy (never reads the test split)",
        description="Fit Gem with the dataset's current settings and with each --variant, for "
        "every seed, and print the explanation accuracy per K on the validation split. "
        "This is how the settings in gem_core/data/config.py were chosen.",
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
