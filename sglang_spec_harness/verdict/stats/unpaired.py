"""Two independent arms: ratio of medians with a bootstrap interval, the exact Mann-Whitney test,
and the power figures (minimum detectable gain, repetitions needed)."""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from scipy import stats as _st

from sglang_spec_harness.verdict.stats.base import (
    _MEDIAN_VAR_FACTOR,
    MIN_TRIALS,
    RankTest,
    RatioCommon,
    RatioEstimate,
    Values,
    _check_resamples,
    _check_unit,
    _clean,
    _log_effect,
    _z,
    _zero_spread,
)

# --------------------------------------------------------------------------------------------------
# Ratio of medians with a bootstrap interval


def _bootstrap_log_ratio(b: np.ndarray, c: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bootstrap distribution of log(median(c*) / median(b*)), arms resampled independently."""
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    # Chunk rows so memory stays bounded (~2M indices per arm) for long trial lists.
    rows = max(1, 2_000_000 // max(b.size, c.size))
    for start in range(0, resamples, rows):
        k = min(rows, resamples - start)
        ib = rng.integers(0, b.size, size=(k, b.size))
        ic = rng.integers(0, c.size, size=(k, c.size))
        out[start : start + k] = np.log(np.median(c[ic], axis=1)) - np.log(np.median(b[ib], axis=1))
    return out


def ratio_of_medians_ci(
    baseline: Values,
    candidate: Values,
    *,
    confidence: float = 0.95,
    resamples: int = 10000,
    seed: int = 0,
) -> RatioEstimate:
    """Ratio median(candidate) / median(baseline) with a seeded percentile-bootstrap interval.

    Point estimate: r = median(c) / median(b) over per-trial values.
    Interval: resample each arm independently with replacement `resamples` times, compute
    log(median(c*) / median(b*)), and take the (1-confidence)/2 and (1+confidence)/2 quantiles,
    rounded outwards (lower/higher order statistic: conservative on a lumpy distribution).
    Percentile rather than BCa: at n = 5..20 it covers at or slightly above nominal, at n <= 4 no
    bootstrap reaches nominal, and BCa's jackknife is unsound for medians (see module docstring).

    Never raises on data. `reliable` is False (with `reason`) when an arm has fewer than
    `MIN_TRIALS` values, zero spread (all values identical: the interval then only reflects the other
    arm, or is a single point), or invalid values (then ratio and interval are None).
    """
    _check_unit("confidence", confidence)
    _check_resamples(resamples)
    b, pb = _clean(baseline, "baseline")
    c, pc = _clean(candidate, "candidate")
    common = RatioCommon(
        confidence=float(confidence),
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        statistic="median",
        resamples=int(resamples),
        seed=int(seed),
    )
    if pb or pc:
        reason = "; ".join(p for p in (pb, pc) if p)
        return RatioEstimate(None, None, None, method="none", reliable=False, reason=reason, **common)

    ratio = float(np.median(c) / np.median(b))
    zb, zc = _zero_spread(b), _zero_spread(c)
    problems: list[str] = []
    for name, arr in (("baseline", b), ("candidate", c)):
        if arr.size < MIN_TRIALS:
            problems.append(
                f"{name} has {arr.size} trial(s); a bootstrap interval needs >= {MIN_TRIALS} per arm"
            )
    if zb and zc:
        problems.append("all values within each arm are identical: zero spread, no noise estimate")
        return RatioEstimate(
            ratio, ratio, ratio, method="exact", reliable=False, reason="; ".join(problems), **common
        )
    if zb or zc:
        which = "baseline" if zb else "candidate"
        problems.append(f"all {which} values are identical: the interval ignores that arm's noise")

    dist = _bootstrap_log_ratio(b, c, resamples, seed)
    tail = (1.0 - confidence) / 2.0
    lo = float(np.exp(np.quantile(dist, tail, method="lower")))
    hi = float(np.exp(np.quantile(dist, 1.0 - tail, method="higher")))
    reliable = not problems
    reason = "; ".join(problems) if problems else (
        f"percentile bootstrap, {resamples} resamples, n={b.size}/{c.size}"
    )
    return RatioEstimate(
        ratio, lo, hi, method="percentile-bootstrap", reliable=reliable, reason=reason, **common
    )


# --------------------------------------------------------------------------------------------------
# Rank test


def mann_whitney(
    baseline: Values,
    candidate: Values,
    alternative: Literal["two-sided", "less", "greater"] = "two-sided",
) -> RankTest:
    """Mann-Whitney U test of candidate vs baseline; returns (statistic, p_value).

    `alternative` is about the candidate: "less" = candidate tends to be smaller than baseline
    (faster, for TPOT); "greater" = candidate tends to be larger. `statistic` is U of the candidate.

    p-value method (n1 + n2 <= 100): the exact permutation distribution of the candidate's rank
    sum, with mid-ranks for ties (computed here by counting, cached). Without ties this is
    identical to scipy's method='exact'; with ties it is the exact conditional test (scipy's
    'exact' ignores ties, and its permutation method is slow). Two-sided p = 2 * min(one-sided),
    capped at 1. Above 100 values: scipy's tie-corrected normal approximation. All values
    identical: p = 1.0 (no evidence either way), U = n1*n2/2. Emits no warnings.

    Raises ValueError on empty or non-finite input (low-level helper: the decision functions
    validate data first and never raise).
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    if b.size == 0 or c.size == 0:
        raise ValueError("mann_whitney needs at least one value per arm")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError("mann_whitney needs finite values")
    both = np.concatenate([b, c])
    if np.all(both == both[0]):
        return RankTest(float(b.size * c.size) / 2.0, 1.0)
    if both.size > _EXACT_MAX_N:
        res = _st.mannwhitneyu(c, b, alternative=alternative, method="asymptotic")  # tie-corrected
        return RankTest(float(res.statistic), float(min(1.0, res.pvalue)))
    # Exact permutation distribution of the candidate's rank sum (mid-ranks for ties), doubled so
    # that mid-ranks are integers.
    ranks2 = np.rint(2.0 * _st.rankdata(both)).astype(np.int64)
    r_obs = int(ranks2[b.size :].sum())
    counts = _rank_sum_null(c.size, tuple(sorted(int(r) for r in ranks2)))
    total = float(counts.sum())
    p_le = float(counts[: r_obs + 1].sum()) / total
    p_ge = float(counts[r_obs:].sum()) / total
    p = {"less": p_le, "greater": p_ge, "two-sided": 2.0 * min(p_le, p_ge)}[alternative]
    u = r_obs / 2.0 - c.size * (c.size + 1) / 2.0
    return RankTest(float(u), float(min(1.0, p)))


