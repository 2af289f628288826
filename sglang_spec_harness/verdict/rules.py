"""Checks: evaluate a scenario's rules on a run directory and decide PASS / FAIL / INCONCLUSIVE.

Fail closed: a rule never passes on missing evidence. Every precondition a rule relies on is
listed in its result, and a violated one makes the rule INCONCLUSIVE with the reason.
Statistics live in `sglang_spec_harness.verdict.stats`; this module only gathers the numbers and applies the rules.
The results (`CheckResults`, `RuleResult`, `Precondition`) are results.json's records (sglang_spec_harness.rundir.models).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from collections.abc import Callable

import numpy as np

from sglang_spec_harness.files import write_json_atomic
from sglang_spec_harness.rundir import CheckResults, Precondition, RuleResult, RunDir, StoredTrial, load_run_dir
from sglang_spec_harness.rundir.models import (
    AaNoiseResult,
    AcceptLengthResult,
    ExplainedGainResult,
    KernelCountResult,
    OutputIdentityResult,
    RuleResultBase,
    TpotGainResult,
    ValidityResult,
)
from sglang_spec_harness.rundir.rule_numbers import (
    AaNoiseNumbers,
    AcceptLengthNumbers,
    ExplainedGainNumbers,
    FirstDifference,
    GainDecisionNumbers,
    KernelCountNumbers,
    KernelObservation,
    NoiseFloorNumbers,
    Numbers,
    OutputIdentityNumbers,
    RegionSaving,
    SequentialNumbers,
    TimedBlock,
    TpotData,
    TpotGainNumbers,
    ValidityNumbers,
)
from sglang_spec_harness.scenario import (
    AcceptLengthCheck,
    ExplainedGainCheck,
    KernelCountCheck,
    OutputIdentityCheck,
    TpotGainCheck,
)
from sglang_spec_harness.traces.schema import CountRow, FileAnalysis
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.vocabulary import (CYCLE_REGION, FAIL, INCONCLUSIVE, INFO, NOT_RUN, PASS, Verdict, is_timing_kind,
                                            overall_verdict)

# Rule kinds whose bounds are all optional: kind -> the bound fields. Kinds not listed always have
# a bound (a required one, or a default that can fail); a rule with every bound unset is INFO.
OPTIONAL_BOUNDS: dict[str, tuple[str, ...]] = {"explained_gain": ("min_ratio", "max_ratio")}


def _params(check: Any) -> dict[str, Any]:
    return check.model_dump(mode="json", exclude={"name", "kind", "description"})


R = TypeVar("R", bound=RuleResultBase)


def _result(cls: type[R], check: Any, verdict: Verdict, reason: str, numbers: Numbers,
            preconditions: list[Precondition] | None = None) -> R:
    return cls(name=check.name, kind=cls.model_fields["kind"].default, description=check.description, verdict=verdict,
               reason=reason, params=_params(check), numbers=numbers, preconditions=preconditions or [])


def _failed_preconditions(preconditions: list[Precondition]) -> str | None:
    failed = [p for p in preconditions if not p.ok]
    if not failed:
        return None
    first = failed[0]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{first.what}: {first.detail}{more}"


# ---- trace facts ---------------------------------------------------------------------------------


def region_pattern_counts(file_facts: FileAnalysis, region: str, pattern: str) -> CountRow | None:
    """The count row of `pattern` in `region` of one trace file, in the region's main unit: per graph
    launch when the region was replayed as CUDA graphs, else per annotation span (eager or CPU).
    See sglang_spec_harness/traces/schema.py (RegionCounts, CountRow)."""
    region_facts = file_facts.regions.get(region)
    if region_facts is None:
        return None
    return region_facts.counts.get(pattern)


def eager_pattern_total(file_facts: FileAnalysis, region: str, pattern: str) -> int:
    """Matches of `pattern` launched eagerly inside `region` spans, outside its graph replays.

    In SGLang, `_draft_extend_for_decode` selects tokens eagerly after the draft-extend graph: a
    softmax there is as much a regression as one inside the graph."""
    region_facts = file_facts.regions.get(region)
    if region_facts is None or region_facts.unit != "graph_launch":
        return 0  # the main row already holds every match of the region
    return sum(r.total or 0 for r in file_facts.counts
               if r.region == region and r.pattern == pattern and r.unit == "span")


def _trace_validity(file_facts: FileAnalysis, *, max_unlabelled_fraction: float,
                    where: str) -> list[Precondition]:
    """The fail-closed preconditions of a count taken from one trace file (one rank)."""
    v = file_facts.validity
    out: list[Precondition] = []
    kernels, ops = v.kernels, v.cpu_ops
    out.append(Precondition(f"{where}: trace recorded work", kernels > 0 or ops > 0,
                            f"{kernels} kernels, {ops} CPU ops"))
    mode = v.graph_trace_mode
    if mode is not None:
        out.append(Precondition(f"{where}: nsys graph-trace mode is node", mode.lower() == "node",
                                f"mode {mode!r}: graph mode records no kernels inside replays"))
    if not v.per_graph_counts_known:
        out.append(Precondition(f"{where}: replayed kernels recorded", False,
                                "the trace does not hold the kernels of graph replays"))
    if kernels > 0:
        graph_launches = v.graph_launches
        unlabelled = v.unlabelled_graph_launches
        fraction = unlabelled / graph_launches if graph_launches else 0.0
        out.append(Precondition(f"{where}: graph launches labelled", fraction <= max_unlabelled_fraction,
                                f"{unlabelled} of {graph_launches} graph launches have no region "
                                f"(limit {max_unlabelled_fraction:.0%})"))
        empty = v.graph_launches_without_kernels
        out.append(Precondition(f"{where}: graph replays recorded their kernels",
                                graph_launches == 0 or empty < graph_launches,
                                f"{empty} of {graph_launches} graph launches have no kernels (a capture trace?)"))
    return out


# ---- rules -----------------------------------------------------------------------------------------


def _bound(check: KernelCountCheck) -> tuple[str, int, Callable[[float], bool]]:
    equals, at_most, at_least = check.equals, check.at_most, check.at_least
    if equals is not None:
        return "==", equals, lambda x: x == equals
    if at_most is not None:
        return "<=", at_most, lambda x: x <= at_most
    if at_least is not None:
        return ">=", at_least, lambda x: x >= at_least
    raise ValueError(f"check {check.name!r}: give exactly one bound: equals, at_most or at_least")


def expects_absence(check: KernelCountCheck) -> bool:
    return check.equals == 0 or check.at_most == 0


def _observe(run: RunDir, check: KernelCountCheck, variant: str, trial: StoredTrial, facts: FileAnalysis
             ) -> tuple[list[Precondition], KernelObservation | None]:
    """One trace file's (rank's) count of the rule's pattern, with what the count relies on; no
    observation where the file cannot give one."""
    op, bound, holds = _bound(check)
    where = f"{trial.name} rank {facts.rank}"
    preconditions = _trace_validity(facts, max_unlabelled_fraction=run.scenario.validity.max_unlabelled_fraction,
                                    where=where)
    counts = region_pattern_counts(facts, check.region, check.pattern)
    units = counts.replays if counts is not None else 0
    unit = counts.unit if counts is not None else "graph_launch"
    counted = {row.pattern for row in facts.counts}
    if counts is None and counted and check.pattern not in counted:
        # Not a zero: the analysis never looked for it (`harness check --scenario` with a new pattern).
        preconditions.append(Precondition(
            f"{where}: {check.pattern} counted", False,
            f"the stored analysis counted {', '.join(sorted(counted))} only, not {check.pattern!r}: "
            "the scenario that ran did not name it; run the scenario again with the pattern"))
        return preconditions, None
    if counts is not None and not counts.known:
        preconditions.append(Precondition(f"{where}: {check.pattern} countable in {check.region}", False,
                                          counts.note or "the trace cannot support this count"))
        return preconditions, None
    preconditions.append(Precondition(f"{where}: region {check.region} present", units > 0,
                                      f"{units} {unit.replace('_', ' ')}(s) labelled {check.region}"))
    if facts.validity.kernels > 0:
        preconditions.append(Precondition(
            f"{where}: {check.region} runs as CUDA graphs", unit == "graph_launch",
            f"counting unit is {unit!r}: no graph launches in the region"))
    if counts is None or not units:
        return preconditions, None
    value = counts.total if check.per == "total" else (
        counts.per_replay_max if op in ("==", "<=") else counts.per_replay_min)
    if op == "==" and check.per == "replay":
        ok = counts.per_replay_min == bound and counts.per_replay_max == bound
    else:
        ok = value is not None and holds(value)  # set whenever the region has units
    eager = eager_pattern_total(facts, check.region, check.pattern)
    if expects_absence(check) and eager:
        ok = False
    return preconditions, KernelObservation(
        variant=variant, trial=trial.name, rank=facts.rank, region=check.region, pattern=check.pattern, unit=unit,
        replays=units, total=counts.total, per_replay_min=counts.per_replay_min,
        per_replay_max=counts.per_replay_max, eager_total=eager, time_us=counts.time_us, ok=bool(ok))


def _baseline_shows_pattern(run: RunDir, check: KernelCountCheck) -> Precondition | None:
    """A zero means nothing unless the analysis can see the pattern: the baseline must show it
    (None where the rule expects a count, or there is no separate baseline to ask)."""
    baseline = "baseline" if "baseline" in run.scenario.variants else None
    if not expects_absence(check) or not baseline or baseline in check.variants or run.aa:
        return None
    seen = 0
    for trial in run.trials_of(baseline, "profiled"):
        for facts in run.analysis_files(trial):
            counts = region_pattern_counts(facts, check.region, check.pattern)
            seen += ((counts.total if counts is not None else None) or 0) + eager_pattern_total(
                facts, check.region, check.pattern)
    return Precondition(f"{baseline}: shows {check.pattern} in {check.region}", seen > 0,
                        f"{seen} match(es) in the baseline's profiled trials; "
                        "zero in the candidate proves nothing if the baseline shows none either")


def evaluate_kernel_count(run: RunDir, check: KernelCountCheck) -> KernelCountResult:
    op, bound, _ = _bound(check)
    preconditions: list[Precondition] = []
    observations: list[KernelObservation] = []
    for variant in check.variants:
        trials = run.trials_of(variant, "profiled")
        preconditions.append(Precondition(f"{variant}: profiled trial", bool(trials),
                                          f"{len(trials)} profiled trial(s) completed"))
        for trial in trials:
            files = run.analysis_files(trial)
            preconditions.append(Precondition(f"{trial.name}: trace analysis", bool(files),
                                              f"{len(files)} trace file(s) analysed"))
            for facts in files:
                found, observation = _observe(run, check, variant, trial, facts)
                preconditions += found
                if observation is not None:
                    observations.append(observation)
    if (baseline := _baseline_shows_pattern(run, check)) is not None:
        preconditions.append(baseline)
    numbers = KernelCountNumbers(observations=observations)
    blocked = _failed_preconditions(preconditions)
    failing = [o for o in observations if not o.ok]
    what = "per replay" if check.per == "replay" else "in total"
    if failing and not (op == ">=" and all(o.total == 0 for o in failing)):
        o = failing[0]
        got = o.total if check.per == "total" else f"{o.per_replay_min}..{o.per_replay_max}"
        eager_note = (f" (and {o.eager_total} launched eagerly in the region, outside its graph replays)"
                      if o.eager_total else "")
        return _result(KernelCountResult, check, FAIL, f"{o.variant} {o.trial} rank {o.rank}: {check.pattern} in "
                       f"{check.region} {what} = {got}{eager_note}, expected {op} {bound}", numbers, preconditions)
    if blocked:
        return _result(KernelCountResult, check, INCONCLUSIVE, blocked, numbers, preconditions)
    if failing:  # a lower bound met by nothing at all: blind analysis or a baseline that is not one
        o = failing[0]
        return _result(KernelCountResult, check, INCONCLUSIVE, f"{o.variant} {o.trial}: no {check.pattern} at all in "
                       f"{check.region}: the analysis may be blind, or this variant is not what it claims",
                       numbers, preconditions)
    totals = sorted({o.total for o in observations if o.total is not None})
    return _result(KernelCountResult, check, PASS, f"{check.pattern} in {check.region} {what} {op} {bound} in "
                   f"{len(observations)} trace(s) of {', '.join(check.variants)} (totals {totals})",
                   numbers, preconditions)


# The per-trial numbers the rules take from the timed trials' summaries (trial.json `summary`).
SummaryMetric = Literal["median_tpot_ms", "accept_length"]
TrialKind = Literal["timed", "profiled"]


def timed_values(run: RunDir, variant: str, metric: SummaryMetric, kind: TrialKind = "timed") -> list[float]:
    values = (getattr(trial.summary, metric) for trial in run.trials_of(variant, kind))
    return [float(value) for value in values if value is not None]


def evaluate_accept_length(run: RunDir, check: AcceptLengthCheck) -> AcceptLengthResult:
    # Acceptance does not depend on the profiler: a run without timed trials of both arms (an
    # exact-only run, a bisection step) is judged on its profiled passes, as the outputs are.
    source = output_source(run, check.baseline, check.candidate)
    base = timed_values(run, check.baseline, "accept_length", source)
    cand = timed_values(run, check.candidate, "accept_length", source)
    preconditions = [
        Precondition(f"{check.baseline}: accept lengths", len(base) > 0, f"{len(base)} {source} trial(s) with spec_verify_ct > 0"),
        Precondition(f"{check.candidate}: accept lengths", len(cand) > 0, f"{len(cand)} {source} trial(s) with spec_verify_ct > 0"),
    ]
    numbers = AcceptLengthNumbers(baseline=base, candidate=cand, rel_tolerance=check.rel_tolerance, min=check.min)
    blocked = _failed_preconditions(preconditions)
    if blocked:
        return _result(AcceptLengthResult, check, INCONCLUSIVE, blocked, numbers, preconditions)
    if check.min is not None:
        for name, values in ((check.baseline, base), (check.candidate, cand)):
            low = min(values)
            if low < check.min:
                return _result(AcceptLengthResult, check, FAIL, f"{name} accept length {low:.3f} is below the floor {check.min}",
                               numbers, preconditions)
    pairs = timed_pairs(run, check.baseline, check.candidate, "accept_length") if run.warm and source == "timed" else None
    by_request = _request_accept_pairs(run, check.baseline, check.candidate) if source == "profiled" else ([], [])
    if pairs is not None and len(pairs.repetitions) >= 2:
        # The blocks of a round carry the same prompts; different rounds, different prompts.
        decision = stats.paired_equivalence_within(pairs.baseline, pairs.candidate,
                                                   rel_tolerance=check.rel_tolerance, confidence=check.confidence)
        numbers = numbers.updated(pairs=len(pairs.repetitions))
    elif len(by_request[0]) >= 2:
        # Profiled passes: one per arm, the same prompts at the same indices: each request is a pair.
        decision = stats.paired_equivalence_within(*by_request, rel_tolerance=check.rel_tolerance,
                                                   confidence=check.confidence)
        numbers = numbers.updated(pairs=len(by_request[0]))
    else:
        decision = stats.equivalence_within(base, cand, rel_tolerance=check.rel_tolerance, confidence=check.confidence)
    est = decision.estimate
    numbers = numbers.updated(ratio=est.ratio, ci_low=est.ci_low, ci_high=est.ci_high, exact=decision.exact,
                              confidence=check.confidence)
    return _result(AcceptLengthResult, check, decision.verdict, decision.reason, numbers, preconditions)


def _request_accept_pairs(run: RunDir, baseline: str, candidate: str) -> tuple[list[float], list[float]]:
    """The accept length of each measured request of the profiled passes, paired across the arms by
    (pass, prompt index): (baseline's, candidate's), requests without a verify step left out."""
    def by_key(variant: str) -> dict[tuple[int | None, int], float]:
        return {(trial.record.repetition, row.index): row.completion_tokens / row.spec_verify_ct
                for trial in run.trials_of(variant, "profiled") for row in trial.requests
                if not row.error and row.spec_verify_ct and row.completion_tokens is not None}
    base, cand = by_key(baseline), by_key(candidate)
    keys = sorted(base.keys() & cand.keys(), key=lambda k: (k[0] or 0, k[1]))
    return [base[k] for k in keys], [cand[k] for k in keys]


def outputs_by_index(trial: StoredTrial) -> dict[int, list[int]]:
    """The output of each measured request that completed, by prompt index."""
    return {row.index: list(row.output_ids) for row in trial.requests
            if row.output_ids is not None and not row.error}


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def output_source(run: RunDir, baseline: str, candidate: str) -> TrialKind:
    """Which trials' outputs (and accept lengths) the comparison rules read: the timed ones, or the
    profiled passes when the run did not plan timed trials of both arms (a subset of the plan: a
    bisection step, a sweep's point, whose timed blocks are the candidate's alone; an exact-only
    run). Profiled passes send the same prompts in both arms (same request indices), and greedy
    outputs and their acceptance do not depend on the profiler."""
    planned = {(entry.variant, entry.kind) for entry in run.run.plan}
    if (baseline, "timed") in planned and (candidate, "timed") in planned:
        return "timed"
    return "profiled"


def evaluate_output_identity(run: RunDir, check: OutputIdentityCheck) -> OutputIdentityResult:
    source = output_source(run, check.baseline, check.candidate)
    base_trials = run.trials_of(check.baseline, source)
    cand_trials = run.trials_of(check.candidate, source)
    how = "" if source == "timed" else " (the run planned no timed trials of both arms)"
    preconditions = [
        Precondition("greedy decoding", run.scenario.workload.temperature == 0,
                     f"temperature {run.scenario.workload.temperature}: sampled outputs are not comparable"),
        Precondition(f"{check.baseline}: {source} trials", bool(base_trials), f"{len(base_trials)} completed{how}"),
        Precondition(f"{check.candidate}: {source} trials", bool(cand_trials), f"{len(cand_trials)} completed{how}"),
    ]
    numbers = OutputIdentityNumbers(compared=0, identical=0, fraction=None, first_difference=None, source=source)
    blocked = _failed_preconditions(preconditions)
    if blocked:
        return _result(OutputIdentityResult, check, INCONCLUSIVE, blocked, numbers, preconditions)
    # The reference output of each prompt: its first baseline trial (in the warm modes each block has
    # its own prompts, so the reference gathers every baseline trial).
    reference: dict[int, list[int]] = {}
    reference_trial: dict[int, str] = {}
    self_differences = 0  # greedy decoding must be deterministic, or a difference means nothing
    for trial in base_trials:
        for index, ids in outputs_by_index(trial).items():
            if index in reference:
                self_differences += int(ids != reference[index])
            else:
                reference[index], reference_trial[index] = ids, trial.name
    compared = identical = 0
    first: FirstDifference | None = None
    for trial in cand_trials:
        for index, ids in sorted(outputs_by_index(trial).items()):
            if index not in reference:
                continue
            compared += 1
            if ids == reference[index]:
                identical += 1
            elif first is None:
                pos = _first_difference(reference[index], ids)
                first = FirstDifference(
                    request_index=index, position=pos,
                    baseline_token=reference[index][pos] if pos < len(reference[index]) else None,
                    candidate_token=ids[pos] if pos < len(ids) else None,
                    baseline_trial=reference_trial[index], candidate_trial=trial.name,
                )
    fraction = identical / compared if compared else None
    numbers = numbers.updated(compared=compared, identical=identical, fraction=fraction, first_difference=first,
                              baseline_self_differences=self_differences)
    if fraction is None:
        return _result(OutputIdentityResult, check, INCONCLUSIVE, "no request completed in both variants: nothing to compare",
                       numbers, preconditions)
    if fraction < check.min_fraction:
        where = (f"; first: request {first.request_index} token {first.position} "
                 f"({first.baseline_token} vs {first.candidate_token})") if first else ""
        nondet = (f"; note: the baseline differs from itself in {self_differences} request(s)"
                  if self_differences else "")
        return _result(OutputIdentityResult, check, FAIL, f"{identical}/{compared} outputs identical ({fraction:.1%} < "
                       f"{check.min_fraction:.1%}){where}{nondet}", numbers, preconditions)
    return _result(OutputIdentityResult, check, PASS, f"{identical}/{compared} greedy outputs identical", numbers, preconditions)


@dataclass
class TimedPairs:
    """Timed values of two arms matched by repetition (the two trials of one interleaved block)."""

    repetitions: list[int]
    baseline: list[float]
    candidate: list[float]
    note: str  # why some repetitions were left out, or ""


def timed_pairs(run: RunDir, baseline: str, candidate: str, metric: SummaryMetric) -> TimedPairs:
    """Pair the ok timed trials of two arms by their `repetition` (trial.json).

    Both plan orders (abba, random) run every arm once per repetition, next to each other in time,
    so a repetition's two trials share the machine's slow drift. Only repetitions where both arms
    have an ok trial with a value for `metric` are used; a trial without a repetition number, or a
    repetition seen twice in one arm, cannot be paired and is left out.
    """
    def by_rep(variant: str) -> tuple[dict[int, float], int]:
        seen: dict[int, list[float]] = {}
        unusable = 0
        for trial in run.trials_of(variant, "timed"):
            value, rep = getattr(trial.summary, metric), trial.record.repetition
            if value is None or rep is None:
                unusable += value is not None
                continue
            seen.setdefault(rep, []).append(float(value))
        unusable += sum(len(v) for v in seen.values() if len(v) > 1)
        return {r: v[0] for r, v in seen.items() if len(v) == 1}, unusable

    b, bad_b = by_rep(baseline)
    c, bad_c = by_rep(candidate)
    reps = sorted(set(b) & set(c))
    unmatched = len(set(b) ^ set(c))
    notes = []
    if unmatched:
        notes.append(f"{unmatched} repetition(s) lack an ok trial with a TPOT in one arm")
    if bad_b or bad_c:
        notes.append(f"{bad_b + bad_c} trial(s) without a unique repetition number")
    return TimedPairs(reps, [b[r] for r in reps], [c[r] for r in reps], "; ".join(notes))


@dataclass
class TimedBlocks:
    """The warm modes' timed samples of two arms with what they are nested in."""

    variant: list[str]
    launch: list[str]
    time_block: list[int]  # the round (interleaved) or launch pair (sequential)
    repetition: list[int]
    tpot_ms: list[float]
    note: str


