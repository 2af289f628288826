"""`analyze_traces`: read trace files, attribute, count; the result as one `TraceAnalysis` (the
stored document). The tables computed from a document, and `AnalyzedTraces`: the document with the
trace tables it came from, for the frames that read the traces themselves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, get_args

import pandas as pd
from sglang_spec_harness.traces import counting
from sglang_spec_harness.traces.attribution import Attribution, attribute
from sglang_spec_harness.traces.functions import combine_region_functions, region_functions
from sglang_spec_harness.traces.model import TraceTables
from sglang_spec_harness.traces.names import RANK_IN_FILE_NAME
from sglang_spec_harness.traces.patterns import NamedPattern, count_patterns
from sglang_spec_harness.traces.readers import read_trace
from sglang_spec_harness.traces.regions import RegionTable, region_table
from sglang_spec_harness.vocabulary import NO_REGION
from sglang_spec_harness.traces.schema import (
    CombinedAnalysis,
    CountRow,
    FileAnalysis,
    OpTable,
    PatternTotal,
    RankSource,
    RegionRule,
    Subject,
    TraceAnalysis,
    Unit,
    Validity,
)
from sglang_spec_harness.traces.views import trace_views


_SUBJECT_CHOICES: tuple[Subject | Literal["auto"], ...] = ("auto", "gpu_ops", "cpu_ops")
Key = TypeVar("Key", int, str)  # a histogram's or a name count's keys


@dataclass(frozen=True)
class FileTables:
    """What one file's analysis was computed from (kept in memory, not in the JSON)."""

    trace: TraceTables
    attribution: Attribution
    items: counting.Items


# -- the tables of a stored analysis (a document loaded from JSON has all it needs) --------------


def kernels_per_launch_frame(analysis: TraceAnalysis) -> pd.DataFrame:
    """kernels in a graph launch -> launches, per file."""
    rows = [{"file": f.path, "rank": f.rank, "kernels": k, "launches": n}
            for f in analysis.files for k, n in sorted((f.kernels_per_graph_launch or {}).items())]
    return pd.DataFrame(rows, columns=["file", "rank", "kernels", "launches"])


def op_table_frame(analysis: TraceAnalysis) -> pd.DataFrame:
    """Every op name per region and unit, one row each (file = "combined" for all files): region,
    unit, replays, known, name, total, per_replay_min/median/max, time_us."""
    columns = ["file", "rank", "region", "unit", "replays", "known", "name", "total", "per_replay_min",
               "per_replay_median", "per_replay_max", "time_us"]
    sources: list[tuple[str, int | None, list[OpTable]]] = [(f.path, f.rank, f.op_tables) for f in analysis.files]
    sources.append(("combined", None, analysis.combined.op_tables))
    rows = [(path, rank, t.region, t.unit, t.replays, t.known, op.name, op.total, op.per_replay_min,
             op.per_replay_median, op.per_replay_max, op.time_us)
            for path, rank, tables in sources for t in tables for op in t.rows()]
    return pd.DataFrame(rows, columns=columns)


# -- the tables that read the traces themselves ---------------------------------------------------


