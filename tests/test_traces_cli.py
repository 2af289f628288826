"""`harness analyze`: the table, the JSON document, and one clear line (exit 2) for bad input."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import EXIT_BAD_INPUT

A100 = "hta_negative_queue_length_rank0.json.gz"
QWEN3_ROCM = "tracelens_sglang_qwen3_8b_decode_rocm.json.gz"
XDIT = "tracelens_xdit_flux1_aiter_sage_profile_rocm.json.gz"


def test_table_output(shared_traces, capsys):
    assert main(["analyze", str(shared_traces / QWEN3_ROCM)]) == 0
    out = capsys.readouterr().out
    assert "kernels per graph launch (launches x kernels): 1x544" in out
    assert "DRAFT_DECODE" in out and "graph_launch" in out
    assert "warning: DRAFT_DECODE found but no TARGET_VERIFY" in out


def test_json_output_and_output_file(shared_traces, capsys, tmp_path):
    written = tmp_path / "analysis.json"
    assert main(["analyze", str(shared_traces / A100), "--json", "-o", str(written)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert json.loads(written.read_text()) == document
    assert document["schema_version"] == 1
    assert document["patterns"] == {"softmax": r"cunn_SoftMaxForward|softmax_warp_forward|^aten::_softmax$"}
    file = document["files"][0]
    assert file["graph_launches"] == 70
    assert file["kernels_per_graph_launch"] == {"1": 35, "2": 30, "8": 5}
    assert document["combined"]["graph_launches"] == 70


def test_count_and_region_flags(shared_traces, capsys):
    argv = ["analyze", str(shared_traces / XDIT), "--json", "--count", "any=.", "--count", "softmax=softmax_warp",
            "--region", "FX=^## Call CompiledFxGraph"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["region_table"][0] == {"name": "FX", "regex": "^## Call CompiledFxGraph"}
    fx = document["files"][0]["regions"]["FX"]
    assert (fx["unit"], fx["units"]) == ("graph_launch", 4)
    assert fx["counts"]["any"]["per_replay_histogram"] == {"1566": 4}
    assert fx["counts"]["softmax"]["total"] == 0


def _bad_inputs(tmp: Path, shared: Path) -> dict[str, Path]:
    real = gzip.decompress((shared / QWEN3_ROCM).read_bytes())
    files = {
        "missing": tmp / "missing.json",
        "bad gzip": tmp / "bad.json.gz",
        "truncated gzip": tmp / "truncated.json.gz",
        "bad json": tmp / "notes.json",
        "truncated json": tmp / "truncated.json",
        "no traceEvents": tmp / "other.json",
        "empty traceEvents": tmp / "empty.json",
        "empty file": tmp / "zero.json",
        "wrong sqlite schema": tmp / "other.sqlite",
        "directory": tmp,
    }
    files["bad gzip"].write_bytes(b"\x1f\x8b\x08\x00" + b"not really gzip" * 10)
    files["truncated gzip"].write_bytes((shared / QWEN3_ROCM).read_bytes()[:5000])
    files["bad json"].write_text("this is a text file, not a trace\n")
    files["truncated json"].write_bytes(real[: len(real) // 2])
    files["no traceEvents"].write_text('{"schemaVersion": 1, "events": []}')
    files["empty traceEvents"].write_text('{"schemaVersion": 1, "traceEvents": []}')
    files["empty file"].write_bytes(b"")
    with sqlite3.connect(files["wrong sqlite schema"]) as db:
        db.execute("CREATE TABLE notes (id INTEGER, text TEXT)")
    return files


@pytest.fixture
def bad_inputs(tmp_path, shared_traces):
    return _bad_inputs(tmp_path, shared_traces)


EXPECTED_PROBLEM = {
    "missing": "no such file",
    "bad gzip": "not a valid gzip file",
    "truncated gzip": "truncated gzip file",
    "bad json": "not a trace",
    "truncated json": "not valid JSON",
    "no traceEvents": "no traceEvents array",
    "empty traceEvents": "empty traceEvents",
    "empty file": "empty file",
    "wrong sqlite schema": "not an Nsight Systems SQLite export",
    "directory": "is a directory",
}


@pytest.mark.parametrize("case", sorted(EXPECTED_PROBLEM))
def test_bad_input_is_one_line_and_exit_2(case, bad_inputs, capsys):
    path = bad_inputs[case]
    assert main(["analyze", str(path)]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert str(path) in lines[0] and EXPECTED_PROBLEM[case] in lines[0]
    assert captured.out == ""


def test_bad_pattern_flags_exit_2(shared_traces, capsys):
    assert main(["analyze", str(shared_traces / A100), "--count", "broken=("]) == EXIT_BAD_INPUT
    assert "--count 'broken=(': invalid regular expression" in capsys.readouterr().err
    assert main(["analyze", str(shared_traces / A100), "--region", "NOEQUALS"]) == EXIT_BAD_INPUT
    assert "--region 'NOEQUALS': expected NAME=REGEX" in capsys.readouterr().err


def test_subprocess_bad_input_has_no_traceback(bad_inputs):
    """The installed entry point, end to end: one line, exit 2, no traceback."""
    path = bad_inputs["truncated gzip"]
    result = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "analyze", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"harness analyze: {path}: truncated gzip file (ends before the end of the stream)"
