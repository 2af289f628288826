"""Paired mode: one baseline and one candidate sample per repetition (interleaved runs)."""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from scipy import stats as _st

from sglang_spec_harness.verdict.stats.base import _NORMAL, GainDecision, RankTest, RatioCommon, RatioEstimate, Values, _check_gain_arguments, _check_unit, _clean, _log_effect
from sglang_spec_harness.vocabulary import INCONCLUSIVE
from sglang_spec_harness.verdict.stats.decision import apply_gain_rule, decision_builder

# --------------------------------------------------------------------------------------------------
# Paired mode (interleaved runs: one baseline and one candidate trial per repetition)

#: Fewest complete (baseline, candidate) repetition pairs for a reliable paired interval and a
#: PASS/FAIL verdict. The exact one-sided Wilcoxon signed-rank test has its smallest p-value at
#: 2^-n (all n log ratios on one side): 1/32 = 0.031 at n = 5, which can never be < alpha/2 = 0.025,
#: and 1/64 = 0.016 at n = 6. Below 6 pairs the rule could never give a verdict, so the interval is
#: not called reliable either.
MIN_PAIRS = 6

# Log ratios closer than this (absolute, on the log scale: a relative difference of 1e-12) count as
# equal: zero differences and ties must not hinge on floating-point rounding of log(c) - log(t*b).
_LOG_TOL = 1e-12


