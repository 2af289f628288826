"""Writer variants are not bad input: every field the analysis reads, in every form real writers
use, and fields it does not read in any form at all.

Each test builds a small Kineto trace in the shape of one writer (see the field layouts in
pytorch/kineto's `RoctracerActivity_inl.h` and `CuptiActivity.cpp`) and checks the analysis
finds exactly the planted structure: 2 graph launches in `step[DECODE bs=1]` spans, 3 kernels
per launch of which 1 is a softmax, and 1 eager softmax outside any region. Then the same for
a field the analysis needs holding a value no writer produces: one line naming the event and
field, exit 2. The real traces of ../shared/traces all read (test_traces_real.py has their
exact counts; here: each reads, and the ROCm ones keep their hex runtime streams).
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import EXIT_BAD_INPUT, HarnessInputError
from sglang_spec_harness.traces import analyze_traces, read_trace
from support.kineto_traces import KERNELS_PER_LAUNCH, LAUNCHES, cuda_trace, rocm_62_trace


def write(tmp_path: Path, doc: Any, name: str = "trace.json", gz: bool = False) -> Path:
    path = tmp_path / (name + (".gz" if gz else ""))
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def planted_structure_found(path: Path, platform: str = "cuda") -> None:
    analysis = analyze_traces([path])
    file = analysis.files[0]
    assert file.platform == platform
    assert file.graph_launches == LAUNCHES
    assert file.kernels_per_graph_launch == {KERNELS_PER_LAUNCH: LAUNCHES}
    decode = file.regions["DRAFT_DECODE"]
    assert (decode.unit, decode.units) == ("graph_launch", LAUNCHES)
    row = decode.counts["softmax"]
    assert (row.total, row.per_replay_min, row.per_replay_max) == (LAUNCHES, 1, 1)
    total = file.pattern_totals[0]
    assert (total.total, total.in_graph_launches, total.eager) == (LAUNCHES + 1, LAUNCHES, 1)


def edit(doc: dict[str, Any], category: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for event in doc["traceEvents"]:
        if event.get("cat") == category:
            change(event)
    return doc


def test_cupti_writer_baseline(tmp_path):
    planted_structure_found(write(tmp_path, cuda_trace()))


def test_rocm_62_runtime_stream_as_pointer_string(tmp_path):
    """The issue-12 case: `"stream": "0x0"` on runtime events was refused as bad input (exit 2)."""
    path = write(tmp_path, rocm_62_trace(), gz=True)
    planted_structure_found(path, platform="rocm")
    assert main(["analyze", str(path)]) == 0


def _set_args(**values: Any) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        for key, value in values.items():
            event["args"][key] = value(event["args"].get(key)) if callable(value) else value
    return change


@pytest.mark.parametrize(
    "category, change",
    [
        # ids the analysis reads, as strings: decimal, hex, and hex pointers past int64
        ("kernel", _set_args(correlation=str)),
        ("cuda_runtime", _set_args(correlation=str)),
        ("kernel", _set_args(correlation=hex)),
        ("kernel", _set_args(stream=hex, device=str)),
        ("kernel", _set_args(stream="0xffff8f3a2c000d10")),
        ("kernel", _set_args(stream=18446744073709551615)),
        ("kernel", _set_args(correlation=float)),  # integral floats
        ("kernel", _set_args(**{"graph id": str})),
        ("kernel", _set_args(**{"graph id": None})),
        # ids absent: a null pointer string, null
        ("kernel", _set_args(stream="(nil)")),
        ("kernel", _set_args(device=None, stream=None)),
    ],
    ids=["kernel-corr-decimal-str", "runtime-corr-decimal-str", "kernel-corr-hex-str", "stream-hex-device-str",
         "stream-pointer-past-int64", "stream-uint64-max", "corr-integral-float", "graph-id-str", "graph-id-null",
         "stream-nil", "device-stream-null"],
)
def test_id_fields_in_every_writer_form(tmp_path, category, change):
    planted_structure_found(write(tmp_path, edit(cuda_trace(), category, change)))


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.update(ts=e["ts"] + 0.123, dur=e["dur"] + 0.456),  # ns resolution: 3 decimals
        lambda e: e.update(ts=int(e["ts"]), dur=int(e["dur"])),  # old writers: integers
        lambda e: e.update(ts=f"{e['ts']:.3f}", dur=str(e["dur"])),  # numbers as strings
    ],
    ids=["decimals", "integers", "strings"],
)
def test_times_in_every_writer_form(tmp_path, change):
    doc = copy.deepcopy(cuda_trace())
    for event in doc["traceEvents"]:
        if "ts" in event:
            change(event)
    planted_structure_found(write(tmp_path, doc))


def test_ids_of_processes_and_threads_as_names_or_floats(tmp_path):
    doc = edit(cuda_trace(), "cuda_runtime", lambda e: e.update(pid="python 100", tid=7.0))
    doc = edit(doc, "user_annotation", lambda e: e.update(pid="python 100", tid=7.0))
    planted_structure_found(write(tmp_path, doc))


def test_missing_fields_take_their_defaults(tmp_path):
    doc = cuda_trace()
    # instant and flow events with no dur, no args; metadata with no ts; args without the ids
    doc["traceEvents"] += [
        {"ph": "i", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 100, "tid": 7, "ts": 3.0},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1001, "pid": 100, "tid": 7, "ts": 1_000_010.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 100, "tid": 7, "ts": 1.0},
        {"ph": "X", "cat": "kernel", "name": "unlaunched", "ts": 9.0, "dur": 1.0},
    ]
    tables = read_trace(write(tmp_path, doc))
    assert len(tables.gpu_ops) == LAUNCHES * KERNELS_PER_LAUNCH + 2
    unlaunched = tables.gpu_ops[tables.gpu_ops["name"] == "unlaunched"].iloc[0]
    assert (unlaunched["correlation"], unlaunched["device"], unlaunched["stream"]) == (-1, -1, -1)
    assert tables.cpu_ops["dur"].tolist() == [0.0]


@pytest.mark.parametrize(
    "unused",
    [
        # fields the analysis does not read, in types no schema promises
        lambda d: d["traceEvents"].append({"ph": "M", "name": "process_labels", "pid": 100, "args": {"labels": ["a", 1]}}),
        lambda d: d["traceEvents"].append({"ph": "X", "cat": ["odd"], "name": {"x": 1}, "ts": True}),
        lambda d: d["traceEvents"].append({"ph": "X", "cat": 17, "name": None, "pid": [1], "args": "text"}),
        lambda d: d["traceEvents"].append({"ph": "f", "cat": "ac2g", "id": "0x12", "bp": "e", "pid": 0, "tid": 7,
                                           "ts": "later", "args": [1, 2]}),
        lambda d: d.update(distributedInfo="rank zero", deviceProperties={"0": "MI250"}, baseTimeNanoseconds="1e9"),
        lambda d: d.update(distributedInfo={"rank": [0], "world_size": "one"}),
        # a runtime event's stream is not read: an object there must not matter
        lambda d: d["traceEvents"].__setitem__(3, {**d["traceEvents"][3],
                                                   "args": {**d["traceEvents"][3]["args"], "stream": {"ptr": 0}}}),
        # args fields of kernels the analysis does not read, as booleans and arrays
        lambda d: [e["args"].update(queued=True, grid=[[1]], context=None) for e in d["traceEvents"] if e.get("cat") == "kernel"],
    ],
    ids=["metadata-list-args", "unknown-cat-list", "unknown-cat-number", "flow-odd", "top-level-odd", "rank-list",
         "runtime-stream-object", "kernel-args-bool"],
)
def test_unused_fields_of_any_type_are_ignored(tmp_path, unused):
    doc = cuda_trace()
    unused(doc)
    planted_structure_found(write(tmp_path, doc))


def test_a_bare_event_list_reads(tmp_path):
    planted_structure_found(write(tmp_path, cuda_trace()["traceEvents"]))


@pytest.mark.parametrize(
    "category, change, field",
    [
        ("kernel", _set_args(correlation=[1]), "args.correlation"),
        ("kernel", _set_args(stream="stream seven"), "args.stream"),
        ("kernel", _set_args(device=True), "args.device"),
        ("kernel", _set_args(correlation=1.5), "args.correlation"),
        ("kernel", _set_args(correlation=1 << 70), "args.correlation"),
        ("cuda_runtime", _set_args(correlation={"id": 1}), "args.correlation"),
        ("kernel", lambda e: e.update(ts="noon"), "ts"),
        ("kernel", lambda e: e.update(dur="1e999"), "dur"),
        ("user_annotation", lambda e: e.update(name={"label": "step"}), "name"),
        ("cuda_runtime", lambda e: e.update(tid=[7]), "tid"),
        ("kernel", lambda e: e.update(args=[0, 7]), "args"),
    ],
)
def test_a_needed_field_no_writer_produces_is_one_clear_line(tmp_path, capsys, category, change, field):
    path = write(tmp_path, edit(cuda_trace(), category, change))
    with pytest.raises(HarnessInputError) as raised:
        read_trace(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: event ") and f": {field} is " in message and ", expected " in message
    assert "\n" not in message
    assert main(["analyze", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_event_position_is_counted_across_slices(tmp_path, monkeypatch):
    """Events are decoded a few MB at a time; the position in the message is the file's."""
    import sglang_spec_harness.traces.kineto as kineto

    monkeypatch.setattr(kineto, "SLICE_BYTES", 256)
    doc = cuda_trace()
    position = len(doc["traceEvents"]) - 1
    doc["traceEvents"][position]["args"]["correlation"] = "not a number"
    with pytest.raises(HarnessInputError, match=rf": event {position} \(kernel 'void at::native"):
        read_trace(write(tmp_path, doc))


