"""The trace views (analysis.json `views`, sglang_spec_harness/traces/views.py): what the report draws of
the traces (time per region and cycle, top kernels or CPU ops, one cycle's timeline), recorded by the
analysis so that the report reads no trace.

Two real run directories written before the views existed: a run of the previous release (0.1.0, on
this CPU) and the H200 run. Each opens with one note naming `harness analyze --run-dir`; after it, the
report shows exactly what the report computed from the traces before (the numbers and digests below
were taken with 0.1.0's code, which read the traces at report time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main as harness_main
from sglang_spec_harness.report import analysis_view as av
from sglang_spec_harness.report import build_report
from sglang_spec_harness.report.data import load_report_data
from sglang_spec_harness.rundir import SCHEMA_VERSION, AnalysisRecord, load_run_dir, read_record, record_json
from sglang_spec_harness.traces.views import MAX_TIMELINE_OPS, MAX_TIMELINE_UNITS, TOP_OPS

FIXTURES = Path(__file__).parent / "fixtures"
PROFILED_V010 = ["00-candidate-profiled", "01-baseline-profiled"]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("old-runs")
    for name in ("run_v010_micro_topk1_profiled.tar.gz", "run_micro_topk1_gpu_h200.tar.gz"):
        with tarfile.open(FIXTURES / name) as tar:
            tar.extractall(root, filter="data")
    return {"v010": root / "micro_topk1_v010", "gpu": root / "micro_topk1_gpu_h200"}


@pytest.fixture(scope="module")
def reanalysed(extracted, tmp_path_factory) -> dict[str, Path]:
    """Copies of both runs after `harness analyze --run-dir` (analysed once for the module)."""
    root = tmp_path_factory.mktemp("reanalysed")
    out = {}
    for name, run in extracted.items():
        out[name] = Path(shutil.copytree(run, root / run.name))
        assert harness_main(["analyze", "--run-dir", str(out[name])]) == 0
    return out


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _drawn(run_dir: Path) -> tuple[dict, dict, dict, list[str]]:
    """What the report's figures and top table take: region time per cycle, the top rows, the
    timelines (as plain values), and the report's notes."""
    data = load_report_data(run_dir)
    region_time = av.region_time_per_cycle(data)
    tables, unit = av.top_kernels(data)
    top = [{region: [dataclasses.asdict(r) for r in rows] for region, rows in tables.items()}, unit]
    bars, unit = av.cycle_timelines(data, av.main_pattern(data))
    timeline = [{variant: [dataclasses.asdict(b) for b in drawn] for variant, drawn in bars.items()}, unit]
    return region_time, top, timeline, data.notes


def test_a_run_of_the_previous_release_opens_with_one_note(extracted, capsys):
    run = extracted["v010"]
    assert json.loads((run / "environment.json").read_text())["harness"]["version"] == "0.1.0"
    stored = load_run_dir(run)  # the strict reader takes its analysis.json: no views, counts typed
    assert sorted(stored.analysis) == PROFILED_V010
    assert all(a.views is None for a in stored.analysis.values())
    assert stored.analysis["01-baseline-profiled"].count("DRAFT_DECODE", "softmax", "span").total == 10
    # read and written again as it was, migrated to the current schema version (what
    # sglang_spec_harness.run.combine does to an adopted run's): the migration to 2 changes only the version
    written = json.loads((run / "analysis.json").read_text())
    again = record_json(read_record(run / "analysis.json", AnalysisRecord))
    assert written["schema_version"] == 1 and again.startswith(f'{{\n  "schema_version": {SCHEMA_VERSION},\n')
    assert list(json.loads(again).items()) == list({**written, "schema_version": SCHEMA_VERSION}.items())

    region_time, top, timeline, notes = _drawn(run)
    assert region_time == ({}, "CPU µs") and top == [{}, "CPU ops"] and timeline == [{}, "CPU ops"]
    assert notes == [
        "Time per region and cycle, the top kernels and the cycle timeline are not shown for "
        "01-baseline-profiled, 00-candidate-profiled: analysis.json was written before the harness recorded "
        f"them; `harness analyze --run-dir {run}` recomputes them from the traces."
    ]
    bars = {(b.region, b.variant): (b.per_replay_min, b.per_replay_max, b.total, b.replays)
            for b in av.count_bars(load_report_data(run), "softmax")}
    assert bars[("DRAFT_DECODE", "baseline")] == (2.0, 2.0, 10, 5)
    assert bars[("DRAFT_DECODE", "candidate")] == (0.0, 0.0, 0, 4)
    assert bars[("PREFILL", "candidate")] == (0.0, 1.0, 2, 4)


