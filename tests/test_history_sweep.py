"""Sweeps in the history: a sweep of real micro-engine runs in the shape `harness sweep` writes (the
candidate's trials per point, the baseline's profiled trial adopted, run.json `sweep`), with the
draft's fast path switched on at one release. Its series follow the release order; exact series
(counts per replay, the output hash) change exactly where their value does; every change point is
explained by the kernel diff between the runs on either side, asserted against the traces; two
sweeps over the same releases stay apart; the trend page shows it all in Chromium; a version-1
database is migrated in place (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from sglang_spec_harness.history import db
from sglang_spec_harness.history.changepoints import exact_change_points
from sglang_spec_harness.history.extract import read_run
from sglang_spec_harness.history.ingest import find_run_dirs, ingest
from sglang_spec_harness.history.page import write_trend_page
from sglang_spec_harness.traces import analyze_traces_with_tables
from support.history_helpers import create_v1_database, insert_as_v1, micro_sweep
from support.chromium import open_report
from support.escaping import ATTRIBUTE, SCHEME, SCRIPT, SINGLE, assert_page_inert

REPO = Path(__file__).resolve().parents[1]
SWEEP = "20260401-020000-micro_sweep"
LABELS = ["0.5.10", "0.5.11", "0.5.12", "0.5.13"]
FAST_PATH = [False, False, True, True]  # the draft's argmax from the third release on
SWITCH = FAST_PATH.index(True)
# What ran that was not SGLang's: the harness adapted the last two releases differently.
ENVIRONMENTS = [{"provider": "cpu", "adaptations": ["cpu stand-ins"], "pins": {"torch": {"pinned": "2.9.1", "used": "2.13.0"}}}] * 2 \
    + [{"provider": "cpu", "adaptations": ["cpu stand-ins", "spec-v2 port"], "pins": {"torch": {"pinned": "2.9.1", "used": "2.13.0"}}}] * 2


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def report(database: Path | str, out: Path, *extra: str) -> tuple[int, dict]:
    done = harness("history", "report", "--db", str(database), "--out", str(out), "--json", "--permutations", "199",
                   *extra)
    assert done.returncode in (0, 1, 3), done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> list[Path]:
    """Four releases, one real micro run each (about 15 s each)."""
    root = tmp_path_factory.mktemp("sweeps")
    return micro_sweep(root, FAST_PATH, name=SWEEP, labels=LABELS, environments=ENVIRONMENTS)


@pytest.fixture(scope="module")
def second_sweep(sweep, tmp_path_factory) -> list[Path]:
    """A second sweep of the same releases (a later night's), in which the fast path shows from the
    second release on and the last release's greedy outputs differ; its runs ran in the reverse of
    the release order. Made of copies of the first sweep's runs (each a different run: its own start)."""
    root = tmp_path_factory.mktemp("second") / "20260402-020000-micro_sweep" / "releases"
    sources = [sweep[0], sweep[2], sweep[3], sweep[2]]
    runs = []
    for position, (source, label) in enumerate(zip(sources, LABELS)):
        target = root / label
        shutil.copytree(source, target, symlinks=True)
        info = json.loads((target / "run.json").read_text())
        started = datetime(2026, 4, 2, 6, 0) - timedelta(hours=position)
        info["started"] = started.isoformat() + "+00:00"
        info["sweep"].update(sweep="20260402-020000-micro_sweep", position=position, label=label, point=label)
        (target / "run.json").write_text(json.dumps(info))
        runs.append(target)
    requests = _profiled(runs[3], "candidate") / "requests.jsonl"
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    measured = next(r for r in rows if not r["warmup"])
    measured["output_ids"][0] += 1
    requests.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return runs


@pytest.fixture(scope="module")
def history(sweep, tmp_path_factory) -> tuple[Path, dict, Path]:
    """The first sweep ingested (its releases' folder: the baseline's run-once folder beside it is not
    a run of its own), the report's facts and the page."""
    root = tmp_path_factory.mktemp("history")
    database = root / "history.sqlite"
    done = harness("history", "ingest", str(sweep[0].parent), "--db", str(database))
    assert done.returncode == 0 and "4 complete" in done.stdout, done.stdout + done.stderr
    code, facts = report(database, root / "history")
    assert code == 0, facts["gate"]
    return database, facts, root / "history" / "index.html"


def _profiled(run: Path, variant: str) -> Path:
    (trial,) = [t for t in (run / "trials").iterdir() if t.name.endswith(f"-{variant}-profiled")]
    return trial


def _sweep_series(facts: dict, sweep: str = SWEEP) -> dict[tuple[str, str], dict]:
    return {(s["variant"], s["metric"]): s for s in facts["series"] if s["sweep"] == sweep}


def _medians_from_trace(run: Path, region: str) -> dict[str, float]:
    """Each op name's median count per span of `region` in the candidate's profiled trace, counted
    from the analysis's table of every op (not from its op tables)."""
    trace = sorted((_profiled(run, "candidate") / "profile").iterdir())
    ops = analyze_traces_with_tables(trace).ops_frame()
    ops = ops[(ops["region"] == region) & (ops["span"] >= 0)]
    spans = sorted(ops["span"].unique())
    per_span = ops.groupby(["name", "span"], observed=True).size().unstack(fill_value=0).reindex(columns=spans,
                                                                                                  fill_value=0)
    return {str(name): float(row.median()) for name, row in per_span.iterrows()}


# ---- exact change points ---------------------------------------------------------------------------


def test_exact_change_points_are_every_change_of_value_with_no_minimum_size():
    assert [cp.index for cp in exact_change_points([2, 2, 0, 0, 2])] == [2, 4]
    (cp,) = exact_change_points([3.0, 1.0])  # one run on each side is enough
    assert (cp.index, cp.before, cp.after, cp.kind, cp.p_value) == (1, 3.0, 1.0, "exact", None)
    # keys decide where they are given (an output hash, an op mix), the values are what is charted
    assert [cp.index for cp in exact_change_points([0, 0, 1], ["a", "b", "c"])] == [1, 2]
    assert exact_change_points([7, 7, 7]) == [] and exact_change_points([5]) == []


# ---- one sweep ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweeps_series_follow_its_releases(history, sweep):
    _, facts, _ = history
    series = _sweep_series(facts)
    assert series and all(s["labels"] == LABELS and s["runs"] == LABELS for s in series.values())
    assert all(s["axis"] == "sglang_release" for s in series.values())
    (listed,) = [s for s in facts["sweeps"] if s["sweep"] == SWEEP]
    assert [(p["position"], p["label"], p["status"]) for p in listed["points"]] == [
        (i, label, "complete") for i, label in enumerate(LABELS)]
    # the candidate's kernel counts per replay, from its traces: 2 softmax per draft-decode span
    # without the fast path (num_steps - 1), none with it
    assert series[("candidate", "kernels:DRAFT_DECODE:softmax")]["values"] == [0 if f else 2 for f in FAST_PATH]
    # the baseline's adopted trial is the same in every release
    assert len(set(series[("baseline", "kernels:DRAFT_DECODE:softmax")]["values"])) == 1
    # outputs: the micro engine's are the same bit for bit with and without the fast path
    outputs = series[("candidate", "output_hash")]
    rows = [json.loads(line) for line in (_profiled(sweep[0], "candidate") / "requests.jsonl").read_text().splitlines()]
    measured = sorted([r["index"], r["output_ids"]] for r in rows if not r["warmup"])
    expected = hashlib.sha256(json.dumps(measured, separators=(",", ":")).encode()).hexdigest()
    assert outputs["keys"] == [expected] * len(LABELS) and outputs["change_points"] == []
    assert series[("baseline", "output_hash")]["keys"] == outputs["keys"]
    # sweeps do not gate: the newest state of a nightly series does
    assert all(not s["gates"] for s in series.values()) and facts["gate"]["failing"] == []


@pytest.mark.slow
def test_the_exact_change_point_is_at_the_switch_and_nowhere_else(history):
    _, facts, _ = history
    series = _sweep_series(facts)
    changed = {key: s["change_points"] for key, s in series.items() if s["change_points"]}
    # exact series change exactly at the switch: 2 runs on each side, no test (E-divisive with
    # `--min-size 3` could not see it); op mixes are stable between runs of the same code
    assert changed == {("candidate", "kernels:DRAFT_DECODE:softmax"): [SWITCH],
                       ("candidate", "kernels:DRAFT_EXTEND:softmax"): [SWITCH],
                       ("candidate", "ops:DRAFT_DECODE"): [SWITCH]}
    assert all(series[key]["kind"] == "exact" for key in changed)
    assert {c["kind"] for c in facts["change_points"]} == {"exact"}
    assert {(c["label_before"], c["label_after"]) for c in facts["change_points"]} == {(LABELS[SWITCH - 1], LABELS[SWITCH])}


@pytest.mark.slow
def test_the_change_is_explained_by_the_ops_that_appeared_and_disappeared(history, sweep):
    _, facts, _ = history
    # three series changed between the same two runs: one explanation
    (explanation,) = facts["explanations"]
    assert {c["explanation"] for c in facts["change_points"]} == {explanation["id"]}
    assert sorted(explanation["series"]) == sorted(c["series"] for c in facts["change_points"])
    before, after = sweep[SWITCH - 1], sweep[SWITCH]
    assert explanation["variant"] == "candidate"
    assert (explanation["before"]["label"], explanation["after"]["label"]) == (LABELS[SWITCH - 1], LABELS[SWITCH])
    assert (explanation["before"]["path"], explanation["after"]["path"]) == (str(before), str(after))
    regions = {(r["region"], r["unit"]): r for r in explanation["regions"]}
    decode = regions[("DRAFT_DECODE", "span")]
    # the diff, op by op, against the counts per span read from the two traces
    old, new = _medians_from_trace(before, "DRAFT_DECODE"), _medians_from_trace(after, "DRAFT_DECODE")
    for kind, keep in (("disappeared", lambda b, a: b > 0 and a == 0), ("appeared", lambda b, a: b == 0 and a > 0),
                       ("changed", lambda b, a: 0 < b != a > 0)):
        expected = {(op, old.get(op, 0.0), new.get(op, 0.0)) for op in old.keys() | new.keys()
                    if keep(old.get(op, 0.0), new.get(op, 0.0))}
        assert {(e["op"], e["before"], e["after"]) for e in decode[kind]} == expected, kind
    assert [(e["op"], e["before"], e["after"]) for e in decode["disappeared"]] == [
        ("aten::softmax", 2, 0), ("aten::_softmax", 2, 0)]  # nested: each counted by its name
    assert not any(r["appeared"] or r["disappeared"] or r["changed"] for r in explanation["regions"]
                   if r["region"] in ("TARGET_VERIFY", "PREFILL"))
    times = decode["time_per_replay_us"]
    assert times["before"] > 0 and times["after"] > 0
    assert explanation["outputs"]["identical"] is True
    # what was not SGLang's: the adaptations; the torch that ran is the same
    assert explanation["environment_differs"] == [
        {"what": "adaptations", "before": '["cpu stand-ins"]', "after": '["cpu stand-ins", "spec-v2 port"]'}]
    sentence = explanation["sentence"]
    print(f"\nexplanation: {sentence}")
    assert sentence.startswith(f"Between SGLang {LABELS[SWITCH - 1]} and {LABELS[SWITCH]} ({before}, {after}), candidate: "
                               "DRAFT_DECODE per span: aten::softmax 2 -> 0, aten::_softmax 2 -> 0 disappeared; ")
    for e in decode["changed"]:
        assert f"{e['op']} " in sentence
    decode_time = re.search(r"DRAFT_DECODE per span: [^.]*; time per replay ([\d.]+) (µs|ms) -> ([\d.]+) (µs|ms) "
                            r"\(([+-]\d+)%\)\.", sentence)
    assert decode_time, sentence
    scale = {"µs": 1.0, "ms": 1000.0}
    assert float(decode_time[1]) * scale[decode_time[2]] == pytest.approx(times["before"], rel=0.01)
    assert float(decode_time[3]) * scale[decode_time[4]] == pytest.approx(times["after"], rel=0.01)
    assert int(decode_time[5]) == round(times["change"] * 100)
    assert 'Greedy outputs identical. Not only SGLang changed: adaptations ["cpu stand-ins"] -> ' \
           '["cpu stand-ins", "spec-v2 port"]. ' in sentence
    # how each change point it explains reads, by the scenario's rules (DRAFT_EXTEND's softmax: no rule)
    assert sentence.endswith("By the rules and metrics: kernels:DRAFT_DECODE:softmax 2 -> 0 (-100.0%, better) reads as "
                             "improvement (rule candidate_no_softmax); kernels:DRAFT_EXTEND:softmax 2 -> 0 (-100.0%) "
                             "reads as change (no rule on it)."), sentence


@pytest.mark.slow
def test_the_report_prints_each_change_point_and_its_explanation_once(history, tmp_path):
    database, facts, _ = history
    done = harness("history", "report", "--db", str(database), "--out", str(tmp_path), "--permutations", "199")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("  improvement ") or line.startswith("  change ") for line in lines) == 3
    (why,) = [line for line in lines if line.startswith("    why: ")]
    assert why == f"    why: {facts['explanations'][0]['sentence']}"
    assert lines.index(why) == 4  # after the three change points it explains


