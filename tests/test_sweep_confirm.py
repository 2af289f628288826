"""`harness sweep --confirm` over three revisions of a real git repository with micro servers on
loopback: the last revision makes every draft-decode cycle 20 ms slower, the first two are the same
code. The sweep is too short for the change-point test, so each step of its TPOT and throughput
series runs again side by side (the earlier revision as the baseline arm, the later as the
candidate, interleaved, two launches per arm): the planted slowdown is confirmed with its interval
and becomes a change point that reads as a regression; the step between two identical revisions is
not confirmed. The scenario's TPOT rule asks for 99% intervals, which the side-by-side run takes:
a non-change then leaves out 1 about once in a hundred runs, and the 20 ms slowdown stands clear
even when two launches per arm give the launch-to-launch variance few degrees of freedom (at 99.9%
the interval of a tenfold slowdown once reached from 0.7 to 169). The outcome is in the history database, so the report shows it without running
anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.bisect_demo import CLEAN, SLOWER, git, make_repo, write_scenario

from sglang_spec_harness.rundir import load_run_dir
from sglang_spec_harness.sweep.confirm import RULE_NAME, decide

# The module's fixture runs a sweep of three revisions and two side-by-side runs (four launches each):
# about two minutes on a quiet machine, several times that under load.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
WARM = {"mode": "interleaved", "launches": 1, "repetitions": 2, "profiled": 1}
CONFIDENCE = 0.99


def _harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "CI": "true"})


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory):
    root = tmp_path_factory.mktemp("confirm")
    repo, hashes = make_repo(root, [CLEAN, CLEAN, SLOWER])
    scenario = write_scenario(root, repo, trials=WARM)
    data = yaml.safe_load(scenario.read_text())
    (tpot_rule,) = [r for r in data["rules"] if r["kind"] == "tpot_gain"]
    tpot_rule["confidence"] = CONFIDENCE
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    out, db = root / "out", root / "history.sqlite"
    done = _harness("sweep", str(scenario), "--source", str(repo), "--revisions", *hashes, "--out", str(out),
                    "--db", str(db), "--confirm", cwd=root)
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    report = _harness("history", "report", "--db", str(db), "--out", str(root / "page"), "--json", cwd=root)
    return {"done": done, "repo": repo, "hashes": hashes, "folder": folder, "db": db, "report": report,
            "sweep": json.loads((folder / "sweep.json").read_text())}


def _rows(sweep: dict, step: int) -> dict[str, dict]:
    """The confirmations of the step into point `step`, by metric."""
    keys = {p["position"]: p for p in sweep["points"]}
    after = keys[step]["label"]
    return {r["metric"]: r for r in sweep["confirmations"] if (r["run_dir"] or "").endswith(f"-{after}")}


def test_the_planted_slowdown_is_confirmed_side_by_side_with_its_interval(confirmed):
    done, sweep = confirmed["done"], confirmed["sweep"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert sweep["confirm"] and "--confirm: 2 step(s) to run again side by side" in done.stdout
    slower = _rows(sweep, 2)
    tpot, throughput = slower["tpot_ms"], slower["throughput_tok_s"]
    assert (tpot["status"], tpot["measured"], tpot["method"]) == ("confirmed", True, "mixed-model-t")
    assert 1.0 < tpot["ci_low"] <= tpot["ratio"] <= tpot["ci_high"] and tpot["confidence"] == CONFIDENCE
    # throughput, by the same model over the same blocks: lower, and confirmed exactly when its interval
    # excludes no change (the client's own share of a cycle makes it the noisier of the two when the
    # machine is shared: it ended not confirmed once under a load of 20, its ratio still below 1)
    assert throughput["measured"] and throughput["ratio"] < 1.0
    assert throughput["ci_low"] <= throughput["ratio"] <= throughput["ci_high"]
    assert (throughput["status"] == "confirmed") == (throughput["ci_high"] < 1.0)
    # one side-by-side run for the step, an ordinary run: the earlier revision the baseline arm
    run = load_run_dir(Path(tpot["run_dir"]))
    assert run.complete and run.mode == "interleaved" and run.run.status == "complete"
    assert {v: len(run.trials_of(v, "timed")) for v in ("baseline", "candidate")} == {"baseline": 6, "candidate": 6}  # MIN_PAIRS rounds
    assert len({t.record.launch for t in run.trials}) == 4  # two launches per arm
    (rule,) = [r for r in run.results.rules if r.name == RULE_NAME]
    assert (rule.numbers.ratio, rule.numbers.ci_low, rule.numbers.ci_high) == (tpot["ratio"], tpot["ci_low"], tpot["ci_high"])
    paths = [run.scenario.variants[v].pythonpath[0] for v in ("baseline", "candidate")]
    assert paths[0] != paths[1] and all("side-by-side" in p for p in paths)


def test_a_step_between_the_same_code_is_not_confirmed(confirmed):
    same = _rows(confirmed["sweep"], 1)
    facts = json.loads(confirmed["report"].stdout)
    values = {s["metric"]: s["values"] for s in facts["series"] if s["variant"] == "candidate"}
    assert "tpot_ms" in same
    for metric, row in same.items():
        moved_up = values[metric][1] > values[metric][0]
        assert row["measured"] and row["ratio"] is not None and row["confidence"] == CONFIDENCE
        assert row["status"] == "not confirmed", row
        assert (row["status"], row["measured"], row["reason"]) == decide(
            moved_up, row["ratio"], row["ci_low"], row["ci_high"], True, "")
    # and the history has no change point there
    assert not [c for c in facts["change_points"] if c["index"] == 1 and c["metric"] in same]


def test_the_history_keeps_it_and_the_confirmed_step_reads_as_a_regression(confirmed):
    report = confirmed["report"]
    assert report.returncode == 0, report.stderr  # sweep series do not gate
    facts = json.loads(report.stdout)
    tpot = [c for c in facts["change_points"] if c["metric"] == "tpot_ms" and c["variant"] == "candidate"]
    slower = [c for c in tpot if c["index"] == 2]
    assert len(slower) == 1 and slower[0]["kind"] == "side by side" and slower[0]["reading"] == "regression"
    assert slower[0]["confirmation"]["status"] == "confirmed" and slower[0]["way"] == "worse"
    stored = {(c["run_key_before"], c["run_key_after"], c["metric"]): c["status"] for c in facts["confirmations"]}
    swept = {(r["run_key_before"], r["run_key_after"], r["metric"]): r["status"] for r in confirmed["sweep"]["confirmations"]}
    assert stored == swept
    page = (confirmed["folder"] / "index.html").read_text()
    assert 'id="side-by-side"' in page and "confirmed" in page
    explanation = next(e for e in facts["explanations"] if e["id"] == slower[0]["explanation"])
    assert "tpot_ms" in explanation["sentence"] and "reads as regression (confirmed side by side" in explanation["sentence"]


def test_nothing_is_left_behind(confirmed):
    repo = confirmed["repo"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "status", "--porcelain") == ""


def test_confirm_needs_the_history(tmp_path):
    repo, hashes = make_repo(tmp_path, [CLEAN, CLEAN])
    scenario = write_scenario(tmp_path, repo, trials=WARM)
    done = _harness("sweep", str(scenario), "--source", str(repo), "--revisions", *hashes, "--out", str(tmp_path / "out"),
                    "--no-history", "--confirm", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "--confirm" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
