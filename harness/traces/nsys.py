"""Nsight Systems SQLite exports (`nsys export --type sqlite`): kernels, memcpys, memsets,
runtime calls and NVTX ranges, read with SQL into the same model as Kineto traces."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing

import numpy as np
import pandas as pd

from harness.errors import HarnessInputError
from harness.traces.model import (
    GPU_OP_COLUMNS,
    RUNTIME_COLUMNS,
    SPAN_COLUMNS,
    TraceTables,
    empty_frame,
    frame_from_columns,
)

REQUIRED_TABLES = ("StringIds",)
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
# A globalTid holds its process in the bits above 24 (schema docs): globalPid = tid // 2**24 * 2**24.
_PID_UNIT = 1 << 24
NVTX_RANGE_EVENT_TYPES = (59, 60)  # push/pop, start/end
GRAPH_TRACE_MODE_KEY = "CUDA_GRAPH_TRACE_OPTIONS:MODE"
# `torch.autograd.profiler.emit_nvtx` appends `, seq = N, op_id = M, sizes = [...]` to each name.
_EMIT_NVTX_SUFFIX = re.compile(r", (?:seq|op_id) = .*$", re.DOTALL)
_NS_PER_US = 1000.0


def read_nsys(path: str) -> TraceTables:
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        raise HarnessInputError(f"{path}: cannot open as SQLite: {exc}") from None
    with closing(connection):
        try:
            return _read(path, connection)
        except sqlite3.DatabaseError as exc:
            raise HarnessInputError(f"{path}: unreadable Nsight Systems export: {exc}") from None


def _read(path: str, db: sqlite3.Connection) -> TraceTables:
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing or not tables.intersection(ACTIVITY_TABLES):
        raise HarnessInputError(
            f"{path}: not an Nsight Systems SQLite export: needs tables StringIds and "
            f"{' or '.join(ACTIVITY_TABLES)}"
        )
    gpu_ops = pd.concat(
        [
            _kernels(db, tables),
            _copies(db, tables, "CUPTI_ACTIVITY_KIND_MEMCPY", "Memcpy", "memcpy"),
            _copies(db, tables, "CUPTI_ACTIVITY_KIND_MEMSET", "Memset", "memset"),
        ],
        ignore_index=True,
    )
    annotations, cpu_ops = _nvtx(db, tables)
    return TraceTables(
        path=path,
        format="nsys",
        platform="cuda",
        gpu_ops=_typed(gpu_ops, GPU_OP_COLUMNS),
        runtime=_runtime(db, tables),
        annotations=annotations,
        cpu_ops=cpu_ops,
        graph_trace_mode=_graph_trace_mode(db, tables),
    )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _kernels(db: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if table not in tables:
        return empty_frame(GPU_OP_COLUMNS)
    graph_id = "k.graphId" if "graphId" in _columns(db, table) else "NULL"
    return pd.read_sql_query(
        f"""SELECT s.value AS name, 'kernel' AS kind, k.start, k."end", k.correlationId AS correlation,
                   k.globalPid AS pid, k.deviceId AS device, k.streamId AS stream, {graph_id} AS graph_id
            FROM {table} k LEFT JOIN StringIds s ON s.id = k.demangledName""",
        db,
    )


def _copies(db: sqlite3.Connection, tables: set[str], table: str, name: str, kind: str) -> pd.DataFrame:
    if table not in tables:
        return empty_frame(GPU_OP_COLUMNS)
    return pd.read_sql_query(
        f"""SELECT '{name}' AS name, '{kind}' AS kind, start, "end", correlationId AS correlation,
                   globalPid AS pid, deviceId AS device, streamId AS stream, NULL AS graph_id
            FROM {table}""",
        db,
    )


def _runtime(db: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in tables:
        return empty_frame(RUNTIME_COLUMNS)
    frame = pd.read_sql_query(
        f"""SELECT s.value AS name, r.globalTid AS tid, r.start, r."end", r.correlationId AS correlation
            FROM {table} r LEFT JOIN StringIds s ON s.id = r.nameId""",
        db,
    )
    frame["pid"] = frame["tid"] // _PID_UNIT * _PID_UNIT
    return _typed(frame, RUNTIME_COLUMNS)


def _nvtx(db: sqlite3.Connection, tables: set[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NVTX ranges are the annotations; those that `emit_nvtx` wrote for ops are also CPU ops."""
    if "NVTX_EVENTS" not in tables:
        return empty_frame(SPAN_COLUMNS), empty_frame(SPAN_COLUMNS)
    types = ", ".join(str(t) for t in NVTX_RANGE_EVENT_TYPES)
    frame = pd.read_sql_query(
        f"""SELECT COALESCE(n.text, s.value, '') AS name, n.globalTid AS tid, n.start, n."end"
            FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType IN ({types}) AND n."end" IS NOT NULL""",
        db,
    )
    frame["pid"] = frame["tid"] // _PID_UNIT * _PID_UNIT
    is_op = frame["name"].str.contains(_EMIT_NVTX_SUFFIX)
    frame["name"] = frame["name"].str.replace(_EMIT_NVTX_SUFFIX, "", regex=True)
    frame["kind"] = np.where(is_op, "cpu_op", "nvtx")
    return _typed(frame, SPAN_COLUMNS), _typed(frame[is_op.to_numpy()], SPAN_COLUMNS)


def _graph_trace_mode(db: sqlite3.Connection, tables: set[str]) -> str | None:
    if "META_DATA_CAPTURE" not in tables:
        return None
    row = db.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = ?", (GRAPH_TRACE_MODE_KEY,)).fetchone()
    return row[0] if row else None


def _typed(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Nanosecond start/end -> microsecond ts/dur; NULL ids -> -1; the model's column types."""
    if "start" in frame:
        frame = frame.assign(ts=frame["start"] / _NS_PER_US, dur=(frame["end"] - frame["start"]) / _NS_PER_US)
    data = {}
    for column, dtype in columns.items():
        values = frame[column]
        if dtype == "int64":
            values = values.fillna(-1)
        data[column] = values.astype(object).to_numpy() if dtype == "category" else values.to_numpy(dtype=dtype)
    return frame_from_columns(columns, data)