@pytest.mark.slow
def test_scenario_filter(history, tmp_path):
    database, facts, _ = history
    code, only = report(database, tmp_path, "--scenario", "micro_sweep")
    assert code == 0 and only["series"] == facts["series"] and only["scenarios"] == ["micro_sweep"]
    done = harness("history", "report", "--db", str(database), "--out", str(tmp_path), "--scenario", "nope")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "--scenario nope: no run of this scenario in the database (scenarios: micro_sweep)" in done.stderr


# ---- two sweeps of the same releases ---------------------------------------------------------------


@pytest.mark.slow
def test_two_sweeps_of_the_same_releases_are_series_of_their_own(sweep, second_sweep, tmp_path):
    database = tmp_path / "history.sqlite"
    assert harness("history", "ingest", str(sweep[0].parent), str(second_sweep[0].parent), "--db",
                   str(database)).returncode == 0
    code, facts = report(database, tmp_path / "history")
    second = "20260402-020000-micro_sweep"
    first, other = _sweep_series(facts), _sweep_series(facts, second)
    assert first.keys() == other.keys() and all(s["labels"] == LABELS for s in other.values())
    # the second sweep ran its releases newest first: its series still follow the releases
    assert [p["run"] for p in next(s for s in facts["sweeps"] if s["sweep"] == second)["points"]] == LABELS
    softmax = ("candidate", "kernels:DRAFT_DECODE:softmax")
    assert first[softmax]["change_points"] == [SWITCH] and other[softmax]["change_points"] == [1]
    assert other[softmax]["values"] == [2, 0, 0, 0]
    # the output change at the last release, explained as such (and not by the kernels)
    outputs = other[("candidate", "output_hash")]
    assert outputs["change_points"] == [3] and outputs["values"] == [0, 0, 0, 1]
    (cp,) = [c for c in facts["change_points"] if c["series"] == outputs["series"]]
    assert (cp["kind"], cp["regression"], cp["gates"], cp["label_before"], cp["label_after"]) == (
        "exact", False, False, "0.5.12", "0.5.13")
    explanation = next(e for e in facts["explanations"] if e["id"] == cp["explanation"])
    assert explanation["series"] == [outputs["series"]]
    assert explanation["outputs"]["identical"] is False
    assert not any(r["appeared"] or r["disappeared"] or r["changed"] for r in explanation["regions"])
    assert "No op count changed in any region: " in explanation["sentence"]
    assert f"Greedy outputs differ (sha256 {outputs['keys'][2][:12]} -> {outputs['keys'][3][:12]})." in explanation["sentence"]
    # each sweep's change points come with their own explanation
    assert len({c["explanation"] for c in facts["change_points"]}) == len(facts["explanations"]) == 3
    assert code == 0


