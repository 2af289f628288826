"""scripts/run_workflow_job.py: the runner that .ci/gpu-workflow-on-cpu runs the GPU workflow's jobs
with. Its expressions are checked against what GitHub documents, its jobs on a small workflow of local
repositories: env and paths and outputs between steps, if, timeouts, artifacts, needs; and it refuses
what it cannot run rather than skipping it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "run_workflow_job.py"
_spec = importlib.util.spec_from_file_location("run_workflow_job", SCRIPT)
assert _spec is not None and _spec.loader is not None
rwj = importlib.util.module_from_spec(_spec)
sys.modules["run_workflow_job"] = rwj  # dataclasses look their module up there
_spec.loader.exec_module(rwj)

CONTEXTS = {"inputs": {"empty": "", "label": "1-gpu-h100", "minutes": 240, "runs_on": '["1-gpu-h100"]',
                       "scenario": "sglang:test/s.yaml"},
            "github": {"event": {"pull_request": {"number": 7}}}, "needs": {"plan": {"result": "success", "outputs": {"key": "k"}}},
            "steps": {"kind": {"outputs": {"kind": "harness"}}}}


@pytest.mark.parametrize(("expression", "value"), [
    ("inputs.empty || 240", 240),
    ("inputs.minutes || 240", 240),
    ("fromJSON(inputs.runs_on)", ["1-gpu-h100"]),
    ("toJSON(fromJSON(inputs.runs_on))", '[\n  "1-gpu-h100"\n]'),
    ("startsWith(inputs.scenario, 'SGLANG:')", True),  # case-insensitive, as GitHub's
    ("inputs.label == '1-GPU-H100'", True),
    ("steps.kind.outputs.kind != 'harness'", False),
    ("needs.plan.outputs.key", "k"),
    ("github.event.pull_request.number", 7),
    ("github.event.pull_request.missing.deeper", None),
    ("!inputs.empty && 'yes' || 'no'", "yes"),
    ("format('{0}-{1}', inputs.label, 'x')", "1-gpu-h100-x"),
    ("'it''s'", "it's"),
])
def test_expressions(expression, value):
    assert rwj.evaluate(expression, CONTEXTS) == value


def test_interpolation_and_conditions():
    assert rwj.interpolate("harness-run-${{ needs.plan.outputs.key }}-${{ inputs.minutes }}", CONTEXTS) == "harness-run-k-240"
    assert rwj.interpolate("${{ inputs.minutes }}", CONTEXTS) == 240  # a whole expression keeps its type
    assert rwj.condition("inputs.label != ''", CONTEXTS, {"failed": False}) is True
    assert rwj.condition("inputs.label != ''", CONTEXTS, {"failed": True}) is False  # success() implied
    assert rwj.condition("always()", CONTEXTS, {"failed": True}) is True
    assert rwj.condition(None, CONTEXTS, {"failed": True}) is False


@pytest.mark.parametrize(("expression", "message"), [
    ("hashFiles('x')", "function hashfiles() is not one this runner knows"),
    ("vars_of.x", "no context 'vars_of' here"),
    ("inputs.label ==", "expected more"),
    ("inputs.label ~ 1", "cannot read it"),
])
def test_what_it_cannot_evaluate_stops_it(expression, message):
    with pytest.raises(rwj.WorkflowError, match=re.escape(message)):
        rwj.evaluate(expression, CONTEXTS)


WORKFLOW = {
    "name": "t",
    "on": {"workflow_call": {"inputs": {"who": {"type": "string", "required": True},
                                        "minutes": {"type": "number", "default": 1}}}},
    "env": {"FROM_WORKFLOW": "w"},
    "jobs": {
        "first": {
            "runs-on": "${{ fromJSON('[\"1-gpu-h100\"]') }}", "timeout-minutes": 5,
            "outputs": {"said": "${{ steps.say.outputs.said }}"},
            "steps": [
                {"uses": "actions/checkout@x", "timeout-minutes": 1},
                {"name": "say", "id": "say", "timeout-minutes": "${{ inputs.minutes }}", "env": {"WHO": "${{ inputs.who }}"},
                 "run": 'mkdir -p bin out && printf "#!/bin/sh\\necho tool\\n" > bin/tool && chmod +x bin/tool\n'
                        'echo "$PWD/bin" >> "$GITHUB_PATH"\necho "LATER=$WHO-$FROM_WORKFLOW" >> "$GITHUB_ENV"\n'
                        'echo "said=hello $WHO" >> "$GITHUB_OUTPUT"\necho data > out/file.txt'},
                {"name": "later", "timeout-minutes": 1, "run": 'test "$(tool)" = tool && test "$LATER" = "you-w" && cat README'},
                {"name": "fails", "timeout-minutes": 1, "continue-on-error": True, "run": "exit 3"},
                {"name": "up", "uses": "actions/upload-artifact@x", "timeout-minutes": 1, "with": {"name": "a-${{ inputs.who }}",
                                                                                                   "path": "out"}},
                {"name": "too slow", "timeout-minutes": 0.02, "if": "always()", "run": "sleep 30"},
                {"name": "skipped after a failure", "timeout-minutes": 1, "run": "echo never > never.txt"},
            ],
        },
        "second": {
            "needs": "first", "if": "always()", "runs-on": "ubuntu-latest", "timeout-minutes": 5,
            "steps": [
                {"uses": "actions/download-artifact@x", "timeout-minutes": 1, "with": {"name": "a-you", "path": "got"}},
                {"name": "read", "timeout-minutes": 1, "env": {"SAID": "${{ needs.first.outputs.said }}"},
                 "run": 'test "$SAID" = "hello you" && test "$(cat got/file.txt)" = data'},
            ],
        },
    },
}


def run(tmp_path: Path, workflow: dict, *args: str) -> subprocess.CompletedProcess:
    source = tmp_path / "source"
    if not source.exists():
        source.mkdir()
        (source / "README").write_text("checked out\n")
        subprocess.run(["git", "init", "-q", str(source)], check=True)
        subprocess.run(["git", "-C", str(source), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                       check=True)
    path = tmp_path / "wf.yml"
    path.write_text(yaml.safe_dump(workflow))
    return subprocess.run([sys.executable, str(SCRIPT), str(path), "--workspace", str(tmp_path / "ws"),
                           "--repo", f"local/harness={source}", *args], capture_output=True, text=True, timeout=120)


def test_a_job_runs_its_steps_as_a_runner_would(tmp_path):
    done = run(tmp_path, WORKFLOW, "--job", "first", "--job", "second", "--input", "who=you")
    assert done.returncode == 1, done.stdout + done.stderr  # `too slow` timed out and failed the first job
    out = done.stdout
    assert '== job first: runs-on ["1-gpu-h100"] (here, emulated)' in out
    assert "-- first: later: success" in out and "-- first: fails: failure" in out
    assert "timed out after 0.02 min" in out and "-- first: skipped after a failure: skipped" in out
    assert not (tmp_path / "ws" / "first" / "never.txt").exists()
    assert "-- second: read: success" in out  # always(): needs' outputs and the artifact reached it
    steps = json.loads((tmp_path / "ws" / "steps.json").read_text())
    assert [(s["job"], s["step"], s["outcome"]) for s in steps][:3] == [
        ("first", "actions/checkout@x", "success"), ("first", "say", "success"), ("first", "later", "success")]


@pytest.mark.parametrize(("change", "message"), [
    ({"uses": "some/action@v1", "timeout-minutes": 1}, "action 'some/action@v1': not one this runner stands in for"),
    ({"run": "true"}, "no timeout-minutes"),
    ({"run": "true", "shell": "python", "timeout-minutes": 1}, "shell 'python': only bash here"),
])
def test_what_it_cannot_run_stops_it_with_one_line(tmp_path, change, message):
    workflow = {**WORKFLOW, "jobs": {"only": {"runs-on": "x", "timeout-minutes": 1, "steps": [change]}}}
    done = run(tmp_path, workflow, "--job", "only", "--input", "who=me")
    assert done.returncode == 2 and message in done.stderr


def test_inputs_are_checked(tmp_path):
    assert "input who is required" in run(tmp_path, WORKFLOW, "--job", "first").stderr
    assert "--input nope: not an input of the workflow" in run(tmp_path, WORKFLOW, "--job", "first", "--input", "who=a",
                                                                "--input", "nope=1").stderr
