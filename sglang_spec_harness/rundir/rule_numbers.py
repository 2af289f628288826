"""results.json `rules[].numbers`: one pydantic model per rule kind (docs/internals.md, "results.json").

The numbers are plain JSON: numpy values made Python and non-finite floats null (`plain`, applied
before validation), so a NaN never reaches a record. A model writes the fields that were set, in
its order: a rule that stopped early writes what it had (`{}` for an explained gain blocked by a
precondition), and a record read back is written as it was. Unknown fields are kept (a newer
harness may add some); a field of the wrong type is refused, naming it.
"""

from __future__ import annotations

import math
from enum import Enum
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    WrapValidator,
    model_serializer,
    model_validator,
)


def plain(value: Any) -> Any:
    """Plain JSON values: numpy scalars to Python, non-finite floats to None (the statistics compute
    with numpy, and a NaN must never reach a record)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Enum):  # a Verdict: its string
        return value.value
    return value


def _as_written(value: Any, validate: Any) -> Any:
    """Validated as a float, kept an int when it was one: a bound written as 2 is rewritten as 2."""
    number = validate(value)
    return value if type(value) is int else number


# Finite (non-finite values were made None before validation); ints and floats, never bools or strings.
Float = Annotated[float, Field(strict=True, allow_inf_nan=False), WrapValidator(_as_written)]
Int = Annotated[int, Field(strict=True)]
Floats = list[Float | None]


class Numbers(BaseModel):
    """The numbers of one rule. `KIND` is the rule kind whose numbers these are."""

    model_config = ConfigDict(extra="allow")
    KIND: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _plain(cls, data: Any) -> Any:
        return plain(data) if isinstance(data, dict) else data

    def updated(self, **values: Any) -> Self:
        """A copy with `values` set, validated (and made plain) like the rest."""
        return self.model_validate({**self.model_dump(), **values})

    @model_serializer(mode="wrap")
    def _as_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        written = handler(self)
        keep = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in written.items() if k in keep}


# ---- the statistics' results, as verdict.stats' `to_dict()` writes them -----------------------------


class RatioEstimateNumbers(Numbers):
    """stats.RatioEstimate: a candidate/baseline ratio with its interval."""

    ratio: Float | None = None
    ci_low: Float | None = None
    ci_high: Float | None = None
    confidence: Float | None = None
    n_baseline: Int | None = None
    n_candidate: Int | None = None
    statistic: str | None = None
    method: str | None = None
    resamples: Int | None = None
    seed: Int | None = None
    reliable: bool | None = None
    reason: str | None = None


class GainDecisionNumbers(Numbers):
    """stats.GainDecision: the TPOT gain rule's decision."""

    verdict: str | None = None
    reason: str | None = None
    min_gain: Float | None = None
    alpha: Float | None = None
    power: Float | None = None
    estimate: RatioEstimateNumbers | None = None
    gain: Float | None = None
    p_value: Float | None = None
    p_pass: Float | None = None
    p_slower: Float | None = None
    p_short: Float | None = None
    fail_kind: str | None = None
    mde: Float | None = None
    gain_needed_to_pass: Float | None = None


class NoiseFloorNumbers(Numbers):
    """stats.NoiseFloor: the A/A noise floor."""

    reliable: bool | None = None
    reason: str | None = None
    split: str | None = None
    n_a: Int | None = None
    n_b: Int | None = None
    median_a: Float | None = None
    median_b: Float | None = None
    cv: Float | None = None
    cv_a: Float | None = None
    cv_b: Float | None = None
    estimate: RatioEstimateNumbers | None = None
    alpha: Float | None = None
    power: Float | None = None
    mde: Float | None = None
    mde_interval: Float | None = None
    min_gain: Float | None = None
    repetitions_needed: Int | None = None
    paired: bool | None = None
    n_pairs: Int | None = None
    sd_log_ratio: Float | None = None
    cv_within_pair: Float | None = None