# ---- the page ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_page_shows_the_sweep_its_change_point_and_the_explanation(browser, history, sweep):
    _, facts, html = history
    (explanation,) = facts["explanations"]
    page, requests, problems = open_report(browser, html)
    try:
        assert problems == [] and requests == [html.as_uri()]
        group = page.query_selector("h3.group")
        assert f"sweep {SWEEP} over 4 points, 0.5.10 … 0.5.13" in group.inner_text()
        charts = page.query_selector_all("#series figure svg")
        charted = [s for s in facts["series"] if s["kind"] == "noisy" or s["change_points"]]
        assert len(charts) == len(charted) > 0
        for svg in charts:  # the x axis is the releases
            labels = svg.evaluate("s => [...s.querySelectorAll('text')].map(t => t.textContent)")
            assert all(label in labels for label in LABELS), labels
        unchanged = page.inner_text("details.unchanged summary")
        assert unchanged == f"{len(facts['series']) - len(charted)} exact series never changed"
        # every change point links to the explanation, which is on the page
        whys = page.query_selector_all("#changes tbody tr td:last-child a")
        assert len(whys) == 3 and {a.get_attribute("href") for a in whys} == {f"#explain-{explanation['id']}"}
        box = page.query_selector(f"#explain-{explanation['id']}")
        assert explanation["sentence"] in box.inner_text()
        rows = {r.query_selector("td").inner_text(): r.inner_text() for r in box.query_selector_all("tbody tr")}
        assert "aten::softmax 2 → 0" in rows["DRAFT_DECODE"] and "aten::_softmax 2 → 0" in rows["DRAFT_DECODE"]
        # both runs' reports, by relative links that resolve from the page's folder
        links = box.query_selector_all("h4 a")
        assert [a.inner_text() for a in links] == [LABELS[SWITCH - 1], LABELS[SWITCH]]
        for link, run in zip(links, (sweep[SWITCH - 1], sweep[SWITCH])):
            href = link.get_attribute("href")
            assert not href.startswith("/") and (html.parent / href).resolve() == run / "index.html"
        links[1].click()
        page.wait_for_load_state()
        assert page.url == (sweep[SWITCH] / "index.html").as_uri()
    finally:
        page.close()


