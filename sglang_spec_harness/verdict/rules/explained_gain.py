"""explained_gain: does the TPOT saving match what the profiles show changed in the regions of the
change? The measured saving over the predicted one, an equivalence test against `min_ratio` and
`max_ratio` (with neither, the rule is informational: INFO)."""

from __future__ import annotations

import numpy as np

from sglang_spec_harness.rundir import Precondition, RunDir
from sglang_spec_harness.rundir.models import ExplainedGainResult
from sglang_spec_harness.rundir.rule_numbers import ExplainedGainNumbers, RegionSaving
from sglang_spec_harness.scenario import ExplainedGainRule
from sglang_spec_harness.verdict.evidence import (
    RegionTimes,
    pattern_time_per_cycle,
    region_times_per_cycle,
    timed_values,
)
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.verdict.rules.tpot_gain import tpot_decision
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, Verdict

# The bounds of this kind, all optional: a rule with none of them set cannot fail (INFO).
OPTIONAL_BOUNDS = ("min_ratio", "max_ratio")


def _span_ratios(times: RegionTimes, region: str, reference: str) -> np.ndarray:
    """Each span of `region` over the `reference` span nearest to it in time (the same cycle's):
    the machine's speed cancels cycle by cycle, not only between whole profiled trials."""
    out = []
    for file_spans in times.spans:
        assert file_spans is not None
        ref = file_spans[reference]  # by start, as the analysis writes them
        starts = np.array([a for a, _ in ref])
        durations = np.array([b for _, b in ref])
        for start, duration in file_spans[region]:
            i = int(np.searchsorted(starts, start))
            near = min((j for j in (i - 1, i) if 0 <= j < len(ref)), key=lambda j: abs(starts[j] - start))
            out.append(duration / durations[near])
    return np.array(out)


def _per_cycle_normalized(base: RegionTimes, cand: RegionTimes, regions: list[str], reference: str
                          ) -> dict[str, tuple[float, float]] | None:
    """Per region, (baseline, candidate) us per cycle on the baseline's scale, from span ratios to the
    reference region cycle by cycle; None when a profiled trace lacks the spans (a GPU trace, or an
    analysis written before spans were recorded)."""
    base_spans = [s for s in base.spans if s is not None]
    cand_spans = [s for s in cand.spans if s is not None]
    if not base.spans or not cand.spans or len(base_spans) < len(base.spans) or len(cand_spans) < len(cand.spans):
        return None
    if any(r not in s or not s[r] for s in base_spans + cand_spans for r in [*regions, reference]):
        return None
    # the baseline's reference time per instance: the unit both variants' ratios are turned back into
    ref_us = float(np.median([b for s in base_spans for _, b in s[reference]]))
    out = {}
    for region in regions:
        per = []
        for times, spans in ((base, base_spans), (cand, cand_spans)):
            per_instance = float(np.median(_span_ratios(times, region, reference))) * ref_us
            per.append(per_instance * sum(len(s[region]) for s in spans) / times.cycles)
        out[region] = (per[0], per[1])
    return out


def _explained_preconditions(rule: ExplainedGainRule, base_t: list[float], cand_t: list[float],
                             accept: list[float], base: RegionTimes, cand: RegionTimes) -> list[Precondition]:
    """What the explained gain relies on: timed trials, an accept length, and profiles with the
    rule's regions timed the same way in both variants."""
    reference = [rule.reference_region] if rule.reference_region else []
    preconditions = [
        Precondition("timed trials in both variants", bool(base_t) and bool(cand_t), f"{len(base_t)} and {len(cand_t)}"),
        Precondition(f"{rule.baseline}: accept length", bool(accept), "needed to turn time per cycle into time per token"),
    ]
    for name, times in ((rule.baseline, base), (rule.candidate, cand)):
        preconditions += [
            Precondition(f"{name}: profiled traces with region times", times.files > 0 and not times.files_without_times,
                         f"{times.files} rank-0 trace analyses, {times.files_without_times} without region times "
                         "(analysis.json from an older harness: run again)"),
            Precondition(f"{name}: cycles in the profile", times.cycles > 0,
                         f"{times.cycles} target verifies (one per EAGLE cycle)"),
            Precondition(f"{name}: every region of the rule in the profile", not times.missing,
                         f"missing: {', '.join(times.missing)}" if times.missing else f"{', '.join(rule.regions + reference)}"),
        ]
        if reference and not times.missing:
            preconditions.append(Precondition(f"{name}: reference region {reference[0]} took time",
                                              times.per_cycle_us.get(reference[0], 0.0) > 0, "0 us per cycle"))
    preconditions.append(Precondition(
        "both variants timed the same way", len(base.basis | cand.basis) <= 1,
        f"bases {sorted(base.basis)} and {sorted(cand.basis)} (GPU op time vs span wall time)"))
    return preconditions


