"""The adaptive design (trials.budget): the group-sequential boundaries, the stopping and growing rule
on synthetic streams, and real micro-engine runs that stop early, fail fast and add a launch."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sglang_spec_harness.run.adaptive import decide_next, launch_noise_dominates
from sglang_spec_harness.rundir.models import ExplainedGainResult, TpotGainResult
from sglang_spec_harness.rundir.rule_numbers import NestedFitNumbers
from sglang_spec_harness.run.plan import extend, make_plan, rotation
from sglang_spec_harness.scenario import SCENARIO_END, TpotGainRule, load_scenario
from sglang_spec_harness.verdict import stats
from sglang_spec_harness.verdict.rules.tpot_gain import look_levels
from sglang_spec_harness.verdict.stats.sequential import boundaries, nominal_levels, spent
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS

REPO = Path(__file__).resolve().parents[1]
TPOT_RULE = TpotGainRule(name="tpot", kind="tpot_gain", min_gain=0.01)


# ---- boundaries ---------------------------------------------------------------------------------


def test_boundaries_reproduce_the_published_ones():
    """Five equal looks, one-sided 0.025 (two-sided 0.05): Jennison & Turnbull 2000, table 7.6 / the
    Lan-DeMets values every group-sequential package prints."""
    five = [0.2, 0.4, 0.6, 0.8, 1.0]
    assert [round(c, 3) for c in boundaries(five, 0.025, "obrien_fleming")] == [4.877, 3.357, 2.680, 2.290, 2.031]
    assert [round(c, 3) for c in boundaries(five, 0.025, "pocock")] == [2.438, 2.427, 2.410, 2.397, 2.386]
    # one look at t = 1 is the fixed design
    assert boundaries([1.0], 0.025) == pytest.approx([1.959964], abs=1e-5)


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_the_boundaries_keep_the_level_over_unequal_looks(spending):
    looks = np.array([6, 8, 10, 14, 16, 24, 32, 48]) / 48
    c = np.array(boundaries(looks, 0.025, spending))
    rng = np.random.default_rng(7)
    increments = rng.normal(size=(200_000, len(looks))) * np.sqrt(np.diff(np.r_[0.0, looks]))
    z = np.cumsum(increments, axis=1) / np.sqrt(looks)
    crossed = (z >= c).any(axis=1).mean()
    assert abs(crossed - 0.025) < 0.0015, crossed  # 4.5 binomial standard errors
    assert spent(1.0, 0.025, spending) == pytest.approx(0.025) and spent(0.0, 0.025, spending) == 0.0


def test_nominal_levels_shrink_with_more_looks_and_never_exceed_the_level():
    few = nominal_levels([0.5, 1.0], 0.025)
    many = nominal_levels([r / 48 for r in range(6, 49, 2)], 0.025)
    assert all(0 < p < 0.025 for p in few + many)
    assert max(many) < max(few)
    # a look where nothing is spent yet cannot stop (O'Brien-Fleming at a tiny fraction)
    assert math.isinf(boundaries([1e-4, 1.0], 0.025, "obrien_fleming")[0])
    assert nominal_levels([1e-4, 1.0], 0.025, "obrien_fleming")[0] == 0.0
    with pytest.raises(ValueError):
        boundaries([0.5, 0.4], 0.025)


# ---- the stopping rule on synthetic streams -----------------------------------------------------


def _stream(rng, *, effect: float, sd_block: float, sd_launch: float, launches: int = 4, rounds: int = 48):
    """Blocks of a run with `launches` per arm (a launch's level drawn once), in round order."""
    levels = {f"{arm}{j}": math.exp(rng.normal(0, sd_launch)) for arm in "bc" for j in range(launches)}
    return levels, lambda arm, j: 10.0 * levels[f"{arm}{j}"] * math.exp(rng.normal(0, sd_block)) * (
        (1 + effect) if arm == "c" else 1.0)


def _run(rng, *, effect, sd_block, sd_launch, first=6, every=2, max_rounds=48, max_launches=4, grow="auto"):
    """The adaptive procedure of sglang_spec_harness.run.adaptive on a synthetic stream: (verdict, rounds, launches)."""
    _, draw = _stream(rng, effect=effect, sd_block=sd_block, sd_launch=sd_launch, launches=max_launches)
    tpot, cand, labels, rounds_of, fractions = [], [], [], [], []
    rounds, per_arm, stage = 0, 2, first
    while True:
        for r in range(rounds, min(rounds + stage, max_rounds)):
            for position, arm in enumerate("bc"):
                j = rotation(position, r, per_arm)
                tpot.append(draw(arm, j))
                cand.append(arm == "c")
                labels.append(f"{arm}{j}")
                rounds_of.append(r)
        rounds = min(rounds + stage, max_rounds)
        fractions.append(rounds / max_rounds)
        alpha = look_levels(TPOT_RULE, fractions, "pocock")[-1][0]
        decision, fit = stats.nested_tpot_gain_decision(tpot, cand, labels, rounds_of, min_gain=0.01, alpha=alpha,
                                                        confidence=1 - alpha)
        if decision.verdict in (PASS, FAIL) or rounds >= max_rounds:
            return decision, rounds, per_arm
        launch_bound = grow == "auto" and launch_noise_dominates(NestedFitNumbers.model_validate(fit.to_dict()), rounds, per_arm)
        if per_arm < max_launches and (grow == "launches" or launch_bound):
            per_arm += 1
        stage = every


def test_aa_streams_with_repeated_looks_keep_false_verdicts_within_alpha():
    """An integration check (the full measurement on real blocks is benchmarks/adaptive_verdict.py)."""
    rng = np.random.default_rng(11)
    false = 0
    runs = 100
    for _ in range(runs):
        decision, _, _ = _run(rng, effect=0.0, sd_block=0.04, sd_launch=0.02, max_rounds=24)
        false += decision.verdict == PASS or (decision.verdict == FAIL and decision.fail_kind == "slower")
    # at most 5% (+3 binomial standard errors of 100 runs)
    assert false / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs), false