def test_the_page_shows_an_explanations_strings_as_text(browser, tmp_path):
    """Op names, releases, sweep names and environment facts come from run directories: hostile."""
    out = tmp_path / "page"
    run_dir = out / SCHEME
    run_dir.mkdir(parents=True)
    side = {"run": f"r{SCRIPT}", "run_key": "k", "label": f"0.5{SINGLE}", "point": "p", "position": 0,
            "sweep": f"s{ATTRIBUTE}", "axis": "sglang_release", "path": str(run_dir), "report": None,
            "sglang_version": None, "sglang_commit": None, "harness_commit": None}
    op = {"op": f"aten::{SCRIPT}", "before": 2, "after": 0, "before_detail": {"per_replay": 2, "range": [2, 2],
          "time_per_replay_us": 1.0}, "after_detail": {"per_replay": 0, "range": [0, 0], "time_per_replay_us": 0.0}}
    explanation = {
        "id": "e1", "variant": f"v{SINGLE}", "series": [f"series{SCRIPT}"], "before": side, "after": side,
        "op_counts": {"before": True, "after": True}, "outputs": {"before": None, "after": None, "identical": None},
        "regions": [{"region": f"R{ATTRIBUTE}", "unit": "span", "present": "both", "replays": {"before": 1, "after": 1},
                     "appeared": [], "disappeared": [op], "changed": [], "varied": [op],
                     "time_per_replay_us": {"before": 1.0, "after": 2.0, "change": 1.0}}],
        "environment_differs": [{"what": f"w{SCRIPT}", "before": ATTRIBUTE, "after": SINGLE}],
        "sentence": f"sentence {SCRIPT}{ATTRIBUTE}",
    }
    series = f"series{SCRIPT}"
    change = {"series": series, "scenario": f"scenario{SCRIPT}", "aa": False, "mode": "interleaved",
              "variant": f"v{SINGLE}", "metric": "ops:R", "hardware": "cpu", "sweep": f"s{ATTRIBUTE}",
              "label_before": f"0.5{SINGLE}", "label_after": f"0.6{SCRIPT}", "run": "b", "run_key": "k2",
              "started": None, "index": 1, "last_run_before": "a", "before": 2.0, "after": 0.0, "magnitude": -1.0,
              "p_value": None, "kind": "exact", "regression": False, "beyond_max_regression": False, "gates": False,
              "sglang_commit_before": None, "sglang_commit_after": None, "harness_commit_before": None,
              "harness_commit_after": None, "report": None, "report_before": None, "path": str(run_dir),
              "path_before": str(run_dir), "explanation": "e1"}
    facts = {
        "database": "sqlite:///x", "options": {"max_regression": 0.05}, "runs": {"complete": 2, "incomplete": 0, "damaged": 0},
        "run_list": [], "sweeps": [],
        "series": [{"series": series, "scenario": f"scenario{SCRIPT}", "aa": False, "mode": "interleaved",
                    "variant": f"v{SINGLE}", "metric": "ops:R", "label": f"ops{SCRIPT}", "unit": "ops", "worse": None,
                    "kind": "exact", "gates": False, "hardware": "cpu", "sweep": f"s{ATTRIBUTE}",
                    "axis": "sglang_release", "runs": ["a", "b"], "values": [2.0, 0.0],
                    "labels": [f"0.5{SINGLE}", f"0.6{SCRIPT}"], "keys": None, "change_points": [1],
                    "explanations": ["e1"]}],
        "change_points": [change], "explanations": [explanation],
        "gate": {"max_regression": 0.05, "verdict": "PASS", "failing": []},
    }
    hrefs = assert_page_inert(write_trend_page(facts, out), browser, [
        f"aten::{SCRIPT} 2 → 0", f"R{ATTRIBUTE}", f"sentence {SCRIPT}{ATTRIBUTE}", f"w{SCRIPT}", f"0.5{SINGLE}",
        f"s{ATTRIBUTE}", f"v{SINGLE}",
    ])
    assert f"./{SCHEME}/" in hrefs  # the run's directory (no report): a path, not a javascript: URL


