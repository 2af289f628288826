"""`harness history ack SERIES --at POINT --reason TEXT`: mark a change point intended.

The series must be one the database has (its id as `harness history report` prints it), POINT the
first run after one of its change points (the run's name, run key, or sweep label), the reason not
empty; anything else is one line (exit 2) and nothing is written. The ack is kept by run key
(`marks.py`), so re-ingesting the run keeps it; the gate then compares the series against the level
after it (`gate.py`), and the trend page shows the mark and the reason.
"""

from __future__ import annotations

import difflib
from typing import Any

from sqlalchemy.engine import Engine

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history.analyze import load_series
from sglang_spec_harness.history.changepoints import Options
from sglang_spec_harness.history.marks import add_ack, now_utc
from sglang_spec_harness.history.series import Series


def _find_series(series: list[Series], wanted: str) -> Series:
    by_id = {s.id: s for s in series}
    if wanted in by_id:
        return by_id[wanted]
    close = difflib.get_close_matches(wanted, list(by_id), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else " (`harness history report` lists them)"
    raise HarnessInputError(f"{wanted!r}: no such series in the database ({len(by_id)} series{hint})")


def _find_point(series: Series, at: str) -> int:
    """The position of the run `at` names in the series, which must be a change point's first run after."""
    matches = [i for i, p in enumerate(series.points) if at in (p.run, p.run_key, p.label)]
    changes = {cp.index for cp in series.change_points}
    where = ", ".join(series.points[i].label or series.points[i].run for i in sorted(changes)) or "none"
    if not matches:
        raise HarnessInputError(f"--at {at}: no run of series {series.id!r} has this name, run key or label "
                                f"(its change points are at: {where})")
    if len(matches) > 1:
        keys = ", ".join(series.points[i].run_key for i in matches)
        raise HarnessInputError(f"--at {at}: names {len(matches)} runs of the series; give a run key ({keys})")
    if matches[0] not in changes:
        raise HarnessInputError(f"--at {at}: not a change point of series {series.id!r} "
                                f"(its change points are at: {where})")
    return matches[0]


def acknowledge(engine: Engine, series_id: str, at: str, reason: str, by: str,
                options: Options | None = None) -> dict[str, Any]:
    """Check the input, record the ack and return it (series, run, run_key, label, reason, by, at)."""
    reason = reason.strip()
    if not reason:
        raise HarnessInputError("--reason: empty (say why the change is intended)")
    series = _find_series(load_series(engine, options or Options()), series_id)
    point = series.points[_find_point(series, at)]
    by, at = by.strip() or "unknown", now_utc()
    add_ack(engine, series=series.id, run_key=point.run_key, run=point.run, label=point.label, reason=reason, by=by, at=at)
    return {"series": series.id, "run": point.run, "run_key": point.run_key, "label": point.label, "reason": reason,
            "by": by, "at": at}
