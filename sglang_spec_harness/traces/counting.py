"""Counting: named patterns per region and counting unit, per launch, and the validity facts.

Counting subject: the GPU ops (kernels, memcpys, memsets) of a trace that has any; otherwise its
CPU ops (a CPU-only run, where `aten::_softmax` stands for the kernel). Units: a region's graph
replays; a region's span instances (eager work launched inside them, or CPU ops); and, for work
outside every region, the whole trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from sglang_spec_harness.traces.attribution import Attribution
from sglang_spec_harness.traces.model import TraceTables, name_mask
from sglang_spec_harness.traces.names import KERNEL_LAUNCH_NAME
from sglang_spec_harness.traces.patterns import NamedPattern
from sglang_spec_harness.traces.regions import COMPANION_REGION, RegionTable
from sglang_spec_harness.vocabulary import NO_REGION
from sglang_spec_harness.traces.schema import (
    Basis,
    CountRow,
    OpTable,
    PatternTotal,
    RegionCounts,
    RegionTime,
    Subject,
    TopOp,
    Unit,
    Validity,
)

TOP_OPS = 10
GRAPH_MODE_NOTE = (
    "Nsight Systems graph-trace mode {mode!r}: replayed graph kernels are not recorded, so "
    "per-graph counts are unknown; record with --cuda-graph-trace=node"
)
EMPTY_LAUNCHES_NOTE = "the region's graph launches have no recorded GPU ops: counts unknown"
_OP_COLUMNS = ("names", "total", "per_replay_min", "per_replay_median", "per_replay_max", "per_replay_histogram",
               "time_us")


@dataclass
class Items:
    """The counted ops of one file: names, times, and where each belongs."""

    frame: pd.DataFrame  # name, ts, dur, is_graph, launch, span, region
    subject: Subject
    match: dict[str, np.ndarray]  # pattern name -> does each op match


def choose_subject(trace: TraceTables, attribution: Attribution, subject: Subject | Literal["auto"] = "auto") -> Subject:
    if subject != "auto":
        return subject
    has_gpu_work = len(trace.gpu_ops) > 0 or bool(attribution.launches["is_graph"].any())
    return "gpu_ops" if has_gpu_work or trace.format == "nsys" else "cpu_ops"


def counted_items(attribution: Attribution, subject: Subject, patterns: Sequence[NamedPattern]) -> Items:
    if subject == "gpu_ops":
        frame = attribution.gpu_ops[["name", "ts", "dur", "is_graph", "launch", "span", "region"]]
    else:
        ops = attribution.cpu_ops
        frame = ops[["name", "ts", "dur", "span", "region"]].assign(is_graph=False, launch=-1)
    match = {p.name: name_mask(frame["name"], p.matches) for p in patterns}
    return Items(frame=frame, subject=subject, match=match)


def per_graph_counts_known(trace: TraceTables) -> bool:
    return trace.graph_trace_mode is None or trace.graph_trace_mode.lower() == "node"


def count_rows(
    trace: TraceTables,
    attribution: Attribution,
    items: Items,
    patterns: Sequence[NamedPattern],
    table: RegionTable,
) -> list[CountRow]:
    launches, frame = attribution.launches, items.frame
    known = per_graph_counts_known(trace)
    eager_item = ~frame["is_graph"].to_numpy()
    span_of_item = frame["span"].to_numpy()
    launch_of_item = frame["launch"].to_numpy()
    recorded = launches["gpu_ops"].to_numpy() > 0
    match = items.match
    names = frame["name"].astype(object).to_numpy()
    dur = frame["dur"].to_numpy()
    rows: list[CountRow] = []
    for region in [*table.region_names, NO_REGION]:
        region_launches = graph_launches_of(attribution, region)
        if items.subject == "gpu_ops" and region_launches.any():
            replayed = region_launches & recorded
            for p in patterns:
                hit, per_launch = matches_per_launch(attribution, items, p.name)
                in_region = hit & region_launches[np.maximum(launch_of_item, 0)]
                rows.append(
                    _row(region, "graph_launch", p.name, per_launch[replayed], names[in_region], dur[in_region],
                         empty=int((region_launches & ~recorded).sum()),
                         note=None if known else GRAPH_MODE_NOTE.format(mode=trace.graph_trace_mode))
                )
        region_spans = spans_of(attribution, region)
        if region != NO_REGION and region_spans.any():
            for p in patterns:
                hit, per_span = matches_per_span(attribution, items, p.name)
                in_region = hit & region_spans[np.maximum(span_of_item, 0)]
                rows.append(_row(region, "span", p.name, per_span[region_spans], names[in_region], dur[in_region]))
        outside = eager_item & (span_of_item < 0)
        if region == NO_REGION and outside.any():
            for p in patterns:
                hit = outside & match[p.name]
                rows.append(_row(region, "trace", p.name, np.array([hit.sum()]), names[hit], dur[hit]))
    return rows


def graph_launches_of(attribution: Attribution, region: str) -> np.ndarray:
    """Which launches are graph launches of `region`."""
    launches = attribution.launches
    return launches["is_graph"].to_numpy() & (launches["region"].to_numpy() == region)


def spans_of(attribution: Attribution, region: str) -> np.ndarray:
    """Which spans are instances of `region`."""
    spans = attribution.spans
    return (spans["region"].to_numpy() == region) if len(spans) else np.zeros(0, dtype=bool)


def matches_per_launch(attribution: Attribution, items: Items, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """The items a graph replay ran that match `pattern`, and their number per launch."""
    frame = items.frame
    launch = frame["launch"].to_numpy()
    hit = frame["is_graph"].to_numpy() & (launch >= 0) & items.match[pattern]
    return hit, np.bincount(launch[hit], minlength=len(attribution.launches))


def matches_per_span(attribution: Attribution, items: Items, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """The eager items (GPU ops launched inside a span, or CPU ops) that match `pattern`, and their
    number per span."""
    frame = items.frame
    span = frame["span"].to_numpy()
    hit = ~frame["is_graph"].to_numpy() & (span >= 0) & items.match[pattern]
    return hit, np.bincount(span[hit], minlength=len(attribution.spans))


def instance_counts(attribution: Attribution, items: Items, pattern: str, region: str, unit: str) -> pd.DataFrame:
    """Each instance that `count_rows` counts for (region, unit), by start: `ts` (its CPU start) and
    `count`, the matches of `pattern` in it. graph_launch: the region's graph launches that recorded
    GPU ops; span: the region's spans."""
    if unit == "graph_launch":
        chosen = graph_launches_of(attribution, region) & (attribution.launches["gpu_ops"].to_numpy() > 0)
        table, counts = attribution.launches, matches_per_launch(attribution, items, pattern)[1]
    elif unit == "span":
        chosen = spans_of(attribution, region)
        table, counts = attribution.spans, matches_per_span(attribution, items, pattern)[1]
    else:
        raise ValueError(f"instance_counts: unit must be graph_launch or span, not {unit!r}")
    frame = pd.DataFrame({"ts": table["ts"].to_numpy()[chosen], "count": counts[chosen]})
    return frame.sort_values("ts", kind="stable", ignore_index=True)


