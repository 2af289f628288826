"""Scenario files: the YAML a user writes, validated into a typed `Scenario`.

Errors point at the YAML: `FILE:LINE: field.path: what is wrong`, raised as HarnessInputError.
"""

from __future__ import annotations

import codecs
import copy
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.files import read_head
from sglang_spec_harness.traces.schema import REGION_NAME, ScenarioRegionRule
from sglang_spec_harness.vocabulary import DRAFT_DECODE, DRAFT_EXTEND, TARGET_VERIFY

LEGACY_PACKAGE = "harness"  # the import name before the rename (it collides on the package registry)


def current_module_name(name: str) -> str:
    """`harness.patches.x` (a scenario written before the rename) -> `sglang_spec_harness.patches.x`."""
    head, _, rest = name.partition(".")
    return f"{__package__}.{rest}" if head == LEGACY_PACKAGE and rest else name


# Top-level scenario keys renamed since: the old name -> the current one. A scenario (or a stored run's)
# that says the old name reads as if it said the new one.
LEGACY_KEYS = {"checks": "rules"}  # one word, rule, for what a scenario declares (run directories: version 3)


def with_current_keys(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with each old top-level key (LEGACY_KEYS) under its current name; a copy when one is
    renamed. A mapping that has both names is left as it is (scenario_from_dict refuses it)."""
    old = [key for key, new in LEGACY_KEYS.items() if key in data and new not in data]
    if not old:
        return data
    return {LEGACY_KEYS.get(key, key) if key in old else key: value for key, value in data.items()}


# The default count pattern: the CUDA softmax kernels (long and short rows) and, on CPU-only
# traces, the op that does the work (`aten::_softmax`, not its `aten::softmax` parent, which
# would count each call twice).
DEFAULT_PATTERNS: dict[str, str] = {
    "softmax": r"cunn_SoftMaxForward|softmax_warp_forward|^aten::_softmax$",
}


# Server launches per arm in the warm modes: the fewest that let launch-to-launch spread be measured.
DEFAULT_LAUNCHES = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None
    return value


ServerArgValue = bool | int | float | str | list[int | float | str] | None


def _check_args(args: dict[str, ServerArgValue]) -> dict[str, ServerArgValue]:
    for flag in args:
        if not re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9-_]*", flag):
            raise ValueError(f"argument {flag!r} must be a long flag such as '--tp'")
    return args


def render_args(args: dict[str, ServerArgValue]) -> list[str]:
    """A flag mapping as a command line: `true` is a bare flag, `false`/`null` drops it, a list repeats."""
    out: list[str] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            out.append(flag)
            out.extend(str(v) for v in value)
        else:
            out.extend([flag, str(value)])
    return out


class ServerSpec(_Strict):
    """What every variant's server shares."""

    model_path: str | None = Field(
        None, description="--model-path (SGLang): a hub id or a directory (`./` or `../`: relative to the scenario file); "
        "informational for micro")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path (as model_path)")
    sglang_version: str | None = Field(
        None, description="engine sglang: the SGLang version every variant's interpreter must have, checked before any "
        "server starts (null: any installed SGLang)")
    setup: str | None = Field(
        None, description="how to install what this scenario needs (e.g. `make sglang-cpu`): said when it is missing")
    args: dict[str, ServerArgValue] = Field(
        default_factory=dict,
        description="server flags: `--flag: value`; `true` = bare flag, `false`/`null` = omitted, a list = several values",
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment for the server process")
    cpus: list[int] | None = Field(
        None,
        min_length=1,
        description="CPUs the server processes may run on (Linux affinity); negative = counted from the last CPU "
        "available to the harness (-1: the last). While a run lasts the harness keeps to the other CPUs. "
        "null: no pinning",
    )
    startup_timeout_s: float = Field(600.0, gt=0, description="how long to wait for /health")
    request_timeout_s: float = Field(600.0, gt=0, description="limit for one /generate request")

    _v_args = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))


