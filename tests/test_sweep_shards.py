"""A sweep spread over runners: `harness sweep baseline`, then `--shard I/N --baseline-from` on each
"runner", then `harness sweep merge`, over the revisions of a real git repository with micro servers
on loopback, against the same sweep run whole. The merged sweep.json must say what the whole one says,
field by field (the series, the change points and their explanations, the points' verdicts and
numbers), apart from what is each run's own (times, paths, run keys). And the refusals: a bad
`--shard`, a baseline of another sweep, shards of different sweeps, overlapping or missing shards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.bisect_demo import CLEAN, SOFTMAX_BACK, make_repo, same_file, write_scenario

from sglang_spec_harness.rundir import RunRecord, read_record

# The module's fixture runs the same sweep twice (whole, then a baseline step, two shards and a merge):
# twice a sweep test's time, 303 s alone on the loaded 2-core VM, past pytest's 300 s default.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
REVISIONS = [CLEAN, CLEAN, SOFTMAX_BACK, SOFTMAX_BACK]  # the softmax comes back between shard 2's point and shard 1's
TRIALS = {"mode": "interleaved", "launches": 1, "repetitions": 1, "profiled": 1}
# One seed for both sweeps, so that even the scenario's hash is the same (a sweep draws one otherwise).
SEED = ["--set", "trials.seed=7"]
# What is each run's own: when, where, how long, and the timings; the rest must be the same.
PER_RUN = {"run_key", "run_keys", "run_key_before", "run_key_after", "started", "path", "path_before", "report",
           "report_before", "time_per_replay_us", "sentence",
           "worktree", "seconds", "tpot_ms", "harness_commit_before", "harness_commit_after"}
PARTS = {"name", "part", "out_dir", "baseline_run_dir", "wall_s", "baseline", "shards", "history", "points"}


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "CI": "true"})


def one_folder(out: Path, suffix: str = "") -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name.endswith(suffix)]
    return folder


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("shards")
    repo, hashes = make_repo(root, REVISIONS)
    scenario = write_scenario(root, repo, trials=TRIALS)
    data = yaml.safe_load(scenario.read_text())
    data["workload"]["concurrency"] = 1  # one request at a time: the same prefill spans in every run
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    points = [str(scenario), "--source", str(repo), "--revisions", *hashes, *SEED]
    whole = harness("sweep", *points, "--out", str(root / "whole"), "--db", str(root / "whole.sqlite"), cwd=root)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    baseline = harness("sweep", "baseline", *points, "--out", str(root / "sharded"), cwd=root)
    assert baseline.returncode == 0, baseline.stdout[-3000:] + baseline.stderr[-3000:]
    baseline_folder = one_folder(root / "sharded", "-baseline")
    shards = []
    for index in (1, 2):
        done = harness("sweep", *points, "--shard", f"{index}/2", "--baseline-from", str(baseline_folder), "--out",
                       str(root / "sharded"), cwd=root)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        shards.append(one_folder(root / "sharded", f"-shard-{index}-of-2"))
    merged = harness("sweep", "merge", *map(str, shards), "--out", str(root / "merged"), "--db",
                     str(root / "merged.sqlite"), cwd=root)
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    whole_folder = one_folder(root / "whole")
    return {"root": root, "repo": repo, "hashes": hashes, "scenario": scenario, "points": points,
            "whole": json.loads((whole_folder / "sweep.json").read_text()), "whole_folder": whole_folder,
            "baseline": baseline_folder, "shards": shards, "merged_folder": root / "merged", "merge_output": merged,
            "merged": json.loads((root / "merged" / "sweep.json").read_text())}


def comparable(value: Any, names: list[str]) -> Any:
    """`value` without what is each run's own, the sweep's names and folders written as <sweep>."""
    if isinstance(value, dict):
        out = {k: comparable(v, names) for k, v in value.items() if k not in PER_RUN}
        if out.get("kind") == "noisy" and "values" in out:  # a timing series: where it has a value, not which
            out["values"] = [v is None for v in value["values"]]
        if "run_dir" in out and isinstance(out["run_dir"], str):
            out["run_dir"] = Path(out["run_dir"]).name
        return out
    if isinstance(value, list):
        items = [comparable(v, names) for v in value]
        # an explanation lists the ops of a kind by their time per replay: compare them by name
        return sorted(items, key=lambda op: op["op"]) if items and all(isinstance(i, dict) and "op" in i for i in items) \
            else items
    if isinstance(value, str):
        for name in names:
            value = value.replace(name, "<sweep>")
    return value


def test_the_merged_sweep_is_the_whole_sweep_field_by_field(sweeps):
    whole, merged = sweeps["whole"], sweeps["merged"]
    names = [whole["name"], merged["name"]]
    assert merged["part"] == "merged" and whole["part"] == "whole" and merged["name"] != whole["name"]
    # the request, the rules, the notes, the scenario as run (its hash: the same seed), the outcome
    assert {k: v for k, v in merged.items() if k not in PARTS} == {k: v for k, v in whole.items() if k not in PARTS}
    assert merged["status"] == "done" and merged["exit_code"] == 0 and merged["missing_shards"] == []
    # every point: the same verdict, reason, counts per replay, accept length and output hash
    assert [(p["label"], p["status"], p["verdict"]) for p in merged["points"]] == [
        (p["label"], "ran", v) for p, v in zip(whole["points"], ["PASS", "PASS", "FAIL", "FAIL"], strict=True)]
    assert comparable(merged["points"], names) == comparable(whole["points"], names)
    # the series (the exact ones value by value), the change points and their explanations
    for key in ("series", "change_points", "explanations"):
        assert comparable(merged["history"][key], names) == comparable(whole["history"][key], names), key
    changes = [(c["metric"], c["label_before"], c["label_after"]) for c in merged["history"]["change_points"]
               if c["metric"].startswith("kernels:")]
    labels = [p["label"] for p in merged["points"]]
    assert changes == [("kernels:DRAFT_DECODE:softmax", labels[1], labels[2]),
                       ("kernels:DRAFT_EXTEND:softmax", labels[1], labels[2])]
    # a timing series holds each point's own measurement, from the shard that ran it
    (tpot,) = [s for s in merged["history"]["series"] if s["variant"] == "candidate" and s["metric"] == "tpot_ms"]
    assert [round(v, 4) for v in tpot["values"]] == [p["numbers"]["tpot_ms"] for p in merged["points"]]


def test_each_shard_ran_its_share_on_the_one_baseline_run_and_left_the_history_to_the_merge(sweeps):
    baseline = json.loads((sweeps["baseline"] / "sweep.json").read_text())
    assert baseline["part"] == "baseline" and baseline["status"] == "done" and baseline["exit_code"] == 0
    assert [p["status"] for p in baseline["points"]] == ["pending"] * 4 and sweeps["baseline"].name == (
        f"{baseline['name']}-baseline")
    traces = sorted((sweeps["baseline"] / "baseline").rglob("*.json*"))
    assert traces
    for index, folder in enumerate(sweeps["shards"], start=1):
        shard = json.loads((folder / "sweep.json").read_text())
        assert shard["part"] == "shard" and shard["name"] == baseline["name"] and shard["history"] is None
        assert (shard["shard"]["index"], shard["shard"]["count"]) == (index, 2)
        assert shard["shard"]["sweep_points"] == [{k: p[k] for k in ("position", "point", "label")}
                                                  for p in baseline["points"]]
        assert [p["position"] for p in shard["points"]] == [index - 1, index + 1]  # round robin
        assert shard["baseline"]["id"] == baseline["baseline"]["id"] and shard["seed"] == baseline["seed"] == 7
        # the baseline step's run, linked: the same files
        assert all(same_file(t, folder / "baseline" / t.relative_to(sweeps["baseline"] / "baseline")) for t in traces)
        assert not (folder / "index.html").exists()
    assert not (sweeps["root"] / "reports").exists()  # no shard opened the default history database


def test_each_merged_point_is_an_ordinary_run_of_the_one_sweep(sweeps, tmp_path):
    merged, folder = sweeps["merged"], sweeps["merged_folder"]
    for point, shard in zip(merged["points"], [0, 1, 0, 1], strict=True):
        run_dir = Path(point["run_dir"])
        assert run_dir.parent == folder / "points"
        record = read_record(run_dir / "run.json", RunRecord)
        assert record.sweep is not None and (record.sweep.sweep, record.sweep.position) == (merged["name"], point["position"])
        assert record.adopted_from is not None and (run_dir / record.adopted_from).resolve() == folder / "baseline"
        # hard links to the shard's run
        assert same_file(run_dir / "run.json", sweeps["shards"][shard] / "points" / run_dir.name / "run.json")
        checked = harness("check", str(run_dir), cwd=tmp_path)
        assert checked.returncode == {"PASS": 0, "FAIL": 1}[point["verdict"]], checked.stdout
    reported = harness("report", merged["points"][2]["run_dir"], cwd=tmp_path)
    assert reported.returncode == 0 and "index.html" in reported.stdout, reported.stdout + reported.stderr
    ingested = harness("history", "ingest", str(folder / "points"), "--db", str(tmp_path / "again.sqlite"), cwd=tmp_path)
    assert ingested.returncode == 0 and "4 complete" in ingested.stdout, ingested.stdout + ingested.stderr
    page = (folder / "index.html").read_text()
    assert all(p["label"] in page for p in merged["points"]) and "aten::softmax" in page
    assert [s["index"] for s in merged["shards"]] == [1, 2] and merged["baseline"]["from"] == sweeps["baseline"].name
    assert f"merge {merged['name']}: 2 of 2 shard(s), 4 point(s)" in sweeps["merge_output"].stdout


def test_a_partial_merge_makes_the_missing_shards_points_gaps(sweeps, tmp_path):
    done = harness("sweep", "merge", str(sweeps["shards"][0]), "--partial", "--out", str(tmp_path / "partial"),
                   "--db", str(tmp_path / "partial.sqlite"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    merged = json.loads(done.stdout)
    assert merged["missing_shards"] == [2] and merged["status"] == "done" and "not merged: shard 2" in merged["message"]
    assert [(p["position"], p["status"]) for p in merged["points"]] == [
        (0, "ran"), (1, "cannot run"), (2, "ran"), (3, "cannot run")]
    assert merged["points"][1]["reason"] == "shard 2 of 2 was not merged (--partial)"
    (series,) = [s for s in merged["history"]["series"]
                 if s["variant"] == "candidate" and s["metric"] == "kernels:DRAFT_DECODE:softmax"]
    labels = [p["label"] for p in merged["points"]]
    assert series["labels"] == [labels[0], labels[2]] and series["values"] == [0.0, 2.0]


# ---- refusals: one line, exit 2, nothing written ---------------------------------------------------


def refused(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr


@pytest.mark.parametrize("shard", ["0/2", "3/2", "1/0", "a/b", "1-2", "1/2/3"])
def test_a_bad_shard_is_refused_before_anything_starts(sweeps, tmp_path, shard):
    done = harness("sweep", *sweeps["points"], "--shard", shard, "--baseline-from", str(sweeps["baseline"]),
                   "--out", str(tmp_path / "out"), cwd=tmp_path)
    refused(done, f"harness sweep: --shard {shard}: expected I/N with 1 <= I <= N (e.g. 1/2)")
    assert not (tmp_path / "out").exists()


def test_a_shard_needs_the_baseline_of_its_own_sweep(sweeps, tmp_path):
    points, baseline, out = sweeps["points"], str(sweeps["baseline"]), str(tmp_path / "out")
    cases = [
        (["--shard", "1/2"], "--shard 1/2: needs --baseline-from FOLDER"),
        (["--baseline-from", baseline], "--baseline-from: only with --shard I/N"),
        (["--shard", "1/2", "--baseline-from", baseline, "--db", str(tmp_path / "h.sqlite")],
         "--db: a shard's points go into the history database when the shards are merged"),
        (["--shard", "1/2", "--baseline-from", baseline, "--set", "workload.output_len=8"],
         "a baseline of another sweep: overrides: "),
        (["--shard", "1/2", "--baseline-from", baseline, "--rule", "no_softmax"], "a baseline of another sweep: rules: "),
        (["--shard", "1/2", "--baseline-from", str(sweeps["shards"][0])], "not the folder of `harness sweep baseline`"),
        (["--shard", "1/2", "--baseline-from", str(sweeps["whole_folder"])], "not the folder of `harness sweep baseline`"),
        (["--shard", "1/2", "--baseline-from", str(tmp_path)], "no sweep.json there"),
        (["--shard", "5/5", "--baseline-from", baseline], "--shard 5/5: the sweep has 4 point(s), so shard 5 of 5 would run none"),
        (["--shard", "1/2", "--baseline-from", baseline, "--out", str(sweeps["shards"][0].parent)],
         "-shard-1-of-2 exists: a shard writes a folder of its own"),
    ]
    for extra, message in cases:
        refused(harness("sweep", *points, "--out", out, *extra, cwd=tmp_path), message)
    fewer = [a for a in points if a != sweeps["hashes"][3]]
    refused(harness("sweep", *fewer, "--shard", "1/2", "--baseline-from", baseline, "--out", out, cwd=tmp_path),
            "a baseline of another sweep: ")
    assert not (tmp_path / "out").exists()


def planted(folder: Path, tmp_path: Path, edit: dict[str, Any]) -> Path:
    """A copy of a shard's folder with its sweep.json's top-level fields changed."""
    copy = tmp_path / f"planted-{len(list(tmp_path.iterdir()))}" / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    doc = json.loads((copy / "sweep.json").read_text())
    (copy / "sweep.json").write_text(json.dumps({**doc, **edit}))
    return copy


def test_the_merge_refuses_shards_that_are_not_one_whole_sweep(sweeps, tmp_path):
    one, two = sweeps["shards"]
    out = tmp_path / "out"
    other_overrides = planted(two, tmp_path, {"overrides": ["trials.seed=8"]})
    other_harness = planted(two, tmp_path, {"harness": {"version": "0.1.0", "git_commit": None}})
    no_run = planted(two, tmp_path, {})
    shutil.rmtree(no_run / "points" / f"03-{sweeps['hashes'][3][:12]}")
    other_baseline = planted(two, tmp_path, {})
    run_json = other_baseline / "baseline" / "run.json"
    run_json.write_text(run_json.read_text().replace('"status"', '"status" ', 1))
    cases = [
        ([one], "shard(s) 2 of 2 missing: give every shard's folder, or --partial"),
        ([one, one], "shard 1 of 2 given twice"),
        ([one, other_overrides], "are shards of different sweeps: overrides: "),
        ([one, other_harness], "are shards of different sweeps: harness: "),
        ([one, sweeps["whole_folder"]], "not a shard of a sweep (part: 'whole'"),
        ([one, sweeps["baseline"]], "not a shard of a sweep (part: 'baseline'"),
        ([one, no_run], "missing (the shard's sweep.json lists it for"),
        ([one, other_baseline], "not the baseline run"),
        ([tmp_path / "nothing"], "no sweep.json there"),
    ]
    for folders, message in cases:
        refused(harness("sweep", "merge", *map(str, folders), "--out", str(out), "--db", str(tmp_path / "h.sqlite"),
                        cwd=tmp_path), message)
    assert not out.exists() and not (tmp_path / "h.sqlite").exists()
    refused(harness("sweep", "merge", str(one), str(two), "--out", str(sweeps["merged_folder"]), cwd=tmp_path),
            "exists and is not empty")
