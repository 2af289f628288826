"""`harness check RUN_DIR`: evaluate the scenario's rules on a stored run, write results.json."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (reports/runs/...)")
    parser.add_argument("--scenario", metavar="FILE", help="evaluate under this scenario's rules instead of the stored one")
    parser.add_argument("--json", action="store_true", help="print results.json instead of the table")


def run(args: argparse.Namespace) -> int:
    import json

    from sglang_spec_harness.verdict.judge import check_run_dir

    results = check_run_dir(args.run_dir, scenario_path=args.scenario)
    if args.json:
        print(json.dumps(results.model_dump(), indent=2))
    else:
        print_results(results)
    return results.exit_code


def print_results(results) -> None:  # ResultsRecord, imported lazily
    """The rule table and the verdict, as a person reads them at the end of a run. Informational
    rules (no bound, so they cannot fail) get their own table: they are not part of the verdict."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from sglang_spec_harness.errors import one_line
    from sglang_spec_harness.pages.numbers import interval, pct, ratio
    from sglang_spec_harness.rundir.rule_numbers import TpotGainNumbers
    from sglang_spec_harness.vocabulary import Verdict

    def text(value: object) -> str:  # names and reasons come from files: no markup, no control characters
        return escape(one_line(value))

    colours = {Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.INCONCLUSIVE: "yellow", Verdict.INFO: "cyan",
               Verdict.NOT_RUN: "blue"}
    console = Console(highlight=False, soft_wrap=True)
    judged = [r for r in results.rules if r.verdict != Verdict.INFO]
    info = [r for r in results.rules if r.verdict == Verdict.INFO]
    table = Table(title=f"{text(results.scenario)}{' (A/A)' if results.aa else ''}", show_lines=False)
    table.add_column("rule")
    table.add_column("verdict")
    table.add_column("reason", overflow="fold")
    for rule in judged:
        table.add_row(text(rule.name), f"[{colours.get(rule.verdict, 'magenta')}]{rule.verdict}[/]", text(rule.reason))
    console.print(table)
    if info:
        extra = Table(title="informational (no bound set: not part of the verdict)", show_lines=False)
        extra.add_column("rule")
        extra.add_column("numbers", overflow="fold")
        for rule in info:
            extra.add_row(text(rule.name), f"[{colours[Verdict.INFO]}]{Verdict.INFO}[/] {text(rule.reason)}")
        console.print(extra)
    for rule in results.rules:
        n = rule.numbers
        if isinstance(n, TpotGainNumbers) and n.ratio is not None and n.ci_low is not None and n.ci_high is not None:
            console.print(
                f"TPOT candidate/baseline = {ratio(n.ratio)} "
                f"({pct(n.confidence or 0.95, 0)} CI {interval(n.ci_low, n.ci_high)}); "
                f"gain {pct(1 - n.ratio)} (needed {pct(n.min_gain or 0)})"
            )
    console.print(f"verdict: [bold {colours[results.verdict]}]{results.verdict}[/] (exit {results.exit_code})")
