"""What the report needs from the traces and their analysis, as plain rows for figures and tables.

Two sources:
- analysis.json (the TraceAnalysis JSON per profiled trial, written by the runner): pattern counts
  per region, per-rank facts and warnings. These are the numbers the checks judged, so the report
  shows them rather than recounting.
- the profiled trials' trace files themselves, re-read with `sglang_spec_harness.traces` (reader +
  attribution) for what analysis.json does not hold: time per region and cycle, the top kernels
  (or CPU ops) per region, and the timeline of one cycle.

Every function returns something empty (and adds a note) rather than raising: a report of a run
with a broken trace is still a report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sglang_spec_harness.rundir import as_object
from sglang_spec_harness.report.data import ReportData, TrialRecord
from sglang_spec_harness.report.figures import CountBar, TimelineBar
from sglang_spec_harness.vocabulary import CYCLE_REGIONS, NO_REGION, REGION_ORDER
DEFAULT_PATTERN = "softmax"
TOP_N = 8
MAX_TIMELINE_UNITS = 60


def _patterns(data: ReportData) -> dict[str, str]:
    from sglang_spec_harness.scenario import DEFAULT_PATTERNS

    patterns = dict(DEFAULT_PATTERNS)
    if isinstance(data.scenario.get("patterns"), dict):
        patterns.update({str(k): str(v) for k, v in data.scenario["patterns"].items()})
    return patterns


def main_pattern(data: ReportData) -> str:
    """The pattern the kernel-count rules are about (the softmax, in every shipped scenario)."""
    for rule in data.rules_of_kind("kernel_count"):
        pattern = (rule.get("params") or {}).get("pattern")
        if pattern:
            return str(pattern)
    patterns = _patterns(data)
    return DEFAULT_PATTERN if DEFAULT_PATTERN in patterns else next(iter(patterns))


def _sort_regions(regions: list[str]) -> list[str]:
    return sorted(regions, key=lambda r: (REGION_ORDER.index(r) if r in REGION_ORDER else len(REGION_ORDER), r))


# ---- analysis.json ------------------------------------------------------------------------------


def _files_of(analysis: Any) -> list[dict[str, Any]]:
    """The per-file (per-rank) sections of one trial's TraceAnalysis JSON."""
    if not isinstance(analysis, dict):
        return []
    files = analysis.get("files")
    if isinstance(files, list):
        return [f for f in files if isinstance(f, dict)]
    if isinstance(files, dict):
        return [{"file": k, **v} for k, v in files.items() if isinstance(v, dict)]
    return [analysis]


def _profiled(data: ReportData, variant: str) -> list[TrialRecord]:
    return [t for t in data.trials_of(variant, "profiled")]


def _count_rows(file_facts: dict[str, Any], pattern: str) -> dict[str, dict[str, Any]]:
    """Region -> the count row of `pattern` in one file's analysis. A region counted in several
    units keeps its graph-launch row (the replays) over its span row; `trace` rows (ops outside
    every region) are left out."""
    rows: dict[str, dict[str, Any]] = {}
    counts = file_facts.get("counts")
    if isinstance(counts, list):
        for row in counts:
            if not isinstance(row, dict) or row.get("pattern") != pattern or row.get("unit") == "trace":
                continue
            region = str(row.get("region"))
            current = rows.get(region)
            if current is None or (row.get("unit") == "graph_launch" and (row.get("replays") or 0) > 0):
                rows[region] = row
    elif isinstance(file_facts.get("regions"), dict):  # older layout: regions -> counts -> pattern
        for region, facts in file_facts["regions"].items():
            value = (facts.get("counts") or {}).get(pattern) if isinstance(facts, dict) else None
            if isinstance(value, dict):
                rows[str(region)] = value
    return rows


