"""The report: index.html, junit.xml, summary.md, `harness report`, the `latest` link.

Two kinds of run directory: a hand-built one that follows docs/internals.md exactly (with real
CPU profiler traces; tests/support/report_run.py), for precise and fast checks and for the incomplete-run cases;
and a real micro-engine run (tests/test_report_browser.py) for the end-to-end checks.
"""

from __future__ import annotations

import copy
import html
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sglang_spec_harness.commands.cli import main as harness_main
from sglang_spec_harness.files import point_latest_at_newest_run
from sglang_spec_harness.report import append_step_summary, build_report
from sglang_spec_harness.report.data import load_report_data

from support.report_run import make_run_dir


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("report"))


@pytest.fixture()
def run_dir(pristine_run: Path, tmp_path: Path) -> Path:
    """A private copy of the hand-built run (tests modify it)."""
    target = tmp_path / "runs" / pristine_run.name
    shutil.copytree(pristine_run, target)
    return target


def set_verdict(run_dir: Path, rule_name: str, verdict: str, reason: str) -> dict:
    """Rewrite results.json with one rule's verdict changed (and the overall verdict to match)."""
    results = json.loads((run_dir / "results.json").read_text())
    for rule in results["rules"]:
        if rule["name"] == rule_name:
            rule["verdict"], rule["reason"] = verdict, reason
    verdicts = [r["verdict"] for r in results["rules"] if r["verdict"] != "INFO"]
    results["verdict"] = "FAIL" if "FAIL" in verdicts else "INCONCLUSIVE" if "INCONCLUSIVE" in verdicts else "PASS"
    results["exit_code"] = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[results["verdict"]]
    (run_dir / "results.json").write_text(json.dumps(results))
    return results


# ---- the page -----------------------------------------------------------------------------------


def test_page_is_self_contained_and_shows_every_figure(run_dir):
    paths = build_report(run_dir)
    page = paths.html.read_text()
    assert paths.verdict == "PASS"
    assert 'id="verdict">PASS<' in page
    for forbidden in ("<script src", "<link ", "@import", "url(http", 'src="http', "<img "):
        assert forbidden not in page, forbidden
    assert page.count("<svg") == 5, "counts, region time, TPOT, accept length, timeline"
    assert "No pattern counts" not in page and "No timeline" not in page and "No region times" not in page
    # every rule appears with its reason; every trace and server log is linked, relatively
    results = json.loads((run_dir / "results.json").read_text())
    for rule in results["rules"]:
        assert rule["name"] in page and html.escape(rule["reason"]) in page
    assert 'href="./trials/00-baseline-profiled/profile/baseline-1-TP-0.trace.json.gz"' in page
    assert page.count('>server.log</a>') == 10
    assert "ui.perfetto.dev" in page and "chrome://tracing" in page
    # variants with their description and flags; environment side by side
    assert "softmax + top-1 in the draft" in page and "--disable-topk1-fast-path" in page
    assert "server_info.fast_path" in page and "torch" in page


def test_figure_svgs_have_unique_ids(run_dir):
    import re

    page = build_report(run_dir).html.read_text()
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_top_kernels_and_region_time_come_from_the_analysis(run_dir):
    from sglang_spec_harness.report import analysis_view as av

    data = load_report_data(run_dir)
    times, label = av.region_time_per_cycle(data)
    assert label == "CPU µs"
    assert set(times) == {"baseline", "candidate"}
    assert set(times["baseline"]) == {"DRAFT_DECODE", "TARGET_VERIFY", "DRAFT_EXTEND"}
    tables, _unit = av.top_kernels(data)
    decode = {row.name: row for row in tables["DRAFT_DECODE"]}
    # 2 softmax per draft-decode span in the baseline, none in the candidate
    assert decode["aten::_softmax"].baseline_calls == 2 and decode["aten::_softmax"].candidate_calls is None
    assert decode["aten::argmax"].candidate_calls == 2
    timeline, _ = av.cycle_timelines(data, "softmax")
    base_regions = [b.region for b in timeline["baseline"] if b.lane == "regions"]
    assert base_regions == ["DRAFT_DECODE", "TARGET_VERIFY", "DRAFT_EXTEND"]
    assert sum(b.matched for b in timeline["baseline"]) == 3  # 2 in draft decode + 1 in draft extend
    assert not any(b.matched for b in timeline["candidate"])


