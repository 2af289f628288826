"""`harness sweep` end to end over the revisions of a real git repository, with micro servers on
loopback: a point per revision, the baseline once, a revision whose server cannot start gets its line
and the sweep goes on, and the change point where the softmax comes back is explained by the ops
that appeared, with the counts the traces hold. (The same command over SGLang's releases, with the
real server, is in tests/test_sglang_cpu_sweep.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bisect_demo import BROKEN, CLEAN, SOFTMAX_BACK, git, make_repo, server_pids, write_scenario
from proc_helpers import group_gone, process_gone

from harness.rundir import RunRecord, read_record

pytestmark = pytest.mark.slow
REVISIONS = [CLEAN, CLEAN, SOFTMAX_BACK, BROKEN, SOFTMAX_BACK]
WARM = {"mode": "interleaved", "launches": 1, "repetitions": 2, "profiled": 1}


def sweep_command(scenario: Path, repo: Path, revisions: list[str], out: Path, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness.commands.cli", "sweep", str(scenario), "--source", str(repo),
            "--revisions", *revisions, "--out", str(out), "--db", str(db), *extra]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    repo, hashes = make_repo(root, REVISIONS)
    scenario = write_scenario(root, repo, trials=WARM)
    out, db = root / "out", root / "history.sqlite"
    done = subprocess.run(sweep_command(scenario, repo, hashes, out, db), cwd=root, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "CI": "true"})
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return {"done": done, "repo": repo, "hashes": hashes, "folder": folder,
            "sweep": json.loads((folder / "sweep.json").read_text())}


def test_every_revision_is_a_point_and_one_that_cannot_start_gets_its_line(swept):
    done, sweep, hashes = swept["done"], swept["sweep"], swept["hashes"]
    assert done.returncode == 0, done.stdout + done.stderr
    points = sweep["points"]
    assert [p["point"] for p in points] == hashes and [p["position"] for p in points] == list(range(len(hashes)))
    assert [(p["status"], p["verdict"]) for p in points] == [
        ("ran", "PASS"), ("ran", "PASS"), ("ran", "FAIL"), ("cannot run", "INCONCLUSIVE"), ("ran", "FAIL")]
    broken = points[3]
    # the server's own last error line, printed as the point's line, and the sweep went on
    assert "ImportError: revision 3 is broken" in broken["reason"]
    assert f"{broken['label']}: cannot run: " in done.stdout and "ImportError: revision 3 is broken" in done.stdout
    assert sweep["could_not_run"] == [{"point": broken["label"], "why": broken["reason"]}]
    assert sweep["status"] == "done" and sweep["ran"] == [points[i]["label"] for i in (0, 1, 2, 4)]


def test_each_point_is_an_ordinary_run_with_its_sweep_place_and_the_baseline_adopted(swept):
    folder, sweep = swept["folder"], swept["sweep"]
    baseline = folder / "baseline"
    for point in sweep["points"]:
        run_dir = Path(point["run_dir"])
        record = read_record(run_dir / "run.json", RunRecord)
        assert record.sweep is not None and record.sweep.sweep == folder.name
        assert (record.sweep.point, record.sweep.position, record.sweep.axis) == (point["point"], point["position"], "git_revision")
        assert (run_dir / "index.html").is_file() and (run_dir / "results.json").is_file()
        if point["status"] == "ran":
            # the candidate's timed blocks and profiled pass of its own; the baseline's profiled pass adopted
            kinds = sorted((e.variant, e.kind) for e in record.plan)
            assert kinds == [("baseline", "profiled"), ("candidate", "profiled"), ("candidate", "timed"),
                             ("candidate", "timed")]
            assert record.adopted_from is not None and (run_dir / record.adopted_from).resolve() == baseline.resolve()
            assert point["numbers"]["tpot_ms"] > 0 and point["numbers"]["accept_length"] > 1


def test_the_change_point_is_where_the_softmax_came_back_and_its_explanation_comes_from_the_traces(swept):
    sweep, points = swept["sweep"], swept["sweep"]["points"]
    changes = [c for c in sweep["history"]["change_points"] if c["metric"] == "kernels:DRAFT_DECODE:softmax"]
    assert [(c["label_before"], c["label_after"], c["kind"]) for c in changes] == [
        (points[1]["label"], points[2]["label"], "exact")]
    # the count per replay the explanation gives is the trace analysis' own
    analysis = json.loads((Path(points[2]["run_dir"]) / "analysis.json").read_text())
    (trial,) = [t for name, t in analysis["trials"].items() if "-candidate-profiled" in name]
    per_replay = trial["files"][0]["regions"]["DRAFT_DECODE"]["counts"]["softmax"]["per_replay_median"]
    assert per_replay >= 1
    (explanation,) = [e for e in sweep["history"]["explanations"] if e["id"] == changes[0]["explanation"]]
    decode = next(r for r in explanation["regions"] if r["region"] == "DRAFT_DECODE")
    appeared = {op["op"]: (op["before"], op["after"]) for op in decode["appeared"]}
    assert appeared["aten::softmax"] == (0, per_replay)
    assert f"aten::softmax 0 -> {per_replay:g}" in explanation["sentence"]
    assert explanation["before"]["label"] == points[1]["label"] and explanation["after"]["label"] == points[2]["label"]
    # no change point at the revision that could not run: the series has a gap there, not a zero
    assert all(c["label_after"] != points[3]["label"] for c in sweep["history"]["change_points"])


def test_the_sweep_page_shows_the_explanation_and_every_point(swept):
    folder, sweep = swept["folder"], swept["sweep"]
    page = (folder / "index.html").read_text()
    explanation = sweep["history"]["explanations"][0]
    assert explanation["sentence"].split(":")[0] in page
    for point in sweep["points"]:
        assert point["label"] in page
    # the revision whose server could not start: its run is incomplete, with the server's error
    assert "incomplete" in page and "revision 3 is broken" in page


def test_nothing_is_left_behind(swept):
    repo, folder = swept["repo"], swept["folder"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == ""
    pids = server_pids(folder)
    assert pids and all(process_gone(pid) and group_gone(pid) for pid in pids)


def test_a_sweep_over_releases_refuses_a_statistical_rule_and_bad_input_before_anything_starts(tmp_path):
    repo, hashes = make_repo(tmp_path, [CLEAN, CLEAN])
    scenario = write_scenario(tmp_path, repo, trials=WARM)
    for extra, message in [
        (["--rule", "faster"], "a sweep judges each point by exact rules"),
        (["--rule", "nope"], "--rule nope: no such rule"),
        (["--variant", "other"], "--variant other: no such variant"),
    ]:
        done = subprocess.run(sweep_command(scenario, repo, hashes, tmp_path / "out", tmp_path / "h.sqlite", *extra),
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("harness sweep: ") and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run([sys.executable, "-m", "harness.commands.cli", "sweep", str(scenario)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give --sglang-releases A..B, or --source REPO --revisions REV..." in done.stderr
    assert not (tmp_path / "out").exists()
