"""The CI workflows: valid against GitHub's workflow schema (check-jsonschema's vendored copy, no
network), and doing what the README promises: the GPU job always uploads the run directory and
publishes JUnit, fails on FAIL, warns on INCONCLUSIVE. The shell steps that decide this are run
here with bash, so a broken exit-code capture is caught before it reaches a GPU runner."""

from __future__ import annotations

import os
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


def test_gpu_workflow_shape():
    wf = load(GPU)
    scenario = wf["on"]["workflow_dispatch"]["inputs"]["scenario"]
    assert scenario["default"] == "scenarios/sglang_llama31_8b_eagle3_topk1.yaml"
    assert (REPO / scenario["default"]).exists(), "the default scenario must ship with the project"
    job = wf["jobs"]["regression"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    install = step(wf, "Install the harness with SGLang")["run"]
    assert "pip install -e '.[sglang]'" in install
    # Artifact and test results are published whatever the verdict, from the resolved run dir.
    upload = step(wf, "Upload the run directory")
    assert upload["if"] == "always()" and upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == "${{ steps.rundir.outputs.path }}"
    junit = step(wf, "Publish the rules as test results")
    assert junit["if"] == "always()" and junit["uses"].startswith("mikepenz/action-junit-report@")
    assert junit["with"]["report_paths"].endswith("/junit.xml")
    assert wf["permissions"]["checks"] == "write"
    assert step(wf, "Gate on the verdict")["if"] == "always()"
    # No step may fail the job before the publishing steps (continue-on-error is not needed
    # because the run step captures the exit code itself).
    names = [s.get("name") for s in job["steps"]]
    assert names.index("Run the scenario") < names.index("Upload the run directory") < names.index("Gate on the verdict")


def test_inputs_never_pasted_into_scripts():
    """`${{ inputs.* }}` inside `run:` is a script-injection hole; it must go through env."""
    for path in (GPU, CPU, NIGHTLY, SWEEP):
        for job in load(path)["jobs"].values():
            for s in job["steps"]:
                assert "${{" not in s.get("run", ""), f"{path.name}: {s.get('name')}: expression inside run"


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # GitHub runs `run:` steps with `bash -e {0}` by default.
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_run_step_captures_the_exit_code_and_never_fails(tmp_path, code):
    fake = tmp_path / ".venv" / "bin" / "harness"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho running \"$@\"\nexit {code}\n")
    fake.chmod(0o755)
    output = tmp_path / "github_output"
    result = _bash(step(load(GPU), "Run the scenario")["run"], tmp_path,
                   {"SCENARIO": "scenarios/x.yaml", "GITHUB_OUTPUT": str(output)})
    assert result.returncode == 0, result.stderr
    assert "running run scenarios/x.yaml" in result.stdout
    assert output.read_text().splitlines() == [f"exit_code={code}"]


@pytest.mark.parametrize(
    ("code", "job_fails", "annotation"),
    [("0", False, None), ("1", True, "::error title=harness: FAIL::"), ("3", False, "::warning title=harness: INCONCLUSIVE::"),
     ("2", True, "::error title=harness: no verdict::"), ("", True, "::error title=harness: no verdict::")],
)
def test_gate_step_fails_on_fail_and_warns_on_inconclusive(tmp_path, code, job_fails, annotation):
    result = _bash(step(load(GPU), "Gate on the verdict")["run"], tmp_path, {"EXIT_CODE": code})
    assert (result.returncode != 0) == job_fails
    if annotation:
        assert result.stdout.startswith(annotation)
    else:
        assert "::" not in result.stdout


def test_rundir_step_resolves_the_latest_link(tmp_path):
    run_dir = tmp_path / "reports" / "runs" / "20260101-000000-x"
    run_dir.mkdir(parents=True)
    (tmp_path / "reports" / "latest").symlink_to("runs/20260101-000000-x")
    output = tmp_path / "github_output"
    result = _bash(step(load(GPU), "Locate the run directory")["run"], tmp_path, {"GITHUB_OUTPUT": str(output)})
    assert result.returncode == 0
    assert output.read_text().strip() == f"path={run_dir}"


def test_cpu_workflow_runs_make_test():
    wf = load(CPU)
    assert "pull_request" in wf["on"] and "push" in wf["on"]
    job = wf["jobs"]["test"]
    assert job["runs-on"] == "ubuntu-latest"
    assert any("make test" in s.get("run", "") for s in job["steps"])
    assert "download.pytorch.org/whl/cpu" in job["env"]["PIP_EXTRA_INDEX_URL"]


# ---- the nightly matrix and its history job -----------------------------------------------------


