"""The in-memory model that every reader fills: four pandas tables and a few facts.

Times are microseconds (float64) on the trace's own clock. Names are categorical columns, so
each distinct kernel or frame name is stored once however often it occurs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from sglang_spec_harness.traces.schema import TraceFormat  # the tables stay apart from the pydantic schema at run time

# column -> dtype of each table (names are `category`).
GPU_OP_COLUMNS = {
    "name": "category",
    "kind": "category",  # kernel | memcpy | memset
    "ts": "float64",
    "dur": "float64",
    "correlation": "int64",
    "pid": "int64",  # host process of the launch where the format says it (nsys); else -1
    "device": "int64",
    "stream": "int64",
    "graph_id": "float64",  # NaN: not given (eager, or a writer without graph ids)
}
RUNTIME_COLUMNS = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "ts": "float64",
    "dur": "float64",
    "correlation": "int64",
}
SPAN_COLUMNS = {
    "name": "category",
    "kind": "category",  # user_annotation | python_function | nvtx | cpu_op
    "pid": "int64",
    "tid": "int64",
    "ts": "float64",
    "dur": "float64",
}
# with_stack frames of Python source (`file.py(123): name`), apart from the annotations: the
# functions that ran in each region come from them (traces/functions.py).
FRAME_COLUMNS = {
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "ts": "float64",
    "dur": "float64",
}
NO_ID = -1


@dataclass
class TraceTables:
    """One trace file, read.

    gpu_ops: kernels, memcpys and memsets as executed on the GPU.
    runtime: CUDA/HIP runtime and driver calls on CPU threads (launches among them).
    annotations: CPU-side spans that may name a region (record_function, python frames, NVTX).
    cpu_ops: operator spans (`aten::...`), the counting subject of CPU-only traces.
    python_frames: every `python_function` frame of Python source (with_stack; builtins left
        out), whether or not it names a region: what ran where.
    """

    path: str
    format: TraceFormat
    platform: str  # cuda | rocm | cpu | unknown
    gpu_ops: pd.DataFrame
    runtime: pd.DataFrame
    annotations: pd.DataFrame
    cpu_ops: pd.DataFrame
    distributed_rank: int | None = None
    graph_trace_mode: str | None = None  # nsys CUDA_GRAPH_TRACE_OPTIONS:MODE, e.g. "Graph", "Node"
    python_frames: pd.DataFrame = field(default_factory=lambda: empty_frame(FRAME_COLUMNS))


def name_mask(names: pd.Series, predicate: Callable[[str], object]) -> np.ndarray:
    """`predicate` over a categorical name column, evaluated once per distinct name."""
    per_name = np.array([bool(predicate(str(n))) for n in names.cat.categories] + [False])
    return per_name[names.cat.codes.to_numpy()]  # code -1 (missing) picks the trailing False


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def frame_from_columns(columns: Mapping[str, str], data: Mapping[str, Any]) -> pd.DataFrame:
    """A table with exactly `columns`, typed; `data` holds arrays or (codes, categories) pairs."""
    out: dict[str, Any] = {}
    for column, dtype in columns.items():
        value = data[column]
        if dtype == "category":
            if isinstance(value, tuple):
                codes, categories = value
                out[column] = pd.Categorical.from_codes(
                    np.asarray(codes, dtype=np.int32), categories=pd.Index(categories, dtype=object)
                )
            else:
                out[column] = pd.Categorical(value)
        else:
            out[column] = np.asarray(value, dtype=dtype)
    return pd.DataFrame(out)
