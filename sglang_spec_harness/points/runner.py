"""One point of a bisection or a sweep (the scenario at the point: `scenario_at.py`): the point's
trials run, the trials that run once adopted, the rules checked, the report written.

`harness bisect` (over commits or releases) and `harness sweep` run their points through
`PointRunner`, so a point's run directory is the same ordinary run whichever command made it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness.points.plan import PointPlan
from sglang_spec_harness.points.reuse import StoredPoint, copy_stored_run
from sglang_spec_harness.pipeline import check_and_report, run_pipeline
from sglang_spec_harness.rundir import ResultsRecord, SweepPoint
from sglang_spec_harness.run.execute import RunResult, run_scenario
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.interrupts import interrupt_exception
from sglang_spec_harness.run.plan import Selection
from sglang_spec_harness.scenario import Scenario
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, Verdict

_KILLED = re.compile(r"\bkilled by (SIG\w+|signal \d+)")  # run/server.py's describe_exit
# A server log line that says why it stopped (the last such line is the reason shown).
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Traceback|failed|Killed|refused)", re.IGNORECASE)


def why_it_stopped(run: RunResult) -> str:
    """One line for a run that did not complete: a server killed by a signal (the kernel's OOM
    killer, a timeout) says so, because its last log lines are then only symptoms (a warm-up request
    refused); otherwise the server's own last error line when it left one (what a maintainer searches
    for), else the run's error."""
    error = (run.error or "the run did not complete").splitlines()[0][:400]
    if _KILLED.search(error):
        return error
    for line in reversed(run.log_tail):
        text = line.strip()
        if text and _ERROR_LINE.search(text) and not text.startswith("File "):
            return text[:400]
    return error


@dataclass
class PointOutcome:
    run_dir: Path
    verdict: Verdict
    reason: str  # the first failing rule, else the first inconclusive one, else that all passed
    complete: bool


def first_reason(results: ResultsRecord) -> str:
    for verdict in (FAIL, INCONCLUSIVE):
        for rule in results.rules:
            if rule.verdict == verdict:
                return f"{rule.name}: {rule.reason}"
    return f"{len(results.rules)} rule(s) pass: {', '.join(rule.name for rule in results.rules)}"


class PointRunner:
    """Runs the trials that do not change once (`run_once`), then each point's (`run_point`)."""

    def __init__(self, scenario_path: Path, plan: PointPlan, progress: RunProgress):
        self.scenario_path, self.plan, self.progress = scenario_path, plan, progress
        self.once_run_dir: Path | None = None

    def run_once(self, scenario: Scenario, run_dir: Path) -> RunResult:
        """The trials of the arms that do not change, neither checked nor reported: each point's run
        adopts them."""
        run = run_scenario(scenario, self.scenario_path, select=self.plan.once, run_dir=run_dir, progress=self.progress)
        if run.interrupted_by is not None:  # the run stopped its servers; unwind the caller too
            raise interrupt_exception(run.interrupted_by)
        self.once_run_dir = run_dir
        return run

    def adopt_once(self, run_dir: Path) -> None:
        """The trials of the arms that do not change from a run made elsewhere (a sharded sweep's
        baseline step), adopted by each point as `run_once`'s are."""
        self.once_run_dir = run_dir

    def run_point(self, scenario: Scenario, run_dir: Path, *, select: Selection | None = None,
                  sweep: SweepPoint | None = None) -> PointOutcome:
        """Run one point's trials (`select`, default the plan's), adopt the trials that ran once,
        check the rules and write the report: the run as a library call (`pipeline.run_pipeline`).
        A run that did not complete is INCONCLUSIVE with the reason it stopped."""
        outcome = run_pipeline(scenario, self.scenario_path, progress=self.progress, run_dir=run_dir,
                               select=select if select is not None else self.plan.each_point,
                               adopt_from=self.once_run_dir, sweep=sweep)
        if outcome.interrupted_by is not None:  # the run stopped its servers; unwind the caller too
            raise interrupt_exception(outcome.interrupted_by)
        if outcome.status != "complete":
            why = why_it_stopped(outcome.run) if outcome.run is not None else outcome.error
            return PointOutcome(run_dir, INCONCLUSIVE, f"run incomplete: {why}", complete=False)
        if outcome.results is None:  # a complete run whose checks or report could not be written
            return PointOutcome(run_dir, INCONCLUSIVE, f"not checked: {outcome.evaluation_error}", complete=False)
        return PointOutcome(run_dir, outcome.results.verdict, first_reason(outcome.results), complete=True)

    def judge_stored(self, stored: StoredPoint, theirs: Scenario, scenario: Scenario, run_dir: Path) -> PointOutcome:
        """Judge a point from a stored run (`sglang_spec_harness.points.reuse`): its trials linked into `run_dir`,
        the rules of `scenario` checked, the report written; no server starts."""
        copy_stored_run(stored, theirs, scenario, run_dir)
        checks, _ = check_and_report(run_dir)
        return PointOutcome(run_dir, checks.verdict, first_reason(checks), complete=True)
