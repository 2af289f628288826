"""`harness history export`: a real history database (planted nightly runs evaluated by the real
rules, an A/A run and a damaged copy, ingested as `harness history ingest` does) written as CSV and
Parquet, read back with pandas; bad input is one line and exit 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sglang_spec_harness.history import db
from sglang_spec_harness.history.export import COLUMNS
from sglang_spec_harness.history.ingest import find_run_dirs, ingest
from support.history_helpers import series_run

REPO = Path(__file__).resolve().parents[1]
RUNS, AA_RUNS = 3, 1
# per planted run: 2 variants x (tpot_ms, accept_length); rules: tpot, accept, identity, explained and
# two kernel counts; an A/A run: accept, identity and the noise floor
METRICS_PER_RUN = 4
RULES_PER_RUN, RULES_PER_AA_RUN = 6, 3


def harness(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    command = ["-c", code] if code else ["-m", "sglang_spec_harness.commands.cli", *args]
    return subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("history_export")
    for i in range(1, RUNS + 1):
        series_run(root, i, base_tpot=20.0, cand_tpot=15.0)
    series_run(root, 1, base_tpot=20.0, cand_tpot=20.0, aa=True, seed=1)
    damaged = root / "runs" / "20260310-020000-planted-damaged"
    shutil.copytree(root / "runs" / "20260302-020000-planted", damaged)
    (damaged / "results.json").write_text('{"verdict": "PA')  # cut short
    path = root / "history.sqlite"
    engine = db.open_database(path)
    ingest(engine, find_run_dirs([root / "runs"]))
    engine.dispose()
    return path


def expected_rows() -> dict[str, int]:
    return {"run": RUNS + AA_RUNS + 1, "metric": (RUNS + AA_RUNS) * METRICS_PER_RUN,
            "rule": RUNS * RULES_PER_RUN + AA_RUNS * RULES_PER_AA_RUN}


def check_table(table: pd.DataFrame) -> None:
    assert list(table.columns) == list(COLUMNS)
    assert table["record"].value_counts().to_dict() == expected_rows()
    assert len(table) == sum(expected_rows().values())
    runs = table[table["record"] == "run"]
    assert runs["status"].value_counts().to_dict() == {"complete": RUNS + AA_RUNS, "damaged": 1}
    assert runs["aa"].tolist().count(True) == AA_RUNS
    # a metric row summarises the run's samples of one variant
    tpot = table[(table["record"] == "metric") & (table["name"] == "tpot_ms") & (table["variant"] == "candidate")
                 & (table["aa"] == False)]  # noqa: E712 (a pandas mask)
    assert tpot["n"].tolist() == [6] * RUNS
    assert all(14 < m < 16 for m in tpot["median"]) and all(tpot["min"] <= tpot["median"]) and all(tpot["median"] <= tpot["max"])
    # a rule row carries its verdict and, where its numbers have them, the ratio and its interval
    gain = table[(table["record"] == "rule") & (table["name"] == "tpot")]
    assert gain["rule_verdict"].tolist() == ["PASS"] * RUNS and gain["kind"].tolist() == ["tpot_gain"] * RUNS
    assert all(gain["ci_low"] <= gain["ratio"]) and all(gain["ratio"] <= gain["ci_high"]) and all(gain["ratio"] < 0.8)
    # every row repeats its run's columns; runs in start-time order, each run's own row first
    assert table["run"].notna().all() and table["scenario"].notna().all()
    assert table["started"].tolist() == sorted(table["started"].tolist())
    assert table.groupby("run", sort=False)["record"].first().eq("run").all()


def test_csv_export_reads_back_with_every_row(database, tmp_path):
    out = tmp_path / "history.csv"
    done = harness("history", "export", "--db", str(database), "--format", "csv", "--out", str(out))
    assert done.returncode == 0, done.stderr
    total = sum(expected_rows().values())
    assert done.stderr.strip() == f"{total} rows ({RUNS + AA_RUNS + 1} runs) written to {out}"
    check_table(pd.read_csv(out, dtype=COLUMNS))


def test_csv_export_to_stdout(database):
    done = harness("history", "export", "--db", str(database))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ",".join(COLUMNS)
    assert len(done.stdout.splitlines()) == 1 + sum(expected_rows().values())


def test_parquet_export_reads_back_with_its_types(database, tmp_path):
    out = tmp_path / "history.parquet"
    done = harness("history", "export", "--db", str(database), "--format", "parquet", "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_parquet(out)
    check_table(table)
    assert {name: str(dtype) for name, dtype in table.dtypes.items()} == COLUMNS


@pytest.mark.parametrize(("args", "line"), [
    (["--db", "{tmp}/absent.sqlite"],
     "harness history: --db {tmp}/absent.sqlite: no such database file (create it with `harness history ingest RUN_DIR`)"),
    (["--db", "{tmp}/not-a-database.sqlite"],
     "harness history: --db sqlite:///{tmp}/not-a-database.sqlite: cannot open the database (file is not a database)"),
    (["--db", "{db}", "--format", "xlsx"],
     "harness history export: error: argument --format: invalid choice: 'xlsx' (choose from "),  # quoting: by Python version
    (["--db", "{db}", "--format", "parquet"],
     "harness history: --format parquet: give --out FILE (Parquet is binary, not for a terminal)"),
    (["--db", "{db}", "--out", "{tmp}/no/such/dir/h.csv"],
     "harness history: --out {tmp}/no/such/dir/h.csv: no such directory {tmp}/no/such/dir"),
])
def test_bad_input_is_one_line_and_exit_2(database, tmp_path, args, line):
    fill = {"tmp": str(tmp_path), "db": str(database)}
    (tmp_path / "not-a-database.sqlite").write_text("run,verdict\n")
    done = harness("history", "export", *(a.format(**fill) for a in args))
    (said,) = done.stderr.splitlines()
    assert (done.returncode, done.stdout) == (2, "") and said.startswith(line.format(**fill)), done.stderr
    assert not (tmp_path / "absent.sqlite").exists()  # an export never creates a database


def test_parquet_without_pyarrow_names_the_extra(database, tmp_path):
    code = ("import sys\n"
            "sys.modules['pyarrow'] = None  # not installed\n"
            "from sglang_spec_harness.commands.cli import main\n"
            f"sys.exit(main(['history', 'export', '--db', {str(database)!r}, '--format', 'parquet', "
            f"'--out', {str(tmp_path / 'h.parquet')!r}]))\n")
    done = harness(code=code)
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        "harness history: needs the [parquet] extra: pip install 'sglang-spec-harness[parquet]'"])
    assert not (tmp_path / "h.parquet").exists()
