"""What a point of a bisection or a sweep runs: the rules it is judged by, and which trials run once
and which at every point.

Which trials a rule needs (by kind):
- `kernel_count`: a profiled pass of each variant it names; one that expects zero also the baseline's
  (the rule is INCONCLUSIVE unless the baseline shows the pattern: the analysis could be blind);
- `output_identity`: a profiled pass of both arms: they send the same prompts, and a run without
  timed trials compares those (`sglang_spec_harness.verdict.rules.output_source`). One server launch per point
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
from sglang_spec_harness.scenario import Check, KernelCountCheck, Scenario
from sglang_spec_harness.verdict.rules import expects_absence
from sglang_spec_harness.vocabulary import RuleKind

Need = tuple[str, TrialKind]  # (arm, kind)
# Rules judged without timed trials: exact evidence, no retries, the default set.
EXACT_KINDS = (RuleKind.KERNEL_COUNT, RuleKind.OUTPUT_IDENTITY)
# The kinds of trials a comparison rule reads, by rule kind (default: the timed ones).
_TRIAL_KINDS: dict[str, tuple[TrialKind, ...]] = {
    RuleKind.OUTPUT_IDENTITY: ("profiled",),
    RuleKind.EXPLAINED_GAIN: ("timed", "profiled"),
}


def rule_needs(scenario: Scenario, check: Check) -> set[Need]:
    """The (arm, kind) pairs of trials the rule reads."""
    if isinstance(check, KernelCountCheck):
        needs: set[Need] = {(variant, "profiled") for variant in check.variants}
        if expects_absence(check) and "baseline" in scenario.variants:
            needs.add(("baseline", "profiled"))
        return needs
    arms = (check.baseline, check.candidate)
    kinds = _TRIAL_KINDS.get(check.kind, ("timed",))
    return {(arm, kind) for arm in arms for kind in kinds}


def judged_arms(check: Check) -> set[str]:
    """The arms whose trials decide the rule's PASS or FAIL (a kernel-count rule's baseline control
    can only make it INCONCLUSIVE)."""
    if isinstance(check, KernelCountCheck):
        return set(check.variants)
    return {check.baseline, check.candidate}


@dataclass(frozen=True)
class PointPlan:
    """Which trials run once (the arms that do not change) and which at every point."""

    rules: list[Check]
    once: frozenset[Need]  # run before the first point, adopted by every point's run directory
    each_point: frozenset[Need]
    statistical: bool  # a rule needs timed trials: full A/B at each point (bisect retries INCONCLUSIVE)

    def describe(self) -> str:
        def fmt(needs: frozenset[Need]) -> str:
            return ", ".join(f"{arm} {kind}" for arm, kind in sorted(needs)) or "nothing"
        return f"once: {fmt(self.once)}; each point: {fmt(self.each_point)}"


def choose_rules(scenario: Scenario, variant: str, names: list[str], where: str) -> list[Check]:
    """The rules named (in the scenario's order), or by default every exact rule that judges the variant."""
    by_name = {check.name: check for check in scenario.checks}
    for name in names:
        if name not in by_name:
            raise HarnessInputError(f"--rule {name}: no such rule in {where} (rules: {', '.join(by_name) or 'none'})")
    if names:
        chosen = [check for check in scenario.checks if check.name in names]
        for check in chosen:
            if variant not in judged_arms(check):
                raise HarnessInputError(f"--rule {check.name}: does not judge variant {variant!r}, so it would give "
                                        "the same verdict at every commit")
        return chosen
    chosen = [check for check in scenario.checks if check.kind in EXACT_KINDS and variant in judged_arms(check)]
    if not chosen:
        raise HarnessInputError(f"{where}: no kernel_count or output_identity rule judges variant {variant!r}; "
                                "name the rules to bisect on with --rule")
    return chosen


def point_plan(scenario: Scenario, variant: str, rules: list[Check], where: str) -> PointPlan:
    needs: set[Need] = set().union(*(rule_needs(scenario, check) for check in rules))
    statistical = any(kind == "timed" for _, kind in needs)
    mine = frozenset(need for need in needs if need[0] == variant)
    once = frozenset() if statistical else frozenset(needs) - mine
    each = frozenset(needs) if statistical else mine
    if not make_plan(scenario, select=each).trials:
        raise HarnessInputError(f"{where}: trials: the plan has no {' or '.join(sorted({k for _, k in each}))} trials "
                                f"of variant {variant!r} (trials.profiled: {scenario.trials.profiled}), which the rules need")
    return PointPlan(rules=rules, once=once, each_point=each, statistical=statistical)


def fixed_design(scenario: Scenario, rules: list[Check], command: str, *, timed: bool = False) -> tuple[Scenario, str | None]:
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
    if not (timed or any(kind == "timed" for check in rules for _, kind in rule_needs(scenario, check))):
        return fixed, None
    return fixed, (f"trials.budget (an adaptive design) set aside: harness {command} runs each point in parts, so its "
                   f"timed trials follow the scenario's fixed design: {spec.repetitions} rounds, "
                   f"{spec.launches_per_arm} launch(es) per arm")