def _region_savings(rule: ExplainedGainRule, base: RegionTimes, cand: RegionTimes
                    ) -> tuple[dict[str, RegionSaving], float, bool]:
    """Per region of the rule, the time per cycle in both variants and the saving, with the
    candidate's times on the baseline's scale; and that scale, and whether it was cycle by cycle.

    The reference region ran the same code in both, so any difference there is the machine (load,
    clocks) during the two profiled trials. Where the traces have spans, cycle by cycle: a CPU's
    speed moves within a trial too (by 10-20% over half a second on a shared VM), and the regions
    of one cycle share it."""
    reference = rule.reference_region
    scale = base.per_cycle_us[reference] / cand.per_cycle_us[reference] if reference else 1.0
    wanted = list(dict.fromkeys(rule.regions))
    normalized = _per_cycle_normalized(base, cand, wanted, reference) if reference else None
    pairs = normalized or {r: (base.per_cycle_us[r], cand.per_cycle_us[r] * scale) for r in wanted}
    regions = {r: RegionSaving(baseline_us_per_cycle=b, candidate_us_per_cycle=c, saving_us_per_cycle=b - c)
               for r, (b, c) in pairs.items()}
    return regions, scale, normalized is not None


def _explained_summary(rule: ExplainedGainRule, n: ExplainedGainNumbers) -> str:
    """What was measured and predicted, in one line (the start of the rule's reason)."""
    assert n.measured_saving_ms is not None and n.predicted_saving_ms is not None and n.regions is not None
    per_region = ", ".join(f"{r} {v.saving_us_per_cycle:+.1f}" for r, v in n.regions.items())
    removed = n.pattern_removed_us_per_cycle
    of_pattern = f"; {rule.pattern} alone {removed:.1f} us" if removed is not None else ""
    if n.scaled == "per_cycle":
        scaled = (f"; both scaled cycle by cycle by {rule.reference_region} "
                  f"(the candidate's trial x{n.candidate_scale:.3f} on the whole)")
    else:
        scaled = f"; candidate scaled x{n.candidate_scale:.3f} by {rule.reference_region}" if n.scaled else ""
    return (f"measured TPOT saving {n.measured_saving_ms * 1000:.1f} us/token; the profiles predict "
            f"{n.predicted_saving_ms * 1000:.1f} us/token ({n.saving_us_per_cycle:.1f} us less per cycle in the "
            f"regions [{per_region}]{of_pattern}{scaled} / {n.tokens_per_cycle:.2f} tokens)")


def _explained_verdict(rule: ExplainedGainRule, n: ExplainedGainNumbers,
                       preconditions: list[Precondition]) -> ExplainedGainResult:
    """The equivalence test on measured/predicted against the rule's bounds."""
    summary = _explained_summary(rule, n)

    def result(verdict: Verdict, reason: str) -> ExplainedGainResult:
        return rule_result(ExplainedGainResult, rule, verdict, reason, n, preconditions)

    if n.predicted_saving_ms is None or n.predicted_saving_ms <= 0:
        return result(INCONCLUSIVE, f"{summary}: the regions are not faster in the candidate, so there is "
                      "no saving to explain")
    assert n.ratio is not None and n.ratio_ci is not None  # predicted > 0
    ratio_lo, ratio_hi = n.ratio_ci
    assert ratio_lo is not None and ratio_hi is not None
    summary += f"; ratio {n.ratio:.2f} [{ratio_lo:.2f}, {ratio_hi:.2f}] ({rule.confidence:.0%})"
    low, high = rule.min_ratio, rule.max_ratio
    if low is not None and ratio_hi < low:
        return result(FAIL, f"{summary} < {low}: the profiles' saving does not reach TPOT")
    if high is not None and ratio_lo > high:
        return result(FAIL, f"{summary} > {high}: TPOT gained more than the profiles explain")
    bounds = " and ".join(b for b in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "") if b)
    if (low is None or ratio_lo >= low) and (high is None or ratio_hi <= high):
        return result(PASS, f"{summary}: inside {bounds}" if bounds else summary)
    return result(INCONCLUSIVE, f"{summary}: the interval straddles {bounds}; more repetitions narrow it")


