"""The trend page (`harness history report`): one self-contained index.html, on the run report's page
machinery (`sglang_spec_harness.pages`): the gate's verdict and why on the first screen, every change
point with the commits on either side and links to the run reports, one small chart per series
(a sweep's charts along its release labels), every change point's explanation (the kernel diff
between the runs on either side) under its group's charts, and every run with its status (damaged
and incomplete ones with their reason). An exact series that never changed is one line of a table,
not a chart. This module gathers the values from the facts (history.json; facts written before
sweeps and explanations still render); `sglang_spec_harness/pages/templates/trend.html` lays them out."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_spec_harness.history.figures import ChangeMark, series_figure
from sglang_spec_harness.pages.figures import variant_colour
from sglang_spec_harness.pages.numbers import MISSING, fmt, interval, p_value, pct, per_replay, ratio, signed_pct, us
from sglang_spec_harness.pages.render import relative_link, render
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS

GATE_WORD = {FAIL: "REGRESSION", INCONCLUSIVE: "NOT CONFIRMED", PASS: "NO REGRESSION", "NO DATA": "NO DATA"}
# How a change point reads (history/direction.py) -> the pill's class: red, green, amber, grey.
READING_CLASS = {"regression": FAIL, "improvement": PASS, "not confirmed": INCONCLUSIVE, "change": "NONE"}


def _short(commit: str | None) -> str:
    return commit[:10] if commit else MISSING


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

    def run(self, name: str, report: str | None, path: str | None = None) -> RunLink:
        """To the run's report; without one, to its directory (where it exists here)."""
        if report and Path(report).exists():
            return RunLink(name, relative_link(report, self.out_dir))
        if path and Path(path).is_dir():
            return RunLink(name, relative_link(path, self.out_dir) + "/")
        return RunLink(name, None)


def _banner(facts: dict[str, Any]) -> dict[str, Any]:
    runs = facts["runs"]
    return {"runs": runs, "total": runs["complete"] + runs["incomplete"] + runs["damaged"],
            "series": len(facts["series"]), "change_points": len(facts["change_points"]),
            "database": facts["database"], "max_regression": pct(facts["options"]["max_regression"])}


def reading_of(c: dict[str, Any], worse: dict[str, str | None]) -> str:
    """How a change point reads: as the facts say; facts written before readings (history.json of
    an older harness) by their `regression` flag and their series' direction."""
    if c.get("reading"):
        return c["reading"]
    return "regression" if c["regression"] else "change" if worse.get(c["series"], "up") is None else "improvement"


def _confirmation(c: dict[str, Any], links: _Links) -> dict[str, Any] | None:
    """A noisy change point's side-by-side run as the page says it (None: an exact series)."""
    found = c.get("confirmation")
    if not found:
        return None
    measured = found.get("ratio") is not None
    return {"status": found["status"], "pill": PASS if found["status"] == "confirmed" else INCONCLUSIVE,
            "interval": f"{ratio(found['ratio'])} {interval(found['ci_low'], found['ci_high'])}" if measured else None,
            "confidence": pct(found.get("confidence"), 0) if measured else None, "reason": found.get("reason") or "",
            "run": links.run(Path(found["run_dir"]).name, None, found["run_dir"]) if found.get("run_dir") else None}


def _change(c: dict[str, Any], links: _Links, worse: dict[str, str | None]) -> dict[str, Any]:
    """One change point as the page shows it: how it reads (the pill), its confirmation and its ack."""
    exact = c.get("kind") == "exact"
    word = reading_of(c, worse)
    ack = c.get("acknowledged")
    return {
        "series": c["series"], "regression": c["regression"], "pill": READING_CLASS[word], "word": word,
        "rule": c.get("rule"), "confirmation": _confirmation(c, links), "gate_reason": c.get("gate_reason"),
        "ack": {"reason": ack["reason"], "by": ack["by"], "at": ack["at"]} if ack else None,
        "magnitude": signed_pct(c["magnitude"]), "from_zero": c["magnitude"] is None,
        "before": fmt(c["before"], 4), "after": fmt(c["after"], 4),
        "p": "exact" if exact else "zero rule" if c["p_value"] is None else p_value(c["p_value"]),
        "at": c.get("label_after") or f"run {c['index'] + 1}",
        "run_before": links.run(c.get("label_before") or c["last_run_before"], c["report_before"], c.get("path_before")),
        "run": links.run(c.get("label_after") or c["run"], c["report"], c.get("path")),
        "sglang": (_short(c["sglang_commit_before"]), _short(c["sglang_commit_after"])),
        "harness": (_short(c["harness_commit_before"]), _short(c["harness_commit_after"])),
        "commits": None if c.get("label_after") else _commits(c),  # a sweep's points are their releases
        "explanation": c.get("explanation"),
    }


