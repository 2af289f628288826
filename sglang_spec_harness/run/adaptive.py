"""The adaptive design (`trials.budget`): what a run does at each look.

A budgeted interleaved run goes in stages. Stage 0 is the profiled passes (first, on the warm
launches): after it, the exact rules (kernel counts, whose answer no amount of timing changes) are
evaluated, and a FAIL ends the run at once. Stage 1 is `trials.repetitions` rounds; after it and after
each later stage the TPOT rule is evaluated at the look's nominal level (sglang_spec_harness.verdict.stats.
sequential: alpha spending over the information fraction rounds / max_rounds), and so are the rules
judged on the TPOT interval (explained_gain with a bound). The run stops when a TPOT rule FAILs, when
all of them are decisive (PASS or FAIL), or when the budget is spent (INCONCLUSIVE, with the
smallest gain the data could detect); otherwise the next stage adds rounds, or one launch per arm
when launch-to-launch variance is the larger part of the estimate's variance and a launch is left.

Each look is recorded in run.json (`looks`), with what it saw, what it decided and why; the final
verdict's TPOT rule uses the last look's level (sglang_spec_harness.verdict.rules.tpot_gain), so `harness check` gives the
run's own answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness.pages.numbers import fmt, pct, seconds
from sglang_spec_harness.rundir.models import LookRecord, RuleResult, TpotGainResult
from sglang_spec_harness.rundir.rule_numbers import NestedFitNumbers
from sglang_spec_harness.rundir.read import load_run_dir
from sglang_spec_harness.scenario import ExplainedGainRule, KernelCountRule, Scenario, TpotGainRule
from sglang_spec_harness.vocabulary import FAIL, PASS


@dataclass(frozen=True)
class Next:
    """What a look decided: stop (with why), or the next stage's rounds and launches per arm."""

    stop: bool
    why: str
    rounds: int = 0
    launches_per_arm: int = 0


def exact_look(run_dir: Path, scenario: Scenario, elapsed_s: float) -> tuple[LookRecord, Next]:
    """After the profiled passes: a kernel-count rule that FAILs is certain: the run ends. Not in an
    A/A run, whose arms both run the baseline (its verdict has no kernel rules)."""
    from sglang_spec_harness.verdict.rules.registry import EVALUATORS

    run = load_run_dir(run_dir)
    failed = []
    for rule in [] if run.aa else scenario.rules:
        if isinstance(rule, KernelCountRule):
            result = EVALUATORS[rule.kind](run, rule)
            if result.verdict == FAIL:
                failed.append(f"{rule.name}: {result.reason}")
    spec = scenario.trials
    if failed:
        why = f"exact rule FAIL after the profiled passes, no timing can change it: {failed[0]}"
        nxt = Next(True, why)
    else:
        nxt = Next(False, "exact rules hold or wait for more evidence: timing starts",
                   spec.repetitions, spec.launches_per_arm)
    return LookRecord(kind="exact", rounds=0, launches_per_arm=spec.launches_per_arm, elapsed_s=round(elapsed_s, 3),
                      action="stop" if nxt.stop else "start rounds", reason=nxt.why), nxt


def tpot_look(run_dir: Path, scenario: Scenario, looks: list[LookRecord], *, rounds: int, launches_per_arm: int,
              elapsed_s: float, per_round_s: float, launch_s: float) -> tuple[LookRecord, Next]:
    """After a stage of rounds: the TPOT rules at this look's level; stop or grow."""
    from sglang_spec_harness.verdict.judge import informational
    from sglang_spec_harness.verdict.rules.registry import EVALUATORS
    from sglang_spec_harness.verdict.rules.tpot_gain import look_levels, tpot_rule_at

    spec = scenario.trials
    budget = spec.budget
    assert budget is not None
    run = load_run_dir(run_dir)
    fractions = [look.fraction for look in looks if look.fraction is not None] + [rounds / budget.max_rounds]
    tpot_rules = [c for c in scenario.rules if isinstance(c, TpotGainRule)]
    if not tpot_rules:
        raise ValueError("trials.budget needs a tpot_gain rule to look at")
    results = []
    for rule in tpot_rules:
        alpha, _ = look_levels(rule, fractions, budget.spending)[-1]
        results.append(tpot_rule_at(run, rule, alpha))
    # Judged on the TPOT interval too: a run stopped with one of them INCONCLUSIVE would end INCONCLUSIVE
    # where more rounds could decide it (an explained gain whose interval reached past max_ratio).
    inherits = [] if run.aa else [EVALUATORS[c.kind](run, c) for c in scenario.rules
                                  if isinstance(c, ExplainedGainRule) and not informational(c)]
    first = results[0]
    n = first.numbers
    nested = n.nested or NestedFitNumbers()
    record = dict(kind="tpot", rounds=rounds, launches_per_arm=launches_per_arm, fraction=fractions[-1],
                  nominal_alpha=look_levels(tpot_rules[0], fractions, budget.spending)[-1][0],
                  verdict=str(first.verdict), ratio=n.ratio, ci_low=n.ci_low, ci_high=n.ci_high,
                  min_detectable_gain=n.min_detectable_gain, sd_launch=nested.sd_launch,
                  sd_block=nested.sd_block, df=nested.df, elapsed_s=round(elapsed_s, 3))
    nxt = decide_next(scenario, results, inherits, rounds=rounds, launches_per_arm=launches_per_arm, nested=nested,
                      elapsed_s=elapsed_s, per_round_s=per_round_s, launch_s=launch_s)
    action = "stop" if nxt.stop else (f"add {nxt.rounds} rounds" + (
        f" and launch {nxt.launches_per_arm} per arm" if nxt.launches_per_arm > launches_per_arm else ""))
    return LookRecord(**record, action=action, reason=nxt.why), nxt


