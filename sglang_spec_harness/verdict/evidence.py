"""The evidence the rules judge, pulled out of a run directory: timed values (alone, paired by
repetition, in the warm modes' blocks), outputs by request, count rows of a region, region times per
EAGLE cycle. Plain values, no verdicts: the rule families (`rules/`) and `harness compare`
(`compare.py`) judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sglang_spec_harness.rundir import RunDir, StoredTrial, Vocabulary
from sglang_spec_harness.traces.schema import CountRow, FileAnalysis
from sglang_spec_harness.vocabulary import CYCLE_REGION

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


def pattern_time_per_cycle(run: RunDir, variant: str, pattern: str, regions: list[str]) -> float | None:
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


# ---- timed trials ----------------------------------------------------------------------------------

# The per-trial numbers the rules take from the timed trials' summaries (trial.json `summary`).
SummaryMetric = Literal["median_tpot_ms", "accept_length"]
TrialKind = Literal["timed", "profiled"]


def timed_values(run: RunDir, variant: str, metric: SummaryMetric, kind: TrialKind = "timed") -> list[float]:
    values = (getattr(trial.summary, metric) for trial in run.trials_of(variant, kind))
    return [float(value) for value in values if value is not None]


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


# ---- outputs -----------------------------------------------------------------------------------------


def outputs_by_index(trial: StoredTrial) -> dict[int, list[int]]:
    """The output of each measured request that completed, by prompt index."""
    return {row.index: list(row.output_ids) for row in trial.requests
            if row.output_ids is not None and not row.error}


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


def request_accept_pairs(run: RunDir, baseline: str, candidate: str) -> tuple[list[float], list[float]]:
    """The accept length of each measured request of the profiled passes, paired across the arms by
    (pass, prompt index): (baseline's, candidate's), requests without a verify step left out."""
    def by_key(variant: str) -> dict[tuple[int | None, int], float]:
        return {(trial.record.repetition, row.index): row.completion_tokens / row.spec_verify_ct
                for trial in run.trials_of(variant, "profiled") for row in trial.requests
                if not row.error and row.spec_verify_ct and row.completion_tokens is not None}
    base, cand = by_key(baseline), by_key(candidate)
    keys = sorted(base.keys() & cand.keys(), key=lambda k: (k[0] or 0, k[1]))
    return [base[k] for k in keys], [cand[k] for k in keys]


# ---- what a variant returned, and the vocabulary it was served from ------------------------------


@dataclass(frozen=True)
class ReturnedOutput:
    """One measured request's returned tokens and text (None: the server returned no text)."""

    trial: str
    request_index: int
    output_ids: list[int]
    text: str | None


def returned_outputs(run: RunDir, variant: str) -> list[ReturnedOutput]:
    """Every completed trial's measured requests that returned tokens, timed and profiled alike."""
    found: list[ReturnedOutput] = []
    for trial in run.trials:
        if trial.variant != variant or not trial.ok:
            continue
        for row in trial.requests:
            if row.error is None and row.output_ids:
                found.append(ReturnedOutput(trial.name, row.index, list(row.output_ids), row.text))
    return found


def served_vocabularies(run: RunDir, variant: str) -> list[Vocabulary | None]:
    """The vocabulary each of the variant's completed trials recorded of its server (None: unknown;
    an empty list: the run recorded none, a run before vocabularies were recorded)."""
    return [t.record.vocabulary if "vocabulary" in t.record.model_fields_set else None
            for t in run.trials if t.variant == variant and t.ok and "vocabulary" in t.record.model_fields_set]
