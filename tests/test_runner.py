"""`harness run` end to end, with the micro engine as a real server process on loopback.

One small run is shared by the tests that read its directory; each failure case runs its own tiny
scenario and checks that it ends with a clear message, keeps what it measured, and leaves no server.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import yaml
from support.faultkit import HarnessProcess, kill_group, survivors, trial_in_progress, wait_for
from support.proc_helpers import group_gone, process_gone
from support.tiny_scenario import FAKE_SERVER, NUM_REQUESTS, OUTPUT_LEN, WARMUP, write_scenario

from sglang_spec_harness.commands import cli
from sglang_spec_harness.commands.check import print_results
from sglang_spec_harness.engines import keep_off_cpus, server_cpus
from sglang_spec_harness.pipeline import check_and_report
from sglang_spec_harness.run.execute import run_scenario
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.run.server import live_server_pids
from sglang_spec_harness.rundir import (
    AnalysisRecord,
    EnvironmentRecord,
    SCHEMA_VERSION,
    LaunchRecord,
    RunRecord,
    TrialRecord,
    load_run_dir,
    read_record,
    read_requests as read_request_rows,
    record_json,
    request_line,
)
from sglang_spec_harness.verdict.judge import evaluate_run
import itertools

REPO = Path(__file__).resolve().parents[1]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def read_requests(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "requests.jsonl").read_text().splitlines() if line.strip()]


def server_pids(run_dir: Path) -> list[int]:
    return [read_json(p)["server_pid"] for p in run_dir.glob("trials/*/trial.json") if read_json(p)["server_pid"]]


def assert_no_server_left(run_dir: Path) -> None:
    pids = server_pids(run_dir)
    assert pids, "no server was started"
    for pid in pids:
        assert process_gone(pid) and group_gone(pid), f"server {pid} survived"
    assert not live_server_pids()


# ---- a complete run -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    path = write_scenario(root)
    result = run_scenario(load_scenario(path), path, out_root=root / "reports" / "runs")
    return result


@pytest.mark.slow
def test_full_run_completes_with_every_file_of_the_contract(full_run):
    run_dir = full_run.run_dir
    assert full_run.status == "complete" and full_run.error is None and full_run.exit_code is None
    run = read_json(run_dir / "run.json")
    assert run["status"] == "complete" and run["aa"] is False and run["finished"]
    assert [p["dir"] for p in run["plan"]] == [
        "trials/00-baseline-profiled", "trials/01-candidate-profiled", "trials/02-baseline-timed", "trials/03-candidate-timed",
    ]
    stored, written = load_scenario(run_dir / "scenario.yaml"), load_scenario(run_dir.parents[2] / "tiny.yaml")
    assert written.trials.seed is None and isinstance(stored.trials.seed, int)  # the run's seed is recorded
    assert stored.model_copy(update={"trials": stored.trials.model_copy(update={"seed": None})}) == written
    env = read_json(run_dir / "environment.json")
    assert env["harness"]["version"] and env["python"] and env["cpu_count"]
    assert env["variants"]["baseline"]["torch"].startswith("2.") and env["variants"]["baseline"]["sglang"] is None
    latest = run_dir.parents[1] / "latest"
    assert latest.is_symlink() and latest.resolve() == run_dir.resolve()
    for entry in run["plan"]:
        trial_dir = run_dir / entry["dir"]
        trial = read_json(trial_dir / "trial.json")
        assert trial["status"] == "ok" and trial["error"] is None, trial["error"]
        assert "sglang_spec_harness.micro.server" in trial["command"] and trial["server_info"]["engine"] == "micro"
        assert "Uvicorn running" in (trial_dir / "server.log").read_text()


def test_full_run_numbers_are_sane(full_run):
    for entry in read_json(full_run.run_dir / "run.json")["plan"]:
        trial_dir = full_run.run_dir / entry["dir"]
        summary = read_json(trial_dir / "trial.json")["summary"]
        assert summary["requests"] == NUM_REQUESTS and summary["errors"] == 0
        assert summary["completion_tokens"] == NUM_REQUESTS * OUTPUT_LEN
        # 3 draft steps: between 1 (nothing accepted) and 4 tokens per verify
        assert 1.0 <= summary["accept_length"] <= 4.0
        assert summary["accept_length"] == pytest.approx(summary["completion_tokens"] / summary["spec_verify_ct"])
        assert summary["median_tpot_ms"] > 0 and summary["median_ttft_ms"] > 0 and summary["median_itl_ms"] > 0
        assert summary["output_throughput_tok_s"] > 0 and summary["duration_s"] > 0
        records = read_requests(trial_dir)
        assert [r["index"] for r in records] == list(range(-WARMUP, NUM_REQUESTS))
        for r in records:
            assert r["warmup"] == (r["index"] < 0) and r["error"] is None
            assert r["completion_tokens"] == OUTPUT_LEN == len(r["output_ids"]) and r["finish_reason"] == "length"
            assert r["prompt_tokens"] == 16 and r["tpot_ms"] > 0 and r["e2e_ms"] >= r["ttft_ms"] > 0
            assert len(r["itl_ms"]) >= 1 and all(gap >= 0 for gap in r["itl_ms"])


def test_full_run_outputs_are_identical_across_variants_per_request(full_run):
    outputs: dict[int, set[tuple[int, ...]]] = {}
    for trial_dir in (full_run.run_dir / "trials").iterdir():
        for r in read_requests(trial_dir):
            outputs.setdefault(r["index"], set()).add(tuple(r["output_ids"]))
    assert sorted(outputs) == list(range(-WARMUP, NUM_REQUESTS))
    assert all(len(variants) == 1 for variants in outputs.values())
    assert len({next(iter(v)) for v in outputs.values()}) == len(outputs)  # different prompts, different outputs


def test_full_run_traces_and_analysis(full_run):
    run_dir = full_run.run_dir
    analysis = read_json(run_dir / "analysis.json")
    assert analysis["schema_version"] == SCHEMA_VERSION and "errors" not in analysis
    assert sorted(analysis["trials"]) == ["00-baseline-profiled", "01-candidate-profiled"]
    for name in analysis["trials"]:
        trial = read_json(run_dir / "trials" / name / "trial.json")
        assert trial["traces"] == [f"profile/{name}-TP-0.trace.json.gz"]
        with gzip.open(run_dir / "trials" / name / trial["traces"][0]) as f:
            assert "traceEvents" in json.load(f)
    for name in ("02-baseline-timed", "03-candidate-timed"):
        assert read_json(run_dir / "trials" / name / "trial.json")["traces"] == []
        assert not (run_dir / "trials" / name / "profile").exists()


def assert_records_read_back_as_written(run_dir: Path) -> None:
    """Every record the run wrote reads back through its model (sglang_spec_harness.rundir.models) and is
    written again byte for byte: one model for the writer and the readers, nothing lost or reordered."""
    models = {"run.json": RunRecord, "analysis.json": AnalysisRecord, "environment.json": EnvironmentRecord}
    models |= {str(p.relative_to(run_dir)): TrialRecord for p in run_dir.glob("trials/*/trial.json")}
    models |= {str(p.relative_to(run_dir)): LaunchRecord for p in run_dir.glob("launches/*/launch.json")}
    for name, model in models.items():
        assert record_json(read_record(run_dir / name, model)) == (run_dir / name).read_text(), name
    for path in run_dir.glob("*/*/requests.jsonl"):
        assert "".join(request_line(row) for row in read_request_rows(path)) == path.read_text(), path


def test_full_run_records_are_their_models(full_run):
    run_dir = full_run.run_dir
    assert_records_read_back_as_written(run_dir)
    # the order docs/internals.md gives
    assert list(read_json(run_dir / "run.json")) == [
        "schema_version", "scenario", "aa", "status", "error", "started", "finished", "mode", "plan", "launches",
        "trials_done", "wall_s", "measured_s", "server_launches"]
    assert list(read_json(run_dir / "trials/02-baseline-timed/trial.json")) == [
        "index", "variant", "config", "kind", "repetition", "launch", "status", "error", "command", "server_pid",
        "port", "started", "finished", "server_info", "vocabulary", "summary", "traces"]
    assert list(read_requests(run_dir / "trials/02-baseline-timed")[0]) == [
        "index", "warmup", "prompt_tokens", "completion_tokens", "spec_verify_ct", "ttft_ms", "tpot_ms", "itl_ms",
        "e2e_ms", "output_ids", "text", "finish_reason", "error"]


def test_full_run_leaves_no_server(full_run):
    assert_no_server_left(full_run.run_dir)


# ---- --json and --set: what a CI step reads -----------------------------------------------------


@pytest.mark.slow
def test_json_prints_the_outcome_on_stdout_and_everything_else_on_stderr(tmp_path, capsys):
    path = write_scenario(tmp_path)
    code = cli.main(["run", str(path), "--out", str(tmp_path / "runs"), "--no-progress", "--json",
                     "--set", "trials.repetitions=2", "--set", "rules=[{name: no_softmax, kind: kernel_count, "
                     "region: DRAFT_DECODE, pattern: softmax, variants: [candidate], equals: 0}]"])
    captured = capsys.readouterr()
    outcome = json.loads(captured.out)  # stdout is the JSON and nothing else
    run_dir = next((tmp_path / "runs").iterdir())
    assert (code, outcome["exit_code"], outcome["status"], outcome["verdict"]) == (0, 0, "complete", "PASS")
    assert outcome["run_dir"] == str(run_dir) and outcome["report"] == str(run_dir / "index.html")
    assert outcome["results"] == read_json(run_dir / "results.json")
    # --set replaced the rules; output validity is implicit (the scenario declares none)
    assert [r["name"] for r in outcome["results"]["rules"]] == ["no_softmax", "outputs_valid"]
    assert "[1/6] 00-baseline-profiled" in captured.err and f"results: {run_dir}" in captured.err
    # the run's scenario.yaml is the scenario as it ran, overrides included
    assert yaml.safe_load((run_dir / "scenario.yaml").read_text())["trials"]["repetitions"] == 2
    assert_no_server_left(run_dir)


@pytest.mark.slow
def test_json_of_a_run_that_cannot_complete_and_of_a_dry_run(tmp_path, capsys):
    path = write_scenario(tmp_path, candidate={"args": {"--no-such-flag": True}})
    code = cli.main(["run", str(path), "--out", str(tmp_path / "runs"), "--no-progress", "--json"])
    outcome = json.loads(capsys.readouterr().out)
    assert (code, outcome["exit_code"], outcome["status"], outcome["verdict"]) == (3, 3, "incomplete", "INCONCLUSIVE")
    assert "01-candidate-profiled failed" in outcome["error"]
    code = cli.main(["run", str(path), "--dry-run", "--json", "--set", "trials.repetitions=3"])
    outcome = json.loads(capsys.readouterr().out)
    assert (code, outcome["status"], outcome["run_dir"], outcome["results"]) == (0, "planned", None, None)
    assert len(outcome["plan"]["trials"]) == 2 + 2 * 3 and set(outcome["plan"]["commands"]) == {"baseline", "candidate"}


# ---- failures -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_server_exiting_at_startup_ends_the_run_with_one_line_and_keeps_earlier_trials(tmp_path, capsys):
    path = write_scenario(tmp_path, candidate={"args": {"--no-such-flag": True}})
    code = cli.main(["run", str(path), "--out", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 3
    last = err.strip().splitlines()[-1]
    assert last.startswith("harness run: INCONCLUSIVE (run incomplete): trial 01-candidate-profiled failed: "
                           "server exited with code 2 during startup"), last
    assert "unrecognized arguments: --no-such-flag" in last and "results so far: " in last
    assert "Traceback" not in err
    run_dir = next((tmp_path / "runs").iterdir())
    # the checks and report still see what was measured: INCONCLUSIVE, whatever the rules say
    assert read_json(run_dir / "results.json")["verdict"] == "INCONCLUSIVE" and (run_dir / "index.html").is_file()
    run = read_json(run_dir / "run.json")
    assert run["status"] == "incomplete" and "01-candidate-profiled failed" in run["error"]
    assert read_json(run_dir / "trials/00-baseline-profiled/trial.json")["status"] == "ok"
    assert len(read_requests(run_dir / "trials/00-baseline-profiled")) == NUM_REQUESTS + WARMUP
    assert list(read_json(run_dir / "analysis.json")["trials"]) == ["00-baseline-profiled"]
    failed = read_json(run_dir / "trials/01-candidate-profiled/trial.json")
    assert failed["status"] == "failed" and "--no-such-flag" in failed["error"]
    assert not (run_dir / "trials/02-baseline-timed").exists()
    assert_no_server_left(run_dir)


@pytest.mark.slow
def test_server_that_never_becomes_healthy(tmp_path):
    path = write_scenario(
        tmp_path,
        baseline={"python": str(FAKE_SERVER), "env": {"FAKE_SERVER_MODE": "unhealthy"}},
        server={"startup_timeout_s": 2},
    )
    started = time.monotonic()
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert time.monotonic() - started < 30
    assert result.status == "incomplete" and result.exit_code == 3
    assert "did not answer GET /health with 200 within 2 s (last: HTTP 503" in result.error
    assert any("fake_server: mode unhealthy" in line for line in result.log_tail)
    # its own listening socket is no "port taken by another process": one attempt, not five
    assert "starting again on another port" not in (result.run_dir / "trials/00-baseline-profiled/server.log").read_text()
    trial = read_json(result.run_dir / "trials/00-baseline-profiled/trial.json")
    assert trial["status"] == "failed" and trial["summary"] is None
    assert read_json(result.run_dir / "run.json")["status"] == "incomplete"
    assert_no_server_left(result.run_dir)


@pytest.mark.slow
def test_port_already_taken_fails_the_trial_clearly(tmp_path):
    path = write_scenario(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs", port=port, aa=True)
    assert result.exit_code == 3
    assert result.error == (f"trial 00-baseline-profiled failed: 127.0.0.1:{port} is already in use "
                            "(another server running?); choose another port")
    run = read_json(result.run_dir / "run.json")
    assert run["status"] == "incomplete" and run["aa"] is True
    assert read_json(result.run_dir / "trials/00-baseline-profiled/trial.json")["server_pid"] is None


@pytest.mark.slow
def test_failing_requests_are_recorded_and_fail_the_trial(tmp_path):
    # The micro engine decodes greedily only: temperature > 0 is a 400, as a bad sampling param in SGLang.
    path = write_scenario(tmp_path, workload={"temperature": 0.5}, trials={"profiled": 0})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert result.exit_code == 3
    assert result.error.startswith(
        f"trial 00-baseline-timed failed: {NUM_REQUESTS + WARMUP} of {NUM_REQUESTS + WARMUP} requests failed; "
        "request -1: HTTP 400: "
    ) and "greedily only" in result.error
    trial_dir = result.run_dir / "trials/00-baseline-timed"
    records = read_requests(trial_dir)
    assert len(records) == NUM_REQUESTS + WARMUP and all(r["error"].startswith("HTTP 400") for r in records)
    trial = read_json(trial_dir / "trial.json")
    assert trial["status"] == "failed" and trial["summary"]["errors"] == NUM_REQUESTS
    assert_no_server_left(result.run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["restart", "interleaved", "sequential"])
def test_ctrl_c_mid_run_exits_130_keeps_the_measurements_and_stops_the_server(tmp_path, mode):
    """Ctrl-C while requests are in flight, at a point the test controls: once two measured requests
    are on disk, the server is frozen (SIGSTOP), so that requests are certainly mid-stream when the
    harness's process group gets SIGINT (as from a terminal). The run says it was interrupted (never
    that a trial failed), keeps every finished request and records no failed one, and stops the
    frozen server for good."""
    trials = {"profiled": 0} if mode == "restart" else {"mode": mode, "repetitions": 1, "launches": 1, "profiled": 0}
    path = write_scenario(tmp_path, workload={"num_requests": 12, "output_len": 32, "concurrency": 2}, trials=trials)
    run = HarnessProcess(path, tmp_path / "runs").start()
    try:
        target = wait_for(lambda: trial_in_progress(run.run_dir(), "timed", 2), 120)
        assert target, run.stderr
        assert kill_group(target["pid"], signal.SIGSTOP)
        frozen = sum(1 for r in read_requests(target["dir"]) if not r["warmup"])
        assert run.interrupt(signal.SIGINT)
        code = run.wait(60)
    finally:
        if run.alive():
            run.kill_everything()
    stderr = run.stderr
    assert code == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("harness run: interrupted: interrupted (Ctrl-C); results so far: ")
    run_dir = run.run_dir()
    run_json = read_json(run_dir / "run.json")
    assert run_json["status"] == "incomplete" and run_json["error"] == "interrupted (Ctrl-C)"
    trial = read_json(target["dir"] / "trial.json")
    assert trial["status"] == "failed" and trial["error"] == "interrupted (Ctrl-C)"
    kept = [r for r in read_requests(target["dir"]) if not r["warmup"]]
    # nothing finished is lost; nothing torn down is recorded, least of all as a failed request
    assert frozen <= len(kept) <= frozen + 2 and all(r["error"] is None for r in kept)
    assert wait_for(lambda: not survivors(run.marker, [target["pid"]]), 10), survivors(run.marker, [target["pid"]])
    assert not live_server_pids()


def test_dry_run_prints_the_plan_and_commands_and_starts_nothing(tmp_path, capsys):
    path = write_scenario(tmp_path, trials={"repetitions": 2})
    code = cli.main(["run", str(path), "--dry-run", "--aa", "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0 and not (tmp_path / "runs").exists()
    assert "6 trials" in out and "01-candidate-profiled (runs baseline)" in out
    lines = [line for line in out.splitlines() if line.startswith(("baseline: ", "candidate: "))]
    assert len(lines) == 2 and all("-m sglang_spec_harness.micro.server" in line and "--disable-topk1-fast-path" in line for line in lines)


def test_bad_input_exits_2_with_one_line_before_anything_starts(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "absent.yaml"), "--out", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err.strip() == f"harness run: {tmp_path}/absent.yaml: no such file"
    path = write_scenario(tmp_path, workload={"prompts": {"source": "file", "path": "prompts.jsonl"}})
    assert cli.main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harness run: workload.prompts.path: cannot read {tmp_path}/prompts.jsonl") and "\n" not in err
    assert not (tmp_path / "runs").exists()


def _patch_module(directory: Path) -> str:
    """A harmless patch module: proves the bootstrap imported it into the server process."""
    (directory / "harness_test_patch_marker.py").write_text("import os\nos.environ['HARNESS_TEST_PATCHED'] = '1'\n")
    return "harness_test_patch_marker"


@pytest.mark.slow
def test_variant_patches_are_imported_into_the_server(tmp_path):
    module = _patch_module(tmp_path)
    path = write_scenario(tmp_path, baseline={"args": {"--disable-topk1-fast-path": True}, "patches": [module],
                                              "pythonpath": [str(tmp_path)]}, trials={"profiled": 0})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert result.status == "complete", result.error
    log = (result.run_dir / "trials/00-baseline-timed/server.log").read_text()
    assert f"harness bootstrap: patches imported: {module} (pid " in log
    assert "harness bootstrap" not in (result.run_dir / "trials/01-candidate-timed/server.log").read_text()


@pytest.mark.slow
def test_a_shadowed_patch_bootstrap_fails_the_trial(tmp_path):
    # A variant's PYTHONPATH entry with its own sitecustomize comes first and shadows the bootstrap:
    # the patch never loads, and the trial must not measure the unpatched code as the baseline.
    module = _patch_module(tmp_path)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text("")
    path = write_scenario(tmp_path, baseline={"patches": [module], "pythonpath": [str(shadow), str(tmp_path)]},
                          trials={"profiled": 0})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert result.exit_code == 3
    assert "names patches ['harness_test_patch_marker'] but server.log has no" in result.error
    assert_no_server_left(result.run_dir)


def test_after_a_run_checks_report_and_ci_step_summary(full_run, tmp_path, monkeypatch, capsys):
    summary_file = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    checked, html = check_and_report(full_run.run_dir, step_summary=True)
    results = read_json(full_run.run_dir / "results.json")
    assert (checked.exit_code, checked.verdict) == (results["exit_code"], results["verdict"])
    assert html == full_run.run_dir / "index.html"
    for name in ("index.html", "junit.xml", "summary.md"):
        assert (full_run.run_dir / name).stat().st_size > 0
    print_results(checked)
    assert f"verdict: {results['verdict']}" in capsys.readouterr().out
    assert summary_file.read_text() == (full_run.run_dir / "summary.md").read_text()


# ---- the warm modes -----------------------------------------------------------------------------


def _launch_records(run_dir: Path) -> list[dict]:
    return [read_json(p) for p in sorted(run_dir.glob("launches/*/launch.json"))]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["interleaved", "sequential"])
def test_warm_run_serves_blocks_from_a_few_launches(tmp_path, mode):
    path = write_scenario(tmp_path, trials={"mode": mode, "repetitions": 4, "launches": 2, "profiled": 1,
                                            "order": "random", "seed": 3})
    data = yaml.safe_load(path.read_text())
    data["rules"].append({"name": "tpot", "kind": "tpot_gain"})
    path.write_text(yaml.safe_dump(data))
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    run_dir = result.run_dir
    assert result.status == "complete", result.error
    run = read_json(run_dir / "run.json")
    assert run["mode"] == mode and run["server_launches"] == 4 and len(run["launches"]) == 4
    assert 0 < run["measured_s"] < run["wall_s"]
    launches = _launch_records(run_dir)
    assert [x["status"] for x in launches] == ["stopped"] * 4
    assert all("Uvicorn running" in (run_dir / x["dir"] / "server.log").read_text() for x in launches)
    # the warm-up ran once per launch, on the launch, not in the blocks
    for x in launches:
        warmups = read_requests(run_dir / x["dir"])
        assert [r["index"] for r in warmups] == [-WARMUP] and all(r["warmup"] for r in warmups)
    if mode == "sequential":  # one server at a time
        spans = sorted((x["started_at_s"], x["stopped_at_s"]) for x in launches)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    else:  # all up together, for the whole run
        assert max(x["started_at_s"] for x in launches) < min(x["stopped_at_s"] for x in launches)
    assert_records_read_back_as_written(run_dir)
    blocks = [read_json(p) for p in sorted(run_dir.glob("trials/*-timed/trial.json"))]
    assert len(blocks) == 8 and all(b["status"] == "ok" and b["launch"].startswith("launches/") for b in blocks)
    pids = {x["dir"]: x["server_pid"] for x in launches}
    assert all(b["server_pid"] == pids[b["launch"]] for b in blocks)
    for rnd in range(4):
        pair = [b for b in blocks if b["repetition"] == rnd]
        assert sorted(b["variant"] for b in pair) == ["baseline", "candidate"]
        prompts = [[r["index"] for r in read_requests(run_dir / "trials" / f"{b['index']:02d}-{b['variant']}-timed")]
                   for b in pair]
        assert prompts[0] == prompts[1] == list(range(rnd * NUM_REQUESTS, (rnd + 1) * NUM_REQUESTS))
    analysis = read_json(run_dir / "analysis.json")
    assert len(analysis["trials"]) == 2
    results = evaluate_run(load_run_dir(run_dir))
    rules = {r.name: r for r in results.rules}
    assert rules["same_outputs"].verdict == "PASS" and rules["same_outputs"].numbers.compared == 4 * NUM_REQUESTS
    assert rules["no_softmax"].verdict == "PASS"
    for pid in pids.values():
        assert process_gone(pid) and group_gone(pid)
    assert not live_server_pids()
    # the report: blocks marked by launch, the launches next to the blocks, their logs
    from sglang_spec_harness.report import build_report
    from sglang_spec_harness.verdict.judge import write_results

    write_results(run_dir, results)
    page = build_report(run_dir).html.read_text()
    assert "<h3>Server launches</h3>" in page and "<h3>Paired differences</h3>" in page
    assert "marker = launch" in page and "two blocks of one" in page
    for x in launches:
        assert f'<a href="./{x["dir"]}/server.log">server.log</a>' in page


@pytest.mark.slow
def test_warm_launch_that_exits_at_startup_ends_the_run_and_stops_the_others(tmp_path):
    path = write_scenario(tmp_path, candidate={"args": {"--no-such-flag": True}},
                          trials={"mode": "interleaved", "repetitions": 2, "launches": 1, "profiled": 0})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert result.status == "incomplete" and result.exit_code == 3
    assert result.error.startswith("server launch failed: 01-candidate-launch0: server exited with code 2 during startup")
    launches = _launch_records(result.run_dir)
    assert [x["status"] for x in launches] == ["stopped", "failed"]
    assert "--no-such-flag" in launches[1]["error"]
    for x in launches:
        assert process_gone(x["server_pid"]) and group_gone(x["server_pid"])
    assert not (result.run_dir / "trials").exists() and not live_server_pids()


def test_warm_dry_run_prints_launches_and_rounds(tmp_path, capsys):
    path = write_scenario(tmp_path, trials={"mode": "interleaved", "repetitions": 4, "launches": 2, "order": "abba"})
    assert cli.main(["run", str(path), "--dry-run", "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "mode interleaved: 4 server launches (2 per arm), 4 rounds of one block of 4 requests per arm" in out
    assert "00-baseline-launch0: 1 profiled, 2 blocks (rounds 1, 3)" in out
    assert "round 2: candidate@03-candidate-launch1, baseline@02-baseline-launch1" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_planted_slowdown_fails_the_tpot_rule_while_the_kernel_rules_pass(tmp_path, capsys):
    """The candidate keeps the fast path (no softmax) but busy-waits 20 ms in every draft cycle, far
    more than a tiny cycle takes: `harness run` ends FAIL (exit 1) on the TPOT rule alone.

    Measured as the shipped scenarios measure: the servers on the last CPU, away from the client
    (`server.cpus`), and 64 tokens per request. With the tiny scenario's 16 tokens and no pinning, a
    baseline request's whole decode (~25 ms) fitted inside one stall of the client on a loaded
    2-CPU machine (`make test`'s other worker, four servers): the client then read all its tokens
    at once (TPOT 0.01 ms), the block sd reached 150%, and the interval took in 1 (INCONCLUSIVE,
    exit 3) or fell below 1.5: 2 of 7 loops of this file beside test_faults and test_server. The
    planted delay is CPU time (micro.engine.burn_cpu_time), which load stretches as it stretches the
    baseline's cycle: a wall-clock wait kept its length, so load shrank the ratio to ~3.4."""
    path = write_scenario(tmp_path, candidate={"args": {"--inject-delay-us": 20000}},
                          trials={"mode": "interleaved", "repetitions": 6, "launches": 2, "order": "random"},
                          server={"cpus": [-1]}, workload={"output_len": 64})
    data = yaml.safe_load(path.read_text())
    data["rules"].append({"name": "tpot_improved", "kind": "tpot_gain", "min_gain": 0.01})
    path.write_text(yaml.safe_dump(data))
    code = cli.main(["run", str(path), "--out", str(tmp_path / "runs"), "--no-progress"])
    results = read_json(next((tmp_path / "runs").glob("*/results.json")))
    verdicts = {r["name"]: r for r in results["rules"]}
    out, err = capsys.readouterr()  # on failure: each block's TPOT, the run's last lines, the rule's reason
    trials = "\n".join(line for line in out.splitlines() if line.startswith("["))
    why = f"{trials}\n{err[-1500:]}\n{verdicts.get('tpot_improved', {}).get('reason')}"
    assert code == 1 and results["verdict"] == "FAIL", why
    assert verdicts["tpot_improved"]["verdict"] == "FAIL" and verdicts["tpot_improved"]["numbers"]["fail_kind"] == "slower", why
    assert verdicts["tpot_improved"]["numbers"]["ci_low"] > 1.5, why
    assert verdicts["no_softmax"]["verdict"] == "PASS" and verdicts["same_outputs"]["verdict"] == "PASS"


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="CPU pinning needs Linux affinity and two CPUs")


