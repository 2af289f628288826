"""accept_length: the candidate's accept length equivalent to the baseline's within a relative
tolerance (an equivalence test; paired by round in the warm modes, by request on the profiled passes
of a run without timed trials of both arms), and above a floor if given."""

from __future__ import annotations

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import AcceptLengthResult
from sglang_spec_harness.rundir.rule_numbers import AcceptLengthNumbers
from sglang_spec_harness.scenario import AcceptLengthRule
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import output_source, request_accept_pairs, timed_pairs, timed_values
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE


def evaluate_accept_length(run: RunDir, rule: AcceptLengthRule) -> AcceptLengthResult:
    # Acceptance does not depend on the profiler: a run without timed trials of both arms (an
    # exact-only run, a bisection step) is judged on its profiled passes, as the outputs are.
    source = output_source(run, rule.baseline, rule.candidate)
    base = timed_values(run, rule.baseline, "accept_length", source)
    cand = timed_values(run, rule.candidate, "accept_length", source)
    preconditions = [
        Precondition(f"{rule.baseline}: accept lengths", len(base) > 0, f"{len(base)} {source} trial(s) with spec_verify_ct > 0"),
        Precondition(f"{rule.candidate}: accept lengths", len(cand) > 0, f"{len(cand)} {source} trial(s) with spec_verify_ct > 0"),
    ]
    numbers = AcceptLengthNumbers(baseline=base, candidate=cand, rel_tolerance=rule.rel_tolerance, min=rule.min)
    blocked = failed_preconditions(preconditions)
    if blocked:
        return rule_result(AcceptLengthResult, rule, INCONCLUSIVE, blocked, numbers, preconditions)
    if rule.min is not None:
        for name, values in ((rule.baseline, base), (rule.candidate, cand)):
            low = min(values)
            if low < rule.min:
                return rule_result(AcceptLengthResult, rule, FAIL, f"{name} accept length {low:.3f} is below the floor {rule.min}",
                                   numbers, preconditions)
    pairs = timed_pairs(run, rule.baseline, rule.candidate, "accept_length") if run.warm and source == "timed" else None
    by_request = request_accept_pairs(run, rule.baseline, rule.candidate) if source == "profiled" else ([], [])
    if pairs is not None and len(pairs.repetitions) >= 2:
        # The blocks of a round carry the same prompts; different rounds, different prompts.
        decision = stats.paired_equivalence_within(pairs.baseline, pairs.candidate,
                                                   rel_tolerance=rule.rel_tolerance, confidence=rule.confidence)
        numbers = numbers.updated(pairs=len(pairs.repetitions))
    elif len(by_request[0]) >= 2:
        # Profiled passes: one per arm, the same prompts at the same indices: each request is a pair.
        decision = stats.paired_equivalence_within(*by_request, rel_tolerance=rule.rel_tolerance,
                                                   confidence=rule.confidence)
        numbers = numbers.updated(pairs=len(by_request[0]))
    else:
        decision = stats.equivalence_within(base, cand, rel_tolerance=rule.rel_tolerance, confidence=rule.confidence)
    est = decision.estimate
    numbers = numbers.updated(ratio=est.ratio, ci_low=est.ci_low, ci_high=est.ci_high, exact=decision.exact,
                              confidence=rule.confidence)
    return rule_result(AcceptLengthResult, rule, decision.verdict, decision.reason, numbers, preconditions)
