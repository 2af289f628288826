"""The readable table of `harness analyze` (rich)."""

from __future__ import annotations

import re
from collections import Counter

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from sglang_spec_harness.errors import one_line
from sglang_spec_harness.pages.numbers import fmt
from sglang_spec_harness.traces.schema import CountRow, TraceAnalysis, Validity

_SIGNATURE_TAIL = re.compile(r"[<(].*$", re.DOTALL)


def short_name(name: str) -> str:
    """`void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, ...>(...)` -> `cunn_SoftMaxForward`."""
    bare = name.removeprefix("void ")
    head = bare.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    head = _SIGNATURE_TAIL.sub("", head) or bare
    return head.rsplit("::", 1)[-1] if "::" in head and not head.startswith("aten::") else head


def _text(value: object) -> str:
    """Names from a trace (kernels, labels) as plain text: no rich markup, no control characters."""
    return escape(one_line(value))


def render(analysis: TraceAnalysis, console: Console) -> None:
    for file in analysis.files:
        console.rule(f"[bold]{_text(file.path)}")
        console.print(
            f"format {file.format}, platform {file.platform}, rank {file.rank} (from {file.rank_source}), "
            f"counting {file.validity.subject}"
        )
        _print_facts(file.validity, file.graph_launches, file.kernels_per_graph_launch, console)
        console.print(_counts_table(file.counts))
        _print_warnings(file.validity.warnings, console)
    if len(analysis.files) > 1:
        combined = analysis.combined
        console.rule(f"[bold]combined: {combined.files} files, ranks {combined.ranks}")
        _print_facts(combined.validity, combined.graph_launches, combined.kernels_per_graph_launch, console)
        console.print(_counts_table(combined.counts))
    patterns = ", ".join(f"{name}={regex}" for name, regex in analysis.patterns.items())
    console.print(f"patterns: {_text(patterns)}", highlight=False)


def _print_facts(v: Validity, graph_launches: int, histogram: dict[int, int] | None, console: Console) -> None:
    console.print(
        f"kernels {v.kernels}, GPU ops {v.gpu_ops} ({v.gpu_ops_without_launch} without launch), CPU ops {v.cpu_ops}, "
        f"kernel-launch calls {v.kernel_launch_calls}, graph launches {graph_launches} "
        f"({v.graph_launches_without_kernels} without kernels, {v.unlabelled_graph_launches} in no region)",
        highlight=False,
    )
    if histogram is None:
        console.print("kernels per graph launch: unknown (replayed kernels not recorded)")
    elif histogram:
        spread = ", ".join(f"{launches}x{kernels}" for kernels, launches in sorted(histogram.items()))
        console.print(f"kernels per graph launch (launches x kernels): {spread}", highlight=False)


def _counts_table(rows: list[CountRow]) -> Table:
    table = Table(show_lines=False)
    for column in ("region", "unit", "pattern", "replays", "total", "min", "median", "max", "time us", "matched"):
        justify: JustifyMethod = "right" if column in ("replays", "total", "min", "median", "max", "time us") else "left"
        table.add_column(column, justify=justify, overflow="fold")
    for r in rows:
        by_short_name: Counter[str] = Counter()
        for name, count in r.matched_names.items():
            by_short_name[short_name(name)] += count
        matched = _text(", ".join(f"{name} x{count}" for name, count in by_short_name.items()))
        if not r.known:
            matched = f"[yellow]unknown: {_text(r.note)}[/]"
        table.add_row(
            _text(r.region), r.unit, _text(r.pattern), str(r.replays), _cell(r.total), _cell(r.per_replay_min),
            _cell(r.per_replay_median), _cell(r.per_replay_max), _cell(r.time_us), matched,
        )
    return table


def _cell(value: float | int | None) -> str:
    return fmt(value, 6)  # None: a count the trace cannot support (the row says why)


def _print_warnings(warnings: list[str], console: Console) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {_text(warning)}", highlight=False)
