"""`harness history`: the results database (SQLite, and a real PostgreSQL server on loopback), the
run extraction (a real micro run; damaged and incomplete copies), idempotent and concurrent ingest,
change points (E-divisive means + permutation test, the zero rule) and the gate's exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
import yaml

from sglang_spec_harness.history import db
from sglang_spec_harness.history.changepoints import Options, change_points, e_divisive, zero_changes
from sglang_spec_harness.history.extract import read_run
from sglang_spec_harness.history.ingest import find_run_dirs, ingest
from support.history_helpers import series_run

REPO = Path(__file__).resolve().parents[1]
FAST = Options(permutations=199)  # p >= 0.005: enough for the planted shifts below, and quick

TINY = {
    "name": "tiny_history",
    "engine": "micro",
    "server": {"args": {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--vocab-size": 512,
                        "--hidden-size": 32, "--device": "cpu", "--num-threads": 1},
               "startup_timeout_s": 60, "request_timeout_s": 60},
    "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {}},
    "workload": {"num_requests": 4, "input_len": 16, "output_len": 16, "concurrency": 2, "warmup_requests": 1},
    "trials": {"repetitions": 2, "profiled": 1},
    "profile": {"num_steps": 6, "activities": ["CPU"]},
    "rules": [
        {"name": "candidate_no_softmax", "kind": "kernel_count", "region": "DRAFT_DECODE", "pattern": "softmax",
         "variants": ["candidate"], "equals": 0},
        {"name": "accept", "kind": "accept_length", "rel_tolerance": 0.01},
    ],
}


def harness(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """One real `harness run` of the micro engine (a few seconds per trial)."""
    root = tmp_path_factory.mktemp("history_real")
    scenario = root / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY, sort_keys=False))
    done = harness("run", str(scenario), "--out", str(root / "runs"), "--no-progress")
    assert done.returncode in (0, 1, 3), done.stdout[-2000:] + done.stderr[-2000:]
    return (root / "latest").resolve()


@pytest.fixture(scope="module")
def planted_series(tmp_path_factory) -> Path:
    """12 nightly runs: the candidate's TPOT +30% from run 7 on; an A/A series of 12 beside it."""
    root = tmp_path_factory.mktemp("history_series")
    for i in range(1, 13):
        series_run(root, i, base_tpot=20.0, cand_tpot=15.0 if i < 7 else 19.5)
        series_run(root, i, base_tpot=20.0, cand_tpot=20.0, aa=True, seed=1)
    return root / "runs"


# ---- change points --------------------------------------------------------------------------------


def test_a_planted_shift_is_found_at_its_run_with_its_size():
    rng = np.random.default_rng(3)
    values = list(15 * (1 + 0.03 * rng.standard_normal(6))) + list(19.5 * (1 + 0.03 * rng.standard_normal(6)))
    (cp,) = change_points(values, FAST)
    assert cp.index == 6 and cp.kind == "e-divisive"
    assert cp.p_value is not None and cp.p_value <= FAST.max_pvalue
    assert cp.before == pytest.approx(np.mean(values[:6])) and cp.after == pytest.approx(np.mean(values[6:]))
    assert 0.25 < cp.magnitude < 0.35


def test_two_shifts_in_one_series_are_both_found():
    rng = np.random.default_rng(4)
    levels = [10.0] * 8 + [13.0] * 8 + [10.5] * 8
    values = [v * (1 + 0.02 * rng.standard_normal()) for v in levels]
    assert [cp.index for cp in change_points(values, FAST)] == [8, 16]


def test_noise_alone_has_no_change_point():
    rng = np.random.default_rng(5)
    for trial in range(20):
        values = list(20 * (1 + 0.05 * rng.standard_normal(14)))
        assert change_points(values, Options(permutations=199, seed=trial)) == [], values


def test_a_significant_but_tiny_shift_is_dropped_by_min_magnitude():
    values = [10.0, 10.01] * 3 + [10.2, 10.21] * 3  # +2%, very clean
    assert [i for i, _ in e_divisive(values, FAST)] == [6]
    assert change_points(values, FAST) == []
    assert [cp.index for cp in change_points(values, Options(permutations=199, min_magnitude=0.01))] == [6]


