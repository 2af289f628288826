"""Statistics for the checks: TPOT gain, accept-length equivalence, A/A noise floor.

Pure functions on per-trial values (one number per timed trial and arm, e.g. that trial's median
TPOT or mean accept length). No I/O and no knowledge of scenarios or run directories; the checks
module (`harness/checks.py`) turns these results into rules and `results.json` entries.

Conventions
-----------
* Ratios are always candidate / baseline. For TPOT lower is better, so a ratio of 0.90 is a 10% gain
  and `gain = 1 - ratio`.
* Every result is a frozen dataclass with `to_dict()` (plain JSON types; undefined numbers are
  `None`, never NaN).
* Verdicts fail closed: the decision functions never raise on data. Empty arms, NaN/inf, non-positive
  values, too few trials or zero spread give INCONCLUSIVE with a reason. `ValueError` is raised only
  for programmer errors (a parameter outside its range).
* Everything random is seeded (`seed`), so a run directory re-evaluates to the same numbers.

Why these methods (measured by simulation while writing this module, 600 draws per cell, lognormal
and t3 noise, 95% nominal, two arms of n each):

    n per arm               3           4           5 .. 20
    percentile bootstrap    0.90        0.91-0.93   0.95-0.975
    BCa (scipy)             0.90-0.92   0.88-0.90   0.93-0.98

The percentile bootstrap of the ratio of medians is slightly conservative from n = 5 on (the
bootstrap distribution of a small-sample median is lumpy and wide) and cannot reach 95% below that:
with n = 3 the extreme bootstrap ratio is min/max, and two arms of one distribution are fully
separated with probability 2/20 = 10%, so coverage is at most 90% whatever the method. BCa is not
better at small n, its jackknife acceleration is unsound for a non-smooth statistic like the median,
and it produces NaN and warnings on ties. Hence: percentile bootstrap, and an estimate is `reliable`
only with at least `MIN_TRIALS` (5) trials per arm and non-zero spread in both arms.

Paired mode (interleaved runs). When both arms have a trial in the same repetitions (ABBA or
randomised blocks: the two trials of a repetition run back to back), pair them: d_i =
log(c_i / b_i) cancels slow machine drift and between-run level shifts that the unpaired rule must
count as noise. `paired_ratio_ci` (geometric-mean ratio, t interval on d), `signed_rank` (exact
Wilcoxon signed-rank on d), `paired_tpot_gain_decision` (= `tpot_gain_decision(..., paired=True)`,
same rule and fields), and `paired=True` in `noise_floor` / `false_verdict_rate`. A paired verdict
needs `MIN_PAIRS` (6) pairs: the smallest one-sided signed-rank p is 2^-n, first < 0.025 at n = 6.
Coverage and A/A figures are in `paired_ratio_ci` and tests/test_stats.py.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Literal, NamedTuple

import numpy as np
from scipy import stats as _st

__all__ = [
    "PASS",
    "FAIL",
    "INCONCLUSIVE",
    "MIN_TRIALS",
    "MIN_PAIRS",
    "RatioEstimate",
    "RankTest",
    "GainDecision",
    "EquivalenceDecision",
    "NoiseFloor",
    "ratio_of_medians_ci",
    "mann_whitney",
    "tpot_gain_decision",
    "paired_ratio_ci",
    "signed_rank",
    "paired_tpot_gain_decision",
    "paired_minimum_detectable_gain",
    "paired_repetitions_needed",
    "equivalence_within",
    "robust_cv",
    "minimum_detectable_gain",
    "repetitions_needed",
    "noise_floor",
    "false_verdict_rate",
]

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
PASS: Verdict = "PASS"
FAIL: Verdict = "FAIL"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"

#: Fewest trials per arm for a reliable bootstrap interval and for a PASS/FAIL verdict (see the
#: coverage table in the module docstring). Also the floor of `repetitions_needed`.
MIN_TRIALS = 5

# Asymptotic variance of a sample median of normal data is (pi/2) * sigma^2 / n.
_MEDIAN_VAR_FACTOR = math.pi / 2
# Relative tolerance for "exactly on the boundary" comparisons of exact ratios.
_EPS = 1e-12


# --------------------------------------------------------------------------------------------------
# Result types


def _plain(value: Any) -> Any:
    """Convert numpy scalars / nested results into JSON-serialisable Python values."""
    if isinstance(value, _Result):
        return value.to_dict()
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


class _Result:
    """Mixin: `to_dict()` for frozen dataclasses (floats as float, no numpy types, no NaN)."""

    def to_dict(self) -> dict[str, Any]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {f.name: _plain(getattr(self, f.name)) for f in fields}


@dataclass(frozen=True)
class RatioEstimate(_Result):
    """A candidate/baseline ratio with its confidence interval, aware of its own reliability.

    ratio, ci_low, ci_high: None when the data could not give a number (see `reason`).
    statistic: "median" (TPOT) or "mean" (accept length).
    method: how the interval was computed: "percentile-bootstrap", "welch-t-log" (delta method on
        the log ratio of means), "exact" (zero spread in both arms: the interval is the point), or
        "none" (no usable data).
    reliable: False when the interval should not be trusted for a verdict; `reason` says why.
    """

    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    n_baseline: int
    n_candidate: int
    statistic: str
    method: str
    resamples: int
    seed: int | None
    reliable: bool
    reason: str

    @property
    def gain(self) -> float | None:
        """1 - ratio (positive: candidate is faster), or None."""
        return None if self.ratio is None else 1.0 - self.ratio


class RankTest(NamedTuple):
    """Mann-Whitney U result. `statistic` is U of the candidate sample."""

    statistic: float
    p_value: float


@dataclass(frozen=True)
class GainDecision(_Result):
    """Verdict of the TPOT gain rule (see `tpot_gain_decision` for the exact rule).

    gain: 1 - ratio of medians (None without data).
    p_value: two-sided Mann-Whitney p, candidate vs baseline (reported, not used directly).
    p_pass: one-sided p that candidate < (1 - min_gain) * baseline (used for PASS).
    p_slower: one-sided p that candidate > baseline (used for FAIL "slower").
    p_short: one-sided p that candidate > (1 - min_gain) * baseline (used for FAIL "below_min_gain").
    fail_kind: "slower" or "below_min_gain" when verdict is FAIL, else None.
    mde: smallest true gain these data would detect (interval excludes 1) with probability `power`,
        from the interval's width; None when the interval is degenerate or missing.
    gain_needed_to_pass: smallest true gain that would PASS with probability `power` at this spread
        and trial count (about min_gain + mde).
    """

    verdict: Verdict
    reason: str
    min_gain: float
    alpha: float
    power: float
    estimate: RatioEstimate
    gain: float | None
    p_value: float | None
    p_pass: float | None
    p_slower: float | None
    p_short: float | None
    fail_kind: str | None
    mde: float | None
    gain_needed_to_pass: float | None


@dataclass(frozen=True)
class EquivalenceDecision(_Result):
    """Verdict of an equivalence test (TOST on a ratio); see `equivalence_within`.

    lower, upper: the equivalence band [1 - rel_tolerance, 1 + rel_tolerance] for the ratio.
    exact: True when both arms had zero spread, so the ratio is exact and no interval was needed.
    """

    verdict: Verdict
    reason: str
    rel_tolerance: float
    lower: float
    upper: float
    exact: bool
    estimate: RatioEstimate


@dataclass(frozen=True)
class NoiseFloor(_Result):
    """A/A noise floor of per-trial values (both arms the same variant).

    cv: pooled robust relative spread of per-trial values (MAD of log values, see `robust_cv`).
    estimate: the A/A ratio of medians with its bootstrap interval (should contain 1).
    mde: minimum detectable gain for (n_a, n_b) trials at `alpha` and `power`, from `cv`.
    mde_interval: the same quantity from the width of the A/A bootstrap interval.
    repetitions_needed: trials per arm to detect `min_gain` (None when min_gain is not given).
    split: "given" (two arms passed) or "interleaved" (one list split into even/odd positions);
        paired: "given_pairs" (two aligned arms) or "adjacent_pairs" (one list in run order, trials
        2i and 2i+1 form pair i).

    Paired mode (`paired=True`; the fields below are None / False otherwise): `estimate` is the
    paired geometric-mean ratio (`paired_ratio_ci`); `sd_log_ratio` the sd of the per-pair log
    ratios; `cv_within_pair` = sd_log_ratio / sqrt(2), the per-trial noise left once the drift
    common to a pair cancels (compare with `cv`, which includes the drift); and `mde`,
    `mde_interval`, `repetitions_needed` are the paired ones (`paired_minimum_detectable_gain`,
    `paired_repetitions_needed`, in repetition pairs), i.e. what the paired rule can resolve.
    """

    reliable: bool
    reason: str
    split: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    cv: float | None
    cv_a: float | None
    cv_b: float | None
    estimate: RatioEstimate
    alpha: float
    power: float
    mde: float | None
    mde_interval: float | None
    min_gain: float | None
    repetitions_needed: int | None
    paired: bool = False
    n_pairs: int | None = None
    sd_log_ratio: float | None = None
    cv_within_pair: float | None = None


# --------------------------------------------------------------------------------------------------
# Validation helpers


def _check_unit(name: str, value: float, *, lo_open: float = 0.0, hi_open: float = 1.0) -> None:
    if not isinstance(value, numbers.Real) or not (lo_open < float(value) < hi_open):
        raise ValueError(f"{name} must be in ({lo_open}, {hi_open}), got {value!r}")


def _check_resamples(resamples: int) -> None:
    if not isinstance(resamples, (int, np.integer)) or resamples < 100:
        raise ValueError(f"resamples must be an int >= 100, got {resamples!r}")


def _clean(values: Sequence[float] | np.ndarray, name: str) -> tuple[np.ndarray, str | None]:
    """Return (array, problem). The problem is a reason string for bad *data* (never raises)."""
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        return np.empty(0), f"{name}: values are not numbers"
    if arr.size == 0:
        return arr, f"{name}: no values"
    bad = int(np.count_nonzero(~np.isfinite(arr)))
    if bad:
        return arr, f"{name}: {bad} of {arr.size} values are NaN or infinite"
    nonpos = int(np.count_nonzero(arr <= 0))
    if nonpos:
        return arr, f"{name}: {nonpos} of {arr.size} values are <= 0 (expected positive values)"
    return arr, None


def _zero_spread(arr: np.ndarray) -> bool:
    return arr.size > 0 and bool(np.all(arr == arr[0]))


_NORMAL = NormalDist()


def _z(p: float) -> float:
    """Standard normal quantile."""
    return _NORMAL.inv_cdf(p)


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
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    common = dict(
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
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    if not (0.0 < min_gain < 1.0):
        raise ValueError(f"min_gain must be in (0, 1), got {min_gain!r}")
    if not (cv >= 0 and math.isfinite(cv)):
        raise ValueError(f"cv must be a finite number >= 0, got {cv!r}")
    if true_gain is None:
        delta = -math.log1p(-min_gain)
    else:
        if not (min_gain < true_gain < 1.0):
            raise ValueError(f"true_gain must be in (min_gain, 1), got {true_gain!r}")
        delta = math.log((1.0 - min_gain) / (1.0 - true_gain))
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


# --------------------------------------------------------------------------------------------------
# TPOT gain rule


def _decision_builder(
    est: RatioEstimate, *, min_gain: float, alpha: float, power: float, mde: float | None, needed: float | None
) -> Callable[..., GainDecision]:
    """`decision(verdict, reason, ps=(p_value, p_pass, p_slower, p_short), kind=fail_kind)` for one
    estimate: the paired and unpaired rules report in the same shape."""

    def decision(
        verdict: Verdict, reason: str, *, ps: tuple = (None,) * 4, kind: str | None = None
    ) -> GainDecision:
        return GainDecision(
            verdict=verdict,
            reason=reason,
            min_gain=float(min_gain),
            alpha=float(alpha),
            power=float(power),
            estimate=est,
            gain=est.gain,
            p_value=ps[0],
            p_pass=ps[1],
            p_slower=ps[2],
            p_short=ps[3],
            fail_kind=kind,
            mde=mde,
            gain_needed_to_pass=needed,
        )

    return decision


def tpot_gain_decision(
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    if not isinstance(min_gain, numbers.Real) or not (0.0 <= float(min_gain) < 1.0):
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    _check_unit("confidence", confidence)
    _check_unit("alpha", alpha)
    _check_unit("power", power)
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

    decision = _decision_builder(est, min_gain=min_gain, alpha=alpha, power=power, mde=mde, needed=needed)

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
    return _apply_gain_rule(decision, est, ps, summary, t=t, alpha=alpha, power=power, mde=mde,
                            test="rank test")


def _apply_gain_rule(
    decision: Any,
    est: RatioEstimate,
    ps: tuple,
    summary: str,
    *,
    t: float,
    alpha: float,
    power: float,
    mde: float | None,
    test: str,
) -> GainDecision:
    """The verdict rule shared by the unpaired and the paired TPOT decision (see their docstrings).

    `ps` = (two-sided p, p_pass, p_slower, p_short) of the mode's one-sided rank test.
    """
    _, p_pass, p_slower, p_short = ps
    if not est.reliable:
        return decision(INCONCLUSIVE, f"{summary}; estimate not reliable: {est.reason}", ps=ps)
    lo, hi = est.ci_low, est.ci_high
    assert lo is not None and hi is not None
    a2 = alpha / 2
    if hi < t and p_pass < a2:
        return decision(PASS, f"{summary}: the whole interval is below {t:.4f}", ps=ps)
    if lo > 1.0 and p_slower < a2:
        return decision(
            FAIL,
            f"{summary}: candidate is significantly slower (interval above 1)",
            ps=ps,
            kind="slower",
        )
    if lo > t and p_short < a2:
        return decision(
            FAIL,
            f"{summary}: gain is significantly below min_gain (interval above {t:.4f})",
            ps=ps,
            kind="below_min_gain",
        )
    # Inconclusive: say why.
    if hi < t:
        why = f"interval clears {t:.4f} but the {test} does not (p={p_pass:.3g} >= {a2:g})"
    elif lo > t:
        why = (
            f"interval is above {t:.4f} but the {test} does not confirm "
            f"(p={p_short:.3g} >= {a2:g})"
        )
    else:
        why = f"interval contains the required ratio {t:.4f}"
    if mde is not None:
        why += (
            f"; these data detect gains >= {mde:.2%} with {power:.0%} power, "
            f"a PASS needs a true gain of about {1 - t * (1 - mde):.2%}"
        )
    return decision(INCONCLUSIVE, f"{summary}: {why}", ps=ps)


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
    baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray
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
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    common = dict(
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
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    if not (0.0 < min_gain < 1.0):
        raise ValueError(f"min_gain must be in (0, 1), got {min_gain!r}")
    if not (sd_log_ratio >= 0 and math.isfinite(sd_log_ratio)):
        raise ValueError(f"sd_log_ratio must be a finite number >= 0, got {sd_log_ratio!r}")
    if true_gain is None:
        delta = -math.log1p(-min_gain)
    else:
        if not (min_gain < true_gain < 1.0):
            raise ValueError(f"true_gain must be in (min_gain, 1), got {true_gain!r}")
        delta = math.log((1.0 - min_gain) / (1.0 - true_gain))
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
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    if not isinstance(min_gain, numbers.Real) or not (0.0 <= float(min_gain) < 1.0):
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    _check_unit("confidence", confidence)
    _check_unit("alpha", alpha)
    _check_unit("power", power)
    est = paired_ratio_ci(baseline, candidate, confidence=confidence)
    t = 1.0 - float(min_gain)
    mde = _paired_mde_from_interval(est, power) if est.reliable else None
    needed = None if mde is None else 1.0 - t * (1.0 - mde)
    n = est.n_baseline

    decision = _decision_builder(est, min_gain=min_gain, alpha=alpha, power=power, mde=mde, needed=needed)

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
    return _apply_gain_rule(decision, est, ps, summary, t=t, alpha=alpha, power=power, mde=mde,
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


# --------------------------------------------------------------------------------------------------
# Equivalence (accept length)


def equivalence_within(
    baseline: Sequence[float],
    candidate: Sequence[float],
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
    if not isinstance(rel_tolerance, numbers.Real) or not (0.0 < float(rel_tolerance) < 1.0):
        raise ValueError(f"rel_tolerance must be in (0, 1), got {rel_tolerance!r}")
    _check_unit("confidence", confidence)
    tol = float(rel_tolerance)
    lower, upper = 1.0 - tol, 1.0 + tol
    b, pb = _clean(baseline, "baseline")
    c, pc = _clean(candidate, "candidate")
    common = dict(
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

    mb, mc = float(b.mean()), float(c.mean())
    vb = float(b.var(ddof=1)) / (b.size * mb**2)
    vc = float(c.var(ddof=1)) / (c.size * mc**2)
    se = math.sqrt(vb + vc)
    denom = (vb**2 / (b.size - 1) if vb > 0 else 0.0) + (vc**2 / (c.size - 1) if vc > 0 else 0.0)
    df = (vb + vc) ** 2 / denom if denom > 0 else 1e9  # (underflow guard: never raise on data)
    half = float(_st.t.ppf((1 + confidence) / 2, df)) * se
    lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
    est = RatioEstimate(
        ratio, lo, hi, method="welch-t-log", reliable=True,
        reason=f"Welch t on log ratio of means, df={df:.1f}", **common,
    )
    summary = f"ratio {ratio:.4f} [{lo:.4f}, {hi:.4f}] ({confidence:.0%}), {band}"
    if lo >= lower and hi <= upper:
        return decision(PASS, f"{summary}: interval inside the band", est)
    if hi < lower or lo > upper:
        why = "interval entirely outside the band (significantly different)"
        return decision(FAIL, f"{summary}: {why}", est)
    why = "interval overlaps the band's edge; more trials needed"
    return decision(INCONCLUSIVE, f"{summary}: {why}", est)


# --------------------------------------------------------------------------------------------------
# A/A noise floor

# Finite-sample consistency factors for the normalised MAD (1.4826 * MAD) of normal data, n = 2..9
# (Monte Carlo, 400,000 draws each, while writing this module; cf. Croux & Rousseeuw 1992). For
# n >= 10, n / (n - 0.8) is within 0.5%.
_MAD_FACTORS = {2: 1.193, 3: 1.488, 4: 1.362, 5: 1.217, 6: 1.192, 7: 1.139, 8: 1.129, 9: 1.101}


def robust_cv(values: Sequence[float]) -> float | None:
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


def noise_floor(
    values_a: Sequence[float],
    values_b: Sequence[float] | None = None,
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
        mde=mde,
        mde_interval=_mde_from_interval(est, power),
        min_gain=None if min_gain is None else float(min_gain),
        repetitions_needed=reps,
    )


def _paired_noise_floor(
    a: Any,
    b: Any,
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
        mde=mde,
        mde_interval=_paired_mde_from_interval(est, power),
        min_gain=None if min_gain is None else float(min_gain),
        repetitions_needed=reps,
        paired=True,
        n_pairs=int(est.n_baseline),
        sd_log_ratio=sd,
        cv_within_pair=within,
    )


def false_verdict_rate(
    values: Sequence[float],
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

    Raises ValueError (a tool, not a check) when there are fewer than 2 * per_arm valid values.
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
        if paired:
            pa, pb = _aa_pairs(x, per_arm, rng)
            d = paired_tpot_gain_decision(
                pa, pb, min_gain=min_gain, confidence=confidence, alpha=alpha
            )
            key = d.verdict if d.verdict != FAIL else f"FAIL_{d.fail_kind}"
            counts[key] += 1
            continue
        idx = rng.permutation(x.size)[: 2 * per_arm]
        d = tpot_gain_decision(
            x[idx[:per_arm]],
            x[idx[per_arm:]],
            min_gain=min_gain,
            confidence=confidence,
            alpha=alpha,
            resamples=resamples,
            seed=int(rng.integers(2**31)),
        )
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