class NestedFitNumbers(Numbers):
    """stats.NestedFit: the warm modes' mixed model (blocks nested in launches); `sd_*` on the log scale."""

    log_ratio: Float | None = None
    se: Float | None = None
    df: Float | None = None
    sd_launch: Float | None = None
    sd_block: Float | None = None
    n_blocks: Int = 0
    n_launches: dict[str, Int] = Field(default_factory=dict)  # arm -> launches
    n_time_blocks: Int = 0
    launch_means: dict[str, Float | None] = Field(default_factory=dict)  # launch -> its level, as a ratio
    reason: str = ""
    launch_p: Float | None = None
    pooled: bool = False


# ---- the rules' kinds (sglang_spec_harness.verdict.rules) -------------------------------------------


class ValidityNumbers(Numbers):
    """`run_complete` ({}) and `run_intact` (the problems found)."""

    KIND = "validity"
    problems: list[str] | None = None


class KernelObservation(Numbers):
    """One trace file's (rank's) count of the rule's pattern in its region."""

    variant: str
    trial: str
    rank: Int
    region: str
    pattern: str
    unit: Literal["graph_launch", "span", "trace"]
    replays: Int
    total: Int | None = None
    per_replay_min: Float | None = None
    per_replay_max: Float | None = None
    eager_total: Int | None = None  # launched eagerly in the region, outside its graph replays
    time_us: Float | None = None
    ok: bool


class KernelCountNumbers(Numbers):
    KIND = "kernel_count"
    observations: list[KernelObservation] = Field(default_factory=list)


class AcceptLengthNumbers(Numbers):
    KIND = "accept_length"
    baseline: list[Float] = Field(default_factory=list)
    candidate: list[Float] = Field(default_factory=list)
    rel_tolerance: Float | None = None
    min: Float | None = None
    pairs: Int | None = None  # warm modes: rounds paired
    ratio: Float | None = None
    ci_low: Float | None = None
    ci_high: Float | None = None
    exact: bool | None = None  # zero spread in both arms: the ratio is exact
    confidence: Float | None = None


class FirstDifference(Numbers):
    request_index: Int
    position: Int
    baseline_token: Int | None = None
    candidate_token: Int | None = None
    baseline_trial: str
    candidate_trial: str


class OutputIdentityNumbers(Numbers):
    KIND = "output_identity"
    compared: Int = 0
    identical: Int = 0
    fraction: Float | None = None
    first_difference: FirstDifference | None = None
    source: Literal["timed", "profiled"] | None = None
    baseline_self_differences: Int | None = None


class TimedBlock(Numbers):
    """A warm mode's timed block: its arm, launch, round and median TPOT."""

    variant: str
    launch: str
    round: Int
    tpot_ms: Float


class SequentialNumbers(Numbers):
    """An adaptive run's looks, as the TPOT rule's last look used them."""

    looks: Int
    spending: str
    fractions: list[Float]
    nominal_alphas: list[Float]
    alpha_overall: Float


class TpotData(Numbers):
    """The TPOT samples and how they were compared (shared by tpot_gain and aa_noise)."""

    baseline_ms: list[Float] = Field(default_factory=list)
    candidate_ms: list[Float] = Field(default_factory=list)
    pairs: Int = 0
    paired: bool = False
    mode: str | None = None
    pair_repetitions: list[Int] = Field(default_factory=list)
    pair_ratios: Floats = Field(default_factory=list)
    nested: NestedFitNumbers | None = None  # warm modes
    blocks: list[TimedBlock] | None = None  # warm modes


class TpotGainNumbers(TpotData):
    KIND = "tpot_gain"
    sequential: SequentialNumbers | None = None  # adaptive runs
    ratio: Float | None = None
    ci_low: Float | None = None
    ci_high: Float | None = None
    confidence: Float | None = None
    gain: Float | None = None
    p_value: Float | None = None
    min_gain: Float | None = None
    min_detectable_gain: Float | None = None
    gain_needed_to_pass: Float | None = None
    fail_kind: str | None = None
    reliable: bool | None = None
    method: str | None = None
    statistic: str | None = None