@dataclass(frozen=True)
class AnalyzedTraces:
    """An analysis together with the trace tables it was computed from, in memory only (what
    `analyze_traces_with_tables` returns): the frames of every launch, op, span and instance read
    those tables, which the stored document (`analysis`) does not hold."""

    analysis: TraceAnalysis
    tables: tuple[FileTables, ...]

    def launches_frame(self) -> pd.DataFrame:
        """Every launch: name, pid, tid, ts, dur (CPU call), is_graph, region, label (the span that
        gave the region), kernels, gpu_ops, gpu_start, gpu_end, and `count:NAME` per pattern."""
        frames = []
        for file, tables in zip(self.analysis.files, self.tables):
            launches = tables.attribution.launches.drop(columns=["span"])
            for name, hit in tables.items.match.items():
                ops = tables.items.frame
                per_launch = pd.Series(hit, index=ops.index).groupby(ops["launch"].to_numpy()).sum()
                launches[f"count:{name}"] = per_launch.reindex(range(len(launches)), fill_value=0).to_numpy()
            frames.append(launches.assign(file=file.path, rank=file.rank))
        return _concat(frames)

    def ops_frame(self) -> pd.DataFrame:
        """Every counted op (GPU ops, or CPU ops on a CPU trace) with ts, dur, launch, is_graph,
        region: enough to draw a timeline of one cycle."""
        frames = []
        for file, tables in zip(self.analysis.files, self.tables):
            frame = tables.items.frame.copy()
            spans = tables.attribution.spans
            frame["span_name"] = frame["span"].map(spans["name"].astype(object)) if len(spans) else None
            for name, hit in tables.items.match.items():
                frame[f"match:{name}"] = hit
            frames.append(frame.assign(file=file.path, rank=file.rank))
        return _concat(frames)

    def instances_frame(self, region: str, pattern: str, unit: str = "graph_launch") -> pd.DataFrame:
        """The instances behind `analysis.count(region, pattern, unit)`'s per-replay figures, one row
        each: file, rank, ts (its CPU start) and `count` (the matches of `pattern` in it); file by
        file, by start. graph_launch: the region's graph launches that recorded GPU ops; span: its spans."""
        if pattern not in self.analysis.patterns:
            raise ValueError(f"instances_frame: no count pattern {pattern!r} in this analysis "
                             f"({', '.join(self.analysis.patterns)})")
        frames = [counting.instance_counts(t.attribution, t.items, pattern, region, unit).assign(file=f.path, rank=f.rank)
                  for f, t in zip(self.analysis.files, self.tables)]
        return _concat(frames)[["file", "rank", "ts", "count"]]

    def spans_frame(self) -> pd.DataFrame:
        """The region span instances: name, kind, pid, tid, ts, dur, region."""
        return _concat([t.attribution.spans.assign(file=f.path, rank=f.rank)
                        for f, t in zip(self.analysis.files, self.tables)])


def analyze_traces(
    paths: Sequence[str | Path],
    patterns: Mapping[str, str] | Iterable[NamedPattern] | None = None,
    regions: RegionTable | Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    *,
    replace_default_regions: bool = False,
    subject: str = "auto",
) -> TraceAnalysis:
    """Analyze trace files (one per TP rank, or any set): the document, as analysis.json stores it.

    patterns: name -> regex to count (default: `softmax`). regions: a RegionTable used as is, or
    name -> regex rules put in front of the default SGLang table (alone with
    `replace_default_regions`). subject: "auto" (GPU ops if the trace has any, else CPU ops),
    "gpu_ops" or "cpu_ops".
    """
    return analyze_traces_with_tables(paths, patterns, regions, replace_default_regions=replace_default_regions,
                                      subject=subject).analysis


def analyze_traces_with_tables(
    paths: Sequence[str | Path],
    patterns: Mapping[str, str] | Iterable[NamedPattern] | None = None,
    regions: RegionTable | Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    *,
    replace_default_regions: bool = False,
    subject: str = "auto",
) -> AnalyzedTraces:
    """`analyze_traces`, keeping the trace tables beside the document for the frames that read them."""
    if not paths:
        raise ValueError("analyze_traces: no trace files given")
    wanted = next((s for s in _SUBJECT_CHOICES if s == subject), None)
    if wanted is None:
        raise ValueError(f"analyze_traces: subject must be auto, gpu_ops or cpu_ops, not {subject!r}")
    chosen = count_patterns(patterns)
    table = region_table(regions, replace_default=replace_default_regions)
    files, tables = [], []
    for position, path in enumerate(paths):
        trace = read_trace(path, keep_frame=lambda name: table.first_match(name) >= 0)
        file, kept = analyze_file(trace, chosen, table, wanted, position)
        files.append(file)
        tables.append(kept)
    shown = _shown_file([str(p) for p in paths])
    analysis = TraceAnalysis(
        patterns={p.name: p.regex for p in chosen},
        region_table=[RegionRule(name=n, regex=r) for n, r in table.as_pairs()],
        files=files,
        combined=combine(files, table.region_names),
        views=trace_views(tables[shown].attribution, chosen, shown),
    )
    return AnalyzedTraces(analysis, tuple(tables))