class VariantSpec(_Strict):
    """One arm of the A/B: how its server differs from the shared `server`."""

    description: str = ""
    python: str | None = Field(
        None, description="interpreter for the server (default: the harness's own; `./` or `../`: relative to the scenario file)")
    pythonpath: list[str] = Field(
        default_factory=list,
        description="prepended to PYTHONPATH (e.g. an SGLang source tree; `./` or `../`: relative to the scenario file)")
    env: dict[str, str] = Field(default_factory=dict)
    args: dict[str, ServerArgValue] = Field(default_factory=dict, description="merged over server.args")
    patches: list[str] = Field(
        default_factory=list,
        description="modules imported into the server process before it starts (e.g. to restore the softmax path)",
    )
    sglang_version: str | None = Field(
        None, description="engine sglang: the SGLang version this variant's interpreter must have, checked before any "
        "server starts (null: server.sglang_version); a side-by-side run of two releases gives each arm its own")

    _v_args = field_validator("args")(classmethod(lambda cls, v: _check_args(v)))

    @field_validator("patches")
    @classmethod
    def _patch_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
                raise ValueError(f"{name!r} is not a dotted module name")
        # The package was `harness` until the rename in 0.2.0: older scenarios and stored run directories
        # name its patch modules so, and keep working.
        return [current_module_name(name) for name in v]


class SyntheticPrompts(_Strict):
    source: Literal["synthetic"] = "synthetic"
    seed: int = 0


class FilePrompts(_Strict):
    source: Literal["file"]
    path: str = Field(description="JSONL (`{\"text\": ...}` or `{\"prompt\": ...}` per line) or ShareGPT JSON; relative to the scenario file")
    format: Literal["jsonl", "sharegpt"] = "jsonl"
    seed: int = Field(0, description="order in which prompts are drawn")


class WorkloadSpec(_Strict):
    prompts: Annotated[SyntheticPrompts | FilePrompts, Field(discriminator="source")] = Field(
        default_factory=SyntheticPrompts
    )
    num_requests: int = Field(16, ge=1, description="measured requests per trial (warmup excluded)")
    input_len: int = Field(64, ge=1, description="prompt length in tokens (synthetic prompts)")
    output_len: int = Field(64, ge=2, description="max_new_tokens")
    concurrency: int = Field(1, ge=1, description="requests in flight at once")
    request_rate: float | None = Field(
        None, gt=0, description="requests per second (Poisson arrivals); null = as fast as concurrency allows"
    )
    warmup_requests: int = Field(2, ge=0, description="sent first, excluded from the measurements")
    temperature: float = Field(0.0, ge=0)
    ignore_eos: bool = True


class BudgetSpec(_Strict):
    """An adaptive design (interleaved mode): looks at the TPOT rule after each stage of rounds and
    stops as soon as it is decisive under group-sequential boundaries, adding rounds or a launch per
    arm where the noise is, up to these limits (docs/adaptive.md)."""

    max_rounds: int = Field(ge=2, description="rounds at most; the information fraction of a look is its rounds over this")
    max_launches: int | None = Field(None, ge=1, description="launches per arm at most (default: trials.launches)")
    max_minutes: float | None = Field(None, gt=0, description="wall-clock minutes at most; a stage that would end past it is not started")
    look_every: int | None = Field(None, ge=1, description="rounds per later stage (default: launches per arm, at least 2)")
    grow: Literal["auto", "rounds", "launches"] = Field(
        "auto", description="what a stage adds: auto = one launch per arm when launch-to-launch noise dominates "
        "(and max_launches allows), else rounds; rounds or launches = always that (launches: while max_launches allows)")
    spending: Literal["pocock", "obrien_fleming"] = Field(
        "pocock", description="alpha-spending function: pocock stops a clear effect early; obrien_fleming keeps "
        "nearly all of alpha for the last look")