def count_bars(data: ReportData, pattern: str) -> list[CountBar]:
    """Per region and variant: the pattern per replay (min, max), total and replays, summed over
    the variant's profiled trials and ranks. From analysis.json; else from the kernel_count rules."""
    bars: list[CountBar] = []
    for variant in data.variant_names:
        acc: dict[str, list[dict[str, Any]]] = {}
        for trial in _profiled(data, variant):
            for facts in _files_of(data.analysis.get(trial.name)):
                for region, row in _count_rows(facts, pattern).items():
                    if row.get("known", True) is not False:
                        acc.setdefault(region, []).append(row)
        for region, items in acc.items():
            bars.append(_bar(region, variant, items))
    if bars:
        order = _sort_regions(list({b.region for b in bars}))
        return sorted(bars, key=lambda b: order.index(b.region))
    from sglang_spec_harness.report.numbers import counts_from_rules

    rows = [r for r in counts_from_rules(data) if r.pattern == pattern]
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((r.region, r.variant), []).append(
            {"total": r.total, "replays": r.replays, "per_replay_min": r.per_replay_min, "per_replay_max": r.per_replay_max}
        )
    order = _sort_regions(list({region for region, _ in grouped}))
    return sorted((_bar(region, variant, items) for (region, variant), items in grouped.items()),
                  key=lambda b: order.index(b.region))


def _bar(region: str, variant: str, items: list[dict[str, Any]]) -> CountBar:
    def values(key: str) -> list[float]:
        return [float(i[key]) for i in items if isinstance(i.get(key), (int, float))]

    lows, highs = values("per_replay_min"), values("per_replay_max")
    return CountBar(
        region=region,
        variant=variant,
        per_replay_min=min(lows) if lows else None,
        per_replay_max=max(highs) if highs else None,
        total=int(sum(values("total"))),
        replays=int(sum(values("replays"))),
    )


_FACT_KEYS_FIRST = ("platform", "format", "subject", "kernels", "cpu_ops", "graph_launches",
                    "graph_launches_without_kernels", "unlabelled_graph_launches", "gpu_ops_without_launch",
                    "graph_trace_mode")


def rank_facts(data: ReportData) -> list[dict[str, Any]]:
    """One row per (profiled trial, trace file/rank): the validity facts of the analysis."""
    rows = []
    for trial in [t for v in data.variant_names for t in _profiled(data, v)]:
        for facts in _files_of(data.analysis.get(trial.name)):
            validity = as_object(facts.get("validity"))
            row: dict[str, Any] = {
                "variant": trial.variant,
                "trial": trial.name,
                "rank": facts.get("rank", validity.get("rank", 0)),
            }
            merged = {**{k: v for k, v in facts.items() if not isinstance(v, (dict, list))}, **validity}
            for key in _FACT_KEYS_FIRST:
                if key in merged:
                    row[key] = merged[key]
            for key, value in merged.items():
                if key not in row and key not in ("rank", "rank_source", "file", "path") and not isinstance(value, (dict, list)):
                    row[key] = value
            rows.append(row)
    if rows:  # same columns in every row, for one table
        keys = list(dict.fromkeys(k for r in rows for k in r))
        rows = [{k: r.get(k) for k in keys} for r in rows]
    return rows


def analysis_warnings(data: ReportData) -> list[str]:
    out = []
    for trial_name, analysis in data.analysis.items():
        for facts in _files_of(analysis):
            validity = as_object(facts.get("validity"))
            for warning in [*(facts.get("warnings") or []), *(validity.get("warnings") or [])]:
                out.append(f"{trial_name}: {warning}")
    return out


# ---- the traces themselves ----------------------------------------------------------------------


@dataclass
class TraceView:
    """One profiled trial's first (rank 0) trace, read and attributed to regions."""

    trial: TrialRecord
    path: Path
    on_gpu: bool  # kernels recorded: GPU time and kernels; else CPU ops
    units: pd.DataFrame  # region instances in time order: region, start, end, pid, tid
    work: pd.DataFrame  # kernels (GPU) or CPU ops: name, region, ts, dur, lane
    cycles: int  # TARGET_VERIFY instances: one per decoding cycle


