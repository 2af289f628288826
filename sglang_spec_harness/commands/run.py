"""`harness run SCENARIO.yaml`: run both variants, measure, profile, analyse; then check and report.

Exit codes: the rules' verdict when the run completes (0 PASS, 1 FAIL, 3 INCONCLUSIVE); 3 when a
trial failed (nothing can be concluded from half a run); 130 on Ctrl-C; 2 for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_spec_harness.errors import one_line

if TYPE_CHECKING:
    from sglang_spec_harness.pipeline import RunOutcome


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {value}")
    return value


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """`--set PATH=VALUE` (run, sweep, bisect): scenario fields for this command, validated like the file."""
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", dest="overrides",
                        help="set one scenario field, as if written in the file (repeatable): "
                        "--set server.model_path=/models/llama --set server.args.--speculative-num-steps=3 "
                        "--set trials.repetitions=6; each run's scenario.yaml records the result")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO.yaml",
                        help="the scenario file, or a shipped scenario's name (e.g. micro_topk1)")
    parser.add_argument("--out", metavar="DIR", default="reports/runs", help="where runs go (default: reports/runs)")
    parser.add_argument(
        "--aa", action="store_true", help="A/A run: both arms use the baseline configuration (measures the noise floor)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the server commands; start nothing")
    parser.add_argument("--repetitions", type=_positive_int, metavar="N", help="timed trials per variant (overrides the scenario)")
    parser.add_argument("--only", choices=["exact"],
                        help="exact: the profiled passes and the exact rules only, no timed rounds (trials.only: exact): "
                        "kernel counts, accept length and outputs are judged, the timing rules are reported NOT_RUN")
    add_set_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help="plain output: one line per trial")
    parser.add_argument("--json", action="store_true",
                        help="print the outcome as one JSON object (run_dir, status, verdict, exit_code, the rules' "
                        "results, report); the progress and the verdict's lines go to stderr")
    parser.add_argument("--port", type=_port, metavar="N",
                        help="the servers' port (restart mode) or the first launch's (warm modes: launch k gets N+k); "
                             "default: a free port per launch")


# ---- the plan (--dry-run) -----------------------------------------------------------------------


def print_plan(scenario: Any, result: Any, *, aa: bool) -> None:
    """The plan in the terms of its mode: launches, and which samples each serves, in run order."""
    from sglang_spec_harness.run.plan import block_size

    trials, spec = result.plan, scenario.trials
    head = f"scenario {scenario.name} ({scenario.engine}){' A/A' if aa else ''}, mode {result.mode}"
    if result.mode == "restart":
        print(f"{head}: {len(trials)} trials, one server launch each")
        for t in trials:
            config = f" (runs {t.config})" if t.config != t.variant else ""
            print(f"  {t.dir_name}{config}")
    else:
        blocks = sum(1 for t in trials if t.kind == "timed")
        own = sum(1 for t in trials if t.launch is None)
        timing = ("exact only: no timed rounds" if spec.only == "exact" else
                  f"{spec.repetitions} rounds of one block of {block_size(scenario)} requests per arm ({blocks} blocks)")
        print(f"{head}: {len(result.launches) + own} server launches ({spec.launches_per_arm} per arm"
              f"{f', plus {own} for nsys-profiled passes' if own else ''}), {timing}, {len(trials) - blocks} profiled passes")
        together = ("one server at a time" if result.mode == "sequential" else "one launch per arm up at a time"
                    if spec.servers_up == "pair" else "all up at once, started together")
        print(f"launches ({together}):")
        for launch in result.launches:
            config = f" (runs {launch.config})" if launch.config != launch.arm else ""
            served = [t for t in trials if t.launch == launch.index]
            rounds = sorted({t.repetition for t in served if t.kind == "timed"})
            print(f"  {launch.dir_name}{config}: {sum(t.kind == 'profiled' for t in served)} profiled, "
                  f"{len(rounds)} blocks (rounds {_ranges(rounds)})")
        if result.mode == "interleaved":
            print("order:")
        by_round: dict[tuple[str, int], list[Any]] = {}
        for t in trials:
            by_round.setdefault((t.kind, t.repetition), []).append(t)
        for (kind, rep), group in (by_round.items() if result.mode == "interleaved" else ()):
            label = f"profiled pass {rep + 1}" if kind == "profiled" else f"round {rep + 1}"
            where = ", ".join(f"{t.variant}@{result.launches[t.launch].dir_name if t.launch is not None else 'own launch'}"
                              for t in group)
            print(f"  {label}: {where}")
    if spec.budget is not None:
        print(adaptive_stages(scenario))
    for arm, command in result.commands.items():
        print(f"{arm}: {command.shell()}")
    print("(--port 0 stands for the free port chosen per launch; profiled passes write to <trial>/profile)")


def adaptive_stages(scenario: Any) -> str:
    """An adaptive design's stages and its worst case, in words (the plan above is its first stage)."""
    from sglang_spec_harness.pages.numbers import fmt
    from sglang_spec_harness.run.plan import block_size

    spec, budget = scenario.trials, scenario.trials.budget
    looks, rounds = [spec.repetitions], spec.repetitions
    while rounds < budget.max_rounds:
        rounds = min(rounds + spec.stage_rounds, budget.max_rounds)
        looks.append(rounds)
    arms = len(scenario.variants)
    most = spec.max_launches_per_arm
    minutes = f", and at most {fmt(budget.max_minutes)} minutes" if budget.max_minutes is not None else ""
    return "\n".join([
        f"adaptive (trials.budget, {budget.spending} alpha spending): the plan above is the first stage;",
        "  each profiled pass on a server of its own (the profiler changes a server's later speed), the candidate's first;",
        "  look 0 after the profiled passes: a kernel-count rule that FAILs ends the run at once;",
        f"  TPOT looks after rounds {', '.join(map(str, looks))} (information fraction = rounds / {budget.max_rounds}); "
        "each stops at PASS or FAIL beyond its boundary,",
        f"  else adds {spec.stage_rounds} rounds, or one launch per arm (up to {most}) when launch-to-launch noise dominates"
        + (" (servers_up pair: the new pair serves the stage, the pair that was up stops);" if spec.servers_up == "pair" else ";"),
        f"  worst case: {budget.max_rounds} rounds ({budget.max_rounds * arms} blocks of {block_size(scenario)} requests), "
        f"{most * arms} server launches{minutes}",
    ])


