"""The verdict of a run: its validity rules (complete, intact), then the scenario's rules, each
judged by its family (`rules/`; INFO where a rule has no bound), and the overall verdict; written to
the run directory as results.json (`harness check`, and `harness run` at its end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_spec_harness.files import write_json_atomic
from sglang_spec_harness.rundir import ResultsRecord, RuleResult, RunDir, load_run_dir, missing_pieces
from sglang_spec_harness.rundir.models import ValidityResult
from sglang_spec_harness.rundir.rule_numbers import ValidityNumbers
from sglang_spec_harness.scenario import AcceptLengthRule, OutputIdentityRule, OutputValidityRule
from sglang_spec_harness.verdict.evidence import timed_values
from sglang_spec_harness.verdict.rules.aa_noise import evaluate_aa_noise
from sglang_spec_harness.verdict.rules.output_validity import implicit_rule
from sglang_spec_harness.verdict.rules.registry import EVALUATORS, OPTIONAL_BOUNDS
from sglang_spec_harness.vocabulary import INCONCLUSIVE, INFO, NOT_RUN, is_timing_kind, overall_verdict


def informational(rule: Any) -> list[str] | None:
    """The unset bound fields of a rule that has no bound at all (so it cannot fail), else None."""
    fields = OPTIONAL_BOUNDS.get(rule.kind)
    if fields and all(getattr(rule, f) is None for f in fields):
        return list(fields)
    return None


def _as_information(result: RuleResult, unset: list[str]) -> RuleResult:
    """A rule that cannot fail, reported for its numbers only: INFO, whatever it found."""
    result.reason = f"informational (no bound: set {' or '.join(unset)} to judge it): {result.reason}"
    result.verdict = INFO
    return result


def _as_not_run(result: RuleResult) -> RuleResult:
    """A timing rule of an exact-only run (`trials.only: exact`): it had no timed rounds to judge."""
    result.reason = "not run: the run was exact-only (trials.only: exact, harness run --only exact): no timed rounds"
    result.verdict = NOT_RUN
    return result


def run_validity(run: RunDir) -> list[RuleResult]:
    """The rules that come before the scenario's: `run_complete` where the run did not complete,
    `run_intact` where a piece of it is missing on disk (rundir.missing_pieces); both INCONCLUSIVE."""
    results: list[RuleResult] = []
    if not run.complete:
        results.append(ValidityResult(name="run_complete", description="every planned trial ran", verdict=INCONCLUSIVE,
                                      reason=f"the run is {run.run.status}: {run.run.error or 'not every trial ran'}",
                                      params={}, numbers=ValidityNumbers()))
    if problems := missing_pieces(run):
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        results.append(ValidityResult(name="run_intact", description="every recorded piece of the run is on disk",
                                      verdict=INCONCLUSIVE, reason=f"{problems[0]}{more}", params={},
                                      numbers=ValidityNumbers(problems=problems)))
    return results


def evaluate_run(run: RunDir) -> ResultsRecord:
    """Every rule of the run (its validity, then the scenario's, and output validity where the
    scenario declares none; an A/A run: aa_noise and the rules that hold on A/A data) and the overall
    verdict."""
    results = run_validity(run)
    rules = [*run.scenario.rules, *([extra] if (extra := implicit_rule(run)) else [])]
    if run.aa:
        results.append(evaluate_aa_noise(run))
        for rule in rules:
            if isinstance(rule, (AcceptLengthRule, OutputIdentityRule, OutputValidityRule)):
                results.append(EVALUATORS[rule.kind](run, rule))
    else:
        exact_only = run.scenario.trials.only == "exact"
        for rule in rules:
            result = EVALUATORS[rule.kind](run, rule)
            unset = informational(rule)
            if exact_only and is_timing_kind(rule.kind):
                result = _as_not_run(result)
            results.append(_as_information(result, unset) if unset and result.verdict != NOT_RUN else result)
    variants = {
        name: {
            "timed_trials": [t.name for t in run.trials_of(name, "timed")],
            "profiled_trials": [t.name for t in run.trials_of(name, "profiled")],
            "median_tpot_ms": timed_values(run, name, "median_tpot_ms"),
            "accept_length": timed_values(run, name, "accept_length"),
        }
        for name in sorted({t.variant for t in run.trials} | set(run.scenario.variants))
    }
    verdict = overall_verdict([r.verdict for r in results])
    return ResultsRecord(scenario=run.scenario.name, run_dir=str(run.path), aa=run.aa, run_status=run.run.status,
                         verdict=verdict, exit_code=verdict.exit_code, variants=variants, rules=results)


def write_results(run_dir: Path, results: ResultsRecord) -> Path:
    path = Path(run_dir) / "results.json"
    write_json_atomic(path, results.model_dump())
    return path


def check_run_dir(run_dir: str | Path, *, scenario_path: str | Path | None = None) -> ResultsRecord:
    """Evaluate a stored run (optionally under another scenario's rules) and write results.json."""
    run = load_run_dir(run_dir, scenario_path=scenario_path)
    results = evaluate_run(run)
    write_results(run.path, results)
    return results