def test_nightly_fans_out_and_collects():
    wf = load(NIGHTLY)
    assert "schedule" in wf["on"] and "workflow_dispatch" in wf["on"]
    run = wf["jobs"]["run"]
    matrix = run["strategy"]["matrix"]
    assert run["strategy"]["fail-fast"] is False
    assert matrix["scenario"] and matrix["runner"]
    for scenario in matrix["scenario"]:
        assert (REPO / scenario).exists(), scenario
    assert run["runs-on"][:3] == ["self-hosted", "linux", "gpu"] and "${{ matrix.runner }}" in run["runs-on"]
    upload = step(wf, "Upload the run directory", "run")
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/runs"
    assert "harness run \"$SCENARIO\" --out reports/runs" in step(wf, "Run the scenario", "run")["run"]
    history = wf["jobs"]["history"]
    assert history["needs"] == "run" and history["if"] == "always()"
    download = step(wf, "Download the run directories", "history")
    assert download["uses"].startswith("actions/download-artifact@") and download["with"]["pattern"] == "harness-run-*"
    names = [s.get("name") for s in history["steps"]]
    assert names.index("Ingest the runs") < names.index("Find the change points and build the trend page") \
        < names.index("Upload the trend page") < names.index("Gate on the history")
    for name in ("Upload the trend page", "Gate on the history", "Save the history database"):
        assert step(wf, name, "history")["if"].startswith("always()")


def _artifact_name(scenario: str, runner: str) -> str:
    wf = load(NIGHTLY)
    output = Path(os.environ.get("TMPDIR", "/tmp")) / f"nightly-name-{os.getpid()}"
    done = _bash(step(wf, "Name the artifact", "run")["run"], REPO,
                 {"SCENARIO": scenario, "RUNNER_LABEL": runner, "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "1",
                  "GITHUB_OUTPUT": str(output)})
    assert done.returncode == 0, done.stderr
    text = output.read_text().strip()
    output.unlink()
    return text.split("=", 1)[1]


@pytest.mark.slow
def test_nightly_history_steps_ingest_report_and_gate(tmp_path):
    """The history job's own shell steps, run with the real harness on artifacts laid out as
    download-artifact lays them out (artifacts/<artifact name>/<run directory>/)."""
    from history_helpers import series_run

    name = _artifact_name("scenarios/sglang_llama31_8b_eagle3_topk1.yaml", "h100")
    assert name == "harness-run-sglang_llama31_8b_eagle3_topk1-h100-42-1"
    for i in range(1, 13):
        run = series_run(tmp_path / "made", i, base_tpot=20.0, cand_tpot=15.0 if i < 7 else 19.5)
        target = tmp_path / "artifacts" / f"{name[:-5]}-{i}-1" / run.name
        target.parent.mkdir(parents=True)
        run.rename(target)
    harness = tmp_path / ".venv" / "bin" / "harness"
    harness.parent.mkdir(parents=True)
    harness.write_text(f"#!/bin/sh\nexec {sys.executable} -m harness.commands.cli \"$@\"\n")
    harness.chmod(0o755)
    wf = load(NIGHTLY)
    env = {"PYTHONPATH": str(REPO), "HARNESS_MAX_REGRESSION": "0.05", "GITHUB_OUTPUT": str(tmp_path / "out"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "HARNESS_HISTORY_DB": ""}
    ingest = _bash(step(wf, "Ingest the runs", "history")["run"], tmp_path, env)
    assert ingest.returncode == 0, ingest.stderr
    assert "12 runs: 12 added" in ingest.stdout and (tmp_path / "reports" / "history.sqlite").exists()
    report = _bash(step(wf, "Find the change points and build the trend page", "history")["run"], tmp_path, env)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "out").read_text().splitlines() == ["exit_code=1"]
    assert "REGRESSION  planted · candidate · tpot_ms" in report.stdout
    assert (tmp_path / "history-page" / "index.html").exists()
    assert "gate: FAIL" in (tmp_path / "summary.md").read_text()
    gate = _bash(step(wf, "Gate on the history", "history")["run"], tmp_path, {"EXIT_CODE": "1"})
    assert gate.returncode == 1 and gate.stdout.startswith("::error title=harness history: regression::")


@pytest.mark.parametrize(("code", "job_fails"), [("0", False), ("1", True), ("3", False), ("2", True), ("", True)])
def test_nightly_gate(tmp_path, code, job_fails):
    gate = _bash(step(load(NIGHTLY), "Gate on the history", "history")["run"], tmp_path, {"EXIT_CODE": code})
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


def test_release_sweep_workflow_runs_the_sweep_and_keeps_everything():
    wf = load(SWEEP)
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert (REPO / inputs["scenario"]["default"]).exists()
    sweep = step(wf, "Sweep the releases")["run"]
    assert '--sglang-releases "$RELEASES" --environments target' in sweep and "exit 0" in sweep
    upload = step(wf, "Upload the sweep and the trend page")
    assert upload["if"] == "always()" and "reports/sweeps" in upload["with"]["path"]
    names = [s.get("name") for s in wf["jobs"]["sweep"]["steps"]]
    assert names.index("Sweep the releases") < names.index("Upload the sweep and the trend page") < names.index(
        "Fail when fewer than two releases ran")


@pytest.mark.parametrize("code, job_fails", [(0, False), (3, True), (2, True), (130, True)])
def test_release_sweep_gate(tmp_path, code, job_fails):
    done = _bash(step(load(SWEEP), "Fail when fewer than two releases ran")["run"], tmp_path, {"EXIT_CODE": str(code)})
    assert (done.returncode != 0) == job_fails
