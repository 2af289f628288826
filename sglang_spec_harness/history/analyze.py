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
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.history import db
from sglang_spec_harness.history.changepoints import ChangePoint, Options, change_points, exact_change_points
from sglang_spec_harness.history.direction import (
    CONFIRMED, NEITHER, NOT_CONFIRMED, REGRESSION, Direction, count_direction, reading,
)
from sglang_spec_harness.history.explain import Explainer
from sglang_spec_harness.history.gate import CANNOT_RUN_AGAIN, GateCall, beyond, gate_calls, gates
from sglang_spec_harness.history.gate import verdict as gate_verdict
from sglang_spec_harness.history.marks import ConfirmationKey, load_acks, load_confirmations
from sglang_spec_harness.history.series import (
    CONFIRMABLE, EXACT, METRICS, RATIO_VARIANT, SIDE_BY_SIDE, Point, Series, metric_info, series_id,
)
from sglang_spec_harness.pages.numbers import fmt, ratio, signed_pct
from sglang_spec_harness.pages.numbers import interval as interval_text
from sglang_spec_harness.rundir import as_list, as_object
from sglang_spec_harness.scenario import with_current_keys
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, NO_REGION, PASS, RuleKind

FACTS_VERSION = 3


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


def _kernel_rules(engine: Engine) -> dict[int, list[dict[str, Any]]]:
    """Each run's kernel_count rules: `{"name", "params"}` (region, pattern, variants, the bound)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    r = db.rules.c
    with engine.connect() as conn:
        for run_id, name, params in conn.execute(sa.select(r.run_id, r.name, r.params)
                                                 .where(r.kind == RuleKind.KERNEL_COUNT.value)):
            if isinstance(params, dict):
                out[run_id].append({"name": name, "params": params})
    return out


def series_direction(rules: dict[int, list[dict[str, Any]]], run_ids: list[int], variant: str, metric: str) -> Direction:
    """Which way the series is worse: a count's from the newest run's kernel_count rule on it for the
    series' variant (none: neither way), any other metric's from `METRICS`."""
    family, _, rest = metric.partition(":")
    if family != "kernels":
        return Direction(metric_info(metric).worse)
    region, _, pattern = rest.partition(":")
    return count_direction((rules.get(run_id, []) for run_id in reversed(run_ids)), variant, region, pattern)


def _with_confirmations(series: Series, confirmations: dict[ConfirmationKey, dict[str, Any]]) -> None:
    """Attach the side-by-side runs of neighbouring points; a confirmed one where no change point was
    found (a series too short for the test: a sweep of two releases) becomes a change point."""
    for i in range(1, len(series.points)):
        before, after = series.points[i - 1], series.points[i]
        found = confirmations.get((before.run_key, after.run_key, series.variant, series.metric))
        if found is not None:
            series.confirmations[i] = found
    known = {cp.index for cp in series.change_points}
    added = [ChangePoint(index=i, p_value=None, before=series.points[i - 1].value, after=series.points[i].value,
                         kind=SIDE_BY_SIDE)
             for i, c in series.confirmations.items() if c["status"] == CONFIRMED and i not in known]
    if added:
        series.change_points = sorted([*series.change_points, *added], key=lambda cp: cp.index)


def load_series(engine: Engine, options: Options, scenarios: Sequence[str] | None = None) -> list[Series]:
    runs = {r["id"]: r for r in load_runs(engine, scenarios) if r["status"] == "complete"}
    rules = _kernel_rules(engine)
    confirmations = load_confirmations(engine)
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
        direction = series_direction(rules, [r["id"] for r, _, _ in members], group[3], metric)
        series = Series(series_id(*group), *group[:6], points=points, change_points=found, sweep=sweep, axis=axis,
                        direction=direction)
        _with_confirmations(series, confirmations)
        out.append(series)
    out.sort(key=lambda s: (s.scenario, s.aa, s.mode or "", s.hardware, s.sweep or "", _metric_order(s.metric),
                            s.variant))
    return out


def _metric_order(metric: str) -> tuple[int, str]:
    names = list(METRICS)
    family = metric.partition(":")[0]
    return (names.index(family), metric) if family in names else (len(names), metric)


def explained_variant(series: Series) -> str:
    """Whose kernels explain a change: the series' variant; for the ratio, the first (the candidate)."""
    return series.variant.split("/")[0]


def confirmation_facts(series: Series, index: int) -> dict[str, Any] | None:
    """A noisy change point's side-by-side run as stored, or why there is none (None: an exact series,
    which needs no confirmation)."""
    if series.kind == EXACT:
        return None
    stored = series.confirmations.get(index)
    if stored is not None:
        return dict(stored)
    if series.metric.startswith("region_us:"):
        why = "a profiled pass's time is not run again side by side (it gives structure, not timing)"
    elif series.sweep is None or series.metric not in CONFIRMABLE:
        why = CANNOT_RUN_AGAIN
    else:
        why = "not run again side by side (harness sweep --confirm)"
    return {"status": NOT_CONFIRMED, "measured": False, "ratio": None, "ci_low": None, "ci_high": None,
            "confidence": None, "method": None, "reason": why, "run_dir": None, "confirmed_at": None}


