"""`harness gate RUN_DIR --mode pr|nightly`: what a CI job does with a run's verdict.

One line per rule that fails the gate (then warnings and notices), a last line with the decision;
exit 0 when the job may pass, 1 when it must fail, 2 when there are no results to judge. Under
GitHub Actions ($GITHUB_ACTIONS) the lines are workflow commands (`::error title=...::`), so they
show as annotations on the check. The rules themselves: sglang_spec_harness.verdict.gate.
"""

from __future__ import annotations

import argparse
import os

from sglang_spec_harness.verdict.gate import GATE_MODES, GateDecision, GateLine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with its results.json (reports/latest)")
    parser.add_argument("--mode", required=True, choices=GATE_MODES,
                        help="pr: timing rules INCONCLUSIVE warn and NOT_RUN (an exact-only run) is a notice; "
                        "nightly: both fail. In both, FAIL fails and an exact rule without a verdict fails")


def _escape(text: str, *, property_value: bool = False) -> str:
    """A workflow command's data (or property) with GitHub's escapes, so that no text from a run
    (a kernel name, a reason) can end the line and start a command of its own."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def format_line(line: GateLine, *, github: bool) -> str:
    if not github:
        return f"{line.level}: {line.text()}"
    title = f"harness gate: {line.rule or 'results'}"
    return f"::{line.level} title={_escape(title, property_value=True)}::{_escape(line.text())}"


def summary_line(decision: GateDecision) -> str:
    counts = {level: sum(1 for line in decision.lines if line.level == level) for level in ("error", "warning", "notice")}
    said = ", ".join(f"{n} {level}{'s' if n != 1 else ''}" for level, n in counts.items() if n) or "nothing to say"
    word = "FAIL" if decision.failed else "PASS"
    return (f"harness gate ({decision.mode}): {word}: {decision.scenario}, verdict {decision.verdict}, "
            f"{decision.passed_rules} rule(s) passed; {said}")


def run(args: argparse.Namespace) -> int:
    from sglang_spec_harness.verdict.gate import gate_run_dir

    decision = gate_run_dir(args.run_dir, args.mode)
    github = os.environ.get("GITHUB_ACTIONS") == "true"
    for line in decision.lines:
        print(format_line(line, github=github))
    print(summary_line(decision))
    return decision.exit_code
