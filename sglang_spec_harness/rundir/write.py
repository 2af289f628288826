"""Writing the run directory's records (sglang_spec_harness.rundir.models), each atomically (sglang_spec_harness.files): a
reader never sees half a record, and a write that fails (a full disk) raises WriteError and leaves
the previous version."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.rundir.models import RequestRow

Record = TypeVar("Record", bound=BaseModel)


def now() -> str:
    """A record's time stamp: local time with its offset, to the second."""
    return _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")


def record_json(record: BaseModel) -> str:
    """A record as the harness writes it: JSON of the fields that were set, in the model's order (see
    sglang_spec_harness.rundir.models: records grow as a run goes), indented but with each list of
    plain values on one line (the views' series: half an analysis.json's size, one line per series)."""
    return compact_json(record.model_dump(exclude_unset=True)) + "\n"


def compact_json(value: Any, level: int = 0) -> str:
    """`json.dumps(value, indent=2, default=str)`, but a list of plain values on one line."""
    if isinstance(value, dict) and value:
        pad = "  " * (level + 1)
        items = (f"{pad}{_json_key(key)}: {compact_json(item, level + 1)}" for key, item in value.items())
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(value, (list, tuple)) and any(isinstance(item, (dict, list, tuple)) and item for item in value):
        pad = "  " * (level + 1)
        return "[\n" + ",\n".join(pad + compact_json(item, level + 1) for item in value) + "\n" + "  " * level + "]"
    return json.dumps(value, default=str)


def _json_key(key: Any) -> str:
    """A dict key as json.dumps writes it (keys that are not strings become strings)."""
    if isinstance(key, str):
        return json.dumps(key)
    if key is None or isinstance(key, bool):
        return json.dumps(json.dumps(key))
    return json.dumps(str(key))


def write_record(path: Path, record: BaseModel) -> None:
    write_text_atomic(path, record_json(record))


def request_line(row: RequestRow) -> str:
    """One line of requests.jsonl: every field, whether measured or not (null)."""
    return json.dumps(row.model_dump()) + "\n"


def write_requests(path: Path, rows: list[RequestRow]) -> None:
    write_text_atomic(path, "".join(request_line(row) for row in rows))


class RecordFile(Generic[Record]):
    """A record rewritten on every change (run.json, launch.json, trial.json); written at once unless
    `save=False` (its directory does not exist yet)."""

    def __init__(self, path: Path, record: Record, *, save: bool = True):
        self.path = path
        self.record = record
        if save:
            self.save()

    def save(self) -> None:
        write_record(self.path, self.record)

    def set(self, **changes: Any) -> None:
        """Change fields without writing (the next `save` or `update` writes them)."""
        for name, value in changes.items():
            setattr(self.record, name, value)

    def update(self, **changes: Any) -> None:
        self.set(**changes)
        self.save()
