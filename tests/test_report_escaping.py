"""Every string a run directory carries reaches the HTML report as text, never as markup.

A hand-built run (tests/support/report_run.py, with real CPU profiler traces) gets script and
attribute-breaking payloads planted in each source the report shows: the scenario (name,
descriptions, flags, environment, patches, interpreter), the server (server_info keys and values,
the command, error messages), the traces (op names inside the trace files, trace file names,
region and pattern names, analysis warnings and errors), the results (rule names, reasons,
descriptions, parameters, preconditions), the environment, and file and directory names (a trial
directory named `javascript:...`). The page is then opened in Chromium: no script runs, no element
or event handler is injected, no link leads anywhere but into the run directory or to
ui.perfetto.dev, nothing is fetched, and the payloads are shown as the literal text they are.

The trend page (`harness history report`) and the bisection page are built from the same templates:
each gets the payloads in every string it shows (run, series, scenario and hardware names, commits,
reasons, the database, commit subjects) and a link target whose first segment reads like a URL scheme.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml
from markupsafe import escape

from sglang_spec_harness.points.git import Commit
from sglang_spec_harness.bisect.page import write_page
from sglang_spec_harness.points.plan import PointPlan
from sglang_spec_harness.bisect.result import BisectRequest, BisectResult, Step
from sglang_spec_harness.history.page import write_trend_page
from sglang_spec_harness.report import build_report
from sglang_spec_harness.traces import analyze_traces
from support.chromium import open_report
from support.escaping import ATTRIBUTE, SCHEME, SCRIPT, SINGLE, PageElements, assert_page_inert
from support.report_run import make_run_dir



def plant(run_dir: Path) -> Path:
    """Payloads in every source of the hand-built run; returns the run directory."""
    scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    scenario["name"] = f"tiny{SCRIPT}"
    scenario["description"] = f"scenario {ATTRIBUTE} {SINGLE}"
    for variant, spec in scenario["variants"].items():
        spec["description"] = f"{variant} {SCRIPT}{ATTRIBUTE}"
        spec.setdefault("args", {})["--note"] = SINGLE
        spec["env"] = {f"K{ATTRIBUTE}": SCRIPT}
        spec["patches"] = [SCRIPT]
        spec["pythonpath"] = [ATTRIBUTE]
        spec["python"] = SCHEME
    scenario["regions"] = {"rules": [{"name": f"R{SCRIPT}", "regex": "step\\[DECODE"}]}
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))

    analysis = json.loads((run_dir / "analysis.json").read_text())
    for trial_dir in sorted((run_dir / "trials").iterdir()):
        info = json.loads((trial_dir / "trial.json").read_text())
        info["command"] += f" --flag '{SCRIPT}'"
        info["server_info"] = {f"key{ATTRIBUTE}": SINGLE, "version": SCRIPT}
        if info["kind"] == "profiled":
            # op names inside the trace file, and a trace file whose name is a payload
            old = trial_dir / info["traces"][0]
            events = json.loads(gzip.decompress(old.read_bytes()))
            for event in events["traceEvents"]:
                if event.get("name") == "aten::relu":
                    event["name"] = f"aten::{SCRIPT}"
                elif event.get("name") == "aten::mm":
                    event["name"] = f"aten::mm{ATTRIBUTE}"
            new = old.with_name(f"{SINGLE.replace('/', '')}-TP-0.trace.json.gz")
            new.write_bytes(gzip.compress(json.dumps(events).encode()))
            old.unlink()
            info["traces"] = [f"profile/{new.name}"]
            doc = analyze_traces([new]).to_json_dict()
            for file in doc["files"]:
                file["validity"]["warnings"].append(f"warning {SCRIPT}")
                file["regions"][f"REGION{ATTRIBUTE}"] = next(iter(file["regions"].values()))
            analysis["trials"][trial_dir.name] = doc
        else:
            info.update(status="failed", error=f"server said {SCRIPT}{ATTRIBUTE}")
        (trial_dir / "trial.json").write_text(json.dumps(info))
        (trial_dir / "server.log").write_text(f"log {SCRIPT}\n")
    analysis["errors"] = {f"trial{SINGLE}": f"analysis failed {SCRIPT}"}
    (run_dir / "analysis.json").write_text(json.dumps(analysis))

    # a trial directory named like a URL scheme, listed in the plan
    linked = run_dir / SCHEME
    shutil.copytree(sorted((run_dir / "trials").iterdir())[-1], linked)
    run = json.loads((run_dir / "run.json").read_text())
    run["plan"].append({"index": 99, "variant": f"v{SCRIPT}", "kind": "timed", "repetition": 0, "dir": SCHEME})
    run["error"] = f"stopped {ATTRIBUTE}"
    run["status"] = "incomplete"
    (run_dir / "run.json").write_text(json.dumps(run))

    results = json.loads((run_dir / "results.json").read_text())
    for rule in results["rules"]:
        rule["name"] += SCRIPT
        rule["reason"] = f"reason {ATTRIBUTE}"
        rule["description"] = f"description {SINGLE}"
        rule["params"]["pattern"] = f"softmax{SCRIPT}"
        rule["preconditions"] = [{"what": f"what {SCRIPT}", "ok": False, "detail": f"detail {ATTRIBUTE}"}]
        rule["verdict"] = "FAIL"
    results["verdict"], results["exit_code"], results["scenario"] = "FAIL", 1, f"tiny{SINGLE}"
    (run_dir / "results.json").write_text(json.dumps(results))

    env = json.loads((run_dir / "environment.json").read_text())
    env[f"host{ATTRIBUTE}"] = SCRIPT
    env["variants"] = {"baseline": {"sglang": SINGLE}}
    (run_dir / "environment.json").write_text(json.dumps(env))
    return run_dir


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    run_dir = plant(make_run_dir(tmp_path_factory.mktemp("escaping")))
    build_report(run_dir)
    return run_dir


def _link_is_safe(href: str) -> bool:
    return href.startswith(("./", "#")) or href == "https://ui.perfetto.dev"


def test_the_page_source_has_no_injected_markup(planted):
    page = (planted / "index.html").read_text()
    parsed = PageElements()
    parsed.feed(page)
    assert not {"script", "img", "iframe", "object", "embed", "link", "base", "form"} & set(parsed.tags)
    assert parsed.handlers == []
    bad = [h for h in parsed.hrefs if not _link_is_safe(h) and not h.startswith("#f")]  # #fN-...: SVG ids
    assert bad == []
    assert f'href="./{escape(SCHEME)}/server.log"' in page  # the scheme-named directory is linked as a file path
    assert f"./{SCHEME}/server.log" in parsed.hrefs


def test_no_script_runs_no_element_is_injected_nothing_is_fetched(browser, planted):
    html = planted / "index.html"
    page, requests, problems = open_report(browser, html)
    try:
        assert problems == [], problems  # a blocked inline script or handler would be logged here
        assert requests == [html.as_uri()]
        assert page.evaluate("() => window.__pwned") is None
        counts = page.evaluate("""() => ({
            scripts: document.querySelectorAll('script').length,
            images: document.querySelectorAll('img, image, iframe, object, embed, link').length,
            handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(
                a => a.name.toLowerCase().startsWith('on'))).length,
            hrefs: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
        })""")
        assert (counts["scripts"], counts["images"], counts["handlers"]) == (0, 0, 0)
        assert all(_link_is_safe(h) for h in counts["hrefs"]), [h for h in counts["hrefs"] if not _link_is_safe(h)]
        # clicking the scheme-named link navigates to a file, and runs nothing
        link = page.query_selector(f'a[href="./{SCHEME}/server.log"]')
        assert link is not None
        # the payloads are on the page as text, from every kind of source
        text = page.evaluate("() => document.body.textContent")  # collapsed details included
        svg_text = page.evaluate("() => [...document.querySelectorAll('svg text')].map(t => t.textContent).join(' ')")
        for needle in (
            f"tiny{SINGLE}",                          # the scenario's name in results.json
            f"scenario {ATTRIBUTE}",                  # the scenario's description
            f"baseline {SCRIPT}{ATTRIBUTE}",          # variant description
            f"server said {SCRIPT}{ATTRIBUTE}",       # a trial's error message
            f"reason {ATTRIBUTE}",                    # a rule's reason
            f"what {SCRIPT}",                         # a precondition
            f"detail {ATTRIBUTE}",
            f"analysis failed {SCRIPT}",              # an analysis error
            f"warning {SCRIPT}",                      # an analysis warning
            f"stopped {ATTRIBUTE}",                   # the run's error
            f"aten::{SCRIPT}",                        # an op name from inside a trace file
        ):
            assert needle in text, needle
        assert SINGLE.replace("/", "") + "-TP-0.trace.json.gz" in text  # a trace file name
        assert f"softmax{SCRIPT}" in svg_text  # a pattern name (results.json), as text inside a figure
    finally:
        page.close()
    # nothing ran after a while either (an onload/onerror fires late)
    page, _, problems = open_report(browser, html)
    try:
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.__pwned") is None and problems == []
    finally:
        page.close()


# ---- the trend page and the bisection page ----------------------------------------------------------


def test_the_trend_page_shows_every_string_as_text(browser, tmp_path):
    out_dir = tmp_path / "page"
    # two run reports: one inside the page's folder, in a folder named like a URL scheme
    scheme_report = out_dir / SCHEME / "index.html"
    other_report = tmp_path / "runs" / f"r{SINGLE.replace('/', '')}" / "index.html"
    for report in (scheme_report, other_report):
        report.parent.mkdir(parents=True)
        report.write_text("<!DOCTYPE html><title>run</title>")
    change = {
        "series": f"series{SCRIPT}", "scenario": f"scenario{ATTRIBUTE}", "aa": False, "mode": "restart",
        "variant": "candidate", "metric": "median_tpot_ms", "hardware": f"hardware{SCRIPT}",
        "run": f"run{SCRIPT}", "run_key": "k2", "started": "2026-03-03", "index": 2,
        "last_run_before": f"before{ATTRIBUTE}", "before": 10.0, "after": 12.0, "magnitude": 0.2, "p_value": 0.01,
        "kind": "mean", "regression": True, "beyond_max_regression": True,
        "sglang_commit_before": SCRIPT, "sglang_commit_after": ATTRIBUTE,
        "harness_commit_before": None, "harness_commit_after": None,
        "report": str(scheme_report), "report_before": str(other_report),
    }
    run = {"run_key": "k", "aa": False, "mode": "restart", "sglang_version": "0.5", "path": "/x"}
    facts = {
        "database": f"sqlite:///{SCRIPT}.sqlite", "options": {"max_regression": 0.05},
        "runs": {"complete": 1, "incomplete": 0, "damaged": 1},
        "run_list": [
            {**run, "run": f"run{SCRIPT}", "scenario": f"scenario{ATTRIBUTE}", "status": "complete", "reason": None,
             "started": f"started{SINGLE}", "verdict": "FAIL", "hardware": f"hardware{SCRIPT}",
             "sglang_commit": ATTRIBUTE, "harness_commit": SINGLE, "report": str(scheme_report)},
            {**run, "run": f"broken{SINGLE}", "scenario": None, "status": "damaged", "reason": f"damaged {SCRIPT}",
             "started": None, "verdict": None, "hardware": f"hardware{SCRIPT}", "sglang_commit": None,
             "harness_commit": None, "report": str(other_report)},
        ],
        "series": [{"series": f"series{SCRIPT}", "scenario": f"scenario{ATTRIBUTE}", "aa": False,
                    "mode": f"warm{SINGLE}", "variant": f"v{SCRIPT}", "metric": "median_tpot_ms",
                    "label": f"TPOT{SCRIPT}", "unit": "ms", "worse": "up", "hardware": f"hardware{SCRIPT}",
                    "runs": ["a", "b", "c"], "values": [10.0, 10.0, 12.0], "change_points": [2]}],
        "change_points": [change],
        "gate": {"max_regression": 0.05, "verdict": "FAIL", "failing": [change]},
    }
    hrefs = assert_page_inert(write_trend_page(facts, out_dir), browser, [
        f"series{SCRIPT}", f"run{SCRIPT}", f"before{ATTRIBUTE}", f"scenario{ATTRIBUTE}", f"hardware{SCRIPT}",
        f"sqlite:///{SCRIPT}.sqlite", f"started{SINGLE}", f"broken{SINGLE}", f"damaged {SCRIPT}",
        f"mode warm{SINGLE}", SCRIPT[:10], ATTRIBUTE[:10], SINGLE[:10],
    ])
    assert f"./{SCHEME}/index.html" in hrefs  # a path, not a javascript: URL
    assert f"../runs/{other_report.parent.name}/index.html" in hrefs


@pytest.mark.parametrize("status", ["found", "not narrowed"])
def test_the_bisection_page_shows_every_string_as_text(browser, tmp_path, status):
    out_dir = tmp_path / "bisect"
    commit = Commit(hash=f"{ATTRIBUTE}{SCRIPT}", subject=f"subject {SCRIPT}", author_date=f"date{SINGLE}")
    other = Commit(hash=f"{SINGLE}{SCRIPT}", subject=f"other {ATTRIBUTE}", author_date="2026-01-01")
    attempts = [out_dir / "steps" / f"01-{SINGLE.replace('/', '')}", out_dir / "steps" / "01-x-try2"]
    result = BisectResult(
        request=BisectRequest(scenario_path=Path("s.yaml"), source=Path(f"/src/{SCRIPT}"), good="a", bad="b",
                              variant=f"v{ATTRIBUTE}"),
        scenario=f"tiny{SCRIPT}", good=other, bad=commit, commits_in_range=3, rules=[f"rule{SCRIPT}"],
        plan=PointPlan(rules=[], once=frozenset({(f"arm{SCRIPT}", "profiled")}),
                       each_point=frozenset({(f"v{ATTRIBUTE}", "profiled")}), statistical=False),
        out_dir=out_dir, status=status, message=f"message {ATTRIBUTE}",
        first_bad=commit if status == "found" else None, candidates=[] if status == "found" else [commit, other],
        steps=[Step(number=1, commit=commit, role=f"role{SCRIPT}", verdict="FAIL", mark="bad",
                    reason=f"reason {ATTRIBUTE}", attempts=attempts)],
        baseline_run_dir=out_dir / SCHEME,
    )
    out_dir.mkdir()
    hrefs = assert_page_inert(write_page(result), browser, [
        f"tiny{SCRIPT}", f"v{ATTRIBUTE}", f"/src/{SCRIPT}", f"subject {SCRIPT}", f"date{SINGLE}", f"rule{SCRIPT}",
        f"arm{SCRIPT}", f"role{SCRIPT}", f"reason {ATTRIBUTE}", commit.hash, commit.short, other.short,
    ])
    assert f"./{SCHEME}" in hrefs and f"steps/{attempts[0].name}/index.html" in hrefs
