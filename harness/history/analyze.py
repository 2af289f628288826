"""The series in the database and their change points, as plain facts (what `harness history report
--json` prints and the trend page draws).

A series is one scenario (A/A runs and each run mode apart) x variant x metric x hardware, one value
per complete run in start-time order: the median of the run's samples (TPOT per timed trial, accept
length, throughput), the candidate/baseline ratio of the TPOT medians, or a kernel count per replay
(the largest over the run's profiled trials and ranks). Damaged and incomplete runs are listed, never
part of a series.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from harness.history import db
from harness.history.changepoints import ChangePoint, Options, change_points
from harness.verdict.verdicts import FAIL, PASS

FACTS_VERSION = 1
EXIT_OK, EXIT_REGRESSION, EXIT_NO_DATA = 0, 1, 3


@dataclass(frozen=True)
class Metric:
    label: str
    worse: str  # "up" or "down": which direction is a regression
    unit: str = ""


METRICS = {
    "tpot_ms": Metric("TPOT, median of the run's timed trials", "up", "ms"),
    "tpot_ratio": Metric("TPOT candidate / baseline (medians)", "up"),
    "accept_length": Metric("accept length, median of the run's timed trials", "down", "tokens / verify"),
    "throughput_tok_s": Metric("output throughput, median of the run's timed trials", "down", "tok/s"),
}
RATIO_VARIANT = "candidate/baseline"


def metric_info(metric: str) -> Metric:
    if metric in METRICS:
        return METRICS[metric]
    if metric.startswith("kernels:"):
        _, region, pattern = metric.split(":", 2)
        return Metric(f"{pattern} matches per replay in {region} (profiled trials, max)", "up", "per replay")
    return Metric(metric, "up")


@dataclass
class Point:
    run: str
    run_key: str
    started: str | None
    value: float
    sglang_commit: str | None
    harness_commit: str | None
    report: str | None


@dataclass
class Series:
    id: str
    scenario: str
    aa: bool
    mode: str | None
    variant: str
    metric: str
    hardware: str
    points: list[Point]
    change_points: list[ChangePoint]

    @property
    def counts(self) -> bool:
        return self.metric.startswith("kernels:")


def series_id(scenario: str, aa: bool, mode: str | None, variant: str, metric: str, hardware: str) -> str:
    # `restart` (one TPOT sample per server launch) is the default mode: named only when another.
    tags = (" [A/A]" if aa else "") + (f" [{mode}]" if mode and mode != "restart" else "")
    return f"{scenario}{tags} · {variant} · {metric} · {hardware}"


def load_runs(engine: Engine) -> list[dict[str, Any]]:
    columns = [c for c in db.runs.columns if c.name not in ("scenario_json", "environment_json", "run_json")]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(*columns).order_by(db.runs.c.started, db.runs.c.name)).mappings().all()
    return [dict(r) for r in rows]


def load_series(engine: Engine, options: Options) -> list[Series]:
    runs = {r["id"]: r for r in load_runs(engine) if r["status"] == "complete"}
    values: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with engine.connect() as conn:
        for run_id, variant, metric, value in conn.execute(
            sa.select(db.samples.c.run_id, db.samples.c.variant, db.samples.c.metric, db.samples.c.value)
            .order_by(db.samples.c.idx)
        ):
            if run_id in runs:
                values[(variant, metric)][run_id].append(value)
        counts = conn.execute(
            sa.select(db.kernel_counts.c.run_id, db.kernel_counts.c.variant, db.kernel_counts.c.region,
                      db.kernel_counts.c.pattern, sa.func.max(db.kernel_counts.c.per_replay_max))
            .where(db.kernel_counts.c.known.is_(True))
            .group_by(db.kernel_counts.c.run_id, db.kernel_counts.c.variant, db.kernel_counts.c.region,
                      db.kernel_counts.c.pattern)
        ).all()
    per_run: dict[tuple[str, str], dict[int, float]] = {
        key: {run_id: statistics.median(v) for run_id, v in by_run.items() if v} for key, by_run in values.items()
    }
    base, cand = per_run.get(("baseline", "tpot_ms"), {}), per_run.get(("candidate", "tpot_ms"), {})
    per_run[(RATIO_VARIANT, "tpot_ratio")] = {r: cand[r] / base[r] for r in cand if r in base and base[r] > 0}
    for run_id, variant, region, pattern, most in counts:
        if run_id in runs and most is not None:
            per_run.setdefault((variant, f"kernels:{region}:{pattern}"), {})[run_id] = float(most)

    grouped: dict[tuple, list[tuple[dict[str, Any], float]]] = defaultdict(list)
    for (variant, metric), by_run in per_run.items():
        for run_id, value in by_run.items():
            run = runs[run_id]
            key = (run["scenario"] or "?", bool(run["aa"]), run["mode"], variant, metric, run["hardware"])
            grouped[key].append((run, value))
    position = {run_id: i for i, run_id in enumerate(runs)}  # start-time order
    out = []
    for key, members in grouped.items():
        members.sort(key=lambda m: position[m[0]["id"]])
        points = [Point(run=r["name"], run_key=r["run_key"], started=r["started"], value=v,
                        sglang_commit=r["sglang_commit"], harness_commit=r["harness_commit"], report=r["report"])
                  for r, v in members]
        metric = key[4]
        found = change_points([p.value for p in points], options, counts=metric.startswith("kernels:"))
        out.append(Series(series_id(*key), *key, points=points, change_points=found))
    out.sort(key=lambda s: (s.scenario, s.aa, s.mode or "", s.hardware, _metric_order(s.metric), s.variant))
    return out


def _metric_order(metric: str) -> tuple[int, str]:
    names = list(METRICS)
    return (names.index(metric), "") if metric in names else (len(names), metric)


def is_regression(series: Series, cp: ChangePoint) -> bool:
    worse = metric_info(series.metric).worse
    return cp.after > cp.before if worse == "up" else cp.after < cp.before


def change_point_facts(series: Series, cp: ChangePoint, max_regression: float) -> dict[str, Any]:
    before, after = series.points[cp.index - 1], series.points[cp.index]
    regression = is_regression(series, cp)
    size = cp.magnitude
    return {
        "series": series.id, "scenario": series.scenario, "aa": series.aa, "mode": series.mode,
        "variant": series.variant, "metric": series.metric, "hardware": series.hardware,
        "run": after.run, "run_key": after.run_key, "started": after.started, "index": cp.index,
        "last_run_before": before.run,
        "before": cp.before, "after": cp.after, "magnitude": size, "p_value": cp.p_value, "kind": cp.kind,
        "regression": regression,
        "beyond_max_regression": regression and (size is None or abs(size) >= max_regression),
        "sglang_commit_before": before.sglang_commit, "sglang_commit_after": after.sglang_commit,
        "harness_commit_before": before.harness_commit, "harness_commit_after": after.harness_commit,
        "report": after.report, "report_before": before.report,
    }


def history_facts(engine: Engine, options: Options | None = None, *, max_regression: float = 0.05,
                  database: str = "") -> dict[str, Any]:
    options = options or Options()
    runs = load_runs(engine)
    series = load_series(engine, options)
    points = [change_point_facts(s, cp, max_regression) for s in series for cp in s.change_points]
    points.sort(key=lambda c: (c["started"] or "", c["series"]))
    # The gate: per series, its newest change point, when that is a regression beyond the size.
    failing = [change_point_facts(s, s.change_points[-1], max_regression) for s in series if s.change_points]
    failing = [c for c in failing if c["beyond_max_regression"]]
    complete = [r for r in runs if r["status"] == "complete"]
    exit_code = EXIT_NO_DATA if not complete else EXIT_REGRESSION if failing else EXIT_OK
    return {
        "schema_version": FACTS_VERSION,
        "database": database,
        "options": {**asdict(options), "max_regression": max_regression},
        "runs": {status: sum(r["status"] == status for r in runs) for status in ("complete", "incomplete", "damaged")},
        "run_list": [
            {"run": r["name"], "run_key": r["run_key"], "scenario": r["scenario"], "aa": bool(r["aa"]),
             "mode": r["mode"], "status": r["status"], "reason": r["reason"], "started": r["started"],
             "verdict": r["verdict"], "hardware": r["hardware"], "sglang_version": r["sglang_version"],
             "sglang_commit": r["sglang_commit"], "harness_commit": r["harness_commit"], "path": r["path"],
             "report": r["report"]}
            for r in runs
        ],
        "damaged": [{"run": r["name"], "status": r["status"], "reason": r["reason"], "path": r["path"]}
                    for r in runs if r["status"] != "complete"],
        "series": [
            {"series": s.id, "scenario": s.scenario, "aa": s.aa, "mode": s.mode, "variant": s.variant,
             "metric": s.metric, "label": metric_info(s.metric).label, "unit": metric_info(s.metric).unit,
             "worse": metric_info(s.metric).worse, "hardware": s.hardware,
             "runs": [p.run for p in s.points], "values": [p.value for p in s.points],
             "change_points": [cp.index for cp in s.change_points]}
            for s in series
        ],
        "change_points": points,
        "gate": {"max_regression": max_regression, "verdict": FAIL if failing else PASS if complete else "NO DATA",
                 "failing": failing},
        "exit_code": exit_code,
    }