def test_analyze_run_dir_recomputes_what_the_old_report_drew(extracted, reanalysed, capsys):
    run = reanalysed["v010"]
    old = json.loads((extracted["v010"] / "analysis.json").read_text())
    new = json.loads((run / "analysis.json").read_text())
    assert sorted(new["trials"]) == PROFILED_V010 and "errors" not in new
    for name in PROFILED_V010:  # the counts are the same; only the trace paths (absolute) moved
        for before, after in zip(old["trials"][name]["files"], new["trials"][name]["files"], strict=True):
            assert after.pop("region_functions") == []  # newer than the run; its traces have no stacks
            assert {**before, "path": None} == {**after, "path": None}
    region_time, top, timeline, notes = _drawn(run)
    assert notes == []
    assert region_time == ({
        "baseline": {"DRAFT_DECODE": 7521.919921875, "TARGET_VERIFY": 7185.6353515625,
                     "DRAFT_EXTEND": 11238.525390625, "PREFILL": 491.6177734375},
        "candidate": {"DRAFT_DECODE": 3460.325439453125, "TARGET_VERIFY": 7781.12158203125,
                      "DRAFT_EXTEND": 19205.403076171875, "PREFILL": 919.49609375},
    }, "CPU µs")
    decode = [(r["name"], r["baseline_calls"], r["candidate_calls"]) for r in top[0]["DRAFT_DECODE"]]
    assert decode == [("aten::matmul", 18.0, 18.0), ("aten::mm", 14.0, 14.0), ("aten::max", 2.0, 2.0),
                      ("aten::softmax", 2.0, None), ("aten::_softmax", 2.0, None), ("aten::cat", 9.0, 9.0),
                      ("aten::div_", 12.0, 12.0), ("aten::mean", 6.0, 6.0), ("aten::reshape", 26.0, 26.0),
                      ("aten::to", 22.0, 22.0)]
    assert {v: len(bars) for v, bars in timeline[0].items()} == {"baseline": 1206, "candidate": 1214}
    assert [sum(b["matched"] for b in timeline[0][v]) for v in ("baseline", "candidate")] == [4, 0]
    assert (_digest(top), _digest(timeline)) == ("07ebc27eb92c4bca", "f4b40fb087f4b465")


def test_the_gpu_run_reanalysed_draws_what_it_drew_from_its_traces(reanalysed):
    region_time, top, timeline, notes = _drawn(reanalysed["gpu"])
    assert notes == []
    assert region_time == ({
        "baseline": {"DRAFT_DECODE": 541.7240952380953, "TARGET_VERIFY": 230.9482857142857,
                     "DRAFT_EXTEND": 337.3063333333333, "PREFILL": 65.19742857142857},
        "candidate": {"DRAFT_DECODE": 471.9350476190476, "TARGET_VERIFY": 230.49114285714288,
                      "DRAFT_EXTEND": 268.5613333333334, "PREFILL": 63.950904761904766},
    }, "GPU kernel µs")
    assert {v: len(bars) for v, bars in timeline[0].items()} == {"baseline": 439, "candidate": 439}
    assert (_digest(top), _digest(timeline)) == ("8d19ad4aad304562", "d324ecc5cca8e4bf")