def timed_blocks(run: RunDir, baseline: str, candidate: str) -> TimedBlocks:
    """The TPOT samples (median per block) with their launch and round."""
    rows: list[tuple[str, str, int, int, float]] = []
    unusable = 0
    for variant in (baseline, candidate):
        for trial in run.trials_of(variant, "timed"):
            value, rep, launch = trial.summary.median_tpot_ms, trial.record.repetition, trial.record.launch
            if value is None:
                continue
            if rep is None or launch is None:
                unusable += 1
                continue
            block = rep if run.mode == "interleaved" else run.launch_number(launch)
            if block is None:
                unusable += 1
                continue
            rows.append((variant, launch, block, rep, float(value)))
    note = f"{unusable} block(s) without a launch or round" if unusable else ""
    return TimedBlocks(variant=[r[0] for r in rows], launch=[r[1] for r in rows], time_block=[r[2] for r in rows],
                       repetition=[r[3] for r in rows], tpot_ms=[r[4] for r in rows], note=note)


def _tpot_decision(run: RunDir, baseline: str, candidate: str, **kwargs: Any) -> tuple[Any, TpotData]:
    """The TPOT gain decision. Warm modes: the mixed model of blocks nested in launches. Restart
    mode: paired by repetition when >= MIN_PAIRS complete pairs exist, else unpaired (with the reason
    saying so). Returns (decision, numbers about the data and the mode)."""
    base = timed_values(run, baseline, "median_tpot_ms")
    cand = timed_values(run, candidate, "median_tpot_ms")
    pairs = timed_pairs(run, baseline, candidate, "median_tpot_ms")
    n = len(pairs.repetitions)
    numbers = TpotData(baseline_ms=base, candidate_ms=cand, pairs=n, paired=False, mode=run.mode,
                       pair_repetitions=pairs.repetitions,
                       pair_ratios=[c / b if b > 0 else None for b, c in zip(pairs.baseline, pairs.candidate)])
    if run.warm:
        blocks = timed_blocks(run, baseline, candidate)
        nested_kwargs = {k: v for k, v in kwargs.items() if k not in ("resamples", "seed")}
        decision, fit = stats.nested_tpot_gain_decision(
            blocks.tpot_ms, [v == candidate for v in blocks.variant], blocks.launch, blocks.time_block, **nested_kwargs)
        numbers = numbers.updated(nested=fit.to_dict(), blocks=[
            TimedBlock(variant=v, launch=lch, round=r, tpot_ms=x)
            for v, lch, r, x in zip(blocks.variant, blocks.launch, blocks.repetition, blocks.tpot_ms)])
        if blocks.note:
            decision = _with_reason(decision, f"{decision.reason} ({blocks.note})")
        return decision, numbers
    if n >= stats.MIN_PAIRS:
        paired_kwargs = {k: v for k, v in kwargs.items() if k not in ("resamples", "seed")}
        decision = stats.paired_tpot_gain_decision(pairs.baseline, pairs.candidate, **paired_kwargs)
        numbers = numbers.updated(paired=True)
        if pairs.note:
            decision = _with_reason(decision, f"{decision.reason} ({pairs.note})")
    else:
        decision = stats.tpot_gain_decision(base, cand, **kwargs)
        why = f"unpaired ({n} complete repetition pair(s), paired mode needs >= {stats.MIN_PAIRS})"
        if pairs.note:
            why += f" ({pairs.note})"
        decision = _with_reason(decision, f"{why}: {decision.reason}")
    return decision, numbers


