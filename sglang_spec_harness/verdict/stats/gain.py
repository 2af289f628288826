"""The TPOT gain rule: PASS / FAIL / INCONCLUSIVE from a ratio interval and a rank test."""

from __future__ import annotations


import numpy as np

from sglang_spec_harness.verdict.stats.base import MIN_TRIALS, GainDecision, Values, _check_gain_arguments
from sglang_spec_harness.vocabulary import INCONCLUSIVE
from sglang_spec_harness.verdict.stats.decision import apply_gain_rule, decision_builder
from sglang_spec_harness.verdict.stats.paired import paired_tpot_gain_decision
from sglang_spec_harness.verdict.stats.unpaired import (
    _mde_from_interval,
    mann_whitney,
    ratio_of_medians_ci,
)

# --------------------------------------------------------------------------------------------------
# TPOT gain rule (unpaired; the rule itself, shared with the paired and nested modes, is in decision.py)


def tpot_gain_decision(
    baseline: Values,
    candidate: Values,
    *,
    min_gain: float,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
    resamples: int = 10000,
    seed: int = 0,
    paired: bool = False,
) -> GainDecision:
    """PASS / FAIL / INCONCLUSIVE for "candidate TPOT is at least `min_gain` lower than baseline".

    `paired=True`: the arms are aligned repetition pairs of an interleaved run; delegates to
    `paired_tpot_gain_decision` (same rule, paired t interval and signed-rank test; `resamples`
    and `seed` unused). The rest of this docstring describes the unpaired rule (paired=False).

    With r = median(c)/median(b), [lo, hi] its `confidence` bootstrap interval
    (`ratio_of_medians_ci`), t = 1 - min_gain, and one-sided exact Mann-Whitney p-values:

      PASS  if hi < t  and  p(candidate < t * baseline) < alpha/2
      FAIL  ("slower")          if lo > 1  and  p(candidate > baseline) < alpha/2
      FAIL  ("below_min_gain")  if lo > t  and  p(candidate > t * baseline) < alpha/2
      INCONCLUSIVE otherwise, or when the estimate is not reliable (fewer than MIN_TRIALS per arm,
            zero spread in an arm, NaN/inf/non-positive values), with a reason and the MDE.

    Why the rank test too: its null distribution is exact and distribution-free, so whatever the
    bootstrap's small-sample coverage, a false PASS or a false "slower" FAIL on A/A data has
    probability <= alpha/2 each (<= alpha together). Each directional claim is thus made at
    alpha/2 by two criteria, matching the two-sided `confidence` interval (defaults 0.95 / 0.05).
    Scaling the baseline by t makes the rank test ask the same question as the interval (a
    log-scale shift model). With min_gain = 0 the two FAIL branches coincide.

    Note: on A/A data, FAIL "below_min_gain" is a *correct* verdict (the true gain, 0, is below
    min_gain); only PASS and FAIL "slower" are false verdicts there (see `false_verdict_rate`).

    MDE (`mde`): 1 - exp(-(z_{(1+conf)/2} + z_power) * se), se = log(hi/lo) / (2 z_{(1+conf)/2}):
    the smallest true gain whose interval would exclude 1 with probability `power` at this spread.
    `gain_needed_to_pass` = 1 - t * exp(-(z + z_power) * se), about min_gain + mde.
    """
    _check_gain_arguments(min_gain, confidence, alpha, power)
    if paired:
        return paired_tpot_gain_decision(
            baseline, candidate, min_gain=min_gain, confidence=confidence, alpha=alpha, power=power
        )
    est = ratio_of_medians_ci(
        baseline, candidate, confidence=confidence, resamples=resamples, seed=seed
    )
    t = 1.0 - float(min_gain)
    # MDE only from an interval that can be trusted (else the reason says what is missing).
    mde = _mde_from_interval(est, power) if est.reliable else None
    needed = None if mde is None else 1.0 - t * (1.0 - mde)

    decision = decision_builder(est, min_gain=min_gain, alpha=alpha, power=power, mde=mde, needed=needed)

    if est.ratio is None:
        return decision(INCONCLUSIVE, f"no usable data: {est.reason}")
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    if b.size < 2 or c.size < 2:
        return decision(
            INCONCLUSIVE,
            f"too few trials (baseline {b.size}, candidate {c.size}); need >= {MIN_TRIALS} per arm",
        )
    ps = (
        mann_whitney(b, c, "two-sided").p_value,
        mann_whitney(t * b, c, "less").p_value,
        mann_whitney(b, c, "greater").p_value,
        mann_whitney(t * b, c, "greater").p_value,
    )
    summary = (
        f"ratio {est.ratio:.4f} [{est.ci_low:.4f}, {est.ci_high:.4f}] ({confidence:.0%}), "
        f"gain {1 - est.ratio:+.2%}, min_gain {min_gain:.2%}"
    )
    return apply_gain_rule(decision, est, ps, summary, t=t, alpha=alpha, power=power, mde=mde,
                            test="rank test")
