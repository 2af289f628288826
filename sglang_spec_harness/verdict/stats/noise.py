"""The A/A noise floor: robust spread, minimum detectable gain, false-verdict rates."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sglang_spec_harness.verdict.stats.base import GainDecision, NoiseFloor, RatioEstimate, Values, _check_unit, _clean
from sglang_spec_harness.vocabulary import FAIL
from sglang_spec_harness.verdict.stats.gain import tpot_gain_decision
from sglang_spec_harness.verdict.stats.paired import (
    _LOG_TOL,
    _aa_pairs,
    _paired_mde_from_interval,
    paired_minimum_detectable_gain,
    paired_ratio_ci,
    paired_repetitions_needed,
    paired_tpot_gain_decision,
)
from sglang_spec_harness.verdict.stats.unpaired import (
    _mde_from_interval,
    minimum_detectable_gain,
    ratio_of_medians_ci,
    repetitions_needed,
)

# --------------------------------------------------------------------------------------------------
# A/A noise floor

# Finite-sample consistency factors for the normalised MAD (1.4826 * MAD) of normal data, n = 2..9
# (Monte Carlo, 400,000 draws each, while writing this module; cf. Croux & Rousseeuw 1992). For
# n >= 10, n / (n - 0.8) is within 0.5%.
_MAD_FACTORS = {2: 1.193, 3: 1.488, 4: 1.362, 5: 1.217, 6: 1.192, 7: 1.139, 8: 1.129, 9: 1.101}


def robust_cv(values: Values) -> float | None:
    """Robust relative spread of positive values: the MAD-based sd of their logs.

        cv = b_n * 1.4826 * median(|log x - median(log x)|)
    b_n is the finite-sample correction (small-n MAD is biased low). For small spreads this equals
    sd/mean. If the MAD is 0 but the values vary (a majority tie), falls back to the sample sd of
    the logs. None for fewer than 2 values or invalid data.
    """
    x, problem = _clean(values, "values")
    if problem or x.size < 2:
        return None
    lx = np.log(x)
    n = lx.size
    mad = float(np.median(np.abs(lx - np.median(lx))))
    if mad == 0.0:
        return float(np.std(lx, ddof=1))
    factor = _MAD_FACTORS.get(n, n / (n - 0.8))
    return factor * 1.4826 * mad


def _pooled_cv(
    xa: np.ndarray, pa: str | None, xb: np.ndarray, pb: str | None
) -> tuple[float | None, float | None, float | None]:
    """Each arm's robust CV and their pooled value (None where an arm's data has a problem)."""
    cv_a = robust_cv(xa) if not pa else None
    cv_b = robust_cv(xb) if not pb else None
    if cv_a is None or cv_b is None:
        return cv_a, cv_b, None
    return cv_a, cv_b, math.sqrt(((xa.size - 1) * cv_a**2 + (xb.size - 1) * cv_b**2) / (xa.size + xb.size - 2))


def _floor(
    split: str,
    problems: list[str],
    est: RatioEstimate,
    arm_a: tuple[np.ndarray, str | None],
    arm_b: tuple[np.ndarray, str | None],
    cvs: tuple[float | None, float | None, float | None],
    alpha: float,
    power: float,
    min_gain: float | None,
    reps: int | None,
    **fields: Any,
) -> NoiseFloor:
    """The NoiseFloor both designs report; `fields` are the design's own (mde, paired fields)."""
    (xa, pa), (xb, pb), (cv_a, cv_b, cv) = arm_a, arm_b, cvs
    if not problems and not est.reliable:
        problems.append(est.reason)
    return NoiseFloor(
        reliable=not problems,
        reason="; ".join(problems) if problems else "ok",
        split=split,
        n_a=int(xa.size),
        n_b=int(xb.size),
        median_a=float(np.median(xa)) if not pa else None,
        median_b=float(np.median(xb)) if not pb else None,
        cv=cv,
        cv_a=cv_a,
        cv_b=cv_b,
        estimate=est,
        alpha=float(alpha),
        power=float(power),
        min_gain=None if min_gain is None else float(min_gain),
        repetitions_needed=reps,
        **fields,
    )