# ---- the database: version 1 -> 3 ------------------------------------------------------------------


def _migrates_in_place(url: str, run: Path, out: Path) -> None:
    create_v1_database(url)
    old = read_run(run)
    insert_as_v1(url, old)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a migration cut short once: one column there already
        conn.execute(sa.text("ALTER TABLE runs ADD COLUMN sweep VARCHAR(255)"))
    engine.dispose()

    engine = db.open_database(url)
    assert db.schema_version(engine) == db.SCHEMA_VERSION == 4
    assert {"acks", "confirmations", "region_functions"} <= set(sa.inspect(engine).get_table_names())
    columns = {t: {c["name"] for c in sa.inspect(engine).get_columns(t)} for t in ("runs", "variants")}
    assert {"sweep", "sweep_axis", "sweep_point", "sweep_label", "sweep_position"} <= columns["runs"]
    assert {"output_hash", "outputs"} <= columns["variants"]
    counts = db.row_counts(engine)
    assert counts["runs"] == 1 and counts["kernel_counts"] == len(old.kernel_counts) > 0
    assert counts["op_counts"] == counts["region_times"] == 0
    with engine.connect() as conn:
        (stored,) = conn.execute(sa.select(db.runs)).mappings().all()
    assert (stored["run_key"], stored["fingerprint"], stored["sweep"]) == (old.key, "migrated-from-1", None)
    code, facts = report(url, out)  # a migrated database reports as it is
    assert code == 0 and facts["runs"]["complete"] == 1
    # the next ingest re-reads the run: now with its op counts, times, output hashes and sweep point
    (outcome,) = ingest(engine, find_run_dirs([run]))
    assert outcome.action == "updated"
    counts = db.row_counts(engine)
    assert counts["runs"] == 1 and counts["op_counts"] > 0 and counts["region_times"] > 0
    with engine.connect() as conn:
        stored = conn.execute(sa.select(db.runs.c.sweep, db.runs.c.sweep_label, db.runs.c.sweep_position)).one()
        hashes = conn.execute(sa.select(db.variants.c.output_hash)).scalars().all()
    assert tuple(stored) == (SWEEP, LABELS[0], 0) and len(hashes) == 2 and all(hashes)
    engine.dispose()