def main_unit_counts(rows: Sequence[CountRow]) -> dict[str, RegionCounts]:
    """Per region, the rows of its main unit (graph_launch, else span, else trace)."""
    preference = {"graph_launch": 0, "span": 1, "trace": 2}
    result: dict[str, RegionCounts] = {}
    for row in sorted(rows, key=lambda r: preference[r.unit]):
        chosen = result.get(row.region)
        if chosen is None:
            chosen = result[row.region] = RegionCounts(unit=row.unit, units=row.replays, counts={})
        if chosen.unit == row.unit:
            chosen.counts[row.pattern] = row
    order = list(dict.fromkeys(r.region for r in rows))
    return {region: result[region] for region in order}


def _row(
    region: str, unit: Unit, pattern: str, per_replay: np.ndarray, names: np.ndarray, durations: np.ndarray,
    *, empty: int = 0, note: str | None = None,
) -> CountRow:
    if note is None and len(per_replay) == 0:
        note = EMPTY_LAUNCHES_NOTE
    if note is not None:  # never a zero that is not evidence
        return CountRow(region=region, unit=unit, pattern=pattern, known=False, note=note, replays=len(per_replay),
                        empty_launches=empty, total=None, per_replay_min=None, per_replay_median=None,
                        per_replay_max=None, per_replay_histogram={}, time_us=None, matched_names={})
    return row_from_histogram(
        region, unit, pattern, Counter(per_replay.tolist()), float(durations.sum()), Counter(names.tolist()), empty
    )


def row_from_histogram(
    region: str, unit: Unit, pattern: str, histogram: Counter, time_us: float, names: Counter, empty: int
) -> CountRow:
    keys = sorted(histogram)
    values = np.repeat(np.array(keys, dtype=np.int64), [histogram[k] for k in keys])
    return CountRow(
        region=region, unit=unit, pattern=pattern, replays=len(values), empty_launches=empty,
        total=int(values.sum()), per_replay_min=int(values.min()), per_replay_median=float(np.median(values)),
        per_replay_max=int(values.max()), per_replay_histogram={int(k): int(histogram[k]) for k in keys},
        time_us=round(time_us, 3), matched_names=dict(sorted(names.items())),
    )


