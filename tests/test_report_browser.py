"""The report of a REAL micro-engine run (`harness run` end to end), opened in headless Chromium.

The page must load with no console errors and no network request but the file itself, show every
figure as a non-empty SVG, show the verdict of results.json, and, for FAIL and INCONCLUSIVE, the
reasons within the first screen. Chromium is Debian's (`/usr/bin/chromium`, or $HARNESS_CHROMIUM),
driven by Playwright; no browser is ever downloaded. Without it the browser tests skip.

Set HARNESS_UPDATE_SCREENSHOT=1 to also refresh docs/report-screenshot.png (used by the README).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from support.chromium import VIEWPORT, open_report

from sglang_spec_harness.report import build_report

REPO = Path(__file__).resolve().parents[1]
FIGURES = 6  # pattern counts, time per region, TPOT, paired differences, accept length, timeline

# A tiny scenario of the micro engine (a few seconds per trial on one CPU core): all rule kinds.
TINY = {
    "name": "tiny_report",
    "description": "micro engine, topk=1: softmax (baseline) vs argmax (candidate) in the draft",
    "engine": "micro",
    "server": {"args": {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1, "--vocab-size": 512,
                        "--hidden-size": 32, "--device": "cpu", "--num-threads": 1},
               "startup_timeout_s": 60, "request_timeout_s": 60},
    "variants": {
        "baseline": {"description": "softmax + top-1 in the draft", "args": {"--disable-topk1-fast-path": True}},
        "candidate": {"description": "argmax in the draft (the topk==1 fast path)"},
    },
    "workload": {"num_requests": 4, "input_len": 16, "output_len": 16, "concurrency": 2, "warmup_requests": 1},
    "trials": {"repetitions": 2, "profiled": 1},
    "profile": {"num_steps": 6, "activities": ["CPU"]},
    "rules": [
        {"name": "candidate_no_softmax_draft_decode", "kind": "kernel_count", "region": "DRAFT_DECODE",
         "pattern": "softmax", "variants": ["candidate"], "equals": 0},
        {"name": "baseline_has_softmax_draft_decode", "kind": "kernel_count", "region": "DRAFT_DECODE",
         "pattern": "softmax", "variants": ["baseline"], "at_least": 1},
        {"name": "accept_length_unchanged", "kind": "accept_length", "rel_tolerance": 0.01},
        {"name": "greedy_outputs_identical", "kind": "output_identity"},
        {"name": "tpot_improved", "kind": "tpot_gain", "min_gain": 0.01, "resamples": 500},
        {"name": "gain_explained_by_softmax", "kind": "explained_gain"},
    ],
}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """`harness run` of the tiny scenario: the runner, the rules and the report, for real."""
    root = tmp_path_factory.mktemp("real_run")
    scenario = root / "tiny_report.yaml"
    scenario.write_text(yaml.safe_dump(TINY, sort_keys=False))
    # A separate process, as a user runs it (and away from Playwright's event loop in this one).
    done = subprocess.run(
        [sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", str(scenario), "--out", str(root / "reports" / "runs"), "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    code = done.returncode
    assert code in (0, 1, 3), done.stdout[-2000:] + done.stderr[-2000:]
    latest = root / "reports" / "latest"
    assert latest.is_symlink(), "harness run did not leave reports/latest"
    run_dir = latest.resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert code == results["exit_code"], "harness run's exit code is the verdict's"
    return run_dir


def copy_with_verdict(run_dir: Path, tmp_path: Path, verdict: str) -> Path:
    """A copy of the real run whose first rule got `verdict`, with the report rebuilt."""
    copy = tmp_path / "runs" / run_dir.name
    shutil.copytree(run_dir, copy, symlinks=True)
    results = json.loads((copy / "results.json").read_text())
    rule = results["rules"][0]
    rule["verdict"] = verdict
    rule["reason"] = f"planted {verdict}: softmax found 2 per replay in DRAFT_DECODE of candidate"
    results["verdict"] = verdict
    results["exit_code"] = {"FAIL": 1, "INCONCLUSIVE": 3}[verdict]
    (copy / "results.json").write_text(json.dumps(results))
    build_report(copy)
    return copy


# ---- without a browser --------------------------------------------------------------------------


@pytest.mark.slow
def test_real_run_report_files(real_run):
    results = json.loads((real_run / "results.json").read_text())
    page = (real_run / "index.html").read_text()
    assert f'id="verdict">{results["verdict"]}<' in page
    assert page.count("<svg") == FIGURES
    for missing in ("No pattern counts", "No region times", "No timed trial", "No timeline", "No trace analysis"):
        assert missing not in page, missing
    root = ET.parse(real_run / "junit.xml").getroot()
    suite, informational = root.findall("testsuite")
    judged = [r for r in results["rules"] if r["verdict"] != "INFO"]
    # the scenario's rules, then output validity: implicit, for the scenario declares none
    assert [r["name"] for r in results["rules"]] == [r["name"] for r in TINY["rules"]] + ["outputs_valid"]
    # the unbounded explained_gain rule is informational: its own suite, never a passed test case
    assert [r["name"] for r in results["rules"] if r["verdict"] == "INFO"] == ["gain_explained_by_softmax"]
    assert [c.get("name") for c in informational.findall("testcase")] == ["gain_explained_by_softmax"]
    assert int(suite.get("tests")) == len(judged) == len(suite.findall("testcase"))
    assert int(suite.get("failures")) == sum(r["verdict"] == "FAIL" for r in judged)
    assert int(suite.get("skipped")) == sum(r["verdict"] == "INCONCLUSIVE" for r in judged)
    summary = (real_run / "summary.md").read_text()
    assert results["verdict"] in summary.splitlines()[0]
    assert "TPOT candidate/baseline = " in summary and "Accept length: baseline " in summary
    assert "DRAFT_DECODE: " in summary  # the softmax counts
    # every trace and server log linked, relative to the page, and present
    for trial_json in real_run.glob("trials/*/trial.json"):
        trial = json.loads(trial_json.read_text())
        rel = trial_json.parent.relative_to(real_run).as_posix()
        assert f'href="./{rel}/server.log"' in page
        for trace in trial["traces"]:
            assert f'href="./{rel}/{trace}"' in page and (trial_json.parent / trace).exists()


@pytest.mark.slow
def test_real_run_counts_show_the_softmax_where_it_should_be(real_run):
    from sglang_spec_harness.report import analysis_view as av
    from sglang_spec_harness.report.data import load_report_data

    bars = {(b.region, b.variant): b for b in av.count_bars(load_report_data(real_run), "softmax")}
    assert bars[("DRAFT_DECODE", "baseline")].per_replay_min >= 1
    assert bars[("DRAFT_DECODE", "candidate")].total == 0
    assert bars[("DRAFT_EXTEND", "candidate")].total == 0


# ---- in the browser -----------------------------------------------------------------------------


def test_real_report_in_the_browser(browser, real_run):
    results = json.loads((real_run / "results.json").read_text())
    html = real_run / "index.html"
    page, requests, problems = open_report(browser, html)
    try:
        assert problems == []
        assert requests == [html.as_uri()], "the page must not load anything but itself"
        assert page.inner_text("#verdict").strip() == results["verdict"]
        svgs = page.query_selector_all("figure svg")
        assert len(svgs) == FIGURES
        for svg in svgs:
            box = svg.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100, box
            drawn = svg.evaluate("s => s.querySelectorAll('path, rect, line, polyline, polygon, text, use').length")
            assert drawn > 20
            caption = svg.evaluate("s => s.parentElement.querySelector('figcaption').innerText")
            assert caption.startswith("What to look for:")
        # the rules table lists every rule with its verdict
        # (the judged ones first, the informational ones after them)
        rows = page.query_selector_all("#rules tbody tr")
        shown = sorted(results["rules"], key=lambda r: r["verdict"] == "INFO")
        assert [r.query_selector("code").inner_text() for r in rows] == [r["name"] for r in shown]
        assert [r.query_selector(".pill").inner_text() for r in rows] == [r["verdict"] for r in shown]
        shot = real_run / "report-screenshot.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("HARNESS_UPDATE_SCREENSHOT"):
            # Taller than one screen, so that the README shows the first figures too.
            page.set_viewport_size({"width": VIEWPORT["width"], "height": 1900})
            page.screenshot(path=str(REPO / "docs" / "report-screenshot.png"))
    finally:
        page.close()


@pytest.mark.parametrize("verdict", ["FAIL", "INCONCLUSIVE"])
def test_why_is_on_the_first_screen(browser, real_run, tmp_path, verdict):
    run_dir = copy_with_verdict(real_run, tmp_path, verdict)
    results = json.loads((run_dir / "results.json").read_text())
    page, requests, problems = open_report(browser, run_dir / "index.html")
    try:
        assert problems == [] and len(requests) == 1
        assert page.inner_text("#verdict").strip() == verdict
        why = page.query_selector("#why")
        box = why.bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], "the reasons must be on the first screen"
        text = why.inner_text()
        for rule in results["rules"]:
            if rule["verdict"] == "INFO":  # informational: apart, under the rules, never a reason
                assert rule["name"] not in text
                assert rule["name"] in page.inner_text("#rules").split("Informational: no bound set")[1]
            elif rule["verdict"] != "PASS":
                assert rule["name"] in text and rule["reason"] in text
        page.screenshot(path=str(run_dir / "report-screenshot.png"))
    finally:
        page.close()


def test_incomplete_run_report_in_the_browser(browser, real_run, tmp_path):
    """No results.json, no analysis.json, a failed trial: the page still loads cleanly and says so."""
    copy = tmp_path / "runs" / real_run.name
    shutil.copytree(real_run, copy, symlinks=True)
    (copy / "results.json").unlink()
    (copy / "analysis.json").unlink()
    trial_json = sorted(copy.glob("trials/*-timed/trial.json"))[0]
    info = json.loads(trial_json.read_text())
    info.update(status="failed", error="server exited with code 1 at startup")
    trial_json.write_text(json.dumps(info))
    build_report(copy)
    page, requests, problems = open_report(browser, copy / "index.html")
    try:
        assert problems == [] and len(requests) == 1
        assert page.inner_text("#verdict").strip() == "NO VERDICT"
        assert "results.json is missing" in page.inner_text("#why")
        notes = page.inner_text("#notes")
        assert "analysis.json is missing" in notes and "server exited with code 1 at startup" in notes
    finally:
        page.close()
