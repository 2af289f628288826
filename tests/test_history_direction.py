"""Which way a series is worse, from the scenario's rules, and acks (issue 40).

- Each kind of series: a count whose rule wants it at 0 or at most N (a rise is the regression), one
  whose rule wants it present (a fall is), one that must equal N > 0 (a move away), one that no rule
  governs (a change, neutral, never a regression); TPOT and throughput keep their known direction.
- The committed release sweep (benchmarks/sglang_release_sweep.json) replayed as planted runs with the
  shipped release scenario's rules: the argmax arriving at 0.5.13 reads as an improvement by the rule
  that wants it present, and with the committed sweep's own rules (none on the argmax) as a neutral
  change: on the page's data and in the page, never a regression.
- A timing change point the gate sees is not called a regression until a side-by-side run confirmed
  it (INCONCLUSIVE, exit 3); a stored confirmation makes it one; a side-by-side run that found no change
  clears it.
- `harness history ack SERIES --at POINT --reason TEXT`: bad input is one line (exit 2) and writes
  nothing; an ack makes the gate compare against the level after it (a later change still counts);
  the trend page shows the mark and the reason (Chromium).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_spec_harness.history import db
from sglang_spec_harness.history.analyze import history_facts, series_direction
from sglang_spec_harness.history.direction import (
    AWAY, BETTER, CHANGE, DOWN, IMPROVEMENT, NEITHER, NOT_CONFIRMED, REGRESSION, UP, WORSE, Direction,
    count_direction, reading, rule_direction,
)
from sglang_spec_harness.history.figures import CHANGE_COLOUR, IMPROVEMENT_COLOUR, REGRESSION_COLOUR
from sglang_spec_harness.history.ingest import ingest
from sglang_spec_harness.history.marks import load_acks, store_confirmations
from sglang_spec_harness.history.page import render_trend_page
from support.chromium import open_report
from support.history_helpers import release_sweep_runs, series_run

REPO = Path(__file__).resolve().parents[1]
COMMITTED_RULES = ["candidate_no_softmax_draft_decode", "candidate_no_softmax_draft_extend"]  # + output identity


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def report(database: Path, out: Path) -> tuple[int, dict]:
    done = harness("history", "report", "--db", str(database), "--out", str(out), "--json", "--permutations", "199")
    assert done.returncode in (0, 1, 3), done.stderr
    return done.returncode, json.loads(done.stdout)


# ---- each kind of series --------------------------------------------------------------------------


def test_each_kind_of_bound_gives_its_direction():
    assert rule_direction({"at_least": 1}, "r") == Direction(DOWN, "r")
    assert rule_direction({"at_most": 2}, "r") == Direction(UP, "r")
    assert rule_direction({"equals": 0}, "r") == Direction(UP, "r")
    assert rule_direction({"equals": 4}, "r") == Direction(AWAY, "r", 4.0)
    present, absent, exactly = Direction(DOWN), Direction(UP), Direction(AWAY, None, 4.0)
    assert (present.way(0, 4), present.way(4, 0)) == (BETTER, WORSE)
    assert (absent.way(0, 4), absent.way(4, 0)) == (WORSE, BETTER)
    assert (exactly.way(4, 5), exactly.way(5, 4), exactly.way(3, 5), exactly.way(4, 4)) == (WORSE, BETTER, NEITHER, NEITHER)
    assert Direction(None).way(0, 4) == Direction(None).way(4, 0) == NEITHER


def test_a_counts_direction_is_its_variants_rule_and_no_rule_gives_none():
    runs = [[{"name": "cand_argmax", "params": {"region": "DD", "pattern": "argmax", "variants": ["candidate"], "at_least": 1}},
             {"name": "base_softmax", "params": {"region": "DD", "pattern": "softmax", "variants": ["baseline"], "at_least": 1}},
             {"name": "cand_softmax", "params": {"region": "DD", "pattern": "softmax", "variants": ["candidate"], "equals": 0}}]]
    assert count_direction(runs, "candidate", "DD", "argmax") == Direction(DOWN, "cand_argmax")
    assert count_direction(runs, "candidate", "DD", "softmax") == Direction(UP, "cand_softmax")
    assert count_direction(runs, "baseline", "DD", "softmax") == Direction(DOWN, "base_softmax")
    assert count_direction(runs, "baseline", "DD", "argmax") == Direction(None)  # the rule names another variant
    assert count_direction(runs, "candidate", "DE", "argmax") == Direction(None)  # no rule on that region
    # the newest run's rule wins (callers pass the newest first)
    newer = [[{"name": "new", "params": {"region": "DD", "pattern": "argmax", "at_most": 0}}], *runs]
    assert count_direction(newer, "candidate", "DD", "argmax") == Direction(UP, "new")
    # every metric that is not a count keeps its own direction
    assert series_direction({}, [], "candidate", "tpot_ms").worse == UP
    assert series_direction({}, [], "candidate/baseline", "tpot_ratio").worse == UP
    assert series_direction({}, [], "candidate", "throughput_tok_s").worse == DOWN
    assert series_direction({}, [], "candidate", "accept_length").worse == DOWN
    assert series_direction({}, [], "candidate", "output_hash").worse is None
    assert series_direction({}, [], "candidate", "kernels:DD:argmax").worse is None


def test_how_a_change_point_reads():
    assert reading(WORSE, True, None) == REGRESSION and reading(BETTER, True, None) == IMPROVEMENT
    assert reading(NEITHER, True, None) == reading(NEITHER, False, None) == CHANGE
    assert reading(WORSE, False, None) == reading(BETTER, False, None) == NOT_CONFIRMED
    assert reading(WORSE, False, {"status": "not confirmed"}) == NOT_CONFIRMED
    assert reading(WORSE, False, {"status": "confirmed"}) == REGRESSION
    assert reading(BETTER, False, {"status": "confirmed"}) == IMPROVEMENT


# ---- the committed release sweep: the argmax arriving at 0.5.13 ------------------------------------


def _sweep_facts(root: Path, rule_names: list[str] | None) -> dict:
    runs = release_sweep_runs(root, rule_names)
    engine = db.open_database(root / "history.sqlite")
    ingest(engine, runs)
    return history_facts(engine)


def _at_0_5_13(facts: dict, variant: str, metric: str) -> dict:
    (change,) = [c for c in facts["change_points"] if (c["variant"], c["metric"]) == (variant, metric)]
    assert (change["label_before"], change["label_after"], change["kind"]) == ("0.5.12.post1", "0.5.13", "exact")
    return change


def _page_rows(html: str) -> dict[str, str]:
    """The change points table's rows as the page has them: series -> the pill's class and word."""
    rows = re.findall(r'<tr[^>]*><td><span class="pill ([A-Z]+)">([a-z ]+)</span></td><td>([^<]+)</td>', html)
    return {series: f"{pill} {word}" for pill, word, series in rows}


def test_the_release_sweeps_argmax_reads_as_the_fast_path_arriving(tmp_path):
    facts = _sweep_facts(tmp_path, None)  # the shipped release scenario: a rule wants the argmax present
    argmax = _at_0_5_13(facts, "candidate", "kernels:DRAFT_DECODE:argmax")
    assert (argmax["before"], argmax["after"], argmax["way"], argmax["reading"], argmax["rule"]) == (
        0, 4, BETTER, IMPROVEMENT, "candidate_argmax_draft_decode")
    assert not argmax["regression"]
    softmax = _at_0_5_13(facts, "candidate", "kernels:DRAFT_DECODE:softmax")
    assert (softmax["before"], softmax["after"], softmax["reading"], softmax["rule"]) == (
        4, 0, IMPROVEMENT, "candidate_no_softmax_draft_decode")
    extend = _at_0_5_13(facts, "candidate", "kernels:DRAFT_EXTEND:argmax")  # no rule governs it
    assert (extend["before"], extend["after"], extend["way"], extend["reading"], extend["rule"]) == (
        0, 1, NEITHER, CHANGE, None)
    series = {(s["variant"], s["metric"]): s for s in facts["series"]}
    assert series[("candidate", "kernels:DRAFT_DECODE:argmax")]["worse"] == DOWN
    assert series[("candidate", "kernels:DRAFT_EXTEND:argmax")]["worse"] is None
    assert not [c for c in facts["change_points"] if c["metric"].startswith("kernels:") and c["reading"] == REGRESSION]
    # the page: the pills, and the charts' lines (green for the argmax arriving, grey for the ungoverned)
    html = render_trend_page(facts, tmp_path)
    rows = _page_rows(html)
    assert rows[argmax["series"]] == "PASS improvement" and rows[extend["series"]] == "NONE change"
    from sglang_spec_harness.history.figures import ChangeMark, series_figure

    def line_colours(reading_word: str) -> set[str]:
        svg = series_figure([0, 0, 4, 4], [ChangeMark(2, reading_word)], colour="#000000", title="t", ylabel="y", label="l")
        return {c for c in (REGRESSION_COLOUR, IMPROVEMENT_COLOUR, CHANGE_COLOUR) if c.lower() in svg.lower()}

    assert line_colours(IMPROVEMENT) >= {IMPROVEMENT_COLOUR} and REGRESSION_COLOUR not in line_colours(IMPROVEMENT)
    assert REGRESSION_COLOUR not in line_colours(CHANGE) and REGRESSION_COLOUR in line_colours(REGRESSION)


def test_with_the_committed_sweeps_rules_the_argmax_is_a_neutral_change(tmp_path):
    facts = _sweep_facts(tmp_path, COMMITTED_RULES)  # as it ran on 2026-12-03: no rule on the argmax
    argmax = _at_0_5_13(facts, "candidate", "kernels:DRAFT_DECODE:argmax")
    assert (argmax["before"], argmax["after"], argmax["way"], argmax["reading"], argmax["regression"]) == (
        0, 4, NEITHER, CHANGE, False)
    assert _at_0_5_13(facts, "candidate", "kernels:DRAFT_DECODE:softmax")["reading"] == IMPROVEMENT
    assert _page_rows(render_trend_page(facts, tmp_path))[argmax["series"]] == "NONE change"


# ---- timing: not a regression until confirmed -----------------------------------------------------


@pytest.fixture(scope="module")
def slower(tmp_path_factory) -> Path:
    """A nightly series whose candidate TPOT rises 30% from run 7 on (12 runs): a database."""
    root = tmp_path_factory.mktemp("slower")
    for i in range(1, 13):
        series_run(root, i, base_tpot=20.0, cand_tpot=15.0 if i < 7 else 19.5)
    database = root / "history.sqlite"
    ingest(db.open_database(database), sorted((root / "runs").iterdir()))
    return database


def test_tpot_rising_is_not_called_a_regression_until_confirmed(slower, tmp_path):
    database = tmp_path / "history.sqlite"
    database.write_bytes(slower.read_bytes())
    code, facts = report(database, tmp_path / "page")
    tpot = next(c for c in facts["change_points"] if (c["variant"], c["metric"]) == ("candidate", "tpot_ms"))
    assert (tpot["way"], tpot["reading"], tpot["regression"]) == (WORSE, NOT_CONFIRMED, False)
    assert tpot["confirmation"]["measured"] is False and "cannot run the points again here" in tpot["confirmation"]["reason"]
    assert code == 3 and facts["gate"]["verdict"] == "INCONCLUSIVE" and facts["gate"]["failing"] == []
    assert {c["metric"] for c in facts["gate"]["not_confirmed"]} == {"tpot_ms", "tpot_ratio"}
    # a side-by-side run that confirmed it makes it a regression; one that found no change clears it
    engine = db.open_database(database)
    row = {"run_key_before": tpot["run_key_before"], "run_key_after": tpot["run_key"], "variant": "candidate",
           "metric": "tpot_ms", "status": "confirmed", "measured": True, "ratio": 1.29, "ci_low": 1.2, "ci_high": 1.38,
           "confidence": 0.95, "method": "mixed-model-t", "reason": "planted", "run_dir": None, "confirmed_at": "x"}
    store_confirmations(engine, [row])
    facts = history_facts(engine)
    tpot = next(c for c in facts["change_points"] if (c["variant"], c["metric"]) == ("candidate", "tpot_ms"))
    assert (tpot["reading"], tpot["regression"], facts["gate"]["verdict"], facts["exit_code"]) == (
        REGRESSION, True, "FAIL", 1)
    store_confirmations(engine, [{**row, "status": "not confirmed", "ratio": 1.01, "ci_low": 0.97, "ci_high": 1.05,
                                  "reason": "the interval includes no change"}])
    facts = history_facts(engine)
    assert [c["metric"] for c in facts["gate"]["cleared"]] == ["tpot_ms"]
    assert [c["metric"] for c in facts["gate"]["not_confirmed"]] == ["tpot_ratio"]  # not run side by side


# ---- ack ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def softmax_back(tmp_path_factory) -> Path:
    """A nightly series whose candidate's softmax comes back (0 -> 2 per replay) at run 9 of 12."""
    root = tmp_path_factory.mktemp("softmax_back")
    for i in range(1, 13):
        series_run(root, i, base_tpot=20.0, cand_tpot=20.0, cand_softmax=2 if i >= 9 else 0)
    return root


