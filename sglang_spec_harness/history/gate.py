"""The gate of `harness history report`: for every series that gates, its newest change point after
the newest ack, judged.

- An ack (`harness history ack`) says a change point was intended: the gate compares against the
  level after it, so only the change points found in the runs from the acked one on count.
- The newest of those fails the gate when it is a regression (worse by the series' direction,
  `direction.py`) of at least `max_regression` (a count leaving zero always counts):
  - an exact series (a count, the invalid-token fraction) at once: its values do not vary between
    runs of the same code;
  - a noisy one (TPOT, accept length, throughput) only once the two points ran again side by side
    and that run confirmed it (`marks.py`). A side-by-side run whose interval includes no change
    clears it. One that could not run, or none at all (a nightly point cannot be run again here:
    only a sweep's releases and revisions can, `harness sweep --confirm`), makes the gate
    INCONCLUSIVE (exit 3): fail-closed, but never called a regression. It is not flaky: the change
    point needs `min_size` runs on either side and a significant split, the same database always
    gives the same answer, and it stays until an ack or a confirmation settles it.
- Sweep series do not gate (a sweep replays releases already out; its change points are findings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sglang_spec_harness.history.changepoints import ChangePoint, Options, change_points, exact_change_points
from sglang_spec_harness.history.direction import CONFIRMED, WORSE
from sglang_spec_harness.history.series import EXACT, Series, metric_info
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS

CANNOT_RUN_AGAIN = "cannot run the points again here"
NO_DATA = "NO DATA"


@dataclass(frozen=True)
class GateCall:
    """The gate's call on one series: its newest change point after the newest ack, and the outcome
    (FAIL, INCONCLUSIVE: a regression not confirmed, PASS) with why, when not a plain pass."""

    series: Series
    change_point: ChangePoint
    outcome: str
    reason: str | None = None


def gates(series: Series) -> bool:
    """Whether a series can fail the gate: its metric gates, and it is not a sweep's (a sweep replays
    releases already out: its change points are findings to explain, the nightly series gate)."""
    return metric_info(series.metric).gates and series.sweep is None


def acked_from(series: Series, acks: dict[str, dict[str, Any]]) -> int:
    """The position of the newest acked run in the series (0: none): the gate compares from its level."""
    return max((i for i, point in enumerate(series.points) if point.run_key in acks), default=0)


def newest_change(series: Series, options: Options, start: int) -> ChangePoint | None:
    """The newest change point in the runs from `start` on (the series' own when `start` is 0)."""
    if start == 0:
        return series.change_points[-1] if series.change_points else None
    points = series.points[start:]
    values = [p.value for p in points]
    found = (exact_change_points(values, [p.key for p in points]) if series.kind == EXACT
             else change_points(values, options))
    return replace(found[-1], index=found[-1].index + start) if found else None


def beyond(cp: ChangePoint, max_regression: float) -> bool:
    size = cp.magnitude
    return size is None or abs(size) >= max_regression


def judge(series: Series, cp: ChangePoint, max_regression: float) -> tuple[str, str | None]:
    """(FAIL | INCONCLUSIVE | PASS, why) for a change point the gate looks at."""
    if series.direction.way(cp.before, cp.after) != WORSE or not beyond(cp, max_regression):
        return PASS, None
    if series.kind == EXACT:
        return FAIL, None
    confirmation = series.confirmations.get(cp.index)
    if confirmation is None:
        return INCONCLUSIVE, f"not confirmed: {CANNOT_RUN_AGAIN}"
    if confirmation["status"] == CONFIRMED:
        return FAIL, None
    if confirmation["measured"]:  # ran side by side, and the interval includes no change
        return PASS, f"not confirmed: {confirmation['reason']}"
    return INCONCLUSIVE, f"not confirmed: {confirmation['reason']}"


def gate_calls(series: list[Series], options: Options, max_regression: float,
               acks: dict[str, dict[str, dict[str, Any]]]) -> list[GateCall]:
    """The gate's call on every series that gates and has a change point after its newest ack."""
    calls = []
    for s in series:
        if not gates(s):
            continue
        cp = newest_change(s, options, acked_from(s, acks.get(s.id, {})))
        if cp is not None:
            outcome, reason = judge(s, cp, max_regression)
            calls.append(GateCall(s, cp, outcome, reason))
    return calls


def verdict(calls: list[GateCall], complete_runs: int) -> tuple[str, int]:
    """The gate's verdict and exit code: FAIL (1) a regression, INCONCLUSIVE (3) a regression not
    confirmed, NO DATA (3) no complete run, else PASS (0)."""
    if not complete_runs:
        return NO_DATA, 3
    outcomes = {call.outcome for call in calls}
    if FAIL in outcomes:
        return FAIL, 1
    if INCONCLUSIVE in outcomes:
        return INCONCLUSIVE, 3
    return PASS, 0