def test_the_views_are_bounded_and_store_each_name_once(reanalysed):
    for run in reanalysed.values():
        for analysis in load_run_dir(run).analysis.values():
            views = analysis.views
            assert views is not None and len(set(views.names)) == len(views.names)
            bars = views.timeline_bars()
            regions = [bar for bar in bars if bar.lane == "regions"]
            assert 0 < len(regions) <= MAX_TIMELINE_UNITS and len(bars) - len(regions) <= MAX_TIMELINE_OPS
            patterns = [re.compile(regex) for regex in analysis.patterns.values()]
            for region in set(views.top_ops.region):
                others = [o for o in views.top_op_rows()
                          if o.region == region and not any(p.search(o.name) for p in patterns)]
                assert len(others) <= TOP_OPS


def test_a_trace_that_no_longer_reads_is_a_failed_analysis(extracted, tmp_path, capsys):
    run = Path(shutil.copytree(extracted["v010"], tmp_path / "run"))
    trace = next((run / "trials" / "01-baseline-profiled" / "profile").glob("*.trace.json.gz"))
    trace.write_bytes(b"\x1f\x8bnot gzip")
    capsys.readouterr()
    assert harness_main(["analyze", "--run-dir", str(run)]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{run}/analysis.json: 1 profiled trial(s) analysed"
    assert out[1].startswith("  01-baseline-profiled: analysis failed: ")
    written = json.loads((run / "analysis.json").read_text())
    assert list(written["trials"]) == ["00-candidate-profiled"] and list(written["errors"]) == ["01-baseline-profiled"]
    assert "The trace analysis of 01-baseline-profiled failed" in build_report(run).html.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run-dir", "RUN", "trace.json"], "--run-dir: not with TRACE (the run's scenario.yaml says what to count)"),
        (["--run-dir", "RUN", "--count", "x=y", "--json"],
         "--run-dir: not with --count, --json (the run's scenario.yaml says what to count)"),
        ([], "TRACE: none given (give trace files, or --run-dir RUN)"),
        (["--run-dir", "NOWHERE"], "NOWHERE: not a run directory (no such directory)"),
    ],
)
def test_analyze_run_dir_bad_input_is_one_line(extracted, tmp_path, capsys, args, message):
    run = Path(shutil.copytree(extracted["v010"], tmp_path / "run"))
    before = (run / "analysis.json").read_bytes()
    args = [str(run) if a == "RUN" else str(tmp_path / a) if a == "NOWHERE" else a for a in args]
    assert harness_main(["analyze", *args]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"harness analyze: {message.replace('NOWHERE', str(tmp_path / 'NOWHERE'))}"]
    assert (run / "analysis.json").read_bytes() == before


def test_astronomical_views_draw_or_note(reanalysed, tmp_path):
    """Views are read as hostile data too: numbers a figure cannot scale to become a note, and
    a trial without a complete cycle or a target verify says so."""
    run = Path(shutil.copytree(reanalysed["v010"], tmp_path / "run"))
    analysis = json.loads((run / "analysis.json").read_text())
    baseline, candidate = (analysis["trials"][name]["views"] for name in ("01-baseline-profiled", "00-candidate-profiled"))
    baseline["region_time_us"]["DRAFT_DECODE"] = 1.7976931348623157e308
    baseline["timeline"]["start_us"][0] = 1e308
    candidate.update(cycles=0)
    candidate["timeline"] = {column: [] for column in candidate["timeline"]}
    (run / "analysis.json").write_text(json.dumps(analysis))
    assert harness_main(["report", str(run)]) == 0
    region_time, _top, timeline, notes = _drawn(run)
    assert region_time == ({}, "CPU µs") and timeline == [{}, "CPU ops"]
    assert notes == [
        "01-baseline-profiled: a time per region in analysis.json is past what a figure can show: not drawn.",
        "00-candidate-profiled: no TARGET_VERIFY in the trace, so no per-cycle times.",
        "01-baseline-profiled: a time of the cycle in analysis.json is past what a figure can show: not drawn.",
        "00-candidate-profiled: no complete decoding cycle found in the trace for the timeline.",
    ]
    page = (run / "index.html").read_text()
    assert all(note in page for note in notes)
