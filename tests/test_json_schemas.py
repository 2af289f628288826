"""The committed JSON Schemas of results.json, analysis.json and `harness run --json`'s output
(docs/schemas): current with the models they are generated from, and true of real run directories (a
whole GPU run from an H200, a run of the micro engine, planted runs evaluated by the real rules) and
of real `harness run --json` outputs, validated with `jsonschema`."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest

from sglang_spec_harness.verdict.judge import check_run_dir
from support.history_helpers import micro_sweep, series_run
from support.tiny_scenario import write_scenario

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "docs" / "schemas"
FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(REPO / "scripts"))
import json_schemas  # noqa: E402  (scripts/ is not a package)


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid(run_dir: Path) -> None:
    for name in ("results", "analysis"):
        document = json.loads((run_dir / f"{name}.json").read_text())
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(name).iter_errors(document)]
        assert errors == [], f"{run_dir.name}/{name}.json: {errors[:5]}"


def test_the_committed_schemas_are_current():
    assert json_schemas.main(["--check"]) == 0, "regenerate: python scripts/json_schemas.py"


def test_the_drift_check_names_a_stale_schema(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "results.schema.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(json_schemas, "REPO", tmp_path)
    monkeypatch.setattr(json_schemas, "SCHEMAS", {stale: lambda: json_schemas.record_json_schema("results")})
    assert json_schemas.main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "results.schema.json: differs from the model it is generated from; regenerate: python scripts/json_schemas.py"]


def test_validate_prints_each_schema():
    for name in ("results", "analysis", "run"):
        done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "validate", "--schema", name], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == (SCHEMAS / f"{name}.schema.json").read_text()


def test_a_whole_gpu_run_validates(tmp_path):
    with tarfile.open(FIXTURES / "run_micro_topk1_gpu_h200.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    run_dir = tmp_path / "micro_topk1_gpu_h200"
    assert_valid(run_dir)  # as recorded on the H200
    check_run_dir(run_dir)  # and as this harness's `check` writes it
    assert_valid(run_dir)


def test_planted_runs_validate(tmp_path):
    """Every rule kind (kernel counts, accept length, identity, TPOT, explained gain, the A/A noise floor)."""
    assert_valid(series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=15.0))
    assert_valid(series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=20.0, aa=True, seed=1))


@pytest.mark.slow
def test_a_micro_engine_run_validates(tmp_path):
    (run_dir,) = micro_sweep(tmp_path, [True])
    assert_valid(run_dir)


def test_the_schemas_refuse_what_the_models_refuse(tmp_path):
    run_dir = series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=15.0)
    results = json.loads((run_dir / "results.json").read_text())
    results["verdict"] = "MAYBE"
    del results["rules"][0]["reason"]
    errors = list(validator("results").iter_errors(results))
    assert [e.message for e in errors if e.path[0] == "verdict"] == ["'MAYBE' is not one of ['PASS', 'FAIL', 'INCONCLUSIVE', 'INFO', 'NOT_RUN']"]
    # a rule is one of the kinds' schemas: its own kind's says what is wrong, every other one that the kind differs
    (rule,) = [e for e in errors if e.path[0] == "rules"]
    assert list(rule.path) == ["rules", 0]
    branches: dict[int, list[str]] = {}
    for c in rule.context:
        branches.setdefault(c.relative_schema_path[0], []).append(c.message)
    assert [m for m in branches.values() if not any(x.endswith("was expected") for x in m)] == [
        ["'reason' is a required property"]]
    analysis = json.loads((run_dir / "analysis.json").read_text())
    trial = next(iter(analysis["trials"].values()))
    trial["files"][0]["format"] = "perfetto"
    assert [e.message for e in validator("analysis").iter_errors(analysis)] == ["'perfetto' is not one of ['kineto', 'nsys']"]


def run_json(*args: str | Path, cwd: Path) -> tuple[int, dict]:
    """`harness run --json ARGS` as a CI step runs it: its exit status and the one object on stdout."""
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", "--json", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_run_json_outputs_validate(tmp_path):
    """A dry run, a real micro-engine run (its results.json inside), an incomplete one, and bad input."""
    run = validator("run")
    path = write_scenario(tmp_path)
    (tmp_path / "bad").mkdir()
    outputs = {
        "dry run": run_json(path, "--dry-run", cwd=tmp_path),
        "run": run_json(path, "--out", tmp_path / "runs", "--no-progress", cwd=tmp_path),
        "incomplete": run_json(write_scenario(tmp_path / "bad", candidate={"args": {"--no-such-flag": True}}),
                               "--out", tmp_path / "runs-bad", "--no-progress", cwd=tmp_path),
        "bad input": run_json(tmp_path / "absent.yaml", cwd=tmp_path),
        "usage error": run_json(path, "--repetitions", "0", cwd=tmp_path),
    }
    for what, (code, outcome) in outputs.items():
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in run.iter_errors(outcome)]
        assert errors == [], f"{what}: {errors[:5]}"
        assert outcome["exit_code"] == code, what
    assert [outputs[w][1]["status"] for w in outputs] == ["planned", "complete", "incomplete", "bad_input", "bad_input"]
    assert outputs["run"][1]["results"]["verdict"] == outputs["run"][1]["verdict"]
    assert outputs["bad input"][1]["error"].startswith(f"{tmp_path}/absent.yaml: no such file")
    # the schema is not blind: a field the model does not know, or a status it does not name, fails it
    assert not run.is_valid({**outputs["run"][1], "extra": 1}) and not run.is_valid({**outputs["run"][1], "status": "done"})
