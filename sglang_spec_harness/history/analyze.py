"""The series in the database and their change points, as plain facts (what `harness history report
--json` prints and the trend page draws).

A series is one scenario (A/A runs and each run mode apart) x variant x metric x hardware, one value
per complete run: the median of the run's samples (TPOT per timed trial, accept length, throughput),
the candidate/baseline ratio of the TPOT medians, a kernel count per replay (the largest over the
run's profiled trials and ranks), a region's op mix and time per replay, or the hash of the greedy
outputs. Runs outside a sweep are in start-time order; the runs of one sweep form series of their
own, in the sweep's order (`position`: release order), each point labelled with its release.
Damaged and incomplete runs are listed, never part of a series.

Each metric has a kind (`METRICS`): an exact series (a count, an output hash) changes wherever its
value differs from the previous one; a noisy one (TPOT, accept length, time) by E-divisive means.
Every change point is explained (`explain.py`): the kernel diff between the two runs around it.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history import db
from sglang_spec_harness.history.changepoints import ChangePoint, Options, change_points, exact_change_points
from sglang_spec_harness.history.explain import Explainer
from sglang_spec_harness.rundir import as_list, as_object
from sglang_spec_harness.scenario import with_current_keys
from sglang_spec_harness.vocabulary import FAIL, NO_REGION, PASS, RuleKind

FACTS_VERSION = 2
EXIT_OK, EXIT_REGRESSION, EXIT_NO_DATA = 0, 1, 3
EXACT, NOISY = "exact", "noisy"


@dataclass(frozen=True)
class Metric:
    label: str
    worse: str | None  # "up" or "down": which direction is a regression; None: a change is neither
    unit: str = ""
    kind: str = NOISY  # exact: every change of value is a change point; noisy: E-divisive means
    gates: bool = True  # whether its newest change point can fail the gate


# Every metric, or family of metrics (`kernels:<region>:<pattern>`, `ops:<region>`,
# `region_us:<region>`), in one table: what it is, which way is worse, its kind, whether it gates.
METRICS = {
    "tpot_ms": Metric("TPOT, median of the run's timed trials", "up", "ms"),
    "tpot_ratio": Metric("TPOT candidate / baseline (medians)", "up"),
    "accept_length": Metric("accept length, median of the run's timed trials", "down", "tokens / verify"),
    "throughput_tok_s": Metric("output throughput, median of the run's timed trials", "down", "tok/s"),
    # value: each distinct output set numbered as it first appears; compared: the hash
    "output_hash": Metric("greedy outputs of the profiled trials", None, "output set #", EXACT, gates=False),
    "kernels": Metric("{pattern} matches per replay in {region} (profiled trials, max)", "up", "per replay", EXACT),
    # value: each op name's median per replay, summed; compared: every op's median count per replay; only
    # in the regions the scenario's kernel_count rules name (all, without such rules)
    "ops": Metric("op count per replay in {region} (every op)", None, "ops / replay", EXACT, gates=False),
    # Profiled passes give structure, not timing (the profiler perturbs it): shown and explained, no gate.
    "region_us": Metric("{region} time per replay (profiled trials)", "up", "us", NOISY, gates=False),
}
RATIO_VARIANT = "candidate/baseline"


def metric_info(metric: str) -> Metric:
    family, _, rest = metric.partition(":")
    info = METRICS.get(family) if rest else METRICS.get(metric)
    if info is None:
        return Metric(metric, "up")
    if family == "kernels":
        region, _, pattern = rest.partition(":")
        return Metric(info.label.format(region=region, pattern=pattern), info.worse, info.unit, info.kind, info.gates)
    if rest:
        return Metric(info.label.format(region=rest), info.worse, info.unit, info.kind, info.gates)
    return info


@dataclass
class Point:
    run: str
    run_key: str
    started: str | None
    value: float
    sglang_commit: str | None
    harness_commit: str | None
    report: str | None
    run_id: int = 0
    label: str | None = None  # the sweep point's label (the release); None outside a sweep
    key: str | None = None  # an exact series' value as compared (an output hash, an op mix); None: `value`
    path: str | None = None


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
    sweep: str | None = None
    axis: str | None = None
    explanations: list[str] = field(default_factory=list)  # per change point: its explanation's id
    bound: str | None = None  # a count's direction from the scenario's rule on it ("up" / "down"); None: the metric's

    @property
    def worse(self) -> str | None:
        return self.bound or metric_info(self.metric).worse

    @property
    def counts(self) -> bool:
        return self.metric.startswith("kernels:")

    @property
    def kind(self) -> str:
        return metric_info(self.metric).kind


def series_id(scenario: str, aa: bool, mode: str | None, variant: str, metric: str, hardware: str,
              sweep: str | None = None) -> str:
    # `restart` (one TPOT sample per server launch) is the default mode: named only when another.
    tags = (" [A/A]" if aa else "") + (f" [{mode}]" if mode and mode != "restart" else "")
    return f"{scenario}{tags} · {variant} · {metric} · {hardware}" + (f" · sweep {sweep}" if sweep else "")


def load_runs(engine: Engine, scenarios: Sequence[str] | None = None) -> list[dict[str, Any]]:
    columns = [c for c in db.runs.columns if c.name not in ("scenario_json", "environment_json", "run_json")]
    query = sa.select(*columns).order_by(db.runs.c.started, db.runs.c.name)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(query).mappings().all()]
        if scenarios:
            known = sorted({r["scenario"] for r in rows if r["scenario"]})
            for name in scenarios:
                if name not in known:
                    raise HarnessInputError(f"--scenario {name}: no run of this scenario in the database "
                                            f"(scenarios: {', '.join(known) or 'none'})")
            rows = [r for r in rows if r["scenario"] in scenarios]
    return rows


def _op_mix(rows: list[tuple[str, str, int, float, int]]) -> tuple[float, str]:
    """A region's op mix in one run: ops per replay in its main unit (each op's median, summed), and
    a key that changes when any op's median count per replay does (an op whose median is 0 is absent).
    Not the minimum or maximum: which replays run at which batch size depends on timing, and some ops
    only run at some batch sizes, so those move between runs of the same code."""
    units = {unit for unit, *_ in rows}
    main = next((u for u in ("graph_launch", "span", "trace") if u in units), min(units))
    value = sum(median for unit, _, _, median, _ in rows if unit == main)
    text = "\n".join(f"{unit}\t{op}\t{median:g}" for unit, op, _, median, _ in sorted(rows) if median > 0)
    return value, hashlib.sha256(text.encode()).hexdigest()[:24]


def regions_that_matter(scenario: Any) -> set[str] | None:
    """The regions a scenario's kernel_count rules count in (None: it has none, every region matters).
    A row an older harness ingested holds the scenario with its old key names."""
    regions = {rule["region"] for rule in as_list(with_current_keys(as_object(scenario)).get("rules"))
               if isinstance(rule, dict) and rule.get("kind") == RuleKind.KERNEL_COUNT and isinstance(rule.get("region"), str)}
    return regions or None


def _values(engine: Engine, runs: dict[int, dict[str, Any]]) -> dict[tuple[str, str], dict[int, tuple[float, str | None]]]:
    """(variant, metric) -> run id -> (value, key)."""
    samples: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    out: dict[tuple[str, str], dict[int, tuple[float, str | None]]] = defaultdict(dict)
    mixes: dict[tuple[int, str, str], list[tuple[str, str, int, float, int]]] = defaultdict(list)
    with engine.connect() as conn:
        for run_id, variant, metric, value in conn.execute(
            sa.select(db.samples.c.run_id, db.samples.c.variant, db.samples.c.metric, db.samples.c.value)
            .order_by(db.samples.c.idx)
        ):
            if run_id in runs:
                samples[(variant, metric)][run_id].append(value)
        k = db.kernel_counts.c
        counts = conn.execute(
            sa.select(k.run_id, k.variant, k.region, k.pattern, sa.func.max(k.per_replay_max))
            .where(k.known.is_(True)).group_by(k.run_id, k.variant, k.region, k.pattern)
        ).all()
        o = db.op_counts.c
        for run_id, variant, region, unit, op, low, median, high in conn.execute(
            sa.select(o.run_id, o.variant, o.region, o.unit, o.op, o.per_replay_min, o.per_replay_median,
                      o.per_replay_max).where(o.region != NO_REGION)
        ):
            if run_id in runs:
                mixes[(run_id, variant, region)].append((unit, op, low, median, high))
        matter = {run_id: regions_that_matter(scenario) for run_id, scenario in conn.execute(
            sa.select(db.runs.c.id, db.runs.c.scenario_json).where(db.runs.c.id.in_(list(runs))))}
        t = db.region_times.c
        times = conn.execute(sa.select(t.run_id, t.variant, t.region, t.instances, t.robust_time_us)).all()
        v = db.variants.c
        hashes = conn.execute(sa.select(v.run_id, v.variant, v.output_hash).where(v.output_hash.is_not(None))).all()
    for key, by_run in samples.items():
        out[key] = {run_id: (statistics.median(values), None) for run_id, values in by_run.items() if values}
    base, cand = out.get(("baseline", "tpot_ms"), {}), out.get(("candidate", "tpot_ms"), {})
    out[(RATIO_VARIANT, "tpot_ratio")] = {r: (cand[r][0] / base[r][0], None) for r in cand if r in base and base[r][0] > 0}
    for run_id, variant, region, pattern, most in counts:
        if run_id in runs and most is not None:
            out[(variant, f"kernels:{region}:{pattern}")][run_id] = (float(most), None)
    for (run_id, variant, region), rows in mixes.items():
        chosen = matter.get(run_id)
        if chosen is None or region in chosen:
            out[(variant, f"ops:{region}")][run_id] = _op_mix(rows)
    for run_id, variant, region, instances, spent in times:
        if run_id in runs and instances and region != NO_REGION:
            out[(variant, f"region_us:{region}")][run_id] = (spent / instances, None)
    for run_id, variant, digest in hashes:
        if run_id in runs:
            out[(variant, "output_hash")][run_id] = (0.0, digest)  # numbered per series below
    return out


def _rule_bounds(engine: Engine) -> dict[int, list[dict[str, Any]]]:
    """Each run's kernel_count rules' parameters (region, pattern, variants, equals / at_most / at_least)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    r = db.rules.c
    with engine.connect() as conn:
        for run_id, params in conn.execute(sa.select(r.run_id, r.params).where(r.kind == RuleKind.KERNEL_COUNT.value)):
            if isinstance(params, dict):
                out[run_id].append(params)
    return out


