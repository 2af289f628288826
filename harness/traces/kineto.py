"""Kineto (PyTorch profiler) Chrome traces, `.json` or `.json.gz`, in one pass.

The whole document is validated once by msgspec with `traceEvents` kept as raw bytes (no Python
objects); the event array is then decoded in slices of a few MB into typed structs that hold
only the fields the analysis needs (msgspec skips the others without building them), and each
slice is turned into numpy columns at once. Peak memory is the file's bytes plus the columns.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from harness.errors import HarnessInputError
from harness.traces.model import (
    GPU_OP_COLUMNS,
    NO_ID,
    RUNTIME_COLUMNS,
    SPAN_COLUMNS,
    TraceTables,
    frame_from_columns,
)
from harness.traces.names import (
    ANNOTATION_KIND_OF_CATEGORY,
    PYTHON_FRAME_CATEGORY,
    CPU_OP_CATEGORIES,
    CUDA_METADATA_KEYS,
    GPU_OP_KIND_OF_CATEGORY,
    ROCM_METADATA_KEYS,
    RUNTIME_CATEGORIES,
)

SLICE_BYTES = 8 << 20
# Between two events of the array: `}` `,` `{`. A match inside a string is possible in theory;
# such a cut leaves an unterminated string, the slice fails to decode, and the next match is tried.
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


class _Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    graph_id: int | None = msgspec.field(default=None, name="graph id")


class _Event(msgspec.Struct, gc=False):
    # defaults are not None so that columns come out of C loops; an explicit null takes the slow path
    cat: str | None = ""
    name: str | None = ""
    pid: int | str | None = NO_ID
    tid: int | str | None = NO_ID
    ts: float | None = 0.0
    dur: float | None = 0.0
    args: _Args | None = None


class _DistributedInfo(msgspec.Struct):
    rank: int | str | None = None


class _Document(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    distributedInfo: _DistributedInfo | None = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    cuda_runtime_version: Any = None
    cupti_version: Any = None
    cuda_driver_version: Any = None


_EVENTS = msgspec.json.Decoder(list[_Event])


def read_kineto(path: str, data: bytes | bytearray, keep_frame: Callable[[str], bool] | None = None) -> TraceTables:
    """`keep_frame`: which `python_function` frames to keep (by name); with_stack traces hold
    millions of frames, and only those a region rule can match matter. None keeps all."""
    document, events = _split_document(path, data)
    keep = _memoized(keep_frame) if keep_frame else None
    builders = {
        "gpu": _TableBuilder(GPU_OP_COLUMNS),
        "runtime": _TableBuilder(RUNTIME_COLUMNS),
        "annotation": _TableBuilder(SPAN_COLUMNS),
        "cpu_op": _TableBuilder(SPAN_COLUMNS),
    }
    count = 0
    for batch in _decode_slices(path, events):
        count += len(batch)
        _add_batch(batch, builders, keep)
    if count == 0:
        raise HarnessInputError(f"{path}: empty traceEvents: the profiler recorded no events")
    tables = {key: builder.frame() for key, builder in builders.items()}
    return TraceTables(
        path=path,
        format="kineto",
        platform=_platform(document, tables["gpu"], tables["runtime"]),
        gpu_ops=tables["gpu"],
        runtime=tables["runtime"],
        annotations=tables["annotation"],
        cpu_ops=tables["cpu_op"],
        distributed_rank=_rank(document),
    )


def _split_document(path: str, data: bytes | bytearray) -> tuple[_Document, memoryview]:
    """Validate the whole JSON once; return the top-level facts and the event array's bytes."""
    head = bytes(data[:64]).lstrip()
    try:
        if head.startswith(b"["):  # very old writers: a bare list of events
            return _Document(), memoryview(msgspec.json.decode(data, type=msgspec.Raw))
        if not head.startswith(b"{"):
            raise HarnessInputError(f"{path}: not a trace: expected a JSON object or list")
        document = msgspec.json.decode(data, type=_Document)
    except msgspec.DecodeError as exc:
        raise HarnessInputError(f"{path}: not valid JSON: {exc}") from None
    except msgspec.ValidationError as exc:
        raise HarnessInputError(f"{path}: unexpected trace metadata: {exc}") from None
    events = memoryview(document.traceEvents)
    if not events:
        raise HarnessInputError(f"{path}: not a Kineto trace: no traceEvents array")
    if bytes(events[:1]) != b"[":
        raise HarnessInputError(f"{path}: not a Kineto trace: traceEvents is not an array")
    return document, events


