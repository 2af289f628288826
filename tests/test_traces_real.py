"""Exact facts on real GPU traces (../shared/traces): graph launches, kernels per launch,
softmax kernels, regions, validity warnings, per Kineto writer and for an Nsight export."""

from __future__ import annotations

import json

import pytest

from sglang_spec_harness.traces import (
    NO_REGION,
    AnalyzedTraces,
    TraceAnalysis,
    analyze_traces,
    analyze_traces_with_tables,
    kernels_per_launch_frame,
    op_table_frame,
)

A100 = "hta_negative_queue_length_rank0.json.gz"
V100 = "hta_trace_diff_test.json.gz"
QWEN3_ROCM = "tracelens_sglang_qwen3_8b_decode_rocm.json.gz"
TIMESFORMER = "tracelens_h100_timesformer_k400_REDACTED.json.gz"
CAPTURE = "tracelens_vllm_decode_full_graph_capture_rocm.json.gz"
FULL_GRAPH = "tracelens_vllm_decode_full_graph_execution_rocm.json.gz"
PIECEWISE = "tracelens_vllm_prefilldecode_piecewise_graph_execution_rocm.json.gz"
XDIT = "tracelens_xdit_flux1_aiter_sage_profile_rocm.json.gz"
KINETO_NEW = "kineto_unittest_after_fix_trace.json"
NSYS = "nsysai_h100_2gpu_1s.sqlite"


@pytest.fixture(scope="module")
def with_tables(shared_traces):
    """Each real trace analysed once with the default patterns and region table, its tables kept."""
    cache: dict[str, AnalyzedTraces] = {}

    def get(name: str) -> AnalyzedTraces:
        if name not in cache:
            cache[name] = analyze_traces_with_tables([shared_traces / name])
        return cache[name]

    return get


@pytest.fixture(scope="module")
def analyzed(with_tables):
    """Each real trace's analysis document."""
    return lambda name: with_tables(name).analysis


def test_a100_graph_launches_and_kernels_per_launch(analyzed):
    file = analyzed(A100).files[0]
    assert file.graph_launches == 70
    assert file.kernels_per_graph_launch == {1: 35, 2: 30, 8: 5}
    assert (file.rank, file.rank_source, file.platform) == (0, "distributedInfo", "cuda")
    assert file.validity.kernels == 6080
    assert file.validity.graph_launches_without_kernels == 0
    # no SGLang labels in this training trace: every graph launch is in no region, and said so
    assert file.validity.unlabelled_graph_launches == 70
    assert "70 of 70 graph launches are in no region" in file.validity.warnings
    none = file.regions[NO_REGION]
    assert (none.unit, none.units) == ("graph_launch", 70)
    assert none.counts["softmax"].total == 0  # no softmax in this trace, counted over 70 real replays


def test_v100_old_writer_graph_launches(analyzed):
    file = analyzed(V100).files[0]
    assert (file.rank, file.rank_source) == (1, "distributedInfo")
    assert file.graph_launches == 12
    assert file.kernels_per_graph_launch == {315: 6, 429: 6}
    assert file.validity.kernels == 9876
    assert file.validity.kernel_launch_calls == 4866


def test_sglang_qwen3_rocm_one_hip_graph_launch_of_544_kernels(analyzed, with_tables):
    analysis = analyzed(QWEN3_ROCM)
    file = analysis.files[0]
    assert file.platform == "rocm"
    assert file.graph_launches == 1
    assert file.kernels_per_graph_launch == {544: 1}
    launches = with_tables(QWEN3_ROCM).launches_frame()
    graph = launches[launches["is_graph"]]
    assert graph["name"].astype(str).tolist() == ["hipGraphLaunch"]
    # labelled by the innermost SGLang span open at launch time
    assert graph["label"].tolist() == ["step[DECODE bs=32]"]
    assert graph["region"].tolist() == ["DRAFT_DECODE"]
    # ... but a non-speculative run's decode is also step[DECODE]: the analysis says so
    assert any("DRAFT_DECODE found but no TARGET_VERIFY" in w for w in file.validity.warnings)


def test_region_time_is_the_gpu_time_of_its_graph_replays_and_eager_ops(analyzed, with_tables):
    analysis = analyzed(QWEN3_ROCM)
    times = analysis.files[0].region_times
    assert list(times) == ["DRAFT_DECODE"]
    decode = times["DRAFT_DECODE"]
    assert (decode.unit, decode.instances, decode.basis, decode.time_us) == ("graph_launch", 1, "gpu_ops", 9694.013)
    assert decode.robust_time_us == decode.time_us  # GPU op times: no CPU load in them
    assert decode.spans_us is None  # GPU time is not span wall time: the rule scales per trial
    ops = with_tables(QWEN3_ROCM).ops_frame()
    in_region = ops[ops["region"] == "DRAFT_DECODE"]
    assert len(in_region) == 551  # the 544 kernels of the replay and 7 eager GPU ops in its span
    assert decode.time_us == pytest.approx(float(in_region["dur"].sum()), abs=1e-3)


def test_timesformer_softmax_kernels_all_eager(analyzed):
    file = analyzed(TIMESFORMER).files[0]
    assert file.graph_launches == 0
    assert file.kernels_per_graph_launch == {}
    total = file.pattern_totals[0]
    assert (total.total, total.in_graph_launches, total.eager) == (24, 0, 24)
    by_kind = {"cunn_SoftMaxForward": 0, "softmax_warp_forward": 0}
    for name, count in total.matched_names.items():
        for kind in by_kind:
            by_kind[kind] += count if kind in name else 0
    assert by_kind == {"cunn_SoftMaxForward": 12, "softmax_warp_forward": 12}


