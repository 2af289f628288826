"""What a point of a bisection or a sweep runs: the rules it is judged by, and which trials run once
and which at every point.

Which trials a rule needs (by kind):
- `kernel_count`: a profiled pass of each variant it names; one that expects zero also the baseline's
  (the rule is INCONCLUSIVE unless the baseline shows the pattern: the analysis could be blind);
- `output_identity`: a profiled pass of both arms: they send the same prompts, and a run without
  timed trials compares those (`sglang_spec_harness.verdict.evidence.output_source`). One server launch per point
  then serves both the kernel counts and the outputs, where a timed part would add launches;
- `accept_length`, `tpot_gain`: timed trials of both arms; `explained_gain`: timed and profiled.
Rules that need only profiled passes are exact (counts, token ids): the arms that do not change
between points run once, and each point runs only the variant that moves. A rule that needs timed
trials is a statistical comparison: both arms run at every point, interleaved in time as in any run.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.run.plan import TrialKind, make_plan
from sglang_spec_harness.scenario import KernelCountRule, OutputValidityRule, Rule, Scenario
from sglang_spec_harness.verdict.rules.kernel_count import expects_absence
from sglang_spec_harness.vocabulary import RuleKind

Need = tuple[str, TrialKind]  # (arm, kind)
# Rules judged without timed trials: exact evidence, no retries, the default set.
EXACT_KINDS = (RuleKind.KERNEL_COUNT, RuleKind.OUTPUT_IDENTITY, RuleKind.OUTPUT_VALIDITY)
# The kinds of trials a comparison rule reads, by rule kind (default: the timed ones).
_TRIAL_KINDS: dict[str, tuple[TrialKind, ...]] = {
    RuleKind.OUTPUT_IDENTITY: ("profiled",),
    RuleKind.EXPLAINED_GAIN: ("timed", "profiled"),
}


def rule_needs(scenario: Scenario, rule: Rule) -> set[Need]:
    """The (arm, kind) pairs of trials the rule reads."""
    if isinstance(rule, KernelCountRule):
        needs: set[Need] = {(variant, "profiled") for variant in rule.variants}
        if expects_absence(rule) and "baseline" in scenario.variants:
            needs.add(("baseline", "profiled"))
        return needs
    if isinstance(rule, OutputValidityRule):  # each arm on its own: its profiled pass's outputs
        return {(arm, "profiled") for arm in rule.variants or scenario.variants}
    arms = (rule.baseline, rule.candidate)
    kinds = _TRIAL_KINDS.get(rule.kind, ("timed",))
    return {(arm, kind) for arm in arms for kind in kinds}


def judged_arms(scenario: Scenario, rule: Rule) -> set[str]:
    """The arms whose trials decide the rule's PASS or FAIL (a kernel-count rule's baseline control
    can only make it INCONCLUSIVE)."""
    if isinstance(rule, KernelCountRule):
        return set(rule.variants)
    if isinstance(rule, OutputValidityRule):
        return set(rule.variants or scenario.variants)
    return {rule.baseline, rule.candidate}


@dataclass(frozen=True)
class PointPlan:
    """Which trials run once (the arms that do not change) and which at every point."""

    rules: list[Rule]
    once: frozenset[Need]  # run before the first point, adopted by every point's run directory
    each_point: frozenset[Need]
    statistical: bool  # a rule needs timed trials: full A/B at each point (bisect retries INCONCLUSIVE)

    def describe(self) -> str:
        def fmt(needs: frozenset[Need]) -> str:
            return ", ".join(f"{arm} {kind}" for arm, kind in sorted(needs)) or "nothing"
        return f"once: {fmt(self.once)}; each point: {fmt(self.each_point)}"


def choose_rules(scenario: Scenario, variant: str, names: list[str], where: str) -> list[Rule]:
    """The rules named (in the scenario's order), or by default every exact rule that judges the variant."""
    by_name = {rule.name: rule for rule in scenario.rules}
    for name in names:
        if name not in by_name:
            raise HarnessInputError(f"--rule {name}: no such rule in {where} (rules: {', '.join(by_name) or 'none'})")
    if names:
        chosen = [rule for rule in scenario.rules if rule.name in names]
        for rule in chosen:
            if variant not in judged_arms(scenario, rule):
                raise HarnessInputError(f"--rule {rule.name}: does not judge variant {variant!r}, so it would give "
                                        "the same verdict at every commit")
        return chosen
    chosen = [rule for rule in scenario.rules if rule.kind in EXACT_KINDS and variant in judged_arms(scenario, rule)]
    if not chosen:
        raise HarnessInputError(f"{where}: no kernel_count or output_identity rule judges variant {variant!r}; "
                                "name the rules to bisect on with --rule")
    return chosen


def point_plan(scenario: Scenario, variant: str, rules: list[Rule], where: str) -> PointPlan:
    needs: set[Need] = set().union(*(rule_needs(scenario, rule) for rule in rules))
    statistical = any(kind == "timed" for _, kind in needs)
    mine = frozenset(need for need in needs if need[0] == variant)
    once = frozenset() if statistical else frozenset(needs) - mine
    each = frozenset(needs) if statistical else mine
    if not make_plan(scenario, select=each).trials:
        raise HarnessInputError(f"{where}: trials: the plan has no {' or '.join(sorted({k for _, k in each}))} trials "
                                f"of variant {variant!r} (trials.profiled: {scenario.trials.profiled}), which the rules need")
    return PointPlan(rules=rules, once=once, each_point=each, statistical=statistical)


def fixed_design(scenario: Scenario, rules: list[Rule], command: str, *, timed: bool = False) -> tuple[Scenario, str | None]:
    """The scenario without its adaptive design (`trials.budget`), and a one-line note when that
    matters. bisect and sweep run each point in parts (the baseline once, the variant per point),
    which an adaptive design cannot follow: its stages depend on the looks before them. Exact rules
    need no timing design (the profiled passes are the same); where timed trials run (a rule that
    reads them, or `timed`: a sweep's TPOT series), they follow the scenario's fixed design, its
    first stage: `repetitions` rounds over `launches` per arm."""
    spec = scenario.trials
    if spec.budget is None:
        return scenario, None
    fixed = scenario.model_copy(update={"trials": spec.model_copy(update={"budget": None})})
    if not (timed or any(kind == "timed" for rule in rules for _, kind in rule_needs(scenario, rule))):
        return fixed, None
    return fixed, (f"trials.budget (an adaptive design) set aside: harness {command} runs each point in parts, so its "
                   f"timed trials follow the scenario's fixed design: {spec.repetitions} rounds, "
                   f"{spec.launches_per_arm} launch(es) per arm")
