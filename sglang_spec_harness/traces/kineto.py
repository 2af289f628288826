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
from numpy.typing import ArrayLike

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.traces.model import (
    FRAME_COLUMNS,
    GPU_OP_COLUMNS,
    NO_ID,
    RUNTIME_COLUMNS,
    SPAN_COLUMNS,
    TraceTables,
    frame_from_columns,
)
from sglang_spec_harness.traces.names import (
    ANNOTATION_KIND_OF_CATEGORY,
    PYTHON_FRAME_CATEGORY,
    CPU_OP_CATEGORIES,
    CUDA_METADATA_KEYS,
    GPU_OP_KIND_OF_CATEGORY,
    ROCM_METADATA_KEYS,
    RUNTIME_CATEGORIES,
    SOURCE_FRAME,
)

SLICE_BYTES = 8 << 20
# Between two events of the array: `}` `,` `{`. A match inside a string is possible in theory;
# such a cut leaves an unterminated string, the slice fails to decode, and the next match is tried
# (a few times: a hostile string full of `},{` would otherwise cost one decode per match).
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
MAX_CUT_RETRIES = 4
_SLICE_POSITION = re.compile(r"\$\[(\d+)\]")

# Writers disagree on the JSON type of a field (ROCm writes `"stream": "0x0"`, some writers give
# numbers as strings or integral floats), so the structs accept every scalar and the columns are
# coerced afterwards, for the fields each table reads only. A value of another type (true, an
# array, an object) sends the slice to a loose decoder that checks only the fields a table uses.
Scalar = int | float | str | None


class _Args(msgspec.Struct, gc=False):
    correlation: Scalar = None
    device: Scalar = None
    stream: Scalar = None
    graph_id: Scalar = msgspec.field(default=None, name="graph id")


class _Event(msgspec.Struct, gc=False):
    # defaults are not None so that columns come out of C loops; an explicit null takes the slow path
    cat: str | None = ""
    name: Scalar = ""
    pid: Scalar = NO_ID
    tid: Scalar = NO_ID
    ts: Scalar = 0.0
    dur: Scalar = 0.0
    args: _Args | None = None


class _LooseEvent(msgspec.Struct, gc=False):
    """Any JSON value in any field: only for slices the typed decoder refused."""

    cat: Any = ""
    name: Any = ""
    pid: Any = NO_ID
    tid: Any = NO_ID
    ts: Any = 0.0
    dur: Any = 0.0
    args: Any = None


class _Document(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    distributedInfo: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    cuda_runtime_version: Any = None
    cupti_version: Any = None
    cuda_driver_version: Any = None


_EVENTS = msgspec.json.Decoder(list[_Event])
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])


class _Batch(list):
    """One decoded slice of events, with the position of its first event in the file's array."""

    offset: int = 0


def read_kineto(path: str, data: bytes | bytearray, keep_frame: Callable[[str], bool] | None = None) -> TraceTables:
    """`keep_frame`: which `python_function` frames to keep as annotations (by name); with_stack
    traces hold millions of frames, and only those a region rule can match label anything. None
    keeps all. Every frame of Python source also goes to `python_frames` (five columns each)."""
    document, events = _split_document(path, data)
    keep = _memoized(keep_frame) if keep_frame else None
    builders = {
        "gpu": _TableBuilder(GPU_OP_COLUMNS),
        "runtime": _TableBuilder(RUNTIME_COLUMNS),
        "annotation": _TableBuilder(SPAN_COLUMNS),
        "cpu_op": _TableBuilder(SPAN_COLUMNS),
        "frame": _TableBuilder(FRAME_COLUMNS),
    }
    count = 0
    for batch in _decode_slices(path, events):
        count += len(batch)
        try:
            _add_batch(batch, builders, keep)
        except _BadValue as exc:
            raise HarnessInputError(f"{path}: {exc.where(batch)}") from None
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
        python_frames=tables["frame"],
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
    except RecursionError:
        raise HarnessInputError(f"{path}: not a trace: JSON nested too deeply") from None
    events = memoryview(document.traceEvents)
    if not events:
        raise HarnessInputError(f"{path}: not a Kineto trace: no traceEvents array")
    if bytes(events[:1]) != b"[":
        raise HarnessInputError(f"{path}: not a Kineto trace: traceEvents is not an array")
    return document, events


def _decode_slices(path: str, array: memoryview) -> Iterator[_Batch]:
    """Decode a JSON array of events a few MB at a time, cutting only between events."""
    start, end = 1, len(array) - 1  # inside the brackets
    offset = 0
    while start < end:
        search_from = start + SLICE_BYTES
        retries = 0
        while True:
            cut = _EVENT_BOUNDARY.search(array, search_from, end) if search_from < end else None
            if cut is not None and retries >= MAX_CUT_RETRIES:
                cut = None  # give up cutting: decode the rest in one piece
            stop = cut.start() + 1 if cut else end
            text = b"".join((b"[", array[start:stop], b"]"))
            try:
                batch = _Batch(_decode(path, text, offset))
                break
            except msgspec.DecodeError as exc:
                if cut is None:  # the document validated, so only a wrong cut gets here
                    raise HarnessInputError(f"{path}: not valid JSON: {exc}") from None
                search_from = cut.end()
                retries += 1
            except RecursionError:
                raise HarnessInputError(f"{path}: not a trace: an event nested too deeply") from None
        batch.offset = offset
        offset += len(batch)
        yield batch
        start = cut.end() - 1 if cut else end


