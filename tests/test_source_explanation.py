"""`harness sweep --source REPO --revisions A B` over a repository whose second commit changes one
function that the micro engine runs in its draft, among unrelated changes (a function of the same
file that never runs, a comment-and-spaces edit of a function that runs there, another file): the
change point's explanation names that function first, with its hunk, from the with_stack traces and
the repository's trees; sweep.json carries it and the trend page shows it. Hostile source on the page
is text. (The functions themselves, source read as hostile data and the ranking: test_source_changes.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.escaping import ATTRIBUTE, SCRIPT, SINGLE, assert_page_inert
from support.planted_source import CHOOSE_HUNK, git, make_planted_repo, write_planted_scenario

from sglang_spec_harness.history.page import write_trend_page


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    repo, hashes = make_planted_repo(root)
    scenario = write_planted_scenario(root, repo)
    out = root / "out"
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "sweep", str(scenario),
                           "--source", str(repo), "--revisions", *hashes, "--out", str(out),
                           "--db", str(root / "history.sqlite")],
                          cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return {"done": done, "repo": repo, "hashes": hashes, "folder": folder,
            "sweep": json.loads((folder / "sweep.json").read_text())}


@pytest.mark.slow
def test_the_explanation_names_the_planted_function_first_with_its_hunk(planted):
    done, sweep, hashes = planted["done"], planted["sweep"], planted["hashes"]
    assert done.returncode == 0, done.stdout + done.stderr
    changes = [c for c in sweep["history"]["change_points"] if c["metric"] == "kernels:DRAFT_DECODE:softmax"]
    assert [(c["before"], c["after"] > 0) for c in changes] == [(0, True)]
    (explanation,) = [e for e in sweep["history"]["explanations"] if e["id"] == changes[0]["explanation"]]
    source = explanation["source"]
    assert source["basis"] == "changed regions" and "DRAFT_DECODE" in source["regions"]
    assert source["trees"] == {"before": f"{hashes[0][:12]} of {planted['repo']}", "after": f"{hashes[1][:12]} of {planted['repo']}"}
    first = source["changed"][0]
    assert (first["rank"], first["file"], first["function"], first["status"]) == (1, "planted/selection.py", "choose", "changed")
    assert (first["path_before"], first["line_before"], first["path_after"], first["line_after"]) == (
        "python/planted/selection.py", 12, "python/planted/selection.py", 13)
    assert (first["added"], first["removed"], first["focus"]) == (2, 1, True) and "DRAFT_DECODE" in first["regions"]
    assert first["calls"]["before"] > 0 and first["calls"]["after"] > 0
    assert first["hunk"] == (f"--- {hashes[0][:12]}:python/planted/selection.py\n"
                             f"+++ {hashes[1][:12]}:python/planted/selection.py\n{CHOOSE_HUNK}")
    # the unrelated changes are not the explanation: `rows_of` ran there but only its spaces and a
    # comment changed, `never_runs` and unrelated.py never ran, hooks.py ran outside every region
    assert [c["function"] for c in source["changed"]] == ["choose"]
    assert source["unchanged"] >= 1 and source["notes"] == []
    assert "and changed (1 of " in explanation["sentence"]
    assert "planted/selection.py:choose (+2 -1 lines)" in explanation["sentence"]


@pytest.mark.slow
def test_the_trend_page_shows_the_hunk(planted, browser):
    page = browser.new_page()
    try:
        page.goto((planted["folder"] / "index.html").as_uri())
        (box,) = page.query_selector_all("details.function")
        assert box.get_attribute("open") is not None  # the top one open, the rest collapsed
        summary = box.query_selector("summary").inner_text()
        assert summary.startswith("1. planted/selection.py:choose · changed · +2 −1 lines")
        assert box.query_selector("pre.hunk").inner_text().strip().endswith(CHOOSE_HUNK.splitlines()[-1])
        added = [s.inner_text() for s in box.query_selector_all("pre.hunk .add")]
        assert added == ["+    # planted: the draft always takes the softmax path", "+    return _select(logits, topk, False)"]
    finally:
        page.close()
    assert git(planted["repo"], "status", "--porcelain") == ""


def test_source_on_the_page_is_text(browser, tmp_path):
    """A function's name, its file and its hunk come from the code under test: hostile."""
    side = {"run": "r", "run_key": "k", "label": "0.5", "point": "p", "position": 0, "sweep": "s",
            "axis": "sglang_release", "path": str(tmp_path), "report": None, "sglang_version": None,
            "sglang_commit": None, "harness_commit": None}
    hunk = f"--- a\n+++ b\n@@ -1,2 +1,2 @@ def f{SINGLE}():\n-    x = '{SCRIPT}'\n+    x = '{ATTRIBUTE}'"
    changed = {"rank": 1, "file": f"pkg/{SCRIPT}.py", "function": f"f{SINGLE}", "status": "changed",
               "path_before": f"{ATTRIBUTE}.py", "path_after": "b.py", "line_before": 1, "line_after": 1,
               "added": 1, "removed": 1, "regions": ["DRAFT_DECODE"], "calls": {"before": 1, "after": 1},
               "time_us": {"before": 1.0, "after": 1.0}, "hunk": hunk, "hunk_lines_left_out": 0, "focus": True}
    source = {"basis": "changed regions", "regions": ["DRAFT_DECODE"], "trees": {"before": f"t{SCRIPT}", "after": "t"},
              "stacks": {"before": True, "after": True}, "complete": True, "compared": 1, "unchanged": 0,
              "other_packages": 0, "changed": [changed], "changed_left_out": 0,
              "harness": [{"file": f"sglang_spec_harness/{SINGLE}.py", "function": "g", "line": 1,
                           "regions": ["DRAFT_DECODE"], "calls": {"before": 1, "after": 0}, "ran": "before only"}],
              "harness_left_out": 0, "notes": [f"x.py: does not parse {SCRIPT}"]}
    explanation = {"id": "e1", "variant": "candidate", "series": ["s1"], "before": side, "after": side,
                   "op_counts": {"before": True, "after": True},
                   "outputs": {"before": None, "after": None, "identical": None}, "regions": [],
                   "environment_differs": [], "sentence": "why", "source": source}
    series = {"series": "s1", "scenario": "sc", "aa": False, "mode": "interleaved", "variant": "candidate",
              "metric": "ops:DRAFT_DECODE", "label": "ops", "unit": "ops", "worse": None, "kind": "exact",
              "gates": False, "hardware": "cpu", "sweep": "s", "axis": "sglang_release", "runs": ["a", "b"],
              "values": [1.0, 2.0], "labels": ["0.5", "0.6"], "keys": None, "change_points": [1], "explanations": ["e1"]}
    change = {"series": "s1", "scenario": "sc", "aa": False, "mode": "interleaved", "variant": "candidate",
              "metric": "ops:DRAFT_DECODE", "hardware": "cpu", "sweep": "s", "label_before": "0.5", "label_after": "0.6",
              "run": "b", "run_key": "k2", "started": None, "index": 1, "last_run_before": "a", "before": 1.0,
              "after": 2.0, "magnitude": 1.0, "p_value": None, "kind": "exact", "regression": False,
              "beyond_max_regression": False, "gates": False, "sglang_commit_before": None, "sglang_commit_after": None,
              "harness_commit_before": None, "harness_commit_after": None, "report": None, "report_before": None,
              "path": str(tmp_path), "path_before": str(tmp_path), "explanation": "e1"}
    facts = {"database": "sqlite:///x", "options": {"max_regression": 0.05},
             "runs": {"complete": 2, "incomplete": 0, "damaged": 0}, "run_list": [], "sweeps": [],
             "series": [series], "change_points": [change], "explanations": [explanation],
             "gate": {"max_regression": 0.05, "verdict": "PASS", "failing": []}}
    assert_page_inert(write_trend_page(facts, tmp_path / "page"), browser, [
        f"pkg/{SCRIPT}.py:f{SINGLE}", f"-    x = '{SCRIPT}'", f"+    x = '{ATTRIBUTE}'", f"def f{SINGLE}():",
        f"sglang_spec_harness/{SINGLE}.py:g", f"x.py: does not parse {SCRIPT}", f"t{SCRIPT}"])