def test_a_non_object_event_is_named_by_its_position(tmp_path, monkeypatch):
    import sglang_spec_harness.traces.kineto as kineto

    monkeypatch.setattr(kineto, "SLICE_BYTES", 256)
    doc = cuda_trace()
    doc["traceEvents"].insert(9, 42)
    with pytest.raises(HarnessInputError, match=r"unexpected event: Expected `object`, got `int` - at `\$\[9\]`"):
        read_trace(write(tmp_path, doc))


def test_strings_full_of_event_boundaries_cost_a_bounded_number_of_decodes(tmp_path, monkeypatch):
    """A kernel name made of `},{` cannot make the slicer retry once per fake boundary."""
    import sglang_spec_harness.traces.kineto as kineto

    monkeypatch.setattr(kineto, "SLICE_BYTES", 64)
    decodes = []
    real = kineto._decode
    monkeypatch.setattr(kineto, "_decode", lambda *a: decodes.append(1) or real(*a))
    doc = cuda_trace()
    doc["traceEvents"].insert(2, {"ph": "X", "cat": "cpu_op", "name": "},{" * 5000, "pid": 1, "tid": 1, "ts": 1, "dur": 1})
    tables = read_trace(write(tmp_path, doc))
    assert len(tables.cpu_ops) == 1
    assert len(decodes) < 200  # without the bound: over 5000


