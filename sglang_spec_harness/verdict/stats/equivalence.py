"""Equivalence within a tolerance (TOST on a ratio): accept length unchanged."""

from __future__ import annotations

import math
import numbers

import numpy as np
from scipy import stats as _st

from sglang_spec_harness.verdict.stats.base import (
    _EPS,
    EquivalenceDecision,
    RatioCommon,
    RatioEstimate,
    Values,
    _check_unit,
    _clean,
    _zero_spread,
)
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS, Verdict

# --------------------------------------------------------------------------------------------------
# Equivalence (accept length)


def _checked_tolerance(rel_tolerance: float, confidence: float) -> float:
    """The relative tolerance as a float; ValueError for a tolerance outside (0, 1) or a bad confidence."""
    if not isinstance(rel_tolerance, numbers.Real) or not (0.0 < float(rel_tolerance) < 1.0):
        raise ValueError(f"rel_tolerance must be in (0, 1), got {rel_tolerance!r}")
    _check_unit("confidence", confidence)
    return float(rel_tolerance)


def _welch_log_ratio_interval(b: np.ndarray, c: np.ndarray, ratio: float, confidence: float) -> tuple[float, float, float]:
    """(lo, hi, df): Welch t on the log of the ratio of means, its variance by the delta method."""
    mb, mc = float(b.mean()), float(c.mean())
    vb = float(b.var(ddof=1)) / (b.size * mb**2)
    vc = float(c.var(ddof=1)) / (c.size * mc**2)
    se = math.sqrt(vb + vc)
    denom = (vb**2 / (b.size - 1) if vb > 0 else 0.0) + (vc**2 / (c.size - 1) if vc > 0 else 0.0)
    df = (vb + vc) ** 2 / denom if denom > 0 else 1e9  # (underflow guard: never raise on data)
    half = float(_st.t.ppf((1 + confidence) / 2, df)) * se
    return ratio * math.exp(-half), ratio * math.exp(half), df


def _interval_against_band(lo: float, hi: float, lower: float, upper: float, units: str) -> tuple[Verdict, str]:
    """TOST's verdict for the interval [lo, hi] and the band [lower, upper], with why; `units`: what more of would help."""
    if lo >= lower and hi <= upper:
        return PASS, "interval inside the band"
    if hi < lower or lo > upper:
        return FAIL, "interval entirely outside the band (significantly different)"
    return INCONCLUSIVE, f"interval overlaps the band's edge; more {units} needed"


def equivalence_within(
    baseline: Values,
    candidate: Values,
    *,
    rel_tolerance: float,
    confidence: float = 0.90,
) -> EquivalenceDecision:
    """TOST-style equivalence of the ratio of means mean(candidate)/mean(baseline) within a band.

    Band: [1 - rel_tolerance, 1 + rel_tolerance]. With [lo, hi] the `confidence` interval of the
    ratio (0.90 = 1 - 2*alpha for the usual alpha = 0.05 TOST):
      PASS          if lo >= 1 - tol and hi <= 1 + tol   (whole interval inside the band)
      FAIL          if hi < 1 - tol or lo > 1 + tol      (whole interval outside: significantly
                                                          different)
      INCONCLUSIVE  otherwise, or on bad data / fewer than 2 trials per arm.

    Interval: Welch t on the log ratio, delta method:
        se^2 = s_c^2 / (n_c m_c^2) + s_b^2 / (n_b m_b^2),  df by Welch-Satterthwaite,
        [lo, hi] = r * exp(-/+ t_{(1+conf)/2, df} * se).
    Per-trial accept lengths are averages over many cycles (near normal), and a t interval keeps
    nominal coverage at small n where a bootstrap of means is too narrow.

    Exact case: when every arm has zero spread (all values in the baseline are equal and all values
    in the candidate are equal, at least 2 of each) the values are deterministic (greedy decoding),
    so the ratio is exact, not an estimate: PASS if it lies in the band, FAIL otherwise. This is
    exact evidence, not noise, so it does not need an interval.
    """
    tol = _checked_tolerance(rel_tolerance, confidence)
    lower, upper = 1.0 - tol, 1.0 + tol
    b, pb = _clean(baseline, "baseline")
    c, pc = _clean(candidate, "candidate")
    common = RatioCommon(
        confidence=float(confidence),
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        statistic="mean",
        resamples=0,
        seed=None,
    )

    def decision(verdict: Verdict, reason: str, est: RatioEstimate, exact: bool = False):
        return EquivalenceDecision(verdict, reason, tol, lower, upper, exact, est)

    if pb or pc:
        reason = "; ".join(p for p in (pb, pc) if p)
        est = RatioEstimate(None, None, None, method="none", reliable=False, reason=reason, **common)
        return decision(INCONCLUSIVE, f"no usable data: {reason}", est)
    ratio = float(c.mean() / b.mean())
    band = f"band [{lower:.4f}, {upper:.4f}]"
    if b.size < 2 or c.size < 2:
        reason = f"too few trials (baseline {b.size}, candidate {c.size}); need >= 2 per arm"
        est = RatioEstimate(ratio, None, None, method="none", reliable=False, reason=reason, **common)
        return decision(INCONCLUSIVE, f"ratio {ratio:.4f}: {reason}", est)

    if _zero_spread(b) and _zero_spread(c):
        est = RatioEstimate(
            ratio, ratio, ratio, method="exact", reliable=True,
            reason="zero spread in both arms: deterministic values, exact ratio", **common,
        )
        inside = lower * (1 - _EPS) <= ratio <= upper * (1 + _EPS)
        verdict = PASS if inside else FAIL
        where = "inside" if inside else "outside"
        reason = f"exact ratio {ratio:.6f} (deterministic values) is {where} the {band}"
        return decision(verdict, reason, est, True)

    lo, hi, df = _welch_log_ratio_interval(b, c, ratio, confidence)
    est = RatioEstimate(
        ratio, lo, hi, method="welch-t-log", reliable=True,
        reason=f"Welch t on log ratio of means, df={df:.1f}", **common,
    )
    summary = f"ratio {ratio:.4f} [{lo:.4f}, {hi:.4f}] ({confidence:.0%}), {band}"
    verdict, why = _interval_against_band(lo, hi, lower, upper, "trials")
    return decision(verdict, f"{summary}: {why}", est)




