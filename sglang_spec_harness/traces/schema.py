"""The analysis document (`harness analyze --json`, and each trial of a run directory's
`analysis.json`): pydantic models that the analysis writes and the rules, the report and the
history read. Field meanings are documented in docs/analysis.md.

Fail-closed conventions: a count that the trace cannot support is `null` with `known: false` and
a `note`, never 0; validity facts and warnings say how far the counts can be trusted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1
Unit = Literal["graph_launch", "span", "trace"]
Subject = Literal["gpu_ops", "cpu_ops"]
Basis = Literal["gpu_ops", "span_wall"]  # what a region's time sums (RegionTime)
TraceFormat = Literal["kineto", "nsys"]
RankSource = Literal["distributedInfo", "file_name", "position"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


# A region's name: the harness's (DRAFT_DECODE), never an annotation's.
REGION_NAME = r"^[A-Z][A-Z0-9_]*$"


# One row of a region table: a region's name and the regex over trace annotations that maps to it
# (analysis.json's `region_table`; a scenario's `regions.rules` narrow the name to REGION_NAME, while
# an analysis may name a region by its own regex: `count_in_graph_replays(trace, p, "my_span.*")`).
# No docstring: it would enter both JSON Schemas.
class RegionRule(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from None
        return value


class ScenarioRegionRule(RegionRule):
    name: str = Field(pattern=REGION_NAME)


class CountRow(_Model):
    """One count pattern in one region, over one kind of counting unit.

    unit: graph_launch = each graph replay of the region is one instance; span = each region
    span instance (eager GPU ops launched inside it, or CPU ops) is one; trace = ops outside
    every region, counted once for the whole trace.
    """

    region: str
    unit: Unit
    pattern: str
    known: bool = True
    note: str | None = None
    replays: int  # instances counted (graph launches with recorded GPU ops, spans, or 1)
    empty_launches: int = 0  # graph launches of the region with no recorded GPU op (not counted)
    total: int | None
    per_replay_min: int | None
    per_replay_median: float | None
    per_replay_max: int | None
    per_replay_histogram: dict[int, int]  # matches in one instance -> instances
    time_us: float | None
    matched_names: dict[str, int]  # name -> matches


class RegionCounts(_Model):
    """A region's counts in its main unit: graph_launch when the region has graph launches, else
    span (CPU or eager work), `trace` for work outside every region. `counts` maps pattern -> row;
    all units' rows are in the flat `counts` list of the file."""

    unit: Unit
    units: int  # instances counted in that unit (= each row's `replays`)
    counts: dict[str, CountRow]


class RegionTime(_Model):
    """A region's time in one trace: on a GPU trace the summed duration of the GPU ops it ran (graph
    replays and eager work in its spans, whatever their names: replacement kernels count too); on a
    CPU trace the wall time of its spans (CPU ops nest, so their durations would count twice;
    nested or overlapping spans of one thread count once). `instances`: its graph launches when it
    has any, else its spans (one target verify per EAGLE cycle)."""

    unit: Unit
    instances: int
    time_us: float
    basis: Basis
    # time_us without the outliers a busy CPU puts into wall time: on span_wall the median wall
    # time of one (outermost) span times their number; on gpu_ops equal to time_us
    robust_time_us: float | None = None
    # on span_wall: (start, duration) in us of each outermost span, by start, so that a rule can set
    # a region's spans against the reference region's span of the same cycle (None on gpu_ops, and
    # in documents written before it)
    spans_us: list[tuple[float, float]] | None = None


class PatternTotal(_Model):
    """One count pattern over the whole trace, by where the matches ran."""

    pattern: str
    total: int
    in_graph_launches: int  # replayed by a graph (its launch, or its graph id, says so)
    eager: int  # total - in_graph_launches
    without_launch: int  # of total: no launch recorded for it
    time_us: float
    matched_names: dict[str, int]
    complete: bool = True  # false: the trace cannot hold every match (e.g. nsys graph mode)
    note: str | None = None


class TopOp(_Model):
    region: str
    unit: Unit
    name: str
    count: int
    time_us: float


class OpCount(NamedTuple):
    """One op name of an `OpTable` (a row of its columns)."""

    name: str
    total: int
    per_replay_min: int
    per_replay_median: float
    per_replay_max: int
    per_replay_histogram: dict[int, int]
    time_us: float


