"""`harness analyze TRACE...`: count kernels (or CPU ops) per graph launch and region;
`harness analyze --run-dir RUN`: analyse a run directory's profiled trials again (analysis.json)."""

from __future__ import annotations

import argparse

SUBJECTS = ("auto", "gpu_ops", "cpu_ops")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="*", metavar="TRACE",
                        help="Kineto .json/.json.gz traces or Nsight Systems .sqlite exports (e.g. one per TP rank)")
    parser.add_argument("--count", action="append", default=[], metavar="NAME=REGEX",
                        help="a pattern to count, searched in kernel/op names (repeatable; default: softmax)")
    parser.add_argument("--region", action="append", default=[], metavar="NAME=REGEX",
                        help="a region rule put in front of the default SGLang table, so it wins (repeatable)")
    parser.add_argument("--no-default-regions", action="store_true",
                        help="use only the --region rules, not the default SGLang table")
    parser.add_argument("--subject", choices=SUBJECTS, default="auto",
                        help="what to count: GPU ops if the trace has any, else CPU ops (auto); or force one")
    parser.add_argument("--json", action="store_true", help="print the analysis document as JSON")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the JSON document to FILE")
    parser.add_argument("--run-dir", metavar="RUN",
                        help="instead of TRACE files: analyse RUN's profiled trials again with its scenario's "
                             "patterns and regions, and rewrite RUN/analysis.json (e.g. a run analysed by an "
                             "older harness, whose report lacks the time per region, top kernels and timeline)")


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from rich.console import Console

    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.traces.analysis import analyze_traces
    from sglang_spec_harness.traces.patterns import parse_assignment
    from sglang_spec_harness.traces.render import render

    if args.run_dir is not None:
        return _rerun(args)
    if not args.traces:
        raise HarnessInputError("TRACE: none given (give trace files, or --run-dir RUN)")
    patterns = [parse_assignment(text, flag="--count") for text in args.count] or None
    rules = [parse_assignment(text, flag="--region") for text in args.region]
    analysis = analyze_traces(
        args.traces,
        patterns=patterns,
        regions=[(rule.name, rule.regex) for rule in rules],
        replace_default_regions=args.no_default_regions,
        subject=args.subject,
    )
    document = json.dumps(analysis.to_json_dict(), indent=2)
    if args.output:
        try:
            Path(args.output).write_text(document + "\n")
        except OSError as exc:
            raise HarnessInputError(f"--output {args.output}: cannot write: {exc.strerror or exc}") from None
    if args.json:
        sys.stdout.write(document + "\n")
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        render(analysis, console)
    return 0


def _rerun(args: argparse.Namespace) -> int:
    """--run-dir: the run's own scenario says what to count, so the options that say it are refused."""
    from sglang_spec_harness.errors import EXIT_INCONCLUSIVE, HarnessInputError, one_line
    from sglang_spec_harness.run.reanalyze import reanalyze_run

    given = [flag for flag, value in (("TRACE", args.traces), ("--count", args.count), ("--region", args.region),
                                      ("--no-default-regions", args.no_default_regions),
                                      ("--subject", args.subject != "auto"), ("--json", args.json),
                                      ("--output", args.output)) if value]
    if given:
        raise HarnessInputError(f"--run-dir: not with {', '.join(given)} (the run's scenario.yaml says what to count)")
    record = reanalyze_run(args.run_dir)
    print(f"{one_line(args.run_dir)}/analysis.json: {len(record.trials)} profiled trial(s) analysed")
    for trial, error in (record.errors or {}).items():
        print(f"  {one_line(trial)}: analysis failed: {one_line(error)}")
    # as in a run whose trace analysis failed: written, but the rules will lack that evidence
    return EXIT_INCONCLUSIVE if record.errors else 0
