"""Counts ops and kernels per `step[...]` span in a Kineto trace: the micro engine's own check.

The harness's analysis (sglang_spec_harness/traces/) is the real tool; this small, dependency-free summary lets the
micro engine's tests and its GPU recording script verify what the engine put in a trace without
depending on the rest of the harness (sglang_spec_harness/micro stands apart).

Attribution: a CPU op or CUDA runtime call belongs to the innermost `user_annotation` span whose name
matches `span_pattern` on the same thread that contains it in time; a GPU kernel belongs to the span
of the runtime call with the same correlation id (for a CUDA graph replay, `cudaGraphLaunch`).

`python -m sglang_spec_harness.micro.trace_summary TRACE...` prints one JSON summary per trace.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_SPAN = re.compile(r"^step\[(?P<mode>[A-Z0-9_]+) bs=(?P<bs>\d+)\]$")


@dataclass
class SpanCounts:
    name: str
    ops: int = 0  # CPU ops whose name is in op_names
    graph_launches: int = 0
    kernels: int = 0  # kernels matching kernel_pattern, in or out of graphs
    kernels_in_graphs: int = 0


@dataclass
class TraceSummary:
    path: str
    spans: list[SpanCounts] = field(default_factory=list)
    total_kernels: int = 0

    def by_mode(self) -> dict[str, list[SpanCounts]]:
        """Spans grouped by mode (`DECODE`, `DRAFT_EXTEND_V2`, ...), in trace order."""
        groups: dict[str, list[SpanCounts]] = defaultdict(list)
        for span in self.spans:
            match = STEP_SPAN.match(span.name)
            groups[match.group("mode") if match else span.name].append(span)
        return dict(groups)


def load_trace(path: str | Path) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def _enclosing(spans: list[tuple[float, float, int]], starts: list[float], ts: float, end: float) -> int | None:
    """Index of the innermost span (latest start) containing [ts, end]; spans sorted by start."""
    i = bisect.bisect_right(starts, ts) - 1
    while i >= 0:
        start, stop, index = spans[i]
        if start <= ts and end <= stop:
            return index
        i -= 1
    return None


def summarize(
    trace: str | Path | dict[str, Any],
    op_names: tuple[str, ...] = ("aten::_softmax",),
    kernel_pattern: str = r"SoftMax|softmax",
    span_pattern: str = STEP_SPAN.pattern,
) -> TraceSummary:
    data = trace if isinstance(trace, dict) else load_trace(trace)
    path = "" if isinstance(trace, dict) else str(trace)
    events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X"]
    span_re = re.compile(span_pattern)
    kernel_re = re.compile(kernel_pattern)
    summary = TraceSummary(path=path)
    per_thread: dict[tuple[Any, Any], list[tuple[float, float, int]]] = defaultdict(list)
    for event in sorted(events, key=lambda e: float(e["ts"])):
        if event.get("cat") == "user_annotation" and span_re.match(event.get("name", "")):
            ts = float(event["ts"])
            per_thread[(event.get("pid"), event.get("tid"))].append((ts, ts + float(event.get("dur", 0)), len(summary.spans)))
            summary.spans.append(SpanCounts(name=event["name"]))
    starts = {key: [s[0] for s in spans] for key, spans in per_thread.items()}

    def span_of(event: dict[str, Any]) -> int | None:
        key = (event.get("pid"), event.get("tid"))
        if key not in per_thread:
            return None
        ts = float(event["ts"])
        return _enclosing(per_thread[key], starts[key], ts, ts + float(event.get("dur", 0)))

    runtime_span: dict[Any, tuple[int | None, bool]] = {}
    for event in events:
        category = event.get("cat")
        if category == "cpu_op" and event.get("name") in op_names:
            index = span_of(event)
            if index is not None:
                summary.spans[index].ops += 1
        elif category == "cuda_runtime":
            index = span_of(event)
            is_graph = event.get("name", "").startswith("cudaGraphLaunch")
            correlation = event.get("args", {}).get("correlation")
            if correlation is not None:
                runtime_span[correlation] = (index, is_graph)
            if is_graph and index is not None:
                summary.spans[index].graph_launches += 1
    for event in events:
        if event.get("cat") != "kernel":
            continue
        summary.total_kernels += 1
        if not kernel_re.search(event.get("name", "")):
            continue
        index, in_graph = runtime_span.get(event.get("args", {}).get("correlation"), (None, False))
        if index is None:
            continue
        summary.spans[index].kernels += 1
        if in_graph:
            summary.spans[index].kernels_in_graphs += 1
    return summary


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m sglang_spec_harness.micro.trace_summary TRACE.json[.gz]...", file=sys.stderr)
        return 2
    for trace_path in argv:
        summary = summarize(trace_path)
        modes = {
            mode: {
                "spans": len(spans),
                "softmax_ops": [s.ops for s in spans],
                "graph_launches": sum(s.graph_launches for s in spans),
                "softmax_kernels": [s.kernels for s in spans],
                "softmax_kernels_in_graphs": [s.kernels_in_graphs for s in spans],
            }
            for mode, spans in summary.by_mode().items()
        }
        print(json.dumps({"path": trace_path, "total_kernels": summary.total_kernels, "modes": modes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