def _count_bound(bounds: dict[int, list[dict[str, Any]]], run_ids: list[int], variant: str, metric: str) -> str | None:
    """Which way a count is worse, from the newest run's kernel_count rule on it: a lower bound
    (`at_least`) makes a fall the regression, any other bound a rise; no rule: the metric's default."""
    family, _, rest = metric.partition(":")
    if family != "kernels":
        return None
    region, _, pattern = rest.partition(":")
    for run_id in reversed(run_ids):
        for params in bounds.get(run_id, []):
            variants = params.get("variants")
            if params.get("region") == region and params.get("pattern") == pattern and (
                    not variants or variant in variants):
                return "down" if params.get("at_least") is not None else "up"
    return None


def load_series(engine: Engine, options: Options, scenarios: Sequence[str] | None = None) -> list[Series]:
    runs = {r["id"]: r for r in load_runs(engine, scenarios) if r["status"] == "complete"}
    bounds = _rule_bounds(engine)
    grouped: dict[tuple, list[tuple[dict[str, Any], float, str | None]]] = defaultdict(list)
    for (variant, metric), by_run in _values(engine, runs).items():
        for run_id, (value, key) in by_run.items():
            run = runs[run_id]
            group = (run["scenario"] or "?", bool(run["aa"]), run["mode"], variant, metric, run["hardware"], run["sweep"])
            grouped[group].append((run, value, key))
    time_order = {run_id: i for i, run_id in enumerate(runs)}  # start-time order
    out = []
    for group, members in grouped.items():
        sweep = group[6]
        # A sweep's runs in its order (release order), not by when each ran.
        members.sort(key=lambda m: (m[0]["sweep_position"], time_order[m[0]["id"]]) if sweep else time_order[m[0]["id"]])
        if group[4] == "output_hash":  # each distinct output set gets a number, in order of appearance
            numbers: dict[str | None, int] = {}
            members = [(run, float(numbers.setdefault(key, len(numbers))), key) for run, _, key in members]
        points = [Point(run=r["name"], run_key=r["run_key"], started=r["started"], value=v,
                        sglang_commit=r["sglang_commit"], harness_commit=r["harness_commit"], report=r["report"],
                        run_id=r["id"], label=r["sweep_label"] if sweep else None, key=key, path=r["path"])
                  for r, v, key in members]
        metric = group[4]
        if metric_info(metric).kind == EXACT:
            found = exact_change_points([p.value for p in points], [p.key for p in points])
        else:
            found = change_points([p.value for p in points], options)
        axis = members[0][0]["sweep_axis"] if sweep else None
        bound = _count_bound(bounds, [r["id"] for r, _, _ in members], group[3], metric)
        out.append(Series(series_id(*group), *group[:6], points=points, change_points=found, sweep=sweep, axis=axis,
                          bound=bound))
    out.sort(key=lambda s: (s.scenario, s.aa, s.mode or "", s.hardware, s.sweep or "", _metric_order(s.metric),
                            s.variant))
    return out


