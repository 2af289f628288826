"""`harness sweep` and `harness bisect` over two real SGLang releases on this CPU, whose draft selects
its tokens differently (scenarios/sglang_cpu_release_sweep.yaml). Each release runs its own source in
an environment `sglang_spec_harness.sglang_cpu.releases` builds; the change point and its explanation must come
from the traces: the numbers asserted here are read from each point's own analysis, never written in.

Marked `real_sglang` (needs `make sglang-cpu`; .ci/run requires it). About 6 minutes on 2 cores, 11 on a slow VM.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglang_spec_harness.releases.environments import release_pins
from sglang_spec_harness.scenario import load_scenario, scenario_to_yaml
from sglang_spec_harness.sglang_cpu.base import is_current

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "sglang_cpu_release_sweep.yaml"
INSTALL = REPO / ".sglang-cpu"
REQUIRED_ENV = "HARNESS_REQUIRE_SGLANG_CPU"
# Two neighbouring releases; which one selects how is for the traces to say.
RANGE = "0.5.12.post1..0.5.13"
TIMEOUT_S = 2400

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(TIMEOUT_S)]


def harness_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env={**os.environ, "CI": "true"})


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    if not is_current(INSTALL):
        why = f"{INSTALL} is missing or out of date: run `make sglang-cpu`"
        if os.environ.get(REQUIRED_ENV):
            pytest.fail(why)
        pytest.skip(why)
    # the shipped scenario (paths made absolute), with one timed block of 48-token requests per
    # release: CI's time (the counts per span do not depend on either)
    data = yaml.safe_load(scenario_to_yaml(load_scenario(SCENARIO)))
    data["trials"]["repetitions"] = 1
    data["workload"]["output_len"] = 48
    path = tmp_path_factory.mktemp("sweep-scenario") / "sglang_cpu_release_sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def swept(scenario, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("sweep")
    done = harness_cli("sweep", str(scenario), "--sglang-releases", RANGE, "--out", str(root / "out"), "--db",
                       str(root / "history.sqlite"), cwd=root)
    folders = [p for p in (root / "out").iterdir() if p.is_dir()] if (root / "out").is_dir() else []
    assert len(folders) == 1, done.stdout[-3000:] + done.stderr[-3000:]
    return {"done": done, "folder": folders[0], "sweep": json.loads((folders[0] / "sweep.json").read_text())}


def analysis_row(run_dir: Path, region: str, pattern: str) -> dict:
    analysis = json.loads((run_dir / "analysis.json").read_text())
    (trial,) = [t for name, t in analysis["trials"].items() if name.endswith("-candidate-profiled")]
    (facts,) = trial["files"]
    return facts["regions"][region]["counts"][pattern]


def test_both_releases_ran_their_own_source(swept):
    done, sweep = swept["done"], swept["sweep"]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    points = sweep["points"]
    assert [p["status"] for p in points] == ["ran", "ran"], [p["reason"] for p in points]
    for point in points:
        run_dir = Path(point["run_dir"])
        environment = json.loads((run_dir / "environment.json").read_text())
        assert environment["variants"]["candidate"]["sglang"]["version"] == point["point"]
        facts = point["environment"]
        source = Path(facts["source_dir"])
        # the pins recorded are the release's own (its METADATA), against what ran here
        assert facts["torch"]["pinned"] == release_pins(source)["torch"]
        assert facts["torch"]["used"].startswith("2.13.0")
        # the draft's token selection ran from the release's own eagle_worker_v2.py: the profiler's
        # frame of draft_forward is at the line where that file defines it
        worker = (source / "sglang/srt/speculative/eagle_worker_v2.py").read_text().splitlines()
        defined = next(i for i, line in enumerate(worker, start=1) if line.lstrip().startswith("def draft_forward("))
        assert frame_lines(run_dir, "draft_forward") == {defined}
        assert analysis_row(run_dir, "DRAFT_DECODE", "softmax")["replays"] > 0


def frame_lines(run_dir: Path, method: str) -> set[int]:
    """The line numbers of the candidate's profiled trace frames `eagle_worker_v2.py(N): method`."""
    found: set[int] = set()
    for path in (run_dir / "trials").glob("*-candidate-profiled/profile/*.trace.json.gz"):
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        for event in events:
            match = re.fullmatch(rf"sglang/srt/speculative/eagle_worker_v2\.py\((\d+)\): {method}", event.get("name", ""))
            if match:
                found.add(int(match.group(1)))
    return found


