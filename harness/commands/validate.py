"""`harness validate FILE...`: check scenario files without running anything."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE", help="scenario YAML files")
    parser.add_argument("--schema", action="store_true", help="print the JSON Schema of scenario files and exit")


def run(args: argparse.Namespace) -> int:
    from harness.errors import HarnessInputError
    from harness.scenario import load_scenario, scenario_json_schema

    if args.schema:
        print(scenario_json_schema())
        return 0
    if not args.files:
        raise HarnessInputError("give at least one scenario FILE (or --schema)")
    for path in args.files:
        s = load_scenario(path)
        trials = s.trials
        if trials.warm:
            from harness.run.plan import block_size

            sampling = (f"{trials.mode}, {trials.launches_per_arm} launches per arm, {trials.repetitions} blocks of "
                        f"{block_size(s)} requests + {trials.profiled} profiled pass(es) per variant")
        else:
            sampling = f"restart, {trials.repetitions} timed + {trials.profiled} profiled trials per variant"
        print(f"{path}: ok ({s.name}: engine {s.engine}, variants {', '.join(s.variants)}, {sampling}, "
              f"{len(s.checks)} checks)")
    return 0
