"""The one reader of run directories (sglang_spec_harness.rundir.load_run_dir), strict and lenient, its
size cap and its idea of a valid number, and the migrations that keep older run directories readable:
tested on run directories written by the previous release (0.1.0, tests/fixtures/README.md)."""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history.extract import read_run
from sglang_spec_harness.rundir import SCHEMA_VERSION, load_run_dir, read, valid_number
from sglang_spec_harness.rundir.migrations import migrate, version_of

FIXTURES = Path(__file__).parent / "fixtures"
PATCH = "sglang_spec_harness.patches.sglang_restore_topk1_softmax"
# The two runs 0.1.0 wrote (tests/fixtures/README.md), and what they hold.
V010 = {
    "restart": {
        "archive": "run_v010_micro_topk1_restart.tar.gz", "dir": "20261204-175726-micro_topk1",
        "mode": "restart", "aa": False, "trials": 6, "launches": 0, "looks": None, "samples": 12,
        "verdict": "INCONCLUSIVE", "exit": 3,
        "rules": {"candidate_no_softmax_draft_decode": "PASS", "candidate_no_softmax_draft_extend": "PASS",
                  "baseline_has_softmax_draft_decode": "PASS", "accept_length_unchanged": "PASS",
                  "greedy_outputs_identical": "PASS", "tpot_improved": "INCONCLUSIVE",
                  "gain_explained_by_softmax": "INCONCLUSIVE"},
    },
    "aa_adaptive": {
        "archive": "run_v010_micro_topk1_aa_adaptive.tar.gz", "dir": "20261204-180040-micro_topk1",
        "mode": "interleaved", "aa": True, "trials": 14, "launches": 4, "looks": 3, "samples": 36,
        "verdict": "PASS", "exit": 0,
        "rules": {"aa_noise_floor": "PASS", "accept_length_unchanged": "PASS", "greedy_outputs_identical": "PASS"},
    },
}


def _extract(name: str, into: Path) -> Path:
    with tarfile.open(FIXTURES / V010[name]["archive"]) as archive:
        archive.extractall(into, filter="data")
    return into / V010[name]["dir"]


@pytest.fixture(params=sorted(V010))
def v010_run(request, tmp_path) -> tuple[dict, Path]:
    return V010[request.param], _extract(request.param, tmp_path)


# ---- runs written by 0.1.0 ------------------------------------------------------------------------


def test_a_v010_run_loads_migrated_and_whole(v010_run):
    facts, run_dir = v010_run
    on_disk = json.loads((run_dir / "run.json").read_text())
    stored = (run_dir / "scenario.yaml").read_text()
    assert on_disk["schema_version"] == 1 and "harness.patches" in stored and "\nchecks:\n" in stored
    rd = load_run_dir(run_dir)
    assert rd.damaged == {} and rd.run.schema_version == SCHEMA_VERSION == 3
    assert (rd.mode, rd.aa, rd.complete, len(rd.trials), len(rd.launches)) == (
        facts["mode"], facts["aa"], True, facts["trials"], facts["launches"])
    assert len(rd.run.looks) == facts["looks"] if facts["looks"] else rd.run.looks is None
    assert rd.scenario.variants["baseline"].patches == [PATCH] and rd.scenario.variants["candidate"].patches == []
    assert rd.scenario_data["variants"]["baseline"]["patches"] == [PATCH]
    assert "checks" not in rd.scenario_data and [r["name"] for r in rd.scenario_data["rules"]] == [
        r.name for r in rd.scenario.rules] != []
    assert sorted(rd.analysis) == ["00-candidate-profiled", "01-baseline-profiled"]
    assert rd.environment is not None and rd.environment.harness["version"] == "0.1.0"
    assert rd.results is not None and rd.results.schema_version == SCHEMA_VERSION
    assert {r.name: str(r.verdict) for r in rd.results.rules} == facts["rules"]
    assert json.loads((run_dir / "run.json").read_text()) == on_disk  # migrated in memory only