def test_a_clear_gain_stops_at_the_first_look():
    rng = np.random.default_rng(3)
    outcomes = [_run(rng, effect=-0.25, sd_block=0.03, sd_launch=0.0) for _ in range(20)]
    assert all(decision.verdict == PASS for decision, _, _ in outcomes)
    rounds = sorted(r for _, r, _ in outcomes)
    # most at the first look; one whose launches happen to differ waits for a look or two more
    assert rounds[len(rounds) // 2] == 6 and rounds[-1] <= 12, rounds


def test_no_effect_runs_to_the_budget_and_says_what_it_could_detect():
    rng = np.random.default_rng(5)
    decision, rounds, _ = _run(rng, effect=0.005, sd_block=0.08, sd_launch=0.0, max_rounds=12, max_launches=2)
    assert (decision.verdict, rounds) == (INCONCLUSIVE, 12)
    assert decision.mde is not None and 0 < decision.mde < 1


def test_launch_noise_decides_what_a_stage_adds():
    assert launch_noise_dominates(NestedFitNumbers(sd_launch=0.05, sd_block=0.02), rounds=8, launches_per_arm=2)
    assert not launch_noise_dominates(NestedFitNumbers(sd_launch=0.0, sd_block=0.05), rounds=8, launches_per_arm=2)
    assert not launch_noise_dominates(NestedFitNumbers(sd_launch=None, sd_block=0.05), rounds=8, launches_per_arm=2)
    # a real launch effect, synthetic: the procedure adds launches, and ends decisive
    rng = np.random.default_rng(2)
    grown = [_run(rng, effect=-0.05, sd_block=0.01, sd_launch=0.06)[2] for _ in range(20)]
    assert max(grown) > 2


def test_a_look_waits_for_the_rules_judged_on_the_tpot_interval():
    """An explained gain inherits the TPOT interval: a look that stopped on the TPOT rule alone ended
    a run INCONCLUSIVE (ratio 1.43 [0.71, 2.02] against max 2.0, under load) that more rounds decide."""
    scenario = load_scenario(REPO / "scenarios/micro_topk1.yaml")

    def tpot(verdict):
        return TpotGainResult(name="tpot_improved", description="", verdict=verdict, reason="", params={})

    def explained(verdict):
        return ExplainedGainResult(name="gain_explained", description="", verdict=verdict, reason="", params={})

    def decide(results, inherits, rounds=6):
        return decide_next(scenario, results, inherits, rounds=rounds, launches_per_arm=2,
                           nested=NestedFitNumbers(sd_launch=0.0, sd_block=0.1), elapsed_s=20.0, per_round_s=1.0,
                           launch_s=2.0)

    wait = decide([tpot(PASS)], [explained(INCONCLUSIVE)])
    assert not wait.stop and wait.rounds == scenario.trials.stage_rounds
    assert "tpot_improved PASS, gain_explained INCONCLUSIVE" in wait.why
    assert decide([tpot(PASS)], [explained(PASS)]).stop
    assert decide([tpot(PASS)], [explained(FAIL)]).stop
    # a TPOT FAIL ends the run FAIL whatever the rest says
    assert decide([tpot(FAIL)], [explained(INCONCLUSIVE)]).stop
    assert not decide([tpot(INCONCLUSIVE)], [explained(PASS)]).stop
    budget = scenario.trials.budget
    spent = decide([tpot(PASS)], [explained(INCONCLUSIVE)], rounds=budget.max_rounds)
    assert spent.stop and spent.why.startswith("budget spent")


# ---- plans ----------------------------------------------------------------------------------------


def _budget_scenario(tmp_path: Path, min_gain: float = 0.01, **budget) -> Path:
    """The default scenario (scenarios/micro_topk1.yaml) with this budget and a first stage of 6 rounds."""
    data = yaml.safe_load((REPO / "scenarios/micro_topk1.yaml").read_text())
    data["trials"].update(repetitions=6, budget=budget)
    for rule in data["rules"]:
        if rule["kind"] == "tpot_gain":
            rule["min_gain"] = min_gain
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False) + SCENARIO_END + "\n")
    return path


