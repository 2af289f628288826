"""The Python functions that ran in each region (traces/functions.py), on a real with_stack trace: an
SGLang decode step on a ROCm GPU (its graph replay's launching stack, an editable install's absolute
paths named from the package on); the table's cap, its combination over files, and documents written
before it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sglang_spec_harness.traces import analyze_traces, read_trace
from sglang_spec_harness.traces import functions as functions_module
from sglang_spec_harness.traces.functions import combine_region_functions, source_file
from sglang_spec_harness.traces.schema import FileAnalysis, RegionFunctions

QWEN3_ROCM = "tracelens_sglang_qwen3_8b_decode_rocm.json.gz"


def test_the_reader_keeps_every_frame_of_python_source_apart_from_builtins(shared_traces):
    trace = read_trace(shared_traces / QWEN3_ROCM)
    names = trace.python_frames["name"].astype(str)
    # 821 python_function events: 450 of Python source, the rest builtins (`<built-in method ...>`)
    assert len(trace.python_frames) == 450 and not names.str.startswith("<").any()
    assert list(trace.python_frames.columns) == ["name", "pid", "tid", "ts", "dur"]


def test_a_graph_replays_launching_stack_is_in_its_region_on_a_rocm_sglang_trace(shared_traces):
    """One hipGraphLaunch in `step[DECODE bs=32]` (DRAFT_DECODE by the default table): the frames in
    the span, and the stack open at the launch, whose outer frames (the scheduler's, the model
    runner's forward) started before the span."""
    analysis = analyze_traces([shared_traces / QWEN3_ROCM])
    (only,) = analysis.files[0].region_functions
    assert (only.region, only.functions, only.complete, sum(only.calls)) == ("DRAFT_DECODE", 74, True, 205)
    rows = {(r.file, r.function, r.line): (r.calls, r.time_us) for r in only.rows()}
    # the launching stack, outermost first: all named from the package on
    for key in [("sglang/srt/managers/scheduler.py", "_run_batch_inner", 2919),
                ("sglang/srt/managers/tp_worker.py", "forward_batch_generation", 445),
                ("sglang/srt/model_executor/model_runner.py", "forward", 3123),
                ("sglang/srt/model_executor/model_runner.py", "_forward_raw", 3194),
                ("sglang/srt/model_executor/cuda_graph_runner.py", "replay", 1333),
                ("torch/cuda/graphs.py", "replay", 139)]:
        assert rows[key][0] == 1, key
    assert rows[("sglang/srt/managers/scheduler.py", "_run_batch_inner", 2919)][1] == 465645.998
    assert rows[("torch/utils/_device.py", "__torch_function__", 99)][0] == 50
    assert not any(f.startswith("/sgl-workspace/sglang/") for f in only.file)
    # most time first
    assert only.time_us == sorted(only.time_us, reverse=True)
    assert analysis.combined.region_functions == analysis.files[0].region_functions


def test_the_table_is_capped_and_says_so(shared_traces, monkeypatch):
    monkeypatch.setattr(functions_module, "MAX_FUNCTIONS_PER_REGION", 10)
    analysis = analyze_traces([shared_traces / QWEN3_ROCM])
    (only,) = analysis.files[0].region_functions
    assert (only.functions, only.complete, len(only.file)) == (74, False, 10)
    # combined over two files: calls summed, still cut, and it says how many ran at least
    (both,) = combine_region_functions([only, only])
    assert (both.functions, both.complete, len(both.file)) == (74, False, 10)
    assert both.calls == [2 * n for n in only.calls]


def test_combining_sums_calls_and_times_of_the_same_function():
    a = RegionFunctions(region="R", functions=2, file=["p/a.py", "p/b.py"], function=["f", "g"], line=[1, 5],
                        calls=[1, 2], time_us=[10.0, 3.0])
    b = RegionFunctions(region="R", functions=1, file=["p/b.py"], function=["g"], line=[5], calls=[4], time_us=[30.0])
    (c,) = combine_region_functions([a, b])
    assert [tuple(r) for r in c.rows()] == [("p/b.py", "g", 5, 6, 33.0), ("p/a.py", "f", 1, 1, 10.0)]
    assert (c.functions, c.complete) == (2, True)


def test_a_frames_file_is_named_from_its_package_on():
    assert source_file("/usr/lib/python3.11/site-packages/sglang/srt/a.py") == "sglang/srt/a.py"
    assert source_file("/sgl-workspace/sglang/python/sglang/srt/a.py") == "sglang/srt/a.py"
    assert source_file("sglang/srt/a.py") == "sglang/srt/a.py"
    assert source_file("/opt/other/python/triton/jit.py") == "/opt/other/python/triton/jit.py"


def test_a_trace_without_stacks_has_no_table_and_an_older_document_loads_without_one(shared_traces):
    analysis = analyze_traces([shared_traces / "hta_negative_queue_length_rank0.json.gz"])
    assert analysis.files[0].region_functions == [] and analysis.combined.region_functions == []
    stored = json.loads(analysis.files[0].model_dump_json())
    del stored["region_functions"]
    assert FileAnalysis.model_validate(stored).region_functions == []
    with pytest.raises(ValueError, match="columns of different lengths"):
        RegionFunctions(region="R", functions=1, file=["a"], function=[], line=[1], calls=[1], time_us=[1.0])
    assert isinstance(read_trace(shared_traces / "hta_negative_queue_length_rank0.json.gz").python_frames, pd.DataFrame)
