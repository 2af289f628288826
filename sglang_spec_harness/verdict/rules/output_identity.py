"""output_identity: the candidate's greedy outputs token for token the baseline's, request by request
(at least `min_fraction` of the requests compared)."""

from __future__ import annotations

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import OutputIdentityResult
from sglang_spec_harness.rundir.rule_numbers import FirstDifference, OutputIdentityNumbers
from sglang_spec_harness.scenario import OutputIdentityRule
from sglang_spec_harness.verdict.evidence import output_source, outputs_by_index
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def evaluate_output_identity(run: RunDir, rule: OutputIdentityRule) -> OutputIdentityResult:
    source = output_source(run, rule.baseline, rule.candidate)
    base_trials = run.trials_of(rule.baseline, source)
    cand_trials = run.trials_of(rule.candidate, source)
    how = "" if source == "timed" else " (the run planned no timed trials of both arms)"
    preconditions = [
        Precondition("greedy decoding", run.scenario.workload.temperature == 0,
                     f"temperature {run.scenario.workload.temperature}: sampled outputs are not comparable"),
        Precondition(f"{rule.baseline}: {source} trials", bool(base_trials), f"{len(base_trials)} completed{how}"),
        Precondition(f"{rule.candidate}: {source} trials", bool(cand_trials), f"{len(cand_trials)} completed{how}"),
    ]
    numbers = OutputIdentityNumbers(compared=0, identical=0, fraction=None, first_difference=None, source=source)
    blocked = failed_preconditions(preconditions)
    if blocked:
        return rule_result(OutputIdentityResult, rule, INCONCLUSIVE, blocked, numbers, preconditions)
    # The reference output of each prompt: its first baseline trial (in the warm modes each block has
    # its own prompts, so the reference gathers every baseline trial).
    reference: dict[int, list[int]] = {}
    reference_trial: dict[int, str] = {}
    self_differences = 0  # greedy decoding must be deterministic, or a difference means nothing
    for trial in base_trials:
        for index, ids in outputs_by_index(trial).items():
            if index in reference:
                self_differences += int(ids != reference[index])
            else:
                reference[index], reference_trial[index] = ids, trial.name
    compared = identical = 0
    first: FirstDifference | None = None
    for trial in cand_trials:
        for index, ids in sorted(outputs_by_index(trial).items()):
            if index not in reference:
                continue
            compared += 1
            if ids == reference[index]:
                identical += 1
            elif first is None:
                pos = _first_difference(reference[index], ids)
                first = FirstDifference(
                    request_index=index, position=pos,
                    baseline_token=reference[index][pos] if pos < len(reference[index]) else None,
                    candidate_token=ids[pos] if pos < len(ids) else None,
                    baseline_trial=reference_trial[index], candidate_trial=trial.name,
                )
    fraction = identical / compared if compared else None
    numbers = numbers.updated(compared=compared, identical=identical, fraction=fraction, first_difference=first,
                              baseline_self_differences=self_differences)
    if fraction is None:
        return rule_result(OutputIdentityResult, rule, INCONCLUSIVE, "no request completed in both variants: nothing to compare",
                           numbers, preconditions)
    if fraction < rule.min_fraction:
        where = (f"; first: request {first.request_index} token {first.position} "
                 f"({first.baseline_token} vs {first.candidate_token})") if first else ""
        nondet = (f"; note: the baseline differs from itself in {self_differences} request(s)"
                  if self_differences else "")
        return rule_result(OutputIdentityResult, rule, FAIL, f"{identical}/{compared} outputs identical ({fraction:.1%} < "
                           f"{rule.min_fraction:.1%}){where}{nondet}", numbers, preconditions)
    return rule_result(OutputIdentityResult, rule, PASS, f"{identical}/{compared} greedy outputs identical", numbers, preconditions)
