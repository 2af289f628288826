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
from support.bisect_demo import BROKEN, CLEAN, SOFTMAX_BACK, git, make_repo, same_file, server_pids, write_scenario
from support.proc_helpers import group_gone, process_gone

from sglang_spec_harness.bisect.reuse import stored_points, why_not_reusable
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import RunRecord, read_record
from sglang_spec_harness.scenario import load_scenario

pytestmark = pytest.mark.slow
REVISIONS = [CLEAN, CLEAN, SOFTMAX_BACK, BROKEN, SOFTMAX_BACK]
WARM = {"mode": "interleaved", "launches": 1, "repetitions": 2, "profiled": 1}


def sweep_command(scenario: Path, repo: Path, revisions: list[str], out: Path, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sglang_spec_harness.commands.cli", "sweep", str(scenario), "--source", str(repo),
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
        (["--set", "workload.output_len=none"], "with --set: workload.output_len: "),
    ]:
        done = subprocess.run(sweep_command(scenario, repo, hashes, tmp_path / "out", tmp_path / "h.sqlite", *extra),
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("harness sweep: ") and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "sweep", str(scenario)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give --sglang-releases A..B, or --source REPO --revisions REV..." in done.stderr
    assert not (tmp_path / "out").exists()


# ---- a bisection that reuses the sweep's points ------------------------------------------------------


def test_a_bisection_between_two_points_of_the_sweep_judges_them_from_its_runs_and_starts_no_server(swept, tmp_path):
    folder, hashes, repo = swept["folder"], swept["hashes"], swept["repo"]
    scenario = Path(swept["sweep"]["scenario_path"])
    stored = {p["point"]: Path(p["run_dir"]) for p in swept["sweep"]["points"]}
    results_before = {point: (run_dir / "results.json").read_bytes() for point, run_dir in stored.items()}
    done = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "bisect", str(scenario), "--source", str(repo),
                           "--good", hashes[0], "--bad", hashes[2], "--reuse", str(folder), "--out",
                           str(tmp_path / "out"), "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CI": "true"})
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["status"] == "found", (result["message"], done.stderr)
    assert result["first_bad"] == hashes[2]
    steps = result["steps"]
    assert [(s["commit"], s["mark"]) for s in steps] == [(hashes[2], "bad"), (hashes[1], "good")]
    for step in steps:
        source, run_dir = stored[step["commit"]], Path(step["run_dir"])
        assert step["reused_from"] == str(source) and f"(measured in {source})" in step["reason"]
        # the stored trials, linked, not measured again; the step's own rules and report
        (trace,) = run_dir.glob("trials/*-candidate-profiled/profile/*.json*")
        assert same_file(trace, source / trace.relative_to(run_dir))
        record = read_record(run_dir / "run.json", RunRecord)
        assert record.sweep is None and (run_dir / record.adopted_from).resolve() == source.resolve()
        assert (run_dir / "index.html").is_file()
        checked = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "check", str(run_dir)],
                                 capture_output=True, text=True, timeout=120)
        assert checked.returncode == (1 if step["mark"] == "bad" else 0), checked.stdout
    # no server, no baseline run, no worktree left; the sweep's own files untouched
    out = Path(result["out_dir"])
    assert not (out / "baseline").exists() and result["baseline_run_dir"] is None
    assert set(server_pids(out)) <= set(server_pids(folder))
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert {point: (run_dir / "results.json").read_bytes() for point, run_dir in stored.items()} == results_before


def test_a_stored_point_of_another_scenario_or_that_could_not_run_is_not_reused(swept, tmp_path):
    sweep = swept["sweep"]
    points = stored_points(swept["folder"])
    # the revision whose server could not start is not offered at all
    assert set(points) == {p["point"] for p in sweep["points"] if p["status"] == "ran"}
    stored = points[swept["hashes"][2]]
    needs = {("candidate", "profiled"), ("baseline", "profiled")}
    # a git point: the same commit checked out elsewhere (the bisection's own worktree) is the same code
    assert stored.worktree is not None
    elsewhere = Path("/elsewhere/07-abc")
    ours = load_scenario(stored.run_dir / "scenario.yaml")
    spec = ours.variants["candidate"]
    moved = spec.model_copy(update={"pythonpath": [p.replace(stored.worktree, str(elsewhere)) for p in spec.pythonpath]})
    ours = ours.model_copy(update={"variants": {**ours.variants, "candidate": moved}})
    assert why_not_reusable(stored, ours, "candidate", needs, elsewhere)[1] == ""
    assert why_not_reusable(stored, ours, "candidate", needs)[1] == \
        "it ran another scenario (variants.candidate.description, variants.candidate.pythonpath differ)"
    # the rules and the seed may differ; what the trials measured may not
    same = ours.model_copy(update={"rules": ours.rules[:1], "name": "renamed",
                                   "trials": ours.trials.model_copy(update={"seed": 12345})})
    assert why_not_reusable(stored, same, "candidate", needs, elsewhere)[1] == ""
    longer = ours.model_copy(update={"workload": ours.workload.model_copy(update={"output_len": 32})})
    assert why_not_reusable(stored, longer, "candidate", needs, elsewhere) == \
        (None, "it ran another scenario (workload.output_len differ)")
    assert why_not_reusable(stored, ours, "candidate", needs | {("other", "profiled")}, elsewhere)[1] == \
        "it has no other profiled trials, which the rules read"
    with pytest.raises(HarnessInputError, match=r"--reuse .*: no sweep.json there"):
        stored_points(tmp_path)
    (tmp_path / "sweep.json").write_text('{"points": 3}')
    with pytest.raises(HarnessInputError, match=r"sweep.json: expected an object with a `points` list"):
        stored_points(tmp_path)