def _region_table(data: ReportData):
    from sglang_spec_harness.traces.regions import region_table

    regions = as_object(data.scenario.get("regions"))
    rules = [(str(r["name"]), str(r["regex"])) for r in regions.get("rules") or [] if isinstance(r, dict)]
    return region_table(rules or None, replace_default=bool(regions.get("replace")))


def _trace_file(trial: TrialRecord) -> Path | None:
    """The rank-0 Kineto trace of a trial (or its first trace of any supported kind)."""
    candidates = sorted(trial.trace_paths, key=lambda p: (".trace.json" not in p.name, "-TP-0" not in p.name, p.name))
    readable = [p for p in candidates if p.name.endswith((".json", ".json.gz", ".sqlite"))]
    return readable[0] if readable else None


def trace_views(data: ReportData) -> dict[str, TraceView]:
    """Variant -> the view of its first profiled trial's trace. Read once per report."""
    cache_key = "trace_views"
    if cache_key in data.cache:
        return data.cache[cache_key]
    views: dict[str, TraceView] = {}
    for variant in data.variant_names:
        trial = next(iter(_profiled(data, variant)), None)
        if trial is None:
            continue
        path = _trace_file(trial)
        if path is None:
            data.notes.append(f"Profiled trial {trial.name} has no trace file: no timeline or region times for {variant}.")
            continue
        try:
            views[variant] = _read_view(data, trial, path)
        except Exception as exc:  # any unreadable trace becomes a note, never a crash
            data.notes.append(f"Trace {trial.name}/{path.name} could not be analysed ({type(exc).__name__}: {exc}).")
    data.cache[cache_key] = views
    return views


def _read_view(data: ReportData, trial: TrialRecord, path: Path) -> TraceView:
    from sglang_spec_harness.traces.attribution import attribute
    from sglang_spec_harness.traces.readers import read_trace

    tables = read_trace(path)
    attribution = attribute(tables, _region_table(data))
    gpu_ops = attribution.gpu_ops
    kernels = gpu_ops[gpu_ops["kind"].astype(str) == "kernel"] if len(gpu_ops) else gpu_ops
    on_gpu = len(kernels) > 0
    if on_gpu:
        launches = attribution.launches
        launches = launches[launches["region"].astype(str) != NO_REGION]
        launches = launches[launches["gpu_start"].notna()]
        units = pd.DataFrame({
            "region": launches["region"].astype(str).to_numpy(),
            "start": launches["gpu_start"].to_numpy(dtype=float),
            "end": launches["gpu_end"].to_numpy(dtype=float),
            "pid": launches["pid"].to_numpy(),
            "tid": launches["tid"].to_numpy(),
            "span": launches["span"].to_numpy(),
        })
        work = pd.DataFrame({
            "name": kernels["name"].astype(str).to_numpy(),
            "region": kernels["region"].astype(str).to_numpy(),
            "ts": kernels["ts"].to_numpy(dtype=float),
            "dur": kernels["dur"].to_numpy(dtype=float),
            "lane": [f"stream {s}" for s in kernels["stream"].to_numpy()],
        })
    else:
        spans = attribution.spans
        spans = spans[spans["region"].astype(str) != NO_REGION]
        units = pd.DataFrame({
            "region": spans["region"].astype(str).to_numpy(),
            "start": spans["ts"].to_numpy(dtype=float),
            "end": (spans["ts"] + spans["dur"]).to_numpy(dtype=float),
            "pid": spans["pid"].to_numpy(),
            "tid": spans["tid"].to_numpy(),
            "span": np.arange(len(spans)),
        })
        ops = attribution.cpu_ops
        work = pd.DataFrame({
            "name": ops["name"].astype(str).to_numpy(),
            "region": ops["region"].astype(str).to_numpy(),
            "ts": ops["ts"].to_numpy(dtype=float),
            "dur": ops["dur"].to_numpy(dtype=float),
            "pid": ops["pid"].to_numpy(),
            "tid": ops["tid"].to_numpy(),
        })
        work["lane"] = _nesting_lanes(work)
    units = units.sort_values("start", kind="stable").reset_index(drop=True)
    verify = units[units["region"] == "TARGET_VERIFY"]
    # One cycle = one target verify: count its distinct annotation spans (a graph launch per span
    # on GPU), falling back to the launches when no span is known.
    cycles = int(verify["span"][verify["span"] >= 0].nunique()) or len(verify)
    return TraceView(trial=trial, path=path, on_gpu=on_gpu, units=units, work=work, cycles=cycles)