_EXACT_MAX_N = 100


@functools.lru_cache(maxsize=256)
def _rank_sum_null(m: int, ranks2: tuple[int, ...]) -> np.ndarray:
    """counts[s]: number of ways to pick m of the pooled (doubled mid-)ranks with sum s.

    Under H0 every split of the pooled values into arms of sizes m and N - m is equally likely, so
    counts / C(N, m) is the exact null distribution of the doubled rank sum (a 0/1 knapsack count;
    float64 is exact up to 2^53 and accurate far beyond, N <= 100). Cached per tie pattern: without
    ties the key depends only on the sizes.
    """
    total = sum(ranks2)
    dp = np.zeros((m + 1, total + 1))
    dp[0, 0] = 1.0
    for r in ranks2:
        new = dp.copy()
        new[1:, r:] += dp[:-1, : total + 1 - r]
        dp = new
    return dp[m]


# --------------------------------------------------------------------------------------------------
# Power, minimum detectable effect, repetitions


def minimum_detectable_gain(
    cv: float,
    n_baseline: int,
    n_candidate: int | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Smallest true gain detected with probability `power` by a two-sided level-`alpha` test.

    Formula (normal approximation on the log scale, ratio of medians):
        se = sqrt(pi/2) * cv * sqrt(1/n_b + 1/n_c)      # sd of log(median_c / median_b)
        mde = 1 - exp(-(z_{1-alpha/2} + z_{power}) * se)
    `cv` is the relative spread (sd of log values) of per-trial values; pi/2 is the variance
    inflation of a median over a mean for normal data (conservative for very small n).
    """
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    if not (cv >= 0 and math.isfinite(cv)):
        raise ValueError(f"cv must be a finite number >= 0, got {cv!r}")
    n_candidate = n_baseline if n_candidate is None else n_candidate
    if n_baseline < 1 or n_candidate < 1:
        raise ValueError("trial counts must be >= 1")
    se = math.sqrt(_MEDIAN_VAR_FACTOR) * cv * math.sqrt(1.0 / n_baseline + 1.0 / n_candidate)
    return 1.0 - math.exp(-(_z(1 - alpha / 2) + _z(power)) * se)


def repetitions_needed(
    cv: float,
    min_gain: float,
    alpha: float = 0.05,
    power: float = 0.8,
    *,
    true_gain: float | None = None,
) -> int:
    """Trials per arm needed to detect `min_gain` (or, with `true_gain`, to PASS with it).

    Inverts `minimum_detectable_gain` for equal arms:
        n = ceil(2 * (pi/2) * cv^2 * (z_{1-alpha/2} + z_{power})^2 / delta^2)
    with delta = -log(1 - min_gain): power to tell a gain of `min_gain` from no change. With
    `true_gain` (the gain you expect), delta = log((1 - min_gain) / (1 - true_gain)): power to have
    the whole interval clear 1 - min_gain, i.e. to PASS the rule. Never less than `MIN_TRIALS`
    (fewer trials cannot give a verdict).
    """
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    delta = _log_effect(min_gain, true_gain)
    if not (cv >= 0 and math.isfinite(cv)):
        raise ValueError(f"cv must be a finite number >= 0, got {cv!r}")
    zsum = _z(1 - alpha / 2) + _z(power)
    n = 2.0 * _MEDIAN_VAR_FACTOR * cv**2 * zsum**2 / delta**2
    return max(MIN_TRIALS, math.ceil(n - 1e-9))


def _mde_from_interval(est: RatioEstimate, power: float) -> float | None:
    """Smallest gain detectable with probability `power`, from the interval's width.

    se = (log ci_high - log ci_low) / (2 z_{(1+confidence)/2});  mde = 1 - exp(-(z_conf + z_power) se)
    """
    if est.ci_low is None or est.ci_high is None or not est.ci_high > est.ci_low:
        return None
    zc = _z((1 + est.confidence) / 2)
    se = (math.log(est.ci_high) - math.log(est.ci_low)) / (2 * zc)
    return 1.0 - math.exp(-(zc + _z(power)) * se)