def noise_floor(
    values_a: Values,
    values_b: Values | None = None,
    *,
    min_gain: float | None = None,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
    resamples: int = 10000,
    seed: int = 0,
    paired: bool = False,
) -> NoiseFloor:
    """A/A noise floor: spread, A/A ratio interval, minimum detectable gain, repetitions needed.

    `paired=True`: the arms are aligned repetition pairs (or one list in run order, paired as
    adjacent trials 2i, 2i+1; an odd last trial is left out); see `NoiseFloor` for the paired
    fields. Mismatched paired arms raise ValueError (as in `paired_ratio_ci`).

    Pass two arms of the SAME variant, or one list (`values_b=None`), which is split interleaved
    (even positions vs odd positions, so slow drift over time lands in both arms equally).

    cv: pooled robust cv, sqrt(((n_a-1) cv_a^2 + (n_b-1) cv_b^2) / (n_a + n_b - 2)).
    mde: `minimum_detectable_gain(cv, n_a, n_b, alpha, power)`; mde_interval: the same from the
    width of the A/A interval; repetitions_needed: `repetitions_needed(cv, min_gain, alpha, power)`.
    Never raises on data; `reliable`/`reason` flag problems.
    """
    if min_gain is not None and not (0.0 < min_gain < 1.0):
        raise ValueError(f"min_gain must be in (0, 1), got {min_gain!r}")
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    problems: list[str] = []
    a: Values
    b: Values
    if values_b is None:
        arr, problem = _clean(values_a, "values")
        if problem and arr.size == 0:
            problems.append(problem)  # e.g. not numbers; other problems show per arm below
        a, b, split = arr[0::2], arr[1::2], "interleaved"
        if paired:
            m = arr.size // 2
            a, b, split = a[:m], b[:m], "adjacent_pairs"
    else:
        a, b, split = values_a, values_b, "given_pairs" if paired else "given"
    # `a` is the baseline arm of the A/A comparison, `b` the candidate arm.
    if paired:
        return _paired_noise_floor(a, b, split, problems, min_gain, confidence, alpha, power)
    est = ratio_of_medians_ci(a, b, confidence=confidence, resamples=resamples, seed=seed)
    xa, pa = _clean(a, "arm A")
    xb, pb = _clean(b, "arm B")
    problems += [p for p in (pa, pb) if p]
    cv_a, cv_b, cv = _pooled_cv(xa, pa, xb, pb)
    if cv is None:
        problems.append("need >= 2 valid values per arm for a spread")
    mde = reps = None
    if cv is not None:
        mde = minimum_detectable_gain(cv, xa.size, xb.size, alpha=alpha, power=power)
        if min_gain is not None:
            reps = repetitions_needed(cv, min_gain, alpha, power)
        if cv == 0.0:
            problems.append("zero spread: identical values are not a noise measurement")
    return _floor(split, problems, est, (xa, pa), (xb, pb), (cv_a, cv_b, cv), alpha, power, min_gain, reps,
                  mde=mde, mde_interval=_mde_from_interval(est, power))


def _paired_noise_floor(
    a: Values,
    b: Values,
    split: str,
    problems: list[str],
    min_gain: float | None,
    confidence: float,
    alpha: float,
    power: float,
) -> NoiseFloor:
    est = paired_ratio_ci(a, b, confidence=confidence)  # ValueError on mismatched lengths
    xa, pa = _clean(a, "arm A")
    xb, pb = _clean(b, "arm B")
    problems += [p for p in (pa, pb) if p]
    cv_a, cv_b, cv = _pooled_cv(xa, pa, xb, pb)
    sd = within = mde = reps = None
    if cv is not None:
        d = np.log(xb) - np.log(xa)
        sd = 0.0 if np.ptp(d) <= _LOG_TOL else float(d.std(ddof=1))
        within = sd / math.sqrt(2.0)
        mde = paired_minimum_detectable_gain(sd, int(d.size), alpha=alpha, power=power)
        if min_gain is not None:
            reps = paired_repetitions_needed(sd, min_gain, alpha, power)
        if sd == 0.0:
            problems.append(
                "zero spread: identical per-repetition ratios are not a noise measurement"
            )
    else:
        problems.append("need >= 2 valid pairs for a spread")
    return _floor(split, problems, est, (xa, pa), (xb, pb), (cv_a, cv_b, cv), alpha, power, min_gain, reps,
                  mde=mde, mde_interval=_paired_mde_from_interval(est, power), paired=True,
                  n_pairs=int(est.n_baseline), sd_log_ratio=sd, cv_within_pair=within)