def test_a_kernel_count_leaving_zero_is_a_change_by_itself():
    values = [0, 0, 0, 0, 0, 0, 0, 2]  # the last run only: too short for any test
    assert e_divisive(values, FAST) == []
    (cp,) = change_points(values, FAST, counts=True)
    assert (cp.index, cp.kind, cp.p_value, cp.before, cp.after, cp.magnitude) == (7, "zero", None, 0.0, 2.0, None)
    assert zero_changes([3, 3, 0, 0, 1]) == [2, 4]
    assert change_points([4.0] * 10, FAST, counts=True) == []


def test_change_points_are_reproducible():
    rng = np.random.default_rng(6)
    values = list(rng.normal(10, 1, 10)) + list(rng.normal(11.5, 1, 10))
    assert change_points(values, FAST) == change_points(values, FAST)


# ---- one real run -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_run_is_extracted_whole(real_run):
    results = json.loads((real_run / "results.json").read_text())
    record = read_run(real_run)
    assert (record.status, record.reason, record.scenario, record.aa) == ("complete", None, "tiny_history", False)
    assert record.mode == (json.loads((real_run / "run.json").read_text()).get("mode") or "restart")
    assert record.verdict == results["verdict"] and record.report == str(real_run / "index.html")
    env = json.loads((real_run / "environment.json").read_text())
    assert record.harness_commit == env["harness"]["git_commit"] and env["cpu"] in record.hardware
    for variant, facts in results["variants"].items():
        tpot = [s["value"] for s in record.samples if s["variant"] == variant and s["metric"] == "tpot_ms"]
        assert tpot == facts["median_tpot_ms"] and len(tpot) == 2
        accept = [s["value"] for s in record.samples if s["variant"] == variant and s["metric"] == "accept_length"]
        assert accept == facts["accept_length"]
        throughput = [s for s in record.samples if s["variant"] == variant and s["metric"] == "throughput_tok_s"]
        assert [s["trial"] for s in throughput] == facts["timed_trials"]
    assert [r["name"] for r in record.rules] == [r["name"] for r in results["rules"]]
    counts = {(c["variant"], c["region"]): c for c in record.kernel_counts if c["pattern"] == "softmax"}
    assert counts[("baseline", "DRAFT_DECODE")]["per_replay_max"] >= 1
    assert counts[("candidate", "DRAFT_DECODE")]["total"] == 0
    assert {v["variant"]: v["config"] for v in record.variants} == {
        "baseline": {**yaml.safe_load((real_run / "scenario.yaml").read_text())["variants"]["baseline"]},
        "candidate": {**yaml.safe_load((real_run / "scenario.yaml").read_text())["variants"]["candidate"]},
    }