class TrialsSpec(_Strict):
    mode: Literal["restart", "interleaved", "sequential"] = Field(
        "restart",
        description="restart: one server launch per sample; interleaved: every launch of every arm stays up and "
        "the arms take turns, one block of requests each per round; sequential: one server at a time, "
        "several blocks per launch (for models that cannot share the machine)",
    )
    repetitions: int = Field(
        5, ge=1, description="samples per variant: timed trials (restart) or rounds of blocks (interleaved, sequential)"
    )
    block_requests: int | None = Field(
        None, ge=1, description="warm modes: requests per block (default: workload.num_requests)"
    )
    launches: int | None = Field(
        None,
        ge=1,
        description="warm modes: server launches per arm (default 2); with one, a launch-to-launch difference "
        "cannot be told from the change under test",
    )
    servers_up: Literal["all", "pair"] = Field(
        "all",
        description="interleaved mode: all = every launch of every arm up at once, the launch serving each arm "
        "rotating between rounds; pair = one launch per arm up at a time, each launch pair serving a "
        "contiguous share of the rounds (when only two servers fit on the machine)",
    )
    profiled: int = Field(1, ge=0, description="profiled passes per variant (structure, not timing)")
    order: Literal["abba", "random"] = Field(
        "random",
        description="random: each repetition runs the arms in a freshly drawn order (randomised blocks), which "
        "makes the paired test valid whatever the machine does over time; abba: A B B A ...",
    )
    seed: int | None = Field(
        None, description="seed of the random order; null = a new seed per run, recorded in the run's scenario.yaml"
    )
    budget: BudgetSpec | None = Field(
        None, description="interleaved mode: an adaptive design: trials.repetitions rounds first, then looks after "
        "each stage until the TPOT rule is decisive or the budget is spent (absent: the fixed design)"
    )
    only: Literal["exact"] | None = Field(
        None, description="exact: the profiled passes only, no timed rounds (so no budget either): the exact rules "
        "(kernel counts, accept length and outputs from the passes) are judged, the timing rules (tpot_gain, "
        "explained_gain) are reported NOT_RUN; `harness run --only exact` sets it. Null: the whole design"
    )

    @model_validator(mode="before")
    @classmethod
    def _exact_only_has_no_budget(cls, data: Any) -> Any:
        # The budget governs the timed rounds; an exact-only run has none (and its plan must not grow).
        if isinstance(data, dict) and data.get("only") == "exact" and data.get("budget") is not None:
            return {**data, "budget": None}
        return data

    @property
    def warm(self) -> bool:
        """Servers stay up across samples (interleaved or sequential)."""
        return self.mode != "restart"

    @property
    def launches_per_arm(self) -> int:
        """Server launches per arm in the warm modes (restart: one per sample)."""
        return (self.launches or DEFAULT_LAUNCHES) if self.warm else self.repetitions

    @property
    def max_launches_per_arm(self) -> int:
        """Launches per arm at most: the budget's, else the fixed design's."""
        if self.budget is not None and self.budget.max_launches is not None:
            return self.budget.max_launches
        return self.launches_per_arm

    @property
    def stage_rounds(self) -> int:
        """Rounds per stage after the first (adaptive design)."""
        if self.budget is not None and self.budget.look_every is not None:
            return self.budget.look_every
        return max(2, self.launches_per_arm)

    @model_validator(mode="after")
    def _warm_fields(self) -> TrialsSpec:
        if self.only == "exact" and not self.profiled:
            raise _LocatedError("trials.only", "exact runs the profiled passes only: trials.profiled must be at least 1")
        for name in ("launches", "block_requests"):
            if not self.warm and getattr(self, name) is not None:
                raise _LocatedError(f"trials.{name}", "only for mode interleaved or sequential (restart launches once per sample)")
        if self.mode != "interleaved" and self.servers_up != "all":
            raise _LocatedError("trials.servers_up", "only for mode interleaved")
        if self.budget is not None:
            if self.mode != "interleaved":
                raise _LocatedError("trials.budget", "only for mode interleaved (servers_up all or pair)")
            if self.budget.max_rounds < self.repetitions:
                raise _LocatedError("trials.budget.max_rounds",
                                    f"{self.budget.max_rounds} is below trials.repetitions ({self.repetitions}), the first stage")
            if self.budget.max_launches is not None and self.budget.max_launches < self.launches_per_arm:
                raise _LocatedError("trials.budget.max_launches",
                                    f"{self.budget.max_launches} is below trials.launches ({self.launches_per_arm})")
        if self.warm and self.launches_per_arm > self.repetitions:
            raise _LocatedError(
                "trials.launches", f"{self.launches_per_arm} launches per arm but {self.repetitions} repetitions: a launch would run no block"
            )
        return self


class NsysSpec(_Strict):
    enabled: bool = False
    executable: str = "nsys"
    args: list[str] = Field(
        default_factory=lambda: [
            "--trace=cuda,nvtx",
            "--trace-fork-before-exec=true",
            "--cuda-graph-trace=node",
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
        ],
        description="extra `nsys profile` arguments; node mode is required for per-kernel graph analysis",
    )


Activity = Literal["CPU", "GPU", "MEM", "RPD", "CUDA_PROFILER"]
_DEFAULT_ACTIVITIES: tuple[Activity, ...] = ("CPU", "GPU")


