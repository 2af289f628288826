"""Traces the tests record themselves with torch.profiler on the CPU: softmax and argmax inside
record_function regions labelled as SGLang (and the micro engine) label them; exact op counts."""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from sglang_spec_harness.traces import NO_REGION, analyze_traces, analyze_traces_with_tables  # noqa: E402
from support.cpu_traces import CYCLES, pre_0523_cycles, record, select_token  # noqa: E402

ARGMAX = {"argmax": r"^aten::argmax$"}


def _sglang_0523_cycles():
    """0.5.23 labels: stage spans around step[DRAFT]/step[VERIFY]; both draft forwards say DRAFT."""
    logits = torch.randn(1, 64)

    def body():
        for _ in range(2):
            with record_function("draft"), record_function("step[DRAFT bs=1]"):
                for _ in range(2):
                    select_token(logits, fast=False)
            with record_function("verify"), record_function("step[VERIFY bs=1]"):
                torch.argmax(logits, dim=-1)
            with record_function("draft_extend"), record_function("step[DRAFT bs=1]"):
                select_token(logits, fast=False)

    return body


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cpu_traces")
    return {
        "baseline": record(root / "baseline.json", pre_0523_cycles(fast=False)),
        "fast": record(root / "fast.json", pre_0523_cycles(fast=True)),
        "v0523": record(root / "v0523.json", _sglang_0523_cycles()),
    }


def _counts(path: Path, patterns=None, **kwargs) -> dict[tuple[str, str, str], tuple]:
    file = analyze_traces([path], patterns, **kwargs).files[0]
    return {(r.region, r.unit, r.pattern): (r.replays, r.total, r.per_replay_min, r.per_replay_max) for r in file.counts}


def test_baseline_softmax_per_region_span(recorded):
    file = analyze_traces([recorded["baseline"]]).files[0]
    assert file.validity.subject == "cpu_ops"
    assert file.platform == "cpu"
    counts = {(r.region, r.unit): r for r in file.counts}
    decode = counts[("DRAFT_DECODE", "span")]
    assert (decode.replays, decode.total, decode.per_replay_min, decode.per_replay_max) == (CYCLES, 6, 2, 2)
    # aten::softmax calls aten::_softmax: only the child is counted
    assert decode.matched_names == {"aten::_softmax": 6}
    extend = counts[("DRAFT_EXTEND", "span")]
    assert (extend.replays, extend.total, extend.per_replay_median) == (CYCLES, 3, 1.0)
    verify = counts[("TARGET_VERIFY", "span")]
    assert (verify.replays, verify.total) == (CYCLES, 0)
    outside = counts[(NO_REGION, "trace")]
    assert (outside.replays, outside.total) == (1, 1)
    assert file.regions["DRAFT_DECODE"].unit == "span"
    assert file.validity.region_instances == {
        "DRAFT_EXTEND": {"graph_launch": 0, "span": CYCLES},
        "TARGET_VERIFY": {"graph_launch": 0, "span": CYCLES},
        "DRAFT_DECODE": {"graph_launch": 0, "span": CYCLES},
    }
    assert file.validity.warnings == []


