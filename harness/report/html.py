"""index.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Layout, top to bottom: the verdict and why (the first screen), the rules, notes on missing pieces,
the variants, key numbers, the figures (each with a caption saying what to look for), the tables,
and links to every trace file and server log.
"""

from __future__ import annotations

import json
from typing import Any

from harness import __version__
from harness.report import analysis_view as av
from harness.report import figures
from harness.report.data import ReportData, plottable
from harness.report.numbers import accept_line, count_lines, counts_from_rules, fmt, tpot_numbers
from harness.report.page import VERDICT_CLASS, document
from harness.report.page import esc as _e
from harness.report.page import figure as _figure
from harness.report.page import pill as _pill
from harness.report.page import table as _table
from harness.scenario import render_args

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


def _banner(data: ReportData) -> str:
    verdict = data.verdict
    cls = VERDICT_CLASS.get(verdict or "", "NONE")
    status = data.run.get("status") or (data.results or {}).get("run_status") or "unknown"
    aa = " · A/A (both arms run the baseline)" if data.run.get("aa") or (data.results or {}).get("aa") else ""
    evaluated = (data.results or {}).get("evaluated_at")
    description = str(data.scenario.get("description") or "").strip()
    return f"""<header class="banner {cls}"><div class="inner">
<div class="verdict-word" id="verdict">{_e(verdict or "NO VERDICT")}</div>
<div class="meta"><b>{_e(data.scenario_name)}</b>{_e(aa)}<br>
{_e(description)}<br>
run <code>{_e(data.run_dir.name)}</code> · status {_e(status)} · {sum(t.ok for t in data.trials)} of {len(data.trials)} trials ok
{f" · evaluated {_e(evaluated)}" if evaluated else ""}</div>
</div></header>"""


def _why(data: ReportData) -> str:
    """For anything but PASS: the reasons, worst first, right under the verdict."""
    verdict = data.verdict
    if verdict == "PASS":
        return ""
    if verdict is None:
        reasons = [n for n in data.notes if n.startswith("results.json")] or ["results.json holds no verdict."]
        if data.run.get("error"):
            reasons.append(f"The run stopped early: {data.run['error']}.")
        items = "".join(f"<li>{_e(r)}</li>" for r in reasons)
        return f'<div class="why NONE" id="why"><h2>Why there is no verdict</h2><ul>{items}</ul></div>'
    bad = [r for r in data.rules if r.get("verdict") == "FAIL"] + [
        r for r in data.rules if r.get("verdict") not in ("FAIL", "PASS", "INFO")
    ]
    items = "".join(
        f"<li>{_pill(r.get('verdict'))} <b>{_e(r.get('name'))}</b>: {_e(r.get('reason') or 'no reason given')}</li>"
        for r in bad
    )
    if not items and data.run.get("error"):
        items = f"<li>{_e(data.run['error'])}</li>"
    return f'<div class="why {VERDICT_CLASS[verdict]}" id="why"><h2>Why {_e(verdict)}</h2><ul>{items}</ul></div>'


def _rule_reason(rule: dict[str, Any]) -> str:
    """The reason, which opens onto the rule's preconditions and numbers (one line per rule)."""
    reason = _e(rule.get("reason") or "no reason given")
    parts = []
    if rule.get("description"):
        parts.append(f"<div>{_e(rule['description'])}</div>")
    pre = [p for p in rule.get("preconditions") or [] if isinstance(p, dict)]
    if pre:
        items = "".join(
            f"<li>{'✓' if p.get('ok') else '✗'} {_e(p.get('what', ''))}: {_e(p.get('detail', ''))}</li>" for p in pre
        )
        parts.append(f"<div>Preconditions:<ul>{items}</ul></div>")
    numbers = rule.get("numbers") if isinstance(rule.get("numbers"), dict) else {}
    scalars = {k: v for k, v in numbers.items() if not isinstance(v, (list, dict))}
    if numbers.get("first_difference"):
        scalars["first_difference"] = json.dumps(numbers["first_difference"])
    if scalars:
        parts.append("<div class='mono'>" + _e(", ".join(f"{k} = {fmt(v, 5)}" for k, v in scalars.items())) + "</div>")
    if rule.get("params"):
        parts.append("<div class='mono'>rule: " + _e(json.dumps(rule["params"])) + "</div>")
    if not parts:
        return reason
    return f'<details class="rule"><summary>{reason}</summary><div class="rule-details">{"".join(parts)}</div></details>'