@pytest.mark.slow
def test_analyze_run_dir_recomputes_the_functions_of_a_run_analysed_before_them(planted, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(planted["sweep"]["points"][1]["run_dir"], run)
    stored = json.loads((run / "analysis.json").read_text())
    (trial,) = [name for name in stored["trials"] if "-candidate-profiled" in name]
    functions = stored["trials"][trial]["files"][0]["region_functions"]
    decode = next(t for t in functions if t["region"] == "DRAFT_DECODE")
    assert "planted/selection.py" in decode["file"] and decode["complete"]
    for name in stored["trials"]:  # as analysis.json was before the functions were recorded
        for part in [*stored["trials"][name]["files"], stored["trials"][name]["combined"]]:
            del part["region_functions"]
    (run / "analysis.json").write_text(json.dumps(stored))
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "analyze", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    again = json.loads((run / "analysis.json").read_text())
    assert again["trials"][trial]["files"][0]["region_functions"] == functions


def _strip_functions(run_dir) -> None:
    """analysis.json as a harness before the functions per region wrote it."""
    path = run_dir / "analysis.json"
    stored = json.loads(path.read_text())
    for trial in stored["trials"].values():
        for part in [*trial["files"], trial["combined"]]:
            part.pop("region_functions", None)
    path.write_text(json.dumps(stored))


@pytest.mark.slow
def test_a_stored_sweep_is_explained_again_after_the_fact(planted, tmp_path):
    """`harness history explain SWEEP_DIR`: a copy of the sweep (another folder name), its runs analysed
    before the functions were stored: they are analysed again from their traces, and the change point
    names the planted function first with its hunk, as the sweep itself did."""
    import shutil

    copy = tmp_path / "copied-sweep"
    shutil.copytree(planted["folder"], copy)
    runs = sorted(p.parent for p in copy.rglob("run.json"))
    for run in runs:
        _strip_functions(run)
    out = tmp_path / "explanations.json"
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "history", "explain", str(copy),
                           "--out", str(out), "--page", str(tmp_path / "page")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    assert sorted(document["analysed_again"]) == sorted(r.name for r in runs if r.name != "baseline")
    assert document["sweep"] == planted["folder"].name and len(document["points"]) == 2
    hashes = planted["hashes"]
    (softmax,) = [c for c in document["change_points"] if c["metric"] == "kernels:DRAFT_DECODE:softmax"]
    (explanation,) = [e for e in document["explanations"] if e["id"] == softmax["explanation"]]
    first = explanation["source"]["changed"][0]
    assert (first["rank"], first["file"], first["function"]) == (1, "planted/selection.py", "choose")
    assert first["hunk"] == (f"--- {hashes[0][:12]}:python/planted/selection.py\n"
                             f"+++ {hashes[1][:12]}:python/planted/selection.py\n{CHOOSE_HUNK}")
    original = next(e for e in planted["sweep"]["history"]["explanations"] if e["id"] == explanation["id"])
    assert explanation["source"] == original["source"]
    assert explanation["sentence"] == original["sentence"].replace(str(planted["folder"]), str(copy))  # its runs' paths
    assert "planted/selection.py:choose (+2 -1 lines)" in done.stdout
    assert (tmp_path / "page" / "index.html").is_file()
    # a second time nothing is analysed again: the functions are stored now
    again = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "history", "explain", str(copy),
                            "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and json.loads(out.read_text())["analysed_again"] == []


def test_explain_refuses_a_folder_that_is_no_sweep_in_one_line(tmp_path):
    (tmp_path / "sweep.json").write_text("{not json")
    for folder in (tmp_path, tmp_path / "nowhere"):
        done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "history", "explain",
                               str(folder)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "sweep.json" in done.stderr


@pytest.mark.slow
def test_a_trace_that_cannot_be_analysed_again_keeps_its_runs_analysis(planted, tmp_path):
    import shutil

    copy = tmp_path / "sweep"
    shutil.copytree(planted["folder"], copy)
    point = next(p.parent for p in (copy / "points").rglob("run.json"))
    _strip_functions(point)
    kept = (point / "analysis.json").read_text()
    (trace,) = point.glob("trials/*-candidate-profiled/profile/*.trace.json*")
    trace.write_bytes(trace.read_bytes()[:200])  # cut short: no longer a trace
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "history", "explain", str(copy),
                           "--out", str(tmp_path / "e.json")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "could not be analysed again" in done.stdout and "its analysis.json is kept" in done.stdout
    assert (point / "analysis.json").read_text() == kept
    assert point.name not in json.loads((tmp_path / "e.json").read_text())["analysed_again"]
