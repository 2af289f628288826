"""`harness validate` on bad scenario files: one line `FILE:LINE: field: problem`, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
name: t
engine: micro
variants:
  baseline:
    args: {--disable-topk1-fast-path: true}
  candidate: {}
"""


def validate(*files: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_spec_harness.commands.cli", "validate", *map(str, files)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "workload:\n  concurency: 2\n", "s.yaml:8: workload.concurency: unknown key"),
        (GOOD + "trials:\n  repetitions: lots\n", "s.yaml:8: trials.repetitions: Input should be a valid integer"),
        (GOOD.replace("  candidate: {}\n", ""), "s.yaml:3: variants: missing variant(s) candidate"),
        (GOOD + "patterns:\n  mine: 'soft(max'\n", "s.yaml:8: patterns.mine: not a valid regular expression"),
        (GOOD + "regions:\n  rules:\n    - {name: DRAFT_DECODE, regex: '[unclosed'}\n",
         "s.yaml:9: regions.rules.0.regex: not a valid regular expression"),
    ],
)
def test_bad_scenarios_give_one_line_with_file_and_line(tmp_path, text, expected):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = validate(path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"harness validate: {tmp_path}/{expected}"), lines[0]


def test_unreadable_file(tmp_path):
    result = validate(tmp_path / "absent.yaml")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"harness validate: {tmp_path}/absent.yaml: no such file"
    (tmp_path / "dir.yaml").mkdir()
    result = validate(tmp_path / "dir.yaml")
    assert result.returncode == 2 and "is a directory" in result.stderr and "Traceback" not in result.stderr


def test_shipped_scenarios_validate():
    scenarios = sorted((REPO / "scenarios").glob("*.yaml"))
    result = validate(*scenarios)
    assert result.returncode == 0, result.stderr
    assert "micro_topk1.yaml: ok" in result.stdout and "micro_topk4_control.yaml: ok" in result.stdout


def test_validate_and_scenario_info_take_a_shipped_scenarios_name_as_run_does(tmp_path):
    def harness(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    shipped = REPO / "scenarios" / "micro_topk1.yaml"
    for name in ("micro_topk1", "micro_topk1.yaml"):
        result = harness("validate", name)
        assert result.returncode == 0 and result.stdout.startswith(f"{shipped}: ok (micro_topk1: engine micro"), result.stderr
    result = harness("scenario-info", "--json", "micro_topk1", "sglang_cpu_tiny_eagle_topk1")
    assert result.returncode == 0, result.stderr
    # `scenario` stays as given: what CI then hands to `harness run`, which resolves it the same way
    assert [(i["scenario"], i["name"]) for i in json.loads(result.stdout)] == [
        ("micro_topk1", "micro_topk1"), ("sglang_cpu_tiny_eagle_topk1", "sglang_cpu_tiny_eagle_topk1")]
    # a file of that name (here, in the working directory) wins, as it does for `harness run`
    (tmp_path / "micro_topk1").write_text(GOOD)
    assert harness("validate", "micro_topk1").stdout.startswith("micro_topk1: ok (t: engine micro")
    assert json.loads(harness("scenario-info", "--json", "micro_topk1").stdout)[0]["name"] == "t"
    result = harness("validate", "no_such_scenario")
    assert result.returncode == 2 and result.stderr.startswith(
        "harness validate: no_such_scenario: no such file, nor a shipped scenario of that name (shipped: ")
