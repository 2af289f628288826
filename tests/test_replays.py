"""`count_in_graph_replays`: exact per-replay counts on the real GPU traces (../shared/traces) and
on a real `torch.profiler.profile` on this CPU; where the trace cannot support a count it raises
CountUnavailable, never a 0."""

from __future__ import annotations

import gc
import os
import re
from collections import Counter

import pytest

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.traces import CountUnavailable, ReplayCounts, analyze_traces, count_in_graph_replays, replays

A100 = "hta_negative_queue_length_rank0.json.gz"
V100 = "hta_trace_diff_test.json.gz"
QWEN3_ROCM = "tracelens_sglang_qwen3_8b_decode_rocm.json.gz"
PIECEWISE = "tracelens_vllm_prefilldecode_piecewise_graph_execution_rocm.json.gz"
XDIT = "tracelens_xdit_flux1_aiter_sage_profile_rocm.json.gz"
CAPTURE = "tracelens_vllm_decode_full_graph_capture_rocm.json.gz"
TIMESFORMER = "tracelens_h100_timesformer_k400_REDACTED.json.gz"
NSYS = "nsysai_h100_2gpu_1s.sqlite"
# kernels only: graphs also replay memsets and memcpys, which are GPU ops but not kernels
KERNEL = r"^(?!Memset|Memcpy|\[Memset\]|\[Memcpy\])"


# ---- real GPU traces ------------------------------------------------------------------------------


def test_sglang_decode_graph_replay_on_rocm(shared_traces):
    counts = count_in_graph_replays(shared_traces / QWEN3_ROCM, "softmax", "DRAFT_DECODE")
    assert (counts.unit, counts.per_replay, counts.total, counts.max()) == ("graph_launch", (0,), 0, 0)
    assert counts.pattern == r"cunn_SoftMaxForward|softmax_warp_forward|^aten::_softmax$"
    assert (counts.empty_launches, counts.eager, counts.matched_names) == (0, 0, {})
    assert any("DRAFT_DECODE found but no TARGET_VERIFY" in w for w in counts.warnings)
    every_kernel = count_in_graph_replays(shared_traces / QWEN3_ROCM, KERNEL, "DRAFT_DECODE")
    assert every_kernel.per_replay == (544,)


def test_per_replay_counts_in_replay_order(shared_traces):
    a100 = count_in_graph_replays(shared_traces / A100, KERNEL, "(none)")  # no SGLang labels: region (none)
    assert a100.replays == 70
    assert Counter(a100.per_replay) == {1: 35, 2: 30, 8: 5}  # kernels per launch, as test_traces_real knows
    assert (a100.min(), a100.max(), a100.total) == (1, 8, 35 + 60 + 40)
    piecewise = count_in_graph_replays(shared_traces / PIECEWISE, KERNEL, "(none)")
    assert piecewise.per_replay == PIECEWISE_KERNELS
    # the same numbers as the analysis's per-replay statistics
    row = analyze_traces([shared_traces / PIECEWISE], {"k": KERNEL}).count("(none)", "k")
    assert row.per_replay_histogram == dict(Counter(piecewise.per_replay)) == {4: 1, 12: 1, 15: 23}


PIECEWISE_KERNELS = (4,) + (15,) * 23 + (12,)


def test_no_softmax_in_70_real_replays(shared_traces):
    counts = count_in_graph_replays(shared_traces / A100, "softmax", "(none)")
    assert counts.per_replay == (0,) * 70 and counts.total == 0


def test_one_file_per_rank(shared_traces):
    both = count_in_graph_replays([shared_traces / A100, str(shared_traces / V100)], KERNEL, "(none)")
    a100 = count_in_graph_replays(shared_traces / A100, KERNEL, "(none)")
    assert both.replays == 82
    assert both.per_replay[:70] == a100.per_replay  # file by file, in the order given
    assert Counter(both.per_replay[70:]) == {315: 6, 429: 6}


def test_a_path_like_object_is_read_by_its_path(shared_traces):
    """Any os.PathLike, not only a Path: a directory entry's str() is not its path."""
    entry = next(e for e in os.scandir(shared_traces) if e.name == A100)
    by_entry = count_in_graph_replays(entry, KERNEL, "(none)")
    assert by_entry.per_replay == count_in_graph_replays(shared_traces / A100, KERNEL, "(none)").per_replay
    assert count_in_graph_replays([entry], KERNEL, "(none)").per_replay == by_entry.per_replay


def test_a_region_given_as_a_regex_and_eager_work_in_it(shared_traces):
    path = shared_traces / XDIT
    fx = count_in_graph_replays(path, ".", r"^## Call CompiledFxGraph")
    assert (fx.region, fx.unit, fx.per_replay) == (r"^## Call CompiledFxGraph", "graph_launch", (1566,) * 4)
    # the replays inside execute_diffusion hold no softmax; the 24 around them run eagerly in its span
    diffusion = count_in_graph_replays(path, re.compile("softmax_warp_forward"), r"^execute_diffusion")
    assert (diffusion.per_replay, diffusion.eager) == ((0, 0, 0, 0), 24)


