"""The run directory's records: one pydantic model per file, used by the stage that writes it and by
the stages that read it back (the layout: docs/internals.md, "The run directory").

A record is written by this harness but read as hostile data (it may come from another machine, or be
damaged): the fields declared here are validated, numbers within what the harness can measure, and
unknown fields are kept (a newer harness may add some). Fields that older harnesses did not write
have the default that reads them right (run.json without `mode` is a `restart` run); what a server
or a probe reports about itself is free-form (`dict[str, Any]`).

Records grow as a run goes (run.json gets `wall_s` at the end, launch.json a field per step), so they
are written with the fields that were set (`sglang_spec_harness.rundir.write`): a writer sets every field it
means to write, and a record read back is written as it was.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WrapValidator
from pydantic.dataclasses import dataclass

from sglang_spec_harness.rundir.rule_numbers import (
    AaNoiseNumbers,
    AcceptLengthChangeNumbers,
    AcceptLengthNumbers,
    ExplainedGainNumbers,
    KernelCountChangeNumbers,
    KernelCountNumbers,
    Numbers,
    OutputChangeNumbers,
    OutputIdentityNumbers,
    TpotChangeNumbers,
    TpotGainNumbers,
    ValidityNumbers,
    plain,
)
from sglang_spec_harness.traces.schema import TraceAnalysis
from sglang_spec_harness.vocabulary import Verdict

# The version of the run directory's versioned records (run.json, analysis.json, environment.json,
# results.json): older ones are migrated on load (rundir/migrations.py lists the versions), a newer
# one is refused by `harness check` and a note in the report and the history.
SCHEMA_VERSION = 3
# The largest number a record may hold where the harness measures (counts, times, rates): beyond it a
# number is damage, not a measurement (1e12 ms is 30 years; a TPOT of 1e308 would overflow the statistics).
MAX_NUMBER = 1e12


def _as_written(value: Any, validate: Any) -> Any:
    """Validated as a float, kept an int when it was one: a count written as 3 is read and rewritten as 3."""
    number = validate(value)
    return value if type(value) is int else number


Int = Annotated[int, Field(strict=True)]
# Counts, times (ms, s) and rates the harness measures: never negative, never past MAX_NUMBER.
Number = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=MAX_NUMBER), WrapValidator(_as_written)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_NUMBER), WrapValidator(_as_written)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- run.json -------------------------------------------------------------------------------------


class PlanEntry(_Record):
    """run.json `plan`: one planned trial (sglang_spec_harness.run.plan.Trial), in the full plan's terms."""

    index: Int
    variant: str
    kind: str  # timed | profiled
    repetition: Int | None = None  # the round, in the warm modes
    config: str | None = None  # the variant whose server configuration runs (differs in A/A)
    launch: Int | None = None  # the index of the launch that serves it; None: its own (restart)
    first_prompt: Int | None = None
    dir: str | None = None  # relative to the run directory: trials/<NN>-<variant>-<kind>


class LaunchEntry(_Record):
    """run.json `launches`: one server launch of the warm modes (sglang_spec_harness.run.plan.Launch)."""

    index: Int
    arm: str
    config: str | None = None
    number: Int | None = None  # per arm (sequential mode: its launch pair)
    dir: str | None = None  # launches/<NN>-<arm>-launch<k>


RunMode = Literal["restart", "interleaved", "sequential"]
SweepAxis = Literal["sglang_release", "git_revision"]


class SweepPoint(_Record):
    """run.json `sweep`: the run is one point of a sweep (`harness sweep`), over SGLang releases or over
    git revisions of an SGLang checkout. History orders a sweep's runs by `position`, not by time."""

    sweep: str  # the sweep's folder name (<timestamp>-<scenario>)
    axis: SweepAxis
    point: str  # the release ("0.5.12.post1") or the full commit hash
    label: str  # what a chart's axis shows: the release, or the short commit
    position: Int  # 0-based place in the sweep's order (release order, or the revisions' order)
    # what ran: the release environment's facts (interpreter, pins and what was used instead, the
    # CPU adaptations that were the harness's and not SGLang's): free-form
    environment: dict[str, Any] = Field(default_factory=dict)


class LookRecord(_Record):
    """run.json `looks[]`: one look of an adaptive run (sglang_spec_harness.run.adaptive). `exact`: after the
    profiled passes (kernel rules); `tpot`: after a stage of rounds, at its nominal level."""

    kind: Literal["exact", "tpot"]
    rounds: Int
    launches_per_arm: Int
    fraction: float | None = None  # rounds / budget.max_rounds (tpot looks)
    nominal_alpha: float | None = None  # the TPOT rule's alpha at this look (two one-sided halves)
    verdict: str | None = None  # the first TPOT rule's verdict at this look
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    min_detectable_gain: float | None = None
    sd_launch: float | None = None
    sd_block: float | None = None
    df: float | None = None
    elapsed_s: float | None = None
    action: str  # stop | start rounds | add N rounds [and launch M per arm]
    reason: str