class RegionSaving(Numbers):
    baseline_us_per_cycle: Float
    candidate_us_per_cycle: Float
    saving_us_per_cycle: Float


class ExplainedGainNumbers(Numbers):
    """Empty when a precondition blocked the rule before it measured anything."""

    KIND = "explained_gain"
    measured_saving_ms: Float | None = None
    measured_ci_ms: Floats | None = None  # [low, high]
    predicted_saving_ms: Float | None = None
    ratio: Float | None = None
    ratio_ci: Floats | None = None  # [low, high]
    confidence: Float | None = None
    paired: str | None = None  # the TPOT interval's method
    saving_us_per_cycle: Float | None = None
    tokens_per_cycle: Float | None = None
    regions: dict[str, RegionSaving] | None = None
    pattern_removed_us_per_cycle: Float | None = None
    basis: list[str] | None = None
    profiled_cycles: dict[str, Int] | None = None  # baseline, candidate
    reference_region: str | None = None
    candidate_scale: Float | None = None
    scaled: Literal["per_cycle", "per_trial"] | None = None
    min_ratio: Float | None = None
    max_ratio: Float | None = None


class AaNoiseNumbers(Numbers):
    """A/A: the TPOT rule on two arms of one variant, and the noise floor it shows."""

    KIND = "aa_noise"
    a_ms: list[Float] = Field(default_factory=list)
    b_ms: list[Float] = Field(default_factory=list)
    decision: GainDecisionNumbers | None = None
    noise: NoiseFloorNumbers | None = None  # restart mode
    min_gain: Float | None = None
    mode: str | None = None
    nested: NestedFitNumbers | None = None  # warm modes
    blocks: list[TimedBlock] | None = None
    paired: bool = False
    pairs: Int = 0
    pair_ratios: Floats = Field(default_factory=list)


# ---- `harness compare`: one variant across two runs (sglang_spec_harness.verdict.compare) ------------


class TpotChangeNumbers(RatioEstimateNumbers):
    KIND = "tpot_change"
    a_ms: list[Float] = Field(default_factory=list)
    b_ms: list[Float] = Field(default_factory=list)


class AcceptLengthChangeNumbers(Numbers):
    """The accept lengths of the two runs and, when both have some, stats.EquivalenceDecision."""

    KIND = "accept_length_change"
    a: list[Float] = Field(default_factory=list)
    b: list[Float] = Field(default_factory=list)
    verdict: str | None = None
    reason: str | None = None
    rel_tolerance: Float | None = None
    lower: Float | None = None
    upper: Float | None = None
    exact: bool | None = None
    estimate: RatioEstimateNumbers | None = None


class OutputChangeNumbers(Numbers):
    KIND = "output_change"
    compared: Int = 0
    identical: Int = 0


class KernelCountChangeNumbers(Numbers):
    KIND = "kernel_count_change"
    counts: dict[str, dict[str, Float | None]] = Field(default_factory=dict)  # "region/pattern" -> run -> per replay


NUMBERS: tuple[type[Numbers], ...] = (
    ValidityNumbers, KernelCountNumbers, AcceptLengthNumbers, OutputIdentityNumbers, TpotGainNumbers,
    ExplainedGainNumbers, AaNoiseNumbers, TpotChangeNumbers, AcceptLengthChangeNumbers, OutputChangeNumbers,
    KernelCountChangeNumbers,
)
NUMBERS_OF_KIND: dict[str, type[Numbers]] = {cls.KIND: cls for cls in NUMBERS}


def numbers_of(rule: Mapping[str, Any]) -> Numbers | None:
    """A rule's numbers (a results.json rule as plain data) as its kind's model, or None where they
    do not read as one: the report shows a damaged rule without them, never refuses the run."""
    kind, numbers = rule.get("kind"), rule.get("numbers")
    model = NUMBERS_OF_KIND.get(kind) if isinstance(kind, str) else None
    if model is None or not isinstance(numbers, dict):
        return None
    try:
        return model.model_validate(numbers)
    except ValidationError:
        return None
