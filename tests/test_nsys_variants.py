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

SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float>(float*, float const*, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
PID = 4242 << 24
TID = PID + 4242

MODERN = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT",
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, "
                                  "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, graphId INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER",
    "NVTX_EVENTS": "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER, globalTid INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, "
                                  "globalPid INTEGER",
    "META_DATA_CAPTURE": "name TEXT, value TEXT",
}


def build(path: Path, schema: dict[str, str] | None = None, *, text_cells: bool = False,
          inline_nvtx: bool = False) -> Path:
    """The planted run in `schema` (table -> columns; columns a table lacks are left out)."""
    schema = schema or MODERN
    strings = {1: "cudaGraphLaunch_v10000", 2: "cudaLaunchKernel_v7000", 3: GEMM, 4: SOFTMAX, 5: "step[DECODE bs=1]"}
    kernels, runtime, nvtx = [], [], []
    t, correlation = 1_000_000_000, 100
    for _ in range(2):
        nvtx.append({"start": t, "end": t + 100_000, "eventType": 59, "textId": 5, "globalTid": TID})
        correlation += 1
        runtime.append({"start": t + 1000, "end": t + 5000, "globalTid": TID, "correlationId": correlation, "nameId": 1})
        for k, name in enumerate((3, 4, 3)):
            kernels.append({"start": t + 10_000 + 10_000 * k, "end": t + 18_000 + 10_000 * k, "deviceId": 0,
                            "streamId": 7, "correlationId": correlation, "globalPid": PID, "demangledName": name,
                            "shortName": name, "graphId": 3})
        t += 1_000_000
    correlation += 1
    runtime.append({"start": t, "end": t + 4000, "globalTid": TID, "correlationId": correlation, "nameId": 2})
    kernels.append({"start": t + 10_000, "end": t + 18_000, "deviceId": 0, "streamId": 7, "correlationId": correlation,
                    "globalPid": PID, "demangledName": 4, "shortName": 4, "graphId": None})
    rows = {
        "StringIds": [{"id": i, "value": v} for i, v in strings.items()],
        "CUPTI_ACTIVITY_KIND_KERNEL": kernels,
        "CUPTI_ACTIVITY_KIND_RUNTIME": runtime,
        "NVTX_EVENTS": [{**r, "text": strings[5] if inline_nvtx else None} for r in nvtx],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [],
        "META_DATA_CAPTURE": [{"name": "CUDA_GRAPH_TRACE_OPTIONS:MODE", "value": "Node"}],
    }
    with sqlite3.connect(path) as db:
        for table, columns in schema.items():
            db.execute(f"CREATE TABLE {table} ({columns})")
            names = [c.split()[0] for c in columns.split(", ")]
            for row in rows.get(table, []):
                values = [row.get(n) for n in names]
                if text_cells:  # every number stored as text, as a hand-made or converted export may
                    values = [str(v) if isinstance(v, int) else v for v in values]
                db.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})", values)
    db.close()
    return path


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
