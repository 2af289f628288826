"""`count_in_graph_replays`: how many kernels (or CPU ops) matching a pattern each graph replay of a
region ran, in a form a unit test asserts on. Takes a finished `torch.profiler.profile` or trace
files; built on `analyze_traces_with_tables` (same attribution, regions and counting units as `harness analyze`).

It fails closed: where the trace cannot support the count it raises `CountUnavailable`, never a 0.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sglang_spec_harness.traces.analysis import AnalyzedTraces, analyze_traces_with_tables
from sglang_spec_harness.traces.schema import TraceAnalysis
from sglang_spec_harness.traces.counting import GRAPH_MODE_NOTE
from sglang_spec_harness.traces.patterns import DEFAULT_COUNT_PATTERNS, NamedPattern, named_pattern
from sglang_spec_harness.traces.regions import RegionTable
from sglang_spec_harness.vocabulary import NO_REGION

# the name a pattern given as a regex is counted under
_PATTERN = "pattern"


class CountUnavailable(Exception):
    """The trace cannot support the count (the message says why): the region has no graph replays (no
    spans, on a CPU-only trace), its replays recorded no kernels, or the trace does not record the
    kernels of replays (an Nsight export in graph mode)."""


@dataclass(frozen=True)
class ReplayCounts:
    """The matches of `pattern` in each replay of `region`.

    unit: `graph_launch` (each graph replay of the region) on a trace with GPU work; `span` (each
    instance of the region's span) on a CPU-only trace, where nothing is replayed and the span is the
    unit. per_replay: matches in each replay, file by file (in the order given), each in time order;
    never empty. empty_launches: the region's graph launches that recorded no GPU op (not counted).
    eager: matches launched eagerly inside the region's spans, outside its graph replays (0 on a
    CPU-only trace). warnings: the analysis's validity warnings (docs/analysis.md).
    """

    region: str
    pattern: str  # the regular expression searched in kernel (or CPU op) names
    unit: Literal["graph_launch", "span"]
    per_replay: tuple[int, ...]
    empty_launches: int = 0
    eager: int = 0
    matched_names: dict[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def replays(self) -> int:
        return len(self.per_replay)

    @property
    def total(self) -> int:
        return sum(self.per_replay)

    def max(self) -> int:
        return max(self.per_replay)

    def min(self) -> int:
        return min(self.per_replay)


def count_in_graph_replays(
    trace_or_profile: Any, pattern: str | re.Pattern[str], region: str
) -> ReplayCounts:
    """Count `pattern` in every graph replay of `region`.

    trace_or_profile: a finished `torch.profiler.profile` (its Chrome trace is exported to a temporary
    file, kept while the profile lives: torch exports a trace once), a trace file (Kineto
    `.json`/`.json.gz`, Nsight Systems `.sqlite`), or a list of them (one per TP rank). pattern: a named default pattern (`softmax`) or a regular expression,
    searched in kernel names (CPU op names on a CPU-only trace). region: a region of the default
    SGLang table (`DRAFT_DECODE`, `DRAFT_EXTEND`, `TARGET_VERIFY`, `PREFILL`; `(none)` for replays in
    no region), or else a regular expression over annotation names (a `record_function` span, an
    NVTX range, a `with_stack` frame) that defines the region, ahead of the table.

    Raises CountUnavailable where the trace cannot support the count; HarnessInputError for an
    unreadable trace or an invalid regular expression.
    """
    paths, source = _trace_files(trace_or_profile)
    counted, table = counting_query(pattern, region, RegionTable.default())
    return replay_counts(analyze_traces_with_tables(paths, [counted], table), region, counted.name, source=source)


def counting_query(pattern: str | re.Pattern[str], region: str, table: RegionTable,
                   patterns: Mapping[str, str] = DEFAULT_COUNT_PATTERNS) -> tuple[NamedPattern, RegionTable]:
    """What to count and the region table to count it with: `pattern` a name of `patterns` or else a
    regex (counted under the name `pattern`); `region` a region of `table`, `(none)`, or else a regex
    that defines the region, put in front of `table` (so that it wins)."""
    if isinstance(pattern, str) and pattern in patterns:
        counted = named_pattern(pattern, patterns[pattern], where=f"pattern {pattern!r}")
    else:
        regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        counted = named_pattern(_PATTERN, regex, where=f"pattern {regex!r}")
    if region != NO_REGION and region not in table.region_names:
        table = table.extended([named_pattern(region, region, where=f"region {region!r}")])
    return counted, table


def replay_counts(analyzed: AnalyzedTraces, region: str, pattern: str, *, source: str) -> ReplayCounts:
    """The ReplayCounts of `pattern` (a name the analysis counted) in `region` of traces analysed with
    their tables (the unit: graph replays on a GPU trace, spans on a CPU-only one). `source` names
    the traces in messages. Raises CountUnavailable where the trace cannot support the count."""
    analysis = analyzed.analysis
    validity = analysis.combined.validity
    if validity.subject == "mixed":
        raise CountUnavailable(f"{source}: GPU traces and CPU-only traces together: give one kind")
    unit: Literal["graph_launch", "span"] = "graph_launch" if validity.subject == "gpu_ops" else "span"
    row = analysis.count(region, pattern, unit)
    if row is None:
        raise CountUnavailable(_why_absent(analysis, region, unit, source))
    if not row.known:
        raise CountUnavailable(f"{source}: region {region!r}: {row.note}")
    eager = analysis.count(region, pattern, "span") if unit == "graph_launch" else None
    return ReplayCounts(
        region=region,
        pattern=analysis.patterns[pattern],
        unit=unit,
        per_replay=tuple(int(n) for n in analyzed.instances_frame(region, pattern, unit)["count"]),
        empty_launches=row.empty_launches,
        eager=(eager.total or 0) if eager is not None else 0,
        matched_names=dict(row.matched_names),
        warnings=tuple(validity.warnings),
    )


def _why_absent(analysis: TraceAnalysis, region: str, unit: str, source: str) -> str:
    what = "graph replays" if unit == "graph_launch" else "spans (a CPU-only trace: spans are the unit)"
    found = {name: counts.units for name, counts in analysis.combined.regions.items() if counts.unit == unit}
    elsewhere = ", ".join(f"{name} {n}" for name, n in found.items()) or "none"
    spans = analysis.combined.validity.region_instances.get(region, {}).get("span", 0)
    eager = f"; it ran eagerly ({spans} spans), not as graph replays" if unit == "graph_launch" and spans else ""
    validity = analysis.combined.validity
    blind = "" if validity.per_graph_counts_known else "; " + GRAPH_MODE_NOTE.format(mode=validity.graph_trace_mode)
    return f"{source}: region {region!r} has no {what}{eager} (regions that have: {elsewhere}){blind}"


def _trace_files(trace_or_profile: Any) -> tuple[list[str], str]:
    """The trace paths, and how to name them in a message. A path-like object is read by its path
    (os.fsdecode), not by its str(): a directory entry's str() is not its path."""
    if hasattr(trace_or_profile, "export_chrome_trace"):
        return [str(_exported(trace_or_profile))], "the profile"
    if isinstance(trace_or_profile, (str, os.PathLike)):
        path = os.fsdecode(trace_or_profile)
        return [path], path
    if isinstance(trace_or_profile, Sequence) and all(isinstance(p, (str, os.PathLike)) for p in trace_or_profile):
        paths = [os.fsdecode(p) for p in trace_or_profile]
        return paths, paths[0] if len(paths) == 1 else f"{len(paths)} traces"
    raise TypeError("count_in_graph_replays: expected a torch.profiler.profile, a trace path or a list of them, "
                    f"not {type(trace_or_profile).__name__}")


# profile -> its exported trace. torch exports a profile's trace once ("Trace is already saved"), so
# the file is kept for later calls, and removed with its folder when the profile is collected.
_EXPORTED: weakref.WeakKeyDictionary[Any, Path] = weakref.WeakKeyDictionary()


def _exported(profile: Any) -> Path:
    path = _EXPORTED.get(profile)
    if path is not None and path.is_file():
        return path
    folder = tempfile.mkdtemp(prefix="harness-profile-")
    weakref.finalize(profile, shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / "profile.trace.json"
    try:
        profile.export_chrome_trace(str(path))
    except RuntimeError as exc:
        if "already saved" not in str(exc):
            raise
        raise ValueError("count_in_graph_replays: this profile's trace was exported already (torch exports it "
                         "once): pass the file it was exported to instead") from None
    _EXPORTED[profile] = path
    return path
