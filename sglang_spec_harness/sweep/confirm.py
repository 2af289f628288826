"""`harness sweep --confirm`: a timing change point is confirmed before it is called a regression or
an improvement. The two points on either side run again side by side, in one session, interleaved:
one run whose baseline arm is the variant at the earlier point and whose candidate arm is the
variant at the later one, on the warm interleaved design (at least `MIN_LAUNCHES` launches per arm
and `MIN_PAIRS` rounds, the scenario's own when it asks for more), judged by the TPOT rule's
statistics (`verdict/rules/tpot_gain`: the mixed model of blocks nested in launches); throughput and
accept length by the same model over the same blocks.

Which pairs: every change point the sweep found in a series of the variant's TPOT, throughput or
accept length; in a series too short for the change-point test (fewer than twice `min_size` points:
a sweep of two releases) every step between neighbouring points whose value moved. Each metric's step
is confirmed when the interval of later / earlier leaves out 1 on the side the series moved to; it is
not confirmed when the interval includes 1 (no change), or lies on the other side, or the run could
not decide (then `measured` is false: the gate cannot rest on it). The outcome goes into the history
database (`history/marks.py`), so a report never runs servers again; the side-by-side run directory
is `<sweep>/side-by-side/<NN>-<before>-<after>/`, an ordinary run (`harness report` opens it) that is
not ingested as a point.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_spec_harness.history.changepoints import Options
from sglang_spec_harness.history.direction import CONFIRMED, NOT_CONFIRMED
from sglang_spec_harness.history.marks import now_utc
from sglang_spec_harness.history.series import CONFIRMABLE
from sglang_spec_harness.points.runner import why_it_stopped
from sglang_spec_harness.pipeline import run_pipeline
from sglang_spec_harness.rundir import load_run_dir
from sglang_spec_harness.run.progress import RunProgress
from sglang_spec_harness.scenario import Scenario, TpotGainRule
from sglang_spec_harness.verdict import stats

SIDE_BY_SIDE_DIR = "side-by-side"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")  # a point's label in a folder name
RULE_NAME = "side_by_side_tpot"
# What each confirmable series reads in the side-by-side run's timed blocks (trial.json `summary`).
BLOCK_FIELDS = {"tpot_ms": "median_tpot_ms", "throughput_tok_s": "output_throughput_tok_s",
                "accept_length": "accept_length"}
assert set(BLOCK_FIELDS) == set(CONFIRMABLE)


@dataclass
class Step:
    """Two neighbouring points of the sweep to run side by side, and the series that moved there."""

    before: str  # labels
    after: str
    run_key_before: str
    run_key_after: str
    moves: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (before, after) in the sweep


def steps_to_confirm(facts: dict[str, Any], variant: str, min_size: int = Options.min_size) -> list[Step]:
    """The steps of the sweep's confirmable series (of `variant`) to run again: at their change points,
    or, in a series too short for the test, wherever the value moved."""
    steps: dict[tuple[str, str], Step] = {}
    for s in facts["series"]:
        if s["variant"] != variant or s["metric"] not in CONFIRMABLE or not s.get("labels"):
            continue
        values, labels, keys = s["values"], s["labels"], s["run_keys"]
        if len(values) < 2 * min_size:
            indices = [i for i in range(1, len(values)) if values[i] != values[i - 1]]
        else:
            indices = list(s["change_points"])
        for i in indices:
            step = steps.setdefault((keys[i - 1], keys[i]), Step(labels[i - 1], labels[i], keys[i - 1], keys[i]))
            step.moves[s["metric"]] = (values[i - 1], values[i])
    return list(steps.values())


def design(scenario: Scenario) -> Scenario:
    """The scenario's trials as a side-by-side run needs them: warm, interleaved, at least two launches
    per arm and MIN_PAIRS rounds (more where the scenario asks for more), no profiled pass."""
    spec = scenario.trials
    trials = spec.model_copy(update={
        "mode": "interleaved", "launches": max(spec.launches_per_arm if spec.warm else 1, stats.MIN_LAUNCHES),
        "repetitions": max(spec.repetitions, stats.MIN_PAIRS), "profiled": 0, "budget": None})
    return scenario.model_copy(update={"trials": trials})


def statistics(scenario: Scenario) -> TpotGainRule:
    """The statistics a side-by-side run is judged by: the scenario's TPOT rule's confidence and alpha
    (the scenario as written: a sweep keeps only its exact rules), else the rule's defaults."""
    tpot = next((r for r in scenario.rules if isinstance(r, TpotGainRule)), None)
    return TpotGainRule(name=RULE_NAME, kind="tpot_gain", min_gain=0.0,
                        confidence=tpot.confidence if tpot else TpotGainRule.model_fields["confidence"].default,
                        alpha=tpot.alpha if tpot else TpotGainRule.model_fields["alpha"].default)