class ProfileSpec(_Strict):
    num_steps: int = Field(20, ge=1, description="forward steps the profiler records, then stops by itself")
    activities: list[Activity] = Field(default_factory=lambda: list(_DEFAULT_ACTIVITIES))
    with_stack: bool = False
    record_shapes: bool = False
    requests: int | None = Field(
        None, ge=1, description="requests sent while profiling (default: the workload's num_requests)"
    )
    trace_timeout_s: float = Field(
        300.0, gt=0, description="after the profiled requests, how long to wait for complete trace files on disk"
    )
    nsys: NsysSpec = Field(default_factory=NsysSpec)


class RegionsSpec(_Strict):
    """Overrides of the default SGLang region table (an ordered list, first match wins)."""

    replace: bool = Field(False, description="true: use only `rules`; false: put `rules` before the defaults")
    rules: list[ScenarioRegionRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rules_when_replacing(self) -> RegionsSpec:
        if self.replace and not self.rules:
            raise ValueError("replace: true needs at least one rule (an empty table labels nothing)")
        return self


# ---- rules --------------------------------------------------------------------------------------


class _Rule(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="shown in reports and JUnit")
    description: str = ""


class KernelCountRule(_Rule):
    kind: Literal["kernel_count"]
    region: str = Field(pattern=REGION_NAME)
    pattern: str = Field(description="a name from `patterns`")
    variants: list[str] = Field(min_length=1)
    per: Literal["replay", "total"] = "replay"
    equals: int | None = Field(None, ge=0)
    at_most: int | None = Field(None, ge=0)
    at_least: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_bound(self) -> KernelCountRule:
        given = [k for k in ("equals", "at_most", "at_least") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one bound: equals, at_most or at_least")
        return self


class _Comparison(_Rule):
    baseline: str = "baseline"
    candidate: str = "candidate"


class AcceptLengthRule(_Comparison):
    kind: Literal["accept_length"]
    rel_tolerance: float = Field(0.01, gt=0, lt=1)
    min: float | None = Field(None, gt=0, description="absolute floor for every variant's accept length")
    confidence: float = Field(0.90, gt=0, lt=1)


class OutputIdentityRule(_Comparison):
    kind: Literal["output_identity"]
    min_fraction: float = Field(1.0, ge=0, le=1)


class TpotGainRule(_Comparison):
    kind: Literal["tpot_gain"]
    min_gain: float = Field(0.0, ge=0, lt=1, description="required relative TPOT reduction, e.g. 0.01")
    confidence: float = Field(0.95, gt=0, lt=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    resamples: int = Field(10000, ge=100)
    seed: int = 0


class ExplainedGainRule(_Comparison):
    kind: Literal["explained_gain"]
    pattern: str = "softmax"
    confidence: float = Field(0.95, gt=0.5, lt=1, description="of the TPOT interval the ratio's interval comes from")
    regions: list[str] = Field(default_factory=lambda: [DRAFT_DECODE, DRAFT_EXTEND])
    reference_region: str | None = Field(
        TARGET_VERIFY,
        description="a region the change does not touch: each variant's region times are scaled by the baseline's "
        "time of it over the variant's, which cancels one profiled trial running on a slower machine than the other; "
        "null: no scaling",
    )
    min_ratio: float | None = Field(None, ge=0, description="measured/predicted saving at least this (without either bound the rule is informational: INFO)")
    max_ratio: float | None = Field(None, ge=0, description="measured/predicted saving at most this (without either bound the rule is informational: INFO)")


# A rule a scenario declares (`rules:`), by its kind.
class OutputValidityRule(_Rule):
    """Every returned token id inside the vocabulary and not one of its padding ids, and the text
    decoded: judged per variant, with no baseline (a server that returns garbage fails on its own)."""

    kind: Literal["output_validity"]
    variants: list[str] | None = Field(None, min_length=1, description="default: every variant")
    max_invalid_fraction: float = Field(0.0, ge=0, lt=1, description="of a variant's returned tokens")
    vocab_size: int | None = Field(
        None, ge=1, description="ids must be below it (default: what the run recorded of the served model)")
    tokenizer_size: int | None = Field(
        None, ge=1, description="ids from it up to vocab_size are padding (default: what the run recorded)")


Rule = Annotated[
    KernelCountRule | AcceptLengthRule | OutputIdentityRule | TpotGainRule | ExplainedGainRule | OutputValidityRule,
    Field(discriminator="kind"),
]


class ValiditySpec(_Strict):
    max_unlabelled_fraction: float = Field(
        0.05, ge=0, le=1, description="graph launches with no region, as a fraction, above which zero-count rules are INCONCLUSIVE"
    )


class HardwareSpec(_Strict):
    """The machine a scenario needs. CI reads it (`harness scenario-info`) to pick runners: one job
    per label in `runners`, so that a scenario never lands on a machine that cannot run it."""

    accelerator: Literal["cpu", "cuda", "rocm"] = Field(
        "cpu", description="what the servers run on: cpu (a hosted runner does), cuda (NVIDIA) or rocm (AMD)")
    gpus: int = Field(0, ge=0, description="GPUs one run needs at least (tensor parallelism); 0 for cpu")
    runners: list[str] = Field(
        default_factory=list,
        description="runner labels of the machine kinds that meet these needs, as the CI that runs the scenario "
        "names its runners (SGLang's CI: one label per runner, e.g. [4-gpu-b200, 8-gpu-b200] for NVFP4, which needs "
        "Blackwell): one CI job per label, on `runs-on: LABEL` as given (default for a cpu scenario: ubuntu-latest)")

    @field_validator("runners")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        for label in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", label):
                raise ValueError(f"runner label {label!r}: letters, digits, '.', '-' and '_' only")
        if len(set(v)) != len(v):
            raise ValueError("a runner label is listed twice")
        return v

    @model_validator(mode="after")
    def _gpus_match_accelerator(self) -> HardwareSpec:
        if self.accelerator == "cpu" and self.gpus:
            raise _LocatedError("hardware.gpus", "accelerator cpu needs no GPUs: set gpus to 0 or name cuda/rocm")
        if self.accelerator != "cpu" and not self.gpus:
            raise _LocatedError("hardware.gpus", f"accelerator {self.accelerator} needs at least one GPU")
        if self.accelerator != "cpu" and not self.runners:
            raise _LocatedError("hardware.runners", "name the runner label of at least one machine kind with these GPUs")
        return self

    def runs_on(self) -> list[tuple[str, list[str]]]:
        """(label, the job's `runs-on` labels) per machine kind: the label alone, as given. SGLang's
        runners each carry one label that names the machine (scripts/ci/runner_configs.yml there)."""
        return [(label, [label]) for label in (self.runners or ["ubuntu-latest"])]


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    engine: Literal["micro", "sglang"]
    server: ServerSpec = Field(default_factory=ServerSpec)
    variants: dict[str, VariantSpec]
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    trials: TrialsSpec = Field(default_factory=TrialsSpec)
    profile: ProfileSpec = Field(default_factory=ProfileSpec)
    patterns: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_PATTERNS))
    regions: RegionsSpec = Field(default_factory=RegionsSpec)
    validity: ValiditySpec = Field(default_factory=ValiditySpec)
    hardware: HardwareSpec = Field(default_factory=HardwareSpec, description="the machine it needs: CI's runner labels")
    rules: list[Rule] = Field(default_factory=list)

    @field_validator("variants")
    @classmethod
    def _baseline_and_candidate(cls, v: dict[str, VariantSpec]) -> dict[str, VariantSpec]:
        missing = [n for n in ("baseline", "candidate") if n not in v]
        if missing:
            raise ValueError(f"missing variant(s) {', '.join(missing)}: at least `baseline` and `candidate` are required")
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise ValueError(f"variant name {name!r}: letters, digits, '-' and '_' only")
        return v

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, v: dict[str, str]) -> dict[str, str]:
        merged = dict(DEFAULT_PATTERNS)
        merged.update(v)
        for name, regex in merged.items():
            if not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise _LocatedError(f"patterns.{name}", "pattern names: letters, digits and '_' only")
            try:
                _check_regex(regex)
            except ValueError as exc:
                raise _LocatedError(f"patterns.{name}", str(exc)) from None
        return merged

    @model_validator(mode="after")
    def _rules_refer_to_known_things(self) -> Scenario:
        names: set[str] = set()
        for i, rule in enumerate(self.rules):
            where = f"rules.{i}"
            if rule.name in names:
                raise _LocatedError(f"{where}.name", f"duplicate rule name {rule.name!r}")
            names.add(rule.name)
            pattern = getattr(rule, "pattern", None)
            if pattern is not None and pattern not in self.patterns:
                raise _LocatedError(
                    f"{where}.pattern", f"unknown pattern {pattern!r} (known: {', '.join(sorted(self.patterns))})"
                )
            for field in ("baseline", "candidate"):
                variant = getattr(rule, field, None)
                if variant is not None and variant not in self.variants:
                    raise _LocatedError(f"{where}.{field}", f"unknown variant {variant!r}")
            for j, variant in enumerate(getattr(rule, "variants", []) or []):
                if variant not in self.variants:
                    raise _LocatedError(f"{where}.variants.{j}", f"unknown variant {variant!r}")
        return self

    # -- derived --------------------------------------------------------------------------------
    def server_args(self, variant: str) -> dict[str, ServerArgValue]:
        """The shared flags with the variant's merged over them (variant wins)."""
        merged = dict(self.server.args)
        merged.update(self.variants[variant].args)
        return merged

    def region_rules(self) -> list[tuple[str, str]]:
        """The scenario's region rules as (name, regex): before the defaults, or alone with `regions.replace`."""
        return [(r.name, r.regex) for r in self.regions.rules]