class RunRecord(_Record):
    """run.json: the plan, and how far the run got."""

    schema_version: Int = SCHEMA_VERSION
    scenario: str | None = None
    aa: bool = False
    status: str = "unknown"  # running | complete | incomplete
    error: str | None = None
    started: str | None = None
    finished: str | None = None
    mode: RunMode = "restart"  # runs before the warm modes have none: the migration to version 2 fills it
    plan: list[PlanEntry]
    launches: list[LaunchEntry] = Field(default_factory=list)
    trials_done: int | None = None
    # at the end
    wall_s: float | None = None
    measured_s: float | None = None  # the timed samples' request time
    server_launches: int | None = None
    adopted_from: str | None = None  # sglang_spec_harness.run.combine: the run whose trials this one adopted
    sweep: SweepPoint | None = None  # a point of a sweep (harness sweep): absent in other runs
    looks: list[LookRecord] | None = None  # an adaptive run's looks (trials.budget): absent in fixed designs


# ---- launches/<launch>/launch.json ----------------------------------------------------------------


class LaunchRecord(LaunchEntry):
    """launch.json: the launch's run.json entry, then each step of its life as it happens (a field
    appears once its step has): started, up (ready, server_info), warmed up, stopped."""

    status: Literal["planned", "starting", "up", "stopped", "failed"]
    error: str | None = None
    command: str | None = None
    port: int | None = None
    started: str | None = None
    started_at_s: float | None = None  # seconds since the run started (orders launches finer than stamps)
    server_pid: int | None = None
    port_attempts: int | None = None  # when its port had to be replaced
    ready: str | None = None
    startup_s: float | None = None
    server_info: dict[str, Any] | None = None  # what the server says about itself: free-form
    ready_at_s: float | None = None
    warmup_s: float | None = None
    stopped: str | None = None
    exit_code: int | None = None  # the server's
    stopped_at_s: float | None = None


# ---- trials/<trial>/trial.json --------------------------------------------------------------------


class TrialSummary(_Record):
    """trial.json `summary`: the trial's measured requests (warm-up excluded), sglang_spec_harness.run.workload.summarize."""

    requests: Number | None = None
    errors: Number | None = None
    completion_tokens: Number | None = None
    spec_verify_ct: Number | None = None
    accept_length: Positive | None = None
    median_tpot_ms: Positive | None = None
    mean_tpot_ms: Positive | None = None
    median_ttft_ms: Number | None = None
    median_itl_ms: Number | None = None
    output_throughput_tok_s: Number | None = None
    duration_s: Number | None = None


class TrialRecord(_Record):
    """trial.json: one trial (restart: a server launch of its own; warm modes: a block or a profiled
    pass on a launch), rewritten as it goes."""

    index: Int = 0
    variant: str
    config: str | None = None
    kind: str  # timed | profiled
    repetition: Int | None = None
    launch: str | None = None  # warm modes: the launch directory that served it
    status: str | None = None  # running | ok | failed
    error: str | None = None
    command: str | None = None
    server_pid: Int | None = None
    port: Int | None = None
    started: str | None = None
    finished: str | None = None
    server_info: dict[str, Any] = Field(default_factory=dict)  # what the server says about itself: free-form
    summary: TrialSummary | None = None
    traces: list[str] = Field(default_factory=list)  # relative to the trial directory


class RequestRow(_Record):
    """One line of requests.jsonl: one request as the workload client measured it (filled in as its
    chunks arrive). `output_ids` None: not recorded, so the request is not compared."""

    index: Int  # the prompt's position in the workload (warm-up prompts: negative)
    warmup: bool = False
    prompt_tokens: Number | None = None
    completion_tokens: Number | None = 0
    spec_verify_ct: Number | None = None
    ttft_ms: Number | None = None
    tpot_ms: Number | None = None
    itl_ms: list[Number] = Field(default_factory=list)
    e2e_ms: Number | None = None
    output_ids: list[Int] | None = None
    finish_reason: str | None = None
    error: str | None = None

    @classmethod
    def sent(cls, index: int, warmup: bool, **measured: Any) -> RequestRow:
        """A request the harness sends: no tokens, gaps or outputs yet (and so written, if it fails)."""
        return cls(index=index, warmup=warmup, completion_tokens=0, itl_ms=[], output_ids=[], **measured)


# ---- analysis.json ---------------------------------------------------------------------------------


# analysis.json `trials.<trial>`: the trace analysis of one profiled trial, the same record that
# `sglang_spec_harness.traces.analyze_traces` returns and `harness analyze --json` prints.
TrialAnalysis = TraceAnalysis


class AnalysisRecord(_Record):
    """analysis.json: the trace analysis of every profiled trial, by trial directory name."""

    schema_version: Int = SCHEMA_VERSION
    trials: dict[str, TrialAnalysis] = Field(default_factory=dict)
    errors: dict[str, str] | None = None  # trial -> why its analysis failed


# ---- environment.json ------------------------------------------------------------------------------


