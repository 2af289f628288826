"""aa_noise (A/A runs, which `harness run --aa` judges with it in place of the TPOT rule): both arms
run the same variant, so any PASS of the TPOT rule, or a FAIL that says "slower", is a false
verdict; what it found is the noise floor."""

from __future__ import annotations

from typing import Any

from sglang_spec_harness.rundir import RunDir
from sglang_spec_harness.rundir.models import AaNoiseResult
from sglang_spec_harness.rundir.rule_numbers import AaNoiseNumbers, GainDecisionNumbers, NoiseFloorNumbers, TpotData
from sglang_spec_harness.scenario import TpotGainRule
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.evidence import timed_pairs
from sglang_spec_harness.verdict.rules.result import rule_params
from sglang_spec_harness.verdict.rules.tpot_gain import at_last_look, tpot_decision
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, Verdict


def evaluate_aa_noise(run: RunDir) -> AaNoiseResult:
    """A/A: both arms run the same variant. Any PASS or FAIL of the TPOT rule is a false verdict."""
    tpot_rules = [c for c in run.scenario.rules if isinstance(c, TpotGainRule)]
    min_gain = tpot_rules[0].min_gain if tpot_rules else 0.01
    rule = TpotGainRule(name="aa_noise_floor", kind="tpot_gain", min_gain=min_gain,
                        description="A/A: the TPOT rule on two arms of the same variant",
                        **({"alpha": tpot_rules[0].alpha, "confidence": tpot_rules[0].confidence} if tpot_rules else {}))
    # An adaptive run claims at its last look's level: the A/A answer is the one its looks gave.
    adaptive = at_last_look(run, rule)
    if adaptive is not None:
        rule = adaptive[0]
    result = _aa_noise_at(run, rule)
    if adaptive is not None:
        result.reason = f"look {adaptive[1].looks} of an adaptive run, nominal alpha {rule.alpha:.4f}: {result.reason}"
    return result


def _aa_noise_at(run: RunDir, rule: TpotGainRule) -> AaNoiseResult:
    """The A/A rule with its claims at `rule`'s level."""
    min_gain = rule.min_gain
    decision, data = tpot_decision(run, "baseline", "candidate", min_gain=min_gain, alpha=rule.alpha,
                                   confidence=rule.confidence)
    a, b = data.baseline_ms, data.candidate_ms
    if data.nested is not None:
        return _aa_nested(rule, decision, data)
    if data.paired:
        pairs = timed_pairs(run, "baseline", "candidate", "median_tpot_ms")
        floor = stats.noise_floor(pairs.baseline, pairs.candidate, min_gain=min_gain, paired=True)
    else:
        floor = stats.noise_floor(a, b, min_gain=min_gain)
    noise = NoiseFloorNumbers.model_validate(floor.to_dict())
    numbers = AaNoiseNumbers(a_ms=a, b_ms=b, decision=GainDecisionNumbers.model_validate(decision.to_dict()),
                             noise=noise, min_gain=min_gain, paired=data.paired, pairs=data.pairs,
                             pair_ratios=data.pair_ratios)

    def result(verdict: Verdict, reason: str) -> AaNoiseResult:
        return AaNoiseResult(name=rule.name, description=rule.description, verdict=verdict, reason=reason,
                             params=rule_params(rule), numbers=numbers)

    # With min_gain > 0, "gain below min_gain" is the right answer on A/A data; only a PASS or a
    # "slower" FAIL is false.
    if decision.verdict == PASS or decision.fail_kind == "slower":
        return result(FAIL, f"false {decision.verdict} on A/A data: {decision.reason}")
    if not data.paired and (len(a) < stats.MIN_TRIALS or len(b) < stats.MIN_TRIALS):
        return result(INCONCLUSIVE, f"too few timed trials ({len(a)} and {len(b)})")
    return result(PASS, _aa_summary(noise, min_gain, data.pairs if data.paired else len(a)))


def _aa_nested(rule: TpotGainRule, decision: Any, data: TpotData) -> AaNoiseResult:
    """A/A in a warm mode: the nested model's verdict must be neither PASS nor FAIL "slower"; the
    spreads it found (launch to launch, block to block) and the smallest detectable gain are the
    noise floor."""
    fit = data.nested
    assert fit is not None
    numbers = AaNoiseNumbers(a_ms=data.baseline_ms, b_ms=data.candidate_ms,
                             decision=GainDecisionNumbers.model_validate(decision.to_dict()), min_gain=rule.min_gain,
                             mode=data.mode, nested=fit, blocks=data.blocks, pairs=data.pairs,
                             pair_ratios=data.pair_ratios, paired=False)

    def result(verdict: Verdict, reason: str) -> AaNoiseResult:
        return AaNoiseResult(name=rule.name, description=rule.description, verdict=verdict, reason=reason,
                             params=rule_params(rule), numbers=numbers)

    if decision.verdict == PASS or decision.fail_kind == "slower":
        return result(FAIL, f"false {decision.verdict} on A/A data: {decision.reason}")
    if not decision.estimate.reliable:
        return result(INCONCLUSIVE, decision.reason)
    parts = [f"{fit.n_blocks} blocks in {sum(fit.n_launches.values())} launches",
             f"block-to-block sd {fit.sd_block:.2%}"]
    if fit.sd_launch is not None:
        parts.append(f"launch-to-launch sd {fit.sd_launch:.2%} (F test p={fit.launch_p:.2g}"
                     f"{', pooled' if fit.pooled else ''})")
    if decision.mde is not None:
        parts.append(f"smallest detectable gain {decision.mde:.2%}")
    return result(PASS, "no false verdict; " + "; ".join(parts))


def _aa_summary(floor: NoiseFloorNumbers, min_gain: float, n: int) -> str:
    parts = []
    if floor.paired:
        parts.append(f"paired over {n} repetitions")
    if floor.cv is not None:
        parts.append(f"TPOT noise (CV of trial medians) {floor.cv:.2%}")
    if floor.cv_within_pair is not None:
        parts.append(f"within a repetition {floor.cv_within_pair:.2%}")
    if floor.mde is not None:
        unit = "repetitions" if floor.paired else "trials/arm"
        parts.append(f"smallest detectable gain with {n} {unit} {floor.mde:.2%}")
    if floor.repetitions_needed is not None:
        parts.append(f"repetitions needed for min_gain {min_gain:.1%}: {floor.repetitions_needed}")
    return "no false verdict; " + "; ".join(parts)