def pattern_totals(trace: TraceTables, items: Items, patterns: Sequence[NamedPattern]) -> list[PatternTotal]:
    frame = items.frame
    complete = items.subject == "cpu_ops" or per_graph_counts_known(trace)
    result = []
    for p in patterns:
        hit = items.match[p.name]
        in_graph = int((hit & frame["is_graph"].to_numpy()).sum())
        result.append(PatternTotal(
            pattern=p.name, total=int(hit.sum()), in_graph_launches=in_graph, eager=int(hit.sum()) - in_graph,
            without_launch=int((hit & (frame["launch"].to_numpy() < 0)).sum()) if items.subject == "gpu_ops" else 0,
            time_us=round(float(frame["dur"].to_numpy()[hit].sum()), 3),
            matched_names=dict(sorted(Counter(frame["name"].astype(object).to_numpy()[hit].tolist()).items())),
            complete=complete,
            note=None if complete else GRAPH_MODE_NOTE.format(mode=trace.graph_trace_mode),
        ))
    return result


def top_ops(items: Items) -> list[TopOp]:
    """Per region and unit, the op names with the most summed time (for the report)."""
    frame = items.frame
    in_graph = frame["is_graph"].to_numpy() & (frame["launch"].to_numpy() >= 0)
    eager = ~frame["is_graph"].to_numpy()  # graph ops without a launch are in no unit
    unit = np.where(in_graph, "graph_launch", np.where(frame["span"].to_numpy() >= 0, "span", "trace"))
    table = pd.DataFrame({"region": frame["region"], "unit": unit, "name": frame["name"].astype(object),
                          "dur": frame["dur"]})[in_graph | eager]
    summary = table.groupby(["region", "unit", "name"], sort=False).agg(count=("dur", "size"), time_us=("dur", "sum"))
    summary = summary.reset_index().sort_values(["region", "unit", "time_us"], ascending=[True, True, False])
    top = summary.groupby(["region", "unit"], sort=False).head(TOP_OPS)
    return [TopOp(region=r.region, unit=r.unit, name=r.name, count=int(r.count), time_us=round(float(r.time_us), 3))
            for r in top.itertuples(index=False)]


def op_tables(trace: TraceTables, attribution: Attribution, items: Items, table: RegionTable) -> list[OpTable]:
    """Per region and unit, every op name with its count in each instance: the same instances as
    `count_rows` (a region's graph replays that recorded GPU ops, its spans, the trace for work
    outside every region), so that a name's row agrees with the CountRow of a pattern matching
    only it."""
    launches, frame = attribution.launches, items.frame
    known = per_graph_counts_known(trace)
    is_graph = frame["is_graph"].to_numpy()
    launch_of_item, span_of_item = frame["launch"].to_numpy(), frame["span"].to_numpy()
    recorded = launches["gpu_ops"].to_numpy() > 0
    names = frame["name"].astype("category")
    codes, categories = names.cat.codes.to_numpy(), names.cat.categories
    dur = frame["dur"].to_numpy()
    out: list[OpTable] = []
    for region in [*table.region_names, NO_REGION]:
        region_launches = graph_launches_of(attribution, region)
        if items.subject == "gpu_ops" and region_launches.any():
            replayed = region_launches & recorded
            note = None if known else GRAPH_MODE_NOTE.format(mode=trace.graph_trace_mode)
            in_unit = is_graph & (launch_of_item >= 0)
            out.append(_op_table(region, "graph_launch", replayed, np.where(in_unit, launch_of_item, -1), codes,
                                 categories, dur, note=note))
        region_spans = spans_of(attribution, region)
        if region != NO_REGION and region_spans.any():
            out.append(_op_table(region, "span", region_spans, np.where(~is_graph, span_of_item, -1), codes,
                                 categories, dur))
        outside = ~is_graph & (span_of_item < 0)
        if region == NO_REGION and outside.any():
            out.append(_op_table(region, "trace", np.ones(1, dtype=bool), np.where(outside, 0, -1), codes,
                                 categories, dur))
    return out


