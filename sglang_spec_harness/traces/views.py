"""`trace_views`: what the report shows of one profiled trace besides the counts (analysis.json
`views`), computed when the trace is analysed so that the report never reads a trace: each region's
time, the ops with the most time in each region, and the bars of one decoding cycle.

A GPU trace shows kernels: their summed GPU time per region, and a cycle's kernels by stream. A CPU
trace shows CPU ops (inclusive times), a region's time is the wall time of its spans (ops nest, so
their times would count twice), and a cycle's ops by nesting depth on the verify spans' thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sglang_spec_harness.traces.attribution import Attribution
from sglang_spec_harness.traces.patterns import NamedPattern
from sglang_spec_harness.vocabulary import DRAFT_DECODE, DRAFT_EXTEND, NO_REGION, TARGET_VERIFY
from sglang_spec_harness.traces.schema import CycleBar, OpTime, TraceViews

CYCLE_REGIONS = (DRAFT_DECODE, TARGET_VERIFY, DRAFT_EXTEND)
# names per region: the report lists the top 8 of either variant with the other's value, which is
# absent when the name ranks past TOP_OPS there (the micro engine's regions have ~60 names)
TOP_OPS = 64
MAX_TIMELINE_UNITS = 60  # region instances of the drawn cycle: an odd trace must not draw thousands
MAX_TIMELINE_OPS = 2000  # a GPU cycle of the micro engine has ~400 kernels


def trace_views(attribution: Attribution, patterns: Sequence[NamedPattern], file: int) -> TraceViews:
    """The views of one attributed trace (`file`: its index in the analysis's files). Names that
    a count pattern matches are always among the top ops: they are what a run is about."""
    on_gpu, units, work = _units_and_work(attribution)
    verify = units[units["region"] == TARGET_VERIFY]
    # One cycle = one target verify: count its distinct annotation spans (a graph launch per span
    # on GPU), falling back to the launches when no span is known.
    cycles = int(verify["span"][verify["span"] >= 0].nunique()) or len(verify)
    if on_gpu:
        per_region = work.groupby("region")["dur"].sum()
    else:
        per_region = (units["end"] - units["start"]).groupby(units["region"]).sum()
    return TraceViews.of(
        file=file,
        unit="kernels" if on_gpu else "cpu_ops",
        cycles=cycles,
        region_time_us={str(r): float(t) for r, t in per_region.items() if r != NO_REGION},
        top_ops=_top_ops(work, patterns),
        bars=_timeline(on_gpu, units, work),
    )


def _units_and_work(attribution: Attribution) -> tuple[bool, pd.DataFrame, pd.DataFrame]:
    """Whether the trace recorded kernels; the region instances in time order (region, start, end,
    pid, tid, span); the work (kernels, or CPU ops): name, region, ts, dur, lane."""
    gpu_ops = attribution.gpu_ops
    kernels = gpu_ops[gpu_ops["kind"] == "kernel"] if len(gpu_ops) else gpu_ops
    on_gpu = len(kernels) > 0
    if on_gpu:
        launches = attribution.launches
        launches = launches[(launches["region"].astype(str) != NO_REGION) & launches["gpu_start"].notna()]
        units = pd.DataFrame({
            "region": launches["region"].astype(str).to_numpy(),
            "start": launches["gpu_start"].to_numpy(dtype=float),
            "end": launches["gpu_end"].to_numpy(dtype=float),
            "pid": launches["pid"].to_numpy(),
            "tid": launches["tid"].to_numpy(),
            "span": launches["span"].to_numpy(),
        })
        work = pd.DataFrame({
            "name": kernels["name"].to_numpy(dtype=object),  # categories of str: no per-row conversion
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
            "name": ops["name"].to_numpy(dtype=object),
            "region": ops["region"].astype(str).to_numpy(),
            "ts": ops["ts"].to_numpy(dtype=float),
            "dur": ops["dur"].to_numpy(dtype=float),
            "pid": ops["pid"].to_numpy(),
            "tid": ops["tid"].to_numpy(),
        })
        work["lane"] = _nesting_lanes(work)
    return on_gpu, units.sort_values("start", kind="stable").reset_index(drop=True), work


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


def _top_ops(work: pd.DataFrame, patterns: Sequence[NamedPattern]) -> list[OpTime]:
    """Per region (not `(none)`), the TOP_OPS names with the most time and every name a pattern
    matches, in (region, name) order: the order the report breaks ties of time in."""
    grouped = work.groupby(["region", "name"])["dur"].agg(["sum", "count"]).reset_index()
    grouped = grouped[grouped["region"] != NO_REGION]
    top = grouped.groupby("region")["sum"].nlargest(TOP_OPS).index.get_level_values(-1)
    names = grouped["name"]
    matched = np.zeros(len(grouped), dtype=bool)
    for pattern in patterns:
        matched |= names.map(lambda name, p=pattern: p.compiled.search(name) is not None).to_numpy(dtype=bool)
    kept = grouped[grouped.index.isin(top) | matched]
    return [OpTime(region, name, float(time), int(calls))
            for region, name, time, calls in zip(*(kept[c].tolist() for c in ("region", "name", "sum", "count")))]


def _middle_cycle(units: pd.DataFrame) -> pd.DataFrame | None:
    """The middle one of the complete cycles, as a slice of the units (cycle regions only). A cycle
    starts at a DRAFT_DECODE that follows another region (several draft steps stay in one cycle),
    or at a TARGET_VERIFY with no draft decode; it is complete when it holds a TARGET_VERIFY."""
    anchor = DRAFT_DECODE if (units["region"] == DRAFT_DECODE).any() else TARGET_VERIFY
    regions = units["region"].tolist()
    starts = [i for i, r in enumerate(regions) if r == anchor and (i == 0 or regions[i - 1] != anchor)]
    complete = [(start, end) for start, end in zip(starts, [*starts[1:], len(regions)])
                if TARGET_VERIFY in regions[start:end]]
    if not complete:
        return None
    start, end = complete[len(complete) // 2]
    cycle = units.iloc[start:end]
    return cycle[cycle["region"].isin(CYCLE_REGIONS)]


def _timeline(on_gpu: bool, units: pd.DataFrame, work: pd.DataFrame) -> list[CycleBar]:
    """The bars of one complete cycle from the middle of the trace: its region instances, then the
    work that started inside it; times relative to the cycle's start."""
    if not on_gpu and len(units):
        # CPU: follow the thread that runs the verify spans (the engine's scheduler thread).
        verify = units[units["region"] == TARGET_VERIFY]
        if len(verify):
            pid, tid = verify.iloc[0][["pid", "tid"]]
            units = units[(units["pid"] == pid) & (units["tid"] == tid)].reset_index(drop=True)
    cycle = _middle_cycle(units)
    if cycle is None:
        return []
    cycle = cycle.iloc[:MAX_TIMELINE_UNITS]
    t0, t1 = float(cycle["start"].min()), float(cycle["end"].max())
    # Columns as lists, not itertuples: a row of itertuples has no column types.
    bars = [CycleBar("regions", region, start - t0, end - start, region)
            for region, start, end in zip(cycle["region"].tolist(), cycle["start"].tolist(), cycle["end"].tolist())]
    inside = work[(work["ts"] >= t0) & (work["ts"] < t1)]
    if not on_gpu and len(cycle):
        inside = inside[(inside["pid"] == cycle.iloc[0]["pid"]) & (inside["tid"] == cycle.iloc[0]["tid"])]
    inside = inside.sort_values("lane", kind="stable").iloc[:MAX_TIMELINE_OPS]
    columns = (inside[c].tolist() for c in ("lane", "name", "ts", "dur", "region"))
    bars += [CycleBar(lane, name, ts - t0, dur, region) for lane, name, ts, dur, region in zip(*columns)]
    return bars