def _shown_file(paths: Sequence[str]) -> int:
    """The file the report's views come from: rank 0's Kineto trace (else the first by name)."""
    def key(index: int) -> tuple[bool, bool, str]:
        name = Path(paths[index]).name
        return ".trace.json" not in name, "-TP-0" not in name, name

    return min(range(len(paths)), key=key)


def analyze_file(
    trace: TraceTables, patterns: Sequence[NamedPattern], table: RegionTable, subject: Subject | Literal["auto"],
    position: int,
) -> tuple[FileAnalysis, FileTables]:
    attribution = attribute(trace, table)
    items = counting.counted_items(attribution, counting.choose_subject(trace, attribution, subject), patterns)
    rank, rank_source = _rank(trace, position)
    graph = attribution.launches[attribution.launches["is_graph"]]
    histogram = Counter(graph["kernels"].tolist()) if counting.per_graph_counts_known(trace) else None
    rows = counting.count_rows(trace, attribution, items, patterns, table)
    file = FileAnalysis(
        path=trace.path,
        format=trace.format,
        platform=trace.platform,
        rank=rank,
        rank_source=rank_source,
        graph_launches=len(graph),
        kernels_per_graph_launch=None if histogram is None else dict(sorted(histogram.items())),
        validity=counting.validity(trace, attribution, items, table),
        regions=counting.main_unit_counts(rows),
        counts=rows,
        pattern_totals=counting.pattern_totals(trace, items, patterns),
        top_ops=counting.top_ops(items),
        region_times=counting.region_times(attribution, items, table),
        op_tables=counting.op_tables(trace, attribution, items, table),
        region_functions=region_functions(trace, attribution, table),
    )
    return file, FileTables(trace=trace, attribution=attribution, items=items)


def _rank(trace: TraceTables, position: int) -> tuple[int, RankSource]:
    if trace.distributed_rank is not None:
        return trace.distributed_rank, "distributedInfo"
    match = RANK_IN_FILE_NAME.search(Path(trace.path).name)
    if match:
        return int(match.group(1)), "file_name"
    return position, "position"


def combine(files: Sequence[FileAnalysis], region_order: Sequence[str] = ()) -> CombinedAnalysis:
    """All files as one: counts summed, per-replay statistics over every replay of every file.
    Rows come in `region_order` (the region table's), then any other region."""
    histograms = [f.kernels_per_graph_launch for f in files]
    known = [h for h in histograms if h is not None]
    rows = _combine_counts([r for f in files for r in f.counts], region_order)
    return CombinedAnalysis(
        files=len(files),
        ranks=[f.rank for f in files],
        graph_launches=sum(f.graph_launches for f in files),
        kernels_per_graph_launch=_sum_counters(known) if len(known) == len(histograms) else None,
        validity=_combine_validity(files),
        regions=counting.main_unit_counts(rows),
        counts=rows,
        pattern_totals=_combine_totals([t for f in files for t in f.pattern_totals]),
        op_tables=combine_op_tables([t for f in files for t in f.op_tables], region_order),
        region_functions=combine_region_functions([t for f in files for t in f.region_functions], region_order),
    )


def _sum_counters(dicts: Iterable[Mapping[Key, int]]) -> dict[Key, int]:
    total: Counter[Key] = Counter()
    for d in dicts:
        total.update(d)
    return dict(sorted(total.items()))


def _combine_counts(rows: Sequence[CountRow], region_order: Sequence[str]) -> list[CountRow]:
    groups: dict[tuple[str, Unit, str], list[CountRow]] = {}
    for row in rows:
        groups.setdefault((row.region, row.unit, row.pattern), []).append(row)
    result = []
    for (region, unit, pattern), group in groups.items():
        empty = sum(r.empty_launches for r in group)
        unknown = next((r for r in group if not r.known), None)
        if unknown is not None:
            result.append(unknown.model_copy(update={"replays": sum(r.replays for r in group), "empty_launches": empty}))
            continue
        result.append(counting.row_from_histogram(
            region, unit, pattern, Counter(_sum_counters(r.per_replay_histogram for r in group)),
            sum(r.time_us or 0.0 for r in group), Counter(_sum_counters(r.matched_names for r in group)), empty,
        ))
    rank = {name: index for index, name in enumerate([*region_order, NO_REGION])}
    units = {unit: index for index, unit in enumerate(get_args(Unit))}
    return sorted(result, key=lambda r: (rank.get(r.region, len(rank)), units[r.unit]))