def _op_table(region: str, unit: Unit, chosen: np.ndarray, instance_of_item: np.ndarray, codes: np.ndarray,
              categories: pd.Index, dur: np.ndarray, *, note: str | None = None) -> OpTable:
    """`chosen`: which instances (launches, spans, or the one trace) are counted; `instance_of_item`:
    each item's instance (-1 none)."""
    replays = int(chosen.sum())
    if note is None and replays == 0:
        note = EMPTY_LAUNCHES_NOTE
    empty: dict[str, list] = {c: [] for c in _OP_COLUMNS}
    if note is not None:  # never a zero that is not evidence
        return OpTable(region=region, unit=unit, replays=replays, known=False, note=note, **empty)
    position = np.full(len(chosen), -1, dtype=np.int64)
    position[chosen] = np.arange(replays)
    instance = np.where(instance_of_item >= 0, position[np.maximum(instance_of_item, 0)], -1)
    hit = (instance >= 0) & (codes >= 0)
    used, column = np.unique(codes[hit], return_inverse=True)
    if not len(used):
        return OpTable(region=region, unit=unit, replays=replays, **empty)
    # counts[i, j]: occurrences of name j in instance i
    counts = np.bincount(instance[hit] * len(used) + column, minlength=replays * len(used)).reshape(replays, len(used))
    times = np.bincount(column, weights=dur[hit], minlength=len(used))
    histograms: dict[str, Counter[int]] = {}
    summed: dict[str, float] = {}
    for j, code in enumerate(used):
        values, instances = np.unique(counts[:, j], return_counts=True)
        name = str(categories[code])
        histograms[name] = Counter(dict(zip(values.tolist(), instances.tolist())))
        summed[name] = float(times[j])
    return op_table_from_histograms(region, unit, replays, histograms, summed)


def op_table_from_histograms(region: str, unit: Unit, replays: int, histograms: Mapping[str, Counter[int]],
                             times: Mapping[str, float]) -> OpTable:
    """An op table from each name's histogram (count in one instance -> instances) and summed time;
    names by time, most first."""
    columns: dict[str, list] = {c: [] for c in _OP_COLUMNS}
    for name in sorted(histograms, key=lambda n: (-times[n], n)):
        histogram = histograms[name]
        keys = sorted(k for k in histogram if histogram[k])
        values = np.repeat(np.array(keys, dtype=np.int64), [histogram[k] for k in keys])
        columns["names"].append(name)
        columns["total"].append(int(values.sum()))
        columns["per_replay_min"].append(int(values.min()))
        columns["per_replay_median"].append(float(np.median(values)))
        columns["per_replay_max"].append(int(values.max()))
        columns["per_replay_histogram"].append({int(k): int(histogram[k]) for k in keys})
        columns["time_us"].append(round(float(times[name]), 3))
    return OpTable(region=region, unit=unit, replays=replays, **columns)


def region_times(attribution: Attribution, items: Items, table: RegionTable) -> dict[str, RegionTime]:
    """Per region: GPU op time (graph replays + eager ops in its spans), or span wall time on CPU."""
    launches, spans, frame = attribution.launches, attribution.spans, items.frame
    is_graph_launch = launches["is_graph"].to_numpy() & (launches["gpu_ops"].to_numpy() > 0)
    launch_region = launches["region"].to_numpy()
    span_region = spans["region"].to_numpy() if len(spans) else np.zeros(0, dtype=object)
    in_unit = (frame["is_graph"].to_numpy() & (frame["launch"].to_numpy() >= 0)) | (
        ~frame["is_graph"].to_numpy() & (frame["span"].to_numpy() >= 0))
    op_region, dur = frame["region"].to_numpy(), frame["dur"].to_numpy()
    out: dict[str, RegionTime] = {}
    for region in table.region_names:
        n_graph = int((is_graph_launch & (launch_region == region)).sum())
        region_spans = span_region == region
        if not n_graph and not region_spans.any():
            continue
        unit: Unit
        unit, instances = ("graph_launch", n_graph) if n_graph else ("span", int(region_spans.sum()))
        outermost: list[tuple[float, float]] | None = None
        basis: Basis
        if items.subject == "gpu_ops":
            time_us = robust = float(dur[in_unit & (op_region == region)].sum())
            basis = "gpu_ops"
        else:
            time_us, outermost = _wall_time(spans[region_spans])
            robust, basis = float(np.median([d for _, d in outermost])) * len(outermost), "span_wall"
        out[region] = RegionTime(unit=unit, instances=instances, time_us=round(time_us, 3), basis=basis,
                                 robust_time_us=round(robust, 3),
                                 spans_us=[(round(s, 3), round(d, 3)) for s, d in outermost] if outermost else None)
    return out


