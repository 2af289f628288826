"""`harness history export`: the results database as one tidy table for dashboards (docs/history.md,
"Exporting for dashboards").

One row per run (`record` = run), per run, variant and metric (`metric`: the samples' count, median,
mean, min, max) and per run and rule (`rule`: its verdict, reason and, where its numbers have them,
ratio and interval). Every row repeats its run's columns, so a dashboard filters on `record` and needs
no join. Kernel and op counts stay in the database (`harness history report` reads them).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history import db

# The runs table's columns every row carries, under the export's names.
RUN_COLUMNS = {
    "name": "run", "run_key": "run_key", "scenario": "scenario", "engine": "engine", "aa": "aa", "mode": "mode",
    "status": "status", "reason": "status_reason", "started": "started", "finished": "finished",
    "verdict": "verdict", "hardware": "hardware", "host": "host", "harness_version": "harness_version",
    "harness_commit": "harness_commit", "sglang_version": "sglang_version", "sglang_commit": "sglang_commit",
    "sweep": "sweep", "sweep_axis": "sweep_axis", "sweep_label": "sweep_label", "sweep_position": "sweep_position",
}
# Column -> pandas dtype: nullable types, so that a column keeps its type in CSV and Parquet when a
# record kind leaves it empty.
COLUMNS: dict[str, str] = {
    "record": "string",
    **{name: "string" for name in RUN_COLUMNS.values()},
    "variant": "string",
    "name": "string",
    "kind": "string",
    "rule_verdict": "string",
    "rule_reason": "string",
    "n": "Int64",
    "median": "Float64",
    "mean": "Float64",
    "min": "Float64",
    "max": "Float64",
    "ratio": "Float64",
    "ci_low": "Float64",
    "ci_high": "Float64",
}
COLUMNS.update(aa="boolean", sweep_position="Int64")
FORMATS = ("csv", "parquet")
RECORD_ORDER = {"run": 0, "metric": 1, "rule": 2}


def _number(value: Any) -> float | None:
    """A rule's number, or None (numbers are free-form JSON: a flag is not a ratio)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def export_table(engine: Engine) -> pd.DataFrame:
    """Every run's rows, in start-time order (then name, record kind, variant, metric or rule name)."""
    with engine.connect() as conn:
        runs = {r["id"]: r for r in conn.execute(sa.select(db.runs.c.id, *(db.runs.c[c] for c in RUN_COLUMNS)))
                .mappings()}
        samples: dict[tuple[int, str, str], list[float]] = defaultdict(list)
        for sample in conn.execute(sa.select(db.samples.c.run_id, db.samples.c.variant, db.samples.c.metric,
                                             db.samples.c.value)).mappings():
            samples[(sample["run_id"], sample["variant"], sample["metric"])].append(sample["value"])
        rules = conn.execute(sa.select(db.rules.c.run_id, db.rules.c.name, db.rules.c.kind, db.rules.c.verdict,
                                       db.rules.c.reason, db.rules.c.numbers)).mappings().all()

    def of_run(run_id: int) -> dict[str, Any]:
        return {RUN_COLUMNS[c]: runs[run_id][c] for c in RUN_COLUMNS}

    rows: list[dict[str, Any]] = [{"record": "run", **of_run(run_id)} for run_id in runs]
    for (run_id, variant, metric), values in samples.items():
        rows.append({"record": "metric", **of_run(run_id), "variant": variant, "name": metric, "n": len(values),
                     "median": float(np.median(values)), "mean": float(np.mean(values)), "min": min(values),
                     "max": max(values)})
    for rule in rules:
        numbers = rule["numbers"] if isinstance(rule["numbers"], dict) else {}
        rows.append({"record": "rule", **of_run(rule["run_id"]), "name": rule["name"], "kind": rule["kind"],
                     "rule_verdict": rule["verdict"], "rule_reason": rule["reason"],
                     **{key: _number(numbers.get(key)) for key in ("ratio", "ci_low", "ci_high")}})
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["_order"] = table["record"].map(RECORD_ORDER)
    table = table.sort_values(["started", "run", "_order", "variant", "name"], na_position="first", kind="stable")
    return table.drop(columns="_order").astype(COLUMNS).reset_index(drop=True)


def existing_database(db_arg: str | None) -> Engine:
    """The database to read (an export of an empty database would hide a wrong path): `db.open_existing`."""
    return db.open_existing(db_arg)


def write_table(table: pd.DataFrame, fmt: str, out: Path | None) -> None:
    """CSV to `out` or stdout; Parquet (binary) to `out` only, through pyarrow (the `parquet` extra)."""
    if fmt not in FORMATS:
        raise HarnessInputError(f"--format {fmt}: unknown format (expected one of: {', '.join(FORMATS)})")
    if fmt == "csv":
        if out is None:
            import sys

            table.to_csv(sys.stdout, index=False)
        else:
            table.to_csv(out, index=False)
        return
    if out is None:
        raise HarnessInputError("--format parquet: give --out FILE (Parquet is binary, not for a terminal)")
    from sglang_spec_harness.extras import require_extras

    require_extras("parquet")
    table.to_parquet(out, index=False, engine="pyarrow")