def _tpot_preconditions(run: RunDir, numbers: TpotData, baseline: str, candidate: str) -> list[Precondition]:
    if numbers.nested is not None:
        fit = numbers.nested
        launches = fit.n_launches
        fewest = min(launches.values()) if launches else 0
        return [
            Precondition("launches per arm", fewest >= stats.MIN_LAUNCHES,
                         f"{launches.get('baseline', 0)} baseline and {launches.get('candidate', 0)} candidate launches "
                         f"with blocks (at least {stats.MIN_LAUNCHES} per arm: with one, a launch-to-launch difference "
                         "cannot be told from the change)"),
            Precondition("rounds", fit.n_time_blocks >= stats.MIN_PAIRS,
                         f"{fit.n_time_blocks} rounds or launch pairs with blocks "
                         f"(at least {stats.MIN_PAIRS} needed for a verdict)"
                         if run.mode == "interleaved" else f"{fit.n_blocks} blocks"),
        ]
    if numbers.paired:
        n = numbers.pairs
        return [Precondition("complete repetition pairs", n >= stats.MIN_PAIRS,
                             f"{n} repetition(s) with an ok timed trial of both arms "
                             f"(at least {stats.MIN_PAIRS} needed for a paired verdict)")]
    return [Precondition(f"{name}: timed trials", len(v) >= stats.MIN_TRIALS,
                         f"{len(v)} trial(s) with a TPOT (at least {stats.MIN_TRIALS} needed for a verdict)")
            for name, v in ((baseline, numbers.baseline_ms), (candidate, numbers.candidate_ms))]