def _metric_order(metric: str) -> tuple[int, str]:
    names = list(METRICS)
    family = metric.partition(":")[0]
    return (names.index(family), metric) if family in names else (len(names), metric)


def is_regression(series: Series, cp: ChangePoint) -> bool:
    worse = series.worse
    return cp.after > cp.before if worse == "up" else cp.after < cp.before if worse == "down" else False


def gates(series: Series) -> bool:
    """Whether a series can fail the gate: its metric gates, and it is not a sweep's (a sweep replays
    releases already out: its change points are findings to explain, the nightly series gate)."""
    return metric_info(series.metric).gates and series.sweep is None


def explained_variant(series: Series) -> str:
    """Whose kernels explain a change: the series' variant; for the ratio, the first (the candidate)."""
    return series.variant.split("/")[0]


def change_point_facts(series: Series, cp: ChangePoint, max_regression: float,
                       explanation: str | None = None) -> dict[str, Any]:
    before, after = series.points[cp.index - 1], series.points[cp.index]
    regression = is_regression(series, cp)
    size = cp.magnitude
    return {
        "series": series.id, "scenario": series.scenario, "aa": series.aa, "mode": series.mode,
        "variant": series.variant, "metric": series.metric, "hardware": series.hardware,
        "sweep": series.sweep, "label_before": before.label, "label_after": after.label,
        "run": after.run, "run_key": after.run_key, "started": after.started, "index": cp.index,
        "last_run_before": before.run,
        "before": cp.before, "after": cp.after, "magnitude": size, "p_value": cp.p_value, "kind": cp.kind,
        "key_before": before.key, "key_after": after.key,
        "regression": regression,
        "beyond_max_regression": regression and (size is None or abs(size) >= max_regression),
        "gates": gates(series),
        "sglang_commit_before": before.sglang_commit, "sglang_commit_after": after.sglang_commit,
        "harness_commit_before": before.harness_commit, "harness_commit_after": after.harness_commit,
        "report": after.report, "report_before": before.report, "path": after.path, "path_before": before.path,
        "explanation": explanation,
    }