def _wall_time(spans: pd.DataFrame) -> tuple[float, list[tuple[float, float]]]:
    """Summed duration of the spans, counting time covered by several spans of one thread once;
    and (start, duration) of the outermost spans (those inside no other span of the set), by start."""
    total, outermost = 0.0, []
    for _, group in spans.groupby(["pid", "tid"], sort=False):
        end = -np.inf
        # by start, the longer first: a span that starts with another one but ends earlier is inside it
        for start, stop in sorted(zip(group["ts"].to_numpy(), (group["ts"] + group["dur"]).to_numpy()),
                                  key=lambda span: (span[0], -span[1])):
            if stop <= end:
                continue
            if start >= end:
                outermost.append((float(start), float(stop - start)))
            total += stop - max(start, end)
            end = stop
    return total, sorted(outermost)


def validity(trace: TraceTables, attribution: Attribution, items: Items, table: RegionTable) -> Validity:
    launches, gpu_ops, spans = attribution.launches, attribution.gpu_ops, attribution.spans
    runtime = trace.runtime
    graph = launches["is_graph"].to_numpy()
    kernels = int((gpu_ops["kind"] == "kernel").sum())
    launch_calls = name_mask(runtime["name"], KERNEL_LAUNCH_NAME.search)
    linked_calls = name_mask(launches["name"], KERNEL_LAUNCH_NAME.search) & (launches["gpu_ops"].to_numpy() > 0)
    unlabelled = launches["region"].to_numpy() == NO_REGION
    known = per_graph_counts_known(trace)
    instances: dict[str, dict[str, int]] = {}
    for region in table.region_names:
        n_graph = int((graph & (launches["region"].to_numpy() == region)).sum())
        n_spans = int((spans["region"] == region).sum()) if len(spans) else 0
        if n_graph or n_spans:
            instances[region] = {"graph_launch": n_graph, "span": n_spans}
    facts = Validity(
        subject=items.subject,
        kernels=kernels,
        gpu_ops=len(gpu_ops),
        cpu_ops=len(trace.cpu_ops),
        runtime_calls=len(runtime),
        kernel_launch_calls=int(launch_calls.sum()),
        kernel_launch_calls_without_gpu_ops=int(launch_calls.sum() - linked_calls.sum()),
        graph_launches=int(graph.sum()),
        graph_launches_without_kernels=int((graph & (launches["kernels"].to_numpy() == 0)).sum()),
        gpu_ops_without_launch=int((gpu_ops["launch"] < 0).sum()),
        unlabelled_graph_launches=int((graph & unlabelled).sum()),
        unlabelled_eager_launches=int((~graph & unlabelled).sum()),
        graph_trace_mode=trace.graph_trace_mode,
        per_graph_counts_known=known,
        launches_exceed_kernels=int(launch_calls.sum()) > kernels,
        region_instances=instances,
        warnings=[],
    )
    facts.warnings = list(_warnings(trace, facts))
    return facts


def _warnings(trace: TraceTables, v: Validity) -> Iterable[str]:
    if v.gpu_ops == 0 and v.cpu_ops == 0:
        yield "the trace holds neither GPU ops nor CPU ops: nothing can be counted"
    if v.subject == "cpu_ops" and v.runtime_calls:
        yield f"no GPU ops recorded although the trace has {v.runtime_calls} GPU runtime calls: counting CPU ops"
    if v.launches_exceed_kernels:
        yield (f"{v.kernel_launch_calls} kernel-launch calls but only {v.kernels} kernels executed: a trace taken "
               "during graph capture (captured launches do not run) or lost GPU records; count CPU ops there "
               "(--subject cpu_ops)")
    if not v.per_graph_counts_known:
        yield GRAPH_MODE_NOTE.format(mode=v.graph_trace_mode)
    elif v.graph_launches_without_kernels:
        yield f"{v.graph_launches_without_kernels} of {v.graph_launches} graph launches have no recorded kernels"
    if v.gpu_ops_without_launch:
        yield (f"{v.gpu_ops_without_launch} of {v.gpu_ops} GPU ops have no launch in the trace (profiling-window "
               "edges or dropped runtime records): they are in no region")
    if v.unlabelled_graph_launches:
        yield f"{v.unlabelled_graph_launches} of {v.graph_launches} graph launches are in no region"
    for region, companion in COMPANION_REGION.items():
        if region in v.region_instances and companion not in v.region_instances:
            yield (f"{region} found but no {companion}: is this a speculative-decoding trace? (without it the "
                   "target's decode is also labelled step[DECODE bs=N])")
