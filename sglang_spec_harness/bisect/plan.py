"""What a bisection step runs, and the scenario it runs under.

Which trials a rule needs (by kind):
- `kernel_count`: a profiled pass of each variant it names; one that expects zero also the baseline's
  (the rule is INCONCLUSIVE unless the baseline shows the pattern: the analysis could be blind);
- `output_identity`: a profiled pass of both arms: they send the same prompts, and a run without
  timed trials compares those (`sglang_spec_harness.verdict.evidence.output_source`). One server launch per step
  then serves both the kernel counts and the outputs, where a timed part would add launches;
- `accept_length`, `tpot_gain`: timed trials of both arms; `explained_gain`: timed and profiled.
Rules that need only profiled passes are exact (counts, token ids): the arms that do not change
between commits run once, and each step runs only the bisected variant. A rule that needs timed
trials is a statistical comparison: both arms run at every step, interleaved in time as in any run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.run.plan import TrialKind, make_plan
from sglang_spec_harness.scenario import KernelCountRule, Rule, Scenario
from sglang_spec_harness.verdict.rules.kernel_count import expects_absence
from sglang_spec_harness.vocabulary import RuleKind

Need = tuple[str, TrialKind]  # (arm, kind)
# Rules judged without timed trials: exact evidence, no retries, the default set.
EXACT_KINDS = (RuleKind.KERNEL_COUNT, RuleKind.OUTPUT_IDENTITY)
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
    arms = (rule.baseline, rule.candidate)
    kinds = _TRIAL_KINDS.get(rule.kind, ("timed",))
    return {(arm, kind) for arm in arms for kind in kinds}


def judged_arms(rule: Rule) -> set[str]:
    """The arms whose trials decide the rule's PASS or FAIL (a kernel-count rule's baseline control
    can only make it INCONCLUSIVE)."""
    if isinstance(rule, KernelCountRule):
        return set(rule.variants)
    return {rule.baseline, rule.candidate}


@dataclass(frozen=True)
class StepPlan:
    """Which trials run once (the arms that do not change) and which at every commit."""

    rules: list[Rule]
    once: frozenset[Need]  # run before the first step, adopted by every step's run directory
    each_step: frozenset[Need]
    statistical: bool  # a rule needs timed trials: full A/B at each step, INCONCLUSIVE retried

    def describe(self) -> str:
        def fmt(needs: frozenset[Need]) -> str:
            return ", ".join(f"{arm} {kind}" for arm, kind in sorted(needs)) or "nothing"
        return f"once: {fmt(self.once)}; each step: {fmt(self.each_step)}"


def choose_rules(scenario: Scenario, variant: str, names: list[str], where: str) -> list[Rule]:
    """The rules named (in the scenario's order), or by default every exact rule that judges the variant."""
    by_name = {rule.name: rule for rule in scenario.rules}
    for name in names:
        if name not in by_name:
            raise HarnessInputError(f"--rule {name}: no such rule in {where} (rules: {', '.join(by_name) or 'none'})")
    if names:
        chosen = [rule for rule in scenario.rules if rule.name in names]
        for rule in chosen:
            if variant not in judged_arms(rule):
                raise HarnessInputError(f"--rule {rule.name}: does not judge variant {variant!r}, so it would give "
                                        "the same verdict at every commit")
        return chosen
    chosen = [rule for rule in scenario.rules if rule.kind in EXACT_KINDS and variant in judged_arms(rule)]
    if not chosen:
        raise HarnessInputError(f"{where}: no kernel_count or output_identity rule judges variant {variant!r}; "
                                "name the rules to bisect on with --rule")
    return chosen


def step_plan(scenario: Scenario, variant: str, rules: list[Rule], where: str) -> StepPlan:
    needs: set[Need] = set().union(*(rule_needs(scenario, rule) for rule in rules))
    statistical = any(kind == "timed" for _, kind in needs)
    mine = frozenset(need for need in needs if need[0] == variant)
    once = frozenset() if statistical else frozenset(needs) - mine
    each = frozenset(needs) if statistical else mine
    if not make_plan(scenario, select=each).trials:
        raise HarnessInputError(f"{where}: trials: the plan has no {' or '.join(sorted({k for _, k in each}))} trials "
                                f"of variant {variant!r} (trials.profiled: {scenario.trials.profiled}), which the rules need")
    return StepPlan(rules=rules, once=once, each_step=each, statistical=statistical)


def _absolute(entry: str) -> Path:
    return Path(os.path.realpath(Path(entry).expanduser()))


def paths_inside(scenario: Scenario, variant: str, repo_root: Path) -> list[str]:
    """The variant's `pythonpath` entries that lie inside the repository."""
    return [entry for entry in scenario.variants[variant].pythonpath if _absolute(entry).is_relative_to(repo_root)]


def at_commit(scenario: Scenario, variant: str, repo_root: Path, worktree: Path, label: str) -> Scenario:
    """The scenario with the variant's `pythonpath` entries inside the repository moved into the
    worktree (its `patches:` are imported from there too), its description naming the commit."""
    spec = scenario.variants[variant]
    moved = [str(worktree / _absolute(entry).relative_to(repo_root)) if _absolute(entry).is_relative_to(repo_root)
             else entry for entry in spec.pythonpath]
    description = f"{spec.description} [{label}]".strip()
    variants = {**scenario.variants, variant: spec.model_copy(update={"pythonpath": moved, "description": description})}
    return scenario.model_copy(update={"variants": variants})