def _decode(path: str, text: bytes, offset: int) -> list[_Event] | list[_LooseEvent]:
    try:
        return _EVENTS.decode(text)
    except msgspec.ValidationError:
        pass
    try:
        return [_loose_event(e) for e in _LOOSE_EVENTS.decode(text)]
    except msgspec.ValidationError as exc:  # an element that is not an object
        message = _SLICE_POSITION.sub(lambda m: f"$[{int(m.group(1)) + offset}]", str(exc))
        raise HarnessInputError(f"{path}: unexpected event: {message}") from None


def _loose_event(e: _LooseEvent) -> _LooseEvent:
    """An event the typed decoder refused: a category that is not a string routes nowhere."""
    if not isinstance(e.cat, str):
        e.cat = ""
    return e


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
        args = _args_of(gpu)
        graph_id = _int_column(args, "graph_id", gpu, "graph id").astype(np.float64)
        graph_id[graph_id <= 0] = np.nan  # CUPTI: graph id 0 = not in a graph; -1 = not given
        builders["gpu"].add(
            name=_name_column(gpu),
            kind=[GPU_OP_KIND_OF_CATEGORY[e.cat or ""] for e in gpu],  # routed here by its (str) category
            ts=_float_column(gpu, "ts"),
            dur=_float_column(gpu, "dur"),
            correlation=_int_column(args, "correlation", gpu),
            pid=np.full(len(gpu), NO_ID),  # a GPU event's pid is its device, not the host process
            device=_int_column(args, "device", gpu),
            stream=_int_column(args, "stream", gpu),
            graph_id=graph_id,
        )
    if runtime := routed["runtime"]:
        builders["runtime"].add(
            name=_name_column(runtime),
            pid=_id_column(runtime, "pid"),
            tid=_id_column(runtime, "tid"),
            ts=_float_column(runtime, "ts"),
            dur=_float_column(runtime, "dur"),
            correlation=_int_column(_args_of(runtime), "correlation", runtime),
        )
    if frames := _kept_frames(routed["frame"], _is_source_frame):
        builders["frame"].add(name=_name_column(frames), pid=_id_column(frames, "pid"), tid=_id_column(frames, "tid"),
                              ts=_float_column(frames, "ts"), dur=_float_column(frames, "dur"))
    for key, events in (("annotation", annotations), ("cpu_op", routed["cpu_op"])):
        if events:
            builders[key].add(
                name=_name_column(events),
                kind=[ANNOTATION_KIND_OF_CATEGORY.get(e.cat or "", "cpu_op") for e in events],
                pid=_id_column(events, "pid"),
                tid=_id_column(events, "tid"),
                ts=_float_column(events, "ts"),
                dur=_float_column(events, "dur"),
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
_INT64_MIN, _INT64_MAX, _UINT64_END = -(1 << 63), (1 << 63) - 1, 1 << 64
# How writers spell a null pointer or an absent id in a string field.
_NULL_STRINGS = frozenset({"", "(nil)", "null", "none", "nullptr"})


class _BadValue(Exception):
    """A field a table needs holds a value no writer produces; says which event and field."""

    def __init__(self, event: Any, field: str, value: Any, expected: str) -> None:
        self.event, self.field, self.value, self.expected = event, field, value, expected

    def where(self, batch: _Batch) -> str:
        position = next((i for i, e in enumerate(batch) if e is self.event), None)
        at = f"event {batch.offset + position}" if position is not None else "an event"
        name = self.event.name if isinstance(self.event.name, str) else ""
        label = f" ({self.event.cat} {name[:60]!r})" if name else f" ({self.event.cat})"
        shown = msgspec.json.encode(self.value).decode("utf-8", "replace")
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"{at}{label}: {self.field} is {shown}, expected {self.expected}"


def _args_of(events: list) -> list[_Args]:
    """Each event's args as `_Args` (a loose event may hold a plain dict, or something else)."""
    out = []
    for e in events:
        args = e.args
        if args is None:
            out.append(_NO_ARGS)
        elif type(args) is _Args:
            out.append(args)
        elif isinstance(args, dict):
            out.append(_Args(args.get("correlation"), args.get("device"), args.get("stream"), args.get("graph id")))
        else:
            raise _BadValue(e, "args", args, "an object")
    return out


def _values(items: list, attribute: str) -> tuple[list, set[type]]:
    values = list(map(operator.attrgetter(attribute), items))
    return values, set(map(type, values))


def _float_column(events: list, attribute: str) -> np.ndarray:
    """Times (us): numbers, or numbers written as strings; missing is 0."""
    values, types = _values(events, attribute)
    if types <= {float, int}:
        column = np.fromiter(values, dtype=np.float64, count=len(values))
    else:
        column = np.array([_as_float(v, e, attribute) for v, e in zip(values, events)], dtype=np.float64)
    if not np.isfinite(column).all():
        i = int(np.flatnonzero(~np.isfinite(column))[0])
        raise _BadValue(events[i], attribute, values[i], "a finite number of microseconds")
    return column


def _as_float(value: Any, event: Any, field: str) -> float:
    if value is None:
        return 0.0
    if type(value) in (int, float):
        return float(value)
    if type(value) is str:
        try:
            return float(value)
        except ValueError:
            pass
    raise _BadValue(event, field, value, "a number of microseconds")


def _int_column(args: list[_Args], attribute: str, events: list, field: str | None = None) -> np.ndarray:
    """Ids (correlation, device, stream, graph id): ints, hex or decimal strings, integral
    floats; a null pointer (`"0x0"` is 0, `"(nil)"`) or a missing value is NO_ID where absent."""
    values, types = _values(args, attribute)
    if types == {int}:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            pass
    name = f"args.{field or attribute}"
    return np.array([_as_int(v, e, name) for v, e in zip(values, events)], dtype=np.int64)


def _as_int(value: Any, event: Any, field: str) -> int:
    kind = type(value)
    if value is None:
        return NO_ID
    if kind is int:
        number = value
    elif kind is float and value.is_integer():
        number = int(value)
    elif kind is str:
        text = value.strip().lower()
        if text in _NULL_STRINGS:
            return NO_ID
        try:
            number = int(text, 16) if text.startswith(("0x", "-0x")) else int(text, 10)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                raise _BadValue(event, field, value, "an integer (a number, or a decimal or hex string)") from None
            if not as_float.is_integer():
                raise _BadValue(event, field, value, "an integer") from None
            number = int(as_float)
    else:
        raise _BadValue(event, field, value, "an integer (a number, or a decimal or hex string)")
    if _INT64_MAX < number < _UINT64_END:  # an unsigned 64-bit id (a pointer): same bits, signed
        number -= _UINT64_END
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise _BadValue(event, field, value, "an integer of at most 64 bits")
    return number


def _name_column(events: list) -> np.ndarray:
    values, types = _values(events, "name")
    if types == {str}:
        return np.array(values, dtype=object)
    return np.array([_as_name(v, e) for v, e in zip(values, events)], dtype=object)


def _as_name(value: Any, event: Any) -> str:
    if value is None:
        return ""
    if type(value) in (str, int, float):
        return str(value)
    raise _BadValue(event, "name", value, "a string")


def _id_column(events: list, attribute: str) -> np.ndarray:
    """pid/tid: ints as they are; the rare string id (`"Spans"`) gets a stable negative number."""
    values, types = _values(events, attribute)
    if types == {int}:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            pass
    return np.array([_string_id(v, e, attribute) for v, e in zip(values, events)], dtype=np.int64)


_NO_ARGS = _Args()
_STRING_IDS: dict[str, int] = {}


def _kept_frames(frames: list[_Event], keep_frame: Callable[[str], bool] | None) -> list[_Event]:
    if keep_frame is None or not frames:
        return frames
    local, distinct = pd.factorize(_name_column(frames))
    keep = np.array([keep_frame(name) for name in distinct] + [False])
    return [frames[i] for i in np.flatnonzero(keep[local])]


def _is_source_frame(name: str) -> bool:
    return SOURCE_FRAME.match(name) is not None


def _memoized(predicate: Callable[[str], bool]) -> Callable[[str], bool]:
    answers: dict[str, bool] = {}

    def cached(name: str) -> bool:
        answer = answers.get(name)
        if answer is None:
            answer = answers[name] = bool(predicate(name))
        return answer

    return cached


def _string_id(value: Any, event: Any, field: str) -> int:
    kind = type(value)
    if value is None:
        return NO_ID
    if kind is float and value.is_integer():
        value, kind = int(value), int
    if kind is int and _INT64_MIN <= value <= _INT64_MAX:
        return value
    if kind in (str, int, float):
        return _STRING_IDS.setdefault(str(value), -2 - len(_STRING_IDS))
    raise _BadValue(event, field, value, "a number or a string")


class _TableBuilder:
    """Columns grown slice by slice; categorical columns are coded as they arrive."""

    def __init__(self, columns: dict[str, str]) -> None:
        self.columns = columns
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
        self.codes: dict[str, dict[str, int]] = {c: {} for c, t in columns.items() if t == "category"}

    def add(self, **values: ArrayLike) -> None:
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
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, bool) or not isinstance(rank, (int, str)):
        return None
    try:
        return int(rank)
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
