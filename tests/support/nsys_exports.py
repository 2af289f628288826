"""A planted run as `nsys export --type sqlite` writes it, in any schema: 2 `cudaGraphLaunch_v10000` calls
in NVTX `step[DECODE bs=1]` ranges, each replaying 3 kernels (1 softmax), and 1 eager softmax launched
by `cudaLaunchKernel_v7000` outside any range. Graph-trace mode Node."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