@pytest.mark.slow
def test_a_version_1_sqlite_database_is_migrated_in_place(sweep, tmp_path):
    _migrates_in_place(f"sqlite:///{tmp_path / 'v1.sqlite'}", sweep[0], tmp_path / "page")


@pytest.mark.slow
def test_a_version_1_postgresql_database_is_migrated_in_place(postgres, sweep, tmp_path):
    _migrates_in_place(postgres.create_database("history_v1"), sweep[0], tmp_path / "page")


def test_a_version_2_database_gets_the_functions_table_and_its_runs_are_read_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'v2.sqlite'}"
    engine = db.open_database(url)
    with engine.begin() as conn:  # a version-2 database: no region_functions, one run ingested
        conn.execute(sa.text("DROP TABLE region_functions"))
        conn.execute(db.meta.update().where(db.meta.c.key == "schema_version").values(value="2"))
        conn.execute(db.runs.insert().values(run_key="k", fingerprint="f", name="r", path="/r", status="complete",
                                             hardware="cpu", ingested_at="2026-01-01T00:00:00+00:00"))
    engine.dispose()
    engine = db.open_database(url)
    assert db.schema_version(engine) == db.SCHEMA_VERSION == 4
    assert "region_functions" in sa.inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.execute(sa.select(db.runs.c.fingerprint)).scalar_one() == "migrated-from-2"
    engine.dispose()


