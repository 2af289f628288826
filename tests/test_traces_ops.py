"""The op table (analysis.json `op_tables`): every op name of each region and counting unit, with its
count in each replay and its time. A name's row must be what a count pattern matching only that name
counts (the CountRow), on the real GPU traces and on CPU traces recorded here, where nested CPU ops
(`aten::softmax` calls `aten::_softmax`) each count by their own name; files combine replay by
replay; documents written before op tables still load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from sglang_spec_harness.traces import analyze_traces, op_table_frame
from sglang_spec_harness.traces.analysis import TraceAnalysis
from sglang_spec_harness.traces.schema import CombinedAnalysis, FileAnalysis, OpTable

REAL = ("hta_negative_queue_length_rank0.json.gz", "hta_trace_diff_test.json.gz",
        "tracelens_sglang_qwen3_8b_decode_rocm.json.gz", "tracelens_vllm_prefilldecode_piecewise_graph_execution_rocm.json.gz",
        "tracelens_xdit_flux1_aiter_sage_profile_rocm.json.gz", "tracelens_h100_timesformer_k400_REDACTED.json.gz",
        "kineto_unittest_after_fix_trace.json", "nsysai_h100_2gpu_1s.sqlite")


def _agrees(analysis: TraceAnalysis, names_per_table: int = 6) -> int:
    """Every op table's first and last names, each counted again by a pattern matching only it (and
    one pattern matching everything): the rows must be the table's. Returns the names checked."""
    tables = {(t.region, t.unit): t for t in analysis.files[0].op_tables}
    assert {(r.region, r.unit) for r in analysis.files[0].counts} == set(tables)
    names = sorted({n for t in tables.values() for n in [*t.names[:names_per_table // 2], *t.names[-names_per_table // 2:]]})
    patterns = {f"op{i}": f"^{re.escape(name)}$" for i, name in enumerate(names)} | {"everything": "."}
    counted = analyze_traces([analysis.files[0].path], patterns=patterns)
    for row in counted.files[0].counts:
        table = tables[(row.region, row.unit)]
        assert (row.replays, row.known) == (table.replays, table.known), (row.region, row.unit)
        if not row.known:
            assert table.names == [] and table.note == row.note
            continue
        if row.pattern == "everything":
            assert row.total == sum(table.total)
            assert row.time_us == pytest.approx(sum(table.time_us), rel=1e-6, abs=0.01)
            continue
        name = names[int(row.pattern[2:])]
        op = table.op(name)
        if op is None:
            assert row.total == 0, (row.region, name)
            continue
        assert (op.total, op.per_replay_min, op.per_replay_median, op.per_replay_max, op.per_replay_histogram) == (
            row.total, row.per_replay_min, row.per_replay_median, row.per_replay_max, row.per_replay_histogram)
        assert op.time_us == pytest.approx(row.time_us, abs=0.002) and row.matched_names == {name: op.total}
    return len(names)


@pytest.mark.parametrize("name", REAL)
def test_each_name_is_what_a_pattern_matching_only_it_counts(shared_traces, name):
    analysis = analyze_traces([shared_traces / name])
    assert analysis.files[0].op_tables
    assert _agrees(analysis) > 0


def test_graph_replays_kernels_and_a_trace_that_cannot_hold_them(tmp_path):
    """The planted Nsight export (tests/support/nsys_exports.py): 2 graph replays in DRAFT_DECODE of 3
    kernels each (gemm, softmax, gemm), 1 eager softmax outside any region; in graph-trace mode Graph
    the replays' kernels are not in the trace: the table says so instead of counting zeros."""
    import sqlite3

    from support.nsys_exports import GEMM, SOFTMAX, build

    path = build(tmp_path / "node.sqlite")
    tables = {(t.region, t.unit): t for t in analyze_traces([path]).files[0].op_tables}
    replays = tables[("DRAFT_DECODE", "graph_launch")]
    assert (replays.replays, replays.names) == (2, [GEMM, SOFTMAX])  # most time first: two gemms per replay
    assert [(op.per_replay_histogram, op.total) for op in replays.rows()] == [({2: 2}, 4), ({1: 2}, 2)]
    assert [(op.name, op.total) for op in tables[("(none)", "trace")].rows()] == [(SOFTMAX, 1)]
    assert _agrees(analyze_traces([path])) == 2
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE META_DATA_CAPTURE SET value = 'Graph'")
    conn.close()
    replays = {(t.region, t.unit): t for t in analyze_traces([path]).files[0].op_tables}[("DRAFT_DECODE", "graph_launch")]
    assert (replays.known, replays.names, replays.replays) == (False, [], 2) and "graph-trace mode" in replays.note


# ---- CPU traces recorded here ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("torch")
    from support.cpu_traces import pre_0523_cycles, record

    root = tmp_path_factory.mktemp("ops")
    return (record(root / "off.trace.json", pre_0523_cycles(fast=False)),
            record(root / "fast.trace.json", pre_0523_cycles(fast=True)))


def test_nested_cpu_ops_each_count_by_their_name(cpu_traces):
    from support.cpu_traces import CYCLES

    off, fast = (analyze_traces([trace]) for trace in cpu_traces)
    decode = {t.region: t for t in off.files[0].op_tables if t.unit == "span"}["DRAFT_DECODE"]
    assert decode.replays == CYCLES
    # 2 draft steps per cycle, each softmax + max: aten::softmax and the aten::_softmax it calls
    assert decode.op("aten::softmax").per_replay_histogram == {2: CYCLES}
    assert decode.op("aten::_softmax").per_replay_histogram == {2: CYCLES}
    assert decode.op("aten::argmax") is None
    decode = {t.region: t for t in fast.files[0].op_tables if t.unit == "span"}["DRAFT_DECODE"]
    assert decode.op("aten::argmax").per_replay_histogram == {2: CYCLES} and decode.op("aten::softmax") is None
    outside = {t.region: t for t in off.files[0].op_tables}["(none)"]
    assert (outside.unit, outside.replays, outside.op("aten::_softmax").total) == ("trace", 1, 1)
    assert _agrees(off) > 0 and _agrees(fast) > 0


def test_files_combine_replay_by_replay(cpu_traces):
    """An op missing from one file ran zero times in each of that file's replays."""
    from support.cpu_traces import CYCLES

    both = analyze_traces(list(cpu_traces), patterns={"softmax": "^aten::_softmax$", "argmax": "^aten::argmax$"})
    decode = {(t.region, t.unit): t for t in both.combined.op_tables}[("DRAFT_DECODE", "span")]
    assert decode.replays == 2 * CYCLES
    for pattern, name in (("softmax", "aten::_softmax"), ("argmax", "aten::argmax")):
        row = both.count("DRAFT_DECODE", pattern, "span")
        op = decode.op(name)
        assert op.per_replay_histogram == row.per_replay_histogram == {0: CYCLES, 2: CYCLES}
        assert (op.total, op.per_replay_min, op.per_replay_median, op.per_replay_max) == (
            row.total, row.per_replay_min, row.per_replay_median, row.per_replay_max)
    frame = op_table_frame(both)
    combined = frame[(frame["file"] == "combined") & (frame["region"] == "DRAFT_DECODE")]
    assert set(combined["name"]) == set(decode.names)


def test_documents_without_op_tables_still_load(cpu_traces):
    document = analyze_traces([cpu_traces[0]]).to_json_dict()
    assert TraceAnalysis.from_json_dict(document).to_json_dict() == document
    file, combined = document["files"][0], document["combined"]
    del file["op_tables"], combined["op_tables"]
    assert FileAnalysis.model_validate(file).op_tables == []
    assert CombinedAnalysis.model_validate(combined).op_tables == []
    broken = {"region": "R", "unit": "span", "replays": 1, "names": ["a", "b"], "total": [1], "per_replay_min": [1],
              "per_replay_median": [1.0], "per_replay_max": [1], "per_replay_histogram": [{1: 1}], "time_us": [1.0]}
    with pytest.raises(ValidationError, match="columns of different lengths"):
        OpTable.model_validate(broken)