def _clean_pairs(
    baseline: Values, candidate: Values
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Aligned arrays and a data problem (reason) or None; ValueError on mismatched lengths.

    Mismatched lengths are a programmer error, not data: pairing trials by repetition is the
    caller's job, and silently truncating would pair the wrong trials.
    """
    nb = np.asarray(baseline, dtype=object).ravel().size
    nc = np.asarray(candidate, dtype=object).ravel().size
    if nb != nc:
        raise ValueError(
            f"paired values need one baseline and one candidate per repetition; got {nb} and {nc}"
        )
    b, pb = _clean(baseline, "baseline")
    c, pc = _clean(candidate, "candidate")
    problem = "; ".join(p for p in (pb, pc) if p) or None
    return b, c, problem


def paired_ratio_ci(
    baseline: Values,
    candidate: Values,
    *,
    confidence: float = 0.95,
) -> RatioEstimate:
    """Geometric-mean ratio of aligned pairs (pair i = repetition i) with a t interval.

        d_i = log(candidate_i / baseline_i)
        ratio = exp(mean d),  [lo, hi] = exp(mean d -/+ t_{n-1, (1+conf)/2} * sd(d) / sqrt(n))

    Why pairs: the two trials of one interleaved repetition run next to each other, so a slow drift
    of the machine (minutes) is nearly the same in both and cancels in d_i; between-run level
    changes that an unpaired comparison must treat as noise drop out. With ABBA order the small
    remaining drift over one trial alternates sign between repetitions (B C, then C B), so it adds
    to sd(d) (conservative) rather than biasing mean(d) (exactly cancelled for an even n).

    Why a t interval and not a bootstrap: d_i is a difference of logs of per-trial medians, close to
    normal (lognormal per-trial noise gives exactly normal d), and the t interval is exact there at
    any n. A percentile bootstrap of a mean is too narrow at small n (it uses sd*sqrt((n-1)/n) and
    normal quantiles where t_{n-1} ones are needed). Measured while writing this (4000 draws per
    cell, ABBA pairs, per-trial noise cv 5%, true ratio 0.88, nominal 0.95):

        n pairs                        6      7      10     12
        no drift, lognormal   t      0.943  0.953  0.947  0.950
                              boot   0.845  0.880  0.898  0.907
        no drift, t3 noise    t      0.961  0.964  0.961  0.960
                              boot   0.860  0.872  0.896  0.907
        drift 40%, lognormal  t      0.971  0.971  0.966  0.961   (linear drift)
                              boot   0.911  0.915  0.921  0.923
        drift 40%, lognormal  t      0.983  0.982  0.975  0.964   (fast-then-flat drift)

    Under drift the t interval is conservative (the alternating drift step is counted as noise);
    the percentile bootstrap undercovers without drift. Hence the t interval.

    Never raises on data (ValueError only for mismatched lengths, see `_clean_pairs`). `reliable`
    is False with a `reason` for fewer than MIN_PAIRS pairs, zero spread of d (all pairs give the
    same ratio: no noise estimate; the interval is then the point, method "exact"), or invalid
    values (NaN/inf/<= 0: ratio and interval None).
    """
    _check_unit("confidence", confidence)
    b, c, problem = _clean_pairs(baseline, candidate)
    common = RatioCommon(
        confidence=float(confidence),
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        statistic="geometric_mean_paired",
        resamples=0,
        seed=None,
    )
    if problem:
        return RatioEstimate(None, None, None, method="none", reliable=False, reason=problem, **common)
    d = np.log(c) - np.log(b)
    n = d.size
    ratio = float(np.exp(d.mean()))
    problems: list[str] = []
    if n < MIN_PAIRS:
        problems.append(
            f"{n} repetition pair(s); a paired verdict needs >= {MIN_PAIRS} (the exact one-sided "
            f"signed-rank test cannot reach p < 0.025 with fewer)"
        )
    if np.ptp(d) <= _LOG_TOL:
        problems.append(
            "all per-repetition ratios are identical: zero spread, no noise estimate"
        )
        return RatioEstimate(
            ratio, ratio, ratio, method="exact", reliable=False, reason="; ".join(problems), **common
        )
    # n >= 2 here (a single pair has zero spread).
    se = float(d.std(ddof=1)) / math.sqrt(n)
    half = float(_st.t.ppf((1 + confidence) / 2, n - 1)) * se
    lo, hi = float(np.exp(d.mean() - half)), float(np.exp(d.mean() + half))
    reason = "; ".join(problems) if problems else (
        f"paired t on log ratios over {n} repetitions, sd(log ratio)={d.std(ddof=1):.4f}"
    )
    return RatioEstimate(
        ratio, lo, hi, method="paired-t-log", reliable=not problems, reason=reason, **common
    )


def signed_rank(
    baseline: Values,
    candidate: Values,
    alternative: Literal["two-sided", "less", "greater"] = "two-sided",
) -> RankTest:
    """Wilcoxon signed-rank test on the paired log ratios log(candidate_i / baseline_i).

    `alternative` is about the candidate, as in `mann_whitney`: "less" = candidate tends to be
    below baseline (faster). To test against a ratio t, pass `t * baseline` (then the differences
    are d_i - log t). `statistic` is W+, the sum of the (mid-)ranks of |x_i| over positive x_i.

    Zeros (|x_i| <= 1e-12: c_i == t b_i up to rounding) carry no sign and are dropped before
    ranking (Wilcoxon's method, scipy's zero_method="wilcox"); ties among |x_i| get mid-ranks. The
    p-value is the exact conditional null distribution of W+ given those ranks (every sign pattern
    of the non-zero x_i equally likely, 2^m of them; counted here, cached): without ties or zeros it
    equals scipy's method="exact", with them it stays exact where scipy's "exact" does not apply.
    Above 200 non-zero pairs: normal approximation with the exact conditional mean and variance.
    Two-sided p = 2 * min(one-sided), capped at 1. All zeros (no signs): p = 1.
    Raises ValueError for mismatched lengths, non-finite or non-positive values, or a bad
    `alternative` (a low-level test; `paired_tpot_gain_decision` cleans its data first).
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    if b.size != c.size or b.size == 0:
        raise ValueError(f"signed_rank needs aligned non-empty pairs, got {b.size} and {c.size}")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and np.all(b > 0) and np.all(c > 0)):
        raise ValueError("signed_rank needs finite positive values")
    x = np.log(c) - np.log(b)
    x = x[np.abs(x) > _LOG_TOL]
    if x.size == 0:
        return RankTest(0.0, 1.0)
    # Ranks of |x| with ties decided at the tolerance, doubled so mid-ranks are integers.
    mags = np.round(np.abs(x) / _LOG_TOL) if np.max(np.abs(x)) < 1e3 else np.abs(x)
    ranks2 = np.rint(2.0 * _st.rankdata(mags)).astype(np.int64)
    w2 = int(ranks2[x > 0].sum())
    if x.size > _SIGNED_RANK_EXACT_MAX_N:
        mean = ranks2.sum() / 2.0
        sd = math.sqrt(float((ranks2.astype(float) ** 2).sum()) / 4.0)
        p_le = _NORMAL.cdf((w2 - mean) / sd)
        p_ge = 1.0 - _NORMAL.cdf((w2 - mean) / sd)
    else:
        counts = _signed_rank_null(tuple(sorted(int(r) for r in ranks2)))
        total = float(counts.sum())
        p_le = float(counts[: w2 + 1].sum()) / total
        p_ge = float(counts[w2:].sum()) / total
    p = {"less": p_le, "greater": p_ge, "two-sided": 2.0 * min(p_le, p_ge)}[alternative]
    return RankTest(w2 / 2.0, float(min(1.0, p)))


