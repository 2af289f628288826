"""A series and its points: one scenario (A/A runs and each run mode apart) x variant x metric x
hardware (x sweep), one value per complete run, and the table of metrics (`METRICS`): what each is,
which way is worse, whether it is exact or noisy, whether it gates. `analyze.py` loads the series
from the database; `gate.py` judges their newest change points."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang_spec_harness.history.changepoints import ChangePoint
from sglang_spec_harness.history.direction import Direction

EXACT, NOISY = "exact", "noisy"
# The kind of a change point that only a side-by-side run found (a series too short for the test).
SIDE_BY_SIDE = "side by side"
# The noisy metrics a side-by-side run of two points measures (its timed blocks: `sweep/confirm.py`).
CONFIRMABLE = ("tpot_ms", "throughput_tok_s", "accept_length")


@dataclass(frozen=True)
class Metric:
    label: str
    worse: str | None  # "up" or "down": which direction is a regression; None: a change is neither (a
    # count's own direction comes from the scenario's rule on it: direction.py)
    unit: str = ""
    kind: str = NOISY  # exact: every change of value is a change point; noisy: E-divisive means
    gates: bool = True  # whether its newest change point can fail the gate


# Every metric, or family of metrics (`kernels:<region>:<pattern>`, `ops:<region>`,
# `region_us:<region>`), in one table: what it is, which way is worse, its kind, whether it gates.
METRICS = {
    "tpot_ms": Metric("TPOT, median of the run's timed trials", "up", "ms"),
    "tpot_ratio": Metric("TPOT candidate / baseline (medians)", "up"),
    "accept_length": Metric("accept length, median of the run's timed trials", "down", "tokens / verify"),
    "throughput_tok_s": Metric("output throughput, median of the run's timed trials", "down", "tok/s"),
    # value: each distinct output set numbered as it first appears; compared: the hash
    "output_hash": Metric("greedy outputs of the profiled trials", None, "output set #", EXACT, gates=False),
    # from the output_validity rule: returned ids that are no token (out of range, or padding)
    "invalid_token_fraction": Metric("returned token ids that are not tokens", "up", "of tokens", EXACT),
    # worse: the kernel_count rule on the pattern for the series' variant says (direction.py); no rule: neither
    "kernels": Metric("{pattern} matches per replay in {region} (profiled trials, max)", None, "per replay", EXACT),
    # value: each op name's median per replay, summed; compared: every op's median count per replay; only
    # in the regions the scenario's kernel_count rules name (all, without such rules)
    "ops": Metric("op count per replay in {region} (every op)", None, "ops / replay", EXACT, gates=False),
    # Profiled passes give structure, not timing (the profiler perturbs it): shown and explained, no gate.
    "region_us": Metric("{region} time per replay (profiled trials)", "up", "us", NOISY, gates=False),
}
RATIO_VARIANT = "candidate/baseline"


def metric_info(metric: str) -> Metric:
    family, _, rest = metric.partition(":")
    info = METRICS.get(family) if rest else METRICS.get(metric)
    if info is None:
        return Metric(metric, "up")
    if family == "kernels":
        region, _, pattern = rest.partition(":")
        return Metric(info.label.format(region=region, pattern=pattern), info.worse, info.unit, info.kind, info.gates)
    if rest:
        return Metric(info.label.format(region=rest), info.worse, info.unit, info.kind, info.gates)
    return info


@dataclass
class Point:
    run: str
    run_key: str
    started: str | None
    value: float
    sglang_commit: str | None
    harness_commit: str | None
    report: str | None
    run_id: int = 0
    label: str | None = None  # the sweep point's label (the release); None outside a sweep
    key: str | None = None  # an exact series' value as compared (an output hash, an op mix); None: `value`
    path: str | None = None


@dataclass
class Series:
    id: str
    scenario: str
    aa: bool
    mode: str | None
    variant: str
    metric: str
    hardware: str
    points: list[Point]
    change_points: list[ChangePoint]
    sweep: str | None = None
    axis: str | None = None
    explanations: list[str] = field(default_factory=list)  # per change point: its explanation's id
    # which way is worse: a count's from the scenario's rule on it, else the metric's (direction.py)
    direction: Direction = field(default_factory=lambda: Direction(None))
    # per index of a change point's first run after: the side-by-side run of the two points, when one ran
    confirmations: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def worse(self) -> str | None:
        return self.direction.worse

    @property
    def counts(self) -> bool:
        return self.metric.startswith("kernels:")

    @property
    def kind(self) -> str:
        return metric_info(self.metric).kind


def series_id(scenario: str, aa: bool, mode: str | None, variant: str, metric: str, hardware: str,
              sweep: str | None = None) -> str:
    # `restart` (one TPOT sample per server launch) is the default mode: named only when another.
    tags = (" [A/A]" if aa else "") + (f" [{mode}]" if mode and mode != "restart" else "")
    return f"{scenario}{tags} · {variant} · {metric} · {hardware}" + (f" · sweep {sweep}" if sweep else "")
