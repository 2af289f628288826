"""The trial plan: ABBA order, seeded random blocks, A/A arms, profiled trials first."""

from __future__ import annotations

from sglang_spec_harness.run.plan import plan_trials
from sglang_spec_harness.scenario import scenario_from_dict


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
    assert plan[1].entry().dir == "trials/01-candidate-profiled"


def test_default_order_is_random_with_a_fresh_seed_per_run():
    from sglang_spec_harness.run.plan import with_run_seed

    s = scenario(repetitions=12, profiled=0)
    assert s.trials.order == "random" and s.trials.seed is None
    seeds = {with_run_seed(s).trials.seed for _ in range(5)}
    assert len(seeds) > 1 and None not in seeds
    resolved = with_run_seed(s)
    assert with_run_seed(resolved) is resolved  # a recorded seed is kept: the plan is reproducible
    assert plan_trials(resolved) == plan_trials(resolved)


def warm(**trials):
    return scenario_from_dict(
        {
            "name": "p",
            "engine": "micro",
            "variants": {"baseline": {"args": {"--disable-topk1-fast-path": True}}, "candidate": {}},
            "workload": {"num_requests": 4},
            "trials": {"seed": 5, **trials},
        }
    )


def test_interleaved_plan_rotates_launches_so_every_combination_meets():
    from sglang_spec_harness.run.plan import make_plan

    plan = make_plan(warm(mode="interleaved", repetitions=8, launches=2, profiled=1))
    assert [launch.dir for launch in plan.launches] == [
        "launches/00-baseline-launch0", "launches/01-candidate-launch0",
        "launches/02-baseline-launch1", "launches/03-candidate-launch1"]
    timed = [t for t in plan.trials if t.kind == "timed"]
    # profiled passes come after every timed block: the profiler's leftovers cannot slow a block
    assert [t.kind for t in plan.trials[-2:]] == ["profiled", "profiled"] and plan.trials[:16] == timed
    by_round: dict[int, dict[str, int]] = {}
    for t in timed:
        by_round.setdefault(t.repetition, {})[t.variant] = plan.launches[t.launch].number
    combos = [(r["baseline"], r["candidate"]) for _, r in sorted(by_round.items())]
    assert sorted(combos) == sorted([(0, 0), (1, 1), (0, 1), (1, 0)] * 2)
    # each round: both arms, adjacent, on the same prompts; rounds on fresh prompts
    for r in range(8):
        pair = timed[2 * r: 2 * r + 2]
        assert {t.variant for t in pair} == {"baseline", "candidate"} and {t.repetition for t in pair} == {r}
        assert {t.first_prompt for t in pair} == {4 * r}
    profiled = [t for t in plan.trials if t.kind == "profiled"]
    assert all(t.first_prompt == 32 and plan.launches[t.launch].number == 0 for t in profiled)


def test_sequential_plan_runs_one_launch_at_a_time_with_contiguous_rounds():
    from sglang_spec_harness.run.plan import make_plan

    plan = make_plan(warm(mode="sequential", repetitions=7, launches=2, profiled=1))
    launches = [plan.launch_of(t).index for t in plan.trials]
    # a launch's trials are contiguous: it starts, serves, stops, and never comes back
    assert [k for i, k in enumerate(launches) if i == 0 or launches[i - 1] != k] == sorted(set(launches))
    for launch in plan.launches:
        served = plan.trials_of_launch(launch)
        assert served[-1].kind == ("profiled" if launch.number == 0 else "timed")
        rounds = [t.repetition for t in served if t.kind == "timed"]
        assert rounds == ([0, 1, 2, 3] if launch.number == 0 else [4, 5, 6])


def test_warm_fields_are_validated_against_the_mode():
    import pytest as _pytest

    from sglang_spec_harness.errors import HarnessInputError

    with _pytest.raises(HarnessInputError, match="trials.launches: only for mode interleaved or sequential"):
        warm(launches=2)
    with _pytest.raises(HarnessInputError, match="trials.launches: 3 launches per arm but 2 repetitions"):
        warm(mode="interleaved", repetitions=2, launches=3)
    assert warm(mode="interleaved", repetitions=4).trials.launches_per_arm == 2


def test_nsys_profiles_get_their_own_launch_in_warm_modes():
    from sglang_spec_harness.run.plan import make_plan

    s = scenario_from_dict({
        "name": "p", "engine": "micro", "variants": {"baseline": {}, "candidate": {}},
        "trials": {"mode": "interleaved", "repetitions": 4, "seed": 1}, "profile": {"nsys": {"enabled": True}},
    })
    plan = make_plan(s)
    assert all(t.launch is None for t in plan.trials if t.kind == "profiled")
    assert all(t.launch is not None for t in plan.trials if t.kind == "timed")


def test_interleaved_by_pairs_keeps_one_launch_per_arm_up_and_profiles_each_pair_last():
    from sglang_spec_harness.run.plan import make_plan

    plan = make_plan(warm(mode="interleaved", servers_up="pair", repetitions=6, launches=2, profiled=2))
    numbers = [plan.launch_of(t).number for t in plan.trials]
    assert numbers == sorted(numbers)  # pair 0 is done before pair 1 starts
    kinds = [(t.kind, plan.launch_of(t).number) for t in plan.trials]
    assert kinds[6:8] == [("profiled", 0)] * 2 and kinds[14:16] == [("profiled", 1)] * 2
    timed = [t for t in plan.trials if t.kind == "timed"]
    assert [t.repetition for t in timed] == [r for r in range(6) for _ in range(2)]


def test_a_subset_keeps_its_place_in_the_full_plan_so_subsets_compose():
    from sglang_spec_harness.run.plan import make_plan

    for s in (scenario(repetitions=3, profiled=1, seed=2),
              warm(mode="interleaved", repetitions=4, launches=2, profiled=1),
              warm(mode="sequential", repetitions=4, launches=2, profiled=2)):
        full = make_plan(s)
        base = make_plan(s, select={("baseline", "profiled")})
        cand = make_plan(s, select=[("candidate", "profiled"), ("candidate", "timed")])
        assert base.mode == cand.mode == full.mode
        assert [(t.variant, t.kind) for t in base.trials] == [("baseline", "profiled")] * s.trials.profiled
        assert all(t.variant == "candidate" for t in cand.trials) and any(t.kind == "timed" for t in cand.trials)
        # same index, directory, prompts and launch as in the full plan: two subsets fit together
        assert sorted(base.trials + cand.trials, key=lambda t: t.index) == [t for t in full.trials if t in base.trials + cand.trials]
        assert not {t.dir for t in base.trials} & {t.dir for t in cand.trials}
        for part in (base, cand):
            assert {launch.index for launch in part.launches} == {t.launch for t in part.trials} - {None}
            assert all(part.launch_of(t) == full.launch_of(t) for t in part.trials)
    s = warm(mode="interleaved", repetitions=4, launches=2, profiled=1)
    assert [launch.dir for launch in make_plan(s, select={("candidate", "profiled")}).launches] == ["launches/01-candidate-launch0"]
    assert make_plan(scenario(profiled=0), select={("candidate", "profiled")}).trials == []
