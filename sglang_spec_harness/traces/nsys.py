"""Nsight Systems SQLite exports (`nsys export --type sqlite`): kernels, memcpys, memsets,
runtime calls and NVTX ranges, read with SQL into the same model as Kineto traces."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from contextlib import closing

import numpy as np
import pandas as pd

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.traces.model import (
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
        finally:
            _STRING_TABLES.pop(id(connection), None)


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
            _kernels(db, tables, path),
            _copies(db, tables, "CUPTI_ACTIVITY_KIND_MEMCPY", "Memcpy", "memcpy", path),
            _copies(db, tables, "CUPTI_ACTIVITY_KIND_MEMSET", "Memset", "memset", path),
        ],
        ignore_index=True,
    )
    annotations, cpu_ops = _nvtx(db, tables, path)
    return TraceTables(
        path=path,
        format="nsys",
        platform="cuda",
        gpu_ops=_typed(gpu_ops, GPU_OP_COLUMNS),
        runtime=_runtime(db, tables, path),
        annotations=annotations,
        cpu_ops=cpu_ops,
        graph_trace_mode=_graph_trace_mode(db, tables),
    )


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}


def _select(db: sqlite3.Connection, path: str, table: str, wanted: Mapping[str, tuple[str, ...] | None]) -> str:
    """`expr AS alias, ...` for a table's columns across export versions: each alias takes the first
    column of its candidates that the table has, NULL if none (None: required, bad input if absent)."""
    have = _columns(db, table)
    parts = []
    for alias, candidates in wanted.items():
        names = candidates if candidates is not None else (alias,)
        found = next((c for c in names if c in have), None)
        if found is None and candidates is None:
            raise HarnessInputError(f"{path}: table {table} has no column {alias!r}: not an Nsight Systems export")
        parts.append(f'{"t." + chr(34) + found + chr(34) if found else "NULL"} AS "{alias}"')
    return ", ".join(parts)


# alias -> columns that hold it in some export version (first found wins)
_GPU_COLUMNS: dict[str, tuple[str, ...] | None] = {
    "start": None,
    "end": None,
    "correlation": ("correlationId",),
    "pid": ("globalPid",),
    "device": ("deviceId",),
    "stream": ("streamId",),
}


def _kernels(db: sqlite3.Connection, tables: set[str], path: str) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if table not in tables:
        return empty_frame(GPU_OP_COLUMNS)
    columns = _select(db, path, table, {**_GPU_COLUMNS, "name_id": ("demangledName", "shortName", "mangledName"),
                                        "graph_id": ("graphId",)})
    frame = pd.read_sql_query(f"SELECT {columns} FROM {table} t", db)
    frame["name"] = _strings(db, frame.pop("name_id"))
    frame["kind"] = "kernel"
    return _numeric(frame, path, table, ("start", "end", "correlation", "pid", "device", "stream", "graph_id"))


def _copies(db: sqlite3.Connection, tables: set[str], table: str, name: str, kind: str, path: str) -> pd.DataFrame:
    if table not in tables:
        return empty_frame(GPU_OP_COLUMNS)
    frame = pd.read_sql_query(f"SELECT {_select(db, path, table, _GPU_COLUMNS)} FROM {table} t", db)
    frame["name"], frame["kind"], frame["graph_id"] = name, kind, np.nan
    return _numeric(frame, path, table, ("start", "end", "correlation", "pid", "device", "stream"))


def _runtime(db: sqlite3.Connection, tables: set[str], path: str) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in tables:
        return empty_frame(RUNTIME_COLUMNS)
    columns = _select(db, path, table, {"start": None, "end": None, "tid": ("globalTid",),
                                        "correlation": ("correlationId",), "name_id": ("nameId",)})
    frame = pd.read_sql_query(f"SELECT {columns} FROM {table} t", db)
    frame["name"] = _strings(db, frame.pop("name_id"))
    frame = _numeric(frame, path, table, ("start", "end", "tid", "correlation"))
    frame["pid"] = frame["tid"] // _PID_UNIT * _PID_UNIT
    return _typed(frame, RUNTIME_COLUMNS)


def _strings(db: sqlite3.Connection, ids: pd.Series) -> pd.Series:
    """StringIds values for a column of ids (a text cell is taken as the name itself)."""
    table = _string_table(db)
    return ids.map(lambda i: _text(table.get(i) if not isinstance(i, (str, bytes)) else i))


_STRING_TABLES: dict[int, dict] = {}


def _string_table(db: sqlite3.Connection) -> dict:
    """StringIds as a dict, read once per connection (see `_read`, which clears it)."""
    if id(db) not in _STRING_TABLES:
        _STRING_TABLES[id(db)] = dict(db.execute("SELECT id, value FROM StringIds"))
    return _STRING_TABLES[id(db)]


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _numeric(frame: pd.DataFrame, path: str, table: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """SQLite keeps whatever type a row was given: numbers stored as text are read as numbers;
    anything else in a column the analysis reads is bad input, named by table and column."""
    for column in columns:
        values = frame[column]
        if values.dtype.kind in "iuf":
            continue
        numbers = pd.to_numeric(values.map(lambda v: v.decode("ascii", "replace") if isinstance(v, bytes) else v),
                                errors="coerce")
        bad = numbers.isna() & values.notna()
        if bad.any():
            first = values[bad].iloc[0]
            raise HarnessInputError(f"{path}: table {table} column {column!r}: {first!r:.60} is not a number")
        frame[column] = numbers.astype(np.float64)
    for column in columns:  # an id past what SQLite's integers hold is no id
        if frame[column].dtype.kind == "f":
            frame.loc[~np.isfinite(frame[column]), column] = np.nan
    if len(frame) and not np.isfinite(frame[["start", "end"]].to_numpy(dtype=np.float64)).all():
        raise HarnessInputError(f"{path}: table {table}: a row without a start or end time")
    return frame


def _nvtx(db: sqlite3.Connection, tables: set[str], path: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NVTX ranges are the annotations; those that `emit_nvtx` wrote for ops are also CPU ops."""
    table = "NVTX_EVENTS"
    if table not in tables:
        return empty_frame(SPAN_COLUMNS), empty_frame(SPAN_COLUMNS)
    columns = _select(db, path, table, {"start": None, "end": None, "tid": ("globalTid",), "text": ("text",),
                                        "text_id": ("textId",), "event_type": ("eventType",)})
    frame = pd.read_sql_query(f"SELECT {columns} FROM {table} t WHERE t.\"end\" IS NOT NULL", db)
    frame = _numeric(frame, path, table, ("start", "end", "tid"))
    event_type = pd.to_numeric(frame.pop("event_type"), errors="coerce")
    if event_type.notna().any():  # exports without the column hold ranges only
        frame = frame[event_type.isin(NVTX_RANGE_EVENT_TYPES).to_numpy()].reset_index(drop=True)
    names = _strings(db, frame["text_id"])
    inline = frame["text"].map(_text)
    frame["name"] = inline.where(frame["text"].notna(), names)
    frame["pid"] = frame["tid"] // _PID_UNIT * _PID_UNIT
    is_op = frame["name"].str.contains(_EMIT_NVTX_SUFFIX)
    frame["name"] = frame["name"].str.replace(_EMIT_NVTX_SUFFIX, "", regex=True)
    frame["kind"] = np.where(is_op, "cpu_op", "nvtx")
    return _typed(frame, SPAN_COLUMNS), _typed(frame[is_op.to_numpy()], SPAN_COLUMNS)


def _graph_trace_mode(db: sqlite3.Connection, tables: set[str]) -> str | None:
    if "META_DATA_CAPTURE" not in tables:
        return None
    row = db.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = ?", (GRAPH_TRACE_MODE_KEY,)).fetchone()
    return _text(row[0]) if row and row[0] is not None else None


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