def test_count_bars_from_analysis_match_the_traces(run_dir):
    from sglang_spec_harness.report import analysis_view as av

    bars = {(b.region, b.variant): b for b in av.count_bars(load_report_data(run_dir), "softmax")}
    assert bars[("DRAFT_DECODE", "baseline")].per_replay_max == 2 and bars[("DRAFT_DECODE", "baseline")].total == 8
    assert bars[("DRAFT_EXTEND", "baseline")].total == 4
    assert bars[("DRAFT_DECODE", "candidate")].total == 0


@pytest.mark.parametrize(
    ("rule", "verdict", "reason"),
    [
        ("candidate_no_softmax_draft_decode", "FAIL", "candidate has 2 softmax per replay in DRAFT_DECODE (want 0)"),
        ("tpot_improved", "INCONCLUSIVE", "gain 0.4% inside the noise; smallest detectable gain 3.1%"),
    ],
)
def test_why_comes_right_after_the_verdict(run_dir, rule, verdict, reason):
    set_verdict(run_dir, rule, verdict, reason)
    page = build_report(run_dir).html.read_text()
    assert f'id="verdict">{verdict}<' in page
    why = page.index('id="why"')
    assert page.index('id="verdict"') < why < page.index(reason) < page.index('id="rules"')
    assert f'class="banner {verdict}"' in page


# ---- missing pieces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remove", "expected_note"),
    [
        ("results.json", "results.json is missing"),
        ("analysis.json", "analysis.json is missing"),
        ("environment.json", "environment.json is missing"),
        ("run.json", "run.json is missing"),
        ("scenario.yaml", "scenario.yaml is missing"),
        ("trials/00-baseline-profiled/profile", "trace file(s) listed but missing: profile/baseline-1-TP-0.trace.json.gz"),
    ],
)
def test_missing_pieces_become_notes(run_dir, remove, expected_note):
    target = run_dir / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    paths = build_report(run_dir)
    page = paths.html.read_text()
    assert expected_note in page
    assert expected_note in paths.summary.read_text()
    ET.parse(paths.junit)  # still well-formed


def test_the_report_reads_no_trace(run_dir):
    """Time per region, top ops and the timeline come from analysis.json: with every trace made
    unreadable, the page is the same."""
    before = build_report(run_dir).html.read_text()
    for trace in run_dir.glob("trials/*/profile/*.trace.json.gz"):
        trace.write_bytes(b"\x1f\x8bnot gzip")
    after = build_report(run_dir).html.read_text()
    assert "No timeline" not in after and "No region times" not in after and "aten::_softmax" in after
    assert _unnumbered(after) == _unnumbered(before)


def _unnumbered(page: str) -> str:
    """A page with its figures' element ids unnumbered (they are numbered per process)."""
    import re

    return re.sub(r"\bf\d+-", "f-", page)