def test_a_budget_plan_profiles_first_candidate_first_and_grows_by_stages(tmp_path):
    scenario = load_scenario(_budget_scenario(tmp_path, max_rounds=10, max_launches=3, look_every=2))
    scenario = scenario.model_copy(update={"trials": scenario.trials.model_copy(update={"seed": 4})})
    plan = make_plan(scenario)
    kinds = [(t.variant, t.kind) for t in plan.trials]
    assert kinds[:2] == [("candidate", "profiled"), ("baseline", "profiled")]
    assert plan.trials[0].launch is None and plan.trials[1].launch is None  # servers of their own
    assert sum(t.kind == "timed" for t in plan.trials) == 12 and len(plan.launches) == 4
    added = extend(plan, scenario, rounds=2, launches_per_arm=3)
    assert [t.repetition for t in added] == [6, 6, 7, 7]
    assert len(plan.launches) == 6 and {launch.number for launch in plan.launches} == {0, 1, 2}
    # never past max_rounds; indices, names and prompts keep their places
    assert [t.repetition for t in extend(plan, scenario, rounds=4, launches_per_arm=3)] == [8, 8, 9, 9]
    assert [t.index for t in plan.trials] == list(range(len(plan.trials)))
    assert plan.trials[-1].first_prompt == 9 * 8 and plan.trials[0].first_prompt == 10 * 8
    assert len({t.dir_name for t in plan.trials}) == len(plan.trials)