@needs_two_cpus
def test_server_cpus_resolve_against_the_harness_cpus_from_before_it_kept_off_them(tmp_path):
    """Servers start while the harness keeps off their CPUs: `-1` must still name the machine's last
    CPU, not the last of the harness's narrowed set (that put the servers on the harness's CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    scenario = load_scenario(write_scenario(tmp_path, server={"cpus": [-1]}))
    pinned = server_cpus(scenario)
    assert pinned == (cpus[-1],)
    with keep_off_cpus(pinned):
        assert sorted(os.sched_getaffinity(0)) == cpus[:-1]
        assert server_cpus(scenario) == pinned
        with keep_off_cpus(pinned):  # nested: changes nothing
            assert sorted(os.sched_getaffinity(0)) == cpus[:-1]
    assert sorted(os.sched_getaffinity(0)) == cpus and server_cpus(scenario) == pinned


@pytest.mark.slow
@needs_two_cpus
def test_a_pinned_run_puts_every_server_on_the_last_cpu_and_gives_the_harness_its_cpus_back(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    path = write_scenario(tmp_path, server={"cpus": [-1]},
                          trials={"mode": "interleaved", "repetitions": 1, "launches": 1, "profiled": 1})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs")
    assert result.status == "complete", result.error
    launches = _launch_records(result.run_dir)
    assert len(launches) == 2
    for x in launches:  # what the server process itself saw, not only the command line
        assert x["server_info"]["cpu_affinity"] == [cpus[-1]], x["server_info"]
        assert x["command"].split(" taskset -c ")[1].split(" ")[0] == str(cpus[-1])
    assert sorted(os.sched_getaffinity(0)) == cpus


@pytest.mark.slow
def test_timed_trials_wait_for_the_imports_made_ahead_of_need(tmp_path, monkeypatch):
    """The run imports its later modules while the first server comes up; a timed trial's client must not
    share its CPU with them, so no timed trial starts before they are done."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "slow_to_import.py").write_text(
        "import json, os, pathlib, time\n"
        "time.sleep(4)\n"
        "root = pathlib.Path(os.environ['SLOW_IMPORT_RUNS'])\n"
        "seen = sorted(str(p) for p in root.glob('*/trials/*-timed'))\n"
        "(root.parent / 'seen.json').write_text(json.dumps(seen))\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setenv("SLOW_IMPORT_RUNS", str(tmp_path / "runs"))
    path = write_scenario(tmp_path, trials={"mode": "interleaved", "repetitions": 2, "launches": 1, "profiled": 1})
    result = run_scenario(load_scenario(path), path, out_root=tmp_path / "runs", also_import=("slow_to_import",))
    assert result.status == "complete", result.error
    assert len(list(result.run_dir.glob("trials/*-timed"))) == 4
    assert json.loads((tmp_path / "seen.json").read_text()) == []