def test_failed_trial_and_unreadable_trace_are_notes_not_crashes(run_dir):
    trial = run_dir / "trials" / "03-candidate-timed" / "trial.json"
    info = json.loads(trial.read_text())
    info.update(status="failed", error="server exited with code 1 at startup", summary=None)
    trial.write_text(json.dumps(info))
    (run_dir / "trials" / "01-candidate-profiled" / "profile" / "candidate-1-TP-0.trace.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    interrupted = run_dir / "trials" / "08-candidate-timed" / "trial.json"
    info = json.loads(interrupted.read_text())
    info.update(status="running", finished=None)
    interrupted.write_text(json.dumps(info))
    shutil.rmtree(run_dir / "trials" / "09-baseline-timed")
    run = json.loads((run_dir / "run.json").read_text())
    run.update(status="incomplete", error="trial 03-candidate-timed failed")
    (run_dir / "run.json").write_text(json.dumps(run))
    page = build_report(run_dir).html.read_text()
    assert "Trial 03-candidate-timed failed: server exited with code 1 at startup" in page
    assert "No timeline" not in page  # the report draws from analysis.json, not from the trace
    assert "did not run: 09-baseline-timed" in page
    assert "08-candidate-timed was still running when the run stopped" in page
    assert "The run is incomplete" in page


def test_empty_results_and_garbage_json(run_dir):
    (run_dir / "results.json").write_text("{not json")
    (run_dir / "analysis.json").write_text(json.dumps({"schema_version": 1, "trials": {},
                                                       "errors": {"00-baseline-profiled": "ValueError: boom"}}))
    paths = build_report(run_dir)
    page = paths.html.read_text()
    assert paths.verdict is None and 'id="verdict">NO VERDICT<' in page
    assert "results.json could not be read" in page
    assert "The trace analysis of 00-baseline-profiled failed: ValueError: boom" in page
    suite = ET.parse(paths.junit).getroot().find("testsuite")
    assert suite.get("errors") == "1" and suite.find("testcase/error") is not None


# ---- JUnit --------------------------------------------------------------------------------------


def check_junit_essentials(junit: Path, results: dict) -> ET.Element:
    """The JUnit schema's essentials, as publishers (Jenkins, GitHub actions) read them."""
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    rules = results["rules"]
    assert len(cases) == len(rules) == int(suite.get("tests")) == int(root.get("tests"))
    for element in (root, suite):
        for attribute in ("tests", "failures", "errors", "skipped", "time"):
            assert element.get(attribute) is not None, attribute
        float(element.get("time"))
    by_name = {c.get("name"): c for c in cases}
    for rule in rules:
        case = by_name[rule["name"]]
        assert case.get("classname") and case.get("time") is not None
        children = [child.tag for child in case]
        if rule["verdict"] == "FAIL":
            assert children == ["failure"] and case.find("failure").get("message") == rule["reason"]
        elif rule["verdict"] == "INCONCLUSIVE":
            assert children == ["skipped"] and case.find("skipped").get("message") == rule["reason"]
        else:
            assert children == []
    assert int(suite.get("failures")) == sum(r["verdict"] == "FAIL" for r in rules)
    assert int(suite.get("skipped")) == sum(r["verdict"] == "INCONCLUSIVE" for r in rules)
    assert int(suite.get("errors")) == 0
    return suite


def test_junit_counts_and_reasons(run_dir):
    set_verdict(run_dir, "candidate_no_softmax_draft_decode", "FAIL", 'softmax "back" <in> DRAFT_DECODE & more')
    results = set_verdict(run_dir, "tpot_improved", "INCONCLUSIVE", "inside the noise")
    paths = build_report(run_dir)
    suite = check_junit_essentials(paths.junit, results)
    assert suite.get("failures") == "1" and suite.get("skipped") == "1" and suite.get("tests") == "6"
    assert float(suite.get("time")) == 125.0  # run.json started -> finished


def test_informational_rules_are_shown_apart_and_never_as_passed(run_dir):
    set_verdict(run_dir, "gain_explained_by_softmax", "INFO",
                "informational (no bound: set min_ratio or max_ratio to judge it): measured 0.55 ms, predicted 0.5 ms")
    results = set_verdict(run_dir, "tpot_improved", "INCONCLUSIVE", "inside the noise")
    paths = build_report(run_dir)
    # JUnit: the judged rules in the main suite, the informational one in its own, as skipped INFO
    root = ET.parse(paths.junit).getroot()
    main_suite, info_suite = root.findall("testsuite")
    assert info_suite.get("name") == main_suite.get("name") + ".informational"
    assert [c.get("name") for c in main_suite.findall("testcase")] == [
        r["name"] for r in results["rules"] if r["verdict"] != "INFO"]
    assert (main_suite.get("tests"), main_suite.get("skipped")) == ("5", "1")
    (case,) = info_suite.findall("testcase")
    assert case.get("name") == "gain_explained_by_softmax"
    skipped = case.find("skipped")
    assert skipped.get("type") == "INFO" and skipped.get("message").startswith("INFO: informational (no bound")
    assert (info_suite.get("tests"), info_suite.get("skipped"), info_suite.get("failures")) == ("1", "1", "0")
    assert (root.get("tests"), root.get("skipped"), root.get("failures")) == ("6", "2", "0")
    # summary.md: its own table under the rule table
    text = paths.summary.read_text()
    judged, _, info = text.partition("**Informational** (no bound set: not part of the verdict)")
    assert "gain_explained_by_softmax" not in judged and "| `gain_explained_by_softmax` | explained_gain | ℹ️ INFO |" in info
    # the page: its own table under the judged rules, and not among the reasons for the verdict
    page = paths.html.read_text()
    why = page[page.index('id="why"'):page.index('id="rules"')]
    assert "inside the noise" in why and "gain_explained_by_softmax" not in why
    rules = page[page.index('id="rules"'):]
    assert rules.index("tpot_improved") < rules.index('id="informational"') < rules.index("gain_explained_by_softmax")
    assert '<span class="pill INFO">INFO</span>' in rules


# ---- summary.md and $GITHUB_STEP_SUMMARY --------------------------------------------------------


def test_summary_has_verdict_rule_table_and_key_numbers(run_dir):
    set_verdict(run_dir, "greedy_outputs_identical", "FAIL", "request 3 differs | at token 7")
    text = build_report(run_dir).summary.read_text()
    assert text.startswith("## ❌ FAIL: `tiny`")
    assert "| `greedy_outputs_identical` | output_identity | ❌ FAIL | request 3 differs \\| at token 7 |" in text
    assert "TPOT candidate/baseline = 0.9460 (95% CI [0.9340, 0.9590]), gain 5.4%" in text
    assert "Accept length: baseline 2.5 (median of 4); candidate 2.5 (median of 4); ratio 1.0000" in text
    assert "DRAFT_DECODE: candidate 0 per replay (0 in 4 replays)" in text
    assert "baseline 2 per replay (8 in 4 replays)" in text


def test_append_step_summary(run_dir, tmp_path, monkeypatch):
    build_report(run_dir)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert append_step_summary(run_dir) is None
    target = tmp_path / "step_summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert append_step_summary(run_dir) == target
    text = target.read_text()
    assert text.startswith("earlier step\n## ✅ PASS: `tiny`")
    (run_dir / "summary.md").unlink()  # built on demand when the report was not
    append_step_summary(run_dir)
    assert target.read_text().count("## ✅ PASS") == 2


# ---- the command and the latest link ------------------------------------------------------------


def test_harness_report_command(run_dir, capsys):
    assert harness_main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"PASS: {run_dir / 'index.html'}")
    assert (run_dir / "junit.xml").exists() and (run_dir / "summary.md").exists()