def _sweeps(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sweep with its points in order (every run of it, whatever its status)."""
    by_sweep: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if r["sweep"]:
            by_sweep[r["sweep"]].append(r)
    return [{"sweep": name, "scenario": members[0]["scenario"], "axis": members[0]["sweep_axis"],
             "points": [{"position": r["sweep_position"], "label": r["sweep_label"], "point": r["sweep_point"],
                         "run": r["name"], "status": r["status"], "path": r["path"], "report": r["report"]}
                        for r in sorted(members, key=lambda r: (r["sweep_position"], r["started"] or ""))]}
            for name, members in sorted(by_sweep.items())]


def history_facts(engine: Engine, options: Options | None = None, *, max_regression: float = 0.05,
                  database: str = "", scenarios: Sequence[str] | None = None) -> dict[str, Any]:
    options = options or Options()
    runs = load_runs(engine, scenarios)
    series = load_series(engine, options, scenarios)
    found = [(s, cp) for s in series for cp in s.change_points]
    # Outside sweeps by time; a sweep's in its order.
    found.sort(key=lambda f: (f[0].sweep is not None, f[0].sweep or "", f[1].index if f[0].sweep else 0,
                              f[0].points[f[1].index].started or "", f[0].id))
    explainer = Explainer(engine, {r["id"]: r for r in runs})
    points = []
    for s, cp in found:
        explanation = explainer.explanation(s.points[cp.index - 1].run_id, s.points[cp.index].run_id,
                                            explained_variant(s))
        if s.id not in explanation["series"]:
            explanation["series"].append(s.id)
        s.explanations.append(explanation["id"])
        points.append(change_point_facts(s, cp, max_regression, explanation["id"]))
    explanations = {e["id"]: e for e in explainer.all()}
    # The gate: per series that gates, its newest change point, when that is a regression beyond the size.
    failing = [change_point_facts(s, s.change_points[-1], max_regression,
                                  next((c["explanation"] for c in points if c["series"] == s.id
                                        and c["index"] == s.change_points[-1].index), None))
               for s in series if s.change_points and gates(s)]
    failing = [c for c in failing if c["beyond_max_regression"]]
    complete = [r for r in runs if r["status"] == "complete"]
    exit_code = EXIT_NO_DATA if not complete else EXIT_REGRESSION if failing else EXIT_OK
    return {
        "schema_version": FACTS_VERSION,
        "database": database,
        "options": {**asdict(options), "max_regression": max_regression},
        "scenarios": list(scenarios) if scenarios else None,
        "runs": {status: sum(r["status"] == status for r in runs) for status in ("complete", "incomplete", "damaged")},
        "run_list": [
            {"run": r["name"], "run_key": r["run_key"], "scenario": r["scenario"], "aa": bool(r["aa"]),
             "mode": r["mode"], "status": r["status"], "reason": r["reason"], "started": r["started"],
             "verdict": r["verdict"], "hardware": r["hardware"], "sglang_version": r["sglang_version"],
             "sglang_commit": r["sglang_commit"], "harness_commit": r["harness_commit"], "path": r["path"],
             "report": r["report"], "sweep": r["sweep"], "sweep_axis": r["sweep_axis"],
             "sweep_point": r["sweep_point"], "sweep_label": r["sweep_label"], "sweep_position": r["sweep_position"]}
            for r in runs
        ],
        "damaged": [{"run": r["name"], "status": r["status"], "reason": r["reason"], "path": r["path"]}
                    for r in runs if r["status"] != "complete"],
        "sweeps": _sweeps(runs),
        "series": [
            {"series": s.id, "scenario": s.scenario, "aa": s.aa, "mode": s.mode, "variant": s.variant,
             "metric": s.metric, "label": metric_info(s.metric).label, "unit": metric_info(s.metric).unit,
             "worse": s.worse, "kind": s.kind, "gates": gates(s), "hardware": s.hardware,
             "sweep": s.sweep, "axis": s.axis,
             "runs": [p.run for p in s.points], "values": [p.value for p in s.points],
             "labels": [p.label for p in s.points] if s.sweep else None,
             "keys": [p.key for p in s.points] if s.metric == "output_hash" else None,
             "change_points": [cp.index for cp in s.change_points], "explanations": s.explanations}
            for s in series
        ],
        "change_points": points,
        "explanations": list(explanations.values()),
        "gate": {"max_regression": max_regression, "verdict": FAIL if failing else PASS if complete else "NO DATA",
                 "failing": failing},
        "exit_code": exit_code,
    }
