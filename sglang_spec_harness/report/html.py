"""index.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Layout, top to bottom: the verdict and why (the first screen), the rules, notes on missing pieces,
the variants, key numbers, the figures (each with a caption saying what to look for), the tables,
and links to every trace file and server log. This module gathers what each part shows (plain
values, and the figures); `sglang_spec_harness/pages/templates/report.html` lays it out and escapes every value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sglang_spec_harness.report import analysis_view as av
from sglang_spec_harness.report import figures
from sglang_spec_harness.rundir import as_object
from sglang_spec_harness.rundir.rule_numbers import (
    AaNoiseNumbers,
    AcceptLengthNumbers,
    ExplainedGainNumbers,
    OutputIdentityNumbers,
    TpotGainNumbers,
    numbers_of,
)
from sglang_spec_harness.report.data import ReportData
from sglang_spec_harness.rundir import valid_number
from sglang_spec_harness.report.key_numbers import accept_line, count_lines, counts_from_rules, tpot_numbers
from sglang_spec_harness.pages.numbers import MISSING, fixed, fmt, interval, p_value, pct, ratio, signed, signed_pct
from sglang_spec_harness.pages.render import VERDICT_CLASS, render
from sglang_spec_harness.scenario import render_args
from sglang_spec_harness.vocabulary import FAIL, INFO, PASS


def _safe(data: ReportData, label: str, draw: Any, *args: Any) -> str | None:
    """A figure, or None with a note: numbers on disk may be damaged past what a plot can scale to."""
    try:
        return draw(*args)
    except (ValueError, OverflowError, TypeError, ZeroDivisionError) as exc:
        import matplotlib.pyplot as plt

        plt.close("all")
        data.notes.append(f"The {label} figure could not be drawn from the numbers on disk ({type(exc).__name__}: {exc}).")
        return None


# ---- the first screen ---------------------------------------------------------------------------


def _banner(data: ReportData) -> dict[str, Any]:
    results = data.results or {}
    return {
        "scenario": data.scenario_name,
        "aa": bool(data.run.get("aa") or results.get("aa")),
        "description": str(data.scenario.get("description") or "").strip(),
        "run": data.run_dir.name,
        "status": data.run.get("status") or results.get("run_status") or "unknown",
        "trials_ok": sum(t.ok for t in data.trials),
        "trials": len(data.trials),
        "evaluated": results.get("evaluated_at"),
    }


@dataclass(frozen=True)
class _Rule:
    """One rule of results.json as the page shows it (values as found: the template escapes them)."""

    name: Any
    kind: Any
    verdict: Any
    reason: Any
    description: Any
    preconditions: list[tuple[bool, Any, Any]]  # (ok, what, detail)
    numbers: str  # "key = value, ..." of the scalar numbers
    params: str  # the rule's parameters as JSON

    @property
    def has_details(self) -> bool:
        return bool(self.description or self.preconditions or self.numbers or self.params)


def _rule(rule: dict[str, Any]) -> _Rule:
    pre = [p for p in rule.get("preconditions") or [] if isinstance(p, dict)]
    numbers = numbers_of(rule)
    written = numbers.model_dump(mode="json") if numbers is not None else {}
    scalars = {k: v for k, v in written.items() if not isinstance(v, (list, dict))}
    if isinstance(numbers, OutputIdentityNumbers) and numbers.first_difference is not None:
        scalars["first_difference"] = json.dumps(written["first_difference"])
    return _Rule(
        name=rule.get("name"), kind=rule.get("kind"), verdict=rule.get("verdict"),
        reason=rule.get("reason") or "no reason given", description=rule.get("description"),
        preconditions=[(bool(p.get("ok")), p.get("what", ""), p.get("detail", "")) for p in pre],
        numbers=", ".join(f"{k} = {fmt(v, 5)}" for k, v in scalars.items()),
        params=json.dumps(rule["params"]) if rule.get("params") else "",
    )


def _why(data: ReportData) -> dict[str, Any] | None:
    """For anything but PASS: the reasons, worst first, right under the verdict."""
    verdict = data.verdict
    if verdict == PASS:
        return None
    if verdict is None:
        reasons = [n for n in data.notes if n.startswith("results.json")] or ["results.json holds no verdict."]
        if data.run.get("error"):
            reasons.append(f"The run stopped early: {data.run['error']}.")
        return {"cls": "NONE", "title": "Why there is no verdict", "rules": [], "reasons": reasons}
    bad = [r for r in data.rules if r.get("verdict") == FAIL] + [
        r for r in data.rules if r.get("verdict") not in (FAIL, PASS, INFO)
    ]
    reasons = [data.run["error"]] if not bad and data.run.get("error") else []
    return {"cls": VERDICT_CLASS[verdict], "title": f"Why {verdict}", "rules": [_rule(r) for r in bad],
            "reasons": reasons}


def _rules(data: ReportData) -> dict[str, list[_Rule]]:
    """The judged rules; then, apart, the informational ones (no bound: they cannot fail and are
    not part of the verdict)."""
    return {"judged": [_rule(r) for r in data.rules if r.get("verdict") != "INFO"],
            "info": [_rule(r) for r in data.rules if r.get("verdict") == "INFO"]}


def _variants(data: ReportData) -> list[dict[str, Any]]:
    cards = []
    names = data.variant_names
    for name in names:
        info = next((v for v in data.variants if v.name == name), None)
        trials = data.trials_of(name, ok_only=False)
        card: dict[str, Any] = {
            "name": name, "colour": figures.variant_colour(name, names), "info": info,
            "ok": sum(t.ok for t in trials), "trials": len(trials),
            "timed": len([t for t in trials if t.kind == "timed"]),
            "profiled": len([t for t in trials if t.kind == "profiled"]),
            "command": next((t.command for t in trials if t.command), None),
        }
        if info is not None:
            card.update(
                args=" ".join(render_args(info.args)) if info.args else "",
                env=" ".join(f"{k}={v}" for k, v in info.env.items()),
                patches=", ".join(info.patches),
                pythonpath=":".join(info.pythonpath),
            )
        cards.append(card)
    return cards


def _key_numbers(data: ReportData) -> list[str]:
    items = [tpot_numbers(data).line(), accept_line(data)]
    softmax = count_lines(counts_from_rules(data))
    items.append("Softmax count: " + ("; ".join(softmax) if softmax else "no kernel_count observations"))
    for rule in data.rules_of_kind("output_identity"):
        if isinstance(n := numbers_of(rule), OutputIdentityNumbers):
            items.append(f"Greedy outputs identical: {n.identical} of {n.compared} requests")
    for rule in data.rules_of_kind("explained_gain"):
        e = numbers_of(rule)
        if isinstance(e, ExplainedGainNumbers) and (e.measured_saving_ms is not None or e.predicted_saving_ms is not None):
            items.append(
                f"Saving per token: measured {fmt(e.measured_saving_ms)} ms, predicted from the traces "
                f"{fmt(e.predicted_saving_ms)} ms (ratio {fmt(e.ratio)})"
            )
    return items


# ---- figures ------------------------------------------------------------------------------------


def _figures(data: ReportData) -> dict[str, Any]:
    """Every figure (None where it cannot be drawn: the page says why) and what the captions quote.
    Drawn in page order."""
    variants = data.variant_names
    pattern = av.main_pattern(data)
    out: dict[str, Any] = {"pattern": pattern}

    bars = av.count_bars(data, pattern)
    out["counts"] = _safe(data, "pattern counts", figures.counts_figure, bars, pattern,
                          [v for v in variants if any(b.variant == v for b in bars)]) if bars else None

    region_time, out["region_unit"] = av.region_time_per_cycle(data)
    out["region_time"] = _safe(data, "time per region", figures.region_time_figure, region_time, out["region_unit"],
                               av.REGION_ORDER) if region_time else None

    tpot = tpot_numbers(data)
    points = [
        figures.TrialPoint(t.index, t.variant, v, t.launch)
        for t in data.trials if t.ok and t.kind == "timed" and (v := t.number("median_tpot_ms")) is not None
    ]
    out["tpot"] = _safe(data, "TPOT", figures.tpot_figure, points, variants, tpot.ratio,
                        (tpot.ci_low, tpot.ci_high) if tpot.ci_low is not None and tpot.ci_high is not None else None,
                        tpot.min_gain, tpot.confidence) if points else None
    out["tpot_line"] = tpot.line()

    out.update(_pairs_and_launches(data, tpot))
    out["looks"] = _looks(data, tpot)

    accept_points = [
        figures.TrialPoint(t.index, t.variant, v)
        for t in data.trials if t.ok and t.kind == "timed" and (v := t.number("accept_length")) is not None
    ]
    tolerance = next((n.rel_tolerance for r in data.rules_of_kind("accept_length")
                      if isinstance(n := numbers_of(r), AcceptLengthNumbers)), None)
    out["accept"] = _safe(data, "accept length", figures.accept_figure, accept_points, variants,
                          valid_number(tolerance)) if accept_points else None
    out["accept_line"] = accept_line(data)

    timeline, out["timeline_unit"] = av.cycle_timelines(data, pattern)
    out["timeline"] = _safe(data, "timeline", figures.timeline_figure, timeline, pattern,
                            out["timeline_unit"]) if timeline else None
    out["match_colour"] = figures.MATCH_COLOUR
    return out


def _looks(data: ReportData, tpot: Any) -> dict[str, Any] | None:
    """An adaptive run's path (run.json `looks`): each look's numbers, what it did and why, and the
    figure of the interval narrowing; None for a fixed design."""
    looks = [as_object(look) for look in data.run.get("looks") or [] if isinstance(look, dict)]
    if not looks:
        return None
    rows = []
    for number, look in enumerate(looks):
        estimate, low, high = (valid_number(look.get(k)) for k in ("ratio", "ci_low", "ci_high"))
        rows.append({
            "look": number, "kind": look.get("kind", MISSING), "rounds": look.get("rounds", MISSING),
            "launches": look.get("launches_per_arm", MISSING),
            "alpha": ratio(valid_number(look.get("nominal_alpha"))),
            "verdict": look.get("verdict") or MISSING,
            "interval": MISSING if None in (estimate, low, high) else f"{ratio(estimate)} {interval(low, high)}",
            "mde": pct(valid_number(look.get("min_detectable_gain")), 2),
            "spread": MISSING if valid_number(look.get("sd_block")) is None else (
                f"{pct(valid_number(look.get('sd_launch')) or 0, 2)} / {pct(look['sd_block'], 2)}"),
            "elapsed": fmt(look.get("elapsed_s"), 1), "action": look.get("action", MISSING), "reason": look.get("reason", ""),
        })
    points = [(look.get("rounds"), valid_number(look.get("ratio")), valid_number(look.get("ci_low")), valid_number(look.get("ci_high")))
              for look in looks if look.get("kind") == "tpot"]
    points = [p for p in points if isinstance(p[0], int) and None not in p[1:]]
    figure = _safe(data, "looks", figures.looks_figure, [p[0] for p in points], [p[1] for p in points],
                   [p[2] for p in points], [p[3] for p in points], tpot.min_gain) if points else None
    return {"rows": rows, "figure": figure, "why_stopped": rows[-1]["reason"]}


def _pairs_and_launches(data: ReportData, tpot: Any) -> dict[str, Any]:
    """The paired differences per round, and (warm modes) the launches next to the blocks: how far
    apart two launches of one arm were, against how far apart two blocks of one launch were."""
    rule = next(iter(data.rules_of_kind("tpot_gain")), None) or next(iter(data.rules_of_kind("aa_noise")), None)
    numbers = numbers_of(rule) if rule is not None else None
    sampled = numbers if isinstance(numbers, (TpotGainNumbers, AaNoiseNumbers)) else TpotGainNumbers()
    reps = sampled.pair_repetitions if isinstance(sampled, TpotGainNumbers) else []  # A/A: pairs, no rounds
    pairs = [(r, x) for r, x in zip(reps, map(valid_number, sampled.pair_ratios)) if x is not None and x > 0]
    out: dict[str, Any] = {"has_pairs": bool(pairs), "pairs": None, "launches": None}
    if pairs:
        ci = (tpot.ci_low, tpot.ci_high) if tpot.ci_low is not None and tpot.ci_high is not None else None
        out["pairs"] = _safe(data, "paired differences", figures.pairs_figure, [r for r, _ in pairs],
                             [x for _, x in pairs], tpot.ratio, ci, tpot.min_gain)
    nested = sampled.nested
    if not (data.launches or nested):
        return out
    spread = None
    if nested is not None and nested.sd_block is not None:
        launch_sd = nested.sd_launch
        spread = {"launch_sd": None, "block_sd": pct(nested.sd_block, 2), "pooled": nested.pooled}
        if launch_sd is not None:
            spread.update(launch_sd=pct(launch_sd, 2), launch_p=p_value(nested.launch_p))
            if not spread["pooled"]:
                spread["df"] = fixed(nested.df, 1)
    levels = nested.launch_means if nested is not None else {}
    rows = []
    for launch in data.launches:
        served = [t for t in data.trials if t.launch == launch.get("dir")]
        tpots = [v for t in served if t.ok and t.kind == "timed" and (v := t.number("median_tpot_ms")) is not None]
        level = levels.get(launch.get("dir", ""))  # every launch has its dir (data.py keeps no other)
        log = launch.get("server_log")
        rows.append({
            "dir": launch.get("dir", MISSING), "arm": launch.get("arm", MISSING), "status": launch.get("status", MISSING),
            "blocks": sum(1 for t in served if t.kind == "timed"),
            "profiled": sum(1 for t in served if t.kind == "profiled"),
            "median_tpot": fmt(sorted(tpots)[len(tpots) // 2] if tpots else None, 3),
            "level": MISSING if level is None else signed_pct(level - 1, 2),
            "startup": fmt(launch.get("startup_s"), 1), "warmup": fmt(launch.get("warmup_s"), 1),
            "log": data.relative(log) if log else None,
        })
    out["launches"] = {"spread": spread, "rows": rows}
    return out


# ---- tables -------------------------------------------------------------------------------------


def _top_kernels(data: ReportData) -> dict[str, Any]:
    tables, unit = av.top_kernels(data)
    regions = []
    for region, rows in tables.items():
        shown = []
        for row in rows:
            delta = row.delta_us
            shown.append({
                "name": row.name, "short": row.name if len(row.name) <= 110 else row.name[:107] + "…",
                "baseline": fmt(row.baseline_us), "candidate": fmt(row.candidate_us),
                "delta_class": "delta-down" if delta is not None and delta < 0 else "delta-up" if delta else "",
                "delta": signed(delta),
                "baseline_calls": fmt(row.baseline_calls), "candidate_calls": fmt(row.candidate_calls),
            })
        regions.append((region, shown))
    return {"unit": unit, "regions": regions}


def _tables(data: ReportData) -> dict[str, Any]:
    out: dict[str, Any] = {"top": _top_kernels(data)}

    rank_rows = av.rank_facts(data)
    if rank_rows:
        # One column per (trial, rank), one row per fact: ranks compare side by side.
        facts = [k for k in rank_rows[0] if k not in ("variant", "rank")]
        out["ranks"] = {"headers": ["fact"] + [f"{r['variant']} · rank {r['rank']}" for r in rank_rows],
                        "rows": [[fact] + [fmt(r.get(fact)) for r in rank_rows] for fact in facts]}
    else:
        out["ranks"] = None

    out["validity"] = [
        [str(rule.get("name")), "ok" if pre.get("ok") else "NOT MET", str(pre.get("what", "")), str(pre.get("detail", ""))]
        for rule in data.rules for pre in rule.get("preconditions") or [] if isinstance(pre, dict)
    ]
    out["warnings"] = av.analysis_warnings(data)
    out["trials"] = [
        [str(t.index), t.name, t.variant, t.kind, t.status, fmt(t.number("median_tpot_ms"), 4),
         fmt(t.number("accept_length"), 4), fmt(t.summary.get("requests")), fmt(t.summary.get("errors")),
         fmt(t.number("output_throughput_tok_s")), t.error or ""] for t in data.trials
    ]
    out["environment"] = _environment(data)
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for k, v in value.items():
            flat.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return {prefix: json.dumps(value)[:300]}
    return {prefix: ", ".join(map(str, value)) if isinstance(value, list) else str(value)}


def _environment(data: ReportData) -> dict[str, Any]:
    """environment.json (per variant where it says so), then each variant's server_info side by side:
    one row per key, with whether the variants differ."""
    env = data.environment
    names = data.variant_names
    per_variant = as_object(env.get("variants"))
    shared = {k: v for k, v in env.items() if k != "variants"}
    columns: dict[str, dict[str, str]] = {}
    for name in names:
        flat = _flatten(shared)
        flat.update(_flatten(per_variant.get(name, {})))
        trial = next((t for t in data.trials_of(name) if t.server_info), None)
        if trial is not None:
            flat.update({f"server_info.{k}": v for k, v in _flatten(trial.server_info).items()})
        columns[name] = flat
    keys = list(dict.fromkeys(k for col in columns.values() for k in col))
    rows = []
    for key in keys:
        values = [columns[n].get(key, MISSING) for n in names]
        rows.append((key, values, len(set(values)) > 1))
    return {"names": names, "rows": rows}


def _files(data: ReportData) -> dict[str, Any]:
    """Relative links (`./...`, see ReportData.relative) to every file of the run."""
    trials = []
    for t in data.trials:
        requests, trial_json = t.dir / "requests.jsonl", t.dir / "trial.json"
        trials.append({
            "name": t.name, "status": t.status,
            "traces": [(data.relative(p), p.name) for p in t.trace_paths], "missing": t.missing_traces,
            "log": data.relative(t.server_log) if t.server_log else None,
            "requests": data.relative(requests) if requests.exists() else None,
            "trial": data.relative(trial_json) if trial_json.exists() else None,
        })
    run_files = [
        name for name in ("results.json", "analysis.json", "run.json", "environment.json", "scenario.yaml",
                          "junit.xml", "summary.md", "traceback.txt")
        if (data.run_dir / name).exists() or name in ("junit.xml", "summary.md")
    ]
    return {"trials": trials, "run": run_files}


def render_html(data: ReportData) -> str:
    # Figures and tables first: reading the traces may add notes, which belong at the top.
    figures_view, tables_view = _figures(data), _tables(data)
    word = data.verdict or "NO VERDICT"
    return render(
        "report.html",
        title=f"{word} · {data.scenario_name} · {data.run_dir.name}",
        banner_class=VERDICT_CLASS.get(data.verdict or "", "NONE"), banner_word=word, banner=_banner(data),
        why=_why(data), rules=_rules(data), notes=data.notes, variants=_variants(data), numbers=_key_numbers(data),
        figures=figures_view, tables=tables_view, files=_files(data), run_dir=str(data.run_dir),
    )
