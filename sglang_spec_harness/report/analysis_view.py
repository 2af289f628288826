"""What the report shows of the trace analysis (analysis.json, one `TraceAnalysis` per profiled
trial, written by the run stage), as plain rows for figures and tables:
- the counts, per-rank facts and warnings: the numbers the rules judged, so the report shows them
  rather than recounting;
- the trace views (`views`, sglang_spec_harness/traces/views.py): time per region and cycle, the top
  kernels (or CPU ops) per region, and the timeline of one cycle, computed when the trial was
  analysed. The report never reads a trace file; an analysis written before the views existed gets
  one note saying which command recomputes them.

Every function returns something empty (and adds a note) rather than raising: a report of a run
with a broken analysis is still a report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import BaseModel, ValidationError

from sglang_spec_harness.report.data import ReportData, TrialView
from sglang_spec_harness.rundir import valid_number
from sglang_spec_harness.report.figures import CountBar, TimelineBar
from sglang_spec_harness.traces.schema import CountRow, FileAnalysis, TraceAnalysis, TraceViews
from sglang_spec_harness.vocabulary import NO_REGION, REGION_ORDER
DEFAULT_PATTERN = "softmax"
TOP_N = 8


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


def _analyses(data: ReportData) -> dict[str, TraceAnalysis]:
    """Trial directory name -> its trace analysis; a section that does not read is a note."""
    cache_key = "analyses"
    if cache_key in data.cache:
        return data.cache[cache_key]
    out: dict[str, TraceAnalysis] = {}
    for name, entry in data.analysis.items():
        if isinstance(entry, TraceAnalysis):
            out[name] = entry
            continue
        try:
            out[name] = TraceAnalysis.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            data.notes.append(f"analysis.json: trials.{name}{'.' + where if where else ''}: {error['msg']}: "
                              "its counts and trace views are not shown.")
    data.cache[cache_key] = out
    return out


def _profiled(data: ReportData, variant: str) -> list[TrialView]:
    return [t for t in data.trials_of(variant, "profiled")]


def _count_rows(file: FileAnalysis, pattern: str) -> dict[str, CountRow]:
    """Region -> the count row of `pattern` in one file's analysis. A region counted in several
    units keeps its graph-launch row (the replays) over its span row; `trace` rows (ops outside
    every region) are left out."""
    rows: dict[str, CountRow] = {}
    for row in file.counts:
        if row.pattern != pattern or row.unit == "trace":
            continue
        if row.region not in rows or (row.unit == "graph_launch" and row.replays > 0):
            rows[row.region] = row
    return rows


def count_bars(data: ReportData, pattern: str) -> list[CountBar]:
    """Per region and variant: the pattern per replay (min, max), total and replays, summed over
    the variant's profiled trials and ranks. From analysis.json; else from the kernel_count rules."""
    analyses = _analyses(data)
    bars: list[CountBar] = []
    for variant in data.variant_names:
        acc: dict[str, list[CountRow]] = {}
        for trial in _profiled(data, variant):
            analysis = analyses.get(trial.name)
            for file in analysis.files if analysis is not None else []:
                for region, row in _count_rows(file, pattern).items():
                    if row.known:
                        acc.setdefault(region, []).append(row)
        bars += [_bar(region, variant, items) for region, items in acc.items()]
    if bars:
        order = _sort_regions(list({b.region for b in bars}))
        return sorted(bars, key=lambda b: order.index(b.region))
    from sglang_spec_harness.report.key_numbers import counts_from_rules

    grouped: dict[tuple[str, str], list[Any]] = {}
    for r in counts_from_rules(data):
        if r.pattern == pattern:
            grouped.setdefault((r.region, r.variant), []).append(r)
    order = _sort_regions(list({region for region, _ in grouped}))
    return sorted((_bar(region, variant, items) for (region, variant), items in grouped.items()),
                  key=lambda b: order.index(b.region))


def _bar(region: str, variant: str, items: list[Any]) -> CountBar:
    """`items`: count rows of analysis.json, or of the kernel_count rules' observations."""
    def values(key: str) -> list[float]:
        found = [getattr(i, key) for i in items]
        return [float(v) for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]

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
    analyses = _analyses(data)
    rows = []
    for trial in [t for v in data.variant_names for t in _profiled(data, v)]:
        analysis = analyses.get(trial.name)
        for file in analysis.files if analysis is not None else []:
            row: dict[str, Any] = {"variant": trial.variant, "trial": trial.name, "rank": file.rank}
            scalars = {name: value for name in type(file).model_fields
                       if not isinstance(value := getattr(file, name), (BaseModel, dict, list))}
            merged = {**scalars, **file.validity.model_dump(mode="json")}
            for key in _FACT_KEYS_FIRST:
                if key in merged:
                    row[key] = merged[key]
            for key, value in merged.items():
                if key not in row and key not in ("rank", "rank_source", "path") and not isinstance(value, (dict, list)):
                    row[key] = value
            rows.append(row)
    if rows:  # same columns in every row, for one table
        keys = list(dict.fromkeys(k for r in rows for k in r))
        rows = [{k: r.get(k) for k in keys} for r in rows]
    return rows


