"""Trace analysis: which kernels (or CPU ops) each CUDA graph replay and each region ran.

Public API (imported lazily, so that `harness --help` stays instant):
    analyze_traces(paths, patterns=None, regions=None, *, replace_default_regions=False,
                   subject="auto") -> TraceAnalysis
    TraceAnalysis (.to_json_dict(), .from_json_dict(), .count(), *_frame() accessors)
    count_in_graph_replays(trace_or_profile, pattern, region) -> ReplayCounts  (for unit tests;
                   raises CountUnavailable where the trace cannot support the count)
    CountRow, PatternTotal, Validity, FileAnalysis, CombinedAnalysis, TopOp, OpTable  (schema)
    RegionTable, DEFAULT_SGLANG_REGIONS, DEFAULT_COUNT_PATTERNS, read_trace
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "analyze_traces": "harness.traces.analysis",
    "TraceAnalysis": "harness.traces.analysis",
    "count_in_graph_replays": "harness.traces.replays",
    "ReplayCounts": "harness.traces.replays",
    "CountUnavailable": "harness.traces.replays",
    "CountRow": "harness.traces.schema",
    "PatternTotal": "harness.traces.schema",
    "Validity": "harness.traces.schema",
    "FileAnalysis": "harness.traces.schema",
    "CombinedAnalysis": "harness.traces.schema",
    "TopOp": "harness.traces.schema",
    "OpTable": "harness.traces.schema",
    "SCHEMA_VERSION": "harness.traces.schema",
    "RegionTable": "harness.traces.regions",
    "DEFAULT_SGLANG_REGIONS": "harness.traces.regions",
    "NO_REGION": "harness.traces.regions",
    "DEFAULT_COUNT_PATTERNS": "harness.traces.patterns",
    "read_trace": "harness.traces.readers",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
