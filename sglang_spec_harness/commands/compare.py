"""`harness compare RUN_A RUN_B`: did one variant change between two stored runs of a scenario?

RUN_A is the reference (e.g. yesterday's main), RUN_B the new one. The same statistics as the
rules: per-trial median TPOT, a bootstrap interval of the ratio B/A, and fail-closed verdicts.
"""

from __future__ import annotations

import argparse

from sglang_spec_harness.errors import HarnessInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="the reference run directory")
    parser.add_argument("run_b", metavar="RUN_B", help="the new run directory")
    parser.add_argument("--variant", default="candidate", help="which variant to compare (default: candidate)")
    parser.add_argument("--max-slowdown", type=float, default=0.02, metavar="FRACTION",
                        help="TPOT of B may exceed A's by at most this fraction (default 0.02)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from sglang_spec_harness.commands.check import print_results
    from sglang_spec_harness.rundir import load_run_dir
    from sglang_spec_harness.verdict.compare import compare_runs

    run_a, run_b = load_run_dir(args.run_a), load_run_dir(args.run_b)
    if run_a.scenario.name != run_b.scenario.name:
        raise HarnessInputError(
            f"{args.run_b}: scenario {run_b.scenario.name!r} differs from {args.run_a}'s {run_a.scenario.name!r}"
        )
    for path, r in ((args.run_a, run_a), (args.run_b, run_b)):
        if args.variant not in {t.variant for t in r.trials}:
            raise HarnessInputError(f"{path}: no trials of variant {args.variant!r}")
    results = compare_runs(run_a, run_b, variant=args.variant, max_slowdown=args.max_slowdown,
                           confidence=args.confidence, seed=args.seed)
    if args.json:
        print(json.dumps(results.model_dump(), indent=2))
    else:
        print_results(results)
    return results.exit_code
