"""Hostile and broken input through the real command line: one clear line and exit 2, or a
verdict that is not PASS on damaged evidence; never a traceback (see tests/support/hostile.py for the
classes). A few seeded Hypothesis examples per class run here; benchmarks/fuzz_inputs.py runs
thousands and measures time and memory. Then the named cases that matter most, one by one."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import hostile
from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, HarnessInputError
from sglang_spec_harness.rundir import SCHEMA_VERSION

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def _judge(case: hostile.Case) -> None:
    for step, _outcome, found in hostile.run_case(case, hostile.run_in_process):
        assert not found, f"{case.kind} {case.label}: harness {' '.join(step.argv)}: {found}"


@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_fuzzed_scenarios(data):
    with tempfile.TemporaryDirectory() as tmp:
        _judge(data.draw(hostile.scenario_case(Path(tmp))))


@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_fuzzed_kineto_traces(data, monkeypatch_module):
    with tempfile.TemporaryDirectory() as tmp:
        _judge(data.draw(hostile.kineto_case(Path(tmp), bomb_bytes=(4 << 20, 24 << 20))))


@settings(max_examples=10, **SETTINGS)
@given(data=st.data())
def test_fuzzed_nsys_exports(data):
    with tempfile.TemporaryDirectory() as tmp:
        _judge(data.draw(hostile.nsys_case(Path(tmp))))


@pytest.mark.slow
@settings(max_examples=10, **SETTINGS)
@given(data=st.data())
def test_fuzzed_run_directories(data, base_runs):
    with tempfile.TemporaryDirectory() as tmp:
        _judge(data.draw(hostile.rundir_case(Path(tmp), base_runs)))


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A small trace-size limit, so that the fuzzed gzip bombs are refused quickly here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_MAX_TRACE_BYTES", str(16 << 20))
        yield mp


@pytest.fixture(scope="module")
def base_runs(tmp_path_factory) -> list[Path]:
    return hostile.build_base_runs(tmp_path_factory.mktemp("bases"))


def _one_line(capsys, code: int, *needles: str) -> str:
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT, captured
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    for needle in needles:
        assert needle in captured.err, captured.err
    return captured.err


# ---- scenario files, by name ------------------------------------------------------------------------


def test_a_billion_laughs_is_refused_at_once(tmp_path, capsys):
    path = tmp_path / "lol.yaml"
    doc = yaml.safe_dump(hostile.MICRO_SCENARIO, sort_keys=False)
    path.write_text(hostile._laughs(9, 10) + doc.replace("description: micro", "description: *lol9"))
    _one_line(capsys, main(["validate", str(path)]), "lol.yaml:", "description: Input should be a valid string")


def test_nesting_huge_files_and_duplicate_keys(tmp_path, capsys):
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\ndeep: " + "[" * 100000 + "]" * 100000 + "\n")
    _one_line(capsys, main(["validate", str(deep)]), "deep.yaml:", "nest")
    huge = tmp_path / "huge.yaml"
    huge.write_text("description: " + "x" * (2 << 20) + "\n")
    _one_line(capsys, main(["validate", str(huge)]), "huge.yaml: larger than 1048576 bytes")
    twice = tmp_path / "twice.yaml"
    text = yaml.safe_dump(hostile.MICRO_SCENARIO, sort_keys=False)
    twice.write_text(text + "rules: []\n")
    _one_line(capsys, main(["validate", str(twice)]), "duplicate key 'rules' (first at line")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_scenarios_with_a_byte_order_mark_read(tmp_path, encoding):
    path = tmp_path / "s.yaml"
    path.write_bytes(yaml.safe_dump(hostile.MICRO_SCENARIO, allow_unicode=True).encode(encoding))
    assert main(["validate", str(path)]) == 0


def test_text_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "latin.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    _one_line(capsys, main(["validate", str(path)]), "latin.yaml: not UTF-8 text (byte 9")


def test_a_control_character_in_a_message_stays_one_line(tmp_path, capsys):
    path = tmp_path / "ctl.yaml"
    path.write_text('name: x\nengine: micro\nvariants: {baseline: {}, candidate: {}}\n"bad\\nkey\\u001b[2J": 1\n')
    err = _one_line(capsys, main(["validate", str(path)]), "bad\\nkey\\x1b[2J: unknown key")
    assert "\x1b" not in err


# ---- traces, by name ----------------------------------------------------------------------------------


def test_a_gzip_bomb_is_refused_within_its_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_MAX_TRACE_BYTES", str(8 << 20))
    bomb = tmp_path / "bomb.json.gz"
    hostile.gzip_bomb(bomb, 64 << 20)
    assert bomb.stat().st_size < 200_000
    _one_line(capsys, main(["analyze", str(bomb)]), "bomb.json.gz: decompresses to more than 8388608 bytes")


def test_the_ratio_limit_applies_without_a_size_limit(tmp_path, monkeypatch):
    import sglang_spec_harness.traces.readers as readers

    monkeypatch.setattr(readers, "RATIO_FLOOR_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.json.gz"
    hostile.gzip_bomb(bomb, 32 << 20)  # ~1000x
    with pytest.raises(HarnessInputError, match="a trace compresses at most ~200x"):
        readers.read_trace(bomb)


def test_a_lying_gzip_trailer_allocates_nothing_big(tmp_path, capsys):
    trace = tmp_path / "liar.json.gz"
    data = gzip.compress(json.dumps({"traceEvents": [{"cat": "cpu_op", "name": "x", "ts": 1, "dur": 1}]}).encode())
    trace.write_bytes(data[:-4] + (2**32 - 1).to_bytes(4, "little"))
    _one_line(capsys, main(["analyze", str(trace)]), "liar.json.gz: not a valid gzip file")


def test_a_truncated_gzip_header_is_one_line(tmp_path, capsys):
    trace = tmp_path / "tiny.json.gz"
    trace.write_bytes(b"\x1f\x8b\x08")
    _one_line(capsys, main(["analyze", str(trace)]), "tiny.json.gz: truncated gzip file")


def test_deeply_nested_trace_json_is_one_line(tmp_path, capsys):
    trace = tmp_path / "deep.json"
    trace.write_text('{"traceEvents": [' + "[" * 200000 + "]" * 200000 + "]}")
    _one_line(capsys, main(["analyze", str(trace)]), "deep.json: not a trace: JSON nested too deeply")


def test_kernel_names_with_markup_print_as_text(tmp_path, capsys):
    from support.kineto_traces import cuda_trace

    doc = cuda_trace()
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = "[/]softmax_warp_forward[bold]\x1b[31m"
    trace = tmp_path / "markup[bold].json"
    trace.write_text(json.dumps(doc))
    assert main(["analyze", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "[/]softmax_warp_forward[bold]" in out and "\x1b[31m" not in out


# ---- run directories, by name -------------------------------------------------------------------------


@pytest.fixture()
def run_copy(base_runs, tmp_path) -> Path:
    target = tmp_path / "runs" / base_runs[0].name
    shutil.copytree(base_runs[0], target)
    return target


def test_a_deleted_trial_is_inconclusive_not_pass(run_copy, capsys):
    shutil.rmtree(run_copy / "trials" / "04-baseline-timed")
    assert main(["check", str(run_copy)]) == EXIT_INCONCLUSIVE
    results = json.loads((run_copy / "results.json").read_text())
    intact = next(r for r in results["rules"] if r["name"] == "run_intact")
    assert intact["reason"] == "planned trial trials/04-baseline-timed has no trial.json"


def test_requests_cut_at_a_line_are_inconclusive(run_copy):
    requests = run_copy / "trials" / "02-candidate-timed" / "requests.jsonl"
    requests.write_text("".join(requests.read_text().splitlines(keepends=True)[:-1]))
    assert main(["check", str(run_copy)]) == EXIT_INCONCLUSIVE
    results = json.loads((run_copy / "results.json").read_text())
    assert "02-candidate-timed: requests.jsonl holds 2 measured request(s), trial.json counts 3" in json.dumps(results)


def test_a_stored_scenario_cut_short_is_one_line(run_copy, capsys):
    scenario = run_copy / "scenario.yaml"
    lines = scenario.read_text().splitlines(keepends=True)
    scenario.write_text("".join(lines[:-4]))  # still valid YAML: only the last rule is gone
    _one_line(capsys, main(["check", str(run_copy)]), "scenario.yaml: cut short", "--scenario FILE")


@pytest.mark.slow
@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1", None])
def test_an_unknown_schema_version_is_one_line(run_copy, capsys, version):
    """Older versions are migrated (tests/test_rundir_migrations.py); a newer one, or one that is no
    version, is refused by the check and a note in the report."""
    for name in ("run.json", "analysis.json"):
        path = run_copy / name
        original = path.read_text()
        doc = json.loads(original)
        doc["schema_version"] = version
        path.write_text(json.dumps(doc))
        said = f"schema_version {json.dumps(version)}, this harness reads 1 to {SCHEMA_VERSION}"
        _one_line(capsys, main(["check", str(run_copy)]), f"{name}: {said}")
        assert main(["report", str(run_copy)]) == 0  # the report shows what it can, with a note
        page = (run_copy / "index.html").read_text()
        assert f"{name} could not be read (schema_version " in page and f"reads 1 to {SCHEMA_VERSION}: written" in page
        path.write_text(original)


def test_a_nan_tpot_is_bad_input_not_a_verdict(run_copy, capsys):
    trial = run_copy / "trials" / "01-baseline-timed" / "trial.json"
    trial.write_text(trial.read_text().replace('"median_tpot_ms": 10.0', '"median_tpot_ms": NaN'))
    _one_line(capsys, main(["check", str(run_copy)]), "01-baseline-timed/trial.json: not valid JSON (NaN is not a number JSON allows)")


def test_a_wrongly_typed_summary_is_one_line(run_copy, capsys):
    trial = run_copy / "trials" / "01-baseline-timed" / "trial.json"
    info = json.loads(trial.read_text())
    info["summary"]["median_tpot_ms"] = "fast"
    trial.write_text(json.dumps(info))
    _one_line(capsys, main(["check", str(run_copy)]), "trial.json: summary.median_tpot_ms: Input should be a valid number")


def test_an_astronomical_number_is_one_line_not_an_overflow(run_copy, capsys):
    """Found by benchmarks/fuzz_inputs.py: an accept length of 1.8e308 overflowed the statistics."""
    trial = run_copy / "trials" / "01-baseline-timed" / "trial.json"
    info = json.loads(trial.read_text())
    info["summary"]["accept_length"] = 1.7976931348623157e308
    trial.write_text(json.dumps(info))
    _one_line(capsys, main(["check", str(run_copy)]), "summary.accept_length: Input should be less than or equal to")
    info["summary"]["accept_length"] = 2.5
    trial.write_text(json.dumps(info))
    analysis = run_copy / "analysis.json"
    analysis.write_text(analysis.read_text().replace('"time_us": 400.0', '"time_us": 1e999', 1))
    _one_line(capsys, main(["check", str(run_copy)]), "analysis.json: not valid JSON (1e999 is out of range for a number)")


def test_an_engine_error_names_the_scenario_file(tmp_path, capsys):
    """Found by benchmarks/fuzz_inputs.py: engine checks said `scenario NAME:`, not the file."""
    path = tmp_path / "no_model.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "engine": "sglang", "variants": {"baseline": {}, "candidate": {}}}))
    _one_line(capsys, main(["run", str(path), "--dry-run"]), f"harness run: {path}: server.model_path: required")


def test_the_report_of_astronomical_numbers_draws_or_notes(base_runs, tmp_path):
    """Found by benchmarks/fuzz_inputs.py: an accept length of 1.8e308 made matplotlib's axis infinite."""
    run = tmp_path / "runs" / base_runs[1].name
    shutil.copytree(base_runs[1], run)
    for trial_json in sorted(run.glob("trials/*-timed/trial.json"))[:2]:
        info = json.loads(trial_json.read_text())
        info["summary"].update(accept_length=1.7976931348623157e308, median_tpot_ms=-1e300)
        trial_json.write_text(json.dumps(info))
    results = json.loads((run / "results.json").read_text())
    for rule in results["rules"]:
        rule["numbers"] = {"ratio": 1e308, "ci_low": -1e308, "ci_high": 2**1100, "baseline_ms": [1e308], "candidate_ms": [0]}
    (run / "results.json").write_text(json.dumps(results))
    assert main(["report", str(run)]) == 0
    page = (run / "index.html").read_text()
    assert page.count("<svg") >= 3  # the figures that still have sane numbers are drawn