def _nesting_lanes(ops: pd.DataFrame, max_depth: int = 3) -> list[str]:
    """CPU ops nest (aten::softmax holds aten::_softmax): lane = nesting depth on its thread."""
    lanes = [""] * len(ops)
    order = ops.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False], kind="stable")
    stack: list[float] = []
    thread = None
    for position, pid, tid, ts, dur in zip(order.index, order["pid"], order["tid"], order["ts"], order["dur"]):
        if (pid, tid) != thread:
            stack, thread = [], (pid, tid)
        while stack and stack[-1] <= ts:
            stack.pop()
        depth = min(len(stack), max_depth - 1)
        lanes[position] = f"ops depth {depth + 1}"
        stack.append(ts + dur)
    return lanes


def unit_label(views: dict[str, TraceView]) -> str:
    on_gpu = any(v.on_gpu for v in views.values())
    return "kernels" if on_gpu else "CPU ops"


def region_time_per_cycle(data: ReportData) -> tuple[dict[str, dict[str, float]], str]:
    """Variant -> region -> µs per cycle: GPU kernel time on a GPU trace, wall time of the region
    spans on a CPU trace (ops nest, so their times would count twice)."""
    views = trace_views(data)
    out: dict[str, dict[str, float]] = {}
    for variant, view in views.items():
        if view.cycles == 0:
            data.notes.append(f"{view.trial.name}: no TARGET_VERIFY in the trace, so no per-cycle times.")
            continue
        if view.on_gpu:
            per_region = view.work.groupby("region")["dur"].sum()
        else:
            per_region = (view.units["end"] - view.units["start"]).groupby(view.units["region"]).sum()
        per_region = per_region[per_region.index != NO_REGION]
        out[variant] = {r: float(per_region[r]) / view.cycles for r in _sort_regions(list(per_region.index))}
    label = "GPU kernel µs" if any(v.on_gpu for v in views.values()) else "CPU µs"
    return out, label


@dataclass(frozen=True)
class TopRow:
    name: str
    baseline_us: float | None
    candidate_us: float | None
    baseline_calls: float | None
    candidate_calls: float | None

    @property
    def delta_us(self) -> float | None:
        if self.baseline_us is None and self.candidate_us is None:
            return None
        return (self.candidate_us or 0.0) - (self.baseline_us or 0.0)


def top_kernels(data: ReportData, n: int = TOP_N) -> tuple[dict[str, list[TopRow]], str]:
    """Region -> the top kernels (CPU ops) by time per cycle in either variant, with both values;
    names that match the main count pattern are always listed (they are what the run is about)."""
    views = trace_views(data)
    pattern = re.compile(_patterns(data).get(main_pattern(data), main_pattern(data)))
    base, cand = views.get("baseline"), views.get("candidate")
    if base is None and cand is None:
        return {}, unit_label(views)

    def per_name(view: TraceView | None) -> pd.DataFrame:
        if view is None or view.cycles == 0:
            return pd.DataFrame({"region": pd.Series(dtype=object), "name": pd.Series(dtype=object),
                                 "us": pd.Series(dtype=float), "calls": pd.Series(dtype=float)})
        grouped = view.work.groupby(["region", "name"])["dur"].agg(["sum", "count"]).reset_index()
        grouped["us"] = grouped["sum"] / view.cycles
        grouped["calls"] = grouped["count"] / view.cycles
        return grouped[["region", "name", "us", "calls"]]

    b, c = per_name(base), per_name(cand)
    tables: dict[str, list[TopRow]] = {}
    for region in _sort_regions(list(set(b["region"]) | set(c["region"]))):
        if region == NO_REGION:
            continue
        rb = b[b["region"] == region].set_index("name")
        rc = c[c["region"] == region].set_index("name")
        matching = [name for name in [*rb.index, *rc.index] if pattern.search(str(name))]
        names = list(dict.fromkeys([*rb["us"].nlargest(n).index, *rc["us"].nlargest(n).index, *matching]))

        def get(frame: pd.DataFrame, name: str, column: str) -> float | None:
            values = frame[column]
            return float(values[name]) if name in values.index else None

        rows = [TopRow(name, get(rb, name, "us"), get(rc, name, "us"), get(rb, name, "calls"), get(rc, name, "calls"))
                for name in names]
        rows.sort(key=lambda r: -max(r.baseline_us or 0.0, r.candidate_us or 0.0))
        tables[region] = rows
    label = "kernels" if any(v.on_gpu for v in views.values()) else "CPU ops (inclusive time)"
    return tables, label


