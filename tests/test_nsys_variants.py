"""Nsight Systems SQLite exports across versions: optional tables and columns absent, columns
holding another SQLite type than the schema says (SQLite keeps whatever a row was given), and
one clear line when a column the analysis needs holds no number.

The planted run, as `nsys export --type sqlite` writes it: 2 `cudaGraphLaunch_v10000` calls in
NVTX `step[DECODE bs=1]` ranges, each replaying 3 kernels (1 softmax), and 1 eager softmax
launched by `cudaLaunchKernel_v7000` outside any range. Graph-trace mode Node.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import EXIT_BAD_INPUT, HarnessInputError
from sglang_spec_harness.traces import analyze_traces, read_trace
from support.nsys_exports import MODERN, build


def planted_structure_found(path: Path) -> None:
    file = analyze_traces([path]).files[0]
    assert file.format == "nsys"
    assert file.graph_launches == 2
    assert file.kernels_per_graph_launch == {3: 2}
    row = file.regions["DRAFT_DECODE"].counts["softmax"]
    assert (row.unit, row.replays, row.total, row.per_replay_min, row.per_replay_max) == ("graph_launch", 2, 2, 1, 1)
    total = file.pattern_totals[0]
    assert (total.total, total.in_graph_launches, total.eager) == (3, 2, 1)


def without(table: str, *columns: str) -> dict[str, str]:
    schema = dict(MODERN)
    schema[table] = ", ".join(c for c in schema[table].split(", ") if c.split()[0] not in columns)
    return schema


def test_modern_export(tmp_path):
    planted_structure_found(build(tmp_path / "modern.sqlite"))


def test_older_export_without_graph_ids_text_ids_metadata_or_copies(tmp_path):
    schema = without("NVTX_EVENTS", "textId")
    schema = {**schema, "CUPTI_ACTIVITY_KIND_KERNEL": without("CUPTI_ACTIVITY_KIND_KERNEL", "graphId", "demangledName")[
        "CUPTI_ACTIVITY_KIND_KERNEL"]}
    del schema["META_DATA_CAPTURE"], schema["CUPTI_ACTIVITY_KIND_MEMCPY"]
    path = build(tmp_path / "older.sqlite", schema, inline_nvtx=True)
    planted_structure_found(path)
    assert read_trace(path).graph_trace_mode is None


def test_export_without_optional_id_columns(tmp_path):
    schema = without("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "streamId")
    tables = read_trace(build(tmp_path / "no-ids.sqlite", schema))
    assert tables.gpu_ops["device"].tolist() == [-1] * 7 and tables.gpu_ops["stream"].tolist() == [-1] * 7


def test_numbers_stored_as_text(tmp_path):
    planted_structure_found(build(tmp_path / "text.sqlite", text_cells=True))


def test_no_nvtx_table_and_no_kernel_table(tmp_path):
    schema = {k: v for k, v in MODERN.items() if k not in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL")}
    tables = read_trace(build(tmp_path / "runtime-only.sqlite", schema))
    assert (len(tables.gpu_ops), len(tables.runtime), len(tables.annotations)) == (0, 3, 0)


def test_names_stored_as_blobs(tmp_path):
    path = build(tmp_path / "blob.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE StringIds SET value = CAST(value AS BLOB)")
    db.close()
    planted_structure_found(path)


@pytest.mark.parametrize(
    "sql, message",
    [
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 2",
         "table CUPTI_ACTIVITY_KIND_KERNEL column 'start': 'soon' is not a number"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = x'00ff' WHERE rowid = 1",
         "table CUPTI_ACTIVITY_KIND_RUNTIME column 'correlation'"),
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = NULL WHERE rowid = 1",
         "table CUPTI_ACTIVITY_KIND_KERNEL: a row without a start or end time"),
        ("ALTER TABLE NVTX_EVENTS DROP COLUMN start", "table NVTX_EVENTS has no column 'start'"),
    ],
    ids=["text-start", "blob-correlation", "null-end", "no-start-column"],
)
def test_a_needed_column_without_numbers_is_one_clear_line(tmp_path, capsys, sql, message):
    path = build(tmp_path / "bad.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(sql)
    db.close()
    with pytest.raises(HarnessInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(path)
    assert main(["analyze", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