def _op_list(entries: list[dict[str, Any]]) -> list[str]:
    return [f"{e['op']} {_per_replay(e['before_detail'])} → {_per_replay(e['after_detail'])}" for e in entries]


def _per_replay(detail: dict[str, Any]) -> str:
    low, high = detail["range"]
    return per_replay(low, high, detail["per_replay"])


def _explanation(e: dict[str, Any], links: _Links, names: dict[str, str]) -> dict[str, Any]:
    """An explanation as the page shows it: both runs linked, the regions where ops changed (with the
    time per replay), the others' times, the outputs and the environment."""
    sides = {key: links.run(e[key]["label"], e[key]["report"], e[key]["path"]) for key in ("before", "after")}
    regions = []
    for r in e["regions"]:
        t = r["time_per_replay_us"]
        regions.append({
            "region": r["region"], "unit": r["unit"] or MISSING, "present": r["present"],
            "disappeared": _op_list(r["disappeared"]), "appeared": _op_list(r["appeared"]),
            "changed": _op_list(r["changed"]), "varied": _op_list(r.get("varied", [])),
            "quiet": not (r["disappeared"] or r["appeared"] or r["changed"]),
            "time": f"{us(t['before'])} → {us(t['after'])}", "time_change": signed_pct(t["change"]),
        })
    return {"id": e["id"], "variant": e["variant"], "before": sides["before"], "after": sides["after"],
            "series": [names.get(s, s) for s in e["series"]], "regions": regions, "sentence": e["sentence"],
            "environment": [(d["what"], d["before"] or "(none)", d["after"] or "(none)") for d in e["environment_differs"]],
            "source": _source(e.get("source"))}


# A hunk line's first character -> its class on the page.
HUNK_LINE_CLASS = {"+": "add", "-": "del", "@": "at"}


def _source(source: dict[str, Any] | None) -> dict[str, Any] | None:
    """The functions that ran and changed, as the page shows them: each with its hunk, line by line
    (escaped by the template: source is hostile data); None where no Python stacks were stored."""
    if not source or not any(source["stacks"].values()):
        return None
    functions = [{
        "rank": c["rank"], "name": f"{c['file']}:{c['function']}", "status": c["status"], "focus": c["focus"],
        "lines": f"+{c['added']} −{c['removed']}", "regions": ", ".join(c["regions"]),
        "calls": f"{fmt(c['calls']['before'])} → {fmt(c['calls']['after'])}",
        "at": f"{c['path_before'] or MISSING}:{c['line_before'] or MISSING} → {c['path_after'] or MISSING}:{c['line_after'] or MISSING}",
        "hunk": [(HUNK_LINE_CLASS.get(line[:1], "") if not line.startswith(("---", "+++")) else "file", line)
                 for line in (c["hunk"] or "").splitlines()],
        "left_out": c["hunk_lines_left_out"],
    } for c in source["changed"]]
    harness = [(f"{h['file']}:{h['function']}", h["ran"], ", ".join(h["regions"])) for h in source["harness"]]
    return {"regions": ", ".join(source["regions"]) or MISSING, "basis": source["basis"],
            "compared": source["compared"], "unchanged": source["unchanged"], "functions": functions,
            "left_out": source["changed_left_out"], "harness": harness, "harness_left_out": source["harness_left_out"],
            "notes": source["notes"], "trees": source["trees"], "complete": source["complete"]}


AXIS_WORDS = {"sglang_release": "SGLang release", "git_revision": "SGLang revision"}