def _with_reason(decision: Any, reason: str) -> Any:
    return dataclasses.replace(decision, reason=reason)


def look_levels(check: TpotGainCheck, fractions: list[float], spending: str) -> list[tuple[float, float]]:
    """(alpha, confidence) of the TPOT rule at each look of an adaptive run: each direction's claim
    (PASS, FAIL) at the one-sided nominal level of Lan-DeMets spending of alpha/2 (stats.sequential),
    and the interval at the matching two-sided confidence."""
    levels = stats.nominal_levels(fractions, check.alpha / 2, spending)  # type: ignore[arg-type]
    return [(2 * p, 1 - 2 * p) if p > 0 else (1e-12, 1 - 1e-12) for p in levels]


def tpot_rule_at(run: RunDir, check: TpotGainCheck, alpha: float) -> TpotGainResult:
    """The TPOT rule with its claims made at `alpha` (a look's level) and the interval to match."""
    return evaluate_tpot_gain(run, check.model_copy(update={"alpha": alpha, "confidence": 1 - alpha}), sequential=False)


def _sequential(run: RunDir, check: TpotGainCheck) -> tuple[TpotGainCheck, SequentialNumbers] | None:
    """An adaptive run's TPOT rule at its last look's level, with the looks for the report; None for
    a fixed design. The fractions come from run.json, so `harness check` recomputes the same level."""
    looks = [look for look in run.run.looks or [] if look.kind == "tpot" and look.fraction is not None]
    budget = run.scenario.trials.budget
    if not looks or budget is None:
        return None
    fractions = [look.fraction for look in looks if look.fraction is not None]
    levels = look_levels(check, fractions, budget.spending)
    alpha, confidence = levels[-1]
    info = SequentialNumbers(looks=len(looks), spending=budget.spending, fractions=fractions,
                             nominal_alphas=[a for a, _ in levels], alpha_overall=check.alpha)
    return check.model_copy(update={"alpha": alpha, "confidence": confidence}), info