def side_by_side_scenario(scenario: Scenario, variant: str, earlier: Scenario, later: Scenario, step: Step,
                          judged_by: TpotGainRule) -> Scenario:
    """One run, two arms: `variant` at the earlier point as the baseline, at the later as the candidate
    (each with the SGLang version of its own point, checked before any server starts), judged by
    `judged_by` (`statistics`)."""
    arms = {}
    for name, at, label in (("baseline", earlier, step.before), ("candidate", later, step.after)):
        spec = at.variants[variant]
        arms[name] = spec.model_copy(update={"sglang_version": spec.sglang_version or at.server.sglang_version,
                                             "description": f"{spec.description} (the point {label})".strip()})
    rule = judged_by.model_copy(update={"description": f"{variant} at {step.after} against {step.before}, side by side"})
    return design(scenario).model_copy(update={
        "name": f"{scenario.name}.side-by-side", "variants": arms, "rules": [rule],
        "server": scenario.server.model_copy(update={"sglang_version": None}),
        "description": f"{variant} at {step.before} (baseline) and at {step.after} (candidate), side by side"})


def _block_interval(run_dir: Path, metric: str, confidence: float) -> tuple[float | None, float | None, float | None, str, bool]:
    """(ratio, low, high, why, reliable) of candidate / baseline for a block metric, by the mixed model."""
    run = load_run_dir(run_dir, strict=False)
    values, arm, launch, block = [], [], [], []
    for variant in ("baseline", "candidate"):
        for trial in run.trials_of(variant, "timed"):
            value = getattr(trial.summary, BLOCK_FIELDS[metric])
            if value is None or value <= 0 or trial.record.launch is None or trial.record.repetition is None:
                continue
            values.append(float(value))
            arm.append(variant == "candidate")
            launch.append(trial.record.launch)
            block.append(trial.record.repetition)
    estimate = stats.nested_ratio_ci(stats.fit_nested(values, arm, launch, block), confidence=confidence)
    return estimate.ratio, estimate.ci_low, estimate.ci_high, estimate.reason, bool(estimate.reliable)


def _interval(run_dir: Path, outcome: Any, metric: str, confidence: float) -> tuple[Any, ...]:
    if metric == "tpot_ms":
        rule = next(r for r in outcome.results.rules if r.name == RULE_NAME)
        n = rule.numbers
        return n.ratio, n.ci_low, n.ci_high, f"{n.method}: {rule.reason}", bool(n.reliable), n.method
    return (*_block_interval(run_dir, metric, confidence), "mixed-model-t")


def decide(moved_up: bool, ratio: float | None, low: float | None, high: float | None, reliable: bool,
           why: str) -> tuple[str, bool, str]:
    """(status, measured, reason) of one metric's step from the side-by-side interval of later / earlier."""
    if ratio is None or low is None or high is None or not reliable:
        if ratio is not None and low == high == ratio == 1.0:  # every block the same on both sides
            return NOT_CONFIRMED, True, "every block gave the same value at both points: no change"
        return NOT_CONFIRMED, False, f"the side-by-side run cannot decide ({why})"
    if low <= 1.0 <= high:
        return NOT_CONFIRMED, True, "the interval includes no change"
    if (low > 1.0) == moved_up:
        return CONFIRMED, True, "the interval leaves out no change, on the side the sweep moved to"
    return NOT_CONFIRMED, True, "side by side the change goes the other way"


