"""accept_length: the candidate's accept length equivalent to the baseline's within a relative
tolerance (an equivalence test; paired by round in the warm modes), and above a floor if given."""

from __future__ import annotations

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import AcceptLengthResult
from sglang_spec_harness.rundir.rule_numbers import AcceptLengthNumbers
from sglang_spec_harness.scenario import AcceptLengthRule
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import timed_pairs, timed_values
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE


def evaluate_accept_length(run: RunDir, rule: AcceptLengthRule) -> AcceptLengthResult:
    base = timed_values(run, rule.baseline, "accept_length")
    cand = timed_values(run, rule.candidate, "accept_length")
    preconditions = [
        Precondition(f"{rule.baseline}: accept lengths", len(base) > 0, f"{len(base)} timed trial(s) with spec_verify_ct > 0"),
        Precondition(f"{rule.candidate}: accept lengths", len(cand) > 0, f"{len(cand)} timed trial(s) with spec_verify_ct > 0"),
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
    pairs = timed_pairs(run, rule.baseline, rule.candidate, "accept_length") if run.warm else None
    if pairs is not None and len(pairs.repetitions) >= 2:
        # The blocks of a round carry the same prompts; different rounds, different prompts.
        decision = stats.paired_equivalence_within(pairs.baseline, pairs.candidate,
                                                   rel_tolerance=rule.rel_tolerance, confidence=rule.confidence)
        numbers = numbers.updated(pairs=len(pairs.repetitions))
    else:
        decision = stats.equivalence_within(base, cand, rel_tolerance=rule.rel_tolerance, confidence=rule.confidence)
    est = decision.estimate
    numbers = numbers.updated(ratio=est.ratio, ci_low=est.ci_low, ci_high=est.ci_high, exact=decision.exact,
                              confidence=rule.confidence)
    return rule_result(AcceptLengthResult, rule, decision.verdict, decision.reason, numbers, preconditions)
