"""`harness history ingest`: find run directories and load them into the results database.

Idempotent: a run is identified by `run_key` (its directory name, scenario, start time and host, so a
CI artifact of the same run is the same run) and its content by a fingerprint. Ingesting an unchanged
run changes nothing; a changed one (re-checked, or finished since) is replaced whole, in one
transaction. Two ingesters at once: the database's unique key on `run_key` lets one win, the other
retries, finds the run there and leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history import db
from sglang_spec_harness.history.extract import RunRow, read_run
from sglang_spec_harness.rundir import is_run_dir

RETRIES = 8


@dataclass(frozen=True)
class Outcome:
    record: RunRow
    action: str  # added | updated | unchanged


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path is a run directory or a folder holding run directories (at any depth). Links such as
    `reports/latest` are not followed into, so no run is found twice."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise HarnessInputError(f"{raw}: no such file or directory (expected a run directory or a folder of runs)")
        if not path.is_dir():
            raise HarnessInputError(f"{raw}: not a directory (expected a run directory or a folder of runs)")
        if is_run_dir(path):
            found[path.resolve()] = None
            continue
        stack = [path]
        while stack:
            folder = stack.pop()
            for child in sorted(folder.iterdir()):
                if child.is_symlink() or not child.is_dir():
                    continue
                if is_run_dir(child):
                    found[child.resolve()] = None
                else:
                    stack.append(child)
    return sorted(found, key=lambda p: p.name)


def ingest(engine: Engine, run_dirs: Iterable[Path], *,
           on_run: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    outcomes = []
    for run_dir in run_dirs:
        outcome = ingest_run(engine, read_run(run_dir))
        outcomes.append(outcome)
        if on_run is not None:
            on_run(outcome)
    return outcomes


def ingest_run(engine: Engine, record: RunRow) -> Outcome:
    for attempt in range(RETRIES):
        try:
            with engine.begin() as conn:
                existing = conn.execute(
                    sa.select(db.runs.c.id, db.runs.c.fingerprint).where(db.runs.c.run_key == record.key)
                ).first()
                if existing is not None and existing.fingerprint == record.fingerprint:
                    return Outcome(record, "unchanged")
                if existing is not None:
                    for table in db.CHILD_TABLES:
                        conn.execute(table.delete().where(table.c.run_id == existing.id))
                    conn.execute(db.runs.delete().where(db.runs.c.id == existing.id))
                _insert(conn, record)
            return Outcome(record, "updated" if existing is not None else "added")
        except IntegrityError:
            # Another ingester inserted this run between our look and our insert: look again.
            continue
        except OperationalError as exc:
            if "locked" not in str(exc).lower() and "deadlock" not in str(exc).lower():
                raise
            time.sleep(0.05 * (attempt + 1))
    raise HarnessInputError(f"{record.path}: could not be ingested: the database stayed busy ({RETRIES} tries)")


def _insert(conn: sa.Connection, record: RunRow) -> None:
    row = {column.name: getattr(record, column.name, None) for column in db.runs.columns
           if column.name not in ("id", "run_key", "ingested_at")}
    row.update(run_key=record.key, ingested_at=datetime.now(UTC).isoformat(timespec="seconds"))
    key = conn.execute(db.runs.insert().values(**row)).inserted_primary_key
    assert key is not None  # None only for a statement other than a single-row insert
    run_id = key[0]
    for table, rows in ((db.variants, record.variants), (db.samples, record.samples), (db.rules, record.rules),
                        (db.kernel_counts, record.kernel_counts), (db.op_counts, record.op_counts),
                        (db.region_times, record.region_times), (db.region_functions, record.region_functions)):
        if rows:
            conn.execute(table.insert(), [{**r, "run_id": run_id} for r in _unique(table, rows)])


def _unique(table: sa.Table, rows: list[dict]) -> list[dict]:
    """Drop rows repeating a primary key (e.g. a rule name listed twice): keep the first."""
    keys = [c.name for c in table.primary_key.columns if c.name != "run_id"]
    seen: dict[tuple, dict] = {}
    for r in rows:
        seen.setdefault(tuple(r.get(k) for k in keys), r)
    return list(seen.values())