def _series_groups(facts: dict[str, Any], links: _Links, worse: dict[str, str | None]) -> list[dict[str, Any]]:
    """The series by scenario, run mode, hardware and sweep, each with its chart and its change
    points; exact series that never changed as one table; the group's explanations under them."""
    by_group: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for s in facts["series"]:
        by_group[(s["scenario"], s["aa"], s["mode"], s["hardware"], s.get("sweep"))].append(s)
    points_of = defaultdict(list)
    for c in facts["change_points"]:
        points_of[c["series"]].append(c)
    explanations = {e["id"]: e for e in facts.get("explanations") or []}
    variants = sorted({s["variant"] for s in facts["series"]})
    names = {s["series"]: f"{s['variant']} · {s['metric']}" for s in facts["series"]}  # within its group
    groups = []
    for (scenario, aa, mode, hardware, sweep), members in by_group.items():
        charts, unchanged, explained = [], [], []
        for s in members:
            cps = points_of[s["series"]]
            if s.get("kind") == "exact" and not cps:
                value = s["values"][0] if s["values"] else None
                shown = "one output set" if s["metric"] == "output_hash" else fmt(value, 4)
                unchanged.append((s["variant"], s["label"], shown, len(s["values"])))
                continue
            colour = variant_colour(s["variant"], variants) if "/" not in s["variant"] else "#57606a"
            labels = s.get("labels") if sweep else None
            svg = series_figure(
                s["values"], [ChangeMark(c["index"], reading_of(c, worse), bool(c.get("acknowledged"))) for c in cps],
                colour=colour,
                title=f"{s['variant']} · {s['label']}", ylabel=s["unit"] or s["metric"],
                label=f"{s['series']}: {len(cps)} change points", xlabels=labels,
                xlabel=AXIS_WORDS.get(s.get("axis") or "", "sweep point") if sweep else "run (oldest first)",
            )
            changes = [_change(c, links, worse) for c in cps]
            charts.append({"svg": svg, "changes": changes})
            explained += [c["explanation"] for c in changes if c["explanation"] and c["explanation"] not in explained]
        tags = (" · A/A runs" if aa else "") + (f" · mode {mode}" if mode and mode != "restart" else "")
        points = members[0].get("labels") or []
        sweep_text = (f"sweep {sweep} over {len(points)} points, {points[0]} … {points[-1]}"
                      if sweep and points else f"sweep {sweep}" if sweep else None)
        groups.append({"scenario": scenario, "tags": tags, "hardware": hardware, "runs": len(members[0]["runs"]),
                       "sweep": sweep_text, "charts": charts, "unchanged": unchanged,
                       "explanations": [_explanation(explanations[i], links, names) for i in explained
                                        if i in explanations]})
    return groups


def _side_by_side(facts: dict[str, Any], links: _Links) -> list[dict[str, Any]]:
    """Every side-by-side run of two neighbouring points (`harness sweep --confirm`), confirmed or not."""
    return [{"series": c["series"], "points": f"{c['label_before'] or c['run_before']} → {c['label_after'] or c['run']}",
             "values": f"{fmt(c['before'], 4)} → {fmt(c['after'], 4)}", "confirmation": _confirmation({"confirmation": c}, links), "ack": None}
            for c in facts.get("confirmations") or []]


def _runs(facts: dict[str, Any], links: _Links) -> list[dict[str, Any]]:
    """Newest first."""
    return [
        {"link": links.run(r["run"], r["report"], r.get("path")), "started": r["started"] or MISSING,
         "point": f"{r['sweep_label']} ({r['sweep']})" if r.get("sweep") else MISSING,
         "scenario": (r["scenario"] or MISSING) + (" (A/A)" if r["aa"] else ""),
         # a sweep's point that could not run here has no run directory: `cannot run`, with its reason
         "status_class": {"complete": PASS, "incomplete": INCONCLUSIVE, "damaged": FAIL}.get(r["status"], INCONCLUSIVE),
         "status": r["status"], "verdict": r["verdict"], "hardware": r["hardware"],
         "sglang": _short(r["sglang_commit"]), "harness": _short(r["harness_commit"]), "reason": r["reason"] or ""}
        for r in reversed(facts["run_list"])
    ]


def render_trend_page(facts: dict[str, Any], out_dir: Path) -> str:
    links = _Links(out_dir)
    gate = facts["gate"]["verdict"]
    worse = {s["series"]: s.get("worse", "up") for s in facts["series"]}
    return render(
        "trend.html",
        title=f"{GATE_WORD[gate]} · history of {sum(facts['runs'].values())} runs",
        banner_class={FAIL: FAIL, PASS: PASS, INCONCLUSIVE: INCONCLUSIVE}.get(gate, "NONE"), banner_word=GATE_WORD[gate],
        banner=_banner(facts), gate=gate, failing=[_change(c, links, worse) for c in facts["gate"]["failing"]],
        not_confirmed=[_change(c, links, worse) for c in facts["gate"].get("not_confirmed", [])],
        side_by_side=_side_by_side(facts, links),
        changes=[_change(c, links, worse) for c in facts["change_points"]], groups=_series_groups(facts, links, worse),
        has_series=bool(facts["series"]), runs=_runs(facts, links),
    )


def write_trend_page(facts: dict[str, Any], out_dir: str | Path) -> Path:
    """index.html and history.json (the same facts) into `out_dir`; returns the page."""
    import json

    from sglang_spec_harness.files import write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "index.html"
    write_text_atomic(out_dir / "history.json", json.dumps(facts, indent=2, ensure_ascii=False) + "\n")
    write_text_atomic(page, render_trend_page(facts, out_dir))
    return page