def _rules(data: ReportData) -> str:
    """The judged rules; then, apart, the informational ones (no bound: they cannot fail and are
    not part of the verdict)."""
    if not data.rules:
        return '<section id="rules"><h2>Rules</h2><div class="missing">No rule results (results.json missing or empty).</div></section>'

    def table(rules: list[dict[str, Any]]) -> str:
        rows = []
        for rule in rules:
            verdict = rule.get("verdict")
            rows.append(
                f'<tr class="rule-{_e(verdict)}"><td>{_pill(verdict)}</td><td><code>{_e(rule.get("name"))}</code></td>'
                f'<td>{_e(rule.get("kind"))}</td><td>{_rule_reason(rule)}</td></tr>'
            )
        return ('<table><thead><tr><th>verdict</th><th>rule</th><th>kind</th>'
                f"<th>reason</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")

    judged = [r for r in data.rules if r.get("verdict") != "INFO"]
    info = [r for r in data.rules if r.get("verdict") == "INFO"]
    out = ['<section id="rules"><h2>Rules</h2>', table(judged) if judged else
           '<div class="missing">No rule that can fail was evaluated.</div>']
    if info:
        out.append('<h3 id="informational">Informational: no bound set, so not part of the verdict</h3>')
        out.append(table(info))
    out.append("</section>")
    return "".join(out)


def _notes(data: ReportData) -> str:
    if not data.notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in data.notes)
    return f'<section class="notes" id="notes"><h2>Missing or failed pieces</h2><ul>{items}</ul></section>'


def _variants(data: ReportData) -> str:
    cards = []
    names = data.variant_names
    for name in names:
        info = next((v for v in data.variants if v.name == name), None)
        colour = figures.variant_colour(name, names)
        lines = []
        if info is not None:
            lines.append(f"<div>{_e(info.description) or '<i>no description</i>'}</div>")
            args = " ".join(render_args(info.args)) if info.args else ""
            lines.append(f"<div>flags: <code>{_e(args) or '(none)'}</code></div>")
            if info.env:
                lines.append(f"<div>env: <code>{_e(' '.join(f'{k}={v}' for k, v in info.env.items()))}</code></div>")
            if info.patches:
                lines.append(f"<div>patches: <code>{_e(', '.join(info.patches))}</code></div>")
            if info.pythonpath:
                lines.append(f"<div>PYTHONPATH: <code>{_e(':'.join(info.pythonpath))}</code></div>")
            if info.python:
                lines.append(f"<div>python: <code>{_e(info.python)}</code></div>")
        trials = data.trials_of(name, ok_only=False)
        ok = sum(t.ok for t in trials)
        lines.append(f"<div>trials: {ok} of {len(trials)} ok "
                     f"({len([t for t in trials if t.kind == 'timed'])} timed, "
                     f"{len([t for t in trials if t.kind == 'profiled'])} profiled)</div>")
        command = next((t.command for t in trials if t.command), None)
        if command:
            lines.append(f"<details><summary>server command</summary><code>{_e(command)}</code></details>")
        cards.append(f'<div class="variant" style="border-top-color:{colour}"><h3>{_e(name)}</h3>{"".join(lines)}</div>')
    return f'<section id="variants"><h2>Variants</h2><div class="variants">{"".join(cards)}</div></section>'