def test_history_report_and_check_open_a_v010_run(v010_run, tmp_path, capsys):
    facts, run_dir = v010_run
    database = tmp_path / "history.sqlite"
    assert main(["history", "ingest", str(run_dir), "--db", str(database)]) == 0
    with sqlite3.connect(database) as conn:
        row = conn.execute("select status, verdict, mode, aa, harness_version, scenario_json from runs").fetchone()
        (samples,) = conn.execute("select count(*) from samples").fetchone()
        rules = dict(conn.execute("select name, verdict from rules").fetchall())
    assert row[:5] == ("complete", facts["verdict"], facts["mode"], facts["aa"], "0.1.0")
    assert json.loads(row[5])["variants"]["baseline"]["patches"] == [PATCH]
    assert (samples, rules) == (facts["samples"], facts["rules"])

    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "index.html").read_text()
    assert facts["verdict"] in page and PATCH in page and "could not be read" not in page

    stored = json.loads((run_dir / "results.json").read_text())
    assert main(["check", str(run_dir)]) == facts["exit"]
    results = json.loads((run_dir / "results.json").read_text())
    assert (stored["schema_version"], results["schema_version"]) == (1, SCHEMA_VERSION)
    assert {r["name"]: r["verdict"] for r in results["rules"] if not r["name"].startswith("run_")} == facts["rules"]
    assert results["verdict"] == stored["verdict"] == facts["verdict"]


def test_a_run_from_before_the_warm_modes_reads_as_restart(tmp_path):
    run_dir = _extract("restart", tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    del run["mode"]
    (run_dir / "run.json").write_text(json.dumps(run))
    assert load_run_dir(run_dir).mode == "restart"
    row = read_run(run_dir)
    assert (row.status, row.mode, row.run_json["mode"]) == ("complete", "restart", "restart")


# ---- migrations -------------------------------------------------------------------------------------


def test_the_migration_to_2_renames_patch_modules_and_fills_the_mode():
    # version 1 covers 0.1.0 (`harness.*`) and the renamed package before version 2 (already current names)
    scenario = {"variants": {"baseline": {"patches": ["harness.patches.x", "mine.patch", "harness", 3]},
                             "candidate": {"patches": ["harness.sglang_cpu.shims", "sglang_spec_harness.patches.y"]},
                             "other": None}}
    assert migrate("scenario.yaml", scenario, 1) == {
        "variants": {"baseline": {"patches": ["sglang_spec_harness.patches.x", "mine.patch", "harness", 3]},
                     "candidate": {"patches": ["sglang_spec_harness.sglang_cpu.shims", "sglang_spec_harness.patches.y"]},
                     "other": None}}
    assert scenario["variants"]["baseline"]["patches"][0] == "harness.patches.x"  # the caller's data is left alone
    assert migrate("run.json", {"schema_version": 1, "plan": []}, 1) == {
        "schema_version": SCHEMA_VERSION, "plan": [], "mode": "restart"}
    assert migrate("run.json", {"schema_version": 1, "mode": "sequential"}, 1)["mode"] == "sequential"
    current = {"schema_version": SCHEMA_VERSION, "plan": []}
    assert migrate("run.json", current, SCHEMA_VERSION) is current


def test_the_migration_to_3_names_the_scenarios_rules_rules():
    scenario = {"name": "s", "checks": [{"name": "c", "kind": "tpot_gain"}], "patterns": {}}
    assert migrate("scenario.yaml", scenario, 2) == {"name": "s", "rules": [{"name": "c", "kind": "tpot_gain"}],
                                                     "patterns": {}}
    assert "checks" in scenario  # the caller's data is left alone
    # only the stored scenario changes (results.json keeps its `rules`, run.json has no such key)
    assert migrate("results.json", {"schema_version": 2, "rules": []}, 2) == {"schema_version": 3, "rules": []}


def test_a_run_stored_at_version_2_reads_its_checks_as_rules(tmp_path):
    run_dir = _extract("restart", tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**run, "schema_version": 2, "mode": "restart"}))
    rd = load_run_dir(run_dir)
    assert [r.name for r in rd.scenario.rules] == list(V010["restart"]["rules"])
    assert "checks" not in rd.scenario_data and len(rd.scenario_data["rules"]) == len(V010["restart"]["rules"])


@pytest.mark.parametrize("version", [4, 0, "2", True, None, 1.0])
def test_a_version_this_harness_cannot_read_is_one_line(version):
    with pytest.raises(HarnessInputError) as error:
        version_of(Path("r/run.json"), {"schema_version": version})
    assert str(error.value) == (f"r/run.json: schema_version {json.dumps(version)}, this harness reads 1 to 3: "
                                "written by another version of the harness")
    assert version_of(Path("r/trial.json"), {}) == SCHEMA_VERSION  # a record without a version: the current one


# ---- strict and lenient -------------------------------------------------------------------------------