def paired_equivalence_within(
    baseline: Values,
    candidate: Values,
    *,
    rel_tolerance: float,
    confidence: float = 0.90,
) -> EquivalenceDecision:
    """TOST equivalence of the geometric-mean ratio of aligned pairs (pair i: the same prompts in
    both arms, e.g. the two blocks of one round) within [1 - tol, 1 + tol].

    d_i = log(candidate_i / baseline_i); t interval on mean(d) with n - 1 df; same verdicts as
    `equivalence_within`. Pairs take the prompts' own variation out: different blocks carry different
    prompts, whose accept lengths differ far more than the arms do. Exact case: every d_i is 0 (greedy
    decoding of the same prompts gave the same acceptance), so the ratio is exactly 1.
    """
    tol = _checked_tolerance(rel_tolerance, confidence)
    lower, upper = 1.0 - tol, 1.0 + tol
    b, pb = _clean(baseline, "baseline")
    c, pc = _clean(candidate, "candidate")
    if not (pb or pc) and b.size != c.size:
        raise ValueError(f"paired values need one baseline and one candidate per pair; got {b.size} and {c.size}")
    common = RatioCommon(confidence=float(confidence), n_baseline=int(b.size), n_candidate=int(c.size),
                  statistic="geometric mean of pair ratios", resamples=0, seed=None)

    def decision(verdict: Verdict, reason: str, est: RatioEstimate, exact: bool = False) -> EquivalenceDecision:
        return EquivalenceDecision(verdict, reason, tol, lower, upper, exact, est)

    if pb or pc:
        reason = "; ".join(p for p in (pb, pc) if p)
        est = RatioEstimate(None, None, None, method="none", reliable=False, reason=reason, **common)
        return decision(INCONCLUSIVE, f"no usable data: {reason}", est)
    d = np.log(c) - np.log(b)
    ratio = float(math.exp(d.mean()))
    band = f"band [{lower:.4f}, {upper:.4f}]"
    if b.size < 2:
        reason = f"{b.size} pair(s); need >= 2"
        est = RatioEstimate(ratio, None, None, method="none", reliable=False, reason=reason, **common)
        return decision(INCONCLUSIVE, f"ratio {ratio:.4f}: {reason}", est)
    if bool(np.all(np.abs(d) <= _EPS)):
        est = RatioEstimate(1.0, 1.0, 1.0, method="exact", reliable=True,
                            reason="identical in every pair: deterministic values, exact ratio", **common)
        return decision(PASS, f"identical in all {b.size} pairs: exact ratio 1 is inside the {band}", est, True)
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    half = float(_st.t.ppf((1 + confidence) / 2, d.size - 1)) * se
    lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
    est = RatioEstimate(ratio, lo, hi, method="paired-t-log", reliable=True,
                        reason=f"paired t on log ratios, {d.size} pairs", **common)
    summary = f"paired over {d.size}: ratio {ratio:.4f} [{lo:.4f}, {hi:.4f}] ({confidence:.0%}), {band}"
    verdict, why = _interval_against_band(lo, hi, lower, upper, "pairs")
    return decision(verdict, f"{summary}: {why}", est)