@pytest.mark.parametrize("make_bad", ["missing", "file", "empty_dir"])
def test_harness_report_bad_run_dir_is_one_line_exit_2(tmp_path, capsys, make_bad):
    bad = tmp_path / "nope"
    if make_bad == "file":
        bad.write_text("x")
    elif make_bad == "empty_dir":
        bad.mkdir()
    assert harness_main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness report: ") and "not a run directory" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_latest_link_points_at_newest_run_and_is_idempotent(run_dir):
    runs = run_dir.parent
    older = runs / "20261128-090000-tiny"
    shutil.copytree(run_dir, older)
    link = runs.parent / "latest"
    build_report(older)
    assert link.is_symlink() and link.resolve() == run_dir.resolve()  # newest, not the one rebuilt
    assert point_latest_at_newest_run(run_dir) == link and point_latest_at_newest_run(run_dir) == link
    assert link.resolve() == run_dir.resolve()
    newer = runs / "20261130-000000-tiny"
    shutil.copytree(run_dir, newer)
    point_latest_at_newest_run(run_dir)
    assert link.resolve() == newer.resolve()


def test_no_latest_link_outside_a_runs_folder(tmp_path, pristine_run):
    elsewhere = tmp_path / "somewhere" / "myrun"
    shutil.copytree(pristine_run, elsewhere)
    build_report(elsewhere)
    assert not (tmp_path / "latest").exists() and not (tmp_path / "somewhere" / "latest").exists()


def test_aa_runs_are_labelled(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    results["aa"] = True
    (run_dir / "results.json").write_text(json.dumps(copy.deepcopy(results)))
    page = build_report(run_dir).html.read_text()
    assert "A/A (both arms run the baseline)" in page
