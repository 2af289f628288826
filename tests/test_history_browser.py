"""The trend page in headless Chromium (Debian's, through Playwright, as the run report's test):
no console errors, no network request but the page itself, one drawn chart per series, the gate's
verdict and its reasons on the first screen, and links that reach the run reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.report import build_report
from support.history_helpers import series_run
from support.chromium import VIEWPORT, open_report

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trend_page(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("trend")
    for i in range(1, 13):
        run = series_run(root, i, base_tpot=20.0, cand_tpot=15.0 if i < 7 else 19.5)
        if i in (6, 7):  # the runs on either side of the change get their reports, as real runs have
            build_report(run)
    damaged = root / "runs" / "20991231-000000-planted"
    (damaged / "trials").mkdir(parents=True)
    (damaged / "run.json").write_text('{"schema_version": 1, "scenario": "planted", "status": "compl')
    database = root / "history.sqlite"
    cli = [sys.executable, "-m", "sglang_spec_harness.commands.cli", "history"]
    subprocess.run([*cli, "ingest", str(root / "runs"), "--db", str(database)], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    done = subprocess.run([*cli, "report", "--db", str(database), "--out", str(root / "page"), "--json",
                           "--permutations", "199"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr  # a timing regression that no side-by-side run confirmed
    return root / "page" / "index.html", json.loads(done.stdout)


def test_trend_page_in_the_browser(browser, trend_page):
    html, facts = trend_page
    page, requests, problems = open_report(browser, html)
    try:
        assert problems == []
        assert requests == [html.as_uri()], "the page must not load anything but itself"
        assert page.inner_text("#verdict").strip() == "NOT CONFIRMED"
        why = page.query_selector("#why")
        box = why.bounding_box()
        assert box["y"] + box["height"] <= VIEWPORT["height"], "the reasons must be on the first screen"
        assert "planted · candidate · tpot_ms" in why.inner_text() and "not confirmed" in why.inner_text()
        svgs = page.query_selector_all("#series figure svg")
        charted = [s for s in facts["series"] if s["kind"] == "noisy" or s["change_points"]]  # exact ones that never
        assert len(svgs) == len(charted) > 0  # changed are rows of a table
        assert page.inner_text("details.unchanged summary") == (
            f"{len(facts['series']) - len(charted)} exact series never changed")
        for svg in svgs:
            b = svg.bounding_box()
            assert b and b["width"] > 250 and b["height"] > 80, b
            assert svg.evaluate("s => s.querySelectorAll('path, line, text, use').length") > 10
        rows = page.query_selector_all("#changes tbody tr")
        assert len(rows) == len(facts["change_points"]) == 2
        # the first run after the change links to its report, which exists beside the runs
        link = rows[0].query_selector_all("td:nth-child(3) a")[-1]
        assert link.inner_text() == facts["change_points"][0]["run"]
        assert (html.parent / link.get_attribute("href")).resolve() == Path(facts["change_points"][0]["report"])
        assert (html.parent / link.get_attribute("href")).exists()
        # and to why: no op count changed between the two runs
        why = rows[0].query_selector("td:last-child a").get_attribute("href")
        assert why == f"#explain-{facts['change_points'][0]['explanation']}"
        assert "No op count changed in any region" in page.inner_text(why)
        runs = page.inner_text("#runs")
        assert "damaged" in runs and "run.json:1: not valid JSON" in runs
        page.screenshot(path=str(html.parent / "trend-screenshot.png"))
    finally:
        page.close()