def confirmations(step: Step, run_dir: Path, outcome: Any, variant: str, confidence: float) -> list[dict[str, Any]]:
    """The rows the history keeps for this step: one per metric that moved there."""
    rows = []
    for metric, (before, after) in sorted(step.moves.items()):
        base = {"run_key_before": step.run_key_before, "run_key_after": step.run_key_after, "variant": variant,
                "metric": metric, "run_dir": str(run_dir), "confirmed_at": now_utc(), "confidence": confidence}
        if outcome is None or outcome.status != "complete" or outcome.results is None:
            why = why_it_stopped(outcome.run) if outcome is not None else "it did not start"
            rows.append({**base, "status": NOT_CONFIRMED, "measured": False, "ratio": None, "ci_low": None,
                         "ci_high": None, "method": None, "reason": f"the side-by-side run did not complete: {why}"})
            continue
        ratio, low, high, why, reliable, method = _interval(run_dir, outcome, metric, confidence)
        status, measured, reason = decide(after > before, ratio, low, high, reliable, why)
        rows.append({**base, "status": status, "measured": measured, "ratio": ratio, "ci_low": low, "ci_high": high,
                     "method": method, "reason": reason})
    return rows


ScenarioAt = Callable[[str, str], AbstractContextManager[Scenario]]  # (label, tag) -> the scenario at that point


def confirm_steps(steps: list[Step], *, scenario: Scenario, scenario_path: Path, variant: str, out_dir: Path,
                  judged_by: TpotGainRule, scenario_at: ScenarioAt, store: Callable[[list[dict[str, Any]]], None],
                  progress: RunProgress, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Run each step side by side (judged by `judged_by`: `statistics` of the scenario as written) and
    `store` its rows as soon as they exist; returns every row. A point that cannot be set up again
    (ReleaseUnavailable) gives rows that say so (not measured)."""
    from sglang_spec_harness.releases.environments import ReleaseUnavailable
    from sglang_spec_harness.run.interrupts import interrupt_exception

    confidence = judged_by.confidence
    every: list[dict[str, Any]] = []
    for n, step in enumerate(steps):
        run_dir = out_dir / SIDE_BY_SIDE_DIR / f"{n:02d}-{_SAFE.sub('-', step.before)}-{_SAFE.sub('-', step.after)}"
        say(f"side by side {n + 1}/{len(steps)}: {step.before} (baseline) and {step.after} (candidate), "
            f"{', '.join(sorted(step.moves))}: {run_dir}")
        try:
            with scenario_at(step.before, "before") as earlier, scenario_at(step.after, "after") as later:
                pair = side_by_side_scenario(scenario, variant, earlier, later, step, judged_by)
                outcome = run_pipeline(pair, scenario_path, run_dir=run_dir, progress=progress)
        except ReleaseUnavailable as exc:
            rows = [{"run_key_before": step.run_key_before, "run_key_after": step.run_key_after, "variant": variant,
                     "metric": metric, "status": NOT_CONFIRMED, "measured": False, "ratio": None, "ci_low": None,
                     "ci_high": None, "confidence": confidence, "method": None, "run_dir": None,
                     "reason": f"cannot set up a point again: {exc}", "confirmed_at": now_utc()}
                    for metric in sorted(step.moves)]
        else:
            if outcome.interrupted_by is not None:  # the run stopped its servers; unwind the sweep too
                raise interrupt_exception(outcome.interrupted_by)
            rows = confirmations(step, run_dir, outcome, variant, confidence)
        store(rows)
        every += rows
        say("  " + "; ".join(f"{r['metric']}: {r['status']} ({r['reason']})" for r in rows))
    return every
