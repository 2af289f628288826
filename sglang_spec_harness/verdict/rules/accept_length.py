"""accept_length: the candidate's accept length equivalent to the baseline's within a relative
tolerance (an equivalence test; paired by round in the warm modes), and above a floor if given."""

from __future__ import annotations

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import AcceptLengthResult
from sglang_spec_harness.rundir.rule_numbers import AcceptLengthNumbers
from sglang_spec_harness.scenario import AcceptLengthCheck
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import timed_pairs, timed_values
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE


def evaluate_accept_length(run: RunDir, check: AcceptLengthCheck) -> AcceptLengthResult:
    base = timed_values(run, check.baseline, "accept_length")
    cand = timed_values(run, check.candidate, "accept_length")
    preconditions = [
        Precondition(f"{check.baseline}: accept lengths", len(base) > 0, f"{len(base)} timed trial(s) with spec_verify_ct > 0"),
        Precondition(f"{check.candidate}: accept lengths", len(cand) > 0, f"{len(cand)} timed trial(s) with spec_verify_ct > 0"),
    ]
    numbers = AcceptLengthNumbers(baseline=base, candidate=cand, rel_tolerance=check.rel_tolerance, min=check.min)
    blocked = failed_preconditions(preconditions)
    if blocked:
        return rule_result(AcceptLengthResult, check, INCONCLUSIVE, blocked, numbers, preconditions)
    if check.min is not None:
        for name, values in ((check.baseline, base), (check.candidate, cand)):
            low = min(values)
            if low < check.min:
                return rule_result(AcceptLengthResult, check, FAIL, f"{name} accept length {low:.3f} is below the floor {check.min}",
                                   numbers, preconditions)
    pairs = timed_pairs(run, check.baseline, check.candidate, "accept_length") if run.warm else None
    if pairs is not None and len(pairs.repetitions) >= 2:
        # The blocks of a round carry the same prompts; different rounds, different prompts.
        decision = stats.paired_equivalence_within(pairs.baseline, pairs.candidate,
                                                   rel_tolerance=check.rel_tolerance, confidence=check.confidence)
        numbers = numbers.updated(pairs=len(pairs.repetitions))
    else:
        decision = stats.equivalence_within(base, cand, rel_tolerance=check.rel_tolerance, confidence=check.confidence)
    est = decision.estimate
    numbers = numbers.updated(ratio=est.ratio, ci_low=est.ci_low, ci_high=est.ci_high, exact=decision.exact,
                              confidence=check.confidence)
    return rule_result(AcceptLengthResult, check, decision.verdict, decision.reason, numbers, preconditions)
