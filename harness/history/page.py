"""The trend page (`harness history report`): one self-contained index.html, on the run report's page
machinery (`harness.report.page`): the gate's verdict and why on the first screen, every change
point with the commits on either side and links to the run reports, one small chart per series,
and every run with its status (damaged and incomplete ones with their reason). This module gathers
the values from the facts (history.json); `harness/templates/trend.html` lays them out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.history.figures import series_figure
from harness.report.figures import variant_colour
from harness.report.numbers import fmt
from harness.report.page import relative_link, render
from harness.verdict.verdicts import FAIL, INCONCLUSIVE, PASS

GATE_WORD = {FAIL: "REGRESSION", PASS: "NO REGRESSION", "NO DATA": "NO DATA"}


def _short(commit: str | None) -> str:
    return commit[:10] if commit else "–"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f}%"


def _commits(c: dict[str, Any]) -> tuple[str, str, str] | None:
    """SGLang's commits on either side (or the harness's when no SGLang was recorded, e.g. micro runs)."""
    for label, key in (("SGLang", "sglang_commit"), ("harness", "harness_commit")):
        if c[f"{key}_before"] or c[f"{key}_after"]:
            return label, _short(c[f"{key}_before"]), _short(c[f"{key}_after"])
    return None


@dataclass(frozen=True)
class RunLink:
    """A run's name, linked to its report where that report exists (href relative to the page)."""

    name: str
    href: str | None


class _Links:
    """Relative links from the page to each run's report (only to reports that exist here)."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir.resolve()

    def run(self, name: str, report: str | None) -> RunLink:
        return RunLink(name, relative_link(report, self.out_dir) if report and Path(report).exists() else None)


def _banner(facts: dict[str, Any]) -> dict[str, Any]:
    runs = facts["runs"]
    return {"runs": runs, "total": runs["complete"] + runs["incomplete"] + runs["damaged"],
            "series": len(facts["series"]), "change_points": len(facts["change_points"]),
            "database": facts["database"], "max_regression": f"{facts['options']['max_regression'] * 100:g}"}


def _change(c: dict[str, Any], links: _Links) -> dict[str, Any]:
    """One change point as the page shows it."""
    return {
        "series": c["series"], "regression": c["regression"], "magnitude": _pct(c["magnitude"]),
        "from_zero": c["magnitude"] is None, "before": fmt(c["before"], 4), "after": fmt(c["after"], 4),
        "p": "zero rule" if c["p_value"] is None else fmt(c["p_value"], 3), "at": c["index"] + 1,
        "run_before": links.run(c["last_run_before"], c["report_before"]), "run": links.run(c["run"], c["report"]),
        "sglang": (_short(c["sglang_commit_before"]), _short(c["sglang_commit_after"])),
        "harness": (_short(c["harness_commit_before"]), _short(c["harness_commit_after"])),
        "commits": _commits(c),
    }


def _series_groups(facts: dict[str, Any], links: _Links) -> list[dict[str, Any]]:
    """The series by scenario, run mode and hardware, each with its chart and its change points."""
    by_group: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for s in facts["series"]:
        by_group[(s["scenario"], s["aa"], s["mode"], s["hardware"])].append(s)
    points_of = defaultdict(list)
    for c in facts["change_points"]:
        points_of[c["series"]].append(c)
    variants = sorted({s["variant"] for s in facts["series"]})
    groups = []
    for (scenario, aa, mode, hardware), members in by_group.items():
        charts = []
        for s in members:
            cps = points_of[s["series"]]
            colour = variant_colour(s["variant"], variants) if "/" not in s["variant"] else "#57606a"
            svg = series_figure(
                s["values"], [(c["index"], c["regression"]) for c in cps], colour=colour,
                title=f"{s['variant']} · {s['label']}", ylabel=s["unit"] or s["metric"],
                label=f"{s['series']}: {len(cps)} change points",
            )
            charts.append({"svg": svg, "changes": [_change(c, links) for c in cps]})
        tags = (" · A/A runs" if aa else "") + (f" · mode {mode}" if mode and mode != "restart" else "")
        groups.append({"scenario": scenario, "tags": tags, "hardware": hardware, "runs": len(members[0]["runs"]),
                       "charts": charts})
    return groups


def _runs(facts: dict[str, Any], links: _Links) -> list[dict[str, Any]]:
    """Newest first."""
    return [
        {"link": links.run(r["run"], r["report"]), "started": r["started"] or "–",
         "scenario": (r["scenario"] or "–") + (" (A/A)" if r["aa"] else ""),
         "status_class": {"complete": PASS, "incomplete": INCONCLUSIVE, "damaged": FAIL}[r["status"]],
         "status": r["status"], "verdict": r["verdict"], "hardware": r["hardware"],
         "sglang": _short(r["sglang_commit"]), "harness": _short(r["harness_commit"]), "reason": r["reason"] or ""}
        for r in reversed(facts["run_list"])
    ]


def render_trend_page(facts: dict[str, Any], out_dir: Path) -> str:
    links = _Links(out_dir)
    gate = facts["gate"]["verdict"]
    return render(
        "trend.html",
        title=f"{GATE_WORD[gate]} · history of {sum(facts['runs'].values())} runs",
        banner_class={FAIL: FAIL, PASS: PASS}.get(gate, "NONE"), banner_word=GATE_WORD[gate],
        banner=_banner(facts), gate=gate, failing=[_change(c, links) for c in facts["gate"]["failing"]],
        changes=[_change(c, links) for c in facts["change_points"]], groups=_series_groups(facts, links),
        has_series=bool(facts["series"]), runs=_runs(facts, links),
    )


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
