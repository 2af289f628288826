"""Exact facts on the project's own GPU recordings (tests/fixtures, recorded on an H200 by
scripts/gpu_checks.sh): the micro engine's CUDA-graph traces, and a whole `harness run` directory of
scenarios/micro_topk1_gpu.yaml, read back by `harness check`, `harness report` and `harness history`."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sglang_spec_harness.traces import (
    TraceAnalysis,
    analyze_traces,
    analyze_traces_with_tables,
    kernels_per_launch_frame,
    op_table_frame,
)
from sglang_spec_harness.verdict.judge import check_run_dir

FIXTURES = Path(__file__).parent / "fixtures"
SUMMARY = json.loads((FIXTURES / "micro_cuda_summary.json").read_text())
NUM_STEPS = 3  # scripts/gpu_record_micro_traces.sh's default --speculative-num-steps
# torch.softmax on CUDA; the draft's top-1 with the fast path (torch.argmax) and without (torch.max
# of the probabilities): reductions told apart by their functor.
PATTERNS = {"softmax": "cunn_SoftMaxForward", "argmax": "ArgMaxOps", "max": r"ReduceOp<float, at::native::MaxOps"}
DRAFT_REGIONS = ("DRAFT_DECODE", "DRAFT_EXTEND", "TARGET_VERIFY")


def _rows(name: str) -> dict[tuple[str, str, str], object]:
    file = analyze_traces([FIXTURES / f"micro_cuda_{name}.trace.json.gz"], PATTERNS).files[0]
    assert (file.platform, file.validity.subject) == ("cuda", "gpu_ops")
    return {(row.region, row.unit, row.pattern): row for row in file.counts} | {"file": file}


@pytest.fixture(scope="module")
def traces():
    return {name: _rows(name) for name in ("off_bs1", "off_bs3", "on_bs1", "on_bs3")}


@pytest.mark.parametrize("batch", ["bs1", "bs3"])
def test_every_cycle_region_is_one_graph_replay_per_span(traces, batch):
    for variant in ("off", "on"):
        file = traces[f"{variant}_{batch}"]["file"]
        v = file.validity
        assert v.unlabelled_graph_launches == 0 and v.graph_launches_without_kernels == 0
        assert v.warnings == []
        cycles = v.region_instances["TARGET_VERIFY"]["span"]
        assert cycles == (5 if batch == "bs1" else 4)
        for region in DRAFT_REGIONS:
            assert v.region_instances[region] == {"graph_launch": cycles, "span": cycles}
        assert file.graph_launches == 3 * cycles
        assert v.region_instances["PREFILL"]["graph_launch"] == 0  # prefill runs eagerly


@pytest.mark.parametrize("batch", ["bs1", "bs3"])
def test_softmax_kernels_per_graph_replay(traces, batch):
    off, on = traces[f"off_{batch}"], traces[f"on_{batch}"]
    cycles = off["file"].validity.region_instances["TARGET_VERIFY"]["span"]
    # Without the fast path: one softmax per draft step after the first inside each draft-decode
    # replay, one inside each draft-extend replay (the graph body) and one eager in its span (site 2).
    assert off["DRAFT_DECODE", "graph_launch", "softmax"].per_replay_histogram == {NUM_STEPS - 1: cycles}
    assert off["DRAFT_EXTEND", "graph_launch", "softmax"].per_replay_histogram == {1: cycles}
    assert off["DRAFT_EXTEND", "span", "softmax"].per_replay_histogram == {1: cycles}
    assert off["DRAFT_DECODE", "span", "softmax"].total == 0  # nothing eager around the draft-decode graph
    for rows in (off, on):
        assert rows["TARGET_VERIFY", "graph_launch", "softmax"].total == 0
        # The draft extend after a prefill keeps its softmax in both variants (one per prefill).
        prefill = rows["PREFILL", "span", "softmax"]
        assert prefill.total == prefill.replays // 2 and prefill.total >= 1
    for region in DRAFT_REGIONS:
        for unit in ("graph_launch", "span"):
            assert on[region, unit, "softmax"].total == 0, (region, unit)


@pytest.mark.parametrize("batch", ["bs1", "bs3"])
def test_the_fast_path_swaps_the_kernels_inside_the_draft_graph(traces, batch):
    off, on = traces[f"off_{batch}"], traces[f"on_{batch}"]
    cycles = off["file"].validity.region_instances["TARGET_VERIFY"]["span"]
    assert on["DRAFT_DECODE", "graph_launch", "argmax"].per_replay_histogram == {NUM_STEPS - 1: cycles}
    assert off["DRAFT_DECODE", "graph_launch", "argmax"].total == 0
    assert off["DRAFT_DECODE", "graph_launch", "max"].per_replay_histogram == {NUM_STEPS - 1: cycles}
    assert on["DRAFT_DECODE", "graph_launch", "max"].total == 0
    # bs 1: the same batch sizes replayed in both variants, so the same kernels per launch (softmax +
    # max became argmax + the constant probabilities' fill).
    if batch == "bs1":
        assert off["file"].kernels_per_graph_launch == on["file"].kernels_per_graph_launch


def test_the_recorders_own_summary_agrees_with_the_analysis(traces):
    """scripts/gpu_record_micro_traces.sh counts with its own small reader (sglang_spec_harness.micro.trace_summary)."""
    assert SUMMARY["outputs_identical"] is True
    for key in ("off_bs1", "off_bs3", "on_bs1", "on_bs3"):
        modes = SUMMARY[key]["modes"]
        rows = traces[key]
        assert sum(modes["DECODE"]["softmax_kernels_in_graphs"]) == rows["DRAFT_DECODE", "graph_launch", "softmax"].total
        assert sum(modes["DRAFT_EXTEND_V2"]["softmax_kernels_in_graphs"]) == rows["DRAFT_EXTEND", "graph_launch", "softmax"].total
        assert modes["DECODE"]["graph_launches"] == [1] * rows["file"].validity.region_instances["DRAFT_DECODE"]["span"]
    assert SUMMARY["on_server_info"]["cuda_graph"] is True and SUMMARY["on_server_info"]["device"] == "cuda"


# ---- a whole run directory from a GPU ------------------------------------------------------------


@pytest.fixture
def gpu_run(tmp_path) -> Path:
    with tarfile.open(FIXTURES / "run_micro_topk1_gpu_h200.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "micro_topk1_gpu_h200"


def test_check_reproduces_the_gpu_runs_verdict(gpu_run):
    stored = json.loads((gpu_run / "results.json").read_text())
    results = check_run_dir(gpu_run)
    by_name = {r.name: r for r in results.rules}
    assert {r["name"]: r["verdict"] for r in stored["rules"]} == {n: str(r.verdict) for n, r in by_name.items()}
    assert str(results.verdict) == stored["verdict"] == "INCONCLUSIVE"  # a 3% gain, 16 rounds of 64 tokens
    observations = by_name["baseline_has_softmax_draft_decode"].numbers.observations
    assert [(o.unit, o.per_replay_min, o.per_replay_max) for o in observations] == [("graph_launch", 2, 2)]
    candidate = by_name["candidate_no_softmax_draft_extend"].numbers.observations
    assert [(o.unit, o.total, o.eager_total) for o in candidate] == [("graph_launch", 0, 0)]
    assert str(by_name["accept_length_unchanged"].verdict) == "PASS"


def test_check_under_a_scenario_with_a_pattern_the_run_did_not_count(gpu_run):
    """The current GPU scenario adds argmax rules; the stored analysis never counted argmax: the rules
    say so (INCONCLUSIVE), they do not read it as zero."""
    results = check_run_dir(gpu_run, scenario_path=Path("scenarios/micro_topk1_gpu.yaml"))
    by_name = {r.name: r for r in results.rules}
    for name in ("candidate_argmax_in_draft_decode_graph", "baseline_no_argmax_in_draft_decode_graph"):
        assert str(by_name[name].verdict) == "INCONCLUSIVE"
        assert "counted softmax only, not 'argmax'" in by_name[name].reason
    # ...and the run's own traces, analysed with the scenario's pattern, hold what those rules ask.
    for trial, expected in (("32-candidate-profiled", NUM_STEPS - 1), ("33-baseline-profiled", 0)):
        trace = gpu_run / "trials" / trial / "profile" / f"{trial}-TP-0.trace.json.gz"
        row = analyze_traces([trace], {"argmax": "ArgMaxOps"}).files[0].regions["DRAFT_DECODE"].counts["argmax"]
        assert (row.unit, row.per_replay_min, row.per_replay_max) == ("graph_launch", expected, expected)


def test_a_stored_analysis_answers_from_json_and_its_traces_answer_the_rest(gpu_run):
    """analysis.json's document, loaded from JSON, answers the tables computed from a document; the
    frames of launches, ops, spans and instances come from the trial's trace analysed again with its
    tables (AnalyzedTraces), and they agree with the stored counts."""
    trial = "33-baseline-profiled"
    stored = TraceAnalysis.from_json_dict(json.loads((gpu_run / "analysis.json").read_text())["trials"][trial])
    assert kernels_per_launch_frame(stored)[["kernels", "launches"]].to_numpy().tolist() == [[102, 42], [210, 21]]
    ops = op_table_frame(stored)
    decode = ops[(ops["file"] == "combined") & (ops["region"] == "DRAFT_DECODE") & (ops["unit"] == "graph_launch")]
    table = next(t for t in stored.combined.op_tables if (t.region, t.unit) == ("DRAFT_DECODE", "graph_launch"))
    assert set(decode["replays"]) == {21} and decode["name"].tolist() == table.names

    trace = gpu_run / "trials" / trial / "profile" / f"{trial}-TP-0.trace.json.gz"
    again = analyze_traces_with_tables([trace], stored.patterns, [(r.name, r.regex) for r in stored.region_table],
                                       replace_default_regions=True)
    assert again.analysis.files[0].counts == stored.files[0].counts
    per_replay = again.instances_frame("DRAFT_DECODE", "softmax")["count"].tolist()
    assert per_replay == [NUM_STEPS - 1] * 21
    assert Counter(per_replay) == stored.count("DRAFT_DECODE", "softmax").per_replay_histogram
    assert int(again.launches_frame()["is_graph"].sum()) == stored.files[0].graph_launches == 63
    spans = again.spans_frame()["region"].value_counts().to_dict()
    assert spans == {region: n["span"] for region, n in stored.files[0].validity.region_instances.items()}
    assert len(again.ops_frame()) == stored.files[0].validity.gpu_ops == 10066


def test_report_and_history_open_the_gpu_run(gpu_run, tmp_path):
    harness = [sys.executable, "-m", "sglang_spec_harness.commands.cli"]
    report = subprocess.run([*harness, "report", str(gpu_run)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    page = (gpu_run / "index.html").read_text()
    assert "micro_topk1_gpu" in page and "DRAFT_DECODE" in page and "graph" in page
    db = tmp_path / "history.db"
    ingest = subprocess.run([*harness, "history", "ingest", str(gpu_run), "--db", str(db)],
                            capture_output=True, text=True, timeout=300)
    assert ingest.returncode == 0, ingest.stderr
    with sqlite3.connect(db) as conn:
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type='table'")}
        assert "runs" in tables
        (count,) = conn.execute("select count(*) from runs").fetchone()
    assert count == 1