def test_capture_trace_warns_that_launches_outnumber_kernels(analyzed):
    v = analyzed(CAPTURE).files[0].validity
    assert v.graph_launches == 0
    assert (v.kernel_launch_calls, v.kernels) == (428, 7)
    assert v.launches_exceed_kernels is True
    assert any("428 kernel-launch calls but only 7 kernels executed" in w for w in v.warnings)


def test_vllm_graph_execution_traces(analyzed):
    assert analyzed(FULL_GRAPH).files[0].kernels_per_graph_launch == {421: 1}
    piecewise = analyzed(PIECEWISE).files[0]
    assert piecewise.graph_launches == 25
    assert piecewise.kernels_per_graph_launch == {4: 1, 12: 1, 15: 23}
    assert piecewise.validity.launches_exceed_kernels is False


def test_nsys_graph_mode_is_reported_and_softmax_counted_eager(analyzed):
    file = analyzed(NSYS).files[0]
    v = file.validity
    assert file.format == "nsys"
    assert v.graph_trace_mode == "Graph"
    assert v.per_graph_counts_known is False
    assert file.kernels_per_graph_launch is None  # unknown, not "no launches"
    assert any("graph-trace mode 'Graph'" in w for w in v.warnings)
    total = file.pattern_totals[0]
    assert (total.total, total.in_graph_launches, total.eager) == (56, 0, 56)
    assert all(n.startswith("void <unnamed>::softmax_warp_forward<") for n in total.matched_names)
    assert total.complete is False
    assert v.kernels == 3442
    # the export kept runtime rows for only part of its kernels; the analysis says how many
    assert v.gpu_ops_without_launch == 2276


def test_kineto_new_writer_graph_id_args(analyzed, with_tables):
    analysis = analyzed(KINETO_NEW)
    file = analysis.files[0]
    assert (file.validity.kernels, file.graph_launches, file.validity.gpu_ops_without_launch) == (1, 0, 0)
    ops = with_tables(KINETO_NEW).ops_frame()
    assert ops["launch"].tolist() == [0]  # linked to its cudaLaunchKernel by correlation
    assert ops["is_graph"].tolist() == [False]  # "graph id": 0 means not in a graph
    assert file.rank_source == "position"


def test_xdit_graph_replays_attributed_by_region_rules(shared_traces):
    path = shared_traces / XDIT
    patterns = {"softmax": "softmax_warp_forward", "any": "."}
    fx_first = analyze_traces([path], patterns, regions={"FX": r"^## Call CompiledFxGraph", "DIFFUSION": r"^execute_diffusion"})
    file = fx_first.files[0]
    assert file.kernels_per_graph_launch == {1566: 4}
    fx = file.regions["FX"]
    assert (fx.unit, fx.units) == ("graph_launch", 4)
    assert fx.counts["any"].per_replay_min == fx.counts["any"].per_replay_max == 1566
    assert fx.counts["softmax"].total == 0
    diffusion = file.regions["DIFFUSION"]  # the eager work around the graphs
    assert (diffusion.unit, diffusion.units) == ("span", 1)
    assert diffusion.counts["softmax"].total == 24
    assert file.validity.unlabelled_graph_launches == 0
    # table order is priority: with DIFFUSION first, the same replays belong to DIFFUSION
    diffusion_first = analyze_traces([path], patterns, regions={"DIFFUSION": r"^execute_diffusion", "FX": r"^## Call"})
    regions = diffusion_first.files[0].regions
    assert "FX" not in regions
    assert (regions["DIFFUSION"].unit, regions["DIFFUSION"].units) == ("graph_launch", 4)


def test_several_files_keep_their_ranks_and_combine(shared_traces):
    analysis = analyze_traces([shared_traces / A100, shared_traces / V100])
    assert [f.rank for f in analysis.files] == [0, 1]
    combined = analysis.combined
    assert combined.ranks == [0, 1]
    assert combined.graph_launches == 82
    assert combined.kernels_per_graph_launch == {1: 35, 2: 30, 8: 5, 315: 6, 429: 6}
    row = combined.regions[NO_REGION].counts["softmax"]
    assert (row.unit, row.replays, row.total) == ("graph_launch", 82, 0)
    assert combined.validity.kernels == 6080 + 9876


def test_json_document_round_trips(analyzed):
    analysis = analyzed(A100)
    document = json.loads(json.dumps(analysis.to_json_dict()))
    assert document["schema_version"] == 1
    assert document["files"][0]["kernels_per_graph_launch"] == {"1": 35, "2": 30, "8": 5}
    assert document["region_table"][:2] == [
        {"name": "PREFILL", "regex": r"eagle_worker(?:_v2)?\.py\(\d+\): _draft_extend_for_prefill$"},
        {"name": "DRAFT_EXTEND", "regex": "^draft_extend$"}]
    again = TraceAnalysis.from_json_dict(document)
    assert again.to_json_dict() == analysis.to_json_dict()
    # a document loaded from JSON answers every table computed from a document...
    assert kernels_per_launch_frame(again)["launches"].tolist() == [35, 30, 5]
    assert op_table_frame(again).equals(op_table_frame(analysis))
    # ...and holds only what is stored: the frames that read the traces are AnalyzedTraces's
    assert not any(name.endswith("_frame") for name in dir(again))


def test_launch_table_has_timestamps_for_a_timeline(with_tables):
    launches = with_tables(A100).launches_frame()
    graph = launches[launches["is_graph"]]
    assert len(graph) == 70
    assert (graph["gpu_start"] >= graph["ts"]).all()  # a replay runs after its launch call
    assert (graph["gpu_end"] > graph["gpu_start"]).all()
    assert sorted(graph["kernels"].value_counts().items()) == [(1, 35), (2, 30), (8, 5)]