class _LocatedError(ValueError):
    """A cross-field error that knows which field it is about (dotted path)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


# ---- loading ------------------------------------------------------------------------------------


def _line_of(node: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at `path` (or of the deepest ancestor that exists)."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            if match is None:
                return line
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _yaml_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Pydantic's error location as a path into the YAML: drop the tags of tagged unions
    (`rules.0.kernel_count.region` is `rules.0.region` in the file)."""
    path: list[Any] = []
    for part in loc:
        if isinstance(data, dict) and part not in data and part in (data.get("kind"), data.get("source")):
            continue
        path.append(part)
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            data = None
    return tuple(path)


# A scenario is a few KB of YAML; the limit keeps a hostile or mistaken file (a trace passed as a
# scenario) from costing minutes of parsing.
MAX_SCENARIO_BYTES = 1 << 20
# libyaml when present: fast, and it bounds nesting depth itself (pure-Python PyYAML recurses).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)


def read_yaml(path: str | Path, *, max_bytes: int = MAX_SCENARIO_BYTES) -> tuple[Any, yaml.Node | None]:
    """A YAML file as plain data and its node tree (for line numbers). UTF-8, or UTF-16/32 with a
    byte-order mark. Every problem is one HarnessInputError `FILE[:LINE]: what`."""
    path = Path(path)
    raw = read_head(path, max_bytes + 1, "a YAML file")
    if len(raw) > max_bytes:
        raise HarnessInputError(f"{path}: larger than {max_bytes} bytes: not a scenario (a scenario is a few KB of YAML)")
    codec = next((name for bom, name in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as exc:
        raise HarnessInputError(f"{path}: not {codec.upper()} text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    loader = _YAML_LOADER(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise HarnessInputError(f"{path}{line}: not valid YAML ({problem})") from None
    except RecursionError:
        raise HarnessInputError(f"{path}: not valid YAML (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise HarnessInputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    finally:
        loader.dispose()
    _reject_duplicate_keys(path, node)
    return data, node


def _reject_duplicate_keys(path: Path, root: yaml.Node | None) -> None:
    """YAML keeps the last of two equal keys without a word: a scenario that says `rules:` twice
    would silently lose the first list. Each node is visited once (aliases share nodes)."""
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        raise HarnessInputError(
                            f"{path}:{line}: duplicate key {key.value!r} (first at line {first[key.value]})"
                        )
                    first[key.value] = line
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario file; every problem is a HarnessInputError `FILE:LINE: field: why`.
    Paths written relative to the scenario file (`./`, `../`) come back absolute. `overrides`:
    `PATH=VALUE` items (`harness run --set`), applied after the file itself validates."""
    path = Path(path)
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise HarnessInputError(f"{path}:1: expected a mapping with `name`, `engine`, `variants`, ...")
    scenario = scenario_from_dict(data, source=path, node=node)
    if overrides:
        # the file is valid, so what fails now is an override's: no file line to point at
        scenario = scenario_from_dict(with_overrides(with_current_keys(data), overrides), source=f"{path} with --set")
    return with_paths_resolved(scenario, path.parent)


def with_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`data` with each `PATH=VALUE` set: PATH dotted (`trials.repetitions`,
    `server.args.--speculative-num-steps`), VALUE read as YAML would read it in the file (`6`, `true`,
    `[CPU]`, `{a: 1}`; a relative path is relative to the scenario file). Missing mappings on the way
    are made. A malformed item is one HarnessInputError naming it."""
    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise HarnessInputError(f"--set {item}: expected PATH=VALUE, e.g. --set trials.repetitions=6")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise HarnessInputError(f"--set {item}: the value is not valid YAML ({problem})") from None
        target = data
        for depth, part in enumerate(parts[:-1]):
            child = target.get(part)
            if child is None:  # absent, or written empty (`args:`)
                child = target[part] = {}
            if not isinstance(child, dict):
                raise HarnessInputError(f"--set {item}: {'.'.join(parts[:depth + 1])} is not a mapping, so it has "
                                        f"no {parts[depth + 1]!r}")
            target = child
        target[parts[-1]] = value
    return data


def _is_relative_to_scenario(value: str) -> bool:
    return value.startswith(("./", "../")) or value in (".", "..")


def with_paths_resolved(scenario: Scenario, base: Path) -> Scenario:
    """Model paths, interpreters and PYTHONPATH entries that start with `./` or `../` made absolute
    against `base` (the scenario file's directory). Only normalised: an interpreter in a virtual
    environment is a symlink that must stay one (resolving it would leave the environment)."""

    def absolute(value: str | None) -> str | None:
        if value is None or not _is_relative_to_scenario(value):
            return value
        return os.path.normpath(os.path.join(os.path.abspath(base), value))

    server = scenario.server.model_copy(update={"model_path": absolute(scenario.server.model_path),
                                                "draft_model_path": absolute(scenario.server.draft_model_path)})
    variants = {
        name: spec.model_copy(update={"python": absolute(spec.python),
                                      "pythonpath": [absolute(entry) or entry for entry in spec.pythonpath]})
        for name, spec in scenario.variants.items()
    }
    return scenario.model_copy(update={"server": server, "variants": variants})


def scenario_from_dict(data: dict[str, Any], *, source: str | Path = "<scenario>", node: yaml.Node | None = None) -> Scenario:
    """`data` validated as a Scenario (old key names read as the current ones); every problem is one
    HarnessInputError `SOURCE:LINE: field.path: why`, the path as the data writes it."""
    written = {new: old for old, new in LEGACY_KEYS.items() if old in data}  # current name -> as written
    both = [new for new in written if new in data]
    if both:
        old = written[both[0]]
        line = _line_of(node, (old,))
        raise HarnessInputError(f"{source}{f':{line}' if line is not None else ''}: {old}: the old name of "
                                f"`{both[0]}`, which the scenario also gives: keep `{both[0]}` only")
    current = with_current_keys(data)
    try:
        return Scenario.model_validate(current)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = _yaml_path(tuple(err["loc"]), current)
        dotted = ".".join(str(p) for p in loc)
        message = err["msg"]
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _LocatedError):
            loc = tuple(int(p) if p.isdigit() else p for p in ctx_error.path.split("."))
            dotted, message = ctx_error.path, ctx_error.message
        else:
            message = message.removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] == "missing":
                message = "required field is missing"
        if loc and loc[0] in written:  # as the file writes it
            loc = (written[loc[0]], *loc[1:])
            dotted = ".".join(str(p) for p in loc)
        line = _line_of(node, loc)
        where = f"{source}:{line}" if line is not None else str(source)
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise HarnessInputError(f"{where}: {dotted or '(top level)'}: {message}{more}") from None


# The last line of a stored (resolved) scenario: a file cut short (a full disk, a partial copy)
# still parses as YAML, only with fewer rules, so `harness check` requires this line.
SCENARIO_END = "# end of the resolved scenario"


def scenario_to_yaml(scenario: Scenario) -> str:
    """The scenario as resolved (defaults filled in), for the run directory."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False, allow_unicode=True) + SCENARIO_END + "\n"


def is_whole(path: Path) -> bool:
    """Whether a stored scenario ends with SCENARIO_END (written whole by `scenario_to_yaml`)."""
    try:
        with Path(path).open("rb") as f:
            f.seek(max(f.seek(0, 2) - len(SCENARIO_END) - 2, 0))
            return f.read().rstrip(b"\r\n").endswith(SCENARIO_END.encode())
    except OSError:
        return False


def scenario_json_schema() -> str:
    """JSON Schema of scenario files, for editors (yaml-language-server)."""
    return json.dumps(Scenario.model_json_schema(), indent=2)