# ---- the real traces --------------------------------------------------------------------------------


def test_every_real_trace_is_pinned_here(shared_traces):
    names = sorted(p.name for p in shared_traces.iterdir() if p.suffix in (".gz", ".json", ".sqlite"))
    assert names == sorted(REAL_TABLE_SIZES)


# name -> (platform, GPU ops, runtime calls, annotations, CPU ops) as read; counted independently
# with the standard library below for the Kineto ones.
REAL_TABLE_SIZES = {
    "hta_negative_queue_length_rank0.json.gz": ("cuda", 7747, 33924, 360, 25185),
    "hta_trace_diff_test.json.gz": ("cuda", 15632, 21167, 288, 31236),
    "kineto_unittest_after_fix_trace.json": ("cuda", 1, 1, 0, 4),
    "nsysai_h100_2gpu_1s.sqlite": ("cuda", 4368, 5796, 16782, 16782),
    "tracelens_h100_timesformer_k400_REDACTED.json.gz": ("cuda", 534, 929, 42331, 3540),
    "tracelens_sglang_qwen3_8b_decode_rocm.json.gz": ("rocm", 558, 29, 823, 61),
    "tracelens_vllm_decode_full_graph_capture_rocm.json.gz": ("rocm", 10, 3128, 119902, 3819),
    "tracelens_vllm_decode_full_graph_execution_rocm.json.gz": ("rocm", 434, 20, 985, 100),
    "tracelens_vllm_prefilldecode_piecewise_graph_execution_rocm.json.gz": ("rocm", 423, 381, 17039, 642),
    "tracelens_xdit_flux1_aiter_sage_profile_rocm.json.gz": ("rocm", 7866, 2958, 201334, 6409),
}


@pytest.mark.parametrize("name", sorted(REAL_TABLE_SIZES))
def test_real_trace_table_sizes(shared_traces, name):
    from sglang_spec_harness.traces.names import (
        ANNOTATION_KIND_OF_CATEGORY, CPU_OP_CATEGORIES, GPU_OP_KIND_OF_CATEGORY, RUNTIME_CATEGORIES)

    tables = read_trace(shared_traces / name)
    sizes = (tables.platform, len(tables.gpu_ops), len(tables.runtime), len(tables.annotations), len(tables.cpu_ops))
    assert sizes == REAL_TABLE_SIZES[name]
    if name.endswith(".sqlite"):
        return
    raw = (shared_traces / name).read_bytes()
    events = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)["traceEvents"]
    cats = [e.get("cat") for e in events]
    assert sizes[1:] == (
        sum(c in GPU_OP_KIND_OF_CATEGORY for c in cats),
        sum(c in RUNTIME_CATEGORIES for c in cats),
        sum(c in ANNOTATION_KIND_OF_CATEGORY for c in cats),
        sum(c in CPU_OP_CATEGORIES for c in cats),
    )


def test_kernels_without_any_runtime_call(tmp_path):
    """A trace cut to its kernels (no runtime events at all: a window edge, a lost buffer) reads;
    every kernel is in no region, and the analysis says why."""
    doc = cuda_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    file = analyze_traces([write(tmp_path, doc)]).files[0]
    assert (file.graph_launches, file.validity.gpu_ops_without_launch) == (0, LAUNCHES * KERNELS_PER_LAUNCH + 1)
    total = file.pattern_totals[0]
    assert (total.total, total.without_launch) == (LAUNCHES + 1, LAUNCHES + 1)
    assert any("have no launch in the trace" in w for w in file.validity.warnings)
