"""The trend page (`harness history report`): one self-contained index.html, on the run report's page
machinery (`harness.report.page`): the gate's verdict and why on the first screen, every change
point with the commits on either side and links to the run reports, one small chart per series,
and every run with its status (damaged and incomplete ones with their reason)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import __version__
from harness.history.figures import series_figure
from harness.report.figures import variant_colour
from harness.report.numbers import fmt
from harness.report.page import document, esc, figure, pill, table

GATE_WORD = {"FAIL": "REGRESSION", "PASS": "NO REGRESSION", "NO DATA": "NO DATA"}


def _short(commit: str | None) -> str:
    return commit[:10] if commit else "–"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f}%"


def _commits(c: dict[str, Any]) -> str:
    """`, SGLang a -> b` (or the harness's commits when no SGLang was recorded, e.g. micro runs)."""
    for label, key in (("SGLang", "sglang_commit"), ("harness", "harness_commit")):
        if c[f"{key}_before"] or c[f"{key}_after"]:
            return (f", {label} <code>{esc(_short(c[f'{key}_before']))}</code> → "
                    f"<code>{esc(_short(c[f'{key}_after']))}</code>")
    return ""


class _Links:
    """Relative links from the page to each run's report (only to reports that exist here)."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir.resolve()

    def run(self, name: str, report: str | None) -> str:
        if report and Path(report).exists():
            return f'<a href="{esc(os.path.relpath(report, self.out_dir))}"><code>{esc(name)}</code></a>'
        return f"<code>{esc(name)}</code>"


def _banner(facts: dict[str, Any]) -> str:
    gate = facts["gate"]["verdict"]
    runs = facts["runs"]
    cls = {"FAIL": "FAIL", "PASS": "PASS"}.get(gate, "NONE")
    return f"""<header class="banner {cls}"><div class="inner">
<div class="verdict-word" id="verdict">{esc(GATE_WORD[gate])}</div>
<div class="meta"><b>History of {runs['complete'] + runs['incomplete'] + runs['damaged']} runs</b><br>
{runs['complete']} complete · {runs['incomplete']} incomplete · {runs['damaged']} damaged ·
{len(facts['series'])} series · {len(facts['change_points'])} change points<br>
database <code>{esc(facts['database'])}</code> · a regression beyond {facts['options']['max_regression'] * 100:g}%
as the newest change point of a series fails the gate</div>
</div></header>"""


def _why(facts: dict[str, Any], links: _Links) -> str:
    gate = facts["gate"]
    if gate["verdict"] == "PASS":
        return ""
    if gate["verdict"] == "NO DATA":
        return ('<div class="why NONE" id="why"><h2>Why there is no verdict</h2><ul><li>The database holds no '
                "complete run: ingest run directories first (<code>harness history ingest reports/runs</code>)."
                "</li></ul></div>")
    items = "".join(
        f"<li><b>{esc(c['series'])}</b>: {_pct(c['magnitude']) if c['magnitude'] is not None else 'from zero'} "
        f"({fmt(c['before'], 4)} → {fmt(c['after'], 4)}) from run {links.run(c['run'], c['report'])} on</li>"
        for c in gate["failing"]
    )
    return f'<div class="why FAIL" id="why"><h2>Why the gate fails</h2><ul>{items}</ul></div>'


def _change_table(facts: dict[str, Any], links: _Links) -> str:
    points = facts["change_points"]
    if not points:
        return ('<section id="changes"><h2>Change points</h2><div class="missing">No change point in any series: '
                "every series is one level within its own noise.</div></section>")
    rows = []
    for c in points:
        verdict = "FAIL" if c["regression"] else "PASS"
        rows.append([
            pill(verdict, "regression" if c["regression"] else "improvement"),
            esc(c["series"]),
            f"{links.run(c['last_run_before'], c['report_before'])} → {links.run(c['run'], c['report'])}",
            esc(f"{fmt(c['before'], 4)} → {fmt(c['after'], 4)}"),
            esc(_pct(c["magnitude"])),
            esc("zero rule" if c["p_value"] is None else fmt(c["p_value"], 3)),
            f"<code>{esc(_short(c['sglang_commit_before']))} → {esc(_short(c['sglang_commit_after']))}</code>",
            f"<code>{esc(_short(c['harness_commit_before']))} → {esc(_short(c['harness_commit_after']))}</code>",
        ])
    return (
        '<section id="changes"><h2>Change points</h2><p>Oldest first. <b>Runs</b>: the last run before the change and '
        "the first run after it (links open their reports). <b>Before → after</b>: the means of the segments on "
        "either side. <b>p</b>: the permutation test of the split (E-divisive means); kernel counts that move "
        "from zero need no test.</p>"
        + table(["", "series", "runs", "before → after", "change", "p", "SGLang commit", "harness commit"], rows,
                numeric=(4, 5), raw=True)
        + "</section>"
    )


def _series_sections(facts: dict[str, Any], links: _Links) -> str:
    by_group: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for s in facts["series"]:
        by_group[(s["scenario"], s["aa"], s["mode"], s["hardware"])].append(s)
    points_of = defaultdict(list)
    for c in facts["change_points"]:
        points_of[c["series"]].append(c)
    out = ['<section id="series"><h2>Series</h2><p>One chart per metric and variant: each run\'s value (oldest '
           "first), the mean of each segment (grey), and each change point as a dashed line before the first run "
           "after it (red: a regression, green: an improvement).</p>"]
    if not facts["series"]:
        out.append('<div class="missing">No series: no complete run in the database.</div>')
    variants = sorted({s["variant"] for s in facts["series"]})
    for (scenario, aa, mode, hardware), members in by_group.items():
        tags = (" · A/A runs" if aa else "") + (f" · mode {mode}" if mode and mode != "restart" else "")
        out.append(f"<h3>{esc(scenario)}{esc(tags)} · {esc(hardware)} · {len(members[0]['runs'])} runs</h3>")
        out.append('<div class="grid">')
        for s in members:
            cps = points_of[s["series"]]
            colour = variant_colour(s["variant"], variants) if "/" not in s["variant"] else "#57606a"
            svg = series_figure(
                s["values"], [(c["index"], c["regression"]) for c in cps], colour=colour,
                title=f"{s['variant']} · {s['label']}", ylabel=s["unit"] or s["metric"],
                label=f"{s['series']}: {len(cps)} change points",
            )
            if cps:
                caption = "; ".join(
                    f"<b>{'regression' if c['regression'] else 'improvement'}</b> {esc(_pct(c['magnitude']))} "
                    f"({esc(fmt(c['before'], 4))} → {esc(fmt(c['after'], 4))}) at run {c['index'] + 1}: "
                    f"{links.run(c['run'], c['report'])}{_commits(c)}"
                    for c in cps
                )
            else:
                caption = "No change point."
            out.append(figure(svg, caption, ""))
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


def _runs_table(facts: dict[str, Any], links: _Links) -> str:
    rows = []
    for r in reversed(facts["run_list"]):  # newest first
        status = {"complete": "PASS", "incomplete": "INCONCLUSIVE", "damaged": "FAIL"}[r["status"]]
        rows.append([
            links.run(r["run"], r["report"]), esc(r["started"] or "–"), esc(r["scenario"] or "–")
            + (" (A/A)" if r["aa"] else ""), pill(status, r["status"]),
            pill(r["verdict"]) if r["verdict"] else "–", esc(r["hardware"]),
            f"<code>{esc(_short(r['sglang_commit']))}</code>", f"<code>{esc(_short(r['harness_commit']))}</code>",
            esc(r["reason"] or ""),
        ])
    return ('<section id="runs"><h2>Runs</h2><p>Newest first. Only complete runs enter the series; a damaged or '
            "incomplete run is listed with its reason.</p>"
            + table(["run", "started (UTC)", "scenario", "status", "verdict", "hardware", "SGLang commit",
                     "harness commit", "reason"], rows, raw=True)
            + "</section>")


def render_trend_page(facts: dict[str, Any], out_dir: Path) -> str:
    links = _Links(out_dir)
    title = f"{GATE_WORD[facts['gate']['verdict']]} · history of {sum(facts['runs'].values())} runs"
    toc = " ".join(f'<a href="#{a}">{label}</a>' for a, label in (("changes", "Change points"), ("series", "Series"),
                                                                     ("runs", "Runs")))
    body = [
        _banner(facts), "<main>", _why(facts, links), _change_table(facts, links), f'<nav class="toc">{toc}</nav>',
        _series_sections(facts, links), _runs_table(facts, links),
        f"<footer>harness {esc(__version__)} · rebuild with <code>harness history report</code> · "
        "<code>history.json</code> beside this page holds the same facts</footer>",
        "</main>",
    ]
    return document(title, body)


def write_trend_page(facts: dict[str, Any], out_dir: str | Path) -> Path:
    """index.html and history.json (the same facts) into `out_dir`; returns the page."""
    import json

    from harness.files import write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "index.html"
    write_text_atomic(out_dir / "history.json", json.dumps(facts, indent=2, ensure_ascii=False) + "\n")
    write_text_atomic(page, render_trend_page(facts, out_dir))
    return page
