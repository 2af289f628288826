"""The trial plan: ABBA order, seeded random blocks, A/A arms, profiled trials first."""

from __future__ import annotations

from harness.run.plan import plan_trials
from harness.scenario import scenario_from_dict


def scenario(**trials):
    return scenario_from_dict(
        {
            "name": "p",
            "engine": "micro",
            "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {}},
            "trials": trials,
        }
    )


def letters(plan, kind):
    return "".join("A" if t.variant == "baseline" else "B" for t in plan if t.kind == kind)


def test_abba_order_profiled_first_and_indices_dense():
    plan = plan_trials(scenario(repetitions=4, profiled=1, order="abba"))
    assert [t.kind for t in plan] == ["profiled"] * 2 + ["timed"] * 8
    assert letters(plan, "timed") == "ABBAABBA"
    assert [t.index for t in plan] == list(range(10))
    assert [t.dir_name for t in plan[:3]] == ["00-baseline-profiled", "01-candidate-profiled", "02-baseline-timed"]
    # every arm gets exactly `repetitions` timed trials, numbered 0..n-1
    for arm in ("baseline", "candidate"):
        assert [t.repetition for t in plan if t.variant == arm and t.kind == "timed"] == [0, 1, 2, 3]
    assert all(t.config == t.variant for t in plan)


def test_abba_generalises_to_three_arms():
    s = scenario_from_dict(
        {"name": "p", "engine": "micro", "variants": {"baseline": {}, "candidate": {}, "other": {}},
         "trials": {"repetitions": 2, "profiled": 0, "order": "abba"}}
    )
    assert [t.variant for t in plan_trials(s)] == ["baseline", "candidate", "other", "other", "candidate", "baseline"]


def test_random_order_is_seeded_balanced_blocks():
    first = plan_trials(scenario(repetitions=10, profiled=0, order="random", seed=7))
    again = plan_trials(scenario(repetitions=10, profiled=0, order="random", seed=7))
    other = plan_trials(scenario(repetitions=10, profiled=0, order="random", seed=8))
    assert first == again
    assert letters(first, "timed") != letters(other, "timed")
    # randomised blocks: each consecutive pair holds one trial of each arm
    timed = letters(first, "timed")
    assert all(sorted(timed[i : i + 2]) == ["A", "B"] for i in range(0, len(timed), 2))
    assert letters(first, "timed") not in ("AB" * 10, "ABBA" * 5)


def test_aa_mode_runs_the_baseline_configuration_in_both_arms():
    plan = plan_trials(scenario(repetitions=2, profiled=1, order="abba"), aa=True)
    assert {t.variant for t in plan} == {"baseline", "candidate"}
    assert {t.config for t in plan} == {"baseline"}
    assert plan[1].to_json_dict()["dir"] == "trials/01-candidate-profiled"


def test_default_order_is_random_with_a_fresh_seed_per_run():
    from harness.run.plan import with_run_seed

    s = scenario(repetitions=12, profiled=0)
    assert s.trials.order == "random" and s.trials.seed is None
    seeds = {with_run_seed(s).trials.seed for _ in range(5)}
    assert len(seeds) > 1 and None not in seeds
    resolved = with_run_seed(s)
    assert with_run_seed(resolved) is resolved  # a recorded seed is kept: the plan is reproducible
    assert plan_trials(resolved) == plan_trials(resolved)
