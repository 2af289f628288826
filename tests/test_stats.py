"""Tests for sglang_spec_harness.verdict.stats: known distributions, seeded; every test runs with warnings as errors."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats as st

from sglang_spec_harness.verdict import stats as S

B = 2000  # bootstrap resamples in tests: plenty for the checks below, and fast


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def lognormal(rng: np.random.Generator, scale: float, cv: float, n: int) -> np.ndarray:
    """n values with median `scale` and relative spread `cv` (sd of the logs)."""
    return scale * np.exp(rng.normal(0.0, cv, n))


def assert_plain_json(obj) -> None:
    """to_dict() output: only JSON types (no numpy scalars), no NaN/inf."""
    json.dumps(obj, allow_nan=False)

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                assert isinstance(k, str)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        else:
            assert x is None or type(x) in (str, int, float, bool), (type(x), x)

    walk(obj)


def verdicts(decisions) -> dict[str, float]:
    keys = [d.verdict + (f"_{d.fail_kind}" if d.fail_kind else "") for d in decisions]
    return {k: keys.count(k) / len(keys) for k in set(keys)}


# --- (a) a clear gain -------------------------------------------------------------------------------


def test_clear_gain_passes_with_interval_covering_truth():
    rng = np.random.default_rng(1)
    base = lognormal(rng, 10.0, 0.01, 8)
    cand = lognormal(rng, 9.0, 0.01, 8)
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, resamples=B, seed=0)
    assert d.verdict == S.PASS, d.reason
    est = d.estimate
    assert est.reliable and est.method == "percentile-bootstrap"
    assert est.ratio == pytest.approx(0.90, abs=0.01)
    assert est.ci_low <= 0.90 <= est.ci_high
    assert est.ci_high < 0.98
    assert d.gain == pytest.approx(1 - est.ratio)
    assert d.p_pass < 0.025 and d.p_value < 0.05
    assert d.fail_kind is None
    assert (est.n_baseline, est.n_candidate, est.confidence) == (8, 8, 0.95)
    assert_plain_json(d.to_dict())
    assert d.to_dict()["estimate"]["ratio"] == est.ratio


def test_seeded_and_deterministic():
    rng = np.random.default_rng(2)
    base, cand = lognormal(rng, 10, 0.02, 7), lognormal(rng, 9.5, 0.02, 7)
    a = S.ratio_of_medians_ci(base, cand, resamples=B, seed=5)
    b = S.ratio_of_medians_ci(list(base), list(cand), resamples=B, seed=5)
    assert a == b
    c = S.ratio_of_medians_ci(base, cand, resamples=B, seed=6)
    assert c.ratio == a.ratio  # the point estimate does not depend on the seed


# --- (b) identical timings are not evidence ---------------------------------------------------------


@pytest.mark.parametrize(
    "base, cand",
    [
        ([10.0] * 8, [10.0] * 8),
        ([10.0] * 8, [8.0] * 8),  # a "20% gain" with zero noise is still not a measurement
        ([10.0] * 8, [8.0, 8.1, 7.9, 8.05, 7.95, 8.02, 7.98, 8.01]),  # zero spread in one arm
    ],
)
def test_identical_values_are_inconclusive_never_pass(base, cand):
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, resamples=B)
    assert d.verdict == S.INCONCLUSIVE
    assert "identical" in d.reason
    assert not d.estimate.reliable
    assert_plain_json(d.to_dict())


def test_identical_values_estimate_is_exact_point():
    est = S.ratio_of_medians_ci([10.0] * 5, [9.0] * 5, resamples=B)
    assert (est.ratio, est.ci_low, est.ci_high) == (0.9, 0.9, 0.9)
    assert est.method == "exact" and not est.reliable


# --- (c), (d) failures ------------------------------------------------------------------------------


def test_ten_percent_slower_fails():
    rng = np.random.default_rng(3)
    base, cand = lognormal(rng, 10, 0.02, 8), lognormal(rng, 11, 0.02, 8)
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, resamples=B)
    assert d.verdict == S.FAIL and d.fail_kind == "slower", d.reason
    assert d.estimate.ci_low > 1.0 and d.p_slower < 0.025
    assert "slower" in d.reason


def test_gain_significantly_below_min_gain_fails():
    rng = np.random.default_rng(4)
    base, cand = lognormal(rng, 10, 0.002, 8), lognormal(rng, 9.9, 0.002, 8)
    d = S.tpot_gain_decision(base, cand, min_gain=0.05, resamples=B)
    assert d.verdict == S.FAIL and d.fail_kind == "below_min_gain", d.reason
    assert 0.95 < d.estimate.ci_low and d.estimate.ci_high < 1.0
    assert d.gain == pytest.approx(0.01, abs=0.003)


def test_noisy_small_gain_is_inconclusive_with_mde():
    rng = np.random.default_rng(5)
    base, cand = lognormal(rng, 10, 0.03, 6), lognormal(rng, 9.8, 0.03, 6)
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, resamples=B)
    assert d.verdict == S.INCONCLUSIVE, d.reason
    assert d.mde is not None and 0.01 < d.mde < 0.2
    assert d.gain_needed_to_pass == pytest.approx(1 - 0.98 * (1 - d.mde))
    assert "detect gains" in d.reason


def test_min_gain_zero_is_a_plain_two_sided_test():
    rng = np.random.default_rng(6)
    base, cand = lognormal(rng, 10, 0.01, 8), lognormal(rng, 9.8, 0.01, 8)
    assert S.tpot_gain_decision(base, cand, min_gain=0.0, resamples=B).verdict == S.PASS
    assert S.tpot_gain_decision(cand, base, min_gain=0.0, resamples=B).fail_kind == "slower"


# --- (e) A/A false verdicts and power ---------------------------------------------------------------


def _draws(n_draws: int, n: int, cv: float, true_ratio: float, min_gain: float, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_draws):
        base, cand = lognormal(rng, 10, cv, n), lognormal(rng, 10 * true_ratio, cv, n)
        out.append(S.tpot_gain_decision(base, cand, min_gain=min_gain, resamples=B, seed=i))
    return verdicts(out)


def test_aa_false_verdict_rate_at_most_5_percent():
    # min_gain = 0: every PASS or FAIL on A/A data is false.
    rates = _draws(300, 6, 0.02, 1.0, 0.0, seed=10)
    assert rates.get("PASS", 0) + rates.get("FAIL_slower", 0) <= 0.05, rates
    # min_gain = 2% at cv 2%: PASS and FAIL "slower" are false; FAIL "below_min_gain" is correct.
    rates = _draws(300, 6, 0.02, 1.0, 0.02, seed=11)
    assert rates.get("PASS", 0) == 0.0, rates
    assert rates.get("PASS", 0) + rates.get("FAIL_slower", 0) <= 0.05, rates


def test_power_true_ten_percent_gain():
    rates = _draws(300, 6, 0.02, 0.90, 0.02, seed=12)
    assert rates.get("PASS", 0) >= 0.80, rates


def test_false_verdict_rate_on_aa_splits():
    rng = np.random.default_rng(13)
    values = lognormal(rng, 10, 0.02, 24)
    r = S.false_verdict_rate(values, min_gain=0.0, n_splits=200, seed=1, resamples=B)
    assert r["n_values"] == 24 and r["per_arm"] == 12 and r["meets_minimum"]
    assert r["pass"] + r["fail"] + r["inconclusive"] == pytest.approx(1.0)
    assert r["pass_or_fail"] == r["false_verdict_rate"]  # min_gain = 0
    assert r["pass_or_fail"] <= 0.05, r
    assert_plain_json(r)
    small = dict(min_gain=0.02, n_splits=20, per_arm=6, seed=2, resamples=B)
    assert S.false_verdict_rate(values, **small) == S.false_verdict_rate(values, **small)
    with pytest.raises(ValueError):
        S.false_verdict_rate(values[:3], min_gain=0.02)


# --- (f) coverage -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [6, 12])
def test_bootstrap_interval_coverage(n):
    rng = np.random.default_rng(20 + n)
    hits = 0
    draws = 200
    for i in range(draws):
        base, cand = lognormal(rng, 10, 0.03, n), lognormal(rng, 9, 0.03, n)
        est = S.ratio_of_medians_ci(base, cand, resamples=B, seed=i)
        hits += est.ci_low <= 0.9 <= est.ci_high
    assert 0.88 <= hits / draws <= 0.99, hits / draws


# --- (g) equivalence (accept length) ----------------------------------------------------------------


def test_equivalence_identical_deterministic_values_pass():
    d = S.equivalence_within([3.2] * 5, [3.2] * 5, rel_tolerance=0.01)
    assert d.verdict == S.PASS and d.exact
    assert d.estimate.ratio == 1.0 and d.estimate.method == "exact"
    assert_plain_json(d.to_dict())


def test_equivalence_exactly_five_percent_apart_fails():
    d = S.equivalence_within([3.0] * 4, [3.15] * 4, rel_tolerance=0.01)
    assert d.verdict == S.FAIL and d.exact
    assert "outside" in d.reason


def test_equivalence_exact_on_the_boundary_passes():
    assert S.equivalence_within([3.0] * 3, [3.03] * 3, rel_tolerance=0.01).verdict == S.PASS


def test_equivalence_noisy_overlapping_is_inconclusive():
    rng = np.random.default_rng(30)
    base, cand = rng.normal(3.0, 0.05, 5), rng.normal(3.03, 0.05, 5)
    d = S.equivalence_within(base, cand, rel_tolerance=0.01)
    assert d.verdict == S.INCONCLUSIVE, d.reason
    assert d.estimate.ci_low < 1.01 < d.estimate.ci_high or d.estimate.ci_low < 0.99 < d.estimate.ci_high


def test_equivalence_noisy_tight_pass_and_clear_difference_fail():
    rng = np.random.default_rng(31)
    base, cand = rng.normal(3.0, 0.005, 8), rng.normal(3.0, 0.005, 8)
    assert S.equivalence_within(base, cand, rel_tolerance=0.01).verdict == S.PASS
    cand2 = rng.normal(3.3, 0.01, 8)
    d = S.equivalence_within(base, cand2, rel_tolerance=0.01)
    assert d.verdict == S.FAIL and not d.exact and d.estimate.method == "welch-t-log"


def test_equivalence_interval_coverage():
    rng = np.random.default_rng(32)
    hits = 0
    for _ in range(400):
        est = S.equivalence_within(rng.normal(3, 0.1, 5), rng.normal(3, 0.1, 4), rel_tolerance=0.01).estimate
        hits += est.ci_low <= 1.0 <= est.ci_high
    assert 0.85 <= hits / 400 <= 0.95  # nominal 0.90


# --- (h) degenerate inputs: fail closed, no exceptions, no warnings ---------------------------------

GOOD = [10.0, 10.2, 9.9, 10.1, 10.05, 9.95]
BAD_INPUTS = [
    ([10.0], [9.0]),
    ([10.0], GOOD),
    ([], GOOD),
    (GOOD, []),
    ([10.0, math.nan, 10.1, 9.9, 10.0], GOOD),
    (GOOD, [9.0, math.inf, 9.1, 9.0, 9.2]),
    (GOOD, [0.0, 0.0, 0.0, 0.0, 0.0]),
    ([0.0] * 6, [0.0] * 6),
    (GOOD, [-1.0, 9.0, 9.1, 9.2, 9.0]),
    (GOOD, ["a", "b"]),
    (GOOD, [1.0, None, 2.0]),
]


@pytest.mark.parametrize("base, cand", BAD_INPUTS)
def test_degenerate_inputs_are_inconclusive(base, cand):
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, resamples=B)
    assert d.verdict == S.INCONCLUSIVE
    assert d.reason
    assert_plain_json(d.to_dict())
    e = S.equivalence_within(base, cand, rel_tolerance=0.01)
    assert e.verdict == S.INCONCLUSIVE and e.reason
    assert_plain_json(e.to_dict())
    nf = S.noise_floor(base, cand, min_gain=0.02, resamples=B)
    assert not nf.reliable and nf.reason
    assert_plain_json(nf.to_dict())


def test_two_trials_per_arm():
    # Too few for a TPOT verdict (the interval is unreliable below MIN_TRIALS) ...
    d = S.tpot_gain_decision([10.0, 10.1], [9.0, 9.1], min_gain=0.02, resamples=B)
    assert d.verdict == S.INCONCLUSIVE and "trial" in d.reason
    # ... but a t interval is valid at n = 2: a 10% lower accept length is a clear FAIL.
    e = S.equivalence_within([10.0, 10.1], [9.0, 9.1], rel_tolerance=0.01)
    assert e.verdict == S.FAIL and e.estimate.ci_high < 0.99


@pytest.mark.parametrize("base, cand", [([10.0], [9.0]), ([10.0, 10.0], [9.0, 9.5]), ([5.0], [5.0])])
def test_small_n_estimates_have_no_nan(base, cand):
    est = S.ratio_of_medians_ci(base, cand, resamples=B)
    assert not est.reliable and "trial" in est.reason
    for v in (est.ratio, est.ci_low, est.ci_high):
        assert v is not None and math.isfinite(v)


def test_nan_reason_is_specific():
    d = S.tpot_gain_decision([10.0, math.nan] * 3, GOOD, min_gain=0.02)
    assert "NaN" in d.reason and d.estimate.ratio is None


def test_programmer_errors_raise():
    for bad in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            S.tpot_gain_decision(GOOD, GOOD, min_gain=bad)
    with pytest.raises(ValueError):
        S.tpot_gain_decision(GOOD, GOOD, min_gain=0.02, confidence=1.0)
    with pytest.raises(ValueError):
        S.equivalence_within(GOOD, GOOD, rel_tolerance=0.0)
    with pytest.raises(ValueError):
        S.ratio_of_medians_ci(GOOD, GOOD, resamples=10)
    with pytest.raises(ValueError):
        S.mann_whitney(GOOD, GOOD, alternative="bigger")


# --- rank test --------------------------------------------------------------------------------------


def test_mann_whitney_matches_scipy_exact_without_ties():
    rng = np.random.default_rng(40)
    for _ in range(50):
        m, n = rng.integers(2, 15, 2)
        b, c = rng.normal(size=m), rng.normal(0.5, 1, size=n)
        for alt in ("two-sided", "less", "greater"):
            ref = st.mannwhitneyu(c, b, alternative=alt, method="exact")
            got = S.mann_whitney(b, c, alt)
            assert got.statistic == ref.statistic
            assert got.p_value == pytest.approx(min(1.0, ref.pvalue), rel=1e-12, abs=1e-15)


def test_mann_whitney_ties_match_scipy_permutation():
    rng = np.random.default_rng(41)
    for _ in range(10):
        m, n = rng.integers(2, 7, 2)
        b, c = rng.integers(0, 4, m).astype(float), rng.integers(1, 5, n).astype(float)
        if np.all(np.concatenate([b, c]) == b[0]):
            continue
        for alt in ("two-sided", "less", "greater"):
            ref = st.mannwhitneyu(c, b, alternative=alt, method=st.PermutationMethod(n_resamples=10**5))
            got = S.mann_whitney(b, c, alt)
            assert got.statistic == ref.statistic
            assert got.p_value == pytest.approx(min(1.0, ref.pvalue), rel=1e-9)


def test_mann_whitney_large_samples_use_normal_approximation():
    rng = np.random.default_rng(42)
    b, c = rng.normal(size=60), rng.normal(0.3, 1, size=60)
    ref = st.mannwhitneyu(c, b, method="asymptotic")
    assert S.mann_whitney(b, c).p_value == pytest.approx(ref.pvalue)


def test_mann_whitney_direction_identical_and_ties():
    b, c = [10.0, 10.1, 10.2, 10.3], [9.0, 9.1, 9.2, 9.3]
    stat, p = S.mann_whitney(b, c, "less")  # unpacks as a tuple
    assert stat == 0.0 and p == pytest.approx(1 / 70)
    assert S.mann_whitney(b, c, "greater").p_value == 1.0
    assert S.mann_whitney([5.0] * 4, [5.0] * 6) == (12.0, 1.0)
    tied = S.mann_whitney([1.0, 1.0, 2.0, 3.0, 3.0], [1.0, 2.0, 2.0, 4.0, 5.0], "greater")
    assert 0.0 < tied.p_value <= 1.0
    with pytest.raises(ValueError):
        S.mann_whitney([], [1.0])


# --- (i) A/A mode: noise floor, MDE, repetitions ----------------------------------------------------


def test_repetitions_needed_monotone_and_sane():
    n = S.repetitions_needed(0.02, 0.02)
    assert S.MIN_TRIALS <= n <= 50, n
    cvs = [0.0, 0.005, 0.01, 0.02, 0.04, 0.08]
    by_cv = [S.repetitions_needed(cv, 0.02) for cv in cvs]
    assert by_cv == sorted(by_cv) and by_cv[-1] > by_cv[0]
    gains = [0.005, 0.01, 0.02, 0.05, 0.1]
    by_gain = [S.repetitions_needed(0.02, g) for g in gains]
    assert by_gain == sorted(by_gain, reverse=True) and by_gain[0] > by_gain[-1]
    assert S.repetitions_needed(0.0, 0.02) == S.MIN_TRIALS
    # Planning for a PASS with an expected 10% gain and min_gain 2% needs few trials.
    assert S.repetitions_needed(0.02, 0.02, true_gain=0.10) == S.MIN_TRIALS
    assert S.repetitions_needed(0.02, 0.02, true_gain=0.03) > n
    # Consistency: with that many trials, the MDE is at most min_gain.
    assert S.minimum_detectable_gain(0.02, n, n) <= 0.02 < S.minimum_detectable_gain(0.02, n - 1, n - 1)
    with pytest.raises(ValueError):
        S.repetitions_needed(0.02, 0.0)


def test_robust_cv_is_consistent_for_small_n():
    rng = np.random.default_rng(50)
    for n in (3, 4, 6, 12):
        est = [S.robust_cv(lognormal(rng, 10, 0.02, n)) for _ in range(2000)]
        assert np.mean(est) == pytest.approx(0.02, rel=0.06), n
    assert S.robust_cv([5.0, 5.0, 5.0, 6.0, 5.0]) > 0  # majority tie: falls back to the sd
    assert S.robust_cv([5.0]) is None


def test_noise_floor_single_list_interleaved():
    rng = np.random.default_rng(51)
    values = lognormal(rng, 10, 0.02, 24)
    nf = S.noise_floor(values, min_gain=0.02, resamples=B)
    assert nf.reliable, nf.reason
    assert (nf.split, nf.n_a, nf.n_b) == ("interleaved", 12, 12)
    assert 0.01 < nf.cv < 0.035
    assert nf.estimate.ci_low <= 1.0 <= nf.estimate.ci_high
    assert nf.mde == pytest.approx(S.minimum_detectable_gain(nf.cv, 12, 12))
    assert 0.005 < nf.mde_interval < 0.1
    assert nf.repetitions_needed == S.repetitions_needed(nf.cv, 0.02)
    assert_plain_json(nf.to_dict())


def test_noise_floor_two_arms_and_identical_values():
    rng = np.random.default_rng(52)
    nf = S.noise_floor(lognormal(rng, 10, 0.01, 8), lognormal(rng, 10, 0.01, 8), resamples=B)
    assert nf.split == "given" and nf.repetitions_needed is None and nf.reliable
    flat = S.noise_floor([10.0] * 10, resamples=B)
    assert (not flat.reliable and "identical" in flat.reason) or "zero spread" in flat.reason


# --- (j) paired mode (interleaved repetitions) ------------------------------------------------------

EXAMPLE_BASE = [11.51, 11.54, 8.63, 7.37, 8.83]  # real run: per-repetition median TPOT, ms
EXAMPLE_CAND = [9.38, 9.80, 7.52, 7.41, 7.03]


def abba_run(rng, n: int, ratio: float, *, drift: float = 0.4, cv: float = 0.05, level: float = 11.5):
    """One interleaved run of n repetitions (B C, C B, ...): per-trial values with a linear drift of
    `drift` over the run (e.g. 11.5 ms -> 6.9 ms), lognormal per-trial noise `cv`, and the candidate
    `ratio` times the baseline. Returns (baseline, candidate), aligned by repetition."""
    pos = np.arange(2 * n)
    x = level * (1 - drift * pos / (2 * n - 1)) * np.exp(rng.normal(0.0, cv, 2 * n))
    first, second = x[0::2], x[1::2]
    b_first = np.arange(n) % 2 == 0  # repetition r: baseline first when r is even
    return np.where(b_first, first, second), ratio * np.where(b_first, second, first)


def test_paired_example_data():
    est = S.paired_ratio_ci(EXAMPLE_BASE, EXAMPLE_CAND)
    d = np.log(np.array(EXAMPLE_CAND) / np.array(EXAMPLE_BASE))
    assert est.ratio == pytest.approx(math.exp(d.mean())) and est.ratio == pytest.approx(0.86, abs=0.01)
    half = st.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert (est.ci_low, est.ci_high) == pytest.approx((math.exp(d.mean() - half), math.exp(d.mean() + half)))
    assert est.statistic == "geometric_mean_paired" and est.method == "paired-t-log"
    assert (est.n_baseline, est.n_candidate) == (5, 5)
    assert not est.reliable and "6" in est.reason  # 5 pairs < MIN_PAIRS
    # The paired interval is far narrower than the unpaired one on the same drifting data.
    unpaired = S.ratio_of_medians_ci(EXAMPLE_BASE, EXAMPLE_CAND, resamples=B)
    assert math.log(est.ci_high / est.ci_low) < 0.5 * math.log(unpaired.ci_high / unpaired.ci_low)
    dec = S.tpot_gain_decision(EXAMPLE_BASE, EXAMPLE_CAND, min_gain=0.02, paired=True)
    assert dec.verdict == S.INCONCLUSIVE and dec.reason.startswith("paired over 5 repetitions")
    assert_plain_json(dec.to_dict())


def test_paired_clear_gain_passes_and_paired_flag_delegates():
    rng = np.random.default_rng(60)
    base, cand = abba_run(rng, 8, 0.88, cv=0.02)
    d = S.tpot_gain_decision(base, cand, min_gain=0.02, paired=True)
    assert d == S.paired_tpot_gain_decision(base, cand, min_gain=0.02)
    assert d.verdict == S.PASS, d.reason
    assert d.reason.startswith("paired over 8 repetitions")
    assert d.estimate.method == "paired-t-log" and d.estimate.reliable
    assert d.estimate.ci_high < 0.98 and d.p_pass < 0.025 and d.fail_kind is None
    assert d.mde is not None and d.gain_needed_to_pass == pytest.approx(1 - 0.98 * (1 - d.mde))
    assert_plain_json(d.to_dict())


def test_paired_slower_and_below_min_gain_fail():
    rng = np.random.default_rng(61)
    base, cand = abba_run(rng, 7, 1.10, cv=0.02)
    d = S.paired_tpot_gain_decision(base, cand, min_gain=0.02)
    assert d.verdict == S.FAIL and d.fail_kind == "slower" and "slower" in d.reason
    assert d.estimate.ci_low > 1 and d.p_slower < 0.025
    base, cand = abba_run(rng, 8, 0.99, cv=0.002)
    d = S.paired_tpot_gain_decision(base, cand, min_gain=0.05)
    assert d.verdict == S.FAIL and d.fail_kind == "below_min_gain", d.reason


def test_paired_noisy_small_gain_is_inconclusive_with_mde():
    rng = np.random.default_rng(62)
    base, cand = abba_run(rng, 6, 0.98, cv=0.05)
    d = S.paired_tpot_gain_decision(base, cand, min_gain=0.02)
    assert d.verdict == S.INCONCLUSIVE and "detect gains" in d.reason and "paired over 6" in d.reason


def test_paired_interval_coverage_under_drift():
    rng = np.random.default_rng(63)
    draws, hits = 600, 0
    for i in range(draws):
        base, cand = abba_run(rng, 6 + i % 5, 0.88)  # n = 6..10 pairs, drift 40%, cv 5%
        est = S.paired_ratio_ci(base, cand)
        hits += est.ci_low <= 0.88 <= est.ci_high
    assert 0.90 <= hits / draws <= 0.99, hits / draws


def test_paired_interval_coverage_without_drift_is_nominal():
    rng = np.random.default_rng(64)
    draws, hits = 1000, 0
    for _ in range(draws):
        base, cand = abba_run(rng, 6, 0.9, drift=0.0)
        est = S.paired_ratio_ci(base, cand)
        hits += est.ci_low <= 0.9 <= est.ci_high
    assert 0.92 <= hits / draws <= 0.975, hits / draws


@pytest.mark.parametrize("min_gain", [0.0, 0.02])
def test_paired_aa_false_verdicts_under_strong_drift(min_gain):
    rng = np.random.default_rng(65)
    out = [S.paired_tpot_gain_decision(*abba_run(rng, 6 + i % 5, 1.0, drift=0.4), min_gain=min_gain)
           for i in range(400)]
    rates = verdicts(out)
    assert rates.get("PASS", 0) + rates.get("FAIL_slower", 0) <= 0.05, rates


def test_paired_power_beats_unpaired_on_drifting_data():
    # Example-like: drift 40% over the run, per-trial noise cv 5%, a true 12% gain, 7 repetitions,
    # min_gain 1%. (Measured on 1000 draws: paired PASS 0.88 at min_gain 1%, 0.83 at 2%, 0.93 at 0;
    # unpaired PASS <= 0.001.)
    rng = np.random.default_rng(66)
    paired = unpaired = 0
    draws = 200
    for i in range(draws):
        base, cand = abba_run(rng, 7, 0.88)
        paired += S.paired_tpot_gain_decision(base, cand, min_gain=0.01).verdict == S.PASS
        if i < 60:  # the bootstrap is the slow part
            unpaired += S.tpot_gain_decision(base, cand, min_gain=0.01, resamples=1000, seed=i).verdict == S.PASS
    assert paired / draws >= 0.80, paired / draws
    assert unpaired / 60 <= 0.2 and paired / draws > unpaired / 60 + 0.5, (paired, unpaired)


def test_paired_zero_spread_is_inconclusive():
    for base, cand in (([10.0] * 8, [10.0] * 8), ([10.0] * 8, [8.0] * 8),
                       ([10.0, 11.0, 12.0, 9.0, 10.5, 9.5], [9.0, 9.9, 10.8, 8.1, 9.45, 8.55])):
        d = S.paired_tpot_gain_decision(base, cand, min_gain=0.02)
        assert d.verdict == S.INCONCLUSIVE and "identical" in d.reason, d.reason
        assert d.estimate.method == "exact" and not d.estimate.reliable
        assert d.estimate.ci_low == d.estimate.ci_high == d.estimate.ratio
        assert_plain_json(d.to_dict())


PAIRED_BAD = [
    ([], []),
    ([10.0], [9.0]),
    (GOOD[:5], [9.0, 9.1, 9.2, 9.0, 9.05]),  # 5 pairs < MIN_PAIRS
    ([10.0, math.nan, 10.1, 9.9, 10.0, 10.2], [9.0] * 6),
    (GOOD, [9.0, math.inf, 9.1, 9.0, 9.2, 9.1]),
    (GOOD, [0.0] * 6),
    ([0.0] * 6, [0.0] * 6),
    (GOOD, [-1.0, 9.0, 9.1, 9.2, 9.0, 9.1]),
    (GOOD[:2], ["a", "b"]),
    (GOOD[:3], [1.0, None, 2.0]),
]


@pytest.mark.parametrize("base, cand", PAIRED_BAD)
def test_paired_degenerate_inputs_are_inconclusive(base, cand):
    d = S.paired_tpot_gain_decision(base, cand, min_gain=0.02)
    assert d.verdict == S.INCONCLUSIVE and "paired over" in d.reason
    assert_plain_json(d.to_dict())
    nf = S.noise_floor(base, cand, min_gain=0.02, paired=True)
    assert not nf.reliable and nf.reason
    assert_plain_json(nf.to_dict())


def test_paired_mismatched_lengths_are_a_programmer_error():
    with pytest.raises(ValueError, match="per repetition"):
        S.paired_ratio_ci(GOOD, GOOD[:5])
    with pytest.raises(ValueError):
        S.paired_tpot_gain_decision(GOOD, GOOD[:5], min_gain=0.02)
    with pytest.raises(ValueError):
        S.tpot_gain_decision(GOOD, GOOD[:5], min_gain=0.02, paired=True)
    with pytest.raises(ValueError):
        S.signed_rank(GOOD, GOOD[:5])
    with pytest.raises(ValueError):
        S.noise_floor(GOOD, GOOD[:5], paired=True)


def test_min_pairs_is_where_the_signed_rank_test_can_first_decide():
    for n in range(1, 9):
        b = np.full(n, 10.0)
        c = 9.0 * np.exp(np.linspace(0, 0.01, n))  # every pair faster
        assert S.signed_rank(b, c, "less").p_value == pytest.approx(2.0**-n)
        assert (2.0**-n < 0.025) == (n >= S.MIN_PAIRS)


def test_signed_rank_matches_scipy_exact_without_ties():
    rng = np.random.default_rng(70)
    for _ in range(60):
        n = int(rng.integers(1, 20))
        b = np.exp(rng.normal(0, 0.1, n))
        c = b * np.exp(rng.normal(0.03, 0.1, n))
        x = np.log(c) - np.log(b)
        for alt in ("two-sided", "less", "greater"):
            ref = st.wilcoxon(x, alternative=alt, method="exact")
            got = S.signed_rank(b, c, alt)
            assert got.p_value == pytest.approx(min(1.0, ref.pvalue), rel=1e-12, abs=1e-15)
            if alt != "two-sided":  # scipy's two-sided statistic is min(W+, W-)
                assert got.statistic == ref.statistic


def _signed_rank_brute(x: np.ndarray, alt: str) -> float:
    x = x[np.abs(x) > 1e-12]
    if x.size == 0:
        return 1.0
    r = st.rankdata(np.round(np.abs(x), 12))
    w = r[x > 0].sum()
    signs = np.array(np.meshgrid(*[[0, 1]] * x.size)).reshape(x.size, -1).T
    ws = signs @ r
    le, ge = np.mean(ws <= w + 1e-9), np.mean(ws >= w - 1e-9)
    return min(1.0, {"less": le, "greater": ge, "two-sided": 2 * min(le, ge)}[alt])


def test_signed_rank_ties_and_zeros_are_exact():
    rng = np.random.default_rng(71)
    for _ in range(60):
        n = int(rng.integers(1, 11))
        b = rng.integers(1, 4, n).astype(float)
        c = rng.integers(1, 4, n).astype(float)  # many zeros (c == b) and tied |log ratios|
        for alt in ("two-sided", "less", "greater"):
            got = S.signed_rank(b, c, alt).p_value
            assert got == pytest.approx(_signed_rank_brute(np.log(c) - np.log(b), alt), abs=1e-12)
    # Zeros up to rounding: c == t * b must count as zero, not as a tiny positive or negative.
    b = np.array([10.0, 11.0, 12.0, 13.0, 14.0, 15.0])
    assert S.signed_rank(0.98 * b, b * 0.98 * (1 + 1e-15), "greater") == (0.0, 1.0)
    assert S.signed_rank([5.0] * 6, [5.0] * 6) == (0.0, 1.0)
    with pytest.raises(ValueError):
        S.signed_rank(GOOD, GOOD, alternative="bigger")
    with pytest.raises(ValueError):
        S.signed_rank([1.0, -1.0], [1.0, 1.0])


def test_signed_rank_large_n_normal_approximation():
    rng = np.random.default_rng(72)
    b = np.exp(rng.normal(0, 0.1, 300))
    c = b * np.exp(rng.normal(0.01, 0.1, 300))
    ref = st.wilcoxon(np.log(c) - np.log(b), method="approx", correction=False)
    assert S.signed_rank(b, c).p_value == pytest.approx(ref.pvalue, rel=1e-6)


def test_paired_mde_and_repetitions_consistent():
    sd = 0.07
    n = S.paired_repetitions_needed(sd, 0.02, true_gain=0.12)
    assert S.MIN_PAIRS <= n <= 12
    assert S.paired_repetitions_needed(0.0, 0.02) == S.MIN_PAIRS
    n2 = S.paired_repetitions_needed(sd, 0.05)
    assert S.paired_minimum_detectable_gain(sd, n2) <= 0.05 < S.paired_minimum_detectable_gain(sd, n2 - 1)
    mdes = [S.paired_minimum_detectable_gain(sd, k) for k in range(2, 30)]
    assert mdes == sorted(mdes, reverse=True)
    with pytest.raises(ValueError):
        S.paired_minimum_detectable_gain(sd, 1)
    with pytest.raises(ValueError):
        S.paired_repetitions_needed(sd, 0.0)


def test_paired_noise_floor_adjacent_pairs_removes_drift():
    rng = np.random.default_rng(73)
    pos = np.arange(24)
    values = 11.5 * (1 - 0.4 * pos / 23) * np.exp(rng.normal(0, 0.02, 24))  # one variant, run order
    nf = S.noise_floor(values, min_gain=0.02, paired=True)
    assert nf.reliable, nf.reason
    assert (nf.split, nf.n_pairs, nf.paired) == ("adjacent_pairs", 12, True)
    assert nf.cv > 0.08  # the per-trial spread is dominated by the drift ...
    assert nf.cv_within_pair < 0.04  # ... which cancels within a pair
    assert nf.sd_log_ratio == pytest.approx(nf.cv_within_pair * math.sqrt(2))
    assert nf.mde == pytest.approx(S.paired_minimum_detectable_gain(nf.sd_log_ratio, 12))
    assert nf.repetitions_needed == S.paired_repetitions_needed(nf.sd_log_ratio, 0.02)
    assert nf.estimate.method == "paired-t-log" and nf.estimate.ci_low <= 1.0 <= nf.estimate.ci_high
    unpaired = S.noise_floor(values, min_gain=0.02, resamples=B)
    assert not unpaired.paired and nf.mde < unpaired.mde
    assert_plain_json(nf.to_dict())
    # two given arms, and identical values
    given = S.noise_floor(values[0::2], values[1::2], paired=True)
    assert given.split == "given_pairs" and given.sd_log_ratio == nf.sd_log_ratio
    flat = S.noise_floor([10.0] * 12, paired=True)
    assert not flat.reliable and "zero spread" in flat.reason


def test_paired_false_verdict_rate_on_drifting_aa_pool():
    rng = np.random.default_rng(74)
    pos = np.arange(24)
    values = 11.5 * (1 - 0.4 * pos / 23) * np.exp(rng.normal(0, 0.05, 24))
    # Given the drawn pairs, the coin flips are the signed-rank test's own null: with 8 pairs each
    # false direction has probability <= 5/256 whatever the pool (<= 3.9% together).
    r = S.false_verdict_rate(values, min_gain=0.0, n_splits=1000, per_arm=8, seed=1, paired=True)
    assert r["paired"] and r["per_arm"] == 8 and r["n_splits"] == 1000
    assert r["pass"] + r["fail"] + r["inconclusive"] == pytest.approx(1.0)
    assert r["false_verdict_rate"] <= 0.05, r
    assert_plain_json(r)
    small = dict(min_gain=0.02, n_splits=20, per_arm=6, seed=2, paired=True)
    assert S.false_verdict_rate(values, **small) == S.false_verdict_rate(values, **small)
    # The unpaired rule on the same pool is still available (and not paired).
    assert not S.false_verdict_rate(values, min_gain=0.0, n_splits=5, resamples=B)["paired"]
    with pytest.raises(ValueError):
        S.false_verdict_rate(values, min_gain=0.0, per_arm=13, paired=True)