def evaluate_tpot_gain(run: RunDir, check: TpotGainCheck, *, sequential: bool = True) -> TpotGainResult:
    adaptive = _sequential(run, check) if sequential else None
    if adaptive is not None:
        check, info = adaptive
    decision, data = _tpot_decision(run, check.baseline, check.candidate, min_gain=check.min_gain,
                                    confidence=check.confidence, alpha=check.alpha,
                                    resamples=check.resamples, seed=check.seed)
    if adaptive is not None:
        decision = _with_reason(decision, f"look {info.looks} of an adaptive run, nominal alpha "
                                          f"{check.alpha:.4f} ({info.spending} spending of {info.alpha_overall}): "
                                          f"{decision.reason}")
    est = decision.estimate
    numbers = TpotGainNumbers.model_validate({
        **data.model_dump(), **({"sequential": info} if adaptive is not None else {}),
        "ratio": est.ratio, "ci_low": est.ci_low,
        "ci_high": est.ci_high, "confidence": est.confidence, "gain": decision.gain, "p_value": decision.p_value,
        "min_gain": check.min_gain, "min_detectable_gain": decision.mde,
        "gain_needed_to_pass": decision.gain_needed_to_pass, "fail_kind": decision.fail_kind,
        "reliable": est.reliable, "method": est.method, "statistic": est.statistic,
    })
    preconditions = _tpot_preconditions(run, data, check.baseline, check.candidate)
    return _result(TpotGainResult, check, decision.verdict, decision.reason, numbers, preconditions)


def _pattern_time_per_cycle(run: RunDir, variant: str, pattern: str, regions: list[str]) -> float | None:
    """Mean time (us) of `pattern` in `regions` per EAGLE cycle (one target verify), rank 0."""
    time_us, cycles = 0.0, 0
    for trial in run.trials_of(variant, "profiled"):
        for facts in run.analysis_files(trial):
            if facts.rank != 0:
                continue
            for region in regions:
                counts = region_pattern_counts(facts, region, pattern)
                time_us += (counts.time_us if counts is not None else None) or 0.0
            verify = facts.region_times.get(CYCLE_REGION)
            cycles += verify.instances if verify is not None else 0
    return time_us / cycles if cycles else None


@dataclass
class RegionTimes:
    """A variant's time per EAGLE cycle in each region, from its profiled traces (rank 0: ranks
    run in parallel, so one rank's cycles are the cycles)."""

    per_cycle_us: dict[str, float]
    cycles: int
    basis: set[str]
    missing: list[str]  # asked-for regions that no profiled trace of the variant shows
    files: int
    files_without_times: int  # analyses written before region times existed
    # per file with cycles: region -> its outermost spans (start, duration), where the analysis
    # recorded them (CPU traces; None for a file without them)
    spans: list[dict[str, list[tuple[float, float]]] | None] = field(default_factory=list)


def region_times_per_cycle(run: RunDir, variant: str, regions: list[str]) -> RegionTimes:
    regions = list(dict.fromkeys(regions))
    totals = {r: 0.0 for r in regions}
    spans: list[dict[str, list[tuple[float, float]]] | None] = []
    seen: set[str] = set()
    cycles = files = without = 0
    basis: set[str] = set()
    for trial in run.trials_of(variant, "profiled"):
        for facts in run.analysis_files(trial):
            if facts.rank != 0:
                continue
            files += 1
            times = facts.region_times
            if not times:
                without += 1
                continue
            verify = times.get(CYCLE_REGION)
            if verify is None or not verify.instances:
                continue
            cycles += verify.instances
            file_spans: dict[str, list[tuple[float, float]]] | None = {}
            for region in regions:
                if region in times:
                    seen.add(region)
                    fact = times[region]
                    # robust: one spike of a busy CPU would dominate a mean over a few dozen cycles
                    totals[region] += fact.robust_time_us if fact.robust_time_us is not None else fact.time_us
                    basis.add(fact.basis)
                    if fact.spans_us and file_spans is not None:
                        file_spans[region] = [(float(a), float(b)) for a, b in fact.spans_us]
                    else:
                        file_spans = None
            spans.append(file_spans)
    per_cycle = {r: totals[r] / cycles for r in regions} if cycles else {}
    return RegionTimes(per_cycle, cycles, basis, [r for r in regions if r not in seen], files, without, spans)


def _span_ratios(times: RegionTimes, region: str, reference: str) -> np.ndarray:
    """Each span of `region` over the `reference` span nearest to it in time (the same cycle's):
    the machine's speed cancels cycle by cycle, not only between whole profiled trials."""
    out = []
    for file_spans in times.spans:
        assert file_spans is not None
        ref = file_spans[reference]  # by start, as the analysis writes them
        starts = np.array([a for a, _ in ref])
        durations = np.array([b for _, b in ref])
        for start, duration in file_spans[region]:
            i = int(np.searchsorted(starts, start))
            near = min((j for j in (i - 1, i) if 0 <= j < len(ref)), key=lambda j: abs(starts[j] - start))
            out.append(duration / durations[near])
    return np.array(out)