def _decode_slices(path: str, array: memoryview) -> Iterator[list[_Event]]:
    """Decode a JSON array of events a few MB at a time, cutting only between events."""
    start, end = 1, len(array) - 1  # inside the brackets
    while start < end:
        search_from = start + SLICE_BYTES
        while True:
            cut = _EVENT_BOUNDARY.search(array, search_from, end) if search_from < end else None
            stop = cut.start() + 1 if cut else end
            try:
                yield _EVENTS.decode(b"".join((b"[", array[start:stop], b"]")))
                break
            except msgspec.ValidationError as exc:
                raise HarnessInputError(f"{path}: unexpected event field: {exc}") from None
            except msgspec.DecodeError as exc:
                if cut is None:  # the document validated, so only a wrong cut gets here
                    raise HarnessInputError(f"{path}: not valid JSON: {exc}") from None
                search_from = cut.end()
        start = cut.end() - 1 if cut else end


# Kineto category -> the table its events go to.
_TABLE_OF_CATEGORY: dict[str, str] = {
    **{cat: "gpu" for cat in GPU_OP_KIND_OF_CATEGORY},
    **{cat: "runtime" for cat in RUNTIME_CATEGORIES},
    **{cat: "annotation" for cat in ANNOTATION_KIND_OF_CATEGORY},
    PYTHON_FRAME_CATEGORY: "frame",
    **{cat: "cpu_op" for cat in CPU_OP_CATEGORIES},
}


def _add_batch(batch: list[_Event], builders: dict[str, _TableBuilder], keep_frame: Callable[[str], bool] | None) -> None:
    routed = _route(batch)
    annotations = routed["annotation"] + _kept_frames(routed["frame"], keep_frame)
    if gpu := routed["gpu"]:
        args = [e.args or _NO_ARGS for e in gpu]
        builders["gpu"].add(
            name=_column(gpu, "name", object, ""),
            kind=[GPU_OP_KIND_OF_CATEGORY[e.cat] for e in gpu],
            ts=_column(gpu, "ts", np.float64, 0.0),
            dur=_column(gpu, "dur", np.float64, 0.0),
            correlation=_column(args, "correlation", np.int64, NO_ID),
            pid=np.full(len(gpu), NO_ID),  # a GPU event's pid is its device, not the host process
            device=_column(args, "device", np.int64, NO_ID),
            stream=_column(args, "stream", np.int64, NO_ID),
            graph_id=[a.graph_id or np.nan for a in args],  # CUPTI: graph id 0 = not in a graph
        )
    if runtime := routed["runtime"]:
        args = [e.args or _NO_ARGS for e in runtime]
        builders["runtime"].add(
            name=_column(runtime, "name", object, ""),
            pid=_id_column(runtime, "pid"),
            tid=_id_column(runtime, "tid"),
            ts=_column(runtime, "ts", np.float64, 0.0),
            dur=_column(runtime, "dur", np.float64, 0.0),
            correlation=_column(args, "correlation", np.int64, NO_ID),
        )
    for key, events in (("annotation", annotations), ("cpu_op", routed["cpu_op"])):
        if events:
            builders[key].add(
                name=_column(events, "name", object, ""),
                kind=[ANNOTATION_KIND_OF_CATEGORY.get(e.cat, "cpu_op") for e in events],
                pid=_id_column(events, "pid"),
                tid=_id_column(events, "tid"),
                ts=_column(events, "ts", np.float64, 0.0),
                dur=_column(events, "dur", np.float64, 0.0),
            )


