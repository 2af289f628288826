"""Small Kineto traces in the shape of real writers (CUPTI for CUDA, roctracer for ROCm 6.2), with a
planted structure: 2 graph launches in `step[DECODE bs=1]` spans, 3 kernels per launch of which 1 is
a softmax, and 1 eager softmax outside any region."""

from __future__ import annotations

from typing import Any

SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
GEMM = "Cijk_Alik_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1"
LAUNCHES = 2
KERNELS_PER_LAUNCH = 3


def cuda_trace() -> dict[str, Any]:
    """A CUPTI-writer trace (ints everywhere): 2 graph launches of 3 kernels, 1 eager softmax."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 7, "args": {"name": "thread 7"}},
    ]
    correlation = 1000
    ts = 1_000_000.0
    for launch in range(LAUNCHES):
        events.append({"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 100, "tid": 7,
                       "ts": ts, "dur": 100.0, "args": {"External id": launch + 1}})
        correlation += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 7,
                       "ts": ts + 10, "dur": 5.0, "args": {"cbid": 311, "correlation": correlation, "External id": launch + 1}})
        for k, name in enumerate((GEMM, SOFTMAX, GEMM)):
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 20 + 10 * k,
                           "dur": 8.0, "args": {"queued": 0, "device": 0, "context": 1, "stream": 7,
                                                "correlation": correlation, "registers per thread": 32,
                                                "grid": [1, 1, 1], "block": [128, 1, 1], "graph id": 5}})
        ts += 1000
    correlation += 1
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 7,
                   "ts": ts, "dur": 4.0, "args": {"cbid": 211, "correlation": correlation}})
    events.append({"ph": "X", "cat": "kernel", "name": SOFTMAX, "pid": 0, "tid": 7, "ts": ts + 10, "dur": 8.0,
                   "args": {"device": 0, "stream": 7, "correlation": correlation}})
    return {"schemaVersion": 1, "cuda_runtime_version": 12040, "distributedInfo": {"rank": 0, "world_size": 1},
            "traceEvents": events}


def rocm_62_trace() -> dict[str, Any]:
    """The same run as a ROCm 6.2 roctracer writer puts it: `hip*` calls whose args carry the stream
    as a pointer string (`"stream": "0x0"`), copies with string sizes and kinds, no graph id."""
    doc = cuda_trace()
    doc.pop("cuda_runtime_version")
    doc.update(hip_runtime_version=60242134, roctracer_version=4, hip_driver_version=60242134)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["name"] = e["name"].replace("cuda", "hip")
            e["args"].update(stream="0x0", grid=[1, 1, 1], block=[256, 1, 1], **{"shared memory": 0})
        if e.get("cat") == "kernel":
            e["args"].pop("graph id", None)
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 100, "tid": 7,
                               "ts": 5_000_000.0, "dur": 3.0,
                               "args": {"stream": "0x7f3a2c000d10", "cid": 37, "correlation": 9000,
                                        "src": "0x7f3a00000000", "dst": "0x7f3b00000000", "size": "4096", "kind": "1"}})
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "hipMalloc", "pid": 100, "tid": 7,
                               "ts": 5_000_010.0, "dur": 3.0,
                               "args": {"size": 1024, "cid": 23, "correlation": 9001, "ptr": "0x7f3c00000000"}})
    return doc