def test_strict_refuses_damage_lenient_notes_it_and_reads_the_rest(tmp_path):
    run_dir = _extract("restart", tmp_path)
    trial = run_dir / "trials" / "02-candidate-timed" / "trial.json"
    trial.write_text(trial.read_text()[:100])
    (run_dir / "environment.json").write_text('{"gpus": 2}')
    with pytest.raises(HarnessInputError) as error:
        load_run_dir(run_dir)
    assert str(error.value).startswith(f"{trial}:") and "not valid JSON" in str(error.value)
    rd = load_run_dir(run_dir, strict=False)
    assert rd.damaged == {
        "trials/02-candidate-timed/trial.json": rd.damaged["trials/02-candidate-timed/trial.json"],
        "environment.json": "environment.json: gpus: Input should be a valid list",
    }
    assert rd.damaged["trials/02-candidate-timed/trial.json"].startswith("trials/02-candidate-timed/trial.json:")
    assert rd.problem("environment.json") == "gpus: Input should be a valid list"
    assert rd.environment is None and [t.name for t in rd.trials] == [
        "00-candidate-profiled", "01-baseline-profiled", "03-baseline-timed", "04-candidate-timed", "05-baseline-timed"]
    assert rd.results is not None and len(rd.analysis) == 2 and rd.scenario.name == "micro_topk1"
    assert read_run(run_dir).reason == "environment.json: gpus: Input should be a valid list"


def test_a_missing_run_record_is_an_error_or_a_note(tmp_path):
    run_dir = _extract("restart", tmp_path)
    (run_dir / "run.json").unlink()
    with pytest.raises(HarnessInputError, match=r"run.json: no such file$"):
        load_run_dir(run_dir)
    rd = load_run_dir(run_dir, strict=False)
    assert rd.damaged == {"run.json": "run.json: missing"} and rd.run.plan == [] and len(rd.trials) == 6
    with pytest.raises(HarnessInputError, match="not a run directory"):
        load_run_dir(run_dir / "trials", strict=False)


def test_one_size_cap_for_every_run_file(tmp_path, monkeypatch):
    run_dir = _extract("restart", tmp_path)
    monkeypatch.setattr(read, "MAX_FILE_BYTES", 20_000)
    analysis = run_dir / "analysis.json"
    with pytest.raises(HarnessInputError) as error:
        load_run_dir(run_dir)
    assert str(error.value) == f"{analysis}: larger than 20000 bytes: not a record the harness writes"
    rd = load_run_dir(run_dir, strict=False)
    assert list(rd.damaged) == ["analysis.json"] and rd.analysis == {}
    requests = run_dir / "trials" / "02-candidate-timed" / "requests.jsonl"
    requests.write_text(requests.read_text() * (20_000 // requests.stat().st_size + 1))
    with pytest.raises(HarnessInputError, match="requests.jsonl: larger than 20000 bytes"):
        rd.trial("02-candidate-timed").requests  # noqa: B018


@pytest.mark.parametrize(("value", "problem"), [
    ("1e999", "not valid JSON (1e999 is out of range for a number)"),
    ("NaN", "not valid JSON (NaN is not a number JSON allows)"),
    ("2e12", "summary.median_tpot_ms: Input should be less than or equal to 1000000000000"),
    ("-1.5", "summary.median_tpot_ms: Input should be greater than 0"),
])
def test_one_idea_of_a_valid_number(tmp_path, value, problem):
    run_dir = _extract("restart", tmp_path)
    trial = run_dir / "trials" / "03-baseline-timed" / "trial.json"
    info = json.loads(trial.read_text())
    text = json.dumps(info).replace(f'"median_tpot_ms": {json.dumps(info["summary"]["median_tpot_ms"])}',
                                    f'"median_tpot_ms": {value}')
    trial.write_text(text)
    with pytest.raises(HarnessInputError) as error:
        load_run_dir(run_dir)
    assert str(error.value).removeprefix(f"{trial}:").lstrip("0123456789: ") == problem
    assert load_run_dir(run_dir, strict=False).problem("trials/03-baseline-timed/trial.json") == problem
    assert read_run(run_dir).status == "damaged"
    assert main(["report", str(run_dir)]) == 0
    assert "03-baseline-timed/trial.json could not be read" in (run_dir / "index.html").read_text()


def test_valid_number_is_finite_and_bounded():
    assert [valid_number(v) for v in (3, 2.5, -4.0, 1e12, -1e12)] == [3.0, 2.5, -4.0, 1e12, -1e12]
    assert [valid_number(v) for v in (1.000001e12, float("nan"), float("inf"), 2**1100, True, "3", None)] == [None] * 7
