"""The run as a library call (`sglang_spec_harness.pipeline`, `sglang_spec_harness.testing.run_scenario`): a real
micro run on loopback returns its typed outcome, a test written as SGLang writes its own (a unittest file run as
`python3 FILE`) passes on it and fails on a planted softmax, and `harness run --json` is that outcome's document."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.tiny_scenario import write_scenario

from sglang_spec_harness.commands import cli
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.pipeline import DryRunPlan, run_scenario_file
from sglang_spec_harness.rundir import ResultsRecord
from sglang_spec_harness.testing import run_scenario

pytestmark = pytest.mark.slow
JSON_KEYS = ["schema_version", "scenario", "status", "run_dir", "verdict", "exit_code", "error", "results", "report"]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    root = tmp_path_factory.mktemp("library")
    return run_scenario(write_scenario(root), overrides=["trials.repetitions=2"], out_root=root / "runs")


def test_the_outcome_holds_the_run_its_checks_and_its_report(outcome):
    run_dir = outcome.run_dir
    assert (outcome.status, outcome.verdict, outcome.exit_code, outcome.error) == ("complete", "PASS", 0, None)
    assert isinstance(outcome.results, ResultsRecord)
    assert outcome.results == ResultsRecord.model_validate_json((run_dir / "results.json").read_text())
    assert [(r.name, r.verdict) for r in outcome.results.rules if r.kind != "validity"] == [
        ("no_softmax", "PASS"), ("same_outputs", "PASS"), ("outputs_valid", "PASS")]  # the last added to every run
    assert outcome.report == run_dir / "index.html" and outcome.report.stat().st_size > 0
    assert (run_dir / "junit.xml").is_file() and (run_dir / "summary.md").is_file()
    assert outcome.scenario.trials.repetitions == 2  # the scenario as it ran, overrides applied
    assert [t.dir_name for t in outcome.run.plan] == sorted(p.name for p in (run_dir / "trials").iterdir())
    assert outcome.plan is None and outcome.interrupted_by is None and outcome.evaluation_error is None


def test_its_json_document_is_harness_run_json(outcome):
    document = outcome.to_json_dict()
    assert list(document) == JSON_KEYS  # the keys and their order of `harness run --json` (test_runner.py runs it)
    assert document["results"] == json.loads((outcome.run_dir / "results.json").read_text())
    assert document == {"schema_version": 1, "scenario": "tiny", "status": "complete", "run_dir": str(outcome.run_dir),
                        "verdict": "PASS", "exit_code": 0, "error": None, "results": document["results"],
                        "report": str(outcome.run_dir / "index.html")}


def test_a_dry_run_gives_its_plan_and_starts_nothing(tmp_path, capsys):
    path = write_scenario(tmp_path)
    planned = run_scenario_file(path, overrides=["trials.repetitions=3"], dry_run=True, out_root=tmp_path / "runs")
    assert (planned.status, planned.exit_code, planned.run_dir, planned.results) == ("planned", 0, None, None)
    assert isinstance(planned.plan, DryRunPlan) and len(planned.plan.trials) == 2 + 2 * 3
    assert not (tmp_path / "runs").exists()
    code = cli.main(["run", str(path), "--dry-run", "--json", "--set", "trials.repetitions=3"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and list(printed) == [*JSON_KEYS, "plan"]
    assert printed == {**planned.to_json_dict(), "plan": printed["plan"]}
    assert printed["plan"] == {"mode": planned.plan.mode, "trials": planned.plan.trials,
                               "launches": planned.plan.launches, "commands": planned.plan.commands}


def test_bad_input_raises_before_any_server_starts(tmp_path):
    path = write_scenario(tmp_path)
    with pytest.raises(HarnessInputError, match="trials.repetitions"):
        run_scenario(path, overrides=["trials.repetitions=0"], out_root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# ---- in SGLang's test style: a unittest file run as `python3 FILE` --------------------------------

UNITTEST_FILE = '''
import unittest

from sglang_spec_harness.testing import run_scenario


class TestTopk1FastPath(unittest.TestCase):
    def test_the_scenario_passes(self):
        outcome = run_scenario({scenario!r}, out_root={out!r})
        failed = [(r.name, r.reason) for r in outcome.results.rules if r.verdict != "PASS"]
        self.assertEqual(outcome.verdict, "PASS", failed)
        self.assertEqual(outcome.exit_code, 0)


if __name__ == "__main__":
    unittest.main()
'''


@pytest.mark.parametrize("planted", [False, True], ids=["unmodified", "softmax planted"])
def test_a_unittest_file_run_as_python3_passes_or_fails_on_the_outcome(tmp_path, planted):
    # planted: the candidate runs without the fast path, so its draft keeps the softmax
    candidate = {"args": {"--disable-topk1-fast-path": True}} if planted else None
    scenario = write_scenario(tmp_path, candidate=candidate)
    test_file = tmp_path / "test_topk1.py"
    test_file.write_text(textwrap.dedent(UNITTEST_FILE).format(scenario=str(scenario), out=str(tmp_path / "runs")))
    done = subprocess.run([sys.executable, str(test_file)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if planted:
        assert done.returncode == 1 and "FAILED (failures=1)" in done.stderr, done.stderr
        assert "'FAIL'> != 'PASS' : [('no_softmax', " in done.stderr
        assert "softmax in DRAFT_DECODE per replay" in done.stderr and "expected == 0" in done.stderr
    else:
        assert done.returncode == 0 and done.stderr.rstrip().endswith("OK"), done.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and not p.is_symlink()]
    assert json.loads((run_dir / "results.json").read_text())["verdict"] == ("FAIL" if planted else "PASS")
    assert Path(run_dir / "index.html").is_file()