def analysis_warnings(data: ReportData) -> list[str]:
    return [f"{trial_name}: {warning}" for trial_name, analysis in _analyses(data).items()
            for file in analysis.files for warning in file.validity.warnings]


# ---- the trace views (analysis.json `views`) -----------------------------------------------------


def views_by_variant(data: ReportData) -> dict[str, tuple[str, TraceViews]]:
    """Variant -> (trial, views) of its first analysed profiled trial. An analysis without views
    (written before them) adds one note for all variants."""
    cache_key = "trace_views"
    if cache_key in data.cache:
        return data.cache[cache_key]
    analyses = _analyses(data)
    views: dict[str, tuple[str, TraceViews]] = {}
    absent = []
    for variant in data.variant_names:
        trial = next((t for t in _profiled(data, variant) if t.name in analyses), None)
        if trial is None:
            continue
        found = analyses[trial.name].views
        if found is None:
            absent.append(trial.name)
        else:
            views[variant] = (trial.name, found)
    if absent:
        data.notes.append(
            f"Time per region and cycle, the top kernels and the cycle timeline are not shown for {', '.join(absent)}: "
            f"analysis.json was written before the harness recorded them; "
            f"`harness analyze --run-dir {data.run_dir}` recomputes them from the traces."
        )
    data.cache[cache_key] = views
    return views


def _on_gpu(views: dict[str, tuple[str, TraceViews]]) -> bool:
    return any(view.unit == "kernels" for _, view in views.values())


def unit_label(views: dict[str, tuple[str, TraceViews]]) -> str:
    return "kernels" if _on_gpu(views) else "CPU ops"


def region_time_per_cycle(data: ReportData) -> tuple[dict[str, dict[str, float]], str]:
    """Variant -> region -> µs per cycle: GPU kernel time on a GPU trace, wall time of the region
    spans on a CPU trace (ops nest, so their times would count twice)."""
    views = views_by_variant(data)
    out: dict[str, dict[str, float]] = {}
    for variant, (trial, view) in views.items():
        if view.cycles == 0:
            data.notes.append(f"{trial}: no TARGET_VERIFY in the trace, so no per-cycle times.")
            continue
        times = {r: view.region_time_us[r] / view.cycles for r in _sort_regions(list(view.region_time_us))}
        if any(valid_number(t) is None for t in times.values()):
            data.notes.append(f"{trial}: a time per region in analysis.json is past what a figure can show: not drawn.")
            continue
        out[variant] = times
    return out, "GPU kernel µs" if _on_gpu(views) else "CPU µs"


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


def _per_name(found: tuple[str, TraceViews] | None) -> pd.DataFrame:
    """region, name, µs and calls per cycle of the recorded top ops (none without a cycle)."""
    ops = found[1].top_op_rows() if found is not None and found[1].cycles else []
    cycles = found[1].cycles if found is not None else 1
    return pd.DataFrame({"region": pd.Series([o.region for o in ops], dtype=object),
                         "name": pd.Series([o.name for o in ops], dtype=object),
                         "us": pd.Series([o.time_us / cycles for o in ops], dtype=float),
                         "calls": pd.Series([o.calls / cycles for o in ops], dtype=float)})


def top_kernels(data: ReportData, n: int = TOP_N) -> tuple[dict[str, list[TopRow]], str]:
    """Region -> the top kernels (CPU ops) by time per cycle in either variant, with both values;
    names that match the main count pattern are always listed (they are what the run is about)."""
    views = views_by_variant(data)
    pattern = re.compile(_patterns(data).get(main_pattern(data), main_pattern(data)))
    base, cand = views.get("baseline"), views.get("candidate")
    if base is None and cand is None:
        return {}, unit_label(views)
    b, c = _per_name(base), _per_name(cand)
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
    return tables, "kernels" if _on_gpu(views) else "CPU ops (inclusive time)"


def cycle_timelines(data: ReportData, pattern: str) -> tuple[dict[str, list[TimelineBar]], str]:
    """Variant -> bars of one cycle from the middle of its profiled trace (regions, then kernels
    or CPU ops), times relative to the cycle's start."""
    views = views_by_variant(data)
    regex = re.compile(_patterns(data).get(pattern, pattern))
    out: dict[str, list[TimelineBar]] = {}
    for variant, (trial, view) in views.items():
        bars = view.timeline_bars()
        if not bars:
            data.notes.append(f"{trial}: no complete decoding cycle found in the trace for the timeline.")
            continue
        if any(valid_number(b.start_us) is None or valid_number(b.dur_us) is None for b in bars):
            data.notes.append(f"{trial}: a time of the cycle in analysis.json is past what a figure can show: not drawn.")
            continue
        out[variant] = [TimelineBar(b.lane, b.name, b.start_us, b.dur_us, b.region,
                                    b.lane != "regions" and bool(regex.search(b.name))) for b in bars]
    return out, unit_label(views)