def _key_numbers(data: ReportData) -> str:
    items = [tpot_numbers(data).line(), accept_line(data)]
    softmax = count_lines(counts_from_rules(data))
    items.append("Softmax count: " + ("; ".join(softmax) if softmax else "no kernel_count observations"))
    for rule in data.rules_of_kind("output_identity"):
        n = rule.get("numbers") or {}
        if isinstance(n.get("compared"), int):
            items.append(f"Greedy outputs identical: {n.get('identical')} of {n.get('compared')} requests")
    for rule in data.rules_of_kind("explained_gain"):
        n = rule.get("numbers") or {}
        if n.get("measured_saving_ms") is not None or n.get("predicted_saving_ms") is not None:
            items.append(
                f"Saving per token: measured {fmt(n.get('measured_saving_ms'))} ms, predicted from the traces "
                f"{fmt(n.get('predicted_saving_ms'))} ms (ratio {fmt(n.get('ratio'))})"
            )
    lis = "".join(f"<li>{_e(i)}</li>" for i in items)
    return f'<section id="numbers"><h2>Key numbers</h2><ul>{lis}</ul></section>'


# ---- figures ------------------------------------------------------------------------------------


def _figures(data: ReportData) -> str:
    variants = data.variant_names
    out = ['<section id="figures"><h2>Figures</h2>']
    pattern = av.main_pattern(data)

    bars = av.count_bars(data, pattern)
    out.append("<h3>Where the pattern runs</h3>")
    out.append(_figure(
        _safe(data, "pattern counts", figures.counts_figure, bars, pattern,
              [v for v in variants if any(b.variant == v for b in bars)]) if bars else None,
        f"<b>What to look for:</b> the <code>{_e(pattern)}</code> matches in each region of the profiled trial, per "
        "graph replay (or per region span on CPU) and in total. The candidate's bars should be zero in the draft "
        "regions and the baseline's should not (a zero baseline means the analysis cannot see the kernel). A "
        "min line below the bar means the count differs between replays.",
        "No pattern counts: the trace analysis (analysis.json) is missing and no kernel_count rule recorded observations.",
    ))

    region_time, unit_label = av.region_time_per_cycle(data)
    out.append("<h3>Where the time goes</h3>")
    out.append(_figure(
        _safe(data, "time per region", figures.region_time_figure, region_time, unit_label, av.REGION_ORDER) if region_time else None,
        f"<b>What to look for:</b> {_e(unit_label)} per decoding cycle in each region of the profiled trials, "
        "stacked. The difference in total between the bars is where the gain comes from; it should sit in the "
        "draft regions when the softmax is removed. Profiled trials run under the profiler: compare the shares, "
        "not the absolute times, with the TPOT below.",
        "No region times: no trace analysis with region times (analysis.json missing or empty).",
    ))

    tpot = tpot_numbers(data)
    points = [
        figures.TrialPoint(t.index, t.variant, v, t.launch)
        for t in data.trials if t.ok and t.kind == "timed" and (v := t.number("median_tpot_ms")) is not None
    ]
    out.append("<h3>TPOT</h3>")
    out.append(_figure(
        _safe(data, "TPOT", figures.tpot_figure, points, variants, tpot.ratio,
              (tpot.ci_low, tpot.ci_high) if tpot.ci_low is not None and tpot.ci_high is not None else None,
              tpot.min_gain, tpot.confidence) if points else None,
        "<b>What to look for:</b> left, the median TPOT of each timed trial in run order: the variants should "
        "alternate (interleaving) and neither should drift with time. Middle, each variant's spread. Right, the "
        "candidate/baseline ratio with its confidence interval: a gain is real only if the whole interval lies "
        f"below the required line. {_e(tpot.line())}.",
        "No timed trial reported a TPOT.",
    ))

    out.append(_pairs_and_launches(data, tpot))

    accept_points = [
        figures.TrialPoint(t.index, t.variant, v)
        for t in data.trials if t.ok and t.kind == "timed" and (v := t.number("accept_length")) is not None
    ]
    tolerance = next((r.get("numbers", {}).get("rel_tolerance") for r in data.rules_of_kind("accept_length")
                      if isinstance(r.get("numbers"), dict)), None)
    out.append("<h3>Accept length</h3>")
    out.append(_figure(
        _safe(data, "accept length", figures.accept_figure, accept_points, variants, plottable(tolerance))
        if accept_points else None,
        "<b>What to look for:</b> tokens accepted per target verify in each timed trial. The candidate's points "
        "should sit on the baseline's (inside the shaded tolerance band): the fast path must not change what the "
        f"draft proposes. {_e(accept_line(data))}.",
        "No timed trial reported an accept length.",
    ))

    timeline, unit = av.cycle_timelines(data, pattern)
    out.append("<h3>One cycle of each variant</h3>")
    out.append(_figure(
        _safe(data, "timeline", figures.timeline_figure, timeline, pattern, unit) if timeline else None,
        "<b>What to look for:</b> one decoding cycle (draft decode, target verify, draft extend) from each "
        f"variant's profiled trace, on the same time axis. Top lane: the regions; below: the {_e(unit)} inside them, "
        f"<span style='color:{figures.MATCH_COLOUR}'>red</span> where they match <code>{_e(pattern)}</code>. "
        "The candidate should have no red in its draft regions and shorter draft regions.",
        "No timeline: no readable trace file of a profiled trial (see the notes).",
    ))
    out.append("</section>")
    return "".join(out)