def _per_cycle_normalized(base: RegionTimes, cand: RegionTimes, regions: list[str], reference: str
                          ) -> dict[str, tuple[float, float]] | None:
    """Per region, (baseline, candidate) us per cycle on the baseline's scale, from span ratios to the
    reference region cycle by cycle; None when a profiled trace lacks the spans (a GPU trace, or an
    analysis written before spans were recorded)."""
    base_spans = [s for s in base.spans if s is not None]
    cand_spans = [s for s in cand.spans if s is not None]
    if not base.spans or not cand.spans or len(base_spans) < len(base.spans) or len(cand_spans) < len(cand.spans):
        return None
    if any(r not in s or not s[r] for s in base_spans + cand_spans for r in [*regions, reference]):
        return None
    # the baseline's reference time per instance: the unit both variants' ratios are turned back into
    ref_us = float(np.median([b for s in base_spans for _, b in s[reference]]))
    out = {}
    for region in regions:
        per = []
        for times, spans in ((base, base_spans), (cand, cand_spans)):
            per_instance = float(np.median(_span_ratios(times, region, reference))) * ref_us
            per.append(per_instance * sum(len(s[region]) for s in spans) / times.cycles)
        out[region] = (per[0], per[1])
    return out


def _explained_preconditions(check: ExplainedGainCheck, base_t: list[float], cand_t: list[float],
                             accept: list[float], base: RegionTimes, cand: RegionTimes) -> list[Precondition]:
    """What the explained gain relies on: timed trials, an accept length, and profiles with the
    rule's regions timed the same way in both variants."""
    reference = [check.reference_region] if check.reference_region else []
    preconditions = [
        Precondition("timed trials in both variants", bool(base_t) and bool(cand_t), f"{len(base_t)} and {len(cand_t)}"),
        Precondition(f"{check.baseline}: accept length", bool(accept), "needed to turn time per cycle into time per token"),
    ]
    for name, times in ((check.baseline, base), (check.candidate, cand)):
        preconditions += [
            Precondition(f"{name}: profiled traces with region times", times.files > 0 and not times.files_without_times,
                         f"{times.files} rank-0 trace analyses, {times.files_without_times} without region times "
                         "(analysis.json from an older harness: run again)"),
            Precondition(f"{name}: cycles in the profile", times.cycles > 0,
                         f"{times.cycles} target verifies (one per EAGLE cycle)"),
            Precondition(f"{name}: every region of the rule in the profile", not times.missing,
                         f"missing: {', '.join(times.missing)}" if times.missing else f"{', '.join(check.regions + reference)}"),
        ]
        if reference and not times.missing:
            preconditions.append(Precondition(f"{name}: reference region {reference[0]} took time",
                                              times.per_cycle_us.get(reference[0], 0.0) > 0, "0 us per cycle"))
    preconditions.append(Precondition(
        "both variants timed the same way", len(base.basis | cand.basis) <= 1,
        f"bases {sorted(base.basis)} and {sorted(cand.basis)} (GPU op time vs span wall time)"))
    return preconditions


def _region_savings(check: ExplainedGainCheck, base: RegionTimes, cand: RegionTimes
                    ) -> tuple[dict[str, RegionSaving], float, bool]:
    """Per region of the rule, the time per cycle in both variants and the saving, with the
    candidate's times on the baseline's scale; and that scale, and whether it was cycle by cycle.

    The reference region ran the same code in both, so any difference there is the machine (load,
    clocks) during the two profiled trials. Where the traces have spans, cycle by cycle: a CPU's
    speed moves within a trial too (by 10-20% over half a second on a shared VM), and the regions
    of one cycle share it."""
    reference = check.reference_region
    scale = base.per_cycle_us[reference] / cand.per_cycle_us[reference] if reference else 1.0
    wanted = list(dict.fromkeys(check.regions))
    normalized = _per_cycle_normalized(base, cand, wanted, reference) if reference else None
    pairs = normalized or {r: (base.per_cycle_us[r], cand.per_cycle_us[r] * scale) for r in wanted}
    regions = {r: RegionSaving(baseline_us_per_cycle=b, candidate_us_per_cycle=c, saving_us_per_cycle=b - c)
               for r, (b, c) in pairs.items()}
    return regions, scale, normalized is not None


def _explained_summary(check: ExplainedGainCheck, n: ExplainedGainNumbers) -> str:
    """What was measured and predicted, in one line (the start of the rule's reason)."""
    assert n.measured_saving_ms is not None and n.predicted_saving_ms is not None and n.regions is not None
    per_region = ", ".join(f"{r} {v.saving_us_per_cycle:+.1f}" for r, v in n.regions.items())
    removed = n.pattern_removed_us_per_cycle
    of_pattern = f"; {check.pattern} alone {removed:.1f} us" if removed is not None else ""
    if n.scaled == "per_cycle":
        scaled = (f"; both scaled cycle by cycle by {check.reference_region} "
                  f"(the candidate's trial x{n.candidate_scale:.3f} on the whole)")
    else:
        scaled = f"; candidate scaled x{n.candidate_scale:.3f} by {check.reference_region}" if n.scaled else ""
    return (f"measured TPOT saving {n.measured_saving_ms * 1000:.1f} us/token; the profiles predict "
            f"{n.predicted_saving_ms * 1000:.1f} us/token ({n.saving_us_per_cycle:.1f} us less per cycle in the "
            f"regions [{per_region}]{of_pattern}{scaled} / {n.tokens_per_cycle:.2f} tokens)")


def _explained_verdict(check: ExplainedGainCheck, n: ExplainedGainNumbers,
                       preconditions: list[Precondition]) -> ExplainedGainResult:
    """The equivalence test on measured/predicted against the rule's bounds."""
    summary = _explained_summary(check, n)

    def result(verdict: Verdict, reason: str) -> ExplainedGainResult:
        return _result(ExplainedGainResult, check, verdict, reason, n, preconditions)

    if n.predicted_saving_ms is None or n.predicted_saving_ms <= 0:
        return result(INCONCLUSIVE, f"{summary}: the regions are not faster in the candidate, so there is "
                      "no saving to explain")
    assert n.ratio is not None and n.ratio_ci is not None  # predicted > 0
    ratio_lo, ratio_hi = n.ratio_ci
    assert ratio_lo is not None and ratio_hi is not None
    summary += f"; ratio {n.ratio:.2f} [{ratio_lo:.2f}, {ratio_hi:.2f}] ({check.confidence:.0%})"
    low, high = check.min_ratio, check.max_ratio
    if low is not None and ratio_hi < low:
        return result(FAIL, f"{summary} < {low}: the profiles' saving does not reach TPOT")
    if high is not None and ratio_lo > high:
        return result(FAIL, f"{summary} > {high}: TPOT gained more than the profiles explain")
    bounds = " and ".join(b for b in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "") if b)
    if (low is None or ratio_lo >= low) and (high is None or ratio_hi <= high):
        return result(PASS, f"{summary}: inside {bounds}" if bounds else summary)
    return result(INCONCLUSIVE, f"{summary}: the interval straddles {bounds}; more repetitions narrow it")


