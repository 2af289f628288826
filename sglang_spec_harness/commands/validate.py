"""`harness validate FILE...`: check scenario files without running anything. `--schema [NAME]` prints
the JSON Schema of scenario files, of a run directory's results.json / analysis.json, or of `harness
run --json`'s output."""

from __future__ import annotations

import argparse

SCHEMA_NAMES = ("scenario", "results", "analysis", "run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="scenario YAML files, or shipped scenarios' names (e.g. micro_topk1), as `harness run` takes them")
    parser.add_argument("--schema", nargs="?", const="scenario", choices=SCHEMA_NAMES, metavar="NAME",
                        help="print a JSON Schema and exit: of scenario files (the default), of a run directory's "
                             "results.json or analysis.json, or of `harness run --json`'s output (NAME: scenario, results, "
                             "analysis, run)")


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.scenario import load_scenario, scenario_json_schema
    from sglang_spec_harness.shipped import scenario_path

    if args.schema == "scenario":
        print(scenario_json_schema())
        return 0
    if args.schema == "run":
        from sglang_spec_harness.pipeline import outcome_json_schema

        print(outcome_json_schema())
        return 0
    if args.schema:
        from sglang_spec_harness.rundir.schemas import record_json_schema

        print(record_json_schema(args.schema))
        return 0
    if not args.files:
        raise HarnessInputError("give at least one scenario FILE (or --schema)")
    for argument in args.files:
        path = scenario_path(argument)  # a file of that name wins over a shipped scenario's name
        s = load_scenario(path)
        trials = s.trials
        if trials.warm:
            from sglang_spec_harness.run.plan import block_size

            sampling = (f"{trials.mode}, {trials.launches_per_arm} launches per arm, {trials.repetitions} blocks of "
                        f"{block_size(s)} requests + {trials.profiled} profiled pass(es) per variant")
        else:
            sampling = f"restart, {trials.repetitions} timed + {trials.profiled} profiled trials per variant"
        print(f"{path}: ok ({s.name}: engine {s.engine}, variants {', '.join(s.variants)}, {sampling}, "
              f"{len(s.rules)} rules)")
    return 0