def _spans(path: Path, prefix: str) -> list[dict]:
    import json

    return [e for e in json.loads(path.read_text())["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith(prefix)]


def test_region_time_on_cpu_is_the_wall_time_of_its_spans(recorded):
    times = analyze_traces([recorded["baseline"]]).files[0].region_times
    assert set(times) == {"DRAFT_DECODE", "TARGET_VERIFY", "DRAFT_EXTEND"}
    for region, label in (("DRAFT_DECODE", "step[DECODE"), ("TARGET_VERIFY", "step[TARGET_VERIFY"),
                          ("DRAFT_EXTEND", "step[DRAFT_EXTEND")):
        spans = _spans(recorded["baseline"], label)
        assert len(spans) == CYCLES
        t = times[region]
        assert (t.unit, t.instances, t.basis) == ("span", CYCLES, "span_wall")
        assert t.time_us == pytest.approx(sum(float(e["dur"]) for e in spans), abs=0.01)
        durations = sorted(float(e["dur"]) for e in spans)
        assert t.robust_time_us == pytest.approx(durations[CYCLES // 2] * CYCLES, abs=0.01)  # median x count
        # each span by start, so that a rule can set it against the reference span of its cycle
        assert [s for s, _ in t.spans_us] == sorted(s for s, _ in t.spans_us)
        assert sorted(d for _, d in t.spans_us) == pytest.approx(durations, abs=0.01)
        assert sorted(s for s, _ in t.spans_us) == pytest.approx(sorted(float(e["ts"]) for e in spans), abs=0.01)


def test_nested_spans_of_one_region_count_once(tmp_path):
    logits = torch.randn(1, 64)

    def body():
        for _ in range(2):
            with record_function("step[DECODE bs=1]"):
                torch.softmax(logits, dim=-1)  # in the outer span only
                with record_function("step[DECODE bs=1]"):
                    torch.softmax(logits, dim=-1)
            with record_function("step[TARGET_VERIFY bs=1]"):
                torch.argmax(logits, dim=-1)

    path = record(tmp_path / "nested.json", body)
    decode = analyze_traces([path]).files[0].region_times["DRAFT_DECODE"]
    spans = _spans(path, "step[DECODE")
    outer = [e for e in spans if not any(
        o is not e and float(o["ts"]) <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= float(o["ts"]) + float(o["dur"])
        for o in spans)]
    assert len(spans) == 4 and len(outer) == 2 and decode.instances == 4  # both spans of a cycle are units ...
    assert decode.time_us == pytest.approx(sum(float(e["dur"]) for e in outer), abs=0.01)  # ... timed once
    outer_durations = sorted(float(e["dur"]) for e in outer)
    assert decode.robust_time_us == pytest.approx(sum(outer_durations) / 2 * 2, abs=0.01)  # median of 2 x 2
    assert [d for _, d in decode.spans_us] == pytest.approx([float(e["dur"]) for e in sorted(outer, key=lambda e: float(e["ts"]))],
                                                            abs=0.01)  # the inner spans are not cycles


def test_fast_path_has_no_softmax_in_draft_regions_but_argmax(recorded):
    counts = _counts(recorded["fast"], {"softmax": r"^aten::_softmax$", **ARGMAX})
    assert counts[("DRAFT_DECODE", "span", "softmax")] == (CYCLES, 0, 0, 0)
    assert counts[("DRAFT_DECODE", "span", "argmax")] == (CYCLES, 6, 2, 2)
    assert counts[("DRAFT_EXTEND", "span", "softmax")] == (CYCLES, 0, 0, 0)
    assert counts[("DRAFT_EXTEND", "span", "argmax")] == (CYCLES, 3, 1, 1)
    assert counts[("TARGET_VERIFY", "span", "argmax")] == (CYCLES, 3, 1, 1)
    assert counts[(NO_REGION, "trace", "softmax")] == (1, 1, 1, 1)


def test_0523_stage_span_tells_draft_extend_from_draft_decode(recorded):
    analyzed = analyze_traces_with_tables([recorded["v0523"]])
    analysis = analyzed.analysis
    counts = {(r.region, r.unit): (r.replays, r.total, r.per_replay_max) for r in analysis.files[0].counts}
    assert counts[("DRAFT_DECODE", "span")] == (2, 4, 2)
    assert counts[("DRAFT_EXTEND", "span")] == (2, 2, 1)
    assert counts[("TARGET_VERIFY", "span")] == (2, 0, 0)
    spans = analyzed.spans_frame()
    # the stage span (first in the table) is the counting unit, not the step[DRAFT] inside it
    assert sorted(spans["name"].astype(str)) == ["draft", "draft", "draft_extend", "draft_extend", "verify", "verify"]


def test_region_flag_rules_win_over_the_default_table(recorded):
    counts = _counts(recorded["baseline"], regions={"MY_DRAFT": r"^step\[DECODE "})
    assert counts[("MY_DRAFT", "span", "softmax")] == (CYCLES, 6, 2, 2)
    assert not any(region == "DRAFT_DECODE" for region, _, _ in counts)
    only = _counts(recorded["baseline"], regions={"VERIFY_ONLY": r"TARGET_VERIFY"}, replace_default_regions=True)
    assert set(only) == {("VERIFY_ONLY", "span", "softmax"), (NO_REGION, "trace", "softmax")}
    assert only[(NO_REGION, "trace", "softmax")][1] == 1 + 6 + 3


def test_graph_runner_replay_frame_labels_without_a_step_span(tmp_path):
    """with_stack: a python frame of `eagle_draft_cuda_graph_runner.py ... replay` labels its work
    even where no step[...] span is open."""
    module_dir = tmp_path / "sglang_like"
    module_dir.mkdir()
    (module_dir / "eagle_draft_cuda_graph_runner.py").write_text(
        "import torch\n\n\ndef replay(logits):\n    return torch.softmax(logits, dim=-1)\n"
    )
    sys.path.insert(0, str(module_dir))
    try:
        import eagle_draft_cuda_graph_runner as runner
    finally:
        sys.path.remove(str(module_dir))
    logits = torch.randn(1, 32)
    path = tmp_path / "stack.json"
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(2):
            runner.replay(logits)
        with record_function("step[TARGET_VERIFY bs=1]"):
            torch.softmax(logits, dim=-1)
    prof.export_chrome_trace(str(path))
    counts = _counts(path)
    assert counts[("DRAFT_DECODE", "span", "softmax")] == (2, 2, 1, 1)
    assert counts[("TARGET_VERIFY", "span", "softmax")] == (1, 1, 1, 1)


def test_tp_rank_files_combine(recorded, tmp_path):
    paths = []
    for rank, name in enumerate(["baseline", "fast"]):
        target = tmp_path / f"prof-1700000000-TP-{rank}.trace.json.gz"
        with open(recorded[name], "rb") as src, gzip.open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths.append(target)
    analysis = analyze_traces(list(reversed(paths)))
    assert [(f.rank, f.rank_source) for f in analysis.files] == [(1, "file_name"), (0, "file_name")]
    decode = analysis.count("DRAFT_DECODE", "softmax", unit="span")
    assert (decode.replays, decode.total, decode.per_replay_min, decode.per_replay_median, decode.per_replay_max) == (
        2 * CYCLES, 6, 0, 1.0, 2,
    )
    assert decode.per_replay_histogram == {0: CYCLES, 2: CYCLES}
    assert analysis.combined.ranks == [1, 0]