def _ranges(values: list[int]) -> str:
    """1-based, compressed: [0, 1, 2, 5] -> '1-3, 6'."""
    out: list[str] = []
    for v in values:
        if out and out[-1].split("-")[-1] == str(v):
            out[-1] = out[-1].split("-")[0] + f"-{v + 1}"
        else:
            out.append(str(v + 1))
    return ", ".join(out)


# ---- the command: the run as a library call (sglang_spec_harness.pipeline), then what it says ----


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.run.interrupts import signals_raise_interrupt

    # The whole command: an interrupt while the rules or the report run is one too (exit 128 + signal).
    with signals_raise_interrupt():
        if not args.json:
            return _run(args).exit_code
        out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            outcome = _run(args)
        print(json.dumps(outcome.to_json_dict(), indent=2), file=out, flush=True)
        return outcome.exit_code


def _run(args: argparse.Namespace) -> RunOutcome:
    from sglang_spec_harness.pipeline import load_run_scenario, run_pipeline

    overrides = [*args.overrides, *([f"trials.only={args.only}"] if args.only else [])]
    scenario, path = load_run_scenario(args.scenario, overrides, args.repetitions)
    if args.dry_run:
        outcome = run_pipeline(scenario, path, out_root=Path(args.out), aa=args.aa, dry_run=True)
        print_plan(scenario, outcome.run, aa=args.aa)
        return outcome
    from sglang_spec_harness.commands.progress import TerminalProgress, wants_bars

    progress = TerminalProgress(bars=wants_bars(args.no_progress))
    try:
        outcome = run_pipeline(scenario, path, out_root=Path(args.out), aa=args.aa, progress=progress, port=args.port,
                               step_summary=True)
    finally:
        progress.stop()
    print_outcome(outcome)
    return outcome


def print_outcome(outcome: RunOutcome) -> None:
    """After a run: the rule table and the verdict, the report, and why a run did not complete or
    could not be checked (on stderr)."""
    if outcome.results is not None:
        from sglang_spec_harness.commands.check import print_results

        print_results(outcome.results)
        if outcome.report is not None:
            print(f"report: {outcome.report}")
    where = f"; results so far: {outcome.run_dir}" if outcome.run_dir is not None else ""
    if outcome.interrupted_by is not None:
        if outcome.status == "complete":  # interrupted after the last trial: measured, not checked
            print(f"harness run: interrupted after the last trial: the run is complete, not checked "
                  f"(harness check {outcome.run_dir}){where}", file=sys.stderr)
        else:
            print(f"harness run: interrupted: {outcome.error}{where}", file=sys.stderr)
    elif outcome.status != "complete":
        if outcome.evaluation_error is not None:  # the run's own error below is what matters
            print(f"harness run: verdict/report of the incomplete run failed: {outcome.evaluation_error}", file=sys.stderr)
        for line in (outcome.run.log_tail if outcome.run is not None else [])[-10:]:
            print(f"  server.log | {one_line(line)}", file=sys.stderr)
        print(f"harness run: INCONCLUSIVE (run incomplete): {outcome.error}{where}", file=sys.stderr)
    elif outcome.evaluation_error is not None:  # e.g. the disk filled up after the last trial: the measurements are whole
        print(f"harness run: the run is complete but its verdict or report could not be written "
              f"({outcome.evaluation_error}); free space, then: harness check {outcome.run_dir}", file=sys.stderr)
    else:
        print(f"results: {outcome.run_dir}")
