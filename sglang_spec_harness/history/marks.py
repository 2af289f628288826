"""What people and reruns add to a series' change points, kept in the database by run key (so that
re-ingesting a run keeps them): an ack (`harness history ack`: this change was intended, why, who,
when) and a confirmation (`harness sweep --confirm`: the two points run again side by side, the
interval of that run, or why they could not be)."""

from __future__ import annotations

import getpass
import hashlib
import socket
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sglang_spec_harness.history import db

ConfirmationKey = tuple[str, str, str, str]  # run key before, run key after, variant, metric


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def who() -> str:
    """Who acks when `--by` is not given: the login name at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no $USER: a container
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def series_key(series: str) -> str:
    return hashlib.sha256(series.encode()).hexdigest()[:32]


def add_ack(engine: Engine, *, series: str, run_key: str, run: str, label: str | None, reason: str, by: str,
            at: str) -> None:
    """Record (or replace) the ack of `series` at the run `run_key`."""
    key = series_key(series)
    with engine.begin() as conn:
        conn.execute(db.acks.delete().where(db.acks.c.series_key == key, db.acks.c.run_key == run_key))
        conn.execute(db.acks.insert().values(series_key=key, run_key=run_key, series=series, run=run, label=label,
                                             reason=reason, acked_by=by, acked_at=at))


def load_acks(engine: Engine) -> dict[str, dict[str, dict[str, Any]]]:
    """series id -> run key -> {run, label, reason, by, at}."""
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    a = db.acks.c
    with engine.connect() as conn:
        for row in conn.execute(sa.select(a.series, a.run_key, a.run, a.label, a.reason, a.acked_by, a.acked_at)):
            out[row.series][row.run_key] = {"run": row.run, "label": row.label, "reason": row.reason,
                                            "by": row.acked_by, "at": row.acked_at}
    return out


CONFIRMATION_FIELDS = ("status", "measured", "ratio", "ci_low", "ci_high", "confidence", "method", "reason", "run_dir",
                       "confirmed_at")


def store_confirmations(engine: Engine, rows: list[dict[str, Any]]) -> None:
    """Record (or replace) confirmations: each row has the key columns (`run_key_before`,
    `run_key_after`, `variant`, `metric`) and CONFIRMATION_FIELDS."""
    c = db.confirmations.c
    with engine.begin() as conn:
        for row in rows:
            conn.execute(db.confirmations.delete().where(
                c.run_key_before == row["run_key_before"], c.run_key_after == row["run_key_after"],
                c.variant == row["variant"], c.metric == row["metric"]))
            conn.execute(db.confirmations.insert().values(**row))


def load_confirmations(engine: Engine) -> dict[ConfirmationKey, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(db.confirmations)).mappings().all()
    return {(r["run_key_before"], r["run_key_after"], r["variant"], r["metric"]):
            {name: r[name] for name in CONFIRMATION_FIELDS} for r in rows}
