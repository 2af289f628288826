"""The kernel-only run (`harness run --only exact`, `trials.only: exact`) and the CI gate on its
results (`harness gate RUN_DIR --mode pr|nightly`, sglang_spec_harness.verdict.gate).

The gate fails closed: an exact rule without a verdict fails a pull request's check, so a change that
renames the draft span (the kernel rules then see no draft region: INCONCLUSIVE) cannot pass as a
warning. Shown here on real micro-engine runs of the shipped default scenario; the decision table
itself on results.json records."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.commands.gate import format_line
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.rundir import ResultsRecord
from sglang_spec_harness.run.plan import make_plan
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.verdict.gate import GateLine, decide

REPO = Path(__file__).resolve().parents[1]
MICRO = REPO / "scenarios" / "micro_topk1.yaml"
LLAMA = REPO / "scenarios" / "sglang_llama31_8b_eagle3_topk1.yaml"
TIMING_RULES = {"tpot_improved", "gain_explained_by_softmax"}


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


# ---- the exact-only plan -------------------------------------------------------------------------


def test_exact_only_plans_the_profiled_passes_alone_and_drops_the_budget():
    llama = load_scenario(LLAMA, ["trials.only=exact"])
    assert load_scenario(LLAMA).trials.budget is not None and llama.trials.budget is None
    plan = make_plan(llama)
    assert {t.kind for t in plan.trials} == {"profiled"}
    assert sorted(t.variant for t in plan.trials) == ["baseline", "candidate"]
    # only the launches that serve a pass start
    assert {launch.index for launch in plan.launches} == {t.launch for t in plan.trials}


def test_exact_only_needs_profiled_passes_and_refuses_an_aa_run(tmp_path):
    with pytest.raises(HarnessInputError, match=r"trials\.only: exact runs the profiled passes only"):
        load_scenario(MICRO, ["trials.only=exact", "trials.profiled=0"])
    with pytest.raises(HarnessInputError, match="an A/A run measures nothing else"):
        make_plan(load_scenario(MICRO, ["trials.only=exact"]), aa=True)
    with pytest.raises(HarnessInputError, match=r"trials\.only"):
        load_scenario(MICRO, ["trials.only=timing"])


def test_run_only_refuses_anything_but_exact():
    done = harness("run", str(MICRO), "--only", "tpot", "--dry-run")
    assert done.returncode == 2 and "argument --only: invalid choice: 'tpot'" in done.stderr


# ---- the gate's decision table -------------------------------------------------------------------


def results(*rules: tuple[str, str, str]) -> ResultsRecord:
    verdicts = [v for _, _, v in rules]
    overall = "FAIL" if "FAIL" in verdicts else "INCONCLUSIVE" if "INCONCLUSIVE" in verdicts else "PASS"
    return ResultsRecord.model_validate({
        "scenario": "s", "run_dir": "r", "aa": False, "run_status": "complete", "verdict": overall,
        "exit_code": {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[overall], "variants": {},
        "rules": [{"name": name, "description": "", "kind": kind, "verdict": verdict, "reason": f"why {name}",
                   "params": {}} for name, kind, verdict in rules]})


KERNEL_PASS = ("kernels", "kernel_count", "PASS")


@pytest.mark.parametrize(("rule", "pr", "nightly"), [
    (("kernels_gone", "kernel_count", "FAIL"), "error", "error"),
    (("kernels_blind", "kernel_count", "INCONCLUSIVE"), "error", "error"),
    (("accept", "accept_length", "INCONCLUSIVE"), "error", "error"),
    (("outputs", "output_identity", "INCONCLUSIVE"), "error", "error"),
    # the run's own validity, and any kind added later, is exact
    (("run_complete", "validity", "INCONCLUSIVE"), "error", "error"),
    (("tpot", "tpot_gain", "FAIL"), "error", "error"),
    (("tpot", "tpot_gain", "INCONCLUSIVE"), "warning", "error"),
    (("explained", "explained_gain", "INCONCLUSIVE"), "warning", "error"),
    (("tpot", "tpot_gain", "NOT_RUN"), "notice", "error"),
    (("bounds", "explained_gain", "INFO"), None, None),
])
def test_the_gate_decides_per_rule_and_mode(rule, pr, nightly):
    for mode, level in (("pr", pr), ("nightly", nightly)):
        decision = decide(results(KERNEL_PASS, rule), mode)
        assert [line.level for line in decision.lines] == ([level] if level else [])
        assert decision.exit_code == (1 if level == "error" else 0)
        if level:
            assert decision.lines[0].rule == rule[0] and f"why {rule[0]}" in decision.lines[0].text()


def test_the_gate_fails_results_in_which_nothing_passed():
    decision = decide(results(("tpot", "tpot_gain", "NOT_RUN")), "pr")
    assert decision.exit_code == 1
    assert [line.why for line in decision.lines if line.level == "error"] == ["no rule passed: nothing was judged"]
    with pytest.raises(HarnessInputError, match="gate mode 'weekly'"):
        decide(results(KERNEL_PASS), "weekly")  # type: ignore[arg-type]


def test_a_gate_line_cannot_start_a_workflow_command_of_its_own():
    line = GateLine("error", "r", "kernel_count", "INCONCLUSIVE", "evidence missing",
                    "kernel named x\n::add-mask::secret 100%")
    text = format_line(line, github=True)
    assert "\n" not in text and text.startswith("::error title=harness gate%3A r::")
    assert "x%0A::add-mask::secret 100%25" in text
    assert format_line(line, github=False).startswith("error: r (kernel_count) INCONCLUSIVE: evidence missing: ")


def test_the_gate_without_results_is_bad_input(tmp_path, capsys):
    assert main(["gate", str(tmp_path), "--mode", "pr"]) == 2
    assert f"{tmp_path / 'results.json'}: missing: the run gave no verdict" in capsys.readouterr().err


# ---- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exact_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exact-runs")
    done = harness("run", str(MICRO), "--only", "exact", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out / "latest"


@pytest.mark.slow
def test_an_exact_only_run_judges_the_exact_rules_on_its_passes_and_reports_timing_not_run(exact_run):
    got = ResultsRecord.model_validate_json((exact_run / "results.json").read_text())
    verdicts = {rule.name: str(rule.verdict) for rule in got.rules}
    assert {name for name, v in verdicts.items() if v == "NOT_RUN"} == TIMING_RULES
    assert all(v == "PASS" for name, v in verdicts.items() if name not in TIMING_RULES), verdicts
    assert got.verdict == "PASS"
    # no timed trial ran; accept length and outputs were compared on the profiled passes, request by request
    assert sorted(p.name.split("-", 1)[1] for p in (exact_run / "trials").iterdir()) == ["baseline-profiled",
                                                                                         "candidate-profiled"]
    accept = next(rule for rule in got.rules if rule.name == "accept_length_unchanged")
    assert accept.numbers.pairs == 16 and "identical in all 16 pairs" in accept.reason
    # the report says NOT_RUN, never PASS, for them: summary (the step summary's text) and JUnit
    summary = (exact_run / "summary.md").read_text()
    assert "| `tpot_improved` | tpot_gain | ⏭️ NOT_RUN | not run: the run was exact-only" in summary
    junit = ET.parse(exact_run / "junit.xml").getroot()
    skipped = {case.get("name"): case.find("skipped").get("message") for case in junit.iter("testcase")
               if case.find("skipped") is not None}
    assert set(skipped) == TIMING_RULES and all(m.startswith("NOT_RUN: not run") for m in skipped.values())


@pytest.mark.slow
def test_the_pr_gate_passes_an_exact_only_pass_and_the_nightly_gate_does_not(exact_run):
    pr = harness("gate", str(exact_run), "--mode", "pr")
    assert pr.returncode == 0, pr.stdout + pr.stderr
    # the scenario's four exact rules, run_complete / run_intact, and the implicit outputs_valid
    assert pr.stdout.splitlines()[-1] == ("harness gate (pr): PASS: micro_topk1, verdict PASS, 6 rule(s) passed; "
                                          "2 notices")
    nightly = harness("gate", str(exact_run), "--mode", "nightly")
    assert nightly.returncode == 1
    assert [line.split(" ", 2)[1] for line in nightly.stdout.splitlines()[:-1]] == sorted(TIMING_RULES, reverse=True)


@pytest.mark.slow
def test_a_renamed_draft_span_fails_the_pr_gate_rather_than_warning(tmp_path):
    """A change that renames the draft-decode span: the region table (here the scenario's own, the
    same table as the default's for the micro engine) no longer finds the draft region, so the
    kernel rules on it have no evidence. The run is INCONCLUSIVE (exit 3), which the workflow once
    read as a warning; the PR gate fails the job and names each of those rules."""
    data = yaml.safe_load(MICRO.read_text())
    data["regions"] = {"replace": True, "rules": [
        {"name": "DRAFT_EXTEND", "regex": r"^step\[DRAFT_EXTEND(?:_V2)? bs=\d+\]"},
        {"name": "TARGET_VERIFY", "regex": r"^step\[TARGET_VERIFY bs=\d+\]"},
        # the engine still opens step[DECODE bs=N] around its draft steps: renamed on one side only
        {"name": "DRAFT_DECODE", "regex": r"^step\[DRAFT_STEP bs=\d+\]"},
    ]}
    scenario = tmp_path / "renamed_span.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    run = harness("run", str(scenario), "--only", "exact", "--out", str(tmp_path / "out"), "--no-progress")
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-2000:]
    gate = harness("gate", str(tmp_path / "out" / "latest"), "--mode", "pr")
    assert gate.returncode == 1
    errors = [line for line in gate.stdout.splitlines() if line.startswith("error: ")]
    assert sorted(line.split(" ", 2)[1] for line in errors) == ["baseline_has_softmax_draft_decode",
                                                                 "candidate_no_softmax_draft_decode"]
    assert all("(kernel_count) INCONCLUSIVE: an exact rule without a verdict is missing evidence" in line
               for line in errors)
    assert gate.stdout.splitlines()[-1].startswith("harness gate (pr): FAIL: micro_topk1, verdict INCONCLUSIVE")