# ---- a run's sweep point and op tables are hostile data ----------------------------------------------


def test_a_runs_sweep_point_and_op_tables_are_read_as_hostile_data(tmp_path):
    from support.history_helpers import series_run

    run = series_run(tmp_path, 1, base_tpot=20.0, cand_tpot=15.0)
    info = json.loads((run / "run.json").read_text())
    point = {"sweep": "s", "axis": "sglang_release", "point": "0.5.1", "label": "0.5.1", "position": "first"}
    (run / "run.json").write_text(json.dumps({**info, "sweep": point}))
    record = read_run(run)
    assert record.status == "damaged" and record.reason.startswith("run.json: sweep.position: ")
    assert not record.op_counts and not record.region_times
    # a field run.json's model does not know is kept, not damage
    (run / "run.json").write_text(json.dumps({**info, "sweep": {**point, "position": 0, "newer": 1}}))
    record = read_run(run)
    assert record.status == "complete" and (record.sweep, record.sweep_label, record.sweep_position) == ("s", "0.5.1", 0)
    assert record.op_counts and record.region_times and record.run_json["sweep"]["newer"] == 1
    # the analysis document's models are closed: an unknown field is damage there, as for `harness check`
    analysis = json.loads((run / "analysis.json").read_text())
    trial, facts = next(iter(analysis["trials"].items()))
    facts["files"][0]["op_tables"][0]["newer"] = [1]
    (run / "analysis.json").write_text(json.dumps(analysis))
    record = read_run(run)
    assert (record.status, record.reason) == (
        "damaged", f"analysis.json: trials.{trial}.files.0.op_tables.0.newer: Extra inputs are not permitted")
    del facts["files"][0]["op_tables"][0]["newer"]
    facts["files"][0]["op_tables"][0]["total"] = []  # a column cut short
    (run / "analysis.json").write_text(json.dumps(analysis))
    record = read_run(run)
    assert record.status == "damaged"
    assert record.reason.startswith(f"analysis.json: trials.{trial}.files.0.op_tables.0: ")
    assert not record.op_counts and not record.region_times


