"""One variant across two stored runs of a scenario (`harness compare`): the same statistics as the
rules (per-trial median TPOT, a bootstrap interval of the ratio B/A) and fail-closed verdicts."""

from __future__ import annotations

from sglang_spec_harness.rundir import ResultsRecord, RuleResult, RunDir
from sglang_spec_harness.rundir.models import (
    AcceptLengthChangeResult,
    KernelCountChangeResult,
    OutputChangeResult,
    TpotChangeResult,
)
from sglang_spec_harness.rundir.rule_numbers import (
    AcceptLengthChangeNumbers,
    KernelCountChangeNumbers,
    OutputChangeNumbers,
    TpotChangeNumbers,
)
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import outputs_by_index, region_pattern_counts, timed_values
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, overall_verdict


def compare_runs(run_a: RunDir, run_b: RunDir, *, variant: str, max_slowdown: float, confidence: float = 0.95,
                 seed: int = 0) -> ResultsRecord:
    """Rules comparing one variant across two runs; returns ResultsRecord (not written to either run)."""
    params = {"variant": variant, "max_slowdown": max_slowdown, "confidence": confidence}
    rules: list[RuleResult] = []
    a = timed_values(run_a, variant, "median_tpot_ms")
    b = timed_values(run_b, variant, "median_tpot_ms")
    estimate = stats.ratio_of_medians_ci(a, b, confidence=confidence, seed=seed)
    e = estimate.to_dict()
    limit = 1.0 + max_slowdown
    numbers = TpotChangeNumbers.model_validate({"a_ms": a, "b_ms": b, **e})
    low, high = estimate.ci_low, estimate.ci_high  # set whenever the estimate is reliable
    if len(a) < 2 or len(b) < 2 or not estimate.reliable or low is None or high is None:
        verdict, reason = INCONCLUSIVE, f"too little data: {estimate.reason or f'{len(a)} and {len(b)} trials'}"
    elif high < limit:
        verdict, reason = PASS, (f"TPOT B/A = {estimate.ratio:.4f} (CI {estimate.ci_low:.4f}..{estimate.ci_high:.4f}) "
                                 f"is below the allowed {limit:.3f}")
    elif low > limit:
        verdict, reason = FAIL, (f"TPOT B/A = {estimate.ratio:.4f} (CI {estimate.ci_low:.4f}..{estimate.ci_high:.4f}): "
                                 f"B is slower than A by more than {max_slowdown:.1%}")
    else:
        verdict, reason = INCONCLUSIVE, (f"TPOT B/A = {estimate.ratio:.4f} (CI {estimate.ci_low:.4f}.."
                                         f"{estimate.ci_high:.4f}) straddles the allowed {limit:.3f}: more trials needed")
    rules.append(TpotChangeResult(name="tpot_not_slower", description="B's TPOT is not worse than A's beyond the tolerance",
                                  verdict=verdict, reason=reason, params=params, numbers=numbers))

    acc_a = timed_values(run_a, variant, "accept_length")
    acc_b = timed_values(run_b, variant, "accept_length")
    if acc_a and acc_b:
        d = stats.equivalence_within(acc_a, acc_b, rel_tolerance=0.01)
        numbers_a = AcceptLengthChangeNumbers.model_validate({"a": acc_a, "b": acc_b, **d.to_dict()})
        rules.append(AcceptLengthChangeResult(name="accept_length_unchanged", description="accept length within 1%",
                                              verdict=d.verdict, reason=d.reason, params=params, numbers=numbers_a))
    else:
        rules.append(AcceptLengthChangeResult(name="accept_length_unchanged", description="accept length within 1%",
                                              verdict=INCONCLUSIVE, reason="no accept lengths in one of the runs",
                                              params=params, numbers=AcceptLengthChangeNumbers(a=acc_a, b=acc_b)))

    trials_a, trials_b = run_a.trials_of(variant, "timed"), run_b.trials_of(variant, "timed")
    greedy = run_a.scenario.workload.temperature == 0 and run_b.scenario.workload.temperature == 0
    if greedy and trials_a and trials_b:
        ref, new = outputs_by_index(trials_a[0]), outputs_by_index(trials_b[0])
        common = sorted(set(ref) & set(new))
        same = sum(ref[i] == new[i] for i in common)
        verdict = INCONCLUSIVE if not common else (PASS if same == len(common) else FAIL)
        rules.append(OutputChangeResult(name="outputs_unchanged", description="greedy outputs identical across runs",
                                        verdict=verdict, reason=f"{same}/{len(common)} outputs identical", params=params,
                                        numbers=OutputChangeNumbers(compared=len(common), identical=same)))

    counts: dict[tuple[str, str], dict[str, int | None]] = {}
    for label, run in (("a", run_a), ("b", run_b)):
        for trial in run.trials_of(variant, "profiled"):
            for facts in run.analysis_files(trial):
                for region in facts.regions:
                    for pattern in run.scenario.patterns:
                        c = region_pattern_counts(facts, region, pattern)
                        if c is not None and c.replays:
                            counts.setdefault((region, pattern), {})[label] = c.per_replay_max
    changed = {f"{r}/{p}": v for (r, p), v in counts.items() if v.get("a") != v.get("b")}
    if counts:
        rules.append(KernelCountChangeResult(
            name="pattern_counts_unchanged", description="matches per replay in each region",
            verdict=FAIL if changed else PASS, params=params,
            reason=("changed: " + ", ".join(f"{k} {v.get('a')} -> {v.get('b')}" for k, v in sorted(changed.items())))
            if changed else f"{len(counts)} region/pattern counts identical",
            numbers=KernelCountChangeNumbers(counts={f"{r}/{p}": v for (r, p), v in sorted(counts.items())})))
    variants = {
        "A": {"run_dir": str(run_a.path), "median_tpot_ms": a, "accept_length": acc_a},
        "B": {"run_dir": str(run_b.path), "median_tpot_ms": b, "accept_length": acc_b},
    }
    verdict = overall_verdict([r.verdict for r in rules])
    return ResultsRecord(scenario=run_a.scenario.name, run_dir=f"{run_a.path} vs {run_b.path}", aa=False,
                         run_status="complete" if run_a.complete and run_b.complete else "incomplete",
                         verdict=verdict, exit_code=verdict.exit_code, variants=variants, rules=rules)
