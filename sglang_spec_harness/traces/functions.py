"""The Python functions that ran in each region, from a with_stack trace's `python_function` frames.

A frame is in a region when the region table labels it as it labels a CPU op at the frame's start
(`attribution.label_points`: the first rule with a span open on the frame's thread, the innermost
such span): the frames nested in the region's spans, the span's own frame included when a frame
names the region. On a GPU trace the kernels of a graph replay run after the CPU has moved on, so
the stack that launched them also counts: every frame open on the launching thread at each launch
of the region (graph replay or eager kernel), its outer frames included.

Per region and function (file, name, first line): calls (frames) and time (summed durations, which
include what the function called, and count a recursive call again). A file is named from its
package on (`names.SOURCE_ROOTS`), so that the same function has the same name in every environment.
At most MAX_FUNCTIONS_PER_REGION per region, most time first; the table says when it holds fewer
than ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from sglang_spec_harness.traces.attribution import Attribution, enclosing_rows, innermost_open_span, label_points
from sglang_spec_harness.traces.model import NO_ID, TraceTables
from sglang_spec_harness.traces.names import SOURCE_FRAME, SOURCE_ROOTS
from sglang_spec_harness.traces.regions import RegionTable
from sglang_spec_harness.traces.schema import FunctionCall, RegionFunctions
from sglang_spec_harness.vocabulary import NO_REGION

MAX_FUNCTIONS_PER_REGION = 400
_KEY = ["region", "file", "function", "line"]


def source_file(path: str) -> str:
    """A frame's file from its package on: the part after a site-packages folder or an SGLang
    checkout's `python/` (names.SOURCE_ROOTS); a path PyTorch already made relative stays as it is."""
    for root in SOURCE_ROOTS:
        cut = root.match(path)
        if cut:
            return path[cut.end():]
    return path


def region_functions(trace: TraceTables, attribution: Attribution, table: RegionTable) -> list[RegionFunctions]:
    """Per region (in the table's order), the functions that ran there; [] for a trace without
    Python frames (no with_stack)."""
    frames = trace.python_frames
    if len(frames) == 0:
        return []
    names = np.array([r.name for r in table.rules] + [NO_REGION], dtype=object)
    rule, _ = label_points(frames[["pid", "tid", "ts"]], trace.annotations, table)
    rows, regions = [np.flatnonzero(rule >= 0)], [names[rule[rule >= 0]]]
    stack_rows, stack_regions = _launch_stacks(frames, attribution.launches)
    rows.append(stack_rows)
    regions.append(stack_regions)
    pairs = pd.DataFrame({"row": np.concatenate(rows), "region": np.concatenate(regions)}).drop_duplicates()
    if len(pairs) == 0:
        return []
    picked = frames.iloc[pairs["row"].to_numpy()]
    per_name = pd.DataFrame({"region": pairs["region"].to_numpy(), "code": picked["name"].cat.codes.to_numpy(),
                             "dur": picked["dur"].to_numpy()})
    grouped = per_name.groupby(["region", "code"], sort=False)["dur"].agg(["size", "sum"]).reset_index()
    parsed = _parse(picked["name"].cat.categories)
    grouped[["file", "function", "line"]] = [parsed[code] for code in grouped["code"]]
    summed = grouped.groupby(_KEY, sort=False)[["size", "sum"]].sum().reset_index()
    order = {name: index for index, name in enumerate(table.region_names)}
    by_region = {str(region): group for region, group in summed.groupby("region", sort=False)}
    return [_table(region, [FunctionCall(f, fn, int(line), int(n), float(t))
                            for _, f, fn, line, n, t in by_region[region].itertuples(index=False, name=None)])
            for region in sorted(by_region, key=lambda r: order.get(r, len(order)))]


def _launch_stacks(frames: pd.DataFrame, launches: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(frame row, region) for every frame open on a region's launch's thread at the launch."""
    launched = launches[launches["region"] != NO_REGION] if len(launches) else launches
    if len(launched) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=object)
    rows = frames[["pid", "tid", "ts", "dur"]].assign(row=np.arange(len(frames)))
    position = innermost_open_span(launched[["pid", "tid", "ts"]], rows)
    parent = enclosing_rows(rows)
    region = launched["region"].to_numpy(dtype=object)
    found_rows, found_regions = [], []
    while (open_ := position >= 0).any():
        found_rows.append(position[open_])
        found_regions.append(region[open_])
        position, region = parent[position[open_]], region[open_]
    return np.concatenate(found_rows) if found_rows else np.empty(0, dtype=np.int64), (
        np.concatenate(found_regions) if found_regions else np.empty(0, dtype=object))


def _parse(categories: Iterable[object]) -> list[tuple[str, str, int]]:
    out = []
    for name in categories:
        match = SOURCE_FRAME.match(str(name))
        # the reader keeps only names that match; a table built elsewhere may hold others
        out.append((source_file(match["file"]), match["function"], int(match["line"])) if match
                   else (str(name), str(name), NO_ID))
    return out


def _table(region: str, calls: Sequence[FunctionCall]) -> RegionFunctions:
    """The region's table, most time first (then by file, name and line), cut at the cap."""
    ordered = sorted((c for c in calls if c.line != NO_ID), key=lambda c: (-c.time_us, c.file, c.function, c.line))
    kept = ordered[:MAX_FUNCTIONS_PER_REGION]
    return RegionFunctions(region=region, functions=len(ordered), complete=len(kept) == len(ordered),
                           file=[c.file for c in kept], function=[c.function for c in kept],
                           line=[c.line for c in kept], calls=[c.calls for c in kept],
                           time_us=[round(c.time_us, 3) for c in kept])


def combine_region_functions(tables: Sequence[RegionFunctions], region_order: Sequence[str] = ()) -> list[RegionFunctions]:
    """Tables of several files (ranks, or profiled trials) as one per region: calls and times summed.
    Complete when every part was and the sum fits the cap; else `functions` is at least the most any
    part saw."""
    by_region: dict[str, list[RegionFunctions]] = {}
    for t in tables:
        by_region.setdefault(t.region, []).append(t)
    order = {name: index for index, name in enumerate(region_order)}
    out = []
    for region in sorted(by_region, key=lambda r: (order.get(r, len(order)), r)):
        parts = by_region[region]
        summed: dict[tuple[str, str, int], list[float]] = {}
        for part in parts:
            for row in part.rows():
                entry = summed.setdefault((row.file, row.function, row.line), [0, 0.0])
                entry[0] += row.calls
                entry[1] += row.time_us
        combined = _table(region, [FunctionCall(f, fn, line, int(n), t) for (f, fn, line), (n, t) in summed.items()])
        if not all(p.complete for p in parts):
            combined = combined.model_copy(update={
                "complete": False, "functions": max(combined.functions, *(p.functions for p in parts))})
        out.append(combined)
    return out