def test_ack_through_the_cli(softmax_back, tmp_path):
    database = tmp_path / "history.sqlite"
    assert harness("history", "ingest", str(softmax_back / "runs"), "--db", str(database)).returncode == 0
    code, facts = report(database, tmp_path / "page")
    failing = {c["metric"]: c for c in facts["gate"]["failing"]}
    assert code == 1 and set(failing) == {"kernels:DRAFT_DECODE:softmax"}  # DRAFT_EXTEND's: no rule, a change
    decode = failing["kernels:DRAFT_DECODE:softmax"]
    # bad input: one line, exit 2, nothing written
    for args, says in ((["nope", "--at", decode["run"], "--reason", "x"], "no such series"),
                       ([decode["series"][:-2], "--at", decode["run"], "--reason", "x"], "did you mean"),
                       ([decode["series"], "--at", decode["last_run_before"], "--reason", "x"], "not a change point"),
                       ([decode["series"], "--at", "no-such-run", "--reason", "x"], "no run of series"),
                       ([decode["series"], "--at", decode["run"], "--reason", "  "], "--reason: empty")):
        done = harness("history", "ack", *args, "--db", str(database))
        assert done.returncode == 2 and says in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
    assert harness("history", "ack", decode["series"], "--at", decode["run"], "--reason", "x",
                   "--db", str(tmp_path / "none.sqlite")).returncode == 2
    assert load_acks(db.open_database(database)) == {}
    # acked at the run the softmax came back: the gate compares against the level after it
    for c in failing.values():
        done = harness("history", "ack", c["series"], "--at", c["run"], "--reason", "softmax back on purpose (#123)",
                       "--by", "maintainer", "--db", str(database))
        assert done.returncode == 0 and "acknowledged" in done.stdout, done.stderr
    code, facts = report(database, tmp_path / "page")
    assert code == 0 and facts["gate"]["verdict"] == "PASS"
    acked = next(c for c in facts["change_points"] if c["series"] == decode["series"])
    assert acked["acknowledged"]["reason"] == "softmax back on purpose (#123)" and acked["acknowledged"]["by"] == "maintainer"
    assert acked["reading"] == REGRESSION  # still what it is; intended
    assert {a["series"] for a in facts["acks"]} == {c["series"] for c in failing.values()}
    # a later rise beyond the acked level still fails (2 -> 4 per replay from a 13th run on)
    series_run(softmax_back, 13, base_tpot=20.0, cand_tpot=20.0, cand_softmax=4)
    assert harness("history", "ingest", str(softmax_back / "runs"), "--db", str(database)).returncode == 0
    code, facts = report(database, tmp_path / "page")
    assert code == 1 and {c["metric"] for c in facts["gate"]["failing"]} == {"kernels:DRAFT_DECODE:softmax"}
    assert (facts["gate"]["failing"][0]["before"], facts["gate"]["failing"][0]["after"]) == (2, 4)