def evaluate_explained_gain(run: RunDir, check: ExplainedGainCheck) -> ExplainedGainResult:
    """Does the TPOT saving match what the profiles show changed in the regions of the change?

    Prediction: the drop in the regions' time per EAGLE cycle, baseline minus candidate (whatever
    ran there: the removed ops, and the ops that replace them; the candidate's times scaled by
    the reference region, cycle by cycle where the traces have spans), divided by the tokens one
    cycle emits (the accept length). Measured:
    the baseline's median TPOT times (1 - TPOT ratio), with the interval of that ratio (paired
    when the TPOT rule would pair). The verdict is an equivalence test on measured/predicted:
    PASS when its whole interval lies inside the bounds, FAIL when it lies outside, else
    INCONCLUSIVE. The prediction is taken as exact: its noise is what the bounds' width absorbs."""
    base_t = timed_values(run, check.baseline, "median_tpot_ms")
    cand_t = timed_values(run, check.candidate, "median_tpot_ms")
    accept = timed_values(run, check.baseline, "accept_length")
    reference = [check.reference_region] if check.reference_region else []
    base = region_times_per_cycle(run, check.baseline, [*check.regions, *reference])
    cand = region_times_per_cycle(run, check.candidate, [*check.regions, *reference])
    preconditions = _explained_preconditions(check, base_t, cand_t, accept, base, cand)
    blocked = _failed_preconditions(preconditions)
    if blocked:
        return _result(ExplainedGainResult, check, INCONCLUSIVE, blocked, ExplainedGainNumbers(), preconditions)
    decision, _ = _tpot_decision(run, check.baseline, check.candidate, min_gain=0.0, confidence=check.confidence)
    est = decision.estimate
    interval_ok = est.ratio is not None and est.ci_low is not None and est.ci_high is not None and est.reliable
    preconditions.append(Precondition("TPOT ratio with an interval", interval_ok,
                                      est.reason or f"{est.method}: {est.ratio} [{est.ci_low}, {est.ci_high}]"))
    if not interval_ok:
        return _result(ExplainedGainResult, check, INCONCLUSIVE, _failed_preconditions(preconditions) or "no TPOT interval",
                       ExplainedGainNumbers(), preconditions)
    base_tpot = float(np.median(base_t))
    measured, measured_lo, measured_hi = (base_tpot * (1 - r) for r in (est.ratio, est.ci_high, est.ci_low))
    tokens_per_cycle = float(np.median(accept))
    regions, scale, per_cycle = _region_savings(check, base, cand)
    saving_us = sum(r.saving_us_per_cycle for r in regions.values())
    predicted = saving_us / tokens_per_cycle / 1000.0
    ratio, ratio_lo, ratio_hi = ((m / predicted if predicted > 0 else None) for m in (measured, measured_lo, measured_hi))
    base_pattern = _pattern_time_per_cycle(run, check.baseline, check.pattern, check.regions)
    cand_pattern = _pattern_time_per_cycle(run, check.candidate, check.pattern, check.regions)
    pattern_removed = (base_pattern - cand_pattern) if base_pattern is not None and cand_pattern is not None else None
    numbers = ExplainedGainNumbers(
        measured_saving_ms=measured, measured_ci_ms=[measured_lo, measured_hi], predicted_saving_ms=predicted,
        ratio=ratio, ratio_ci=[ratio_lo, ratio_hi], confidence=check.confidence, paired=est.method,
        saving_us_per_cycle=saving_us, tokens_per_cycle=tokens_per_cycle, regions=regions,
        pattern_removed_us_per_cycle=pattern_removed, basis=sorted(base.basis | cand.basis),
        profiled_cycles={"baseline": base.cycles, "candidate": cand.cycles},
        reference_region=check.reference_region, candidate_scale=scale,
        scaled=("per_cycle" if per_cycle else "per_trial") if reference else None,
        min_ratio=check.min_ratio, max_ratio=check.max_ratio)
    return _explained_verdict(check, numbers, preconditions)


def informational(check: Any) -> list[str] | None:
    """The unset bound fields of a rule that has no bound at all (so it cannot fail), else None."""
    fields = OPTIONAL_BOUNDS.get(check.kind)
    if fields and all(getattr(check, f) is None for f in fields):
        return list(fields)
    return None


def _as_information(result: RuleResult, unset: list[str]) -> RuleResult:
    """A rule that cannot fail, reported for its numbers only: INFO, whatever it found."""
    result.reason = f"informational (no bound: set {' or '.join(unset)} to judge it): {result.reason}"
    result.verdict = INFO
    return result


def _as_not_run(result: RuleResult) -> RuleResult:
    """A timing rule of an exact-only run (`trials.only: exact`): it had no timed rounds to judge."""
    result.reason = "not run: the run was exact-only (trials.only: exact, harness run --only exact): no timed rounds"
    result.verdict = NOT_RUN
    return result


EVALUATORS: dict[str, Callable[[RunDir, Any], RuleResult]] = {
    "kernel_count": evaluate_kernel_count,
    "accept_length": evaluate_accept_length,
    "output_identity": evaluate_output_identity,
    "tpot_gain": evaluate_tpot_gain,
    "explained_gain": evaluate_explained_gain,
}


def evaluate_aa_noise(run: RunDir) -> AaNoiseResult:
    """A/A: both arms run the same variant. Any PASS or FAIL of the TPOT rule is a false verdict."""
    tpot_rules = [c for c in run.scenario.checks if isinstance(c, TpotGainCheck)]
    min_gain = tpot_rules[0].min_gain if tpot_rules else 0.01
    check = TpotGainCheck(name="aa_noise_floor", kind="tpot_gain", min_gain=min_gain,
                          description="A/A: the TPOT rule on two arms of the same variant",
                          **({"alpha": tpot_rules[0].alpha, "confidence": tpot_rules[0].confidence} if tpot_rules else {}))
    # An adaptive run claims at its last look's level: the A/A answer is the one its looks gave.
    adaptive = _sequential(run, check)
    if adaptive is not None:
        check = adaptive[0]
    result = _aa_noise_at(run, check)
    if adaptive is not None:
        result.reason = f"look {adaptive[1].looks} of an adaptive run, nominal alpha {check.alpha:.4f}: {result.reason}"
    return result


