"""Attribution: each GPU op to the runtime call that launched it, each launch and CPU op to a
region span.

- A GPU op belongs to the runtime call with the same (process, correlation): all kernels of one
  CUDA/HIP graph replay carry the correlation of their `cudaGraphLaunch`. Kineto does not say
  which host process a GPU op came from; if two processes in one file reuse a correlation,
  the launch nearest in time wins.
- A launch (or CPU op) gets its region from the annotations open on its CPU thread at its
  start, by the rule of `regions.RegionTable` (first table entry wins, innermost span for it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sglang_spec_harness.traces.model import NO_ID, TraceTables, name_mask
from sglang_spec_harness.traces.names import GRAPH_LAUNCH_NAME
from sglang_spec_harness.traces.regions import RegionTable
from sglang_spec_harness.vocabulary import NO_REGION


@dataclass
class Attribution:
    """The model's tables joined up. Positions (0..n-1) are the ids used across tables.

    launches: runtime calls that are graph launches or launched a recorded GPU op, with
        is_graph, region, span (position in `spans`, -1 none), kernels, gpu_ops, gpu_start, gpu_end.
    gpu_ops: with launch (position in `launches`, -1 none), is_graph, region, span.
    cpu_ops: with region, span.
    spans: the annotation instances that gave some launch or op its region (the counting unit
        of eager and CPU work), with region and rule (table index).
    """

    launches: pd.DataFrame
    gpu_ops: pd.DataFrame
    cpu_ops: pd.DataFrame
    spans: pd.DataFrame


def attribute(trace: TraceTables, table: RegionTable) -> Attribution:
    runtime = trace.runtime
    launch_of_op = link_gpu_ops(trace.gpu_ops, runtime)
    is_graph_call = name_mask(runtime["name"], lambda n: GRAPH_LAUNCH_NAME.match(n) is not None)
    has_op = np.zeros(len(runtime), dtype=bool)
    has_op[launch_of_op[launch_of_op >= 0]] = True
    launch_rows = np.flatnonzero(is_graph_call | has_op)
    launches = runtime.iloc[launch_rows].reset_index(drop=True)
    launches["is_graph"] = is_graph_call[launch_rows]

    points = pd.concat(
        [launches[["pid", "tid", "ts"]], trace.cpu_ops[["pid", "tid", "ts"]]], ignore_index=True
    )
    rule, span_row = label_points(points, trace.annotations, table)
    span_rows, first_point, span_of_point = np.unique(span_row, return_index=True, return_inverse=True)
    unlabelled = int(len(span_rows) > 0 and span_rows[0] < 0)  # -1 sorts first
    span_of_point = np.where(span_row >= 0, span_of_point - unlabelled, NO_ID)
    spans = trace.annotations.iloc[span_rows[unlabelled:]].reset_index(drop=True)
    region_names = np.array([r.name for r in table.rules] + [NO_REGION], dtype=object)
    point_region = region_names[rule]  # rule -1 picks NO_REGION, the last entry
    spans["rule"] = rule[first_point[unlabelled:]]
    spans["region"] = region_names[spans["rule"].to_numpy()]

    n_launches = len(launches)
    launches["region"] = point_region[:n_launches]
    launches["span"] = span_of_point[:n_launches]
    launches["label"] = _span_names(spans, launches["span"].to_numpy())
    gpu_ops = _gpu_ops_with_launches(trace.gpu_ops, launches, runtime_to_launch(launch_rows, len(runtime))[launch_of_op])
    _add_gpu_summary(launches, gpu_ops)
    cpu_ops = trace.cpu_ops.assign(region=point_region[n_launches:], span=span_of_point[n_launches:])
    return Attribution(launches=launches, gpu_ops=gpu_ops, cpu_ops=cpu_ops, spans=spans)


def link_gpu_ops(gpu_ops: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """Row in `runtime` of each GPU op's launch (-1: none recorded)."""
    result = np.full(len(gpu_ops), NO_ID, dtype=np.int64)
    if len(gpu_ops) == 0 or len(runtime) == 0:
        return result
    by = ["correlation"] + (["pid"] if (gpu_ops["pid"] >= 0).any() else [])
    calls = runtime.loc[runtime["correlation"] >= 0, by + ["ts"]].assign(row=lambda f: f.index.to_numpy())
    ops = gpu_ops[by + ["ts"]].assign(op=np.arange(len(gpu_ops)))
    linked = pd.merge_asof(
        ops.sort_values("ts", kind="stable"),
        calls.sort_values("ts", kind="stable"),
        on="ts",
        by=by,
        direction="nearest",
    )
    found = linked["row"].notna().to_numpy()
    result[linked["op"].to_numpy()[found]] = linked["row"].to_numpy()[found].astype(np.int64)
    return result


def runtime_to_launch(launch_rows: np.ndarray, n_runtime: int) -> np.ndarray:
    """Map runtime row -> launch position, with one extra slot so that -1 maps to -1."""
    mapping = np.full(n_runtime + 1, NO_ID, dtype=np.int64)
    mapping[launch_rows] = np.arange(len(launch_rows))
    return mapping