def test_the_change_point_and_its_explanation_come_from_the_traces(swept):
    sweep, points = swept["sweep"], swept["sweep"]["points"]
    older, newer = (Path(p["run_dir"]) for p in points)
    counts = {(side, region, pattern): analysis_row(run_dir, region, pattern)["per_replay_median"]
              for side, run_dir in (("older", older), ("newer", newer))
              for region in ("DRAFT_DECODE", "DRAFT_EXTEND") for pattern in ("softmax", "argmax")}
    # the two releases select differently (one of them with a softmax), or there is nothing to find
    assert counts[("older", "DRAFT_DECODE", "softmax")] != counts[("newer", "DRAFT_DECODE", "softmax")]
    history = sweep["history"]
    changes = {c["metric"]: c for c in history["change_points"] if c["variant"] == "candidate"}
    for region in ("DRAFT_DECODE", "DRAFT_EXTEND"):
        change = changes[f"kernels:{region}:softmax"]
        assert (change["label_before"], change["label_after"], change["kind"]) == (points[0]["label"], points[1]["label"], "exact")
        assert (change["before"], change["after"]) == (counts[("older", region, "softmax")], counts[("newer", region, "softmax")])
    (explanation,) = [e for e in history["explanations"] if e["id"] == changes["kernels:DRAFT_DECODE:softmax"]["explanation"]]
    assert explanation["before"]["label"] == points[0]["label"] and explanation["after"]["label"] == points[1]["label"]
    decode = next(r for r in explanation["regions"] if r["region"] == "DRAFT_DECODE")
    listed = {op["op"]: (op["before"], op["after"]) for kind in ("appeared", "disappeared", "changed") for op in decode[kind]}
    for pattern, op in (("softmax", "aten::softmax"), ("argmax", "aten::argmax")):
        before, after = counts[("older", "DRAFT_DECODE", pattern)], counts[("newer", "DRAFT_DECODE", pattern)]
        if before != after:
            assert listed[op] == (before, after), (op, listed)
            assert f"{op} {before:g} -> {after:g}" in explanation["sentence"]
    assert explanation["outputs"]["identical"] is True, explanation["outputs"]
    # the page of the sweep shows it
    page = (swept["folder"] / "index.html").read_text()
    assert points[0]["label"] in page and points[1]["label"] in page and "aten::softmax" in page


def test_bisect_over_the_same_releases_names_the_same_release_from_the_sweeps_runs(scenario, swept, tmp_path):
    # `--reuse`: the sweep measured both releases under this scenario, so the bisection judges them
    # from its stored trials by its own rules and starts no server (CI's time: the runs themselves are
    # the sweep's, above; a bisection that runs its points is tests/test_bisect.py's, and measured
    # over all 18 releases in benchmarks/README.md)
    done = harness_cli("bisect", str(scenario), "--sglang-releases", RANGE, "--out", str(tmp_path / "bisect"),
                       "--reuse", str(swept["folder"]), "--json", cwd=tmp_path)
    result = json.loads(done.stdout)
    changed = next(c for c in swept["sweep"]["history"]["change_points"]
                   if c["metric"] == "kernels:DRAFT_DECODE:softmax")
    assert result["status"] == "found" and done.returncode == 0, (result["message"], done.stderr[-3000:])
    assert result["first_changed_release"] == changed["label_after"]
    assert [s["role"] for s in result["steps"]] == ["newest", "oldest"]
    assert result["verdicts_at_ends"] == [p["verdict"] for p in swept["sweep"]["points"]]
    stored = {p["point"]: p["run_dir"] for p in swept["sweep"]["points"]}
    assert [s["reused_from"] for s in result["steps"]] == [stored[s["release"]] for s in result["steps"]]
    assert result["baseline_run_dir"] is None and "not reused" not in done.stderr, done.stderr[-3000:]