def _aa_split_decision(
    x: np.ndarray,
    per_arm: int,
    rng: np.random.Generator,
    paired: bool,
    *,
    min_gain: float,
    confidence: float,
    alpha: float,
    resamples: int,
) -> GainDecision:
    """The gain rule's decision on one random A/A split of `x`, drawn from `rng` (see `false_verdict_rate`)."""
    if paired:
        pa, pb = _aa_pairs(x, per_arm, rng)
        return paired_tpot_gain_decision(pa, pb, min_gain=min_gain, confidence=confidence, alpha=alpha)
    idx = rng.permutation(x.size)[: 2 * per_arm]
    return tpot_gain_decision(
        x[idx[:per_arm]],
        x[idx[per_arm:]],
        min_gain=min_gain,
        confidence=confidence,
        alpha=alpha,
        resamples=resamples,
        seed=int(rng.integers(2**31)),
    )


def false_verdict_rate(
    values: Values,
    *,
    min_gain: float,
    n_splits: int = 200,
    per_arm: int | None = None,
    seed: int = 0,
    confidence: float = 0.95,
    alpha: float = 0.05,
    resamples: int = 10000,
    paired: bool = False,
) -> dict[str, Any]:
    """Verdict frequencies of `tpot_gain_decision` on random A/A splits of one variant's trials.

    Each split draws (seeded) 2 * per_arm distinct trials (default per_arm = len(values) // 2),
    assigns the first half to "baseline" and the second to "candidate", and evaluates the rule.

    `paired=True` (values must be in run order): each split draws `per_arm` of the adjacent pairs
    (trials 2i, 2i+1) and flips a fair coin per pair for which trial is "baseline" (see `_aa_pairs`
    for why this mimics interleaved repetitions), then applies the paired rule.
    The issue asks for >= 20 trials and >= 200 splits (`meets_minimum` says whether this did).

    Returned fractions: pass, fail, fail_slower, fail_below_min_gain, inconclusive, pass_or_fail, and
    false_verdict_rate = pass + fail_slower: the verdicts that are wrong on A/A data. FAIL
    "below_min_gain" is correct there (the true gain, 0, is below min_gain) and becomes frequent
    once the noise is well below min_gain. With min_gain = 0 both FAIL kinds coincide and
    false_verdict_rate == pass_or_fail (the pure two-sided false-positive rate).

    Raises ValueError (a tool, not a rule) when there are fewer than 2 * per_arm valid values.
    """
    if not (0.0 <= min_gain < 1.0):
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    x, problem = _clean(values, "values")
    if problem:
        raise ValueError(problem)
    per_arm = x.size // 2 if per_arm is None else int(per_arm)
    if per_arm < 2 or 2 * per_arm > x.size:
        raise ValueError(f"need 2 * per_arm <= {x.size} values and per_arm >= 2, got per_arm={per_arm}")
    if n_splits < 1:
        raise ValueError("n_splits must be >= 1")
    rng = np.random.default_rng(seed)
    counts = {"PASS": 0, "FAIL_slower": 0, "FAIL_below_min_gain": 0, "INCONCLUSIVE": 0}
    for _ in range(n_splits):
        d = _aa_split_decision(x, per_arm, rng, paired, min_gain=min_gain, confidence=confidence, alpha=alpha,
                               resamples=resamples)
        key = d.verdict if d.verdict != FAIL else f"FAIL_{d.fail_kind}"
        counts[key] += 1
    frac = {k: v / n_splits for k, v in counts.items()}
    fail = frac["FAIL_slower"] + frac["FAIL_below_min_gain"]
    return {
        "n_values": int(x.size),
        "per_arm": per_arm,
        "n_splits": int(n_splits),
        "paired": bool(paired),
        "min_gain": float(min_gain),
        "seed": int(seed),
        "meets_minimum": bool(x.size >= 20 and n_splits >= 200),
        "pass": frac["PASS"],
        "fail": fail,
        "fail_slower": frac["FAIL_slower"],
        "fail_below_min_gain": frac["FAIL_below_min_gain"],
        "inconclusive": frac["INCONCLUSIVE"],
        "pass_or_fail": frac["PASS"] + fail,
        "false_verdict_rate": frac["PASS"] + frac["FAIL_slower"],
        "counts": counts,
    }
