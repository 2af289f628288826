"""The rules on stored run directories with planted facts: fail closed, exact reasons."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.rundir import load_run_dir
from sglang_spec_harness.verdict.judge import evaluate_run
from sglang_spec_harness.vocabulary import overall_verdict
from support.rundir_factory import SCENARIO, Arm, file_facts, write_run_dir

rng = np.random.default_rng(7)


def noisy(center: float, n: int = 6, cv: float = 0.01) -> list[float]:
    return list(center * np.exp(rng.normal(0, cv, n)))


def good_arms() -> tuple[Arm, Arm]:
    base = Arm(tpot_ms=noisy(10.0), profile=[file_facts(softmax_per_replay=2)])
    cand = Arm(tpot_ms=noisy(9.0), profile=[file_facts(softmax_per_replay=0)])
    return base, cand


def rules_by_name(run_dir):
    results = evaluate_run(load_run_dir(run_dir))
    return results, {r.name: r for r in results.rules}


def test_a_real_gain_with_clean_traces_passes_every_rule(tmp_path):
    results, rules = rules_by_name(write_run_dir(tmp_path, *good_arms()))
    assert {n: r.verdict for n, r in rules.items()} == {
        "cand_no_softmax_dd": "PASS", "base_softmax_dd": "PASS", "accept": "PASS", "identity": "PASS",
        "tpot": "PASS", "explained": "INFO",  # no bounds: informational, and not counted
    }
    assert results.verdict == "PASS" and results.exit_code == 0
    tpot = rules["tpot"].numbers
    assert 0.88 < tpot.ratio < 0.92 and tpot.ci_high < 0.99
    obs = rules["cand_no_softmax_dd"].numbers.observations
    assert [(o.variant, o.replays, o.total) for o in obs] == [("candidate", 10, 0)]


def test_candidate_that_keeps_the_softmax_fails_the_kernel_rule(tmp_path):
    base, cand = good_arms()
    cand.profile = [file_facts(softmax_per_replay=2)]
    results, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "FAIL"
    assert "softmax in DRAFT_DECODE per replay = 2..2, expected == 0" in rules["cand_no_softmax_dd"].reason
    assert results.verdict == "FAIL" and results.exit_code == 1


def test_one_rank_keeping_the_softmax_fails_even_if_rank_0_is_clean(tmp_path):
    base, cand = good_arms()
    cand.profile = [file_facts(softmax_per_replay=0, rank=0), file_facts(softmax_per_replay=1, rank=1)]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "FAIL"
    assert "rank 1" in rules["cand_no_softmax_dd"].reason


def test_trace_without_kernels_or_ops_is_inconclusive_not_pass(tmp_path):
    base, cand = good_arms()
    facts = file_facts(softmax_per_replay=0)
    facts["validity"].update(kernels=0, gpu_ops=0, cpu_ops=0)
    cand.profile = [facts]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "trace recorded work: 0 kernels, 0 CPU ops" in rules["cand_no_softmax_dd"].reason


def test_unlabelled_graph_launches_make_zero_inconclusive(tmp_path):
    base, cand = good_arms()
    cand.profile = [file_facts(softmax_per_replay=0, unlabelled=30)]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    r = rules["cand_no_softmax_dd"]
    assert r.verdict == "INCONCLUSIVE" and "30 of 30 graph launches have no region" in r.reason


def test_region_that_never_appears_is_inconclusive(tmp_path):
    base, cand = good_arms()
    facts = file_facts(softmax_per_replay=0)
    facts["counts"] = [c for c in facts["counts"] if c["region"] != "DRAFT_DECODE"]
    del facts["regions"]["DRAFT_DECODE"]
    cand.profile = [facts]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "region DRAFT_DECODE present" in rules["cand_no_softmax_dd"].reason


def test_missing_profile_is_inconclusive(tmp_path):
    base, cand = good_arms()
    cand.profile = None
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "trace analysis: 0 trace file(s) analysed" in rules["cand_no_softmax_dd"].reason


def test_nsys_graph_mode_is_inconclusive(tmp_path):
    base, cand = good_arms()
    cand.profile = [file_facts(softmax_per_replay=0, mode="Graph")]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "graph-trace mode" in rules["cand_no_softmax_dd"].reason


def test_baseline_without_softmax_makes_kernel_rules_inconclusive(tmp_path):
    base, cand = good_arms()
    base.profile = [file_facts(softmax_per_replay=0)]
    results, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "baseline: shows softmax in DRAFT_DECODE" in rules["cand_no_softmax_dd"].reason
    assert rules["base_softmax_dd"].verdict == "INCONCLUSIVE"
    assert "the analysis may be blind" in rules["base_softmax_dd"].reason
    assert results.verdict == "INCONCLUSIVE" and results.exit_code == 3


def test_cpu_trace_counts_spans(tmp_path):
    base = Arm(tpot_ms=noisy(10.0), profile=[file_facts(softmax_per_replay=3, cpu=True)])
    cand = Arm(tpot_ms=noisy(9.0), profile=[file_facts(softmax_per_replay=0, cpu=True)])
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["cand_no_softmax_dd"].verdict == "PASS"
    assert rules["cand_no_softmax_dd"].numbers.observations[0].unit == "span"


def test_identical_timings_are_inconclusive_never_pass(tmp_path):
    base, cand = good_arms()
    base.tpot_ms = [10.0] * 6
    cand.tpot_ms = [10.0] * 6
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["tpot"].verdict == "INCONCLUSIVE"


def test_planted_ten_percent_slowdown_fails(tmp_path):
    base, cand = good_arms()
    cand.tpot_ms = noisy(11.0)
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["tpot"].verdict == "FAIL"
    assert rules["tpot"].numbers.fail_kind == "slower"
    assert 1.07 < rules["tpot"].numbers.ratio < 1.13


def test_one_token_difference_fails_output_identity_and_says_where(tmp_path):
    base, cand = good_arms()
    cand.outputs = [[1, 2, 3, 4], [5, 6, 99, 8], [9, 10, 11, 12]]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    r = rules["identity"]
    assert r.verdict == "FAIL"
    assert r.numbers.identical == 12 and r.numbers.compared == 18
    first = r.numbers.first_difference
    assert (first.request_index, first.position, first.baseline_token, first.candidate_token) == (1, 2, 7, 99)


def test_a_run_that_planned_no_timed_trials_compares_the_outputs_of_its_profiled_passes(tmp_path):
    import shutil

    base, cand = good_arms()
    cand.outputs = [[1, 2, 3, 4], [5, 6, 99, 8], [9, 10, 11, 12]]
    run_dir = write_run_dir(tmp_path, base, cand)
    run = json.loads((run_dir / "run.json").read_text())
    for entry in [e for e in run["plan"] if e["kind"] == "timed"]:
        shutil.rmtree(run_dir / entry["dir"])
    run["plan"] = [e for e in run["plan"] if e["kind"] == "profiled"]  # e.g. a bisection step
    (run_dir / "run.json").write_text(json.dumps(run))
    _, rules = rules_by_name(run_dir)
    r = rules["identity"]
    assert r.verdict == "FAIL" and r.numbers.source == "profiled"
    assert (r.numbers.identical, r.numbers.compared) == (2, 3)
    assert r.numbers.first_difference.candidate_trial.endswith("-candidate-profiled")
    # timed trials of one arm only (a sweep's point: the candidate's blocks): still the profiled passes
    run["plan"].append({"index": 99, "variant": "candidate", "kind": "timed", "repetition": 0, "dir": "trials/99-x"})
    (run_dir / "run.json").write_text(json.dumps(run))
    _, rules = rules_by_name(run_dir)
    assert rules["identity"].verdict == "FAIL" and rules["identity"].numbers.source == "profiled"
    # a run that planned timed trials of both arms never falls back: their absence is missing evidence
    run["plan"].append({"index": 98, "variant": "baseline", "kind": "timed", "repetition": 0, "dir": "trials/98-x"})
    (run_dir / "run.json").write_text(json.dumps(run))
    _, rules = rules_by_name(run_dir)
    assert rules["identity"].verdict == "INCONCLUSIVE" and rules["identity"].numbers.source == "timed"
    assert "baseline: timed trials: 0 completed" in rules["identity"].reason


def test_sampled_outputs_are_not_compared(tmp_path):
    _, rules = rules_by_name(write_run_dir(tmp_path, *good_arms(), temperature=0.7))
    assert rules["identity"].verdict == "INCONCLUSIVE" and "temperature 0.7" in rules["identity"].reason


def test_accept_length_change_fails(tmp_path):
    base, cand = good_arms()
    cand.accept_length = 2.3
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["accept"].verdict == "FAIL"
    assert rules["accept"].numbers.ratio == pytest.approx(2.3 / 2.5)


def test_explained_gain_compares_measured_and_predicted_saving(tmp_path):
    _, rules = rules_by_name(write_run_dir(tmp_path, *good_arms()))
    r = rules["explained"]
    n = r.numbers
    # baseline: 2 softmax x 40 us in draft decode + 1 x 40 us in draft extend per cycle, nothing
    # replaces them (planted), 2.5 tokens/cycle
    assert n.saving_us_per_cycle == pytest.approx(120.0)
    assert n.regions["DRAFT_DECODE"].model_dump() == pytest.approx(
        {"baseline_us_per_cycle": 580.0, "candidate_us_per_cycle": 500.0, "saving_us_per_cycle": 80.0})
    assert n.pattern_removed_us_per_cycle == pytest.approx(120.0)
    assert n.predicted_saving_ms == pytest.approx(0.048)
    assert n.ratio == pytest.approx(n.measured_saving_ms / 0.048)
    assert r.verdict == "INFO" and r.reason.startswith("informational (no bound: set min_ratio or max_ratio to judge it): ")


def _with_explained_bounds(**bounds):
    scenario = json.loads(json.dumps(SCENARIO))
    next(c for c in scenario["rules"] if c["kind"] == "explained_gain").update(bounds)
    return scenario


def _arms_with_region_times(candidate_decode_us: float) -> tuple[Arm, Arm]:
    base = Arm(tpot_ms=noisy(10.0), profile=[file_facts(softmax_per_replay=2, region_us={
        "DRAFT_DECODE": 2500.0, "DRAFT_EXTEND": 1300.0, "TARGET_VERIFY": 2000.0})])
    cand = Arm(tpot_ms=noisy(9.0), profile=[file_facts(softmax_per_replay=0, region_us={
        "DRAFT_DECODE": candidate_decode_us, "DRAFT_EXTEND": 1300.0, "TARGET_VERIFY": 2000.0})])
    return base, cand


def test_explained_gain_counts_what_replaced_the_removed_ops(tmp_path):
    # The softmax (120 us per cycle) is gone, but the regions only got 60 us faster: the argmax
    # that replaced it costs the rest. The prediction follows the regions, not the pattern.
    base, cand = _arms_with_region_times(candidate_decode_us=2440.0)
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    n = rules["explained"].numbers
    assert n.saving_us_per_cycle == pytest.approx(60.0)
    assert n.pattern_removed_us_per_cycle == pytest.approx(120.0)
    assert n.predicted_saving_ms == pytest.approx(0.024)


def test_explained_gain_passes_inside_its_bounds_and_fails_outside(tmp_path):
    # measured ~1 ms/token; the regions lost 2500 us per cycle = 1 ms/token at 2.5 tokens/cycle
    base, cand = _arms_with_region_times(candidate_decode_us=0.0)
    run = write_run_dir(tmp_path / "in", base, cand, scenario=_with_explained_bounds(min_ratio=0.5, max_ratio=2.0))
    results, rules = rules_by_name(run)
    assert rules["explained"].verdict == "PASS", rules["explained"].reason
    assert 0.9 < rules["explained"].numbers.ratio < 1.1 and results.verdict == "PASS"
    # a profile that shows far less change than TPOT did: the gain is not the change's
    base, cand = _arms_with_region_times(candidate_decode_us=2400.0)
    run = write_run_dir(tmp_path / "out", base, cand, scenario=_with_explained_bounds(min_ratio=0.5, max_ratio=2.0))
    results, rules = rules_by_name(run)
    r = rules["explained"]
    assert r.verdict == "FAIL" and "> 2.0: TPOT gained more than the profiles explain" in r.reason
    assert results.verdict == "FAIL"
    # and a TPOT gain far below what the profiles promise (a broken timing, or a cost elsewhere)
    base, cand = _arms_with_region_times(candidate_decode_us=0.0)
    base.tpot_ms, cand.tpot_ms = noisy(10.0, cv=0.001), noisy(9.95, cv=0.001)
    run = write_run_dir(tmp_path / "low", base, cand, scenario=_with_explained_bounds(min_ratio=0.5))
    _, rules = rules_by_name(run)
    r = rules["explained"]
    lo, hi = r.numbers.ratio_ci
    assert 0 < lo < r.numbers.ratio < hi < 0.5
    assert r.verdict == "FAIL" and "< 0.5: the profiles' saving does not reach TPOT" in r.reason


def test_explained_gain_is_inconclusive_when_the_tpot_interval_straddles_a_bound(tmp_path):
    # A real saving, but TPOT so noisy that the ratio's interval reaches both sides of the bound.
    base, cand = _arms_with_region_times(candidate_decode_us=0.0)
    base.tpot_ms, cand.tpot_ms = noisy(10.0, cv=0.15), noisy(9.0, cv=0.15)
    run = write_run_dir(tmp_path, base, cand, scenario=_with_explained_bounds(min_ratio=0.5, max_ratio=2.0))
    _, rules = rules_by_name(run)
    r = rules["explained"]
    lo, hi = r.numbers.ratio_ci
    assert lo < 0.5 or hi > 2.0
    assert r.verdict == "INCONCLUSIVE" and "the interval straddles >= 0.5 and <= 2.0" in r.reason


def test_explained_gain_scales_away_a_slower_profiled_machine(tmp_path):
    # The candidate's profiled trial ran on a machine 1.5x slower: every region, the untouched
    # target verify too. Scaled by TARGET_VERIFY the saving is the real one; unscaled it is not.
    base = Arm(tpot_ms=noisy(10.0), profile=[file_facts(softmax_per_replay=2, region_us={
        "DRAFT_DECODE": 2500.0, "DRAFT_EXTEND": 1300.0, "TARGET_VERIFY": 2000.0})])
    cand = Arm(tpot_ms=noisy(9.0), profile=[file_facts(softmax_per_replay=0, region_us={
        "DRAFT_DECODE": 1500.0 * 1.5, "DRAFT_EXTEND": 1300.0 * 1.5, "TARGET_VERIFY": 2000.0 * 1.5})])
    _, rules = rules_by_name(write_run_dir(tmp_path / "scaled", base, cand))
    n = rules["explained"].numbers
    assert n.candidate_scale == pytest.approx(2 / 3)
    assert n.saving_us_per_cycle == pytest.approx(1000.0)
    assert "candidate scaled x0.667 by TARGET_VERIFY" in rules["explained"].reason
    _, rules = rules_by_name(write_run_dir(tmp_path / "unscaled", base, cand,
                                           scenario=_with_explained_bounds(reference_region=None)))
    assert rules["explained"].numbers.saving_us_per_cycle == pytest.approx(2500 + 1300 - 1.5 * (1500 + 1300))


def _cpu_facts_with_spans(per_cycle_us: dict[str, np.ndarray]) -> dict:
    """A CPU trace's analysis whose regions have one span per cycle with the given durations, in
    cycle order decode, verify, extend, 10 ms apart."""
    cycles = len(per_cycle_us["TARGET_VERIFY"])
    facts = file_facts(softmax_per_replay=0, replays=cycles, cpu=True,
                       region_us={r: float(np.mean(v)) for r, v in per_cycle_us.items()})
    offsets = {"DRAFT_DECODE": 0.0, "TARGET_VERIFY": 4000.0, "DRAFT_EXTEND": 7000.0}
    for region, durations in per_cycle_us.items():
        facts["region_times"][region].update(
            robust_time_us=float(np.median(durations)) * cycles,
            spans_us=[[10000.0 * k + offsets[region], float(d)] for k, d in enumerate(durations)])
    return facts


def test_explained_gain_scales_cycle_by_cycle_where_the_trace_has_spans(tmp_path):
    # The candidate's machine slows from 0.7x to 1.6x during its profiled trial, shared by the
    # regions of one cycle; one cycle's draft decode is also caught by another process (+5 ms). The
    # regions lost 1000 us per cycle. Each span set against its own cycle's verify, and the median
    # over cycles, gives that saving; the same traces without spans fall back to the whole trial.
    cycles = 19
    true = {"DRAFT_DECODE": (2500.0, 1500.0), "DRAFT_EXTEND": (1300.0, 1300.0), "TARGET_VERIFY": (2000.0, 2000.0)}
    arms = []
    for which, speed in ((0, np.ones(cycles)), (1, np.linspace(0.7, 1.6, cycles))):
        times = {r: v[which] * speed for r, v in true.items()}
        times["DRAFT_DECODE"][3] += 5000.0
        arms.append(Arm(tpot_ms=noisy(10.0 - which), profile=[_cpu_facts_with_spans(times)]))
    _, rules = rules_by_name(write_run_dir(tmp_path / "spans", *arms))
    n = rules["explained"].numbers
    assert n.scaled == "per_cycle" and "scaled cycle by cycle by TARGET_VERIFY" in rules["explained"].reason
    assert n.saving_us_per_cycle == pytest.approx(1000.0)
    assert n.regions["DRAFT_DECODE"].candidate_us_per_cycle == pytest.approx(1500.0)
    for arm in arms:  # the same traces analysed before spans were recorded
        for facts in arm.profile:
            for fact in facts["region_times"].values():
                del fact["spans_us"]
    _, rules = rules_by_name(write_run_dir(tmp_path / "no-spans", *arms))
    assert rules["explained"].numbers.scaled == "per_trial" and "candidate scaled x" in rules["explained"].reason


def test_explained_gain_uses_the_robust_region_time(tmp_path):
    # On a CPU trace one cycle caught by another process inflates the total; the analysis also
    # gives a median-based total, which the rule prefers.
    base, cand = good_arms()
    cand.profile[0]["region_times"]["DRAFT_DECODE"].update(time_us=9000.0 * 10, robust_time_us=500.0 * 10)
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    assert rules["explained"].numbers.regions["DRAFT_DECODE"].candidate_us_per_cycle == pytest.approx(500.0)


def test_explained_gain_without_region_times_is_inconclusive(tmp_path):
    base, cand = good_arms()
    for facts in cand.profile:
        del facts["region_times"]  # an analysis.json written before region times existed
    run = write_run_dir(tmp_path, base, cand, scenario=_with_explained_bounds(min_ratio=0.5))
    _, rules = rules_by_name(run)
    r = rules["explained"]
    assert r.verdict == "INCONCLUSIVE" and "candidate: profiled traces with region times" in r.reason


def test_informational_rules_do_not_decide_the_overall_verdict():
    assert overall_verdict(["PASS", "INFO"]) == "PASS"
    assert overall_verdict(["FAIL", "INFO"]) == "FAIL"
    assert overall_verdict(["INFO"]) == "INCONCLUSIVE"  # nothing that can fail was checked


def test_incomplete_run_is_inconclusive_with_the_reason(tmp_path):
    results, rules = rules_by_name(write_run_dir(tmp_path, *good_arms(), status="incomplete"))
    assert rules["run_complete"].verdict == "INCONCLUSIVE"
    assert results.verdict == "INCONCLUSIVE"


def test_overall_verdict_order():
    assert overall_verdict(["PASS", "INCONCLUSIVE", "FAIL"]) == "FAIL"
    assert overall_verdict(["PASS", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert overall_verdict(["PASS"]) == "PASS"
    assert overall_verdict([]) == "INCONCLUSIVE"


def test_check_cli_writes_results_and_rechecks_with_new_thresholds(tmp_path, capsys):
    run = write_run_dir(tmp_path, *good_arms())
    assert main(["check", str(run)]) == 0
    stored = json.loads((run / "results.json").read_text())
    assert stored["verdict"] == "PASS" and stored["exit_code"] == 0
    assert [r["name"] for r in stored["rules"]] == ["cand_no_softmax_dd", "base_softmax_dd", "accept", "identity",
                                                   "tpot", "explained"]
    assert "verdict: PASS" in capsys.readouterr().out
    # the same data under a stricter rule: a 10% gain does not clear a 20% minimum
    text = (run / "scenario.yaml").read_text().replace("min_gain: 0.01", "min_gain: 0.2")
    (tmp_path / "strict.yaml").write_text(text)
    assert main(["check", str(run), "--scenario", str(tmp_path / "strict.yaml")]) == 1
    assert json.loads((run / "results.json").read_text())["verdict"] == "FAIL"


def test_check_cli_bad_run_dir_is_one_line_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run directory" in err
    (tmp_path / "run.json").write_text("{broken")
    assert main(["check", str(tmp_path)]) == 2
    assert "run.json:1: not valid JSON" in capsys.readouterr().err


def test_aa_run_reports_noise_floor_and_no_false_verdict(tmp_path):
    a = Arm(tpot_ms=noisy(10.0, n=8))
    b = Arm(tpot_ms=noisy(10.0, n=8))
    _results, rules = rules_by_name(write_run_dir(tmp_path, a, b, aa=True))
    r = rules["aa_noise_floor"]
    assert r.verdict == "PASS", r.reason
    assert "smallest detectable gain" in r.reason
    assert r.numbers.noise.cv is not None
    assert "cand_no_softmax_dd" not in rules  # kernel rules do not apply to A/A


def test_compare_two_runs(tmp_path, capsys):
    global rng
    rng = np.random.default_rng(7)  # its own draws: the outcome must not depend on the tests before it
    run_a = write_run_dir(tmp_path / "a", *good_arms())
    base, cand = good_arms()
    cand.tpot_ms = noisy(10.0)  # today's candidate is 11% slower than yesterday's
    run_b = write_run_dir(tmp_path / "b", base, cand)
    assert main(["compare", str(run_a), str(run_b), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    verdicts = {r["name"]: r["verdict"] for r in out["rules"]}
    assert verdicts["tpot_not_slower"] == "FAIL"
    assert verdicts["outputs_unchanged"] == "PASS"
    assert verdicts["pattern_counts_unchanged"] == "PASS"
    # a run against itself: not slower beyond the 2% tolerance, same outputs and counts
    assert main(["compare", str(run_a), str(run_a)]) == 0


def test_eager_softmax_in_a_graph_region_fails_a_zero_rule(tmp_path):
    # The graph replays are clean, but the eager site after the draft-extend graph kept its softmax.
    base, cand = good_arms()
    facts = file_facts(softmax_per_replay=0)
    from support.rundir_factory import count_row
    facts["counts"].append(count_row("DRAFT_DECODE", "span", "softmax", [1] * 10, time_us=400.0))
    cand.profile = [facts]
    _, rules = rules_by_name(write_run_dir(tmp_path, base, cand))
    r = rules["cand_no_softmax_dd"]
    assert r.verdict == "FAIL"
    assert "0..0 (and 10 launched eagerly in the region, outside its graph replays), expected == 0" in r.reason
    assert r.numbers.observations[0].eager_total == 10


def test_terminal_table_shows_informational_rules_apart(tmp_path, capsys):
    run = write_run_dir(tmp_path, *good_arms())
    assert main(["check", str(run)]) == 0
    out = capsys.readouterr().out
    judged, _, info = out.partition("informational (no bound set: not part of the verdict)")
    assert info, out
    assert "explained" not in judged and "tpot" in judged
    assert "explained" in info and "INFO" in info and "verdict: PASS" in info