_SIGNED_RANK_EXACT_MAX_N = 200


@functools.lru_cache(maxsize=256)
def _signed_rank_null(ranks2: tuple[int, ...]) -> np.ndarray:
    """counts[s]: number of sign patterns whose positive (doubled mid-)ranks sum to s (of 2^m).

    Subset-sum count; float64 is exact up to 2^53 (m <= 53) and accurate far beyond (m <= 200).
    """
    total = sum(ranks2)
    dp = np.zeros(total + 1)
    dp[0] = 1.0
    for r in ranks2:
        new = dp.copy()
        new[r:] += dp[: total + 1 - r]
        dp = new
    return dp


def paired_minimum_detectable_gain(
    sd_log_ratio: float,
    n_pairs: int,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Smallest true gain the paired interval excludes 1 for, with probability `power`.

        se = sd_log_ratio / sqrt(n);  mde = 1 - exp(-(t_{n-1, 1-alpha/2} + t_{n-1, power}) * se)
    `sd_log_ratio`: sd of the per-repetition log ratios log(c_i / b_i) (for independent per-trial
    noise of relative spread cv, about sqrt(2) * cv). Does not include the signed-rank floor (at
    n = 6 a PASS needs all six pairs below the threshold).
    """
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    if not (sd_log_ratio >= 0 and math.isfinite(sd_log_ratio)):
        raise ValueError(f"sd_log_ratio must be a finite number >= 0, got {sd_log_ratio!r}")
    if not isinstance(n_pairs, (int, np.integer)) or n_pairs < 2:
        raise ValueError(f"n_pairs must be an int >= 2, got {n_pairs!r}")
    df = int(n_pairs) - 1
    k = float(_st.t.ppf(1 - alpha / 2, df) + _st.t.ppf(power, df))
    return 1.0 - math.exp(-k * sd_log_ratio / math.sqrt(n_pairs))


def paired_repetitions_needed(
    sd_log_ratio: float,
    min_gain: float,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    true_gain: float | None = None,
) -> int:
    """Repetition pairs needed to detect `min_gain` (or, with `true_gain`, to PASS with it).

    Smallest n >= MIN_PAIRS with (t_{n-1,1-alpha/2} + t_{n-1,power}) * sd / sqrt(n) <= delta, where
    delta = -log(1 - min_gain), or log((1 - min_gain) / (1 - true_gain)) with `true_gain` (as in
    `repetitions_needed`). Capped at 10,000.
    """
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    delta = _log_effect(min_gain, true_gain)
    if not (sd_log_ratio >= 0 and math.isfinite(sd_log_ratio)):
        raise ValueError(f"sd_log_ratio must be a finite number >= 0, got {sd_log_ratio!r}")
    for n in range(MIN_PAIRS, 10_001):
        k = float(_st.t.ppf(1 - alpha / 2, n - 1) + _st.t.ppf(power, n - 1))
        if k * sd_log_ratio / math.sqrt(n) <= delta * (1 + 1e-12):
            return n
    return 10_000


def _paired_mde_from_interval(est: RatioEstimate, power: float) -> float | None:
    """`paired_minimum_detectable_gain` with the sd recovered from the paired t interval's width."""
    if est.ci_low is None or est.ci_high is None or not est.ci_high > est.ci_low:
        return None
    n = est.n_baseline
    tq = float(_st.t.ppf((1 + est.confidence) / 2, n - 1))
    se = (math.log(est.ci_high) - math.log(est.ci_low)) / (2 * tq)
    k = tq + float(_st.t.ppf(power, n - 1))
    return 1.0 - math.exp(-k * se)


def paired_tpot_gain_decision(
    baseline: Values,
    candidate: Values,
    *,
    min_gain: float,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
) -> GainDecision:
    """The TPOT gain rule on aligned repetition pairs (pair i = baseline and candidate of rep i).

    Same rule and fields as `tpot_gain_decision`, with the paired estimate and test: with
    [lo, hi] the `paired_ratio_ci` interval of the geometric-mean ratio, t = 1 - min_gain, and
    one-sided exact Wilcoxon signed-rank p-values on d_i - log t (`signed_rank`):

      PASS  if hi < t  and  p(candidate < t * baseline) < alpha/2
      FAIL  ("slower")          if lo > 1  and  p(candidate > baseline) < alpha/2
      FAIL  ("below_min_gain")  if lo > t  and  p(candidate > t * baseline) < alpha/2
      INCONCLUSIVE otherwise, or when the estimate is not reliable (fewer than MIN_PAIRS pairs,
            zero spread of the log ratios, NaN/inf/non-positive values), with a reason and the MDE.

    The signed-rank test is exact and distribution-free whenever, under no effect, each pair's
    sign is a fair coin: true when which trial of a pair is "A" was randomised, and conservative
    under ABBA with drift (alternating signs). So a false PASS or false "slower" FAIL has
    probability <= alpha/2 each, whatever the t interval's coverage. Reasons say "paired over N
    repetitions"; `p_value` is the two-sided signed-rank p; `mde` comes from the t interval
    (`paired_minimum_detectable_gain`). ValueError for mismatched lengths (programmer error).
    """
    _check_gain_arguments(min_gain, confidence, alpha, power)
    est = paired_ratio_ci(baseline, candidate, confidence=confidence)
    t = 1.0 - float(min_gain)
    mde = _paired_mde_from_interval(est, power) if est.reliable else None
    needed = None if mde is None else 1.0 - t * (1.0 - mde)
    n = est.n_baseline

    decision = decision_builder(est, min_gain=min_gain, alpha=alpha, power=power, mde=mde, needed=needed)

    if est.ratio is None:
        return decision(INCONCLUSIVE, f"paired over {n} repetitions: no usable data: {est.reason}")
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    ps = (
        signed_rank(b, c, "two-sided").p_value,
        signed_rank(t * b, c, "less").p_value,
        signed_rank(b, c, "greater").p_value,
        signed_rank(t * b, c, "greater").p_value,
    )
    summary = (
        f"paired over {n} repetitions: geometric-mean ratio {est.ratio:.4f} "
        f"[{est.ci_low:.4f}, {est.ci_high:.4f}] ({confidence:.0%}), "
        f"gain {1 - est.ratio:+.2%}, min_gain {min_gain:.2%}"
    )
    return apply_gain_rule(decision, est, ps, summary, t=t, alpha=alpha, power=power, mde=mde,
                            test="signed-rank test")


def _aa_pairs(
    x: np.ndarray, n_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """An A/A split of one variant's trials (in run order) that mimics interleaved repetitions.

    Adjacent trials (0,1), (2,3), ... form the candidate pairs, as the two trials of one real
    repetition run next to each other; `n_pairs` of them are drawn (kept in time order), and within
    each pair a fair coin decides which trial is "baseline". ABBA's alternation is one of these
    2^n assignments; averaging over all of them is the randomisation distribution under which the
    signed-rank test is exact (and matches `trials.order: random`). Pairing trials that were not
    adjacent (a random permutation) would put the drift into every pair, which no real run does.
    """
    starts = np.arange(0, x.size - 1, 2)
    chosen = np.sort(rng.choice(starts, size=n_pairs, replace=False))
    flip = rng.integers(0, 2, size=n_pairs).astype(bool)
    first, second = x[chosen], x[chosen + 1]
    return np.where(flip, second, first), np.where(flip, first, second)