def test_a_pair_mode_budget_shares_rounds_over_pairs_and_grows_by_pairs(tmp_path):
    """servers_up pair: the first stage's rounds in contiguous shares
    over the pairs; more rounds stay on the pair that is up; a new launch per arm is a new pair."""
    path = _budget_scenario(tmp_path, max_rounds=16, max_launches=3, look_every=2)
    data = yaml.safe_load(path.read_text())
    data["trials"]["servers_up"] = "pair"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    scenario = load_scenario(path)
    scenario = scenario.model_copy(update={"trials": scenario.trials.model_copy(update={"seed": 4})})
    plan = make_plan(scenario)
    number = {launch.index: launch.number for launch in plan.launches}
    assert [t.launch for t in plan.trials if t.kind == "profiled"] == [None, None]  # servers of their own
    assert [number[t.launch] for t in plan.trials if t.kind == "timed"] == [0] * 6 + [1] * 6
    more = extend(plan, scenario, rounds=2, launches_per_arm=2)
    assert [number[t.launch] for t in more] == [1] * 4  # the pair that is up
    added = extend(plan, scenario, rounds=2, launches_per_arm=3)
    number = {launch.index: launch.number for launch in plan.launches}
    assert [number[t.launch] for t in added] == [2] * 4 and [t.repetition for t in added] == [8, 8, 9, 9]


@pytest.mark.slow
def test_a_real_pair_mode_run_adds_a_pair_and_stops_the_one_before(tmp_path):
    scenario = _budget_scenario(tmp_path, max_rounds=6, max_launches=3, look_every=2, grow="launches")
    data = yaml.safe_load(scenario.read_text())
    data["trials"]["servers_up"] = "pair"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    _, run_dir, run, _ = _harness_run(scenario, tmp_path / "runs", "--set", "trials.repetitions=4")
    looks = [look for look in run["looks"] if look["kind"] == "tpot"]
    assert [look["launches_per_arm"] for look in looks] == [2, 3]
    records = {launch["number"]: [json.loads((run_dir / item["dir"] / "launch.json").read_text())
                                  for item in run["launches"] if item["number"] == launch["number"]]
               for launch in run["launches"]}
    # never more than one pair up: each pair stopped before the next one came up
    for earlier, later in ((0, 1), (1, 2)):
        assert max(r["stopped_at_s"] for r in records[earlier]) <= min(r["started_at_s"] for r in records[later])
    assert all(r["status"] == "stopped" for rs in records.values() for r in rs)


def test_a_budget_cannot_be_run_in_parts(tmp_path):
    from sglang_spec_harness.errors import HarnessInputError

    scenario = load_scenario(_budget_scenario(tmp_path, max_rounds=10))
    with pytest.raises(HarnessInputError, match="cannot be run in parts"):
        make_plan(scenario, select={("candidate", "timed")})


# ---- real runs of the micro engine ----------------------------------------------------------------


def _harness_run(scenario: Path, out: Path, *extra: str) -> tuple[int, Path, dict, dict]:
    proc = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "run", str(scenario), "--out", str(out),
                           "--no-progress", "--json", *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    return (proc.returncode, run_dir, json.loads((run_dir / "run.json").read_text()),
            json.loads((run_dir / "results.json").read_text()))


@pytest.mark.slow
def test_a_real_run_stops_early_and_check_gives_its_answer(tmp_path):
    # An effect no load hides: the baseline also busy-waits 30 ms per draft cycle (the fast path's own
    # 17-30% went undecided to the budget once, in CI, with the suite's other servers on its CPU). The
    # delay sits outside the draft regions, so the explained-gain rule is left out here.
    scenario = _budget_scenario(tmp_path, max_rounds=40, max_minutes=4)
    data = yaml.safe_load(scenario.read_text())
    data["variants"]["baseline"]["args"]["--inject-delay-us"] = 30000
    data["rules"] = [rule for rule in data["rules"] if rule["kind"] != "explained_gain"]
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    code, run_dir, run, results = _harness_run(scenario, tmp_path / "runs")
    looks = run["looks"]
    assert looks[0]["kind"] == "exact" and looks[-1]["action"] == "stop"
    tpot = next(r for r in results["rules"] if r["kind"] == "tpot_gain")
    timed = [t for t in run["plan"] if t["kind"] == "timed"]
    assert len(timed) == 2 * looks[-1]["rounds"] < 2 * 40  # stopped before the budget
    assert tpot["verdict"] == looks[-1]["verdict"] and code == (0 if results["verdict"] == "PASS" else code)
    assert tpot["numbers"]["sequential"]["looks"] == sum(1 for look in looks if look["kind"] == "tpot")
    # a stored run gives its own answer
    check = subprocess.run([sys.executable, "-m", "sglang_spec_harness.commands.cli", "check", str(run_dir), "--json"],
                           capture_output=True, text=True, timeout=300)
    assert json.loads(check.stdout)["rules"] == results["rules"]
    page = (run_dir / "index.html").read_text()
    assert "Looks (adaptive design)" in page and looks[-1]["reason"].split(":")[0] in page


