"""The mixed model of blocks nested in launches (warm modes): fit, interval, verdicts, coverage."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_spec_harness.run.plan import rotation, round_launch_pairs
from sglang_spec_harness.verdict import stats


def design(launches: int, rounds: int, mode: str = "interleaved") -> list[tuple[bool, str, int]]:
    """(candidate?, launch id, time block) per block, as the planner lays them out."""
    pair = round_launch_pairs(rounds, launches)
    rows = []
    for r in range(rounds):
        for arm in (0, 1):
            j = rotation(arm, r, launches) if mode == "interleaved" else pair[r]
            rows.append((arm == 1, f"{arm}-{j}", r if mode == "interleaved" else pair[r]))
    return rows


def simulate(rng, rows, *, ratio=1.0, s_launch=0.0, s_block=0.04, s_round=0.05):
    launch = {lid: rng.normal(0, s_launch) for _, lid, _ in rows}
    rnd = {tb: rng.normal(0, s_round) for *_, tb in rows}
    return [float(np.exp(np.log(ratio) * cand + launch[lid] + rnd[tb] + rng.normal(0, s_block)))
            for cand, lid, tb in rows]


def decide(values, rows, **kw):
    return stats.nested_tpot_gain_decision(values, [c for c, _, _ in rows], [lid for _, lid, _ in rows],
                                           [tb for *_, tb in rows], **{"min_gain": 0.01, **kw})


def test_exact_log_ratio_is_recovered_without_noise():
    rows = design(2, 8)
    values = [10.0 * (0.8 if cand else 1.0) * (1.0 + 0.01 * tb) for cand, _, tb in rows]
    fit = stats.fit_nested(values, [c for c, _, _ in rows], [lid for _, lid, _ in rows], [tb for *_, tb in rows])
    assert fit.log_ratio == pytest.approx(np.log(0.8), abs=1e-12) and fit.se == pytest.approx(0.0, abs=1e-9)


def test_a_clear_gain_passes_and_a_clear_slowdown_fails():
    rng = np.random.default_rng(1)
    rows = design(2, 24)
    decision, fit = decide(simulate(rng, rows, ratio=0.8), rows)
    assert decision.verdict == "PASS", decision.reason
    assert fit.n_launches == {"baseline": 2, "candidate": 2} and fit.n_blocks == 48 and fit.n_time_blocks == 24
    decision, _ = decide(simulate(rng, rows, ratio=1.10), rows)
    assert decision.verdict == "FAIL" and decision.fail_kind == "slower", decision.reason


def test_one_launch_per_arm_is_never_reliable():
    rng = np.random.default_rng(2)
    rows = design(1, 24)
    decision, fit = decide(simulate(rng, rows, ratio=0.7), rows)
    assert decision.verdict == "INCONCLUSIVE" and "launch" in decision.reason
    assert not decision.estimate.reliable and fit.sd_launch is None


def test_a_visible_launch_effect_widens_the_interval():
    rng = np.random.default_rng(3)
    rows = design(3, 24)
    quiet = [decide(simulate(rng, rows, ratio=0.9), rows)[1] for _ in range(30)]
    noisy = [decide(simulate(rng, rows, ratio=0.9, s_launch=0.08), rows)[1] for _ in range(30)]
    assert np.median([f.se for f in noisy]) > 2 * np.median([f.se for f in quiet])
    assert np.median([f.df for f in noisy]) < 8 < np.median([f.df for f in quiet])
    assert sum(f.pooled for f in noisy) <= 3 and sum(f.pooled for f in quiet) >= 15
    # the report's spreads: the launch spread found is of the planted size
    assert 0.04 < np.median([f.sd_launch for f in noisy]) < 0.14


def test_the_pooling_level_is_a_parameter_of_the_fit():
    """pool_p=0 pools even a visible launch effect (df = blocks - fixed effects); the rule's level keeps
    it (df near the containment df); the reason names the level used."""
    rng = np.random.default_rng(3)
    rows = design(3, 24)
    values = simulate(rng, rows, ratio=0.9, s_launch=0.08)
    args = (values, [c for c, _, _ in rows], [lid for _, lid, _ in rows], [tb for *_, tb in rows])
    rule = stats.fit_nested(*args)
    always = stats.fit_nested(*args, pool_p=0.0)
    assert not rule.pooled and rule.df < 8
    assert always.pooled and always.df == 48 - 25 and always.se < rule.se
    assert ">= 0): pooled" in always.reason and "visible" in rule.reason


@pytest.mark.parametrize("mode", ["interleaved", "sequential"])
def test_coverage_near_nominal_without_launch_effects(mode):
    rng = np.random.default_rng(4)
    rows = design(2, 16, mode)
    hits = 0
    for _ in range(200):
        est = decide(simulate(rng, rows, s_launch=0.0), rows)[0].estimate
        hits += est.ci_low <= 1.0 <= est.ci_high
    assert 0.92 <= hits / 200 <= 1.0


def test_launch_serving_both_arms_is_a_programmer_error():
    with pytest.raises(ValueError, match="serves both arms"):
        stats.fit_nested([1.0, 1.1, 1.2, 1.3], [False, True, False, True], ["a", "a", "b", "b"], [0, 0, 1, 1])


@pytest.mark.parametrize("values", [[1.0, float("nan"), 1.0, 1.0], [1.0, -2.0, 1.0, 1.0]])
def test_bad_values_are_inconclusive(values):
    rows = design(2, 2)
    decision, fit = decide(values, rows)
    assert decision.verdict == "INCONCLUSIVE" and fit.log_ratio is None


def test_coverage_when_launches_really_differ():
    """Launch effects twice the block noise: where the launch term is kept, the interval (containment
    df at least) covers; the few runs whose launches happened to look alike are pooled and cover
    less, which the overall figure includes (the price of the sometimes-pool rule)."""
    rng = np.random.default_rng(5)
    rows = design(2, 16)
    kept_hits = kept = hits = 0
    for _ in range(300):
        est, fit = decide(simulate(rng, rows, s_launch=0.06, s_block=0.03), rows)
        inside = est.estimate.ci_low <= 1.0 <= est.estimate.ci_high
        hits += inside
        if not fit.pooled:
            kept, kept_hits = kept + 1, kept_hits + inside
    assert kept >= 250 and kept_hits / kept >= 0.95
    assert hits / 300 >= 0.88


def test_one_block_per_launch_pools_and_says_the_launch_effect_is_not_testable():
    """Found making the 0.1.0 fixtures: an adaptive run's first look had one block per launch, and
    the reason's format crashed on the F test's missing p."""
    rows = [(False, "0-0", 0), (True, "1-0", 0), (False, "0-1", 1), (True, "1-1", 1)]
    fit = stats.fit_nested([10.0, 8.1, 10.4, 8.0], [c for c, _, _ in rows], [lid for _, lid, _ in rows],
                           [tb for *_, tb in rows])
    assert fit.launch_p is None and fit.pooled
    assert fit.reason == "launch effect not testable (no spread within launches): pooled into block noise"