def _pairs_and_launches(data: ReportData, tpot: Any) -> str:
    """The paired differences per round, and (warm modes) the launches next to the blocks: how far
    apart two launches of one arm were, against how far apart two blocks of one launch were."""
    rule = next(iter(data.rules_of_kind("tpot_gain")), None) or next(iter(data.rules_of_kind("aa_noise")), None)
    numbers = rule.get("numbers") if isinstance(rule, dict) and isinstance(rule.get("numbers"), dict) else {}
    reps, ratios = numbers.get("pair_repetitions") or [], numbers.get("pair_ratios") or []
    pairs = [(r, x) for r, x in zip(reps, map(plottable, ratios)) if isinstance(r, int) and x is not None and x > 0]
    out = []
    if pairs:
        ci = (tpot.ci_low, tpot.ci_high) if tpot.ci_low is not None and tpot.ci_high is not None else None
        out.append("<h3>Paired differences</h3>")
        out.append(_figure(
            _safe(data, "paired differences", figures.pairs_figure, [r for r, _ in pairs], [x for _, x in pairs],
                  tpot.ratio, ci, tpot.min_gain),
            "<b>What to look for:</b> the candidate/baseline TPOT ratio of each pair (the two blocks of a round: "
            "same prompts, back to back; in restart mode the two trials of a repetition), in run order, with the "
            "rule's estimate and interval. The pairs should scatter around the estimate without a trend; a run of "
            "pairs far from the rest points at a disturbance on the machine.",
            "No complete pairs.",
        ))
    nested = numbers.get("nested") if isinstance(numbers.get("nested"), dict) else None
    if data.launches or nested:
        out.append("<h3>Server launches</h3>")
        if nested and nested.get("sd_block") is not None:
            launch_sd = nested.get("sd_launch")
            spread = (f"Two launches of one arm differed by a standard deviation of <b>{launch_sd:.2%}</b> "
                      f"(F test of launch effects p = {nested.get('launch_p') or float('nan'):.2g}), two blocks of one "
                      f"launch by <b>{nested['sd_block']:.2%}</b>. "
                      if launch_sd is not None else
                      f"Blocks of one launch differed by {nested['sd_block']:.2%}; with one launch per arm the "
                      "launch-to-launch spread cannot be measured. ")
            spread += ("The launches differed no more than their blocks make them: the launch term was pooled into the "
                       "block noise." if nested.get("pooled") else
                       f"The interval accounts for it ({nested.get('df') or float('nan'):.1f} degrees of freedom)."
                       if launch_sd is not None else "")
            out.append(f"<p>{spread}</p>")
        levels = nested.get("launch_means") if nested and isinstance(nested.get("launch_means"), dict) else {}
        rows = []
        for launch in data.launches:
            served = [t for t in data.trials if t.launch == launch.get("dir")]
            tpots = [v for t in served if t.ok and t.kind == "timed" and (v := t.number("median_tpot_ms")) is not None]
            level = levels.get(launch.get("dir"))
            log = launch.get("server_log")
            rows.append([
                _e(launch.get("dir", "?")), _e(launch.get("arm", "?")), _e(launch.get("status", "?")),
                str(sum(1 for t in served if t.kind == "timed")), str(sum(1 for t in served if t.kind == "profiled")),
                fmt(sorted(tpots)[len(tpots) // 2] if tpots else None, 3),
                "-" if level is None else f"{level - 1:+.2%}",
                fmt(launch.get("startup_s"), 1), fmt(launch.get("warmup_s"), 1),
                f'<a href="{_e(data.relative(log))}">server.log</a>' if log else "-",
            ])
        if rows:
            out.append(_table(["launch", "arm", "status", "blocks", "profiled", "median TPOT ms",
                               "level vs its arm", "start-up s", "warm-up s", "log"],
                              rows, numeric=(3, 4, 5, 6, 7, 8), raw=True))
    return "".join(out)


# ---- tables -------------------------------------------------------------------------------------


def _top_kernels(data: ReportData) -> str:
    tables, unit = av.top_kernels(data)
    if not tables:
        return '<h3>Top kernels per region</h3><div class="missing">No trace analysis to rank kernels or ops by time.</div>'
    out = [f"<h3>Top {_e(unit)} by time per region</h3><p>Time per cycle (µs) in the profiled trials; the change is "
           "candidate − baseline (green: less time). Rows are the union of each variant's top entries.</p>"]
    for region, rows in tables.items():
        body = []
        for row in rows:
            delta = row.delta_us
            cls = "delta-down" if delta is not None and delta < 0 else "delta-up" if delta else ""
            short = row.name if len(row.name) <= 110 else row.name[:107] + "…"
            body.append([
                f'<code title="{_e(row.name)}">{_e(short)}</code>', _e(fmt(row.baseline_us)), _e(fmt(row.candidate_us)),
                f'<span class="{cls}">{_e(("+" if delta and delta > 0 else "") + fmt(delta))}</span>',
                _e(fmt(row.baseline_calls)), _e(fmt(row.candidate_calls)),
            ])
        out.append(f"<h3><code>{_e(region)}</code></h3>")
        out.append(_table(["name", "baseline µs/cycle", "candidate µs/cycle", "change µs", "baseline calls/cycle",
                           "candidate calls/cycle"], body, numeric=(1, 2, 3, 4, 5), raw=True))
    return "".join(out)


def _tables(data: ReportData) -> str:
    out = ['<section id="tables"><h2>Tables</h2>', _top_kernels(data)]

    rank_rows = av.rank_facts(data)
    out.append("<h3>Per-rank facts (profiled trials)</h3>")
    if rank_rows:
        # One column per (trial, rank), one row per fact: ranks compare side by side.
        headers = ["fact"] + [f"{r['variant']} · rank {r['rank']}" for r in rank_rows]
        facts = [k for k in rank_rows[0] if k not in ("variant", "rank")]
        out.append(_table(headers, [[fact] + [fmt(r.get(fact)) for r in rank_rows] for fact in facts],
                          numeric=tuple(range(1, len(headers)))))
    else:
        out.append('<div class="missing">No trace analysis: no per-rank facts.</div>')

    out.append("<h3>Validity of the measurement</h3>")
    validity = []
    for rule in data.rules:
        for pre in rule.get("preconditions") or []:
            if isinstance(pre, dict):
                validity.append([str(rule.get("name")), "ok" if pre.get("ok") else "NOT MET", str(pre.get("what", "")),
                                 str(pre.get("detail", ""))])
    warnings = av.analysis_warnings(data)
    if validity:
        out.append(_table(["rule", "", "precondition", "detail"], validity))
    else:
        out.append('<div class="missing">No preconditions recorded in results.json.</div>')
    if warnings:
        out.append("<p>Warnings of the trace analysis:</p><ul>" + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")

    out.append("<h3>Trials</h3>")
    out.append(_table(
        ["#", "trial", "variant", "kind", "status", "median TPOT ms", "accept length", "requests", "errors", "tok/s", "error"],
        [[str(t.index), t.name, t.variant, t.kind, t.status, fmt(t.number("median_tpot_ms"), 4),
          fmt(t.number("accept_length"), 4), fmt(t.summary.get("requests")), fmt(t.summary.get("errors")),
          fmt(t.number("output_throughput_tok_s")), t.error or ""] for t in data.trials],
        numeric=(0, 5, 6, 7, 8, 9),
    ))

    out.append("<h3>Environment</h3>")
    out.append(_environment(data))
    out.append("</section>")
    return "".join(out)


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for k, v in value.items():
            flat.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return {prefix: json.dumps(value)[:300]}
    return {prefix: ", ".join(map(str, value)) if isinstance(value, list) else str(value)}


def _environment(data: ReportData) -> str:
    """environment.json (per variant where it says so), then each variant's server_info side by side."""
    env = data.environment
    names = data.variant_names
    per_variant = env.get("variants") if isinstance(env.get("variants"), dict) else {}
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
    if not keys:
        return '<div class="missing">No environment metadata (environment.json missing, no server_info).</div>'
    rows = []
    for key in keys:
        values = [columns[n].get(key, "–") for n in names]
        differs = len(set(values)) > 1
        cells = "".join(f'<td class="{"diff" if differs else ""}"><code>{_e(v)}</code></td>' for v in values)
        rows.append(f"<tr><td><code>{_e(key)}</code></td>{cells}</tr>")
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    return (
        "<p>Shared values repeat in every column; rows that differ between variants are highlighted.</p>"
        f"<details open><summary>{len(keys)} entries</summary><table><thead><tr><th>key</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></details>"
    )


def _files(data: ReportData) -> str:
    rows = []
    for t in data.trials:
        links = [f'<a href="{_e(data.relative(p))}">{_e(p.name)}</a>' for p in t.trace_paths]
        links += [f"<span class='missing'>{_e(m)} (missing)</span>" for m in t.missing_traces]
        log = f'<a href="{_e(data.relative(t.server_log))}">server.log</a>' if t.server_log else "–"
        requests = t.dir / "requests.jsonl"
        req = f'<a href="{_e(data.relative(requests))}">requests.jsonl</a>' if requests.exists() else "–"
        trial_json = t.dir / "trial.json"
        tj = f'<a href="{_e(data.relative(trial_json))}">trial.json</a>' if trial_json.exists() else "–"
        rows.append([_e(t.name), _e(t.status), "<br>".join(links) or "–", log, req, tj])
    run_files = [
        f'<a href="./{_e(name)}">{_e(name)}</a>'
        for name in ("results.json", "analysis.json", "run.json", "environment.json", "scenario.yaml", "junit.xml",
                     "summary.md", "traceback.txt")
        if (data.run_dir / name).exists() or name in ("junit.xml", "summary.md")
    ]
    return (
        '<section id="files"><h2>Files</h2>'
        "<p>Trace files open in <a href=\"https://ui.perfetto.dev\" rel=\"noreferrer\">ui.perfetto.dev</a> "
        "(drag the file onto the page; nothing is uploaded) or in <code>chrome://tracing</code>; "
        "<code>.nsys-rep</code> files in Nsight Systems. Links are relative to this page: keep the run "
        "directory together.</p>"
        f"<p>Run: {' · '.join(run_files)}</p>"
        + _table(["trial", "status", "traces", "server log", "requests", "trial"], rows, raw=True)
        + "</section>"
    )


def render_html(data: ReportData) -> str:
    title = f"{data.verdict or 'NO VERDICT'} · {data.scenario_name} · {data.run_dir.name}"
    toc = " ".join(
        f'<a href="#{anchor}">{label}</a>'
        for anchor, label in (("rules", "Rules"), ("variants", "Variants"), ("numbers", "Key numbers"),
                              ("figures", "Figures"), ("tables", "Tables"), ("files", "Files"))
    )
    # Figures and tables first: reading the traces may add notes, which belong at the top.
    figures_html, tables_html = _figures(data), _tables(data)
    body = [
        _banner(data),
        "<main>",
        _why(data),
        _rules(data),
        _notes(data),
        f'<nav class="toc">{toc}</nav>',
        _variants(data),
        _key_numbers(data),
        figures_html,
        tables_html,
        _files(data),
        f"<footer>harness {_e(__version__)} · rebuild with <code>harness report {_e(data.run_dir)}</code></footer>",
        "</main>",
    ]
    return document(title, body)
