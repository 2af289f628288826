"""Result types, constants and input checks shared by the statistics modules."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import NormalDist
from typing import Any, ClassVar, NamedTuple, TypeAlias, TypedDict

import numpy as np

from sglang_spec_harness.vocabulary import Verdict  # re-exported by sglang_spec_harness.verdict.stats

#: Fewest trials per arm for a reliable bootstrap interval and for a PASS/FAIL verdict (see the
#: coverage table in the module docstring). Also the floor of `repetitions_needed`.
MIN_TRIALS = 5

#: What the functions of the statistics modules take as a list of values: a sequence of numbers or
#: an array (both go through `np.asarray`).
Values: TypeAlias = Sequence[float] | np.ndarray

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
    if isinstance(value, Enum):  # a Verdict: its string
        return value.value
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

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on each subclass

    def to_dict(self) -> dict[str, Any]:
        fields = dataclasses.fields(self)
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


class RatioCommon(TypedDict):
    """The fields of a `RatioEstimate` that a function fills the same way on each of its returns."""

    confidence: float
    n_baseline: int
    n_candidate: int
    statistic: str
    resamples: int
    seed: int | None


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


def _check_gain_arguments(min_gain: float, confidence: float, alpha: float, power: float) -> None:
    """ValueError for arguments of the TPOT gain rule out of range (a caller's mistake, not data)."""
    if not isinstance(min_gain, numbers.Real) or not (0.0 <= float(min_gain) < 1.0):
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain!r}")
    _check_unit("confidence", confidence)
    _check_unit("alpha", alpha)
    _check_unit("power", power)


def _log_effect(min_gain: float, true_gain: float | None) -> float:
    """The log-scale effect a repetition planner must resolve: -log(1 - min_gain) (tell a gain of
    `min_gain` from no change), or with `true_gain` (the gain expected) log((1 - min_gain) /
    (1 - true_gain)) (the whole interval clears 1 - min_gain, i.e. the rule PASSes)."""
    if not (0.0 < min_gain < 1.0):
        raise ValueError(f"min_gain must be in (0, 1), got {min_gain!r}")
    if true_gain is None:
        return -math.log1p(-min_gain)
    if not (min_gain < true_gain < 1.0):
        raise ValueError(f"true_gain must be in (min_gain, 1), got {true_gain!r}")
    return math.log((1.0 - min_gain) / (1.0 - true_gain))


def _check_resamples(resamples: int) -> None:
    if not isinstance(resamples, (int, np.integer)) or resamples < 100:
        raise ValueError(f"resamples must be an int >= 100, got {resamples!r}")


def _clean(values: Values, name: str) -> tuple[np.ndarray, str | None]:
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


