"""Trace analysis: which kernels (or CPU ops) each CUDA graph replay and each region ran.

Public API (imported lazily, so that `harness --help` stays instant):
    analyze_traces(paths, patterns=None, regions=None, *, replace_default_regions=False,
                   subject="auto") -> TraceAnalysis
    TraceAnalysis (the stored document: .to_json_dict(), .from_json_dict(), .count(); `views`:
                   what the report draws, TraceViews)
    kernels_per_launch_frame(analysis), op_table_frame(analysis) -> DataFrame  (of a document)
    analyze_traces_with_tables(...) -> AnalyzedTraces (.analysis, and the frames that read the
                   traces: .launches_frame(), .ops_frame(), .spans_frame(), .instances_frame())
    count_in_graph_replays(trace_or_profile, pattern, region) -> ReplayCounts  (for unit tests;
                   raises CountUnavailable where the trace cannot support the count)
    CountRow, PatternTotal, Validity, FileAnalysis, CombinedAnalysis, TopOp, OpTable  (schema)
    RegionTable, DEFAULT_SGLANG_REGIONS, DEFAULT_COUNT_PATTERNS, read_trace
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "analyze_traces": "sglang_spec_harness.traces.analysis",
    "analyze_traces_with_tables": "sglang_spec_harness.traces.analysis",
    "AnalyzedTraces": "sglang_spec_harness.traces.analysis",
    "kernels_per_launch_frame": "sglang_spec_harness.traces.analysis",
    "op_table_frame": "sglang_spec_harness.traces.analysis",
    "TraceAnalysis": "sglang_spec_harness.traces.schema",
    "TraceViews": "sglang_spec_harness.traces.schema",
    "count_in_graph_replays": "sglang_spec_harness.traces.replays",
    "ReplayCounts": "sglang_spec_harness.traces.replays",
    "CountUnavailable": "sglang_spec_harness.traces.replays",
    "CountRow": "sglang_spec_harness.traces.schema",
    "PatternTotal": "sglang_spec_harness.traces.schema",
    "Validity": "sglang_spec_harness.traces.schema",
    "FileAnalysis": "sglang_spec_harness.traces.schema",
    "CombinedAnalysis": "sglang_spec_harness.traces.schema",
    "TopOp": "sglang_spec_harness.traces.schema",
    "OpTable": "sglang_spec_harness.traces.schema",
    "SCHEMA_VERSION": "sglang_spec_harness.traces.schema",
    "RegionTable": "sglang_spec_harness.traces.regions",
    "DEFAULT_SGLANG_REGIONS": "sglang_spec_harness.traces.regions",
    "NO_REGION": "sglang_spec_harness.vocabulary",
    "DEFAULT_COUNT_PATTERNS": "sglang_spec_harness.traces.patterns",
    "read_trace": "sglang_spec_harness.traces.readers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