class OpTable(_Model):
    """Every op name (GPU op on a GPU trace, CPU op on a CPU trace) of one region in one counting
    unit, with its count in each instance (graph replay, span, or the trace for `(none)`) and its
    summed time: what changed between two runs, name by name. Stored by column (one list per field,
    in the order of `names`: most time first) so that a region of hundreds of kernel names stays
    small. Each instance counts each name once per occurrence, so on a CPU trace nested ops
    (`aten::softmax` calls `aten::_softmax`) each count. `known: false` (with a `note`): the trace
    cannot say (nsys graph mode, replays with no recorded op), and the columns are empty."""

    region: str
    unit: Unit
    replays: int  # instances, as in the CountRow of the same region and unit
    known: bool = True
    note: str | None = None
    names: list[str]
    total: list[int]
    per_replay_min: list[int]
    per_replay_median: list[float]
    per_replay_max: list[int]
    per_replay_histogram: list[dict[int, int]]  # per name: matches in one instance -> instances
    time_us: list[float]

    @model_validator(mode="after")
    def _columns_agree(self) -> OpTable:
        columns = (self.total, self.per_replay_min, self.per_replay_median, self.per_replay_max,
                   self.per_replay_histogram, self.time_us)
        if any(len(c) != len(self.names) for c in columns):
            raise ValueError(f"op table {self.region}/{self.unit}: columns of different lengths")
        return self

    def rows(self) -> list[OpCount]:
        return [OpCount(*row) for row in zip(self.names, self.total, self.per_replay_min, self.per_replay_median,
                                             self.per_replay_max, self.per_replay_histogram, self.time_us)]

    def op(self, name: str) -> OpCount | None:
        return next((row for row in self.rows() if row.name == name), None)


class FunctionCall(NamedTuple):
    """One Python function of a `RegionFunctions` (a row of its columns)."""

    file: str
    function: str
    line: int
    calls: int
    time_us: float


class RegionFunctions(_Model):
    """The Python functions that ran in one region (with_stack `python_function` frames): those
    nested in the region's spans on their thread, and on a GPU trace also the stack open on the CPU
    thread that launched each of the region's graph replays and kernels. Per function: its file (as
    the trace names it, from its package on: `sglang/srt/speculative/eagle_worker_v2.py`), name, first
    line (the `def`, or its first decorator), calls (frames) and time (their summed durations,
    inclusive of what they call). Stored by column, most time first; at most MAX_FUNCTIONS_PER_REGION
    (traces/functions.py): `functions` says how many ran, `complete` whether all are listed."""

    region: str
    functions: int  # distinct functions that ran in the region (more than listed when not complete)
    complete: bool = True
    file: list[str]
    function: list[str]
    line: list[int]
    calls: list[int]
    time_us: list[float]

    @model_validator(mode="after")
    def _columns_agree(self) -> RegionFunctions:
        if len({len(self.file), len(self.function), len(self.line), len(self.calls), len(self.time_us)}) > 1:
            raise ValueError(f"functions of {self.region}: columns of different lengths")
        return self

    def rows(self) -> list[FunctionCall]:
        return [FunctionCall(*row) for row in zip(self.file, self.function, self.line, self.calls, self.time_us)]


class Validity(_Model):
    """Facts a fail-closed rule needs before it may believe a zero."""

    subject: Literal["gpu_ops", "cpu_ops", "mixed"]  # what the counts count
    kernels: int
    gpu_ops: int  # kernels + memcpys + memsets
    cpu_ops: int
    runtime_calls: int
    kernel_launch_calls: int  # runtime calls that launch one kernel (cudaLaunchKernel, ...)
    kernel_launch_calls_without_gpu_ops: int
    graph_launches: int
    graph_launches_without_kernels: int
    gpu_ops_without_launch: int
    unlabelled_graph_launches: int  # graph launches in no region
    unlabelled_eager_launches: int  # eager launches (with GPU ops) in no region
    graph_trace_mode: str | None  # nsys CUDA_GRAPH_TRACE_OPTIONS:MODE ("Graph", "Node"); null for Kineto
    per_graph_counts_known: bool  # false: replayed kernels are not in the trace
    launches_exceed_kernels: bool  # kernel_launch_calls > kernels: a capture trace or lost records
    region_instances: dict[str, dict[str, int]]  # region -> {"graph_launch": n, "span": n}
    warnings: list[str]


class FileAnalysis(_Model):
    path: str
    format: TraceFormat
    platform: str  # cuda | rocm | cpu
    rank: int
    rank_source: RankSource
    graph_launches: int
    kernels_per_graph_launch: dict[int, int] | None  # kernels in a launch -> launches; null: unknown
    validity: Validity
    regions: dict[str, RegionCounts]  # region -> its counts in its main unit
    counts: list[CountRow]  # every (region, unit, pattern) row
    pattern_totals: list[PatternTotal]
    top_ops: list[TopOp]  # per region and unit, the 10 names with the most time
    region_times: dict[str, RegionTime] = {}  # region -> its time (empty in documents written before it)
    op_tables: list[OpTable] = []  # per region and unit, every op name (empty in documents written before it)
    # per region, the Python functions that ran there (empty without with_stack, and in documents
    # written before it)
    region_functions: list[RegionFunctions] = []


class CombinedAnalysis(_Model):
    """All files together (one per TP rank): sums, and per-replay statistics over all replays."""

    files: int
    ranks: list[int]
    graph_launches: int
    kernels_per_graph_launch: dict[int, int] | None
    validity: Validity
    regions: dict[str, RegionCounts]
    counts: list[CountRow]
    pattern_totals: list[PatternTotal]
    op_tables: list[OpTable] = []  # per-replay statistics over every replay of every file
    region_functions: list[RegionFunctions] = []  # calls and times summed over the files


class OpTime(NamedTuple):
    """One op name's work in one region over the whole trace (`TraceViews.top_op_rows()`)."""

    region: str
    name: str
    time_us: float  # summed duration (CPU ops: inclusive of the ops they call)
    calls: int