def change_point_facts(series: Series, cp: ChangePoint, max_regression: float, explanation: str | None = None,
                       acks: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One change point as history.json gives it: where, how big, which way (`way`: worse, better or
    neither by the series' direction; `rule`: the rule that gives it), how it reads (regression,
    improvement, change, not confirmed), its confirmation and its ack."""
    before, after = series.points[cp.index - 1], series.points[cp.index]
    way = series.direction.way(cp.before, cp.after)
    confirmation = confirmation_facts(series, cp.index)
    read = reading(way, series.kind == EXACT, confirmation)
    return {
        "series": series.id, "scenario": series.scenario, "aa": series.aa, "mode": series.mode,
        "variant": series.variant, "metric": series.metric, "hardware": series.hardware,
        "sweep": series.sweep, "label_before": before.label, "label_after": after.label,
        "run": after.run, "run_key": after.run_key, "started": after.started, "index": cp.index,
        "last_run_before": before.run, "run_key_before": before.run_key,
        "before": cp.before, "after": cp.after, "magnitude": cp.magnitude, "p_value": cp.p_value, "kind": cp.kind,
        "key_before": before.key, "key_after": after.key,
        "way": way, "rule": series.direction.rule, "reading": read,
        "regression": read == REGRESSION,
        "beyond_max_regression": read == REGRESSION and beyond(cp, max_regression),
        "confirmation": confirmation, "acknowledged": (acks or {}).get(after.run_key),
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


def _explained(series: list[Series], explainer: Explainer, max_regression: float,
               acks: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every change point's facts with its explanation (outside sweeps by time; a sweep's in its order)."""
    found = [(s, cp) for s in series for cp in s.change_points]
    found.sort(key=lambda f: (f[0].sweep is not None, f[0].sweep or "", f[1].index if f[0].sweep else 0,
                              f[0].points[f[1].index].started or "", f[0].id))
    points = []
    for s, cp in found:
        explanation = _explanation_of(explainer, s, cp)
        s.explanations.append(explanation)
        points.append(change_point_facts(s, cp, max_regression, explanation, acks.get(s.id)))
    return points


def _explanation_of(explainer: Explainer, series: Series, cp: ChangePoint) -> str:
    explanation = explainer.explanation(series.points[cp.index - 1].run_id, series.points[cp.index].run_id,
                                        explained_variant(series))
    if series.id not in explanation["series"]:
        explanation["series"].append(series.id)
    return explanation["id"]


def _gate_facts(calls: list[GateCall], explainer: Explainer, max_regression: float, complete: int,
                acks: dict[str, dict[str, dict[str, Any]]]) -> tuple[dict[str, Any], int]:
    """The gate's verdict, the change points that fail it, those it cannot call (not confirmed) and
    those a side-by-side run cleared; and its exit code."""
    verdict, exit_code = gate_verdict(calls, complete)
    listed: dict[str, list[dict[str, Any]]] = {FAIL: [], INCONCLUSIVE: [], PASS: []}
    for call in calls:
        if call.outcome == PASS and call.reason is None:
            continue
        facts = change_point_facts(call.series, call.change_point, max_regression,
                                   _explanation_of(explainer, call.series, call.change_point), acks.get(call.series.id))
        listed[call.outcome].append({**facts, "gate_reason": call.reason})
    return {"max_regression": max_regression, "verdict": verdict, "failing": listed[FAIL],
            "not_confirmed": listed[INCONCLUSIVE], "cleared": listed[PASS]}, exit_code


def _readings_sentence(changes: list[dict[str, Any]]) -> str:
    """What the directions say about the change points that share an explanation, in one sentence."""
    said = []
    for c in changes:
        if c["way"] == NEITHER and not c["metric"].startswith("kernels:"):
            continue  # an op mix, an output hash: the explanation says what changed
        why = f"rule {c['rule']}" if c["rule"] else "no rule on it" if c["metric"].startswith("kernels:") else ""
        confirmation = c["confirmation"]
        if confirmation is not None and c["way"] != NEITHER:
            why = confirmation_text(confirmation)
        ack = f"; acknowledged: {c['acknowledged']['reason']}" if c["acknowledged"] else ""
        size = ", ".join(([signed_pct(c["magnitude"])] if c["magnitude"] is not None else [])
                         + ([c["way"]] if c["way"] != NEITHER else []))
        said.append(f"{c['metric']} {fmt(c['before'], 4)} -> {fmt(c['after'], 4)}{f' ({size})' if size else ''} "
                    f"reads as {c['reading']}"
                    + (f" ({why})" if why else "") + ack)
    return f"By the rules and metrics: {'; '.join(said)}." if said else ""


def confirmation_text(confirmation: dict[str, Any]) -> str:
    """`confirmed side by side 1.0912 [1.0500, 1.1340]`, `side by side 0.9953 [...]: why not`, or why
    the points did not run again."""
    if confirmation["ratio"] is None:
        return confirmation["reason"]
    measured = f"side by side {ratio(confirmation['ratio'])} {interval_text(confirmation['ci_low'], confirmation['ci_high'])}"
    return f"confirmed {measured}" if confirmation["status"] == CONFIRMED else f"{measured}: {confirmation['reason']}"


def _with_readings(explanations: list[dict[str, Any]], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for explanation in explanations:
        clause = _readings_sentence([c for c in points if c["explanation"] == explanation["id"]])
        if clause:
            explanation["sentence"] = f"{explanation['sentence']} {clause}"
    return explanations


def _series_facts(s: Series) -> dict[str, Any]:
    return {"series": s.id, "scenario": s.scenario, "aa": s.aa, "mode": s.mode, "variant": s.variant,
            "metric": s.metric, "label": metric_info(s.metric).label, "unit": metric_info(s.metric).unit,
            "worse": s.worse, "rule": s.direction.rule, "target": s.direction.target, "kind": s.kind,
            "gates": gates(s), "hardware": s.hardware, "sweep": s.sweep, "axis": s.axis,
            "runs": [p.run for p in s.points], "run_keys": [p.run_key for p in s.points],
            "values": [p.value for p in s.points], "labels": [p.label for p in s.points] if s.sweep else None,
            "keys": [p.key for p in s.points] if s.metric == "output_hash" else None,
            "change_points": [cp.index for cp in s.change_points], "explanations": s.explanations}


def _run_facts(r: dict[str, Any]) -> dict[str, Any]:
    return {"run": r["name"], "run_key": r["run_key"], "scenario": r["scenario"], "aa": bool(r["aa"]),
            "mode": r["mode"], "status": r["status"], "reason": r["reason"], "started": r["started"],
            "verdict": r["verdict"], "hardware": r["hardware"], "sglang_version": r["sglang_version"],
            "sglang_commit": r["sglang_commit"], "harness_commit": r["harness_commit"], "path": r["path"],
            "report": r["report"], "sweep": r["sweep"], "sweep_axis": r["sweep_axis"],
            "sweep_point": r["sweep_point"], "sweep_label": r["sweep_label"], "sweep_position": r["sweep_position"]}


def _confirmation_list(series: list[Series]) -> list[dict[str, Any]]:
    """Every side-by-side run of two neighbouring points of a series, confirmed or not."""
    return [{"series": s.id, "variant": s.variant, "metric": s.metric, "index": i,
             "label_before": s.points[i - 1].label, "label_after": s.points[i].label,
             "run_before": s.points[i - 1].run, "run": s.points[i].run,
             "run_key_before": s.points[i - 1].run_key, "run_key_after": s.points[i].run_key,
             "before": s.points[i - 1].value, "after": s.points[i].value, **c}
            for s in series for i, c in sorted(s.confirmations.items())]


def history_facts(engine: Engine, options: Options | None = None, *, max_regression: float = 0.05,
                  database: str = "", scenarios: Sequence[str] | None = None) -> dict[str, Any]:
    options = options or Options()
    runs = load_runs(engine, scenarios)
    series = load_series(engine, options, scenarios)
    acks = load_acks(engine)
    explainer = Explainer(engine, {r["id"]: r for r in runs})
    points = _explained(series, explainer, max_regression, acks)
    complete = sum(r["status"] == "complete" for r in runs)
    gate, exit_code = _gate_facts(gate_calls(series, options, max_regression, acks), explainer, max_regression,
                                  complete, acks)
    known = {s.id for s in series}
    return {
        "schema_version": FACTS_VERSION,
        "database": database,
        "options": {**asdict(options), "max_regression": max_regression},
        "scenarios": list(scenarios) if scenarios else None,
        "runs": {status: sum(r["status"] == status for r in runs) for status in ("complete", "incomplete", "damaged")},
        "run_list": [_run_facts(r) for r in runs],
        "damaged": [{"run": r["name"], "status": r["status"], "reason": r["reason"], "path": r["path"]}
                    for r in runs if r["status"] != "complete"],
        "sweeps": _sweeps(runs),
        "series": [_series_facts(s) for s in series],
        "change_points": points,
        "explanations": _with_readings(explainer.all(), points),
        "confirmations": _confirmation_list(series),
        "acks": [{"series": s_id, "run_key": key, **ack} for s_id, by_run in sorted(acks.items())
                 for key, ack in by_run.items() if s_id in known],
        "gate": gate,
        "exit_code": exit_code,
    }
