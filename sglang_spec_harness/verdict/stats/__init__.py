"""Statistics for the rules: TPOT gain, accept-length equivalence, A/A noise floor.

Pure functions on per-trial values (one number per timed trial and arm, e.g. that trial's median
TPOT or mean accept length). No I/O and no knowledge of scenarios or run directories; the rule
families (`sglang_spec_harness/verdict/rules/`) turn these results into rules and `results.json` entries.

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

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "MIN_LAUNCHES",
    "MIN_PAIRS",
    "MIN_TRIALS",
    "PASS",
    "SPENDING_FUNCTIONS",
    "EquivalenceDecision",
    "GainDecision",
    "NestedFit",
    "NoiseFloor",
    "RankTest",
    "RatioEstimate",
    "boundaries",
    "equivalence_within",
    "false_verdict_rate",
    "fit_nested",
    "mann_whitney",
    "minimum_detectable_gain",
    "nested_ratio_ci",
    "nested_tpot_gain_decision",
    "noise_floor",
    "nominal_levels",
    "paired_equivalence_within",
    "paired_minimum_detectable_gain",
    "paired_ratio_ci",
    "paired_repetitions_needed",
    "paired_tpot_gain_decision",
    "ratio_of_medians_ci",
    "repetitions_needed",
    "robust_cv",
    "signed_rank",
    "tpot_gain_decision",
]


from sglang_spec_harness.verdict.stats.base import (
    MIN_TRIALS,
    EquivalenceDecision,
    GainDecision,
    NoiseFloor,
    RankTest,
    RatioEstimate,
)
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS
from sglang_spec_harness.verdict.stats.equivalence import (
    equivalence_within,
    paired_equivalence_within,
)
from sglang_spec_harness.verdict.stats.gain import tpot_gain_decision
from sglang_spec_harness.verdict.stats.nested import (
    MIN_LAUNCHES,
    NestedFit,
    fit_nested,
    nested_ratio_ci,
    nested_tpot_gain_decision,
)
from sglang_spec_harness.verdict.stats.noise import false_verdict_rate, noise_floor, robust_cv
from sglang_spec_harness.verdict.stats.sequential import SPENDING_FUNCTIONS, boundaries, nominal_levels
from sglang_spec_harness.verdict.stats.paired import (
    MIN_PAIRS,
    paired_minimum_detectable_gain,
    paired_ratio_ci,
    paired_repetitions_needed,
    paired_tpot_gain_decision,
    signed_rank,
)
from sglang_spec_harness.verdict.stats.unpaired import (
    mann_whitney,
    minimum_detectable_gain,
    ratio_of_medians_ci,
    repetitions_needed,
)