def decide_next(scenario: Scenario, results: list[TpotGainResult], inherits: list[RuleResult], *, rounds: int,
                launches_per_arm: int, nested: NestedFitNumbers, elapsed_s: float, per_round_s: float,
                launch_s: float) -> Next:
    """Stop or grow. `results`: the TPOT rules at the look's level; `inherits`: the rules judged on
    the TPOT interval (they decide nothing alone: a TPOT FAIL ends the run whatever they say)."""
    spec = scenario.trials
    budget = spec.budget
    assert budget is not None
    if any(r.verdict == FAIL for r in results) or all(r.verdict in (PASS, FAIL) for r in [*results, *inherits]):
        return Next(True, "decisive: " + "; ".join(f"{r.name} {r.verdict}" for r in [*results, *inherits]))
    waiting = next((r for r in [*results, *inherits] if r.verdict not in (PASS, FAIL)), results[0])
    if waiting is not results[0] and results[0].verdict in (PASS, FAIL):
        waiting_on = f"{results[0].name} {results[0].verdict}, {waiting.name} {waiting.verdict}"
    else:
        waiting_on = str(waiting.verdict)
    mde = results[0].numbers.min_detectable_gain
    detect = f"; at this point it detects gains >= {pct(mde, 2)}" if mde is not None else ""
    if rounds >= budget.max_rounds:
        return Next(True, f"budget spent: {rounds} of {budget.max_rounds} rounds{detect}")
    add = min(spec.stage_rounds, budget.max_rounds - rounds)
    room = launches_per_arm < spec.max_launches_per_arm
    launch_bound = budget.grow == "auto" and launch_noise_dominates(nested, rounds, launches_per_arm)
    grow = room and (budget.grow == "launches" or launch_bound)
    cost = add * per_round_s + (launch_s if grow else 0.0)
    if budget.max_minutes is not None and elapsed_s + cost > budget.max_minutes * 60:
        return Next(True, f"budget spent: the next stage (~{seconds(cost)}) would end past {fmt(budget.max_minutes)} min "
                          f"({seconds(elapsed_s)} so far){detect}")
    if grow and budget.grow == "launches":
        return Next(False, f"not decisive ({waiting_on}); budget.grow launches: one more launch per arm{detect}",
                    add, launches_per_arm + 1)
    if grow:
        why = (f"launch-to-launch sd {pct(nested.sd_launch, 2)} over {launches_per_arm} launches per arm outweighs "
               f"block-to-block sd {pct(nested.sd_block, 2)} over {rounds} rounds: one more launch per arm")
        return Next(False, why, add, launches_per_arm + 1)
    if launch_bound:  # no launch left: rounds are all a stage can add (they narrow the launch estimate, not the term)
        why = (f"launch-to-launch sd {pct(nested.sd_launch, 2)} outweighs block-to-block sd {pct(nested.sd_block, 2)}, "
               f"but max_launches ({spec.max_launches_per_arm}) is reached: more rounds")
    elif nested.sd_block is not None:
        why = "block-to-block noise is the larger part: more rounds"
    else:
        why = "more rounds"
    return Next(False, f"not decisive ({waiting_on}); {why}{detect}", add, launches_per_arm)


def launch_noise_dominates(nested: NestedFitNumbers, rounds: int, launches_per_arm: int) -> bool:
    """The launch term of the log-ratio variance (sd_launch^2 / launches) against the block term
    (sd_block^2 / rounds): adding a launch shrinks the first, adding rounds the second."""
    sd_launch, sd_block = nested.sd_launch, nested.sd_block
    if sd_launch is None or sd_block is None:  # finite or None (rule_numbers)
        return False
    return sd_launch**2 / launches_per_arm > sd_block**2 / max(1, rounds)