def _cycles(units: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """Cycles as slices of the units: a cycle starts at a DRAFT_DECODE that follows another
    region (several draft steps stay in one cycle), or at a TARGET_VERIFY with no draft decode."""
    anchor = "DRAFT_DECODE" if (units["region"] == "DRAFT_DECODE").any() else "TARGET_VERIFY"
    regions = units["region"].tolist()
    starts = [i for i, r in enumerate(regions) if r == anchor and (i == 0 or regions[i - 1] != anchor)]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(regions)
        cycle = units.iloc[start:end]
        cycle = cycle[cycle["region"].isin(CYCLE_REGIONS)]
        if (cycle["region"] == "TARGET_VERIFY").any():
            yield cycle


def cycle_timelines(data: ReportData, pattern: str) -> tuple[dict[str, list[TimelineBar]], str]:
    """Variant -> bars of one cycle from the middle of its profiled trace (regions, then kernels
    or CPU ops), times relative to the cycle's start."""
    views = trace_views(data)
    regex = re.compile(_patterns(data).get(pattern, pattern))
    out: dict[str, list[TimelineBar]] = {}
    for variant, view in views.items():
        units = view.units
        if not view.on_gpu and len(units):
            # CPU: follow the thread that runs the verify spans (the engine's scheduler thread).
            verify = units[units["region"] == "TARGET_VERIFY"]
            if len(verify):
                pid, tid = verify.iloc[0][["pid", "tid"]]
                units = units[(units["pid"] == pid) & (units["tid"] == tid)].reset_index(drop=True)
        cycles = list(_cycles(units))
        if not cycles:
            data.notes.append(f"{view.trial.name}: no complete decoding cycle found in the trace for the timeline.")
            continue
        cycle = cycles[len(cycles) // 2].iloc[:MAX_TIMELINE_UNITS]  # an odd trace must not draw thousands
        t0, t1 = float(cycle["start"].min()), float(cycle["end"].max())
        # Columns as lists, not itertuples: a row of itertuples has no column types.
        bars = [TimelineBar("regions", region, start - t0, end - start, region)
                for region, start, end in zip(cycle["region"].tolist(), cycle["start"].tolist(), cycle["end"].tolist())]
        work = view.work[(view.work["ts"] >= t0) & (view.work["ts"] < t1)]
        if not view.on_gpu and len(cycle):
            work = work[(work["pid"] == cycle.iloc[0]["pid"]) & (work["tid"] == cycle.iloc[0]["tid"])]
        work = work.sort_values("lane", kind="stable")
        for lane, name, ts, dur, region in zip(*(work[c].tolist() for c in ("lane", "name", "ts", "dur", "region"))):
            bars.append(TimelineBar(lane, name, ts - t0, dur, region, bool(regex.search(name))))
        out[variant] = bars
    return out, "kernels" if any(v.on_gpu for v in views.values()) else "CPU ops"