def combine_op_tables(tables: Sequence[OpTable], region_order: Sequence[str] = ()) -> list[OpTable]:
    """Op tables of one region and unit from several files (ranks, or profiled trials) as one: a
    name missing from a file's table ran zero times in each of that file's instances."""
    groups: dict[tuple[str, Unit], list[OpTable]] = {}
    for table in tables:
        groups.setdefault((table.region, table.unit), []).append(table)
    result = []
    for (region, unit), group in groups.items():
        replays = sum(t.replays for t in group)
        unknown = next((t for t in group if not t.known), None)
        if unknown is not None:
            result.append(unknown.model_copy(update={"replays": replays}))
            continue
        histograms: dict[str, Counter[int]] = {}
        times: dict[str, float] = {}
        for t in group:
            for row in t.rows():
                histograms.setdefault(row.name, Counter())
                times[row.name] = times.get(row.name, 0.0) + row.time_us
        for t in group:
            present = set(t.names)
            for row in t.rows():
                histograms[row.name].update(row.per_replay_histogram)
            for name in histograms.keys() - present:
                histograms[name][0] += t.replays
        result.append(counting.op_table_from_histograms(region, unit, replays, histograms, times))
    rank = {name: index for index, name in enumerate([*region_order, NO_REGION])}
    units = {unit: index for index, unit in enumerate(get_args(Unit))}
    return sorted(result, key=lambda t: (rank.get(t.region, len(rank)), units[t.unit]))


def _combine_totals(totals: Sequence[PatternTotal]) -> list[PatternTotal]:
    groups: dict[str, list[PatternTotal]] = {}
    for total in totals:
        groups.setdefault(total.pattern, []).append(total)
    return [
        PatternTotal(
            pattern=name,
            total=sum(t.total for t in group),
            in_graph_launches=sum(t.in_graph_launches for t in group),
            eager=sum(t.eager for t in group),
            without_launch=sum(t.without_launch for t in group),
            time_us=round(sum(t.time_us for t in group), 3),
            matched_names=_sum_counters(t.matched_names for t in group),
            complete=all(t.complete for t in group),
            note=next((t.note for t in group if t.note), None),
        )
        for name, group in groups.items()
    ]


_SUMMED_FACTS = (
    "kernels", "gpu_ops", "cpu_ops", "runtime_calls", "kernel_launch_calls", "kernel_launch_calls_without_gpu_ops",
    "graph_launches", "graph_launches_without_kernels", "gpu_ops_without_launch", "unlabelled_graph_launches",
    "unlabelled_eager_launches",
)


def _combine_validity(files: Sequence[FileAnalysis]) -> Validity:
    facts = [f.validity for f in files]
    subjects = {v.subject for v in facts}
    modes = sorted({v.graph_trace_mode for v in facts if v.graph_trace_mode})
    instances: dict[str, dict[str, int]] = {}
    for v in facts:
        for region, units in v.region_instances.items():
            instances[region] = _sum_counters([instances.get(region, {}), units])
    return Validity(
        subject=subjects.pop() if len(subjects) == 1 else "mixed",
        **{name: sum(getattr(v, name) for v in facts) for name in _SUMMED_FACTS},
        graph_trace_mode=",".join(modes) or None,
        per_graph_counts_known=all(v.per_graph_counts_known for v in facts),
        launches_exceed_kernels=any(v.launches_exceed_kernels for v in facts),
        region_instances=instances,
        warnings=[f"{f.path} (rank {f.rank}): {w}" for f in files for w in f.validity.warnings],
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
