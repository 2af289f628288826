"""One point of a bisection or a sweep: the scenario with one variant moved to a commit or a release,
the point's trials run, the trials that run once adopted, the rules checked, the report written.

`harness bisect` (over commits or releases) and `harness sweep` run their points through
`PointRunner`, so a point's run directory is the same ordinary run whichever command made it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness.bisect.plan import StepPlan
from sglang_spec_harness.bisect.reuse import StoredPoint, copy_stored_run
from sglang_spec_harness.releases.environments import EnvironmentProvider, ReleaseEnvironment, TargetInstall, check_provider_name
from sglang_spec_harness.rundir import ResultsRecord, RunRecord, SweepPoint, read_record, write_record
from sglang_spec_harness.run.combine import adopt_trials
from sglang_spec_harness.run.execute import RunResult, run_scenario
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.run.interrupts import interrupt_exception
from sglang_spec_harness.run.plan import Selection
from sglang_spec_harness.scenario import Scenario
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, Verdict

# A server log line that says why it stopped (the last such line is the reason shown).
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Traceback|failed|Killed|refused)", re.IGNORECASE)


PROVIDERS = ("auto", "sglang-cpu", "target")
CPU_PATCH_PREFIX = "sglang_spec_harness.sglang_cpu"


def provider_for(name: str, python: str, patches: list[str]) -> EnvironmentProvider:
    """Where a release point runs, as `--environments NAME` asks: `sglang-cpu`, this CPU's
    environments (`sglang_spec_harness.sglang_cpu.releases`); `target`, the release installed
    beside the variant's interpreter; `auto`, this CPU's when the variant runs the CPU shims (a CPU
    scenario), else the target's."""
    check_provider_name(name, PROVIDERS)
    if name == "auto":
        name = "sglang-cpu" if any(p.startswith(CPU_PATCH_PREFIX) for p in patches) else "target"
    if name == "sglang-cpu":
        from sglang_spec_harness.sglang_cpu.releases import SglangCpuReleases  # only for CPU scenarios

        return SglangCpuReleases(python)
    return TargetInstall(python)


def at_release(scenario: Scenario, variant: str, environment: ReleaseEnvironment) -> Scenario:
    """The scenario with `variant` running the release: its interpreter and source first on
    PYTHONPATH, the flags and environment the release needs here, and `server.sglang_version` set, so
    that the run checks the release on the path before any server starts."""
    spec = scenario.variants[variant]
    update = {
        "python": environment.python,
        "pythonpath": [*environment.pythonpath, *spec.pythonpath],
        "env": {**spec.env, **environment.env},
        "args": {**spec.args, **environment.args},
        "description": f"{spec.description} [SGLang {environment.release}]".strip(),
    }
    variants = {**scenario.variants, variant: spec.model_copy(update=update)}
    server = scenario.server.model_copy(update={"sglang_version": environment.release})
    return scenario.model_copy(update={"variants": variants, "server": server})


def why_it_stopped(run: RunResult) -> str:
    """One line for a run that did not complete: the server's own last error line when it left one
    (what a maintainer searches for), else the run's error."""
    for line in reversed(run.log_tail):
        text = line.strip()
        if text and _ERROR_LINE.search(text) and not text.startswith("File "):
            return text[:400]
    return (run.error or "the run did not complete").splitlines()[0][:400]


@dataclass
class PointOutcome:
    run_dir: Path
    run: RunResult
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

    def __init__(self, scenario_path: Path, plan: StepPlan, progress: RunProgress):
        self.scenario_path, self.plan, self.progress = scenario_path, plan, progress
        self.once_run_dir: Path | None = None

    def _run(self, scenario: Scenario, select: Selection, run_dir: Path) -> RunResult:
        run = run_scenario(scenario, self.scenario_path, select=select, run_dir=run_dir, progress=self.progress)
        if run.interrupted_by is not None:  # the run stopped its servers; unwind the caller too
            raise interrupt_exception(run.interrupted_by)
        return run

    def run_once(self, scenario: Scenario, run_dir: Path) -> RunResult:
        run = self._run(scenario, self.plan.once, run_dir)
        self.once_run_dir = run_dir
        return run

    def run_point(self, scenario: Scenario, run_dir: Path, *, select: Selection | None = None,
                  sweep: SweepPoint | None = None) -> PointOutcome:
        """Run one point's trials (`select`, default the plan's), adopt the trials that ran once,
        check the rules and write the report. A run that did not complete is INCONCLUSIVE with the
        reason it stopped."""
        from sglang_spec_harness.report import build_report
        from sglang_spec_harness.verdict.judge import check_run_dir

        run = self._run(scenario, select if select is not None else self.plan.each_step, run_dir)
        if self.once_run_dir is not None:
            adopt_trials(run_dir, self.once_run_dir)
        if sweep is not None:
            record = read_record(run_dir / "run.json", RunRecord)
            record.sweep = sweep
            write_record(run_dir / "run.json", record)
        results = check_run_dir(run_dir)
        build_report(run_dir)
        if run.status != "complete":
            return PointOutcome(run_dir, run, INCONCLUSIVE, f"run incomplete: {why_it_stopped(run)}", complete=False)
        return PointOutcome(run_dir, run, results.verdict, first_reason(results), complete=True)

    def judge_stored(self, stored: StoredPoint, theirs: Scenario, scenario: Scenario, run_dir: Path) -> PointOutcome:
        """Judge a point from a stored run (`sglang_spec_harness.bisect.reuse`): its trials linked into `run_dir`,
        the rules of `scenario` checked, the report written; no server starts."""
        from sglang_spec_harness.report import build_report
        from sglang_spec_harness.verdict.judge import check_run_dir

        copy_stored_run(stored, theirs, scenario, run_dir)
        results = check_run_dir(run_dir)
        build_report(run_dir)
        run = RunResult(run_dir=run_dir, status="complete", plan=[], commands={})
        return PointOutcome(run_dir, run, results.verdict, first_reason(results), complete=True)