def label_points(points: pd.DataFrame, annotations: pd.DataFrame, table: RegionTable) -> tuple[np.ndarray, np.ndarray]:
    """For each point (pid, tid, ts): the winning rule index and annotation row (-1: none).

    Rules are tried in table order; a point takes the first rule for which some annotation
    matching it is open on the point's thread, and the innermost such annotation.
    """
    rule = np.full(len(points), NO_ID, dtype=np.int64)
    span = np.full(len(points), NO_ID, dtype=np.int64)
    if len(points) == 0 or len(annotations) == 0:
        return rule, span
    names = annotations["name"]
    rule_of_name = np.array([table.first_match(str(n)) for n in names.cat.categories] + [NO_ID])
    annotation_rule = rule_of_name[names.cat.codes.to_numpy()]  # code -1 (missing) -> -1
    candidates = annotations.assign(rule=annotation_rule, row=np.arange(len(annotations)))
    candidates = candidates[candidates["rule"] >= 0]
    for index in np.unique(candidates["rule"].to_numpy()):
        todo = np.flatnonzero(rule < 0)
        if len(todo) == 0:
            break
        found = innermost_open_span(points.iloc[todo], candidates[candidates["rule"] == index])
        hit = found >= 0
        rule[todo[hit]] = index
        span[todo[hit]] = found[hit]
    return rule, span


def innermost_open_span(points: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """`row` of the innermost span open on each point's (pid, tid) at its ts, or -1.

    The latest span to start at or before ts is innermost if still open; if it has closed, the
    open one (if any) is one of its enclosing spans, reached through the parent chain.
    """
    spans = spans.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False], kind="stable")
    starts = spans["ts"].to_numpy()
    ends = starts + spans["dur"].to_numpy()
    parent = _parents(spans["pid"].to_numpy(), spans["tid"].to_numpy(), starts, ends)
    ordered = spans[["pid", "tid", "ts"]].assign(position=np.arange(len(spans)))
    queries = points[["pid", "tid", "ts"]].assign(query=np.arange(len(points)))
    merged = pd.merge_asof(
        queries.sort_values("ts", kind="stable"),
        ordered.sort_values("ts", kind="stable"),
        on="ts",
        by=["pid", "tid"],
        direction="backward",
    )
    position = np.full(len(points), NO_ID, dtype=np.int64)
    found = merged["position"].notna().to_numpy()
    position[merged["query"].to_numpy()[found]] = merged["position"].to_numpy()[found].astype(np.int64)
    ts = points["ts"].to_numpy()
    while True:
        closed = (position >= 0) & (ends[np.maximum(position, 0)] < ts)
        if not closed.any():
            break
        position[closed] = parent[position[closed]]
    rows = spans["row"].to_numpy()
    return np.where(position >= 0, rows[np.maximum(position, 0)], NO_ID)


def enclosing_rows(spans: pd.DataFrame) -> np.ndarray:
    """For each row of `spans` (pid, tid, ts, dur), the row of the span enclosing it on its thread
    (-1: none): the way up a stack of Python frames."""
    pids, tids = spans["pid"].to_numpy(), spans["tid"].to_numpy()
    starts, durations = spans["ts"].to_numpy(), spans["dur"].to_numpy()
    order = np.lexsort((-durations, starts, tids, pids))  # by thread, start, longest first
    parent = _parents(pids[order], tids[order], starts[order], starts[order] + durations[order])
    rows = np.full(len(spans), NO_ID, dtype=np.int64)
    rows[order] = np.where(parent >= 0, order[np.maximum(parent, 0)], NO_ID)
    return rows


def _parents(pids: np.ndarray, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Enclosing span of each span on the same thread (input sorted by thread, start, -dur)."""
    parent = np.full(len(starts), NO_ID, dtype=np.int64)
    stack: list[int] = []
    previous_thread = None
    for i in range(len(starts)):
        thread = (pids[i], tids[i])
        if thread != previous_thread:
            stack.clear()
            previous_thread = thread
        while stack and ends[stack[-1]] < ends[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _gpu_ops_with_launches(gpu_ops: pd.DataFrame, launches: pd.DataFrame, launch: np.ndarray) -> pd.DataFrame:
    def of_launch(column: str, missing: object) -> np.ndarray:
        # one extra slot at the end: launch -1 (none recorded) picks `missing`, even with no launches at all
        return np.append(launches[column].to_numpy(), np.array([missing], dtype=object))[launch]

    return gpu_ops.assign(
        launch=launch,
        # replayed by a graph: its launch says so, or the writer recorded a graph id
        is_graph=of_launch("is_graph", False).astype(bool) | gpu_ops["graph_id"].notna().to_numpy(),
        region=of_launch("region", NO_REGION),
        span=of_launch("span", NO_ID).astype(np.int64),
    )


def _add_gpu_summary(launches: pd.DataFrame, gpu_ops: pd.DataFrame) -> None:
    ops = gpu_ops[gpu_ops["launch"] >= 0]
    grouped = ops.groupby("launch")
    n = len(launches)
    launches["kernels"] = np.bincount(ops["launch"][ops["kind"] == "kernel"], minlength=n)
    launches["gpu_ops"] = np.bincount(ops["launch"], minlength=n)
    launches["gpu_start"] = grouped["ts"].min().reindex(range(n)).to_numpy()
    launches["gpu_end"] = (ops["ts"] + ops["dur"]).groupby(ops["launch"]).max().reindex(range(n)).to_numpy()


def _span_names(spans: pd.DataFrame, span: np.ndarray) -> np.ndarray:
    names = np.array(spans["name"].astype(object).tolist() + [None], dtype=object)
    return names[span]  # -1 picks None
