"""The CI workflows: valid against GitHub's workflow schema (check-jsonschema's vendored copy, no
network), every action pinned by commit, and doing what docs/gpu.md promises: SGLang from a ref, a
spec or a path, runners from the scenario's `hardware:`, the run directory always uploaded, FAIL
failing the job and INCONCLUSIVE warning. The shell steps that decide this are run here with bash
(and the real Makefile), so a broken exit-code capture is caught before it reaches a GPU runner."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
GPU = WORKFLOWS / "gpu-regression.yml"
CPU = WORKFLOWS / "cpu-tests.yml"
NIGHTLY = WORKFLOWS / "gpu-nightly.yml"
SWEEP = WORKFLOWS / "gpu-release-sweep.yml"


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def step(workflow: dict, name: str, job: str | None = None) -> dict:
    steps = workflow["jobs"][job or next(iter(workflow["jobs"]))]["steps"]
    found = [s for s in steps if s.get("name") == name]
    assert found, f"no step named {name!r}"
    return found[0]


def check_jsonschema() -> list[str]:
    exe = Path(sys.executable).with_name("check-jsonschema")
    if exe.exists():
        return [str(exe)]
    if shutil.which("check-jsonschema"):
        return ["check-jsonschema"]
    pytest.skip("check-jsonschema is not installed (it is in the `test` extra: pip install -e '.[test]')")


@pytest.mark.parametrize("workflow", [GPU, CPU, NIGHTLY, SWEEP], ids=lambda p: p.name)
def test_workflow_is_valid_against_the_github_schema(workflow):
    result = subprocess.run(
        [*check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(GPU.read_text().replace("runs-on:", "runs_on:", 1))
    result = subprocess.run(
        [*check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0


ALL = (GPU, CPU, NIGHTLY, SWEEP)
SHA_PIN = re.compile(r"^\s*(?:-\s*)?uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+$")


@pytest.mark.parametrize("workflow", ALL, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version(workflow):
    lines = [line for line in workflow.read_text().splitlines() if re.match(r"^\s*(-\s*)?uses:", line)]
    assert lines
    for line in lines:
        assert SHA_PIN.match(line), f"{workflow.name}: not pinned by a full SHA with a `# vX.Y.Z` comment: {line.strip()}"
    # one version per action across the workflows, so an update touches them all
    pins: dict[str, set[str]] = {}
    for path in ALL:
        for line in path.read_text().splitlines():
            if m := SHA_PIN.match(line):
                pins.setdefault(m.group(1), set()).add(m.group(2))
    assert all(len(shas) == 1 for shas in pins.values()), pins


@pytest.mark.parametrize("workflow", ALL, ids=lambda p: p.name)
def test_permissions_are_read_only(workflow):
    wf = load(workflow)
    assert wf["permissions"] == {"contents": "read"}
    for job in wf["jobs"].values():
        assert "permissions" not in job


def test_gpu_workflow_is_callable_with_an_sglang_source_and_secrets():
    wf = load(GPU)
    call, dispatch = wf["on"]["workflow_call"], wf["on"]["workflow_dispatch"]
    for inputs in (call["inputs"], dispatch["inputs"]):
        assert {"scenario", "sglang_ref", "sglang_repository", "sglang_spec", "sglang_path", "runner"} <= set(inputs)
        assert inputs["scenario"]["default"] == "scenarios/sglang_llama31_8b_eagle3_topk1.yaml"
        assert (REPO / inputs["scenario"]["default"]).exists(), "the default scenario must ship with the project"
        assert inputs["sglang_repository"]["default"] == "sgl-project/sglang"
    assert {"harness_repository", "harness_ref"} <= set(call["inputs"])
    assert call["secrets"]["HF_TOKEN"]["required"] is False
    # the runners come from the scenario, through the plan job
    plan = wf["jobs"]["plan"]
    assert "make -s runner-matrix" in step(wf, "make runner-matrix", "plan")["run"]
    job = wf["jobs"]["regression"]
    assert job["needs"] == "plan" and job["runs-on"] == "${{ matrix.runs_on }}"
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert plan["outputs"]["matrix"] == "${{ steps.matrix.outputs.matrix }}"
    setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup and setup[0]["with"]["python-version"] in ("3.11", "3.12")
    checkout_sglang = step(wf, "Check out SGLang at ${{ inputs.sglang_ref }}", "regression")
    assert checkout_sglang["with"]["repository"] == "${{ inputs.sglang_repository }}"
    assert checkout_sglang["with"]["path"] == ".sglang-src" and checkout_sglang["if"] == "inputs.sglang_ref != ''"
    assert "make sglang-install SGLANG_PATH=.sglang-src" in step(wf, "make sglang-install", "regression")["run"]
    run = step(wf, "make scenario-run", "regression")
    assert run["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    upload = step(wf, "Upload the run directory", "regression")
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/runs"
    assert step(wf, "Gate on the verdict", "regression")["if"] == "always()"
    names = [s.get("name") for s in job["steps"]]
    assert names.index("make scenario-run") < names.index("Upload the run directory") < names.index("Gate on the verdict")


def test_inputs_and_secrets_never_pasted_into_scripts():
    """`${{ ... }}` inside `run:` is a script-injection hole; it must go through env."""
    for path in ALL:
        for job in load(path)["jobs"].values():
            for s in job["steps"]:
                assert "${{" not in s.get("run", ""), f"{path.name}: {s.get('name')}: expression inside run"


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # GitHub runs `run:` steps with `bash -e {0}` by default.
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def _fake_make(tmp_path: Path, code: int) -> dict[str, str]:
    """A `make` that prints its arguments and exits `code`, first on PATH."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "make"
    fake.write_text(f"#!/bin/sh\necho make \"$@\"\nexit {code}\n")
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_run_step_never_fails_the_job_before_publishing(tmp_path, code):
    env = {**_fake_make(tmp_path, code), "SCENARIO": "scenarios/x.yaml", "SGLANG_VERSION": ""}
    result = _bash(step(load(GPU), "make scenario-run", "regression")["run"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert "make scenario-run SCENARIO=scenarios/x.yaml RUN_ARGS=" in result.stdout


def test_run_step_passes_a_version_and_refuses_anything_else(tmp_path):
    run = step(load(GPU), "make scenario-run", "regression")["run"]
    env = {**_fake_make(tmp_path, 0), "SCENARIO": "scenarios/x.yaml"}
    ok = _bash(run, tmp_path, {**env, "SGLANG_VERSION": "0.5.24rc1"})
    assert "RUN_ARGS=--set server.sglang_version=0.5.24rc1" in ok.stdout
    bad = _bash(run, tmp_path, {**env, "SGLANG_VERSION": "0.5; rm -rf /"})
    assert bad.returncode != 0 and "not a version" in bad.stdout


def test_install_step_installs_a_checked_out_ref_as_a_path(tmp_path):
    install = step(load(GPU), "make sglang-install", "regression")["run"]
    env = {**_fake_make(tmp_path, 0), "SCENARIO": "s.yaml", "SGLANG_SPEC": "", "SGLANG_PATH": ""}
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "harness").write_text("#!/bin/sh\necho harness \"$@\"\n")
    (tmp_path / ".venv" / "bin" / "harness").chmod(0o755)
    by_ref = _bash(install, tmp_path, {**env, "SGLANG_REF": "abc123"})
    assert "make sglang-install SGLANG_PATH=.sglang-src SGLANG_REF= SGLANG_SPEC=" in by_ref.stdout
    by_spec = _bash(install, tmp_path, {**env, "SGLANG_REF": "", "SGLANG_SPEC": "sglang==0.5.23"})
    assert by_spec.stdout.splitlines()[0] == "make sglang-install"  # SGLANG_SPEC reaches make through the environment
    assert "harness validate s.yaml" in by_spec.stdout


@pytest.mark.parametrize(
    ("code", "job_fails", "annotation"),
    [("0", False, None), ("1", True, "::error title=harness: FAIL::"), ("3", False, "::warning title=harness: INCONCLUSIVE::"),
     ("2", True, "::error title=harness: no verdict::"), (None, True, "::error title=harness: no verdict::")],
)
def test_gate_step_fails_on_fail_and_warns_on_inconclusive(tmp_path, code, job_fails, annotation):
    if code is not None:
        (tmp_path / "reports").mkdir()
        (tmp_path / "reports" / "run-exit-code").write_text(code + "\n")
    result = _bash(step(load(GPU), "Gate on the verdict", "regression")["run"], tmp_path, {})
    assert (result.returncode != 0) == job_fails
    if annotation:
        assert result.stdout.startswith(annotation)
    else:
        assert "::" not in result.stdout


def test_cpu_workflow_runs_ci_run_with_a_pip_cache_and_a_concurrency_group():
    wf = load(CPU)
    assert "pull_request" in wf["on"] and "push" in wf["on"]
    assert wf["concurrency"]["group"] == "cpu-tests-${{ github.ref }}"
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["cache"] == "pip" and setup["with"]["python-version"] == "3.11"
    # the same script as CI elsewhere: lint, tests, the real server, the workflow targets
    assert [s.get("run") for s in job["steps"] if "run" in s] == [".ci/run"]
    ci_run = (REPO / ".ci" / "run").read_text()
    for command in ("make lint", "make test", "make sglang-cpu", "make sglang-install SGLANG_DEVICE=cpu",
                    "make scenario-run", "make report", "make history-ingest", "make history-report"):
        assert command in ci_run, command
    assert "download.pytorch.org/whl/cpu" in job["env"]["PIP_EXTRA_INDEX_URL"]


# ---- the runner matrix ----------------------------------------------------------------------------


def _matrix(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "scenario-info", "--github-matrix", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_nightly_runs_each_scenario_only_where_its_hardware_is():
    wf = load(NIGHTLY)
    scenarios = wf["env"]["NIGHTLY_SCENARIOS"].split()
    assert "scenarios/sglang_kimi_k25_nvfp4_tp4_eagle3.yaml" in scenarios
    include = _matrix(*scenarios)["include"]
    by_scenario: dict[str, set[str]] = {}
    for entry in include:
        by_scenario.setdefault(entry["name"], set()).add(entry["runner"])
        assert entry["runs_on"] == ["self-hosted", "linux", "gpu", entry["runner"]]
    # NVFP4 needs Blackwell: never a Hopper runner
    assert by_scenario["sglang_kimi_k25_nvfp4_tp4_eagle3"] == {"b200", "b300"}
    assert "h100" in by_scenario["sglang_llama31_8b_eagle3_topk1"]
    # every label a GPU scenario can ask for is one actionlint knows (.github/actionlint.yaml)
    known = set(yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"])
    gpu_scenarios = [str(p.relative_to(REPO)) for p in sorted((REPO / "scenarios").glob("*.yaml"))]
    for entry in _matrix(*gpu_scenarios)["include"]:
        if entry["accelerator"] != "cpu":
            assert set(entry["runs_on"]) - {"self-hosted", "linux"} <= known, entry


def test_nightly_fans_out_and_collects():
    wf = load(NIGHTLY)
    assert "schedule" in wf["on"] and "workflow_dispatch" in wf["on"]
    run = wf["jobs"]["run"]
    assert run["strategy"]["fail-fast"] is False
    assert run["needs"] == "plan" and run["runs-on"] == "${{ matrix.runs_on }}"
    upload = step(wf, "Upload the run directory", "run")
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/runs"
    history = wf["jobs"]["history"]
    assert history["needs"] == "run" and history["if"] == "always()"
    download = step(wf, "Download the run directories", "history")
    assert download["uses"].startswith("actions/download-artifact@") and download["with"]["pattern"] == "harness-run-*"
    names = [s.get("name") for s in history["steps"]]
    assert names.index("make history-ingest") < names.index("make history-report") \
        < names.index("Upload the trend page") < names.index("Gate on the history")
    for name in ("Upload the trend page", "Gate on the history"):
        assert step(wf, name, "history")["if"] == "always()"
    # durable history: the database named by the secret, no Actions cache
    assert step(wf, "make history-ingest", "history")["env"]["HARNESS_HISTORY_DB"] == "${{ secrets.HARNESS_HISTORY_DB }}"
    assert "actions/cache" not in NIGHTLY.read_text()


@pytest.mark.slow
def test_nightly_history_steps_ingest_report_and_gate(tmp_path):
    """The history job's own shell steps, with the real Makefile and harness, on artifacts laid out
    as download-artifact lays them out (artifacts/<artifact name>/<run directory>/)."""
    from support.history_helpers import series_run

    name = "harness-run-sglang_llama31_8b_eagle3_topk1-h100-42-1"
    for i in range(1, 13):
        run = series_run(tmp_path / "made", i, base_tpot=20.0, cand_tpot=15.0 if i < 7 else 19.5)
        target = tmp_path / "artifacts" / f"{name[:-5]}-{i}-1" / run.name
        target.parent.mkdir(parents=True)
        run.rename(target)
    harness = tmp_path / ".venv" / "bin" / "harness"
    harness.parent.mkdir(parents=True)
    harness.write_text(f"#!/bin/sh\nexec {sys.executable} -m sglang_spec_harness.commands.cli \"$@\"\n")
    harness.chmod(0o755)
    (tmp_path / "Makefile").write_text(f"include {REPO}/Makefile\n")
    wf = load(NIGHTLY)
    env = {"PYTHONPATH": str(REPO), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "HARNESS_HISTORY_DB": ""}
    ingest = _bash(step(wf, "make history-ingest", "history")["run"], tmp_path, env)
    assert ingest.returncode == 0, ingest.stderr
    assert "::warning title=harness history: not durable::" in ingest.stdout
    assert "12 runs: 12 added" in ingest.stdout and (tmp_path / "reports" / "history.sqlite").exists()
    report = _bash(step(wf, "make history-report", "history")["run"], tmp_path, env)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "reports" / "history.exit-code").read_text().strip() == "1"
    assert "REGRESSION  planted · candidate · tpot_ms" in report.stdout
    assert (tmp_path / "reports" / "history" / "index.html").exists()
    assert "REGRESSION" in (tmp_path / "summary.md").read_text()
    gate = _bash(step(wf, "Gate on the history", "history")["run"], tmp_path, {})
    assert gate.returncode == 1 and gate.stdout.startswith("::error title=harness history: regression::")


@pytest.mark.parametrize(("code", "job_fails"), [("0", False), ("1", True), ("3", False), ("2", True), (None, True)])
def test_nightly_gate(tmp_path, code, job_fails):
    if code is not None:
        (tmp_path / "reports").mkdir()
        (tmp_path / "reports" / "history.exit-code").write_text(code + "\n")
    gate = _bash(step(load(NIGHTLY), "Gate on the history", "history")["run"], tmp_path, {})
    assert (gate.returncode != 0) == job_fails


def test_make_profile_says_the_verdict_code_make_cannot_return(tmp_path):
    # GNU make exits 2 for any failed recipe; the recipe's last line carries the harness's code.
    import shutil
    import subprocess
    import sys

    venv = Path(sys.executable).parent.parent
    if shutil.which("make") is None or not (venv / "bin" / "harness").exists():
        pytest.skip("needs make and the harness installed in the interpreter's environment")
    proc = subprocess.run(
        ["make", "-C", str(REPO), "-s", "-o", f"{venv}/.installed", "profile", f"VENV={venv}", f"BIN={venv}/bin",
         f"SCENARIO={tmp_path / 'missing.yaml'}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert f"harness run: {tmp_path / 'missing.yaml'}: no such file" in proc.stderr
    assert "make profile: harness run exited 2 (1 FAIL, 2 bad input, 3 INCONCLUSIVE, 130 interrupted)" in proc.stderr


def test_release_sweep_runs_a_baseline_then_the_shards_side_by_side_then_merges_them():
    wf = load(SWEEP)
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert (REPO / inputs["scenario"]["default"]).exists()
    assert inputs["runs_on"]["default"] == '["1-gpu-h100"]' and inputs["shards"]["type"] == "number"
    jobs = wf["jobs"]
    assert list(jobs) == ["plan", "baseline", "shard", "merge"]
    # the runner's labels passed through as given, to the baseline's job and each shard's
    for name in ("baseline", "shard"):
        assert jobs[name]["runs-on"] == "${{ fromJSON(inputs.runs_on) }}"
    assert jobs["baseline"]["needs"] == "plan" and jobs["shard"]["needs"] == ["plan", "baseline"]
    assert jobs["shard"]["strategy"] == {"fail-fast": False,
                                         "matrix": {"include": "${{ fromJSON(needs.plan.outputs.shards) }}"}}
    assert jobs["plan"]["outputs"]["shards"] == "${{ steps.shards.outputs.shards }}"
    # every job and every step has a time limit
    for name, job in jobs.items():
        assert isinstance(job["timeout-minutes"], int), name
        for s in job["steps"]:
            assert isinstance(s.get("timeout-minutes"), int), (name, s.get("name") or s.get("uses"))
    # the baseline's folder goes to every shard; each shard's folder to the merge
    upload = step(wf, "Upload the baseline's folder", "baseline")
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/sweeps/*-baseline"
    download = step(wf, "Download the baseline's folder", "shard")
    assert download["with"] == {"name": upload["with"]["name"], "path": "reports/sweeps"}
    shard_upload = step(wf, "Upload the shard's folder", "shard")
    assert shard_upload["if"] == "always()" and shard_upload["with"]["path"] == "reports/sweeps/*-shard-*"
    assert shard_upload["with"]["name"].endswith("-shard-${{ matrix.name }}")
    shards = step(wf, "Download the shards' folders", "merge")["with"]
    assert shards["pattern"] == shard_upload["with"]["name"].replace("${{ matrix.name }}", "*")
    assert shards["merge-multiple"] is True and shards["path"] == "reports/sweeps"
    assert "make sweep-shard " in step(wf, "make sweep-shard", "shard")["run"]
    # the merge: after every shard, whatever became of them, as long as the baseline ran; on a hosted runner
    merge = jobs["merge"]
    assert merge["needs"] == ["plan", "baseline", "shard"] and merge["runs-on"] == "ubuntu-latest"
    assert merge["if"] == "always() && needs.baseline.result == 'success'"
    merging = step(wf, "make sweep-merge", "merge")
    assert merging["env"]["HARNESS_HISTORY_DB"] == "${{ secrets.HARNESS_HISTORY_DB }}"
    assert "make sweep-merge MERGE_ARGS=--partial" in merging["run"] and "GITHUB_STEP_SUMMARY" in merging["run"]
    published = step(wf, "Upload the merged sweep, its trend page and the database", "merge")
    assert published["if"] == "always()" and published["with"]["path"].split() == ["reports/sweep", "reports/history.sqlite"]
    names = [s.get("name") for s in merge["steps"]]
    assert names.index("make sweep-merge") < names.index("Upload the merged sweep, its trend page and the database") \
        < names.index("Fail when fewer than two releases ran or a shard failed")


@pytest.mark.parametrize("code, job_fails", [(0, False), (3, True), (2, True), (130, True)])
def test_release_sweep_shard_gate(tmp_path, code, job_fails):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "sweep-exit-code").write_text(f"{code}\n")
    done = _bash(step(load(SWEEP), "Fail when none of the shard's releases ran", "shard")["run"], tmp_path,
                 {"SHARD": "1/2"})
    assert (done.returncode != 0) == job_fails


@pytest.mark.parametrize("code, shards, job_fails", [(0, "success", False), (0, "failure", True), (3, "success", True),
                                                    (2, "success", True), (None, "success", True)])
def test_release_sweep_merge_gate(tmp_path, code, shards, job_fails):
    (tmp_path / "reports").mkdir()
    if code is not None:
        (tmp_path / "reports" / "sweep-exit-code").write_text(f"{code}\n")
    done = _bash(step(load(SWEEP), "Fail when fewer than two releases ran or a shard failed", "merge")["run"], tmp_path,
                 {"SHARDS_RESULT": shards})
    assert (done.returncode != 0) == job_fails, done.stdout


def test_release_sweep_plan_checks_its_inputs_before_a_gpu_runner_is_asked_for(tmp_path):
    run = step(load(SWEEP), "make sweep-shards", "plan")["run"]
    env = {**_fake_make(tmp_path, 0), "GITHUB_OUTPUT": str(tmp_path / "out")}
    harness = tmp_path / ".venv" / "bin" / "harness"
    harness.parent.mkdir(parents=True)
    harness.write_text("#!/bin/sh\necho harness \"$@\"\n")
    harness.chmod(0o755)
    good = {"SCENARIO": "scenarios/a.yaml", "RELEASES": "0.5.20..0.5.23", "RUNS_ON": '["1-gpu-h100"]', "SHARDS": "3"}
    ok = _bash(run, tmp_path, {**env, **good})
    assert ok.returncode == 0 and "harness validate scenarios/a.yaml" in ok.stdout, ok.stdout + ok.stderr
    assert (tmp_path / "out").read_text() == "shards=make -s sweep-shards SWEEP_SHARDS=3\n"
    for bad, message in [({"SCENARIO": "$(id)"}, "not a scenario path"), ({"RELEASES": "0.5.20; id"}, "not a release range"),
                         ({"SHARDS": "17"}, "shards: expected 1 to 16"), ({"SHARDS": "0"}, "shards: expected 1 to 16"),
                         ({"RUNS_ON": '"1-gpu-h100"'}, "runs_on: expected a JSON list"),
                         ({"RUNS_ON": '["1-gpu-h100", "$(id)"]'}, "runs_on: expected a JSON list")]:
        done = _bash(run, tmp_path, {**env, **good, **bad})
        assert done.returncode != 0 and message in done.stdout, (bad, done.stdout)
        assert "harness validate" not in done.stdout


def test_make_targets_of_the_sweep_over_runners_dry_run(tmp_path):
    def dry(*args: str) -> str:
        proc = subprocess.run(["make", "-n", "-C", str(REPO), "-o", ".venv/.installed-run", *args], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    points = "'s.yaml' --sglang-releases '0.5.20..0.5.23' --environments target --out 'reports/sweeps'"
    assert f"harness sweep baseline {points}" in dry("sweep-baseline", "SCENARIO=s.yaml", "SWEEP_RELEASES=0.5.20..0.5.23")
    shard = dry("sweep-shard", "SCENARIO=s.yaml", "SWEEP_RELEASES=0.5.20..0.5.23", "SHARD=2/3", "SWEEP_BASELINE=b")
    assert f"harness sweep {points} --shard '2/3' --baseline-from 'b'" in shard
    assert "echo $status > reports/sweep-exit-code" in shard
    for name in ("x-shard-1-of-2", "x-shard-2-of-2", "x-baseline"):
        (tmp_path / name).mkdir()
    merge = dry("sweep-merge", f"SWEEP_OUT={tmp_path}", "HISTORY_DB=h.sqlite", "MERGE_ARGS=--partial")
    assert (f"harness sweep merge {tmp_path}/x-shard-1-of-2 {tmp_path}/x-shard-2-of-2 --out 'reports/sweep' --db "
            "'h.sqlite' --partial") in merge
    done = subprocess.run(["make", "-s", "-C", str(REPO), "sweep-shards", "SWEEP_SHARDS=2"], capture_output=True,
                          text=True, timeout=60)
    assert json.loads(done.stdout) == [{"shard": "1/2", "name": "1-of-2"}, {"shard": "2/2", "name": "2-of-2"}]
    two = subprocess.run(["make", "-C", str(REPO), "-o", ".venv/.installed-run", "sweep-shard", f"SWEEP_OUT={tmp_path}",
                          f"SWEEP_BASELINE={tmp_path}/x-baseline {tmp_path}/x-shard-1-of-2"],
                         capture_output=True, text=True, timeout=60)
    assert two.returncode == 2 and "expected one *-baseline folder" in two.stderr


def test_make_targets_of_the_workflows_dry_run():
    """What the workflows and .ci/run ask of make, as make would run it (make -n: nothing runs)."""
    def dry(*args: str) -> str:
        proc = subprocess.run(["make", "-n", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "sglang_spec_harness.sglang_cpu.install --prefix .sglang-cpu --sglang 'dl/folder'" in dry(
        "sglang-install", "SGLANG_DEVICE=cpu", "SGLANG_PATH=dl/folder")
    assert "--sglang 'sglang>=0.5.23'" in dry("sglang-install", "SGLANG_DEVICE=cpu", "SGLANG_SPEC=sglang>=0.5.23")
    assert 'SGLANG_REF="v0.5.23"' in dry("sglang-install", "SGLANG_REF=v0.5.23") and "scripts/install_sglang_gpu.sh" in dry(
        "sglang-install")
    assert "harness report x/latest --step-summary" in dry("report", "RUNS=x/runs")
    assert "harness report out/latest" in dry("report", "RUNS=out")
    assert "harness history ingest x/runs --db h.sqlite" in dry("history-ingest", "RUNS=x/runs", "HISTORY_DB=h.sqlite")
    assert "echo $status > r/code" in dry("scenario-run", "RUN_STATUS=r/code", "-o", ".venv/.installed-run")


@pytest.mark.parametrize(("env", "message"), [
    ({"SGLANG_REF": "main", "SGLANG_SPEC": "sglang==0.5.23"}, "give one of SGLANG_REF, SGLANG_SPEC, SGLANG_PATH (got 2)"),
    ({"SGLANG_PATH": "/no/such/sglang"}, "SGLANG_PATH /no/such/sglang does not exist"),
])
def test_the_gpu_installer_refuses_bad_sources_before_installing_anything(tmp_path, env, message):
    venv = tmp_path / "venv"
    done = subprocess.run([str(REPO / "scripts" / "install_sglang_gpu.sh")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "VENV": str(venv), "SGLANG_REF": "", "SGLANG_SPEC": "", "SGLANG_PATH": "", **env})
    assert done.returncode == 2 and message in done.stderr
    assert not venv.exists()


@pytest.mark.parametrize("workflow", [GPU], ids=lambda p: p.name)
def test_plan_step_refuses_inputs_that_are_not_paths_or_labels(tmp_path, workflow):
    run = step(load(workflow), "make runner-matrix", "plan")["run"]
    env = {**_fake_make(tmp_path, 0), "GITHUB_OUTPUT": str(tmp_path / "out")}
    ok = _bash(run, tmp_path, {**env, "SCENARIO": "scenarios/a.yaml", "RUNNER": "h200"})
    assert ok.returncode == 0 and (tmp_path / "out").read_text().startswith("matrix=make -s runner-matrix")
    bad = _bash(run, tmp_path, {**env, "SCENARIO": "$(shell id)", "RUNNER": ""})
    assert bad.returncode != 0 and "not a scenario path or runner label" in bad.stdout
