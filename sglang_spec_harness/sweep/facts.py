"""A sweep's facts from the history database: its series, their change points and explanations,
their side-by-side confirmations and acks, and its runs (what its trend page shows and sweep.json
carries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_spec_harness.pages.numbers import MISSING
from sglang_spec_harness.sweep.result import SweepResult


def _not_run(result: SweepResult) -> list[dict[str, Any]]:
    """Rows for the points that never got a run directory (their environment could not be built):
    the sweep's page lists every point, with why."""
    name = result.name or result.out_dir.name
    return [{"run": f"{p.label} (no run)", "run_key": None, "scenario": result.scenario, "aa": False, "mode": None,
             "status": "cannot run", "reason": p.reason, "started": None, "verdict": None, "hardware": MISSING,
             "sglang_version": p.point if result.request.axis == "sglang_release" else None, "sglang_commit": None,
             "harness_commit": None, "path": None, "report": None, "sweep": name, "sweep_axis": result.request.axis,
             "sweep_point": p.point, "sweep_label": p.label, "sweep_position": p.position}
            for p in result.points if p.status == "cannot run" and p.run_dir is None]


def sweep_facts(engine: Any, result: SweepResult) -> dict[str, Any]:
    """The history facts of this sweep alone (its series, change points and their explanations, its
    runs): what its trend page shows and sweep.json carries."""
    from sglang_spec_harness.history.analyze import history_facts

    facts = history_facts(engine, scenarios=[result.scenario])
    name = result.name or result.out_dir.name
    series = [s for s in facts["series"] if s.get("sweep") == name]
    ids = {s["series"] for s in series}
    points = [c for c in facts["change_points"] if c["series"] in ids]
    used = {c.get("explanation") for c in points}
    explanations = facts.get("explanations") or {}
    if isinstance(explanations, dict):
        explanations = {k: v for k, v in explanations.items() if k in used}
    else:
        explanations = [e for e in explanations if e.get("id") in used]
    return {**facts, "series": series, "change_points": points, "explanations": explanations,
            "confirmations": [c for c in facts.get("confirmations") or [] if c["series"] in ids],
            "acks": [a for a in facts.get("acks") or [] if a["series"] in ids],
            "run_list": [r for r in facts["run_list"] if r.get("sweep") == name] + _not_run(result),
            "sweeps": [w for w in facts.get("sweeps") or [] if w.get("sweep") == name or w.get("name") == name],
            "damaged": [d for d in facts["damaged"] if Path(d.get("path") or "").parent.parent == result.out_dir]}


def write_history(engine: Any, result: SweepResult) -> None:
    """The sweep's series, change points and explanations into `result.history` (for sweep.json), and
    its trend page (index.html, history.json) into its folder: after a whole sweep, and after a merge
    of shards, the same way."""
    from sglang_spec_harness.history.page import write_trend_page

    facts = sweep_facts(engine, result)
    result.history = {"series": facts["series"], "change_points": facts["change_points"],
                      "explanations": facts["explanations"]}
    write_trend_page(facts, result.out_dir)