def test_ingest_is_idempotent_and_damaged_runs_are_recorded(real_run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(real_run, root / real_run.name)
    truncated = root / "20991231-000001-truncated"
    shutil.copytree(real_run, truncated)
    text = (truncated / "results.json").read_text()
    (truncated / "results.json").write_text(text[: len(text) // 2])
    no_trial = root / "20991231-000002-no-trial"
    shutil.copytree(real_run, no_trial)
    lost = sorted((no_trial / "trials").glob("*-timed"))[0]
    shutil.rmtree(lost)
    unfinished = root / "20991231-000003-unfinished"
    shutil.copytree(real_run, unfinished)
    run_json = json.loads((unfinished / "run.json").read_text())
    run_json.update(status="incomplete", error="trial 03-candidate-timed failed: server exited with code 1")
    (unfinished / "run.json").write_text(json.dumps(run_json))
    for copy in (truncated, no_trial, unfinished):  # other runs, not copies of the same one
        info = json.loads((copy / "run.json").read_text())
        info["started"] = "2099-12-31T00:00:0" + copy.name[-1] + "+00:00"
        (copy / "run.json").write_text(json.dumps(info))

    database = tmp_path / "history.sqlite"
    first = harness("history", "ingest", str(root), "--db", str(database))
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert "4 runs: 4 added, 0 updated, 0 unchanged; 1 complete, 1 incomplete, 2 damaged." in lines[-1]
    reasons = {line.split()[2].rstrip(":"): line for line in lines[:-1]}
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads(text[: len(text) // 2])
    assert f"results.json:{error.value.lineno}: not valid JSON" in reasons[truncated.name]
    assert f"trials/{lost.name}: missing (run.json's plan lists it)" in reasons[no_trial.name]
    assert "server exited with code 1" in reasons[unfinished.name]

    engine = db.open_database(database)
    counts = db.row_counts(engine)
    assert counts["runs"] == 4 and counts["samples"] > 0
    again = harness("history", "ingest", str(root), str(root / real_run.name), "--db", str(database))
    assert again.returncode == 0 and "0 added, 0 updated, 4 unchanged" in again.stdout
    assert db.row_counts(engine) == counts
    with engine.connect() as conn:
        stored = {r.name: r for r in conn.execute(sa.select(db.runs))}
        damaged_samples = conn.execute(sa.select(sa.func.count()).select_from(db.samples).where(
            db.samples.c.run_id.in_([stored[n].id for n in (truncated.name, no_trial.name, unfinished.name)]))).scalar()
    assert stored[real_run.name].status == "complete" and damaged_samples == 0
    assert stored[truncated.name].status == "damaged" and stored[unfinished.name].status == "incomplete"

    # Repaired and re-checked: the same run, now complete, replaces its damaged row.
    (truncated / "results.json").write_text(text)
    third = harness("history", "ingest", str(truncated), "--db", str(database))
    assert "0 added, 1 updated, 0 unchanged; 1 complete" in third.stdout
    assert db.row_counts(engine)["runs"] == 4


def test_newer_fields_are_tolerated_and_the_run_mode_is_kept(real_run, tmp_path):
    copy = tmp_path / real_run.name
    shutil.copytree(real_run, copy)
    run_json = json.loads((copy / "run.json").read_text())
    run_json.update(mode="interleaved", blocks_per_launch=4)
    (copy / "run.json").write_text(json.dumps(run_json))
    results = json.loads((copy / "results.json").read_text())
    results["variants"]["candidate"]["launches"] = [{"launch": 0, "blocks": 4}]
    results["new_section"] = {"anything": 1}
    (copy / "results.json").write_text(json.dumps(results))
    record = read_run(copy)
    assert record.status == "complete" and record.mode == "interleaved"
    original = read_run(real_run)
    assert record.key == original.key and record.fingerprint != original.fingerprint  # the same run, changed


def test_values_of_unexpected_types_in_a_runs_files_damage_it_with_one_line(real_run, tmp_path):
    """A hand-edited or foreign run's JSON can hold any type where an object or a list belongs:
    read_run never raises, and the run is damaged with the file and field named, as `harness check`
    names them (one reader, sglang_spec_harness.rundir.load_run_dir)."""
    timed = sorted((real_run / "trials").glob("*-timed"))[0]
    results = json.loads((real_run / "results.json").read_text())
    for case, (name, change, reason) in enumerate((
        ("environment.json", {"gpus": 2}, "environment.json: gpus: Input should be a valid list"),
        ("environment.json", {"harness": "0.1"}, "environment.json: harness: Input should be a valid dictionary"),
        (f"trials/{timed.name}/trial.json", {"summary": ["not", "an", "object"]},
         f"trials/{timed.name}/trial.json: summary: Input should be a valid dictionary or instance of TrialSummary"),
        ("results.json", {"rules": 5}, "results.json: rules: Input should be a valid list"),
        ("results.json", {"variants": {**results["variants"], "candidate": {"timed_trials": 3}}},
         "results.json: variants.candidate.timed_trials: expected a list"),
    )):
        copy = tmp_path / str(case) / real_run.name
        shutil.copytree(real_run, copy)
        (copy / name).write_text(json.dumps({**json.loads((copy / name).read_text()), **change}))
        record = read_run(copy)
        assert (record.status, record.reason) == ("damaged", reason)
        assert not record.samples and not record.rules and not record.kernel_counts


# ---- series, change points and the gate, through the command line ------------------------------


def _report(database: Path | str, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    done = harness("history", "report", "--db", str(database), "--out", str(tmp_path / "page"), "--json",
                   "--permutations", "199", *extra)
    assert done.returncode in (0, 1, 3), done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_the_planted_change_is_found_at_its_run_and_gates(planted_series, tmp_path):
    database = tmp_path / "history.sqlite"
    assert harness("history", "ingest", str(planted_series), "--db", str(database)).returncode == 0
    code, facts = _report(database, tmp_path)
    runs = sorted(p.name for p in planted_series.iterdir() if not p.name.endswith("-aa"))
    assert facts["runs"] == {"complete": 24, "incomplete": 0, "damaged": 0}
    by_series = {(c["aa"], c["variant"], c["metric"]): c for c in facts["change_points"]}
    assert set(by_series) == {(False, "candidate", "tpot_ms"), (False, "candidate/baseline", "tpot_ratio")}, \
        facts["change_points"]
    for key in by_series:
        cp = by_series[key]
        assert cp["run"] == runs[6] and cp["last_run_before"] == runs[5] and cp["index"] == 6
        # worse by TPOT's direction, but a timing change is a regression only once confirmed side by side
        assert (cp["way"], cp["reading"], cp["regression"]) == ("worse", "not confirmed", False)
        assert 0.2 < cp["magnitude"] < 0.4
        assert cp["p_value"] <= 0.01
        assert cp["sglang_commit_before"].startswith("06") and cp["sglang_commit_after"].startswith("07")
    assert by_series[(False, "candidate", "tpot_ms")]["before"] == pytest.approx(15, rel=0.03)
    assert by_series[(False, "candidate", "tpot_ms")]["after"] == pytest.approx(19.5, rel=0.03)
    assert {(s["aa"], s["variant"], s["metric"]) for s in facts["series"]} >= {
        (aa, v, m) for aa in (False, True) for v in ("baseline", "candidate")
        for m in ("tpot_ms", "accept_length", "kernels:DRAFT_DECODE:softmax")}
    assert all(len(s["runs"]) == 12 for s in facts["series"])
    # nightly points cannot run again here: the gate cannot pass, nor call it a regression (exit 3)
    assert code == 3 and facts["exit_code"] == 3 and facts["gate"]["verdict"] == "INCONCLUSIVE"
    assert facts["gate"]["failing"] == []
    assert {c["series"] for c in facts["gate"]["not_confirmed"]} == {c["series"] for c in by_series.values()}
    assert all(c["gate_reason"] == "not confirmed: cannot run the points again here" for c in facts["gate"]["not_confirmed"])
    # A larger allowance passes the same history; the page and history.json are written either way.
    code, facts = _report(database, tmp_path, "--max-regression", "0.5")
    assert code == 0 and facts["gate"]["verdict"] == "PASS" and len(facts["change_points"]) == 2
    assert json.loads((tmp_path / "page" / "history.json").read_text()) == facts
    page = (tmp_path / "page" / "index.html").read_text()
    # a chart per series, but the exact series that never changed: one line each in a table
    charted = [s for s in facts["series"] if s["kind"] == "noisy" or s["change_points"]]
    assert {s["kind"] for s in facts["series"]} == {"exact", "noisy"} and len(charted) < len(facts["series"])
    assert page.count("<svg") == len(charted) and 'id="verdict">NO REGRESSION<' in page


@pytest.mark.slow
def test_a_count_with_a_lower_bound_regresses_when_it_falls(tmp_path):
    # The baseline's softmax is the control (its rule: at_least 1): the analysis going blind to it is
    # the regression, not an improvement. The candidate's (equals 0) keeps rising as the bad way.
    for i in range(1, 9):
        series_run(tmp_path, i, base_tpot=20.0, cand_tpot=20.0, base_softmax=0 if i == 8 else 2)
    database = tmp_path / "history.sqlite"
    assert harness("history", "ingest", str(tmp_path / "runs"), "--db", str(database)).returncode == 0
    code, facts = _report(database, tmp_path)
    worse = {(s["metric"], s["variant"]): s["worse"] for s in facts["series"]}
    assert worse[("kernels:DRAFT_DECODE:softmax", "baseline")] == "down"
    assert worse[("kernels:DRAFT_DECODE:softmax", "candidate")] == "up"
    assert worse[("kernels:DRAFT_EXTEND:softmax", "baseline")] is None  # no rule on it: neither way is worse
    (fell,) = [c for c in facts["change_points"] if (c["metric"], c["variant"]) == ("kernels:DRAFT_DECODE:softmax", "baseline")]
    assert (fell["before"], fell["after"], fell["regression"]) == (2, 0, True)
    assert code == 1 and ("kernels:DRAFT_DECODE:softmax", "baseline") in {
        (c["metric"], c["variant"]) for c in facts["gate"]["failing"]}


@pytest.mark.slow
def test_an_improvement_does_not_fail_the_gate_and_softmax_coming_back_does(tmp_path):
    for i in range(1, 13):
        series_run(tmp_path, i, base_tpot=20.0, cand_tpot=20.0 if i < 7 else 15.0, cand_softmax=2 if i == 12 else 0)
    database = tmp_path / "history.sqlite"
    assert harness("history", "ingest", str(tmp_path / "runs"), "--db", str(database)).returncode == 0
    code, facts = _report(database, tmp_path)
    kinds = {(c["metric"], c["variant"]): c for c in facts["change_points"]}
    improvement = kinds[("tpot_ms", "candidate")]
    assert improvement["index"] == 6 and not improvement["regression"] and improvement["magnitude"] < -0.2
    softmax = kinds[("kernels:DRAFT_DECODE:softmax", "candidate")]
    assert (softmax["index"], softmax["kind"], softmax["p_value"], softmax["magnitude"]) == (11, "exact", None, None)
    assert softmax["before"] == 0 and softmax["after"] == 2 and softmax["regression"]
    # the op mix changes there too, but neither better nor worse: it does not gate
    assert kinds[("ops:DRAFT_DECODE", "candidate")]["index"] == 11
    # DRAFT_EXTEND's softmax comes back too, but no rule governs it: a change, which does not gate
    assert kinds[("kernels:DRAFT_EXTEND:softmax", "candidate")]["reading"] == "change"
    assert code == 1 and [c["metric"] for c in facts["gate"]["failing"]] == ["kernels:DRAFT_DECODE:softmax"]

    # Each change point explained by the stored op counts of the runs on either side: the softmax's
    # return by the kernels that appeared (planted: 2 per draft-decode replay, 1 per draft-extend
    # replay, 40 us each), the TPOT improvement by nothing in the kernels.
    explanations = {e["id"]: e for e in facts["explanations"]}
    back = explanations[softmax["explanation"]]
    assert back["series"] == [c["series"] for c in facts["change_points"] if c["explanation"] == back["id"]]
    assert {c["metric"] for c in facts["change_points"] if c["explanation"] == back["id"]} == {
        "kernels:DRAFT_DECODE:softmax", "kernels:DRAFT_EXTEND:softmax", "ops:DRAFT_DECODE"}  # the rules' region
    runs = sorted((tmp_path / "runs").resolve().iterdir())
    assert (back["before"]["run"], back["after"]["run"], back["variant"]) == (runs[10].name, runs[11].name, "candidate")
    regions = {r["region"]: r for r in back["regions"]}
    assert [(e["op"], e["before"], e["after"]) for e in regions["DRAFT_DECODE"]["appeared"]] == [
        ("cunn_SoftMaxForward", 0, 2)]
    assert regions["DRAFT_DECODE"]["time_per_replay_us"] == {"before": 500.0, "after": 580.0, "change": 0.16}
    assert back["sentence"] == (
        f"Between runs {runs[10].name} and {runs[11].name} ({runs[10]}, {runs[11]}), candidate: "
        "DRAFT_DECODE per replay: cunn_SoftMaxForward 0 -> 2 appeared; time per replay 500 µs -> 580 µs (+16%). "
        "DRAFT_EXTEND per replay: cunn_SoftMaxForward 0 -> 1 appeared; time per replay 300 µs -> 340 µs (+13%). "
        "No op count changed in TARGET_VERIFY (time per replay 2000 µs -> 2000 µs, +0%). Greedy outputs identical. "
        "By the rules and metrics: kernels:DRAFT_DECODE:softmax 0 -> 2 (worse) reads as regression (rule "
        "cand_no_softmax_dd); kernels:DRAFT_EXTEND:softmax 0 -> 1 reads as change (no rule on it).")
    faster = explanations[improvement["explanation"]]
    assert not any(r["appeared"] or r["disappeared"] or r["changed"] for r in faster["regions"])
    assert "No op count changed in any region: DRAFT_DECODE (time per replay 500 µs -> 500 µs, +0%)" in faster["sentence"]


@pytest.mark.slow
def test_an_empty_database_is_inconclusive_and_bad_input_is_one_line(tmp_path):
    code, facts = _report(tmp_path / "empty.sqlite", tmp_path)
    assert code == 3 and facts["gate"]["verdict"] == "NO DATA"
    for args, where in (
        (["ingest", str(tmp_path / "nowhere")], "nowhere: no such file or directory"),
        (["ingest", str(tmp_path)], "no run directory found"),
        (["report", "--db", str(tmp_path)], "is a directory"),
        (["report", "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none"], "cannot open the database"),
        (["report", "--max-regression", "2"], "expected a fraction"),
    ):
        done = harness("history", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert where in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_database_urls(tmp_path, monkeypatch):
    monkeypatch.delenv(db.DB_ENV, raising=False)
    assert db.database_url("postgresql://ci:secret@db.example/history") == \
        "postgresql+psycopg://ci:secret@db.example/history"
    assert db.display_url("postgresql+psycopg://ci:secret@db.example/history") == \
        "postgresql+psycopg://ci:***@db.example/history"
    assert db.database_url(tmp_path / "sub" / "h.sqlite") == f"sqlite:///{tmp_path / 'sub' / 'h.sqlite'}"
    monkeypatch.setenv(db.DB_ENV, str(tmp_path / "env.sqlite"))
    assert db.database_url(None) == f"sqlite:///{tmp_path / 'env.sqlite'}"


def test_a_database_from_a_newer_harness_is_refused(tmp_path):
    database = tmp_path / "history.sqlite"
    engine = db.open_database(database)
    assert db.schema_version(engine) == db.SCHEMA_VERSION
    with engine.begin() as conn:
        conn.execute(db.meta.update().where(db.meta.c.key == "schema_version").values(value="99"))
    done = harness("history", "report", "--db", str(database))
    assert done.returncode == 2 and f"schema version 99 is newer than this harness's ({db.SCHEMA_VERSION})" in done.stderr


def _ingest_twice_at_once(root: Path, database: str) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen([sys.executable, "-m", "sglang_spec_harness.commands.cli", "history", "ingest", str(root), "--db",
                               database, "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.slow
def test_two_ingesters_at_once_store_each_run_once_sqlite(planted_series, tmp_path):
    database = tmp_path / "history.sqlite"
    for done in _ingest_twice_at_once(planted_series, str(database)):
        assert done.returncode == 0, done.stderr
    counts = db.row_counts(db.open_database(database))
    single = tmp_path / "single.sqlite"
    ingest(db.open_database(single), find_run_dirs([planted_series]))
    assert counts == db.row_counts(db.open_database(single)) and counts["runs"] == 24


# ---- PostgreSQL, for real -----------------------------------------------------------------------


@pytest.mark.slow
def test_postgresql_ingest_report_and_two_ingesters(postgres, planted_series, real_run, tmp_path):
    url = postgres.create_database("history_test")
    runs = _ingest_twice_at_once(planted_series, url)
    assert all(done.returncode == 0 for done in runs), [d.stderr for d in runs]
    engine = db.open_database(url)
    assert engine.dialect.name == "postgresql"
    counts = db.row_counts(engine)
    assert counts["runs"] == 24
    again = harness("history", "ingest", str(planted_series), "--db", url)
    assert "0 added, 0 updated, 24 unchanged" in again.stdout and db.row_counts(engine) == counts

    # The same facts as from SQLite.
    sqlite = tmp_path / "history.sqlite"
    ingest(db.open_database(sqlite), find_run_dirs([planted_series]))
    code_pg, facts_pg = _report(url, tmp_path)
    code_lite, facts_lite = _report(sqlite, tmp_path)
    assert code_pg == code_lite == 3  # the TPOT regression is not confirmed (nightly points do not run again)
    strip = lambda facts: [{k: v for k, v in c.items() if k != "database"} for c in facts["change_points"]]  # noqa: E731
    assert strip(facts_pg) == strip(facts_lite) and facts_pg["series"] == facts_lite["series"]

    # A real run with JSON columns round-trips.
    ingest(engine, [real_run])
    with engine.connect() as conn:
        row = conn.execute(sa.select(db.runs).where(db.runs.c.name == real_run.name)).one()
    assert row.status == "complete" and row.scenario_json["name"] == "tiny_history"
    engine.dispose()
