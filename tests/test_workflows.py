"""The CI workflows: valid against GitHub's workflow schema (check-jsonschema's vendored copy, no
network), every action pinned by commit, and doing what docs/gpu.md promises: SGLang from a ref, a
spec or a path, runners from the scenario's `hardware:`, the run directory always uploaded, FAIL
failing the job and INCONCLUSIVE warning. The shell steps that decide this are run here with bash
(and the real Makefile), so a broken exit-code capture is caught before it reaches a GPU runner."""

from __future__ import annotations

import importlib.util
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
# a workflow of this repository, called by its path at the caller's own commit: nothing to pin
LOCAL_WORKFLOW = re.compile(r"^\s*(?:-\s*)?uses:\s*\$/\.github/workflows/[\w.-]+\.yml$")


@pytest.mark.parametrize("workflow", ALL, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version(workflow):
    lines = [line for line in workflow.read_text().splitlines() if re.match(r"^\s*(-\s*)?uses:", line)]
    assert lines
    for line in lines:
        assert SHA_PIN.match(line) or LOCAL_WORKFLOW.match(line), \
            f"{workflow.name}: not pinned by a full SHA with a `# vX.Y.Z` comment: {line.strip()}"
    # one version per action across the workflows, so an update touches them all
    pins: dict[str, set[str]] = {}
    for path in ALL:
        for line in path.read_text().splitlines():
            if m := SHA_PIN.match(line):
                pins.setdefault(m.group(1), set()).add(m.group(2))
    assert all(len(shas) == 1 for shas in pins.values()), pins


@pytest.mark.parametrize("workflow", ALL, ids=lambda p: p.name)
def test_permissions_are_read_only_but_for_the_comment(workflow):
    """Read-only everywhere; pull-requests: write in the one job that posts the verdict's comment (it
    runs no code from the pull request), and as the ceiling the nightly grants the workflow it calls."""
    wf = load(workflow)
    assert wf["permissions"] == {"contents": "read"}
    granted = {name: job["permissions"] for name, job in wf["jobs"].items() if "permissions" in job}
    expected = {GPU: {"comment": {"pull-requests": "write"}},
                NIGHTLY: {"run": {"contents": "read", "pull-requests": "write"}}}.get(workflow, {})
    assert granted == expected
    if workflow == GPU:  # the job with a write token checks out no code and runs none of the pull request's
        assert not any("checkout" in s.get("uses", "") for s in wf["jobs"]["comment"]["steps"])


@pytest.mark.parametrize("workflow", ALL, ids=lambda p: p.name)
def test_every_job_and_step_has_a_time_limit(workflow):
    for name, job in load(workflow)["jobs"].items():
        if "uses" in job:  # a job that calls a workflow takes none; the called jobs have theirs
            continue
        assert "timeout-minutes" in job, f"{workflow.name}: job {name}"
        for s in job["steps"]:
            assert "timeout-minutes" in s, f"{workflow.name}: job {name}, step {s.get('name') or s.get('uses')}"


def test_gpu_workflow_is_callable_as_sglangs_workflows_would_call_it():
    wf = load(GPU)
    call, dispatch = wf["on"]["workflow_call"], wf["on"]["workflow_dispatch"]
    assert len(dispatch["inputs"]) <= 10  # GitHub's limit for workflow_dispatch
    for inputs in (call["inputs"], dispatch["inputs"]):
        assert {"runs_on", "scenario", "set", "sglang_ref", "sglang_repository", "sglang_spec", "gate", "only"} <= set(inputs)
        assert inputs["scenario"]["default"] == "scenarios/sglang_llama31_8b_eagle3_topk1.yaml"
        assert (REPO / inputs["scenario"]["default"]).exists(), "the default scenario must ship with the project"
        assert inputs["sglang_repository"]["default"] == "sgl-project/sglang"
        assert (inputs["gate"]["default"], inputs["only"]["default"]) == ("pr", "exact")
    assert call["inputs"]["runs_on"]["required"] is True and "runner" not in call["inputs"]
    assert {"harness_repository", "harness_ref", "pr_number", "run_timeout_minutes"} <= set(call["inputs"])
    assert call["secrets"]["HF_TOKEN"]["required"] is False
    # the runner labels as given: no matrix, no labels of ours around them
    job = wf["jobs"]["regression"]
    assert job["runs-on"] == "${{ fromJSON(inputs.runs_on) }}" and job["needs"] == "plan" and "strategy" not in job
    # the inputs are checked on a hosted runner first, the scenario and --set planned in seconds
    plan = wf["jobs"]["plan"]
    assert plan["runs-on"] == "ubuntu-latest" and plan["timeout-minutes"] <= 15
    assert step(wf, "make scenario-plan", "plan")["run"] == "scripts/ci_inputs.sh plan"
    names = [s.get("name") or s["uses"].split("@")[0] for s in job["steps"]]
    assert names == ["actions/checkout", "Check out SGLang at ${{ inputs.sglang_ref }}", "make sglang-install-kind",
                     "actions/setup-python", "make sglang-install", "make harness-beside", "make scenario-run",
                     "make report", "Upload the run directory", "make pr-comment", "Upload the comment", "make gate"]
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["if"] == "steps.kind.outputs.kind == 'harness'"  # SGLang's own install brings its Python
    install = step(wf, "make sglang-install", "regression")
    assert install["env"]["SGLANG_IS_IN_CI"] == "true" and install["env"]["USE_VENV"] == "false"
    checkout_sglang = step(wf, "Check out SGLang at ${{ inputs.sglang_ref }}", "regression")
    assert checkout_sglang["with"]["repository"] == "${{ inputs.sglang_repository }}"
    assert checkout_sglang["with"]["path"] == ".sglang-src" and checkout_sglang["if"] == "inputs.sglang_ref != ''"
    assert step(wf, "make scenario-run", "regression")["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    for name in ("make report", "Upload the run directory", "make pr-comment", "Upload the comment", "make gate"):
        assert step(wf, name, "regression")["if"] == "always()", name
    assert step(wf, "make gate", "regression")["run"] == "make gate"
    assert step(wf, "make pr-comment", "regression")["env"]["REPORT_URL"] == "${{ steps.upload.outputs.artifact-url }}"


def test_the_gate_is_the_harness_not_workflow_shell():
    text = GPU.read_text()
    assert "run-exit-code" not in text and "INCONCLUSIVE::" not in text
    assert step(load(GPU), "make gate", "regression")["env"]["GATE"] == "${{ inputs.gate }}"


def test_the_comment_job_edits_the_comment_it_finds_by_its_marker():
    wf = load(GPU)
    job = wf["jobs"]["comment"]
    assert job["needs"] == ["plan", "regression"] and job["runs-on"] == "ubuntu-latest"
    assert "always()" in job["if"] and "github.event.pull_request.number" in job["if"]
    post = step(wf, "Post or edit the comment", "comment")
    assert post["env"]["GH_TOKEN"] == "${{ github.token }}"
    for piece in ('head -n 1 "$body"', "--method PATCH", "--method POST", "github-actions[bot]"):
        assert piece in post["run"], piece


def test_inputs_and_secrets_never_pasted_into_scripts():
    """`${{ ... }}` inside `run:` is a script-injection hole; it must go through env."""
    for path in ALL:
        for job in load(path)["jobs"].values():
            for s in job.get("steps", []):
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


def _inputs(tmp_path: Path, step_name: str, env: dict[str, str], *, code: int = 0) -> subprocess.CompletedProcess:
    """scripts/ci_inputs.sh STEP in a copy of the scripts, with a fake make."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / "ci_inputs.sh", tmp_path / "scripts")
    return subprocess.run(["bash", str(tmp_path / "scripts" / "ci_inputs.sh"), step_name], cwd=tmp_path,
                          env={**os.environ, **_fake_make(tmp_path, code), "GITHUB_OUTPUT": str(tmp_path / "out"), **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_run_step_never_fails_the_job_before_publishing(tmp_path, code):
    done = _inputs(tmp_path, "run", {"SCENARIO": "scenarios/x.yaml", "SET": "trials.repetitions=3", "ONLY": "exact"},
                   code=code)
    assert done.returncode == 0, done.stderr
    assert "make scenario-run SCENARIO=scenarios/x.yaml SET_FILE=reports/set.txt RUN_ARGS=--only exact" in done.stdout
    assert (tmp_path / "reports" / "set.txt").read_text() == "trials.repetitions=3\n"


def test_run_step_passes_a_version_and_the_whole_design_and_refuses_anything_else(tmp_path):
    ok = _inputs(tmp_path, "run", {"SCENARIO": "sglang:test/s.yaml", "ONLY": "all", "SGLANG_VERSION": "0.5.24rc1"})
    assert "SCENARIO=sglang:test/s.yaml SET_FILE=reports/set.txt RUN_ARGS= --set server.sglang_version=0.5.24rc1" in ok.stdout
    for env, message in (({"SGLANG_VERSION": "0.5; rm -rf /"}, "sglang_version: not a version"),
                         ({"ONLY": "tpot"}, "only: expected exact or all"),
                         ({"SCENARIO": "../../etc/x.yaml"}, "scenario: not a path"),
                         ({"SCENARIO": "$(id).yaml"}, "scenario: not a path")):
        bad = _inputs(tmp_path, "run", {"SCENARIO": "scenarios/x.yaml", **env})
        assert bad.returncode == 2 and message in bad.stderr and "make" not in bad.stdout, env


def test_plan_step_checks_every_input_before_planning(tmp_path):
    base = {"SCENARIO": "scenarios/x.yaml", "GATE": "pr", "ONLY": "exact", "RUNS_ON": '["1-gpu-h100"]', "SET": "a=1"}
    ok = _inputs(tmp_path, "plan", base)
    assert ok.returncode == 0, ok.stderr
    assert "make -s scenario-plan SCENARIO=scenarios/x.yaml SET_FILE=reports/set.txt RUN_ARGS=--only exact" in ok.stdout
    assert (tmp_path / "out").read_text() == "key=scenarios-x.yaml-1-gpu-h100\n"
    for env, message in (({"GATE": "weekly"}, "gate: expected pr or nightly"),
                         ({"RUNS_ON": "1-gpu-h100"}, "runs_on: expected a JSON list of runner labels"),
                         ({"RUNS_ON": '["a b"]'}, "runs_on: expected a JSON list"),
                         ({"SCENARIO": "sglang:test/s.yaml"}, "is a file of the SGLang checkout: give sglang_ref")):
        bad = _inputs(tmp_path, "plan", {**base, **env})
        assert bad.returncode == 2 and message in bad.stderr and "scenario-plan" not in bad.stdout, env


def test_install_steps_install_a_checked_out_ref_as_a_path_and_refuse_code(tmp_path):
    by_ref = _inputs(tmp_path, "install", {"SGLANG_REF": "abc123", "SGLANG_SPEC": "", "SGLANG_PATH": ""})
    assert by_ref.stdout.splitlines()[0] == "make sglang-install SGLANG_PATH=.sglang-src SGLANG_REF= SGLANG_SPEC="
    by_spec = _inputs(tmp_path, "install", {"SGLANG_REF": "", "SGLANG_SPEC": "sglang==0.5.23", "SGLANG_PATH": ""})
    assert by_spec.stdout.splitlines()[0] == "make sglang-install SGLANG_REF="  # the spec reaches make through the env
    kind = _inputs(tmp_path, "install-kind", {"SGLANG_REF": "abc123"})
    assert "make -s sglang-install-kind SGLANG_PATH=.sglang-src SGLANG_REF= SGLANG_SPEC=" in kind.stdout
    assert (tmp_path / "out").read_text().startswith("kind=make")  # the fake make's first word
    bad = _inputs(tmp_path, "install", {"SGLANG_REF": "", "SGLANG_SPEC": 'sglang"; id; "', "SGLANG_PATH": ""})
    assert bad.returncode == 2 and "sglang_spec: quotes" in bad.stderr and "make" not in bad.stdout


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
    for command in ("make lint", "make test", "make sglang-cpu", "make test-sglang-cpu", ".ci/gpu-workflow-on-cpu"):
        assert command in ci_run, command
    # the GPU workflow's own jobs, step by step, on a local repository in SGLang's layout
    on_cpu = (REPO / ".ci" / "gpu-workflow-on-cpu").read_text()
    for piece in ("scripts/run_workflow_job.py .github/workflows/gpu-regression.yml --job plan --job regression",
                  "cp -a .ci/sglang-layout/.", "--input sglang_ref=v0.5.23", "SPEC_HARNESS_VARIANT=baseline",
                  "history-ingest", "history-report"):
        assert piece in on_cpu, piece
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
        assert entry["runs_on"] == [entry["runner"]]  # SGLang's single labels, as given
    # NVFP4 needs Blackwell: never a Hopper runner
    assert by_scenario["sglang_kimi_k25_nvfp4_tp4_eagle3"] == {"4-gpu-b200", "8-gpu-b200", "8-gpu-b300"}
    assert "1-gpu-h100" in by_scenario["sglang_llama31_8b_eagle3_topk1"]
    # every label a GPU scenario can ask for is one actionlint knows (.github/actionlint.yaml)
    known = set(yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"])
    gpu_scenarios = [str(p.relative_to(REPO)) for p in sorted((REPO / "scenarios").glob("*.yaml"))]
    for entry in _matrix(*gpu_scenarios)["include"]:
        if entry["accelerator"] != "cpu":
            assert set(entry["runs_on"]) <= known, entry


def test_nightly_fans_out_and_collects():
    wf = load(NIGHTLY)
    assert "schedule" in wf["on"] and "workflow_dispatch" in wf["on"]
    run = wf["jobs"]["run"]
    assert run["strategy"]["fail-fast"] is False and run["needs"] == "plan"
    # each scenario and label: the pull request's job, with the whole design and the nightly's gate
    assert run["uses"] == "$/.github/workflows/gpu-regression.yml"
    assert run["with"]["runs_on"] == "${{ toJSON(matrix.runs_on) }}" and run["with"]["scenario"] == "${{ matrix.scenario }}"
    assert (run["with"]["gate"], run["with"]["only"]) == ("nightly", "all")
    upload = step(load(GPU), "Upload the run directory", "regression")
    assert upload["with"]["name"].startswith("harness-run-") and upload["with"]["path"] == "reports/runs"
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
    # a TPOT rise is a regression only once confirmed side by side: exit 3, and the gate step fails on it
    assert (tmp_path / "reports" / "history.exit-code").read_text().strip() == "3"
    assert "not confirmed planted · candidate · tpot_ms" in report.stdout
    assert (tmp_path / "reports" / "history" / "index.html").exists()
    assert "gate: INCONCLUSIVE" in (tmp_path / "summary.md").read_text()
    gate = _bash(step(wf, "Gate on the history", "history")["run"], tmp_path, {})
    assert gate.returncode == 1 and gate.stdout.startswith("::error title=harness history: not confirmed::")


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
    assert 'SGLANG_REF="v0.5.23"' in dry("sglang-install", "SGLANG_REF=v0.5.23") and "scripts/sglang_install.sh" in dry(
        "sglang-install")
    assert "scripts/install_harness_beside.py" in dry("harness-beside")
    assert "harness gate x/latest --mode nightly" in dry("gate", "RUNS=x/runs", "GATE=nightly")
    assert "harness report x/latest --pr-comment reports/pr-comment.md" in dry("pr-comment", "RUNS=x/runs")
    assert "harness run .sglang-src/test/s.yaml --dry-run" in dry("scenario-plan", "SCENARIO=sglang:test/s.yaml")
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


def test_the_nightly_plan_step_refuses_a_runner_that_is_not_a_label(tmp_path):
    """The one workflow that still builds its matrix with make runner-matrix (the PR check plans with
    scripts/ci_inputs.sh, the release sweep with make sweep-shards)."""
    run = step(load(NIGHTLY), "make runner-matrix", "plan")["run"]
    env = {**_fake_make(tmp_path, 0), "GITHUB_OUTPUT": str(tmp_path / "out"), "NIGHTLY_SCENARIOS": "scenarios/a.yaml"}
    ok = _bash(run, tmp_path, {**env, "RUNNER": "1-gpu-h100"})
    assert ok.returncode == 0 and (tmp_path / "out").read_text().startswith("matrix=make -s runner-matrix")
    bad = _bash(run, tmp_path, {**env, "RUNNER": "$(shell id)"})
    assert bad.returncode != 0 and "not a runner label" in bad.stdout


# ---- the caller example in docs/gpu.md ------------------------------------------------------------


def _doc_workflows():
    spec = importlib.util.spec_from_file_location("doc_workflows", REPO / "scripts" / "doc_workflows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_documented_caller_calls_the_workflow_with_its_inputs_and_make_lint_checks_it():
    blocks = _doc_workflows().workflow_blocks((REPO / "docs" / "gpu.md").read_text())
    assert [name for name, _, _ in blocks] == ["pr-test-spec-harness.yml"]
    caller = yaml.safe_load(blocks[0][2])
    caller["on"] = caller.pop(True, caller.get("on"))
    (job,) = caller["jobs"].values()
    assert re.fullmatch(r"OWNER/sglang-spec-harness/\.github/workflows/gpu-regression\.yml@[0-9a-f]{40}", job["uses"])
    call = load(GPU)["on"]["workflow_call"]
    assert set(job["with"]) <= set(call["inputs"]) and "runs_on" in job["with"]
    assert json.loads(job["with"]["runs_on"]) == ["1-gpu-h100"]
    assert set(job["secrets"]) <= set(call["secrets"])
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"} and caller["permissions"] == {"contents": "read"}
    makefile = (REPO / "Makefile").read_text()
    assert "$(BIN)/python scripts/doc_workflows.py --check docs/gpu.md" in makefile.split("\nlint:", 1)[1].split("\n\n")[0]


def test_the_doc_check_fails_on_a_broken_example_and_on_none(tmp_path):
    if not (Path(sys.executable).parent / "actionlint").exists():
        pytest.skip("actionlint is not installed (the `lint` extra)")
    # a called workflow by branch, not by commit (zizmor), and a permission that does not exist (actionlint)
    broken = (REPO / "docs" / "gpu.md").read_text().replace("@0123456789abcdef0123456789abcdef01234567 # v0.2.0", "@main")
    broken = broken.replace("      pull-requests: write # only", "      pull-request: write # only")
    (tmp_path / "broken.md").write_text(broken)
    (tmp_path / "none.md").write_text("# nothing\n")
    script = str(REPO / "scripts" / "doc_workflows.py")
    bad = subprocess.run([sys.executable, script, "--check", str(tmp_path / "broken.md")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "the block pr-test-spec-harness.yml" in bad.stderr
    assert "unpinned-uses" in bad.stderr and "pull-request" in bad.stderr
    none = subprocess.run([sys.executable, script, "--check", str(tmp_path / "none.md")], capture_output=True, text=True,
                          timeout=60)
    assert none.returncode == 1 and "no workflow to check" in none.stderr