def _aa_noise_at(run: RunDir, check: TpotGainCheck) -> AaNoiseResult:
    """The A/A rule with its claims at `check`'s level."""
    min_gain = check.min_gain
    decision, data = _tpot_decision(run, "baseline", "candidate", min_gain=min_gain, alpha=check.alpha,
                                    confidence=check.confidence)
    a, b = data.baseline_ms, data.candidate_ms
    if data.nested is not None:
        return _aa_nested(check, decision, data)
    if data.paired:
        pairs = timed_pairs(run, "baseline", "candidate", "median_tpot_ms")
        floor = stats.noise_floor(pairs.baseline, pairs.candidate, min_gain=min_gain, paired=True)
    else:
        floor = stats.noise_floor(a, b, min_gain=min_gain)
    noise = NoiseFloorNumbers.model_validate(floor.to_dict())
    numbers = AaNoiseNumbers(a_ms=a, b_ms=b, decision=GainDecisionNumbers.model_validate(decision.to_dict()),
                             noise=noise, min_gain=min_gain, paired=data.paired, pairs=data.pairs,
                             pair_ratios=data.pair_ratios)

    def result(verdict: Verdict, reason: str) -> AaNoiseResult:
        return AaNoiseResult(name=check.name, description=check.description, verdict=verdict, reason=reason,
                             params=_params(check), numbers=numbers)

    # With min_gain > 0, "gain below min_gain" is the right answer on A/A data; only a PASS or a
    # "slower" FAIL is false.
    if decision.verdict == PASS or decision.fail_kind == "slower":
        return result(FAIL, f"false {decision.verdict} on A/A data: {decision.reason}")
    if not data.paired and (len(a) < stats.MIN_TRIALS or len(b) < stats.MIN_TRIALS):
        return result(INCONCLUSIVE, f"too few timed trials ({len(a)} and {len(b)})")
    return result(PASS, _aa_summary(noise, min_gain, data.pairs if data.paired else len(a)))


def _aa_nested(check: TpotGainCheck, decision: Any, data: TpotData) -> AaNoiseResult:
    """A/A in a warm mode: the nested model's verdict must be neither PASS nor FAIL "slower"; the
    spreads it found (launch to launch, block to block) and the smallest detectable gain are the
    noise floor."""
    fit = data.nested
    assert fit is not None
    numbers = AaNoiseNumbers(a_ms=data.baseline_ms, b_ms=data.candidate_ms,
                             decision=GainDecisionNumbers.model_validate(decision.to_dict()), min_gain=check.min_gain,
                             mode=data.mode, nested=fit, blocks=data.blocks, pairs=data.pairs,
                             pair_ratios=data.pair_ratios, paired=False)

    def result(verdict: Verdict, reason: str) -> AaNoiseResult:
        return AaNoiseResult(name=check.name, description=check.description, verdict=verdict, reason=reason,
                             params=_params(check), numbers=numbers)

    if decision.verdict == PASS or decision.fail_kind == "slower":
        return result(FAIL, f"false {decision.verdict} on A/A data: {decision.reason}")
    if not decision.estimate.reliable:
        return result(INCONCLUSIVE, decision.reason)
    parts = [f"{fit.n_blocks} blocks in {sum(fit.n_launches.values())} launches",
             f"block-to-block sd {fit.sd_block:.2%}"]
    if fit.sd_launch is not None:
        parts.append(f"launch-to-launch sd {fit.sd_launch:.2%} (F test p={fit.launch_p:.2g}"
                     f"{', pooled' if fit.pooled else ''})")
    if decision.mde is not None:
        parts.append(f"smallest detectable gain {decision.mde:.2%}")
    return result(PASS, "no false verdict; " + "; ".join(parts))


def _aa_summary(floor: NoiseFloorNumbers, min_gain: float, n: int) -> str:
    parts = []
    if floor.paired:
        parts.append(f"paired over {n} repetitions")
    if floor.cv is not None:
        parts.append(f"TPOT noise (CV of trial medians) {floor.cv:.2%}")
    if floor.cv_within_pair is not None:
        parts.append(f"within a repetition {floor.cv_within_pair:.2%}")
    if floor.mde is not None:
        unit = "repetitions" if floor.paired else "trials/arm"
        parts.append(f"smallest detectable gain with {n} {unit} {floor.mde:.2%}")
    if floor.repetitions_needed is not None:
        parts.append(f"repetitions needed for min_gain {min_gain:.1%}: {floor.repetitions_needed}")
    return "no false verdict; " + "; ".join(parts)


def damage(run: RunDir) -> list[str]:
    """What is missing from a run directory that says it is complete: planned trials without a
    trial.json, ok trials whose requests.jsonl lacks measured requests their summary counts. A run
    cut short on disk (deleted, truncated at a line) must not pass on what is left."""
    problems = []
    recorded = {t.dir.resolve() for t in run.trials}
    for entry in run.run.plan:
        if entry.dir and (run.path / entry.dir).resolve() not in recorded:
            problems.append(f"planned trial {entry.dir} has no trial.json")
    for trial in run.trials:
        if not trial.ok:
            continue
        expected = trial.summary.requests
        if not (trial.dir / "requests.jsonl").exists():
            problems.append(f"{trial.name}: requests.jsonl is missing")
        elif expected is not None and len(trial.requests) != expected:
            problems.append(f"{trial.name}: requests.jsonl holds {len(trial.requests)} measured request(s), "
                            f"trial.json counts {expected:g}")
    return problems


def evaluate_run(run: RunDir) -> CheckResults:
    rules: list[RuleResult] = []
    if not run.complete:
        rules.append(ValidityResult(name="run_complete", description="every planned trial ran", verdict=INCONCLUSIVE,
                                    reason=f"the run is {run.run.status}: {run.run.error or 'not every trial ran'}",
                                    params={}, numbers=ValidityNumbers()))
    if problems := damage(run):
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        rules.append(ValidityResult(name="run_intact", description="every recorded piece of the run is on disk",
                                    verdict=INCONCLUSIVE, reason=f"{problems[0]}{more}", params={},
                                    numbers=ValidityNumbers(problems=problems)))
    if run.aa:
        rules.append(evaluate_aa_noise(run))
        for check in run.scenario.checks:
            if isinstance(check, (AcceptLengthCheck, OutputIdentityCheck)):
                rules.append(EVALUATORS[check.kind](run, check))
    else:
        exact_only = run.scenario.trials.only == "exact"
        for check in run.scenario.checks:
            result = EVALUATORS[check.kind](run, check)
            unset = informational(check)
            if exact_only and is_timing_kind(check.kind):
                result = _as_not_run(result)
            rules.append(_as_information(result, unset) if unset and result.verdict != NOT_RUN else result)
    variants = {
        name: {
            "timed_trials": [t.name for t in run.trials_of(name, "timed")],
            "profiled_trials": [t.name for t in run.trials_of(name, "profiled")],
            "median_tpot_ms": timed_values(run, name, "median_tpot_ms"),
            "accept_length": timed_values(run, name, "accept_length"),
        }
        for name in sorted({t.variant for t in run.trials} | set(run.scenario.variants))
    }
    verdict = overall_verdict([r.verdict for r in rules])
    return CheckResults(scenario=run.scenario.name, run_dir=str(run.path), aa=run.aa, run_status=run.run.status,
                        verdict=verdict, exit_code=verdict.exit_code, variants=variants, rules=rules)


def write_results(run_dir: Path, results: CheckResults) -> Path:
    path = Path(run_dir) / "results.json"
    write_json_atomic(path, results.model_dump())
    return path


def check_run_dir(run_dir: str | Path, *, scenario_path: str | Path | None = None) -> CheckResults:
    """Evaluate a stored run (optionally under another scenario's rules) and write results.json."""
    run = load_run_dir(run_dir, scenario_path=scenario_path)
    results = evaluate_run(run)
    write_results(run.path, results)
    return results