@pytest.mark.slow
def test_a_planted_softmax_fails_after_one_profiled_pass(tmp_path):
    scenario = _budget_scenario(tmp_path, max_rounds=40)
    code, _, run, results = _harness_run(scenario, tmp_path / "runs", "--set",
                                      "variants.candidate.args={--disable-topk1-fast-path: true}")
    assert code == 1 and results["verdict"] == "FAIL"
    assert [(t["variant"], t["kind"]) for t in run["plan"]] == [("candidate", "profiled")]
    # one server, the profiled pass's own: the FAIL cost one start-up, and no timed launch started
    assert run["server_launches"] == 1 and run["launches"] == []
    assert run["looks"][-1]["kind"] == "exact" and "candidate_no_softmax" in run["looks"][-1]["reason"]


@pytest.mark.slow
def test_a_real_run_adds_a_launch_per_arm(tmp_path):
    # A first stage of 4 rounds cannot be decisive (a TPOT verdict needs 6): the first look always goes on.
    scenario = _budget_scenario(tmp_path, max_rounds=6, max_launches=3, look_every=2, grow="launches")
    _, run_dir, run, _ = _harness_run(scenario, tmp_path / "runs", "--set", "trials.repetitions=4")
    looks = [look for look in run["looks"] if look["kind"] == "tpot"]
    assert [look["launches_per_arm"] for look in looks] == [2, 3]
    assert "launch 3 per arm" in looks[0]["action"]
    third = [launch for launch in run["launches"] if launch["number"] == 2]
    assert len(third) == 2
    for launch in third:
        record = json.loads((run_dir / launch["dir"] / "launch.json").read_text())
        assert record["status"] == "stopped" and record["ready_at_s"] > looks[0]["elapsed_s"]  # started at the look
    served = {t["launch"] for t in run["plan"] if t["kind"] == "timed" and t["repetition"] >= 4}
    assert {launch["index"] for launch in third} <= served


@pytest.mark.slow
def test_an_aa_run_never_stops_on_kernel_rules(tmp_path):
    """Both arms of an A/A run are the baseline, softmax and all: the exact look must not FAIL it."""
    scenario = _budget_scenario(tmp_path, max_rounds=8)
    _, _, run, results = _harness_run(scenario, tmp_path / "runs", "--aa")
    kinds = [look["kind"] for look in run["looks"]]
    assert kinds[:2] == ["exact", "tpot"] and set(kinds[1:]) == {"tpot"}
    assert run["looks"][0]["action"] == "start rounds"
    rounds = run["looks"][-1]["rounds"]
    assert rounds in (6, 8) and sum(t["kind"] == "timed" for t in run["plan"]) == 2 * rounds
    assert results["aa"] is True
    # its A/A answer is the one its looks gave: at the last look's level (below 0.05: the first look
    # comes at 6 of 8 rounds), not at the fixed design's
    floor = next(r for r in results["rules"] if r["name"] == "aa_noise_floor")
    alpha = run["looks"][-1]["nominal_alpha"]
    assert alpha < 0.05 and floor["reason"].startswith(
        f"look {len(kinds) - 1} of an adaptive run, nominal alpha {alpha:.4f}: "), floor["reason"]