class CycleBar(NamedTuple):
    """One bar of the cycle the report draws (`TraceViews.timeline_bars()`): a region instance (lane
    `regions`) or an op (lane: its stream, or its nesting depth on a CPU thread), times in us from
    the cycle's start."""

    lane: str
    name: str
    start_us: float
    dur_us: float
    region: str


class _Columns(_Model):
    """Rows stored by column; `name` indexes `TraceViews.names`."""

    name: list[int]

    @model_validator(mode="after")
    def _columns_agree(self) -> _Columns:
        lengths = {len(getattr(self, field)) for field in type(self).model_fields}
        if len(lengths) > 1:
            raise ValueError("columns of different lengths")
        return self


class OpTimes(_Columns):
    region: list[str]
    time_us: list[float]
    calls: list[int]


class CycleTimeline(_Columns):
    lane: list[str]
    start_us: list[float]
    dur_us: list[float]
    region: list[str]


class TraceViews(_Model):
    """What the report shows of a profiled trial besides the counts, computed from one of its trace
    files when it is analysed, so that the report never reads a trace (traces/views.py). Bounded:
    the top ops are the TOP_OPS names with the most time per region and every name a count pattern
    matches; the timeline is one complete decoding cycle from the middle of the trace, at most
    MAX_TIMELINE_UNITS region instances and MAX_TIMELINE_OPS ops. Stored by column, each name once
    in `names`: a GPU kernel's name runs to hundreds of characters, and a cycle repeats a few dozen
    names hundreds of times."""

    file: int  # the index in `files` of the trace it comes from (rank 0's Kineto trace)
    unit: Literal["kernels", "cpu_ops"]  # GPU kernels and their time, or CPU ops and span wall time
    cycles: int  # target verifies (distinct spans): a decoding cycle each; per-cycle figures divide by it
    # region -> its time in the trace: GPU kernel time, or the wall time of its spans (CPU ops
    # nest, so their times would count twice); regions other than `(none)`
    region_time_us: dict[str, float]
    names: list[str]
    top_ops: OpTimes  # by region, then name
    timeline: CycleTimeline  # no rows: no complete cycle in the trace

    @model_validator(mode="after")
    def _names_known(self) -> TraceViews:
        if any(not 0 <= i < len(self.names) for i in [*self.top_ops.name, *self.timeline.name]):
            raise ValueError("a name index outside `names`")
        return self

    @classmethod
    def of(cls, *, file: int, unit: Literal["kernels", "cpu_ops"], cycles: int, region_time_us: dict[str, float],
           top_ops: Sequence[OpTime], bars: Sequence[CycleBar]) -> TraceViews:
        index: dict[str, int] = {}
        for name in [*(o.name for o in top_ops), *(b.name for b in bars)]:
            index.setdefault(name, len(index))
        return cls(
            file=file, unit=unit, cycles=cycles, region_time_us=region_time_us, names=list(index),
            top_ops=OpTimes(region=[o.region for o in top_ops], name=[index[o.name] for o in top_ops],
                            time_us=[o.time_us for o in top_ops], calls=[o.calls for o in top_ops]),
            timeline=CycleTimeline(lane=[b.lane for b in bars], name=[index[b.name] for b in bars],
                                   start_us=[b.start_us for b in bars], dur_us=[b.dur_us for b in bars],
                                   region=[b.region for b in bars]),
        )

    def top_op_rows(self) -> list[OpTime]:
        t = self.top_ops
        return [OpTime(region, self.names[name], time, calls)
                for region, name, time, calls in zip(t.region, t.name, t.time_us, t.calls)]

    def timeline_bars(self) -> list[CycleBar]:
        t = self.timeline
        return [CycleBar(lane, self.names[name], start, dur, region)
                for lane, name, start, dur, region in zip(t.lane, t.name, t.start_us, t.dur_us, t.region)]


class TraceAnalysis(BaseModel):
    """The analysis of one set of trace files (a profiled trial: one per TP rank). What
    `analyze_traces` returns and `harness analyze --json` prints, and each trial of analysis.json.

    Unknown top-level fields are kept (analysis.json is read as hostile data, and a newer harness may
    add some); the per-file facts are closed. `views` is absent from documents written before it.
    It holds only what is stored: the tables computed from it, and those that read the traces
    themselves, are traces/analysis.py's."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    patterns: dict[str, str]
    region_table: list[RegionRule]
    files: list[FileAnalysis]
    combined: CombinedAnalysis
    views: TraceViews | None = None

    def to_json_dict(self) -> dict:
        return self.model_dump(mode="json")

    @classmethod
    def from_json_dict(cls, data: Mapping) -> TraceAnalysis:
        return cls.model_validate(data)

    def count(self, region: str, pattern: str, unit: str = "graph_launch", file: int | None = None) -> CountRow | None:
        """The row for (region, unit, pattern) of one file (index) or of all files combined."""
        rows = self.combined.counts if file is None else self.files[file].counts
        return next((r for r in rows if (r.region, r.unit, r.pattern) == (region, unit, pattern)), None)
