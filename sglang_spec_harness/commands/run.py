"""`harness run SCENARIO.yaml`: run both variants, measure, profile, analyse; then check and report.

Exit codes: the checks' verdict when the run completes (0 PASS, 1 FAIL, 3 INCONCLUSIVE); 3 when a
trial failed (nothing can be concluded from half a run); 130 on Ctrl-C; 2 for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import one_line


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
                        help="print the outcome as one JSON object (run_dir, status, verdict, exit_code, the checks' "
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
    from sglang_spec_harness.run.plan import block_size

    spec, budget = scenario.trials, scenario.trials.budget
    looks, rounds = [spec.repetitions], spec.repetitions
    while rounds < budget.max_rounds:
        rounds = min(rounds + spec.stage_rounds, budget.max_rounds)
        looks.append(rounds)
    arms = len(scenario.variants)
    most = spec.max_launches_per_arm
    minutes = f", and at most {budget.max_minutes:g} minutes" if budget.max_minutes is not None else ""
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


# ---- after the run: checks and report -----------------------------------------------------------


def evaluate_run_dir(run_dir: Path) -> int:
    """After a run: the checks (results.json), the verdict on the terminal, the report, and the CI
    job summary when $GITHUB_STEP_SUMMARY is set. Returns the verdict's exit code."""
    from sglang_spec_harness.commands.check import print_results
    from sglang_spec_harness.report import append_step_summary, build_report
    from sglang_spec_harness.verdict.rules import check_run_dir

    results = check_run_dir(run_dir)
    print_results(results)
    paths = build_report(run_dir)
    append_step_summary(run_dir)
    print(f"report: {paths.html}")
    return int(results.exit_code)


# ---- the command --------------------------------------------------------------------------------


@contextlib.contextmanager
def _naming_the_file(path: Path, name: str) -> Iterator[None]:
    """Engines say `scenario NAME: where: what` (they do not know the file): name the file instead."""
    from sglang_spec_harness.errors import HarnessInputError

    try:
        yield
    except HarnessInputError as exc:
        prefix = f"scenario {name}: "
        if not str(exc).startswith(prefix):
            raise
        raise HarnessInputError(f"{path}: {str(exc)[len(prefix):]}") from None


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.run.interrupts import signals_raise_interrupt

    # The whole command: an interrupt while the checks or the report run is one too (exit 128 + signal).
    with signals_raise_interrupt():
        if not args.json:
            return _run(args, {})
        out = sys.stdout
        facts: dict[str, Any] = {}
        with contextlib.redirect_stdout(sys.stderr):
            code = _run(args, facts)
        print(json.dumps(outcome_json(facts, code), indent=2), file=out, flush=True)
        return code


def outcome_json(facts: dict[str, Any], code: int) -> dict[str, Any]:
    """`harness run --json`: what a CI step reads. `results` is the run's results.json (null when the
    checks did not run); a dry run gives its plan instead."""
    from sglang_spec_harness.errors import HarnessInputError
    from sglang_spec_harness.rundir import read_json

    run_dir: Path | None = facts.get("run_dir")
    results = None
    if run_dir is not None and (run_dir / "results.json").is_file():
        with contextlib.suppress(HarnessInputError):  # unreadable: the run's own lines said why
            results = read_json(run_dir / "results.json")
    return {"schema_version": 1, "scenario": facts.get("scenario"), "status": facts.get("status"),
            "run_dir": str(run_dir) if run_dir is not None else None,
            "verdict": results.get("verdict") if isinstance(results, dict) else None, "exit_code": code,
            "error": facts.get("error"), "results": results,
            "report": str(run_dir / "index.html") if run_dir is not None and results is not None else None,
            **({"plan": facts["plan"]} if "plan" in facts else {})}


def _run(args: argparse.Namespace, facts: dict[str, Any]) -> int:
    from sglang_spec_harness.errors import EXIT_BAD_INPUT, EXIT_PASS
    from sglang_spec_harness.extras import require_extras
    from sglang_spec_harness.commands.progress import TerminalProgress, wants_bars
    from sglang_spec_harness.run.execute import run_scenario
    from sglang_spec_harness.scenario import load_scenario
    from sglang_spec_harness.shipped import scenario_path as resolve_scenario

    scenario_path = resolve_scenario(args.scenario)
    scenario = load_scenario(scenario_path, [*args.overrides, *([f"trials.only={args.only}"] if args.only else [])])
    if args.repetitions is not None:
        scenario = scenario.model_copy(
            update={"trials": scenario.trials.model_copy(update={"repetitions": args.repetitions})}
        )
    facts["scenario"] = scenario.name

    if args.dry_run:
        with _naming_the_file(scenario_path, scenario.name):
            result = run_scenario(scenario, scenario_path, out_root=Path(args.out), aa=args.aa, dry_run=True)
        print_plan(scenario, result, aa=args.aa)
        facts.update(status="planned", plan={
            "mode": result.mode, "trials": [t.dir_name for t in result.plan],
            "launches": [launch.dir_name for launch in result.launches],
            "commands": {arm: command.shell() for arm, command in result.commands.items()}})
        return EXIT_PASS
    # Before any server starts: the report comes after the last trial, too late to say it cannot be written.
    # A micro engine's servers run in this interpreter unless a variant names another (which then needs [micro]).
    in_this_python = scenario.engine == "micro" and not any(v.python for v in scenario.variants.values())
    require_extras(*(["micro"] if in_this_python else []), "report")

    progress = TerminalProgress(bars=wants_bars(args.no_progress))
    try:
        with _naming_the_file(scenario_path, scenario.name):
            # the report's modules (matplotlib) load while the first server comes up, not after the last trial
            result = run_scenario(scenario, scenario_path, out_root=Path(args.out), aa=args.aa, progress=progress,
                                  port=args.port, also_import=("sglang_spec_harness.report.html",))
    finally:
        progress.stop()
    facts.update(run_dir=result.run_dir, status=result.status, error=result.error)
    where = f"; results so far: {result.run_dir}" if result.run_dir is not None else ""
    if result.interrupted_by is not None:
        if result.status == "complete":  # interrupted after the last trial: measured, not checked
            print(f"harness run: interrupted after the last trial: the run is complete, not checked "
                  f"(harness check {result.run_dir}){where}", file=sys.stderr)
        else:
            print(f"harness run: interrupted: {result.error}{where}", file=sys.stderr)
        return int(result.exit_code or 130)
    if result.status != "complete":
        if result.run_dir is not None and (result.run_dir / "run.json").is_file():
            # The checks and report of what was measured: the verdict is INCONCLUSIVE at best.
            try:
                evaluate_run_dir(result.run_dir)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # the run's own error below is what matters
                print(f"harness run: checks/report of the incomplete run failed: {one_line(exc)}", file=sys.stderr)
        for line in result.log_tail[-10:]:
            print(f"  server.log | {one_line(line)}", file=sys.stderr)
        print(f"harness run: INCONCLUSIVE (run incomplete): {result.error}{where}", file=sys.stderr)
        return result.exit_code or 3
    assert result.run_dir is not None  # a complete run has its directory (only a dry run has none)
    try:
        code = evaluate_run_dir(result.run_dir)
    except OSError as exc:  # e.g. the disk filled up after the last trial: the measurements are whole
        print(f"harness run: the run is complete but its checks or report could not be written "
              f"({one_line(exc)}); free space, then: harness check {result.run_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"results: {result.run_dir}")
    return code