@pytest.mark.parametrize(("name", "region", "message"), [
    (QWEN3_ROCM, "TARGET_VERIFY",
     "region 'TARGET_VERIFY' has no graph replays (regions that have: DRAFT_DECODE 1)"),
    (CAPTURE, "(none)", "region '(none)' has no graph replays (regions that have: none)"),
    (TIMESFORMER, "(none)", "region '(none)' has no graph replays (regions that have: none)"),
    (TIMESFORMER, r"modeling_timesformer\.py\(\d+\): forward$",
     r"region 'modeling_timesformer\\.py\\(\\d+\\): forward$' has no graph replays; it ran eagerly (88 spans), "
     "not as graph replays (regions that have: none)"),
    (NSYS, "(none)", "region '(none)' has no graph replays (regions that have: none); Nsight Systems graph-trace "
                     "mode 'Graph': replayed graph kernels are not recorded"),
])
def test_fails_closed_where_the_trace_cannot_support_the_count(shared_traces, name, region, message):
    with pytest.raises(CountUnavailable, match=re.escape(message)):
        count_in_graph_replays(shared_traces / name, "softmax", region)


def test_bad_input(shared_traces, tmp_path):
    with pytest.raises(HarnessInputError, match="invalid regular expression"):
        count_in_graph_replays(shared_traces / QWEN3_ROCM, "soft(max", "DRAFT_DECODE")
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(HarnessInputError, match="empty.json"):
        count_in_graph_replays(tmp_path / "empty.json", "softmax", "DRAFT_DECODE")
    with pytest.raises(TypeError, match="expected a torch.profiler.profile, a trace path or a list of them"):
        count_in_graph_replays(42, "softmax", "DRAFT_DECODE")


# ---- a real torch.profiler.profile on this CPU -------------------------------------------------------


def profile_three_cycles():
    """Three cycles: softmax 1, 2, 3 times in the draft's span, one argmax in target verify's, and an
    argmax outside every region."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(4, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for cycle in range(3):
            with record_function("step[DECODE bs=1]"):
                for _ in range(cycle + 1):
                    torch.softmax(x, dim=-1)
            with record_function("step[TARGET_VERIFY bs=1]"):
                torch.argmax(x, dim=-1)
        torch.argmax(x)
    return prof


@pytest.fixture(scope="module")
def cpu_profile():
    return profile_three_cycles()


def test_a_live_profile_on_cpu_counts_per_span(cpu_profile):
    draft = count_in_graph_replays(cpu_profile, "softmax", "DRAFT_DECODE")
    assert draft == ReplayCounts(region="DRAFT_DECODE", pattern=draft.pattern, unit="span", per_replay=(1, 2, 3),
                                 matched_names={"aten::_softmax": 6}, warnings=draft.warnings)
    assert (draft.replays, draft.total, draft.min(), draft.max()) == (3, 6, 1, 3)
    assert count_in_graph_replays(cpu_profile, r"^aten::argmax$", "DRAFT_DECODE").per_replay == (0, 0, 0)
    assert count_in_graph_replays(cpu_profile, r"^aten::argmax$", "TARGET_VERIFY").per_replay == (1, 1, 1)
    # a region as a regex over span names
    assert count_in_graph_replays(cpu_profile, "softmax", r"^step\[DECODE").per_replay == (1, 2, 3)


def test_a_profile_exported_to_a_file_counts_the_same(tmp_path):
    prof, path = profile_three_cycles(), tmp_path / "rank0.trace.json"
    prof.export_chrome_trace(str(path))
    assert count_in_graph_replays(path, "softmax", "DRAFT_DECODE").per_replay == (1, 2, 3)
    # torch exports a profile's trace once: once the test has, the file is what to pass
    with pytest.raises(ValueError, match="this profile's trace was exported already .*: pass the file"):
        count_in_graph_replays(prof, "softmax", "DRAFT_DECODE")


def test_gpu_and_cpu_traces_together_are_refused(shared_traces, tmp_path):
    path = tmp_path / "cpu.trace.json"
    profile_three_cycles().export_chrome_trace(str(path))
    with pytest.raises(CountUnavailable, match="^2 traces: GPU traces and CPU-only traces together: give one kind$"):
        count_in_graph_replays([shared_traces / QWEN3_ROCM, path], "softmax", "DRAFT_DECODE")


def test_the_exported_profile_goes_with_the_profile():
    prof = profile_three_cycles()
    count_in_graph_replays(prof, "softmax", "DRAFT_DECODE")
    folder = replays._EXPORTED[prof].parent
    assert folder.is_dir()
    del prof
    gc.collect()
    assert not folder.exists()


def test_a_region_the_profile_does_not_have(cpu_profile):
    with pytest.raises(CountUnavailable) as caught:
        count_in_graph_replays(cpu_profile, "softmax", "DRAFT_EXTEND")
    assert str(caught.value) == ("the profile: region 'DRAFT_EXTEND' has no spans (a CPU-only trace: spans are the "
                                 "unit) (regions that have: DRAFT_DECODE 3, TARGET_VERIFY 3)")
