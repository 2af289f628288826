"""A run directory written by main before the functions per region were stored (commit 6adcd33,
tests/fixtures/README.md) still opens in `harness report`, `check` and `history ingest` (a database
of schema version 3, no functions for it); `harness analyze --run-dir` then reads them from its
with_stack traces, and the next ingest stores them."""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.history import db

FIXTURE = Path(__file__).parent / "fixtures" / "run_main_6adcd33_micro_topk1_stacks.tar.gz"
RUN = "20261205-090506-micro_topk1"
RULES = {"candidate_no_softmax_draft_decode": "PASS", "candidate_no_softmax_draft_extend": "PASS",
         "baseline_has_softmax_draft_decode": "PASS", "accept_length_unchanged": "PASS",
         "greedy_outputs_identical": "PASS", "tpot_improved": "INCONCLUSIVE",
         "gain_explained_by_softmax": "INCONCLUSIVE", "outputs_valid": "PASS"}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / RUN


def _functions(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as conn:
        return conn.execute("select variant, region, file, function, calls from region_functions").fetchall()


def test_a_run_from_main_opens_in_report_check_and_ingest(run_dir, tmp_path):
    stored = json.loads((run_dir / "analysis.json").read_text())
    assert all("region_functions" not in f for t in stored["trials"].values() for f in t["files"])
    assert json.loads((run_dir / "environment.json").read_text())["harness"]["git_commit"].startswith("6adcd33")

    assert main(["report", str(run_dir)]) == 0
    assert "INCONCLUSIVE" in (run_dir / "index.html").read_text()
    assert main(["check", str(run_dir)]) == 3
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "INCONCLUSIVE"
    assert {r["name"]: r["verdict"] for r in results["rules"] if not r["name"].startswith("run_")} == RULES

    database = tmp_path / "history.sqlite"
    assert main(["history", "ingest", str(run_dir), "--db", str(database)]) == 0
    with sqlite3.connect(database) as conn:
        assert conn.execute("select status, verdict from runs").fetchone() == ("complete", "INCONCLUSIVE")
        assert conn.execute("select value from harness_meta where key = 'schema_version'").fetchone() == (
            str(db.SCHEMA_VERSION),)
    assert _functions(database) == []  # analysed before the functions were stored


def test_its_functions_come_from_its_traces_after_analyze_run_dir(run_dir, tmp_path):
    database = tmp_path / "history.sqlite"
    assert main(["history", "ingest", str(run_dir), "--db", str(database)]) == 0
    before = json.loads((run_dir / "analysis.json").read_text())
    assert main(["analyze", "--run-dir", str(run_dir)]) == 0
    after = json.loads((run_dir / "analysis.json").read_text())
    for name, trial in after["trials"].items():  # the same counts, and now the functions
        assert trial["combined"]["counts"] == before["trials"][name]["combined"]["counts"]
    assert main(["history", "ingest", str(run_dir), "--db", str(database)]) == 0
    rows = _functions(database)
    regions = {(variant, region) for variant, region, *_ in rows}
    assert {("candidate", "DRAFT_DECODE"), ("baseline", "DRAFT_DECODE")} <= regions
    draft = {(file, function) for variant, region, file, function, _ in rows
             if variant == "candidate" and region == "DRAFT_DECODE"}
    assert any(file.startswith("sglang_spec_harness/micro/") for file, _ in draft)
