"""The source behind a sweep's change points, and what it costs: the explanations of a finished sweep
(each change point's SGLang functions that ran there and changed, with their hunks) and, per point
and per change point, the seconds and the disk that naming the functions adds.

    .venv/bin/python benchmarks/release_sweep_source.py reports/sweeps/<folder> \
        [--out benchmarks/sglang_release_sweep_explanations.json] [--screenshot docs/release-sweep-source.png]

The explanations are those of `harness history explain <folder>` (runs analysed again where they
stored no functions per region, a fresh database); this adds what they cost.

Per point (its candidate's profiled trace): the seconds to read and attribute the trace, and the
seconds of the function table on top (traces/functions.py); the bytes the tables add to analysis.json
and to the database. Per change point: the seconds its explanation's source part takes from a cold
cache (locating and parsing the files of both points, the diffs), the bytes of that part in
sweep.json, and the disk of the two points' sources it reads (already on disk for the sweep: a
release's environment, or a repository's objects). Nothing here knows what the answer should be.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from figures import project_relative

from sglang_spec_harness.history import changed_functions, db, explain
from sglang_spec_harness.history.page import write_trend_page
from sglang_spec_harness.history.source import FolderTree, GitTree
from sglang_spec_harness.history.sweep_explanations import SweepExplanations, sweep_explanations
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.traces.attribution import attribute
from sglang_spec_harness.traces.functions import region_functions
from sglang_spec_harness.traces.readers import read_trace
from sglang_spec_harness.traces.regions import region_table

REPO = Path(__file__).resolve().parents[1]


def _point_cost(run_dir: Path) -> dict[str, Any]:
    """One point's candidate trace: reading and attribution, then the function table on top."""
    (trace_file,) = sorted(run_dir.glob("trials/*-candidate-profiled/profile/*.trace.json*"))
    scenario = load_scenario(run_dir / "scenario.yaml")
    table = region_table(scenario.region_rules(), replace_default=scenario.regions.replace)
    started = time.perf_counter()
    trace = read_trace(trace_file, keep_frame=lambda name: table.first_match(name) >= 0)
    attribution = attribute(trace, table)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    tables = region_functions(trace, attribution, table)
    functions_s = time.perf_counter() - started
    analysis = json.loads((run_dir / "analysis.json").read_text())
    stored = sum(len(json.dumps(f.get("region_functions", []))) for trial in analysis["trials"].values()
                 for f in [*trial["files"], trial["combined"]])
    return {"trace": str(trace_file.relative_to(run_dir)), "trace_bytes": trace_file.stat().st_size,
            "python_frames": len(trace.python_frames), "read_and_attribute_s": round(read_s, 2),
            "function_table_s": round(functions_s, 2), "functions": {t.region: t.functions for t in tables},
            "analysis_json_bytes": (run_dir / "analysis.json").stat().st_size, "function_tables_bytes": stored}


def _tree_bytes(label: str, trees: list[Any]) -> int:
    """The bytes of the source a tree's files hold (what the explanation reads)."""
    tree = next((t for t in trees if getattr(t, "label", None) == label), None)
    if isinstance(tree, (FolderTree, GitTree)):
        return sum(tree.sizes().values())
    return 0


def _timed_explanations(engine: Any, folder: Path) -> tuple[SweepExplanations, dict[str, float], list[Any], float]:
    """The sweep's explanations as `harness history explain` computes them, with the seconds each
    explanation's source part took (a cold cache per change point: the cost of one alone), the trees
    it read, and the seconds of the whole."""
    seconds: dict[str, float] = {}
    trees: list[Any] = []
    original = explain.source_changes

    def timed(ran, found, regions, cache, labels):
        started = time.perf_counter()
        out = original(ran, found, regions, changed_functions.SourceCache(), labels)
        seconds[f"{labels['before']} -> {labels['after']}"] = round(time.perf_counter() - started, 2)
        trees.extend(t for t in found.values() if not isinstance(t, str))
        return out

    explain.source_changes = timed
    started = time.perf_counter()
    try:
        found = sweep_explanations(engine, folder, progress=print)
    finally:
        explain.source_changes = original
    return found, seconds, trees, round(time.perf_counter() - started, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep folder (sweep.json, its runs with their traces)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "sglang_release_sweep_explanations.json")
    parser.add_argument("--screenshot", type=Path, help="also save the first explanation with functions, viewed in Chromium")
    args = parser.parse_args(argv)
    sweep = json.loads((args.sweep / "sweep.json").read_text())
    with tempfile.TemporaryDirectory(prefix="release-sweep-source-") as scratch:
        engine = db.open_database(str(Path(scratch) / "history.sqlite"))
        found, seconds, trees, whole_s = _timed_explanations(engine, args.sweep)
        c = db.region_functions.c
        with engine.connect() as conn:  # rows, and their bytes: the text columns plus 8 bytes per number and key
            rows, text = conn.execute(sa.select(sa.func.count(), sa.func.sum(
                sa.func.length(c.file) + sa.func.length(c.function) + sa.func.length(c.region) + sa.func.length(c.variant)))).one()
        engine.dispose()
    points = [{"label": p["label"], **_point_cost(Path(p["run_dir"]))} for p in sweep["points"] if p["status"] == "ran"]
    explanations = found.document["explanations"]
    record = {
        "what": "the SGLang functions behind each change point of a sweep (with their hunks), and their cost; "
                "produced by benchmarks/release_sweep_source.py from the stored sweep (as harness history explain)",
        "sweep": {"folder": args.sweep.name, "scenario": sweep["scenario"], "range": sweep.get("range"),
                  "overrides": sweep.get("overrides"), "wall_s": sweep.get("wall_s"),
                  "points": [p["label"] for p in sweep["points"]]},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "shared": "yes: other sessions ran beside it"},
        "date": time.strftime("%Y-%m-%d"),
        "explain_s": whole_s, "analysed_again": found.document["analysed_again"],
        "points": points,
        "database": {"region_functions_rows": rows, "approximate_bytes": (text or 0) + rows * (32 + 4 * 8)},
        "change_points": found.document["change_points"],
        "explanations": [{
            **e,
            "cost": {"seconds": seconds.get(f"{e['before']['label']} -> {e['after']['label']}"),
                     "json_bytes": len(json.dumps(e["source"])),
                     "source_bytes_read_from": {side: _tree_bytes(e["source"]["trees"][side], trees)
                                                for side in ("before", "after")}},
        } for e in explanations],
    }
    args.out.write_text(project_relative(json.dumps(record, indent=2, ensure_ascii=False), (args.sweep, ".")) + "\n")
    print(f"wrote {args.out}: {len(points)} points, {len(explanations)} change point explanations")
    if args.screenshot:
        shown = next((e for e in explanations if e["source"]["changed"]), None)
        if shown is not None:
            page = write_trend_page(found.facts, args.sweep / "source-page")  # the page as this harness draws it
            screenshot(page, f"#explain-{shown['id']}", args.screenshot)
    return 0


def screenshot(page: Path, selector: str, target: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("HARNESS_CHROMIUM") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1200, "height": 1400})
        tab.goto(page.resolve().as_uri(), wait_until="load")
        tab.locator(selector).screenshot(path=str(target))
        browser.close()
    print(f"screenshot: {target}")


if __name__ == "__main__":
    sys.exit(main())