def _route(batch: list[_Event]) -> dict[str, list[_Event]]:
    """Events by destination table, sorted out with C loops (factorize the categories)."""
    routed: dict[str, list[_Event]] = {"gpu": [], "runtime": [], "annotation": [], "frame": [], "cpu_op": []}
    codes, categories = pd.factorize(np.fromiter(map(_CATEGORY, batch), dtype=object, count=len(batch)))
    for code, category in enumerate(categories):
        table = _TABLE_OF_CATEGORY.get(category)
        if table is not None:
            positions = np.flatnonzero(codes == code)
            routed[table] += operator.itemgetter(*positions)(batch) if len(positions) > 1 else [batch[positions[0]]]
    return routed


_CATEGORY = operator.attrgetter("cat")


def _column(items: list, attribute: str, dtype, missing) -> np.ndarray:
    """One attribute of every item as an array: a C loop, or a Python one if some value is null."""
    getter = operator.attrgetter(attribute)
    try:
        return np.fromiter(map(getter, items), dtype=dtype, count=len(items))
    except (TypeError, ValueError):
        return np.array([missing if (v := getter(item)) is None else v for item in items], dtype=dtype)


def _id_column(events: list[_Event], attribute: str) -> np.ndarray:
    """pid/tid: ints as they are; the rare string id (`"Spans"`) gets a stable negative number."""
    try:
        return np.fromiter(map(operator.attrgetter(attribute), events), dtype=np.int64, count=len(events))
    except (TypeError, ValueError):
        return np.array([_string_id(getattr(e, attribute)) for e in events], dtype=np.int64)


_NO_ARGS = _Args()
_STRING_IDS: dict[str, int] = {}


def _kept_frames(frames: list[_Event], keep_frame: Callable[[str], bool] | None) -> list[_Event]:
    if keep_frame is None or not frames:
        return frames
    local, distinct = pd.factorize(_column(frames, "name", object, ""))
    keep = np.array([keep_frame(name) for name in distinct] + [False])
    return [frames[i] for i in np.flatnonzero(keep[local])]


def _memoized(predicate: Callable[[str], bool]) -> Callable[[str], bool]:
    answers: dict[str, bool] = {}

    def cached(name: str) -> bool:
        answer = answers.get(name)
        if answer is None:
            answer = answers[name] = bool(predicate(name))
        return answer

    return cached


def _string_id(value: int | str | None) -> int:
    if value is None:
        return NO_ID
    if type(value) is int:
        return value
    return _STRING_IDS.setdefault(value, -2 - len(_STRING_IDS))


class _TableBuilder:
    """Columns grown slice by slice; categorical columns are coded as they arrive."""

    def __init__(self, columns: dict[str, str]) -> None:
        self.columns = columns
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
        self.codes: dict[str, dict[str, int]] = {c: {} for c, t in columns.items() if t == "category"}

    def add(self, **values: list) -> None:
        for column, dtype in self.columns.items():
            if column in self.codes:
                # factorize in C, then map this slice's few distinct values to the file's codes
                local, distinct = pd.factorize(np.asarray(values[column], dtype=object))
                codes = self.codes[column]
                to_file = np.array([codes.setdefault(v, len(codes)) for v in distinct], dtype=np.int32)
                self.parts[column].append(to_file[local])
            else:
                self.parts[column].append(np.asarray(values[column], dtype=dtype))

    def frame(self) -> pd.DataFrame:
        data: dict[str, object] = {}
        for column, dtype in self.columns.items():
            parts = self.parts[column]
            joined = np.concatenate(parts) if parts else np.empty(0, dtype=np.int32 if dtype == "category" else dtype)
            data[column] = (joined, list(self.codes[column])) if column in self.codes else joined
        return frame_from_columns(self.columns, data)


def _rank(document: _Document) -> int | None:
    info = document.distributedInfo
    if info is None or info.rank is None:
        return None
    try:
        return int(info.rank)
    except ValueError:
        return None


def _platform(document: _Document, gpu_ops: pd.DataFrame, runtime: pd.DataFrame) -> str:
    if any(getattr(document, key) is not None for key in ROCM_METADATA_KEYS):
        return "rocm"
    if any(getattr(document, key) is not None for key in CUDA_METADATA_KEYS):
        return "cuda"
    if len(gpu_ops) == 0 and len(runtime) == 0:
        return "cpu"
    names = runtime["name"].cat.categories
    return "rocm" if any(str(n).startswith("hip") for n in names) else "cuda"
