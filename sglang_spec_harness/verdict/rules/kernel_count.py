"""kernel_count: matches of a pattern per replay (or in total) of a region's CUDA graphs, in every
profiled trace (every rank) of the rule's variants, against one bound. A zero counts only where the
baseline shows the pattern, and only from traces that recorded the replays' kernels."""

from __future__ import annotations

from collections.abc import Callable

from sglang_spec_harness.rundir import Precondition, RunDir, StoredTrial
from sglang_spec_harness.rundir.models import KernelCountResult
from sglang_spec_harness.rundir.rule_numbers import KernelCountNumbers, KernelObservation
from sglang_spec_harness.scenario import KernelCountRule
from sglang_spec_harness.traces.schema import FileAnalysis
from sglang_spec_harness.verdict.evidence import eager_pattern_total, region_pattern_counts
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS


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


def _bound(rule: KernelCountRule) -> tuple[str, int, Callable[[float], bool]]:
    equals, at_most, at_least = rule.equals, rule.at_most, rule.at_least
    if equals is not None:
        return "==", equals, lambda x: x == equals
    if at_most is not None:
        return "<=", at_most, lambda x: x <= at_most
    if at_least is not None:
        return ">=", at_least, lambda x: x >= at_least
    raise ValueError(f"rule {rule.name!r}: give exactly one bound: equals, at_most or at_least")


def expects_absence(rule: KernelCountRule) -> bool:
    return rule.equals == 0 or rule.at_most == 0


def _observe(run: RunDir, rule: KernelCountRule, variant: str, trial: StoredTrial, facts: FileAnalysis
             ) -> tuple[list[Precondition], KernelObservation | None]:
    """One trace file's (rank's) count of the rule's pattern, with what the count relies on; no
    observation where the file cannot give one."""
    op, bound, holds = _bound(rule)
    where = f"{trial.name} rank {facts.rank}"
    preconditions = _trace_validity(facts, max_unlabelled_fraction=run.scenario.validity.max_unlabelled_fraction,
                                    where=where)
    counts = region_pattern_counts(facts, rule.region, rule.pattern)
    units = counts.replays if counts is not None else 0
    unit = counts.unit if counts is not None else "graph_launch"
    counted = {row.pattern for row in facts.counts}
    if counts is None and counted and rule.pattern not in counted:
        # Not a zero: the analysis never looked for it (`harness check --scenario` with a new pattern).
        preconditions.append(Precondition(
            f"{where}: {rule.pattern} counted", False,
            f"the stored analysis counted {', '.join(sorted(counted))} only, not {rule.pattern!r}: "
            "the scenario that ran did not name it; run the scenario again with the pattern"))
        return preconditions, None
    if counts is not None and not counts.known:
        preconditions.append(Precondition(f"{where}: {rule.pattern} countable in {rule.region}", False,
                                          counts.note or "the trace cannot support this count"))
        return preconditions, None
    preconditions.append(Precondition(f"{where}: region {rule.region} present", units > 0,
                                      f"{units} {unit.replace('_', ' ')}(s) labelled {rule.region}"))
    if facts.validity.kernels > 0:
        preconditions.append(Precondition(
            f"{where}: {rule.region} runs as CUDA graphs", unit == "graph_launch",
            f"counting unit is {unit!r}: no graph launches in the region"))
    if counts is None or not units:
        return preconditions, None
    value = counts.total if rule.per == "total" else (
        counts.per_replay_max if op in ("==", "<=") else counts.per_replay_min)
    if op == "==" and rule.per == "replay":
        ok = counts.per_replay_min == bound and counts.per_replay_max == bound
    else:
        ok = value is not None and holds(value)  # set whenever the region has units
    eager = eager_pattern_total(facts, rule.region, rule.pattern)
    if expects_absence(rule) and eager:
        ok = False
    return preconditions, KernelObservation(
        variant=variant, trial=trial.name, rank=facts.rank, region=rule.region, pattern=rule.pattern, unit=unit,
        replays=units, total=counts.total, per_replay_min=counts.per_replay_min,
        per_replay_max=counts.per_replay_max, eager_total=eager, time_us=counts.time_us, ok=bool(ok))


def _baseline_shows_pattern(run: RunDir, rule: KernelCountRule) -> Precondition | None:
    """A zero means nothing unless the analysis can see the pattern: the baseline must show it
    (None where the rule expects a count, or there is no separate baseline to ask)."""
    baseline = "baseline" if "baseline" in run.scenario.variants else None
    if not expects_absence(rule) or not baseline or baseline in rule.variants or run.aa:
        return None
    seen = 0
    for trial in run.trials_of(baseline, "profiled"):
        for facts in run.analysis_files(trial):
            counts = region_pattern_counts(facts, rule.region, rule.pattern)
            seen += ((counts.total if counts is not None else None) or 0) + eager_pattern_total(
                facts, rule.region, rule.pattern)
    return Precondition(f"{baseline}: shows {rule.pattern} in {rule.region}", seen > 0,
                        f"{seen} match(es) in the baseline's profiled trials; "
                        "zero in the candidate proves nothing if the baseline shows none either")


def evaluate_kernel_count(run: RunDir, rule: KernelCountRule) -> KernelCountResult:
    op, bound, _ = _bound(rule)
    preconditions: list[Precondition] = []
    observations: list[KernelObservation] = []
    for variant in rule.variants:
        trials = run.trials_of(variant, "profiled")
        preconditions.append(Precondition(f"{variant}: profiled trial", bool(trials),
                                          f"{len(trials)} profiled trial(s) completed"))
        for trial in trials:
            files = run.analysis_files(trial)
            preconditions.append(Precondition(f"{trial.name}: trace analysis", bool(files),
                                              f"{len(files)} trace file(s) analysed"))
            for facts in files:
                found, observation = _observe(run, rule, variant, trial, facts)
                preconditions += found
                if observation is not None:
                    observations.append(observation)
    if (baseline := _baseline_shows_pattern(run, rule)) is not None:
        preconditions.append(baseline)
    numbers = KernelCountNumbers(observations=observations)
    blocked = failed_preconditions(preconditions)
    failing = [o for o in observations if not o.ok]
    what = "per replay" if rule.per == "replay" else "in total"
    if failing and not (op == ">=" and all(o.total == 0 for o in failing)):
        o = failing[0]
        got = o.total if rule.per == "total" else f"{o.per_replay_min}..{o.per_replay_max}"
        eager_note = (f" (and {o.eager_total} launched eagerly in the region, outside its graph replays)"
                      if o.eager_total else "")
        return rule_result(KernelCountResult, rule, FAIL, f"{o.variant} {o.trial} rank {o.rank}: {rule.pattern} in "
                           f"{rule.region} {what} = {got}{eager_note}, expected {op} {bound}", numbers, preconditions)
    if blocked:
        return rule_result(KernelCountResult, rule, INCONCLUSIVE, blocked, numbers, preconditions)
    if failing:  # a lower bound met by nothing at all: blind analysis or a baseline that is not one
        o = failing[0]
        return rule_result(KernelCountResult, rule, INCONCLUSIVE, f"{o.variant} {o.trial}: no {rule.pattern} at all in "
                           f"{rule.region}: the analysis may be blind, or this variant is not what it claims",
                           numbers, preconditions)
    totals = sorted({o.total for o in observations if o.total is not None})
    return rule_result(KernelCountResult, rule, PASS, f"{rule.pattern} in {rule.region} {what} {op} {bound} in "
                       f"{len(observations)} trace(s) of {', '.join(rule.variants)} (totals {totals})",
                       numbers, preconditions)