def evaluate_explained_gain(run: RunDir, rule: ExplainedGainRule) -> ExplainedGainResult:
    """Does the TPOT saving match what the profiles show changed in the regions of the change?

    Prediction: the drop in the regions' time per EAGLE cycle, baseline minus candidate (whatever
    ran there: the removed ops, and the ops that replace them; the candidate's times scaled by
    the reference region, cycle by cycle where the traces have spans), divided by the tokens one
    cycle emits (the accept length). Measured:
    the baseline's median TPOT times (1 - TPOT ratio), with the interval of that ratio (paired
    when the TPOT rule would pair). The verdict is an equivalence test on measured/predicted:
    PASS when its whole interval lies inside the bounds, FAIL when it lies outside, else
    INCONCLUSIVE. The prediction is taken as exact: its noise is what the bounds' width absorbs."""
    base_t = timed_values(run, rule.baseline, "median_tpot_ms")
    cand_t = timed_values(run, rule.candidate, "median_tpot_ms")
    accept = timed_values(run, rule.baseline, "accept_length")
    reference = [rule.reference_region] if rule.reference_region else []
    base = region_times_per_cycle(run, rule.baseline, [*rule.regions, *reference])
    cand = region_times_per_cycle(run, rule.candidate, [*rule.regions, *reference])
    preconditions = _explained_preconditions(rule, base_t, cand_t, accept, base, cand)
    blocked = failed_preconditions(preconditions)
    if blocked:
        return rule_result(ExplainedGainResult, rule, INCONCLUSIVE, blocked, ExplainedGainNumbers(), preconditions)
    decision, _ = tpot_decision(run, rule.baseline, rule.candidate, min_gain=0.0, confidence=rule.confidence)
    est = decision.estimate
    interval_ok = est.ratio is not None and est.ci_low is not None and est.ci_high is not None and est.reliable
    preconditions.append(Precondition("TPOT ratio with an interval", interval_ok,
                                      est.reason or f"{est.method}: {est.ratio} [{est.ci_low}, {est.ci_high}]"))
    if not interval_ok:
        return rule_result(ExplainedGainResult, rule, INCONCLUSIVE, failed_preconditions(preconditions) or "no TPOT interval",
                           ExplainedGainNumbers(), preconditions)
    base_tpot = float(np.median(base_t))
    measured, measured_lo, measured_hi = (base_tpot * (1 - r) for r in (est.ratio, est.ci_high, est.ci_low))
    tokens_per_cycle = float(np.median(accept))
    regions, scale, per_cycle = _region_savings(rule, base, cand)
    saving_us = sum(r.saving_us_per_cycle for r in regions.values())
    predicted = saving_us / tokens_per_cycle / 1000.0
    ratio, ratio_lo, ratio_hi = ((m / predicted if predicted > 0 else None) for m in (measured, measured_lo, measured_hi))
    base_pattern = pattern_time_per_cycle(run, rule.baseline, rule.pattern, rule.regions)
    cand_pattern = pattern_time_per_cycle(run, rule.candidate, rule.pattern, rule.regions)
    pattern_removed = (base_pattern - cand_pattern) if base_pattern is not None and cand_pattern is not None else None
    numbers = ExplainedGainNumbers(
        measured_saving_ms=measured, measured_ci_ms=[measured_lo, measured_hi], predicted_saving_ms=predicted,
        ratio=ratio, ratio_ci=[ratio_lo, ratio_hi], confidence=rule.confidence, paired=est.method,
        saving_us_per_cycle=saving_us, tokens_per_cycle=tokens_per_cycle, regions=regions,
        pattern_removed_us_per_cycle=pattern_removed, basis=sorted(base.basis | cand.basis),
        profiled_cycles={"baseline": base.cycles, "candidate": cand.cycles},
        reference_region=rule.reference_region, candidate_scale=scale,
        scaled=("per_cycle" if per_cycle else "per_trial") if reference else None,
        min_ratio=rule.min_ratio, max_ratio=rule.max_ratio)
    return _explained_verdict(rule, numbers, preconditions)