def test_a_change_between_runs_without_op_counts_says_so(tmp_path):
    """Runs analysed before op tables existed: the explanation says the kernels cannot tell, and
    still gives the times per replay."""
    from support.history_helpers import series_run

    for i in range(1, 5):
        series_run(tmp_path, i, base_tpot=20.0, cand_tpot=15.0, cand_softmax=2 if i > 2 else 0, op_tables=i != 2)
    database = tmp_path / "history.sqlite"
    ingest(db.open_database(database), find_run_dirs([tmp_path / "runs"]))
    code, facts = report(database, tmp_path / "page")
    (cp,) = [c for c in facts["change_points"] if c["metric"] == "kernels:DRAFT_DECODE:softmax" and c["variant"] == "candidate"]
    explanation = next(e for e in facts["explanations"] if e["id"] == cp["explanation"])
    assert explanation["op_counts"] == {"before": False, "after": True}
    before = sorted((tmp_path / "runs").iterdir())[1].name
    assert (f"candidate: no op counts stored for {before} (no profiled trial, or analysed before op tables), so "
            "which ops changed is unknown.") in explanation["sentence"]
    assert "Time: DRAFT_DECODE (time per replay 500 µs -> 580 µs, +16%)" in explanation["sentence"]
    assert code == 1  # the softmax came back: a nightly series that gates


def test_what_was_not_sglangs_is_compared_and_the_rest_is_not():
    """The facts the two environment providers record (sglang_spec_harness.releases, sglang_spec_harness.sglang_cpu.releases):
    the harness's part of them is compared, what differs at every release by nature is not."""
    from sglang_spec_harness.history.explain import _harness_side, environment_differences

    def side(release: str, torch: str, adaptations: list[str]) -> dict[str, str]:
        environment = {"sglang": release, "python": "/venv/bin/python", "source_dir": f"/cache/sglang-{release}",
                       "built": {"seconds": 3.0}, "torch": {"pinned": "2.9.1", "used": torch, "own_pin": False},
                       "transformers": {"pinned": "4.57.1", "used": "4.57.1", "own_pin": True},
                       "adaptations": adaptations, "dependency_set": "torch-2.9", "note": release,
                       "pins": {"triton": {"pinned": "3.5.1", "used": "3.5.1"}}}
        run = {"harness_commit": "c0ffee", "sweep_label": release}
        return _harness_side(run, {"sweep": {"environment": environment}}, {"torch_version": "2.13.0+cpu"})

    assert environment_differences(side("0.5.12", "2.13.0", ["a"]), side("0.5.13", "2.13.0", ["a"])) == []
    assert environment_differences(side("0.5.12", "2.13.0", ["a"]), side("0.5.13", "2.9.1", ["a", "b"])) == [
        {"what": "adaptations", "before": '["a"]', "after": '["a", "b"]'},
        {"what": "torch", "before": "2.13.0", "after": "2.9.1"}]