class EnvironmentRecord(_Record):
    """environment.json: where the run ran. The facts are free-form (probes of interpreters and
    GPUs); the history reads them (sglang_spec_harness.history.extract)."""

    schema_version: Int = SCHEMA_VERSION
    harness: dict[str, Any] = Field(default_factory=dict)  # version, git commit
    python: str | None = None
    python_executable: str | None = None
    platform: str | None = None
    hostname: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    engine: str | None = None
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)  # configuration -> its interpreter's facts


# ---- results.json ----------------------------------------------------------------------------------


Plain = Annotated[dict[str, Any], BeforeValidator(plain)]


@dataclass
class Precondition:
    """What a rule relies on, whether it holds, and what was found."""

    what: str
    ok: bool
    detail: str = ""


def _kind_required(schema: dict[str, Any]) -> None:
    """Each kind's `kind` has its one value as a default (for the constructors), but a rule in a
    file must name its kind: the reader picks the model by it."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(1, "kind")


class RuleResultBase(BaseModel):
    """results.json `rules[]`: one rule's verdict, why, and the numbers behind it. One subclass per
    kind, whose `numbers` are that kind's model (sglang_spec_harness.rundir.rule_numbers)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_kind_required)

    name: str
    kind: str
    description: str
    verdict: Verdict
    reason: str
    params: Plain  # the rule as written in the scenario
    numbers: Numbers
    preconditions: list[Precondition] = Field(default_factory=list)


class ValidityResult(RuleResultBase):
    kind: Literal["validity"] = "validity"
    numbers: ValidityNumbers = Field(default_factory=ValidityNumbers)


class KernelCountResult(RuleResultBase):
    kind: Literal["kernel_count"] = "kernel_count"
    numbers: KernelCountNumbers = Field(default_factory=KernelCountNumbers)


class AcceptLengthResult(RuleResultBase):
    kind: Literal["accept_length"] = "accept_length"
    numbers: AcceptLengthNumbers = Field(default_factory=AcceptLengthNumbers)


class OutputIdentityResult(RuleResultBase):
    kind: Literal["output_identity"] = "output_identity"
    numbers: OutputIdentityNumbers = Field(default_factory=OutputIdentityNumbers)


class TpotGainResult(RuleResultBase):
    kind: Literal["tpot_gain"] = "tpot_gain"
    numbers: TpotGainNumbers = Field(default_factory=TpotGainNumbers)


class ExplainedGainResult(RuleResultBase):
    kind: Literal["explained_gain"] = "explained_gain"
    numbers: ExplainedGainNumbers = Field(default_factory=ExplainedGainNumbers)


class AaNoiseResult(RuleResultBase):
    kind: Literal["aa_noise"] = "aa_noise"
    numbers: AaNoiseNumbers = Field(default_factory=AaNoiseNumbers)


class TpotChangeResult(RuleResultBase):
    kind: Literal["tpot_change"] = "tpot_change"
    numbers: TpotChangeNumbers = Field(default_factory=TpotChangeNumbers)


class AcceptLengthChangeResult(RuleResultBase):
    kind: Literal["accept_length_change"] = "accept_length_change"
    numbers: AcceptLengthChangeNumbers = Field(default_factory=AcceptLengthChangeNumbers)


class OutputChangeResult(RuleResultBase):
    kind: Literal["output_change"] = "output_change"
    numbers: OutputChangeNumbers = Field(default_factory=OutputChangeNumbers)


class KernelCountChangeResult(RuleResultBase):
    kind: Literal["kernel_count_change"] = "kernel_count_change"
    numbers: KernelCountChangeNumbers = Field(default_factory=KernelCountChangeNumbers)


_RESULTS: tuple[type[RuleResultBase], ...] = (
    ValidityResult, KernelCountResult, AcceptLengthResult, OutputIdentityResult, TpotGainResult,
    ExplainedGainResult, AaNoiseResult, TpotChangeResult, AcceptLengthChangeResult, OutputChangeResult,
    KernelCountChangeResult,
)
RESULT_OF_KIND: dict[str, type[RuleResultBase]] = {cls.model_fields["kind"].default: cls for cls in _RESULTS}
# A rule of results.json, validated by its kind: each kind's numbers are its own model.
RuleResult = Annotated[
    ValidityResult | KernelCountResult | AcceptLengthResult | OutputIdentityResult | TpotGainResult
    | ExplainedGainResult | AaNoiseResult | TpotChangeResult | AcceptLengthChangeResult | OutputChangeResult
    | KernelCountChangeResult,
    Field(discriminator="kind"),
]


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class ResultsRecord(BaseModel):
    """results.json: the verdict of a run's rules (written whole by `harness check`; `harness compare`
    prints one for two runs)."""

    schema_version: Int = SCHEMA_VERSION
    scenario: str
    run_dir: str
    aa: bool
    run_status: str
    evaluated_at: str = Field(default_factory=_utc_now)
    verdict: Verdict
    exit_code: int
    variants: Annotated[dict[str, dict[str, Any]], BeforeValidator(plain)]  # per variant: its samples
    rules: list[RuleResult]