def test_ack_on_the_page(browser, slower, tmp_path):
    database = tmp_path / "history.sqlite"
    database.write_bytes(slower.read_bytes())
    _, facts = report(database, tmp_path / "page")
    (tpot,) = [c for c in facts["gate"]["not_confirmed"] if c["metric"] == "tpot_ms"]
    done = harness("history", "ack", tpot["series"], "--at", tpot["run"], "--reason", "bigger model <b>on purpose</b>",
                   "--by", "maintainer", "--db", str(database))
    assert done.returncode == 0, done.stderr
    code, facts = report(database, tmp_path / "page")
    assert code == 3 and [c["metric"] for c in facts["gate"]["not_confirmed"]] == ["tpot_ratio"]  # not acked
    html = tmp_path / "page" / "index.html"
    page, requests, problems = open_report(browser, html)
    try:
        assert problems == [] and requests == [html.as_uri()]
        assert page.inner_text("#verdict").strip() == "NOT CONFIRMED"
        assert "tpot_ratio" in page.inner_text("#why") and "· tpot_ms ·" not in page.inner_text("#why")
        (row,) = [r for r in page.query_selector_all("#changes tbody tr.acknowledged")]
        text = row.inner_text()
        assert tpot["series"] in text and "✓ intended: bigger model <b>on purpose</b> (maintainer," in text
        assert row.query_selector("b") is None  # the reason is text, never markup
        assert "not confirmed" in row.query_selector("td:first-child").inner_text()
        charts = [f for f in page.query_selector_all("#series figure") if "✓ intended" in f.inner_text()]
        assert len(charts) == 1 and "bigger model" in charts[0].inner_text()
    finally:
        page.close()
